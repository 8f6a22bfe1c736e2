//! All SQL of the session domain: sessions, the event log, prompts,
//! permission records and outcome tombstones.
//!
//! Every write is one transaction of compare-and-set statements followed by a
//! read-back, so callers publish exactly what was committed. History counters
//! (`latest_sequence`, `oldest_retained_sequence`, `retained_event_count`,
//! `retained_event_bytes`) live on the session row and change in the same
//! transaction as the rows they count; VM-wide counts live in the
//! `agentos_core_vm_counters` singleton. Nothing here issues `COUNT(` or
//! `SUM(` on a hot path; only bootstrap reconciliation scans.
//!
//! The SQL lives by table group: `sessions.rs` (the session rows),
//! `events.rs` (the event log and its history counters), `prompts.rs`,
//! `permissions.rs` (permission records and outcome tombstones),
//! `retention.rs` (dropping the oldest prompt records and outcomes),
//! `reconcile.rs` (crash recovery) and `decode.rs` (reading rows back).
//! This file holds the handle and the VM counters.

mod decode;
mod events;
mod permissions;
mod prompts;
mod reconcile;
mod retention;
mod sessions;

pub use events::{HistoryCounters, HistoryPage, NewEvent, Prune};
pub use permissions::{PermissionRow, PermissionState};
pub use prompts::{PromptRow, PromptState};
pub use reconcile::Reconciliation;
pub use retention::Retained;
pub use sessions::{NewSession, SessionRow, SessionStatus};

use decode::{Row, VM_COUNTERS};

use agentos_schema::{DbError, SharedDatabase};

#[derive(Clone)]
pub struct SessionStore {
    db: SharedDatabase,
}

pub(super) use agentos_base::clock::unix_ms as now_ms;
pub(crate) use agentos_base::clock::unix_ms as clock_ms;

pub(super) fn json_text(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

impl SessionStore {
    pub fn new(db: SharedDatabase) -> Self {
        SessionStore { db }
    }

    pub fn db(&self) -> &SharedDatabase {
        &self.db
    }

    pub async fn vm_counters(&self) -> Result<[u64; 4], DbError> {
        let rows = self
            .db
            .query(
                "SELECT session_count, prompt_count, pending_permission_count, outcome_count \
                 FROM agentos_core_vm_counters WHERE singleton = 1",
                vec![],
            )
            .await?;
        let mut r = Row::first(rows, VM_COUNTERS, 4)?;
        Ok([r.uint(0)?, r.uint(1)?, r.uint(2)?, r.uint(3)?])
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::sessions::SessionError;

    use agentos_storage::testing::OddRows;

    fn code<T: std::fmt::Debug>(result: Result<T, DbError>) -> String {
        match result {
            Ok(v) => format!("ok: {v:?}"),
            Err(e) => SessionError::from(e).code().as_str().to_owned(),
        }
    }

    /// Reads answer rows of the wrong shape with `corrupt_row`, never a
    /// panic or a default.
    #[tokio::test]
    async fn rows_of_the_wrong_shape_are_corrupt_row() {
        let store = SessionStore::new(Arc::new(OddRows));
        assert_eq!(code(store.get_session("s").await), "corrupt_row");
        assert_eq!(code(store.list_sessions(None, 5).await), "corrupt_row");
        assert_eq!(code(store.find_prompt("s", "p").await), "corrupt_row");
        assert_eq!(code(store.permission_status("s", "r").await), "corrupt_row");
        assert_eq!(code(store.vm_counters().await), "corrupt_row");
        assert_eq!(code(store.history("s", None, None, 5).await), "corrupt_row");
        assert_eq!(
            code(store.events_between("s", 0, 9, 5).await),
            "corrupt_row"
        );
        assert_eq!(
            code(store.oldest(Retained::Prompts, None, 1).await),
            "corrupt_row"
        );
        // One integer column is the right width here, but not text.
        assert_eq!(code(store.recent_updates("s", 5).await), "corrupt_row");
        assert_eq!(code(store.pending_permissions("s").await), "corrupt_row");
    }
}
