//! Account rows: an account exists once one of its keys has written
//! something. The VM keeps at most `maxAccounts` of them.

use agentos_schema::{DbError, Statement};

use super::decode::count;
use super::{bound, guarded, now_ms, nth, ControlStore, Guarded, ACCOUNTS};

impl ControlStore {
    pub async fn account_exists(&self, account: &str) -> Result<bool, DbError> {
        let rows = self
            .db
            .query(
                "SELECT 1 FROM agentos_core_accounts WHERE account_id = ?1",
                vec![account.into()],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    /// Adds the account unless the VM holds `max` already. `Refused` also
    /// when it exists (added meanwhile); the caller tells which.
    pub async fn insert_account(&self, account: &str, max: u64) -> Result<Guarded<()>, DbError> {
        let statements = vec![
            Statement::new(
                "INSERT INTO agentos_core_accounts (account_id, created_at_ms, updated_at_ms) \
                 SELECT ?1, ?2, ?2 WHERE (SELECT COUNT(*) FROM agentos_core_accounts) < ?3 \
                 ON CONFLICT (account_id) DO NOTHING",
                vec![account.into(), now_ms().into(), bound(max)],
            )
            .expect_changes(1),
            Statement::new("SELECT COUNT(*) FROM agentos_core_accounts", vec![]),
        ];
        let Some(mut results) = guarded(&self.db, statements, 0).await? else {
            return Ok(Guarded::Refused);
        };
        let count = count(nth(&mut results, 1, ACCOUNTS)?, ACCOUNTS)?;
        Ok(Guarded::Done { value: (), count })
    }
}
