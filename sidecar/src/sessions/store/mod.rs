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
pub use permissions::PermissionRow;
pub use prompts::PromptRow;
pub use reconcile::Reconciliation;
pub use retention::Retained;
pub use sessions::{NewSession, SessionRow};

use decode::uint;

use agentos_schema::{DbError, SharedDatabase};

#[derive(Clone)]
pub struct SessionStore {
    db: SharedDatabase,
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub(crate) fn clock_ms() -> i64 {
    now_ms()
}

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
        let r = rows.rows.first();
        Ok([0, 1, 2, 3].map(|i| r.map_or(0, |r| uint(&r[i]))))
    }
}
