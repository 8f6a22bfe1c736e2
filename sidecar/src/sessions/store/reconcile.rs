//! Recovery: at start, every turn a crash interrupted is settled and
//! counters that disagree with the rows are recomputed; while the process
//! lives, one session whose route ended without its terminal commit is
//! settled the same way.

use agentos_schema::{DbError, SqlValue, Statement};

use super::{now_ms, SessionStore};

/// What bootstrap reconciliation changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reconciliation {
    pub prompts_failed: u64,
    pub permissions_terminated: u64,
    pub sessions_failed: u64,
    pub counters_repaired: u64,
}

impl SessionStore {
    /// Recovery of one session whose route ended mid-turn while the process
    /// lives on (its terminal commit failed): what [`Self::reconcile`] does
    /// at start, for this session only. Its accepted prompt fails with
    /// `prompt_delivery_uncertain` (retryable), its pending permissions end
    /// as `adapter_exited`, and the session becomes failed but usable. One
    /// transaction; returns whether the session needed it.
    pub async fn reconcile_session(&self, session_id: &str) -> Result<bool, DbError> {
        let now = now_ms();
        let error = serde_json::json!({
            "code": "prompt_delivery_uncertain",
            "message": "storage failed before this prompt's end was stored; it was not resent",
            "retryable": true,
        })
        .to_string();
        let session_error = serde_json::json!({
            "code": "prompt_delivery_uncertain",
            "message": "storage failed during a turn",
        })
        .to_string();
        let sid = || SqlValue::from(session_id);
        let pending = "FROM agentos_core_permission_records r \
             WHERE r.session_id = ?1 AND r.state = 'pending'";
        let results = self
            .db
            .transaction(vec![
                // 0: VM counters, before the records change.
                Statement::new(
                    format!(
                        "UPDATE agentos_core_vm_counters SET \
                           pending_permission_count = pending_permission_count - (SELECT count(*) {pending}), \
                           outcome_count = outcome_count + (SELECT count(*) {pending} AND NOT EXISTS \
                             (SELECT 1 FROM agentos_core_permission_outcomes o \
                              WHERE o.session_id = r.session_id AND o.request_id = r.request_id)) \
                         WHERE singleton = 1"
                    ),
                    vec![sid()],
                ),
                // 1: tombstones for the permissions about to end.
                Statement::new(
                    format!(
                        "INSERT INTO agentos_core_permission_outcomes (session_id, request_id, terminal_reason, terminal_at_ms) \
                         SELECT r.session_id, r.request_id, 'adapter_exited', ?2 {pending} \
                         ON CONFLICT (session_id, request_id) DO UPDATE SET terminal_reason = 'adapter_exited'"
                    ),
                    vec![sid(), now.into()],
                ),
                // 2: the pending permissions end.
                Statement::new(
                    "UPDATE agentos_core_permission_records SET state = 'terminal', \
                       terminal_reason = 'adapter_exited', updated_at_ms = ?2 \
                     WHERE session_id = ?1 AND state = 'pending'",
                    vec![sid(), now.into()],
                ),
                // 3: the accepted prompt fails.
                Statement::new(
                    "UPDATE agentos_core_prompts SET state = 'failed', error_json = ?2, \
                       updated_at_ms = ?3, completed_at_ms = ?3 \
                     WHERE session_id = ?1 AND state = 'accepted'",
                    vec![sid(), error.into(), now.into()],
                ),
                // 4: the session: failed but usable, its counters true.
                Statement::new(
                    "UPDATE agentos_core_sessions SET state = 'failed', state_error_json = ?2, \
                       pending_permission_count = 0, \
                       outcome_count = (SELECT count(*) FROM agentos_core_permission_outcomes \
                                        WHERE session_id = ?1), \
                       updated_at_ms = max(updated_at_ms, ?3) \
                     WHERE session_id = ?1 AND state IN ('running', 'waiting')",
                    vec![sid(), session_error.into(), now.into()],
                ),
            ])
            .await?;
        Ok(results.get(4).is_some_and(|r| r.changes > 0))
    }

    /// Crash recovery, in one transaction: accepted prompts fail with
    /// `prompt_delivery_uncertain`, their pending permissions become
    /// `vm_shutdown`, running or waiting sessions become failed-but-usable,
    /// and the counters of those sessions that disagree with their rows are
    /// recomputed. It reads only what the interrupted turns touched (partial
    /// indexes on busy sessions, accepted prompts and pending permissions),
    /// so its cost does not grow with the number of sessions or events.
    pub async fn reconcile(&self) -> Result<Reconciliation, DbError> {
        let now = now_ms();
        let error = serde_json::json!({
            "code": "prompt_delivery_uncertain",
            "message": "the sidecar stopped while this prompt was in flight; it was not resent",
            "retryable": true,
        })
        .to_string();
        let session_error = serde_json::json!({
            "code": "prompt_delivery_uncertain",
            "message": "the sidecar stopped during a turn",
        })
        .to_string();
        let pending = "SELECT session_id, request_id FROM agentos_core_permission_records \
             WHERE state = 'pending'";
        // The sessions a crash interrupted: the only ones whose rows a turn
        // was changing. Every other session's counters moved in the same
        // transactions as its rows, so start-up never walks them.
        let interrupted = "SELECT session_id FROM agentos_core_sessions \
             WHERE state IN ('running', 'waiting') \
             UNION SELECT session_id FROM agentos_core_prompts WHERE state = 'accepted'";
        let results = self
            .db
            .transaction(vec![
                // 0: history counters of the interrupted sessions that
                // disagree with their rows (before their state changes).
                Statement::new(
                    format!(
                        "UPDATE agentos_core_sessions AS s SET \
                           retained_event_count = c.n, retained_event_bytes = c.b, \
                           oldest_retained_sequence = CASE WHEN c.n = 0 THEN s.latest_sequence + 1 ELSE c.lo END, \
                           latest_sequence = max(s.latest_sequence, c.hi) \
                         FROM (SELECT s2.session_id AS sid, count(e.sequence) AS n, \
                                 coalesce(sum(e.payload_bytes), 0) AS b, \
                                 coalesce(min(e.sequence), 0) AS lo, coalesce(max(e.sequence), 0) AS hi \
                               FROM agentos_core_sessions s2 LEFT JOIN agentos_core_events e \
                                 ON e.session_id = s2.session_id \
                               WHERE s2.session_id IN ({interrupted}) GROUP BY s2.session_id) AS c \
                         WHERE c.sid = s.session_id AND (s.retained_event_count <> c.n \
                           OR s.retained_event_bytes <> c.b OR s.latest_sequence < c.hi \
                           OR (c.n > 0 AND s.oldest_retained_sequence <> c.lo))"
                    ),
                    vec![],
                ),
                // 1: their record counters.
                Statement::new(
                    format!(
                        "UPDATE agentos_core_sessions AS s SET \
                           prompt_count = (SELECT count(*) FROM agentos_core_prompts p WHERE p.session_id = s.session_id), \
                           pending_permission_count = (SELECT count(*) FROM agentos_core_permission_records r \
                               WHERE r.session_id = s.session_id AND r.state = 'pending'), \
                           outcome_count = (SELECT count(*) FROM agentos_core_permission_outcomes o \
                               WHERE o.session_id = s.session_id) \
                         WHERE s.session_id IN ({interrupted})"
                    ),
                    vec![],
                ),
                // 2: tombstones for the permissions about to end.
                Statement::new(
                    format!(
                        "INSERT INTO agentos_core_permission_outcomes (session_id, request_id, terminal_reason, terminal_at_ms) \
                         SELECT session_id, request_id, 'vm_shutdown', ?1 FROM ({pending}) WHERE true \
                         ON CONFLICT (session_id, request_id) DO UPDATE SET terminal_reason = 'vm_shutdown'"
                    ),
                    vec![now.into()],
                ),
                // 3: every pending permission ends: its prompt died with the
                // process; the session's count follows.
                Statement::new(
                    "UPDATE agentos_core_permission_records SET state = 'terminal', \
                       terminal_reason = 'vm_shutdown', updated_at_ms = ?1 WHERE state = 'pending'",
                    vec![now.into()],
                ),
                // 4: accepted prompts fail.
                Statement::new(
                    "UPDATE agentos_core_prompts SET state = 'failed', error_json = ?1, \
                       updated_at_ms = ?2, completed_at_ms = ?2 WHERE state = 'accepted'",
                    vec![error.into(), now.into()],
                ),
                // 5: busy sessions become failed but usable, with their
                // permission counters true after the permissions ended.
                Statement::new(
                    "UPDATE agentos_core_sessions AS s SET state = 'failed', state_error_json = ?1, \
                       pending_permission_count = 0, \
                       outcome_count = (SELECT count(*) FROM agentos_core_permission_outcomes o \
                           WHERE o.session_id = s.session_id), \
                       updated_at_ms = max(updated_at_ms, ?2) \
                     WHERE state IN ('running', 'waiting')",
                    vec![session_error.into(), now.into()],
                ),
                // 6: VM counters.
                Statement::new(
                    "UPDATE agentos_core_vm_counters SET \
                       session_count = (SELECT count(*) FROM agentos_core_sessions), \
                       prompt_count = (SELECT count(*) FROM agentos_core_prompts), \
                       pending_permission_count = (SELECT count(*) FROM agentos_core_permission_records WHERE state = 'pending'), \
                       outcome_count = (SELECT count(*) FROM agentos_core_permission_outcomes) \
                     WHERE singleton = 1",
                    vec![],
                ),
            ])
            .await?;
        Ok(Reconciliation {
            permissions_terminated: results[3].changes,
            prompts_failed: results[4].changes,
            sessions_failed: results[5].changes,
            counters_repaired: results[0].changes,
        })
    }
}
