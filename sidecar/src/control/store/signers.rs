//! Signer rows: which keys may act for an account, with what role, and on
//! what evidence (a stored capability). A revoked row keeps refusing its
//! signer, whatever capability it presents, until the account authorizes
//! it again.

use agentos_schema::{DbError, SqlValue, Statement};

use super::decode::{count, Row};
use super::{bound, guarded, now_ms, nth, ControlStore, Guarded, SIGNERS};
use crate::control::types::{Delegation, SignerRecord, SignerRole};

const SIGNER_COLUMNS: &str = "account_id, signer, role, capability_cid, capability_blob, \
    created_at_ms, updated_at_ms, revoked_at_ms";
const SIGNER_WIDTH: usize = 8;

/// Admits a new row only while the account has fewer than the limit;
/// an existing row is always updated (the ON CONFLICT branch).
const ROOM_OR_EXISTS: &str = "WHERE (SELECT COUNT(*) FROM agentos_core_signers \
        WHERE account_id = ?1) < ?LIMIT \
     OR EXISTS (SELECT 1 FROM agentos_core_signers WHERE account_id = ?1 AND signer = ?2)";

fn decode_signer(mut r: Row) -> Result<SignerRecord, DbError> {
    Ok(SignerRecord {
        account_id: r.text(0)?,
        signer: r.text(1)?,
        role: r.opt_parse(2, SignerRole::parse)?,
        capability_cid: r.opt_text(3)?,
        capability_blob: r.opt_blob(4)?,
        created_at_ms: r.int(5)?,
        updated_at_ms: r.int(6)?,
        revoked_at_ms: r.opt_int(7)?,
    })
}

fn room_or_exists(limit_param: u32) -> String {
    ROOM_OR_EXISTS.replace("?LIMIT", &format!("?{limit_param}"))
}

impl ControlStore {
    pub async fn get_signer(
        &self,
        account: &str,
        signer: &str,
    ) -> Result<Option<SignerRecord>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {SIGNER_COLUMNS} FROM agentos_core_signers \
                     WHERE account_id = ?1 AND signer = ?2"
                ),
                vec![account.into(), signer.into()],
            )
            .await?;
        Row::optional(rows, SIGNERS, SIGNER_WIDTH)?
            .map(decode_signer)
            .transpose()
    }

    pub async fn list_signers(&self, account: &str) -> Result<Vec<SignerRecord>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {SIGNER_COLUMNS} FROM agentos_core_signers WHERE account_id = ?1 \
                     ORDER BY created_at_ms, signer"
                ),
                vec![account.into()],
            )
            .await?;
        Row::all(rows, SIGNERS, SIGNER_WIDTH, decode_signer)
    }

    /// The active (unrevoked) row that stored this capability, if any.
    pub async fn signer_by_capability(&self, cid: &str) -> Result<Option<SignerRecord>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {SIGNER_COLUMNS} FROM agentos_core_signers \
                     WHERE capability_cid = ?1 AND revoked_at_ms IS NULL \
                     ORDER BY account_id, signer LIMIT 1"
                ),
                vec![cid.into()],
            )
            .await?;
        Row::optional(rows, SIGNERS, SIGNER_WIDTH)?
            .map(decode_signer)
            .transpose()
    }

    /// The account's own act: the signer gets `role` and any revocation
    /// is lifted.
    pub async fn authorize_signer(
        &self,
        account: &str,
        signer: &str,
        role: SignerRole,
        max: u64,
    ) -> Result<Guarded<SignerRecord>, DbError> {
        let insert = Statement::new(
            format!(
                "INSERT INTO agentos_core_signers \
                   (account_id, signer, role, created_at_ms, updated_at_ms) \
                 SELECT ?1, ?2, ?3, ?4, ?4 {} \
                 ON CONFLICT (account_id, signer) DO UPDATE SET role = excluded.role, \
                   revoked_at_ms = NULL, \
                   updated_at_ms = max(updated_at_ms, excluded.updated_at_ms)",
                room_or_exists(5)
            ),
            vec![
                account.into(),
                signer.into(),
                role.as_str().into(),
                now_ms().into(),
                bound(max),
            ],
        );
        self.write_signer(account, signer, insert).await
    }

    /// Remembers a verified capability. An existing row takes the new role
    /// and capability unless it is revoked: then nothing changes
    /// (`Refused`).
    pub async fn store_delegation(
        &self,
        account: &str,
        signer: &str,
        delegation: &Delegation,
        max: u64,
    ) -> Result<Guarded<SignerRecord>, DbError> {
        let insert = Statement::new(
            format!(
                "INSERT INTO agentos_core_signers (account_id, signer, role, capability_cid, \
                   capability_blob, created_at_ms, updated_at_ms) \
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?6 {} \
                 ON CONFLICT (account_id, signer) DO UPDATE SET role = excluded.role, \
                   capability_cid = excluded.capability_cid, \
                   capability_blob = excluded.capability_blob, \
                   updated_at_ms = max(updated_at_ms, excluded.updated_at_ms) \
                 WHERE revoked_at_ms IS NULL",
                room_or_exists(7)
            ),
            vec![
                account.into(),
                signer.into(),
                delegation.role.as_str().into(),
                delegation.capability_cid.as_str().into(),
                SqlValue::Blob(delegation.capability_blob.clone()),
                now_ms().into(),
                bound(max),
            ],
        );
        self.write_signer(account, signer, insert).await
    }

    /// Revokes the signer, keeping (or making) its row so that no
    /// capability re-admits it.
    pub async fn revoke_signer(
        &self,
        account: &str,
        signer: &str,
        max: u64,
    ) -> Result<Guarded<SignerRecord>, DbError> {
        let insert = Statement::new(
            format!(
                "INSERT INTO agentos_core_signers \
                   (account_id, signer, role, created_at_ms, updated_at_ms, revoked_at_ms) \
                 SELECT ?1, ?2, NULL, ?3, ?3, ?3 {} \
                 ON CONFLICT (account_id, signer) DO UPDATE SET \
                   revoked_at_ms = COALESCE(revoked_at_ms, excluded.revoked_at_ms), \
                   updated_at_ms = max(updated_at_ms, excluded.updated_at_ms)",
                room_or_exists(4)
            ),
            vec![account.into(), signer.into(), now_ms().into(), bound(max)],
        );
        self.write_signer(account, signer, insert).await
    }

    async fn write_signer(
        &self,
        account: &str,
        signer: &str,
        insert: Statement,
    ) -> Result<Guarded<SignerRecord>, DbError> {
        let statements = vec![
            insert.expect_changes(1),
            Statement::new(
                format!(
                    "SELECT {SIGNER_COLUMNS} FROM agentos_core_signers \
                     WHERE account_id = ?1 AND signer = ?2"
                ),
                vec![account.into(), signer.into()],
            ),
            Statement::new(
                "SELECT COUNT(*) FROM agentos_core_signers WHERE account_id = ?1",
                vec![account.into()],
            ),
        ];
        let Some(mut results) = guarded(&self.db, statements, 0).await? else {
            return Ok(Guarded::Refused);
        };
        let value = decode_signer(Row::first(
            nth(&mut results, 1, SIGNERS)?,
            SIGNERS,
            SIGNER_WIDTH,
        )?)?;
        let count = count(nth(&mut results, 2, SIGNERS)?, SIGNERS)?;
        Ok(Guarded::Done { value, count })
    }

    pub async fn signer_count(&self, account: &str) -> Result<u64, DbError> {
        let rows = self
            .db
            .query(
                "SELECT COUNT(*) FROM agentos_core_signers WHERE account_id = ?1",
                vec![account.into()],
            )
            .await?;
        count(rows, SIGNERS)
    }
}
