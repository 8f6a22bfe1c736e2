//! Secret rows: sealed values (see `control::secrets` for the sealing),
//! their key id and plaintext metadata. The store never sees a plaintext
//! value or a key.

use agentos_schema::{DbError, SqlValue, Statement};

use super::decode::{count, Row};
use super::{bound, guarded, now_ms, nth, ControlStore, Guarded, SECRETS};
use crate::control::types::RedactedSecret;

const REDACTED_COLUMNS: &str = "secret_id, name, metadata, created_at_ms, updated_at_ms";
const REDACTED_WIDTH: usize = 5;
const STORED_COLUMNS: &str = "secret_id, account_id, name, key_id, ciphertext, metadata, \
    created_at_ms, updated_at_ms";
const STORED_WIDTH: usize = 8;

/// A secret row as stored: the sealed value and the id of its key.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredSecret {
    pub secret_id: String,
    pub account_id: String,
    pub name: String,
    pub key_id: String,
    pub ciphertext: Vec<u8>,
    pub metadata: Option<Vec<u8>>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl std::fmt::Debug for StoredSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredSecret")
            .field("secret_id", &self.secret_id)
            .field("account_id", &self.account_id)
            .field("name", &self.name)
            .field("key_id", &self.key_id)
            .field("ciphertext_bytes", &self.ciphertext.len())
            .finish_non_exhaustive()
    }
}

fn decode_redacted(mut r: Row) -> Result<RedactedSecret, DbError> {
    Ok(RedactedSecret {
        id: r.text(0)?,
        name: r.text(1)?,
        metadata: r.opt_blob(2)?,
        created_at_ms: r.int(3)?,
        updated_at_ms: r.int(4)?,
    })
}

fn decode_stored(mut r: Row) -> Result<StoredSecret, DbError> {
    Ok(StoredSecret {
        secret_id: r.text(0)?,
        account_id: r.text(1)?,
        name: r.text(2)?,
        key_id: r.text(3)?,
        ciphertext: r.blob(4)?,
        metadata: r.opt_blob(5)?,
        created_at_ms: r.int(6)?,
        updated_at_ms: r.int(7)?,
    })
}

/// A re-sealed value for [`ControlStore::reseal_all`]: the row, the
/// ciphertext it was read with (compare-and-set), and its new seal.
pub(crate) struct Reseal {
    pub secret_id: String,
    pub old_ciphertext: Vec<u8>,
    pub new_ciphertext: Vec<u8>,
}

impl ControlStore {
    /// Creates or replaces the named secret (keeping its id and creation
    /// time). A new name needs room under `max`.
    #[allow(clippy::too_many_arguments)]
    pub async fn upsert_secret(
        &self,
        account: &str,
        new_id: &str,
        name: &str,
        key_id: &str,
        ciphertext: Vec<u8>,
        metadata: Option<Vec<u8>>,
        max: u64,
    ) -> Result<Guarded<RedactedSecret>, DbError> {
        let statements = vec![
            Statement::new(
                "INSERT INTO agentos_core_secrets (secret_id, account_id, name, key_id, \
                   ciphertext, metadata, created_at_ms, updated_at_ms) \
                 SELECT ?3, ?1, ?2, ?4, ?5, ?6, ?7, ?7 \
                 WHERE (SELECT COUNT(*) FROM agentos_core_secrets WHERE account_id = ?1) < ?8 \
                    OR EXISTS (SELECT 1 FROM agentos_core_secrets \
                               WHERE account_id = ?1 AND name = ?2) \
                 ON CONFLICT (account_id, name) DO UPDATE SET key_id = excluded.key_id, \
                   ciphertext = excluded.ciphertext, metadata = excluded.metadata, \
                   updated_at_ms = max(updated_at_ms, excluded.updated_at_ms)",
                vec![
                    account.into(),
                    name.into(),
                    new_id.into(),
                    key_id.into(),
                    SqlValue::Blob(ciphertext),
                    metadata.map(SqlValue::Blob).unwrap_or(SqlValue::Null),
                    now_ms().into(),
                    bound(max),
                ],
            )
            .expect_changes(1),
            Statement::new(
                format!(
                    "SELECT {REDACTED_COLUMNS} FROM agentos_core_secrets \
                     WHERE account_id = ?1 AND name = ?2"
                ),
                vec![account.into(), name.into()],
            ),
            Statement::new(
                "SELECT COUNT(*) FROM agentos_core_secrets WHERE account_id = ?1",
                vec![account.into()],
            ),
        ];
        let Some(mut results) = guarded(&self.db, statements, 0).await? else {
            return Ok(Guarded::Refused);
        };
        let value = decode_redacted(Row::first(
            nth(&mut results, 1, SECRETS)?,
            SECRETS,
            REDACTED_WIDTH,
        )?)?;
        let count = count(nth(&mut results, 2, SECRETS)?, SECRETS)?;
        Ok(Guarded::Done { value, count })
    }

    pub async fn get_secret(
        &self,
        account: &str,
        name: &str,
    ) -> Result<Option<StoredSecret>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {STORED_COLUMNS} FROM agentos_core_secrets \
                     WHERE account_id = ?1 AND name = ?2"
                ),
                vec![account.into(), name.into()],
            )
            .await?;
        Row::optional(rows, SECRETS, STORED_WIDTH)?
            .map(decode_stored)
            .transpose()
    }

    pub async fn list_secrets(&self, account: &str) -> Result<Vec<RedactedSecret>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {REDACTED_COLUMNS} FROM agentos_core_secrets WHERE account_id = ?1 \
                     ORDER BY name"
                ),
                vec![account.into()],
            )
            .await?;
        Row::all(rows, SECRETS, REDACTED_WIDTH, decode_redacted)
    }

    /// `false` when there was no such secret.
    pub async fn delete_secret(&self, account: &str, name: &str) -> Result<bool, DbError> {
        let rows = self
            .db
            .transaction(vec![Statement::new(
                "DELETE FROM agentos_core_secrets WHERE account_id = ?1 AND name = ?2",
                vec![account.into(), name.into()],
            )])
            .await?;
        Ok(rows.first().map(|r| r.changes) == Some(1))
    }

    /// Replaces a secret's metadata, its value untouched; `None` when
    /// there is no such secret.
    pub async fn set_secret_metadata(
        &self,
        account: &str,
        name: &str,
        metadata: Vec<u8>,
    ) -> Result<Option<RedactedSecret>, DbError> {
        let mut results = self
            .db
            .transaction(vec![
                Statement::new(
                    "UPDATE agentos_core_secrets SET metadata = ?3, \
                       updated_at_ms = max(updated_at_ms, ?4) \
                     WHERE account_id = ?1 AND name = ?2",
                    vec![
                        account.into(),
                        name.into(),
                        SqlValue::Blob(metadata),
                        now_ms().into(),
                    ],
                ),
                Statement::new(
                    format!(
                        "SELECT {REDACTED_COLUMNS} FROM agentos_core_secrets \
                         WHERE account_id = ?1 AND name = ?2"
                    ),
                    vec![account.into(), name.into()],
                ),
            ])
            .await?;
        Row::optional(nth(&mut results, 1, SECRETS)?, SECRETS, REDACTED_WIDTH)?
            .map(decode_redacted)
            .transpose()
    }

    /// Every secret of every account (what a key rotation re-seals).
    pub async fn all_secrets(&self) -> Result<Vec<StoredSecret>, DbError> {
        let rows = self
            .db
            .query(
                &format!("SELECT {STORED_COLUMNS} FROM agentos_core_secrets ORDER BY secret_id"),
                vec![],
            )
            .await?;
        Row::all(rows, SECRETS, STORED_WIDTH, decode_stored)
    }

    /// Replaces every listed ciphertext, each only if it is still the one
    /// that was read, and then requires that no row is left under another
    /// key than `key_id`: one transaction, so a rotation lands whole or
    /// not at all.
    pub(crate) async fn reseal_all(
        &self,
        key_id: &str,
        reseals: Vec<Reseal>,
    ) -> Result<(), DbError> {
        let mut statements: Vec<Statement> = reseals
            .into_iter()
            .map(|r| {
                Statement::new(
                    "UPDATE agentos_core_secrets SET key_id = ?2, ciphertext = ?3 \
                     WHERE secret_id = ?1 AND ciphertext = ?4",
                    vec![
                        r.secret_id.into(),
                        key_id.into(),
                        SqlValue::Blob(r.new_ciphertext),
                        SqlValue::Blob(r.old_ciphertext),
                    ],
                )
                .expect_changes(1)
            })
            .collect();
        statements.push(
            Statement::new(
                "UPDATE agentos_core_secrets SET key_id = key_id WHERE key_id <> ?1",
                vec![key_id.into()],
            )
            .expect_changes(0),
        );
        self.db.transaction(statements).await?;
        Ok(())
    }

    pub async fn secret_count(&self, account: &str) -> Result<u64, DbError> {
        let rows = self
            .db
            .query(
                "SELECT COUNT(*) FROM agentos_core_secrets WHERE account_id = ?1",
                vec![account.into()],
            )
            .await?;
        count(rows, SECRETS)
    }
}
