//! SQL that spans a run tree: cancellation of a subtree, the children a
//! turn waits for and their resolution (at most once, waking the parent),
//! the usage children roll up into their parent, a plan step's children,
//! and a session's or an agent's unfinished runs.

use agentos_schema::row::Row;
use agentos_schema::{DbError, SqlValue, Statement};
use serde_json::Value;

use super::{decode_all, first, RunStore, COLUMNS, JOURNAL, NEVER, RUNS};
use crate::runs::types::{Run, RunStatus};

/// What a cancel changed: whether anything was newly canceled or asked to
/// stop, and the live rows that must be stopped by whoever works them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Canceled {
    pub changed: bool,
    pub live: Vec<Run>,
    /// Rows that became `canceled` at once (queued or waiting).
    pub settled: Vec<Run>,
}

impl RunStore {
    /// A live turn that delegated ends waiting for its unresolved awaited
    /// children, their call ids in its wait; with none left (every child
    /// already answered) it is queued at once to resume. The resumed turn
    /// starts a fresh continuation budget, and its claim is not one of its
    /// attempts (the retry budget stays what it was).
    pub(super) fn await_children_statement(run_id: &str, now: i64) -> Statement {
        let pending = format!(
            "FROM {RUNS} c WHERE c.parent_run_id = ?1 AND c.parent_awaits = 1 AND c.resolved = 0"
        );
        Statement::new(
            format!(
                "UPDATE {RUNS} SET \
                   status = CASE WHEN cancel_requested = 1 THEN 'canceled' \
                     WHEN EXISTS (SELECT 1 {pending}) THEN 'waiting' ELSE 'queued' END, \
                   wait_json = CASE WHEN cancel_requested = 0 AND EXISTS (SELECT 1 {pending}) \
                     THEN json_object('reason', 'children', 'toolCallIds', \
                       (SELECT json_group_array(c.parent_tool_call_id) {pending})) \
                     ELSE NULL END, \
                   not_before_ms = CASE WHEN EXISTS (SELECT 1 {pending}) THEN ?3 ELSE 0 END, \
                   finished_at_ms = CASE WHEN cancel_requested = 1 THEN ?2 ELSE NULL END, \
                   output_json = NULL, lease_owner = NULL, lease_expires_at_ms = NULL, \
                   input_json = json_remove(input_json, '$.continuations'), \
                   max_attempts = max_attempts + 1, \
                   started_at_ms = coalesce(started_at_ms, ?2), updated_at_ms = ?2 \
                 WHERE run_id = ?1 AND (status = 'claimed' OR status = 'running')"
            ),
            vec![run_id.into(), now.into(), NEVER.into()],
        )
    }

    /// Adds a turn's tokens to its run's usage (a run's turns add up).
    pub fn add_usage_statement(run_id: &str, input: u64, output: u64) -> Statement {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Statement::new(
            format!(
                "UPDATE {RUNS} SET usage_json = json_set(coalesce(usage_json, '{{}}'), \
                   '$.input', coalesce(json_extract(usage_json, '$.input'), 0) + ?2, \
                   '$.output', coalesce(json_extract(usage_json, '$.output'), 0) + ?3, \
                   '$.cacheRead', coalesce(json_extract(usage_json, '$.cacheRead'), 0), \
                   '$.cacheWrite', coalesce(json_extract(usage_json, '$.cacheWrite'), 0), \
                   '$.total', coalesce(json_extract(usage_json, '$.total'), 0) + ?2 + ?3) \
                 WHERE run_id = ?1"
            ),
            vec![run_id.into(), n(input).into(), n(output).into()],
        )
    }

    /// Rolls an ended child's usage (its own and its children's) up into
    /// its parent's `children`.
    fn rollup_statement(child: &Run) -> Statement {
        let usage = child.usage.clone().unwrap_or(Value::Null);
        let field =
            |k: &str| usage[k].as_i64().unwrap_or(0) + usage["children"][k].as_i64().unwrap_or(0);
        let runs = 1 + usage["children"]["runs"].as_i64().unwrap_or(0);
        Statement::new(
            format!(
                "UPDATE {RUNS} SET usage_json = json_set(coalesce(usage_json, \
                   json_object('input', 0, 'output', 0, 'cacheRead', 0, 'cacheWrite', 0, 'total', 0)), \
                   '$.children', json_object( \
                     'input', coalesce(json_extract(usage_json, '$.children.input'), 0) + ?2, \
                     'output', coalesce(json_extract(usage_json, '$.children.output'), 0) + ?3, \
                     'cacheRead', coalesce(json_extract(usage_json, '$.children.cacheRead'), 0) + ?4, \
                     'cacheWrite', coalesce(json_extract(usage_json, '$.children.cacheWrite'), 0) + ?5, \
                     'total', coalesce(json_extract(usage_json, '$.children.total'), 0) + ?6, \
                     'runs', coalesce(json_extract(usage_json, '$.children.runs'), 0) + ?7)) \
                 WHERE run_id = ?1"
            ),
            vec![
                child.parent_run_id.clone().unwrap_or_default().into(),
                field("input").into(),
                field("output").into(),
                field("cacheRead").into(),
                field("cacheWrite").into(),
                field("total").into(),
                runs.into(),
            ],
        )
    }

    /// Marks a child's result as delivered to its parent, at most once (the
    /// first statement fails the transaction when it was already), and
    /// shrinks the parent's wait, queueing it to resume when no awaited
    /// child is left. Travels with the append of the result to the
    /// parent's log.
    pub fn resolve_child_statements(child: &Run, now: i64) -> Vec<Statement> {
        let parent = child.parent_run_id.clone().unwrap_or_default();
        let pending = format!(
            "FROM {RUNS} c WHERE c.parent_run_id = ?1 AND c.parent_awaits = 1 AND c.resolved = 0"
        );
        let waiting_on_children = "status = 'waiting' \
             AND json_extract(wait_json, '$.reason') = 'children'";
        vec![
            Statement::new(
                format!("UPDATE {RUNS} SET resolved = 1 WHERE run_id = ?1 AND resolved = 0"),
                vec![child.run_id.as_str().into()],
            )
            .expect_changes(1),
            Statement::new(
                format!(
                    "UPDATE {RUNS} SET wait_json = json_set(wait_json, '$.toolCallIds', \
                       json((SELECT json_group_array(c.parent_tool_call_id) {pending}))), \
                       updated_at_ms = ?2 \
                     WHERE run_id = ?1 AND {waiting_on_children} AND EXISTS (SELECT 1 {pending})"
                ),
                vec![parent.as_str().into(), now.into()],
            ),
            Statement::new(
                format!(
                    "UPDATE {RUNS} SET status = 'queued', wait_json = NULL, not_before_ms = 0, \
                       updated_at_ms = ?2 \
                     WHERE run_id = ?1 AND {waiting_on_children} \
                       AND NOT EXISTS (SELECT 1 {pending})"
                ),
                vec![parent.into(), now.into()],
            ),
            Self::rollup_statement(child),
        ]
    }

    /// Marks a child resolved (and wakes its parent as above) without an
    /// append; false when it already was.
    pub async fn resolve_child(&self, child: &Run, now: i64) -> Result<bool, DbError> {
        match self
            .db
            .transaction(Self::resolve_child_statements(child, now))
            .await
        {
            Ok(_) => Ok(true),
            Err(DbError::ExpectedChanges { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Ended children whose result has not reached their parent.
    pub async fn unresolved_children(&self) -> Result<Vec<Run>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM {RUNS} WHERE parent_awaits = 1 AND resolved = 0 \
                     AND (status = 'succeeded' OR status = 'failed' OR status = 'canceled') \
                     AND parent_run_id IS NOT NULL"
                ),
                vec![],
            )
            .await?;
        decode_all(rows)
    }

    /// The statuses of a parent's children attached to one plan step.
    pub async fn step_children(
        &self,
        parent_run_id: &str,
        plan_step_id: &str,
    ) -> Result<Vec<RunStatus>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT status FROM {RUNS} WHERE parent_run_id = ?1 AND plan_step_id = ?2 \
                     AND continued_from_run_id IS NULL"
                ),
                vec![parent_run_id.into(), plan_step_id.into()],
            )
            .await?;
        Row::all(rows, RUNS, 1, |mut r| r.parse(0, RunStatus::parse))
    }

    /// The live turn of a session, if any.
    pub async fn live_turn(&self, session_id: &str) -> Result<Option<Run>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM {RUNS} WHERE session_id = ?1 AND kind = 'agent' \
                     AND (status = 'claimed' OR status = 'running')"
                ),
                vec![session_id.into()],
            )
            .await?;
        first(Some(rows))
    }

    /// Cancels `run_id` and its whole subtree: queued and waiting rows
    /// become `canceled` (their waits removed), live rows are marked so that
    /// they end `canceled`, and are answered for whoever works them to stop.
    pub async fn cancel_tree(&self, run_id: &str, now: i64) -> Result<Canceled, DbError> {
        let tree = format!(
            "WITH RECURSIVE tree(id) AS (SELECT ?1 UNION \
               SELECT r.run_id FROM {RUNS} r JOIN tree t ON r.parent_run_id = t.id)"
        );
        let both = || -> Vec<SqlValue> { vec![run_id.into(), now.into()] };
        let id = || -> Vec<SqlValue> { vec![run_id.into()] };
        let mut rows = self
            .db
            .transaction(vec![
                Statement::new(
                    format!(
                        "{tree} DELETE FROM agentos_core_run_event_waits \
                         WHERE run_id IN (SELECT id FROM tree)"
                    ),
                    id(),
                ),
                Statement::new(
                    format!(
                        "{tree} UPDATE {RUNS} SET status = 'canceled', wait_json = NULL, \
                           finished_at_ms = ?2, updated_at_ms = ?2 \
                         WHERE run_id IN (SELECT id FROM tree) \
                           AND (status = 'queued' OR status = 'waiting') \
                         RETURNING {COLUMNS}"
                    ),
                    both(),
                ),
                Statement::new(
                    format!(
                        "{tree} UPDATE {RUNS} SET cancel_requested = 1, updated_at_ms = ?2 \
                         WHERE run_id IN (SELECT id FROM tree) \
                           AND (status = 'claimed' OR status = 'running') AND cancel_requested = 0"
                    ),
                    both(),
                ),
                Statement::new(
                    format!(
                        "{tree} SELECT {COLUMNS} FROM {RUNS} WHERE run_id IN (SELECT id FROM tree) \
                           AND (status = 'claimed' OR status = 'running')"
                    ),
                    id(),
                ),
            ])
            .await?;
        let live = rows.pop().map(decode_all).transpose()?.unwrap_or_default();
        let marked = rows.pop().map(|r| r.changes).unwrap_or(0);
        let settled = rows.pop().map(decode_all).transpose()?.unwrap_or_default();
        Ok(Canceled {
            changed: marked > 0 || !settled.is_empty(),
            live,
            settled,
        })
    }

    /// The unfinished runs of a session (queued, live or waiting), oldest
    /// first: the roots of the trees a stop cancels.
    pub async fn session_open_runs(&self, session_id: &str) -> Result<Vec<String>, DbError> {
        self.open_runs("session_id", session_id).await
    }

    /// The unfinished runs of an agent.
    pub async fn agent_open_runs(&self, agent_id: &str) -> Result<Vec<String>, DbError> {
        self.open_runs("agent_id", agent_id).await
    }

    async fn open_runs(&self, column: &str, id: &str) -> Result<Vec<String>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT run_id FROM {RUNS} WHERE {column} = ?1 \
                     AND status <> 'succeeded' AND status <> 'failed' AND status <> 'canceled' \
                     ORDER BY created_at_ms"
                ),
                vec![id.into()],
            )
            .await?;
        agentos_schema::row::texts(rows, RUNS)
    }

    /// How many children of a run have not ended (awaited or detached).
    pub async fn live_children(&self, run_id: &str) -> Result<u64, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT count(*) FROM {RUNS} WHERE parent_run_id = ?1 \
                     AND status <> 'succeeded' AND status <> 'failed' AND status <> 'canceled'"
                ),
                vec![run_id.into()],
            )
            .await?;
        Ok(rows
            .scalar_i64()
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0))
    }

    /// Keeps the table at `max_rows`: deletes whole finished trees (every
    /// row ended), oldest root first, with their journals and waits, at most
    /// `batch` trees per call. Answers how many rows went. A tree with any
    /// row unfinished is never touched.
    pub async fn prune(&self, max_rows: u64, batch: u64) -> Result<u64, DbError> {
        let rows = self
            .db
            .query(&format!("SELECT count(*) FROM {RUNS}"), vec![])
            .await?;
        let total = rows
            .scalar_i64()
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0);
        if total <= max_rows {
            return Ok(0);
        }
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT r.run_id FROM {RUNS} r \
                     WHERE r.parent_run_id IS NULL AND r.finished_at_ms IS NOT NULL \
                       AND NOT EXISTS (SELECT 1 FROM {RUNS} l WHERE l.root_run_id = r.run_id \
                         AND l.status <> 'succeeded' AND l.status <> 'failed' \
                         AND l.status <> 'canceled') \
                     ORDER BY r.finished_at_ms, r.run_id LIMIT ?1"
                ),
                vec![i64::try_from(batch.max(1)).unwrap_or(i64::MAX).into()],
            )
            .await?;
        let candidates = agentos_schema::row::texts(rows, RUNS)?;
        let mut removed = 0;
        for root in candidates {
            if removed >= total - max_rows {
                break;
            }
            // One tree per transaction, re-checked inside it: a tree that
            // came alive again since the read (a retry, a signal) stays.
            let ended = format!(
                "NOT EXISTS (SELECT 1 FROM {RUNS} l WHERE l.root_run_id = ?1 \
                 AND l.status <> 'succeeded' AND l.status <> 'failed' AND l.status <> 'canceled')"
            );
            let members = format!("SELECT run_id FROM {RUNS} WHERE root_run_id = ?1");
            let done = self
                .db
                .transaction(vec![
                    Statement::new(
                        format!("DELETE FROM {JOURNAL} WHERE run_id IN ({members}) AND {ended}"),
                        vec![root.as_str().into()],
                    ),
                    Statement::new(
                        format!(
                            "DELETE FROM agentos_core_run_event_waits \
                             WHERE run_id IN ({members}) AND {ended}"
                        ),
                        vec![root.as_str().into()],
                    ),
                    Statement::new(
                        format!("DELETE FROM {RUNS} WHERE root_run_id = ?1 AND {ended}"),
                        vec![root.as_str().into()],
                    ),
                ])
                .await?;
            removed += done.get(2).map(|r| r.changes).unwrap_or(0);
        }
        Ok(removed)
    }
}
