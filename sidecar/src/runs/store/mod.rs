//! All SQL of runs (`agentos_core_runs`), their journals
//! (`agentos_core_run_journal`) and event waits
//! (`agentos_core_run_event_waits`): this file the rows and their
//! lifecycle (insert, claim, start, finish, retry, release, leases,
//! recovery), `tree.rs` what spans a tree (cancellation, children and their
//! resolution, usage rollup), `waits.rs` parking, waking, signals, the
//! journal and plans.
//!
//! Every transition is a statement guarded by the status it leaves, so a
//! racing transition changes nothing instead of undoing another: the claim
//! is one `UPDATE … WHERE run_id = (SELECT …) RETURNING`, a finish leaves
//! only a live row, a cancel marks the live rows of a subtree
//! (`cancel_requested`, which makes their finish `canceled`) and cancels the
//! rest at once. Event waits exist only while their run waits: every
//! statement that moves a run out of `waiting` removes them in the same
//! transaction, which is what makes a signal's delivery (journal entry,
//! requeue, wait removal) happen exactly once.

use agentos_schema::row::{corrupt, Row};
use agentos_schema::{DbError, SharedDatabase, SqlValue, Statement};
use serde_json::Value;
use std::sync::LazyLock;

use super::types::{Finish, NewRun, Queue, Run, RunKind, RunScope, RunStatus, RunWait};
use crate::runs::types::Origin;

pub(crate) const RUNS: &str = "agentos_core_runs";
pub(crate) const JOURNAL: &str = "agentos_core_run_journal";

const COLUMNS: &str = "run_id, account_id, root_run_id, parent_run_id, parent_tool_call_id, \
     continued_from_run_id, depth, kind, agent_id, session_id, origin, title, queue, status, \
     attempt, max_attempts, not_before_ms, lease_owner, lease_expires_at_ms, cancel_requested, \
     idempotency_key, input_json, output_json, error_json, wait_json, usage_json, budget_json, \
     plan_json, obligations_json, source_text, source_cid, plan_step_id, step_label, \
     child_count, journal_seq, journal_bytes, created_at_ms, started_at_ms, finished_at_ms, \
     updated_at_ms, parent_awaits, resolved, result_json, trigger_firing_id";
const WIDTH: usize = 44;

/// A run's insert (its placeholders are `insert_guarded`'s).
static INSERT_RUN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO {RUNS} (run_id, account_id, root_run_id, parent_run_id, \
         parent_tool_call_id, continued_from_run_id, depth, kind, agent_id, session_id, \
         origin, title, queue, status, attempt, max_attempts, not_before_ms, \
         lease_owner, lease_expires_at_ms, idempotency_key, input_json, budget_json, \
         source_text, source_cid, plan_step_id, step_label, created_at_ms, \
         started_at_ms, updated_at_ms, parent_awaits, trigger_firing_id) \
         SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, \
         ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?27, ?29, ?30"
    )
});

/// The insert of a turn that starts at once: only while its session has no
/// turn waiting in the queue.
static START_RUN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} WHERE NOT EXISTS (SELECT 1 FROM {RUNS} q WHERE q.session_id = ?10 \
           AND q.kind = 'agent' AND q.status = 'queued')",
        INSERT_RUN.as_str()
    )
});

/// A waiting row's `not_before_ms` when no clock wakes it.
pub(crate) const NEVER: i64 = i64::MAX;

fn json_text(v: &Value) -> SqlValue {
    SqlValue::Text(v.to_string())
}

/// A turn's input as stored by the accept that starts it: `inputAt`, where
/// its words start in the log, is known only then, and is written beside
/// the input's own members without copying them.
fn input_text(input: &Value, input_at: Option<u64>) -> SqlValue {
    match (input, input_at) {
        (Value::Object(members), Some(at)) if !members.contains_key("inputAt") => {
            #[derive(serde::Serialize)]
            struct WithInputAt<'a> {
                #[serde(flatten)]
                members: &'a serde_json::Map<String, Value>,
                #[serde(rename = "inputAt")]
                input_at: u64,
            }
            let text = serde_json::to_string(&WithInputAt {
                members,
                input_at: at,
            })
            .unwrap_or_else(|_| input.to_string());
            SqlValue::Text(text)
        }
        (_, None) => json_text(input),
        (_, Some(at)) => json_text(&super::types::with_input_at(input, at)),
    }
}

fn opt_json_text(v: Option<&Value>) -> SqlValue {
    v.map(json_text).unwrap_or(SqlValue::Null)
}

fn decode(mut r: Row) -> Result<Run, DbError> {
    let small = |v: i64, what: &str| {
        u32::try_from(v).map_err(|_| corrupt(RUNS, format!("{what} {v} is out of range")))
    };
    Ok(Run {
        run_id: r.text(0)?,
        account_id: r.opt_text(1)?,
        root_run_id: r.text(2)?,
        parent_run_id: r.opt_text(3)?,
        parent_tool_call_id: r.opt_text(4)?,
        continued_from_run_id: r.opt_text(5)?,
        depth: small(r.int(6)?, "depth")?,
        kind: r.parse(7, RunKind::parse)?,
        agent_id: r.opt_text(8)?,
        session_id: r.opt_text(9)?,
        origin: r.parse(10, Origin::parse)?,
        title: r.opt_text(11)?,
        queue: r.parse(12, Queue::parse)?,
        status: r.parse(13, RunStatus::parse)?,
        attempt: small(r.int(14)?, "attempt")?,
        max_attempts: small(r.int(15)?, "max_attempts")?,
        not_before_ms: r.int(16)?,
        lease_owner: r.opt_text(17)?,
        lease_expires_at_ms: r.opt_int(18)?,
        cancel_requested: r.flag(19)?,
        idempotency_key: r.opt_text(20)?,
        input: r.json(21)?,
        output: r.opt_json(22)?,
        error: r.opt_json(23)?,
        wait: match r.opt_json(24)? {
            None => None,
            Some(v) => Some(
                serde_json::from_value::<RunWait>(v)
                    .map_err(|e| corrupt(RUNS, format!("wait_json: {e}")))?,
            ),
        },
        usage: r.opt_json(25)?,
        budget: r.opt_json(26)?,
        plan: r.opt_json(27)?,
        obligations: r.opt_json(28)?,
        source_text: r.opt_text(29)?,
        source_cid: r.opt_text(30)?,
        plan_step_id: r.opt_text(31)?,
        step_label: r.opt_text(32)?,
        child_count: r.uint(33)?,
        journal_seq: r.uint(34)?,
        journal_bytes: r.uint(35)?,
        created_at_ms: r.int(36)?,
        started_at_ms: r.opt_int(37)?,
        finished_at_ms: r.opt_int(38)?,
        updated_at_ms: r.int(39)?,
        parent_awaits: r.flag(40)?,
        resolved: r.flag(41)?,
        result: r.opt_json(42)?,
        trigger_firing_id: r.opt_text(43)?,
    })
}

fn decode_all(rows: agentos_schema::Rows) -> Result<Vec<Run>, DbError> {
    Row::all(rows, RUNS, WIDTH, decode)
}

fn first(rows: Option<agentos_schema::Rows>) -> Result<Option<Run>, DbError> {
    match rows {
        None => Ok(None),
        Some(rows) => Row::optional(rows, RUNS, WIDTH)?.map(decode).transpose(),
    }
}

/// The per-kind concurrency caps a claim respects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub agent: u32,
    pub script: u32,
}

/// The runs domain's handle on the one database.
#[derive(Clone)]
pub struct RunStore {
    db: SharedDatabase,
}

mod tree;
mod waits;

pub use tree::Canceled;

impl RunStore {
    pub fn new(db: SharedDatabase) -> RunStore {
        RunStore { db }
    }

    pub fn db(&self) -> &SharedDatabase {
        &self.db
    }

    /// Inserts a run as `status` (`queued`, or `running` for a turn the
    /// route accepts itself, leased to `lease`), and counts it on its
    /// parent.
    pub fn insert_statements(
        run: &NewRun,
        status: RunStatus,
        lease: Option<(&str, i64)>,
        now: i64,
    ) -> Vec<Statement> {
        Self::insert_guarded(run, None, status, lease, now, None)
    }

    /// Inserts a turn's run as `running`, leased to `lease`, as part of
    /// the accept that starts it at once, but only while its session has no
    /// turn waiting in the queue (words keep their order) and, given `cap`,
    /// while fewer than `cap` agent runs are live: otherwise the statement
    /// changes nothing and fails its transaction with
    /// [`DbError::ExpectedChanges`]. Its input gains `inputAt`, where its
    /// words start in the log.
    pub fn start_statements(
        run: &NewRun,
        input_at: u64,
        lease: (&str, i64),
        cap: Option<u32>,
        now: i64,
    ) -> Vec<Statement> {
        Self::insert_guarded(
            run,
            Some(input_at),
            RunStatus::Running,
            Some(lease),
            now,
            Some(cap),
        )
    }

    fn insert_guarded(
        run: &NewRun,
        input_at: Option<u64>,
        status: RunStatus,
        lease: Option<(&str, i64)>,
        now: i64,
        start: Option<Option<u32>>,
    ) -> Vec<Statement> {
        let (root, parent, tool_call, depth, awaits) = run.place();
        let live = status.is_live();
        let sql: std::borrow::Cow<'static, str> = match start {
            None => INSERT_RUN.as_str().into(),
            Some(None) => START_RUN.as_str().into(),
            Some(Some(cap)) => format!(
                "{} AND (SELECT count(*) FROM {RUNS} l WHERE l.kind = 'agent' \
                   AND (l.status = 'claimed' OR l.status = 'running')) < {cap}",
                START_RUN.as_str()
            )
            .into(),
        };
        let mut out = vec![Statement::new(
            sql,
            vec![
                run.run_id.as_str().into(),
                run.account_id.clone().into(),
                root.into(),
                parent.clone().into(),
                tool_call.into(),
                run.continued_from.clone().into(),
                i64::from(depth).into(),
                run.kind.as_str().into(),
                run.agent_id.clone().into(),
                run.session_id.clone().into(),
                run.origin.as_str().into(),
                run.title.clone().into(),
                run.queue.as_str().into(),
                status.as_str().into(),
                i64::from(live).into(),
                i64::from(run.max_attempts.max(1)).into(),
                run.not_before_ms.into(),
                lease.map(|(owner, _)| owner.to_owned()).into(),
                lease.map(|(_, until)| until).into(),
                run.idempotency_key.clone().into(),
                input_text(&run.input, input_at),
                opt_json_text(run.budget.as_ref()),
                run.source_text.clone().into(),
                run.source_cid.clone().into(),
                run.plan_step_id.clone().into(),
                run.step_label.clone().into(),
                now.into(),
                live.then_some(now).into(),
                i64::from(awaits).into(),
                run.trigger_firing_id.clone().into(),
            ],
        )
        .expect_changes(1)];
        if let Some(parent) = parent {
            out.push(Statement::new(
                format!("UPDATE {RUNS} SET child_count = child_count + 1 WHERE run_id = ?1"),
                vec![parent.into()],
            ));
        }
        out
    }

    /// Inserts a queued run (and counts it on its parent).
    pub async fn insert(&self, run: &NewRun, now: i64) -> Result<(), DbError> {
        self.db
            .transaction(Self::insert_statements(run, RunStatus::Queued, None, now))
            .await
            .map(drop)
    }

    pub async fn get(&self, run_id: &str) -> Result<Option<Run>, DbError> {
        let rows = self
            .db
            .query(
                &format!("SELECT {COLUMNS} FROM {RUNS} WHERE run_id = ?1"),
                vec![run_id.into()],
            )
            .await?;
        first(Some(rows))
    }

    /// Forgets the idempotency key of the turn whose first prompt was
    /// `prompt_id` (its run's id), as that prompt record is pruned: the key
    /// then starts a new turn.
    pub fn forget_key_statement(session_id: &str, prompt_id: &str) -> Statement {
        Statement::new(
            format!(
                "UPDATE {RUNS} SET idempotency_key = NULL \
                 WHERE run_id = ?2 AND session_id = ?1 AND idempotency_key IS NOT NULL"
            ),
            vec![session_id.into(), prompt_id.into()],
        )
    }

    /// A run as its worker's answered transactions left it, and whether any
    /// run waits in the queue (due or not): one read.
    pub async fn get_with_queue(&self, run_id: &str) -> Result<Option<(Run, bool)>, DbError> {
        let statement = Self::with_queue_statement(run_id);
        let rows = self.db.query(&statement.sql, statement.params).await?;
        Self::decode_with_queue(rows)
    }

    /// The statement [`RunStore::get_with_queue`] runs, for a transaction
    /// that ends a run to read what it left.
    pub fn with_queue_statement(run_id: &str) -> Statement {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT {COLUMNS}, EXISTS (SELECT 1 FROM {RUNS} WHERE status = 'queued') \
                 FROM {RUNS} WHERE run_id = ?1"
            )
        });
        Statement::new(SQL.as_str(), vec![run_id.into()])
    }

    /// [`Self::with_queue_statement`] for a run no feed shows: its status
    /// only, and whether any run waits in the queue.
    pub fn status_with_queue_statement(run_id: &str) -> Statement {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT status, EXISTS (SELECT 1 FROM {RUNS} WHERE status = 'queued') \
                 FROM {RUNS} WHERE run_id = ?1"
            )
        });
        Statement::new(SQL.as_str(), vec![run_id.into()])
    }

    pub fn decode_status_with_queue(
        rows: agentos_schema::Rows,
    ) -> Result<Option<(RunStatus, bool)>, DbError> {
        let Some(values) = rows.rows.into_iter().next() else {
            return Ok(None);
        };
        let mut r = Row::new(RUNS, values, 2)?;
        Ok(Some((r.parse(0, RunStatus::parse)?, r.flag(1)?)))
    }

    pub fn decode_with_queue(
        mut rows: agentos_schema::Rows,
    ) -> Result<Option<(Run, bool)>, DbError> {
        let Some(mut values) = rows.rows.pop() else {
            return Ok(None);
        };
        let queued = matches!(values.pop(), Some(SqlValue::Integer(1)));
        let run = decode(Row::new(RUNS, values, WIDTH)?)?;
        Ok(Some((run, queued)))
    }

    /// The run a session's idempotency key named.
    pub async fn by_key(&self, session_id: &str, key: &str) -> Result<Option<Run>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM {RUNS} WHERE session_id = ?1 AND idempotency_key = ?2"
                ),
                vec![session_id.into(), key.into()],
            )
            .await?;
        first(Some(rows))
    }

    /// A tree oldest first, or a session's or an agent's runs newest first
    /// (at most `limit`), optionally of one status.
    pub async fn list(
        &self,
        scope: &RunScope,
        status: Option<RunStatus>,
        limit: u64,
    ) -> Result<Vec<Run>, DbError> {
        let (column, id, order) = match scope {
            RunScope::Root(id) => ("root_run_id", id, "ASC"),
            RunScope::Session(id) => ("session_id", id, "DESC"),
            RunScope::Agent(id) => ("agent_id", id, "DESC"),
        };
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM {RUNS} WHERE {column} = ?1 \
                     AND (?2 IS NULL OR status = ?2) \
                     ORDER BY created_at_ms {order}, run_id {order} LIMIT ?3"
                ),
                vec![
                    id.as_str().into(),
                    status.map(RunStatus::as_str).into(),
                    i64::try_from(limit).unwrap_or(i64::MAX).into(),
                ],
            )
            .await?;
        decode_all(rows)
    }

    /// Claims the next queued run that may start now: interactive first,
    /// then by age, a kind only while it has a free slot, a turn only when
    /// its session has no live run. One statement.
    pub async fn claim(
        &self,
        owner: &str,
        now: i64,
        lease_ms: i64,
        caps: Caps,
    ) -> Result<Option<Run>, DbError> {
        let sql = format!(
            "UPDATE {RUNS} SET status = 'claimed', lease_owner = ?1, \
               lease_expires_at_ms = ?2 + ?3, attempt = attempt + 1, updated_at_ms = ?2, \
               started_at_ms = CASE WHEN kind = 'script' THEN coalesce(started_at_ms, ?2) \
                 ELSE started_at_ms END \
             WHERE run_id = ( \
               SELECT q.run_id FROM {RUNS} q \
               WHERE q.status = 'queued' AND q.not_before_ms <= ?2 \
                 AND CASE q.kind \
                   WHEN 'agent' THEN (SELECT count(*) FROM {RUNS} l \
                       WHERE l.kind = 'agent' AND (l.status = 'claimed' OR l.status = 'running')) < ?4 \
                     AND NOT EXISTS (SELECT 1 FROM {RUNS} s WHERE s.session_id = q.session_id \
                       AND s.kind = 'agent' AND (s.status = 'claimed' OR s.status = 'running')) \
                   ELSE (SELECT count(*) FROM {RUNS} l \
                       WHERE l.kind = 'script' AND (l.status = 'claimed' OR l.status = 'running')) < ?5 \
                 END \
               ORDER BY q.queue DESC, q.created_at_ms, q.run_id LIMIT 1) \
             RETURNING {COLUMNS}"
        );
        let mut rows = self
            .db
            .transaction(vec![Statement::new(
                sql,
                vec![
                    owner.into(),
                    now.into(),
                    lease_ms.into(),
                    i64::from(caps.agent).into(),
                    i64::from(caps.script).into(),
                ],
            )])
            .await?;
        first(rows.pop())
    }

    /// `claimed → running`: the turn's accept transaction carries it, so a
    /// run is running exactly when its prompt was accepted.
    pub fn start_statement(run_id: &str, now: i64) -> Statement {
        Statement::new(
            format!(
                "UPDATE {RUNS} SET status = 'running', started_at_ms = coalesce(started_at_ms, ?2), \
                 updated_at_ms = ?2 WHERE run_id = ?1 AND status = 'claimed' AND cancel_requested = 0"
            ),
            vec![run_id.into(), now.into()],
        )
        .expect_changes(1)
    }

    pub async fn start(&self, run_id: &str, now: i64) -> Result<bool, DbError> {
        match self
            .db
            .transaction(vec![Self::start_statement(run_id, now)])
            .await
        {
            Ok(_) => Ok(true),
            Err(DbError::ExpectedChanges { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Ends a live run, or, for a failure with `retry_at`, queues it again
    /// not before then (keeping the error). A run asked to stop ends
    /// `canceled` whatever it answered (canceled is sticky) and keeps no
    /// output.
    pub fn finish_statement(
        run_id: &str,
        finish: &Finish,
        retry_at: Option<i64>,
        now: i64,
    ) -> Statement {
        if *finish == Finish::AwaitChildren {
            return Self::await_children_statement(run_id, now);
        }
        if let Finish::Continue(input) = finish {
            return Self::continue_statement(run_id, input, now);
        }
        let (status, output, error) = match finish {
            Finish::AwaitChildren | Finish::Continue(_) => ("waiting", None, None),
            Finish::Succeeded(v) => ("succeeded", Some(v), None),
            Finish::Failed(e) if retry_at.is_some() => ("queued", None, Some(e)),
            Finish::Failed(e) => ("failed", None, Some(e)),
            Finish::Canceled => ("canceled", None, None),
        };
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "UPDATE {RUNS} SET \
                   status = CASE WHEN cancel_requested = 1 THEN 'canceled' ELSE ?2 END, \
                   output_json = CASE WHEN cancel_requested = 1 THEN NULL ELSE ?3 END, \
                   error_json = CASE WHEN cancel_requested = 1 THEN NULL ELSE ?4 END, \
                   lease_owner = NULL, lease_expires_at_ms = NULL, \
                   started_at_ms = coalesce(started_at_ms, ?5), \
                   not_before_ms = coalesce(?6, not_before_ms), \
                   finished_at_ms = CASE WHEN cancel_requested = 0 AND ?2 = 'queued' THEN NULL \
                     ELSE ?5 END, \
                   updated_at_ms = ?5 \
                 WHERE run_id = ?1 AND (status = 'claimed' OR status = 'running')"
            )
        });
        Statement::new(
            SQL.as_str(),
            vec![
                run_id.into(),
                status.into(),
                opt_json_text(output),
                opt_json_text(error),
                now.into(),
                retry_at.into(),
            ],
        )
    }

    /// A live run goes straight back to the queue with a new input (an
    /// obligation's continuation); its next claim is not one of its
    /// attempts (the retry budget stays what it was). A run asked to stop
    /// is canceled instead.
    fn continue_statement(run_id: &str, input: &Value, now: i64) -> Statement {
        Statement::new(
            format!(
                "UPDATE {RUNS} SET \
                   status = CASE WHEN cancel_requested = 1 THEN 'canceled' ELSE 'queued' END, \
                   finished_at_ms = CASE WHEN cancel_requested = 1 THEN ?3 ELSE NULL END, \
                   input_json = ?2, not_before_ms = 0, lease_owner = NULL, \
                   max_attempts = max_attempts + 1, \
                   lease_expires_at_ms = NULL, updated_at_ms = ?3 \
                 WHERE run_id = ?1 AND (status = 'claimed' OR status = 'running')"
            ),
            vec![run_id.into(), json_text(input), now.into()],
        )
    }

    /// Records a typed child's result while it runs (a later
    /// `return_result` replaces an earlier one); false when the run is not
    /// live.
    pub async fn set_result(
        &self,
        run_id: &str,
        result: &Value,
        now: i64,
    ) -> Result<bool, DbError> {
        self.update_one(Statement::new(
            format!(
                "UPDATE {RUNS} SET result_json = ?2, updated_at_ms = ?3 \
                     WHERE run_id = ?1 AND (status = 'claimed' OR status = 'running')"
            ),
            vec![run_id.into(), json_text(result), now.into()],
        ))
        .await
    }

    /// The obligations a run ended with and could not meet, recorded with
    /// its end.
    pub fn unmet_statement(run_id: &str, unmet: &Value) -> Statement {
        Statement::new(
            format!("UPDATE {RUNS} SET obligations_json = ?2 WHERE run_id = ?1"),
            vec![run_id.into(), json_text(unmet)],
        )
    }

    /// Ends a live run and answers it as read back (None when it was not
    /// live: someone else ended it).
    pub async fn finish(
        &self,
        run_id: &str,
        finish: &Finish,
        retry_at: Option<i64>,
        extra: Vec<Statement>,
        now: i64,
    ) -> Result<Option<Run>, DbError> {
        let mut statements = vec![Self::finish_statement(run_id, finish, retry_at, now)];
        statements.extend(extra);
        statements.push(self.select(run_id));
        let mut rows = self.db.transaction(statements).await?;
        let changed = rows.first().map(|r| r.changes).unwrap_or(0);
        let run = first(rows.pop())?;
        Ok(if changed == 1 { run } else { None })
    }

    /// Runs one UPDATE on its own; true when it changed exactly one row.
    async fn update_one(&self, statement: Statement) -> Result<bool, DbError> {
        let rows = self.db.transaction(vec![statement]).await?;
        Ok(rows.first().is_some_and(|r| r.changes == 1))
    }

    fn select(&self, run_id: &str) -> Statement {
        Statement::new(
            format!("SELECT {COLUMNS} FROM {RUNS} WHERE run_id = ?1"),
            vec![run_id.into()],
        )
    }

    /// A live run goes back to `queued` not before `not_before` (a retry),
    /// keeping its attempt count and the error that caused it. A run asked
    /// to stop is canceled instead.
    pub async fn requeue(
        &self,
        run_id: &str,
        not_before: i64,
        error: Option<&Value>,
        now: i64,
    ) -> Result<bool, DbError> {
        self.update_one(Statement::new(
            format!(
                "UPDATE {RUNS} SET \
                       status = CASE WHEN cancel_requested = 1 THEN 'canceled' ELSE 'queued' END, \
                       finished_at_ms = CASE WHEN cancel_requested = 1 THEN ?3 ELSE NULL END, \
                       not_before_ms = ?2, error_json = coalesce(?4, error_json), \
                       lease_owner = NULL, lease_expires_at_ms = NULL, updated_at_ms = ?3 \
                     WHERE run_id = ?1 AND (status = 'claimed' OR status = 'running')"
            ),
            vec![
                run_id.into(),
                not_before.into(),
                now.into(),
                opt_json_text(error),
            ],
        ))
        .await
    }

    /// A claim that could not start (its session was busy with a turn from
    /// the other door) goes back as if it had never been claimed.
    pub async fn release(&self, run_id: &str, now: i64) -> Result<bool, DbError> {
        self.update_one(Statement::new(
            format!(
                "UPDATE {RUNS} SET \
                       status = CASE WHEN cancel_requested = 1 THEN 'canceled' ELSE 'queued' END, \
                       finished_at_ms = CASE WHEN cancel_requested = 1 THEN ?2 ELSE NULL END, \
                       attempt = max(attempt - 1, 0), lease_owner = NULL, \
                       lease_expires_at_ms = NULL, updated_at_ms = ?2 \
                     WHERE run_id = ?1 AND status = 'claimed'"
            ),
            vec![run_id.into(), now.into()],
        ))
        .await
    }

    /// How many turns of a session wait in the queue.
    pub async fn queued_turns(&self, session_id: &str) -> Result<u64, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT count(*) FROM {RUNS} WHERE session_id = ?1 AND kind = 'agent' \
                     AND status = 'queued'"
                ),
                vec![session_id.into()],
            )
            .await?;
        agentos_schema::row::count(rows, RUNS)
    }

    /// Extends the lease of every live run `owner` works.
    pub async fn renew(&self, owner: &str, until: i64) -> Result<u64, DbError> {
        let rows = self
            .db
            .transaction(vec![Statement::new(
                format!(
                    "UPDATE {RUNS} SET lease_expires_at_ms = ?2 WHERE lease_owner = ?1 \
                     AND (status = 'claimed' OR status = 'running')"
                ),
                vec![owner.into(), until.into()],
            )])
            .await?;
        Ok(rows.first().map(|r| r.changes).unwrap_or(0))
    }

    /// Live runs whose lease ended before `now` (every live run, with
    /// `now = i64::MAX`: the start of a process that holds the store).
    pub async fn lapsed(&self, now: i64) -> Result<Vec<Run>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM {RUNS} \
                     WHERE (status = 'claimed' OR status = 'running') AND lease_expires_at_ms < ?1"
                ),
                vec![now.into()],
            )
            .await?;
        decode_all(rows)
    }

    /// Recovers a live run nobody works any more, guarded by the lease it
    /// was read with: a claimed run, and a running script (it replays its
    /// journal), go back to `queued`; a running turn reached its adapter, so
    /// it fails with `error` and is never resent. A run asked to stop ends
    /// canceled.
    pub async fn recover(&self, run: &Run, error: &Value, now: i64) -> Result<bool, DbError> {
        let requeue = run.status == RunStatus::Claimed || run.kind == RunKind::Script;
        let sql = if requeue {
            format!(
                "UPDATE {RUNS} SET \
                   status = CASE WHEN cancel_requested = 1 THEN 'canceled' ELSE 'queued' END, \
                   finished_at_ms = CASE WHEN cancel_requested = 1 THEN ?4 ELSE NULL END, \
                   lease_owner = NULL, lease_expires_at_ms = NULL, updated_at_ms = ?4 \
                 WHERE run_id = ?1 AND status = ?2 AND lease_expires_at_ms IS ?3"
            )
        } else {
            format!(
                "UPDATE {RUNS} SET \
                   status = CASE WHEN cancel_requested = 1 THEN 'canceled' ELSE 'failed' END, \
                   error_json = CASE WHEN cancel_requested = 1 THEN NULL ELSE ?5 END, \
                   finished_at_ms = ?4, lease_owner = NULL, lease_expires_at_ms = NULL, \
                   updated_at_ms = ?4 \
                 WHERE run_id = ?1 AND status = ?2 AND lease_expires_at_ms IS ?3"
            )
        };
        let mut params: Vec<SqlValue> = vec![
            run.run_id.as_str().into(),
            run.status.as_str().into(),
            run.lease_expires_at_ms.into(),
            now.into(),
        ];
        if !requeue {
            params.push(json_text(error));
        }
        self.update_one(Statement::new(sql, params)).await
    }

    /// How many runs are live, per kind (for `vm/status` and tests).
    pub async fn live_counts(&self) -> Result<(u64, u64), DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT count(*) FILTER (WHERE kind = 'agent'), \
                            count(*) FILTER (WHERE kind = 'script') FROM {RUNS} \
                     WHERE status = 'claimed' OR status = 'running'"
                ),
                vec![],
            )
            .await?;
        let mut row = Row::first(rows, RUNS, 2)?;
        Ok((row.uint(0)?, row.uint(1)?))
    }
}
