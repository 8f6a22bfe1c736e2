//! Idempotency records of signed actions: the request's hash and the
//! response bytes, keyed by (account, action, client id). At most
//! `maxIdempotencyRecords` are kept; each insert drops the oldest beyond
//! the bound in the same transaction (one range delete on `record_id`).

use agentos_schema::{DbError, SqlValue, Statement};

use super::decode::Row;
use super::{bound, ControlStore, IDEMPOTENCY};
use crate::control::types::IdempotencyKey;

/// A stored record: the request hash and the response it answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyRecord {
    pub request_hash: Vec<u8>,
    pub response: Vec<u8>,
}

/// The statements that record `response` for `key` and prune beyond
/// `max`. The insert fails with a constraint error when the key is
/// recorded already.
pub(crate) fn record_statements(
    key: &IdempotencyKey,
    response: &[u8],
    now_ms: i64,
    max: u64,
) -> Vec<Statement> {
    vec![
        Statement::new(
            "INSERT INTO agentos_core_action_idempotency \
               (account_id, action, client_id, request_hash, response, created_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            vec![
                key.account_id.as_str().into(),
                key.action.as_str().into(),
                key.client_id.as_str().into(),
                SqlValue::Blob(key.request_hash.clone()),
                SqlValue::Blob(response.to_vec()),
                now_ms.into(),
            ],
        )
        .expect_changes(1),
        Statement::new(
            "DELETE FROM agentos_core_action_idempotency WHERE record_id <= \
               (SELECT max(record_id) FROM agentos_core_action_idempotency) - ?1",
            vec![bound(max)],
        ),
    ]
}

impl ControlStore {
    pub async fn idempotency_record(
        &self,
        account: &str,
        action: &str,
        client_id: &str,
    ) -> Result<Option<IdempotencyRecord>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT request_hash, response FROM agentos_core_action_idempotency \
                 WHERE account_id = ?1 AND action = ?2 AND client_id = ?3",
                vec![account.into(), action.into(), client_id.into()],
            )
            .await?;
        Row::optional(rows, IDEMPOTENCY, 2)?
            .map(|mut r| {
                Ok(IdempotencyRecord {
                    request_hash: r.blob(0)?,
                    response: r.blob(1)?,
                })
            })
            .transpose()
    }

    pub async fn record_idempotent(
        &self,
        key: &IdempotencyKey,
        response: &[u8],
        max: u64,
    ) -> Result<(), DbError> {
        self.db
            .transaction(record_statements(key, response, super::now_ms(), max))
            .await?;
        Ok(())
    }

    pub async fn idempotency_record_count(&self) -> Result<u64, DbError> {
        let rows = self
            .db
            .query(
                "SELECT COUNT(*) FROM agentos_core_action_idempotency",
                vec![],
            )
            .await?;
        super::decode::count(rows, IDEMPOTENCY)
    }
}
