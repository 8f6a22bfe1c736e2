//! All SQL of the control plane, one file per table group: `accounts.rs`,
//! `signers.rs`, `agents.rs`, `collaborators.rs`, `providers.rs` (with the
//! secret names each provider refers to), `secrets.rs`, `session_links.rs`,
//! `idempotency.rs` and `tool_documents.rs` (agents' `~/tools`, used by the
//! Space's `ToolDocuments`); `decode.rs` reads rows back.
//!
//! A bounded insert is one `INSERT … SELECT … WHERE (count) < limit`
//! statement expected to change one row, so the check and the write are
//! the same statement of the same transaction. When it changes nothing the
//! store answers [`Guarded::Refused`] and the service finds out why (full, or
//! a missing parent) with reads; either way nothing was written.

mod accounts;
mod agents;
mod collaborators;
mod decode;
mod idempotency;
mod providers;
mod secrets;
mod session_links;
mod signers;
mod tool_documents;

pub use idempotency::IdempotencyRecord;
pub use secrets::StoredSecret;
pub use session_links::LinkRefusal;
pub use tool_documents::{StoredTool, StoredToolKind, ToolRow};

pub(crate) use agents::{insert_agent_statements, inserted_agent};
pub(crate) use idempotency::record_statements;
pub(crate) use secrets::Reseal;
pub(crate) use session_links::{child_link_statement, link_statement};

use agentos_schema::{DbError, Rows, SharedDatabase};

pub(crate) const ACCOUNTS: &str = "agentos_core_accounts";
pub(crate) const SIGNERS: &str = "agentos_core_signers";
pub(crate) const AGENTS: &str = "agentos_core_agents";
pub(crate) const COLLABORATORS: &str = "agentos_core_agent_collaborators";
pub(crate) const PROVIDERS: &str = "agentos_core_model_providers";
pub(crate) const SECRET_REFS: &str = "agentos_core_provider_secret_refs";
pub(crate) const SECRETS: &str = "agentos_core_secrets";
pub(crate) const SESSION_LINKS: &str = "agentos_core_agent_sessions";
pub(crate) const IDEMPOTENCY: &str = "agentos_core_action_idempotency";
pub(crate) const TOOL_DOCUMENTS: &str = "agentos_core_tool_documents";

/// The outcome of a guarded write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Guarded<T> {
    /// Written; `T` is what was read back, with `count`, the size of the
    /// bounded collection afterwards (for the 80 % warning).
    Done { value: T, count: u64 },
    /// The guarded statement changed nothing: nothing was written.
    Refused,
}

/// The control plane's handle on the one database.
#[derive(Clone)]
pub struct ControlStore {
    db: SharedDatabase,
}

impl ControlStore {
    pub fn new(db: SharedDatabase) -> Self {
        ControlStore { db }
    }

    pub fn db(&self) -> &SharedDatabase {
        &self.db
    }
}

pub(crate) use agentos_base::clock::unix_ms as now_ms;

/// A limit as a bound parameter (limits above `i64::MAX` are unbounded).
fn bound(limit: u64) -> agentos_schema::SqlValue {
    agentos_schema::SqlValue::Integer(i64::try_from(limit).unwrap_or(i64::MAX))
}

/// Runs a transaction whose statement `guard` is expected to change one
/// row: its mismatch is [`Guarded::Refused`] (as `None`), anything else an
/// error.
async fn guarded(
    db: &SharedDatabase,
    statements: Vec<agentos_schema::Statement>,
    guard: u32,
) -> Result<Option<Vec<Rows>>, DbError> {
    match db.transaction(statements).await {
        Ok(results) => Ok(Some(results)),
        Err(DbError::ExpectedChanges {
            statement_index, ..
        }) if statement_index == guard => Ok(None),
        Err(e) => Err(e),
    }
}

/// The result of statement `index`, which a successful transaction has.
fn nth(results: &mut [Rows], index: usize, table: &'static str) -> Result<Rows, DbError> {
    results
        .get_mut(index)
        .map(std::mem::take)
        .ok_or_else(|| decode::corrupt(table, format!("no result for statement {index}")))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::control::ControlError;

    use agentos_storage::testing::OddRows;

    fn code<T: std::fmt::Debug>(result: Result<T, DbError>) -> String {
        match result {
            Ok(v) => format!("ok: {v:?}"),
            Err(e) => ControlError::from(e).code().to_owned(),
        }
    }

    /// Reads that answer rows of the wrong shape are `corrupt_row`, never a
    /// panic or a default.
    #[tokio::test]
    async fn rows_of_the_wrong_shape_are_corrupt_row() {
        let store = ControlStore::new(Arc::new(OddRows));
        assert_eq!(code(store.get_agent("a").await), "corrupt_row");
        assert_eq!(
            code(store.agent_with_access("a", "z1").await),
            "corrupt_row"
        );
        assert_eq!(code(store.list_agents_for("z1").await), "corrupt_row");
        assert_eq!(code(store.get_signer("z1", "z2").await), "corrupt_row");
        assert_eq!(code(store.list_signers("z1").await), "corrupt_row");
        assert_eq!(code(store.list_collaborators("a").await), "corrupt_row");
        assert_eq!(code(store.list_invites_for("z1").await), "corrupt_row");
        assert_eq!(code(store.list_providers("z1").await), "corrupt_row");
        assert_eq!(code(store.list_secrets("z1").await), "corrupt_row");
        assert_eq!(code(store.get_secret("z1", "n").await), "corrupt_row");
        assert_eq!(code(store.session_agent("s").await), "corrupt_row");
        assert_eq!(
            code(store.idempotency_record("z1", "A", "c").await),
            "corrupt_row"
        );
        // One integer column is the right width here, but not text.
        assert_eq!(code(store.session_ids_of("a").await), "corrupt_row");
    }
}
