//! SQL of waiting and of what a run keeps as it goes: parking, the clock
//! that wakes parked runs, signals delivered exactly once, the journal
//! (capped on the run's row) and plans.

use agentos_schema::row::{corrupt, Row};
use agentos_schema::{DbError, Statement};
use serde_json::Value;

use super::{first, json_text, opt_json_text, RunStore, COLUMNS, JOURNAL, NEVER, RUNS};
use crate::runs::types::{EventWait, JournalRow, Run, RunStatus, RunWait};

impl RunStore {
    /// A live run parks: `waiting` with `wait`, woken by the clock at
    /// `wake_at` (if any) and by the event waits inserted with it. A run
    /// asked to stop is canceled instead. Answers the parked row as this
    /// transaction left it (none when it was canceled instead).
    pub async fn park(
        &self,
        run_id: &str,
        wait: &RunWait,
        events: &[EventWait],
        now: i64,
    ) -> Result<Option<Run>, DbError> {
        let wait_json = serde_json::to_value(wait).unwrap_or(Value::Null);
        let mut statements = vec![Statement::new(
            format!(
                "UPDATE {RUNS} SET \
                   status = CASE WHEN cancel_requested = 1 THEN 'canceled' ELSE 'waiting' END, \
                   wait_json = CASE WHEN cancel_requested = 1 THEN NULL ELSE ?2 END, \
                   finished_at_ms = CASE WHEN cancel_requested = 1 THEN ?4 ELSE NULL END, \
                   not_before_ms = ?3, lease_owner = NULL, lease_expires_at_ms = NULL, \
                   updated_at_ms = ?4 \
                 WHERE run_id = ?1 AND (status = 'claimed' OR status = 'running')"
            ),
            vec![
                run_id.into(),
                json_text(&wait_json),
                wait.wake_at.unwrap_or(NEVER).into(),
                now.into(),
            ],
        )];
        for e in events {
            statements.push(Statement::new(
                format!(
                    "INSERT INTO agentos_core_run_event_waits \
                       (wait_id, run_id, signal, match_json, created_at_ms) \
                     SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS \
                       (SELECT 1 FROM {RUNS} WHERE run_id = ?2 AND status = 'waiting') \
                     ON CONFLICT (wait_id) DO NOTHING"
                ),
                vec![
                    e.wait_id.as_str().into(),
                    run_id.into(),
                    e.signal.clone().into(),
                    opt_json_text(e.match_json.as_ref()),
                    now.into(),
                ],
            ));
        }
        statements.push(self.select(run_id));
        let mut rows = self.db.transaction(statements).await?;
        Ok(first(rows.pop())?.filter(|r| r.status == RunStatus::Waiting))
    }

    /// Moves every waiting run whose clock has come (a sleep's end, an
    /// event wait's timeout) back to `queued`, its waits removed; answers
    /// how many woke.
    pub async fn wake_due(&self, now: i64) -> Result<u64, DbError> {
        let rows = self
            .db
            .transaction(vec![
                Statement::new(
                    format!(
                        "DELETE FROM agentos_core_run_event_waits WHERE run_id IN \
                         (SELECT run_id FROM {RUNS} WHERE status = 'waiting' AND not_before_ms <= ?1)"
                    ),
                    vec![now.into()],
                ),
                Statement::new(
                    format!(
                        "UPDATE {RUNS} SET status = 'queued', wait_json = NULL, updated_at_ms = ?1 \
                         WHERE status = 'waiting' AND not_before_ms <= ?1"
                    ),
                    vec![now.into()],
                ),
            ])
            .await?;
        Ok(rows.get(1).map(|r| r.changes).unwrap_or(0))
    }

    /// The earliest clock among waiting runs, to sleep until.
    pub async fn next_timer(&self) -> Result<Option<i64>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT min(not_before_ms) FROM {RUNS} WHERE status = 'waiting' \
                     AND not_before_ms < ?1"
                ),
                vec![NEVER.into()],
            )
            .await?;
        Ok(rows.scalar_i64())
    }

    /// The earliest `not_before` among queued runs that are not due yet.
    pub async fn next_queued(&self, now: i64) -> Result<Option<i64>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT min(not_before_ms) FROM {RUNS} WHERE status = 'queued' \
                     AND not_before_ms > ?1"
                ),
                vec![now.into()],
            )
            .await?;
        Ok(rows.scalar_i64())
    }

    /// Delivers `signal` to a run waiting on it, exactly once: the journal
    /// entry, the requeue and the removal of its waits are one transaction,
    /// and each is guarded so that a second signal (or a race with the
    /// clock) changes nothing. Answers whether it was delivered.
    pub async fn signal(
        &self,
        run_id: &str,
        signal: &str,
        payload: &Value,
        now: i64,
    ) -> Result<bool, DbError> {
        self.signal_from(run_id, signal, payload, None, now).await
    }

    /// [`RunStore::signal`], the journal entry naming where the signal
    /// came from (`source`, e.g. `trigger`) when given.
    pub async fn signal_from(
        &self,
        run_id: &str,
        signal: &str,
        payload: &Value,
        source: Option<&str>,
        now: i64,
    ) -> Result<bool, DbError> {
        let rows = self
            .db
            .transaction(Self::signal_statements(
                run_id, signal, payload, source, false, now,
            ))
            .await?;
        Ok(rows.first().is_some_and(|r| r.changes == 1))
    }

    /// The statements of one delivery (see [`RunStore::signal`]); the first
    /// writes the journal entry and changes one row exactly when the run
    /// took the signal. With `strict` (a trigger's wake), only an event
    /// wait takes it, and a wait without a signal only when it names no
    /// activity criteria either: a budget pause or a wait for hypermedia
    /// activity is not a trigger's to end. Callers that need the delivery
    /// in their own transaction mark the first statement
    /// [`Statement::expect_changes`].
    pub fn signal_statements(
        run_id: &str,
        signal: &str,
        payload: &Value,
        source: Option<&str>,
        strict: bool,
        now: i64,
    ) -> Vec<Statement> {
        let matching = if strict {
            "FROM agentos_core_run_event_waits w \
             WHERE w.run_id = ?1 AND (w.signal = ?2 OR (w.signal IS NULL \
               AND json_extract(coalesce(w.match_json, '{}'), '$.eventType') IS NULL \
               AND json_extract(coalesce(w.match_json, '{}'), '$.resource') IS NULL \
               AND json_extract(coalesce(w.match_json, '{}'), '$.author') IS NULL))"
        } else {
            "FROM agentos_core_run_event_waits w \
             WHERE w.run_id = ?1 AND (w.signal IS NULL OR w.signal = ?2)"
        };
        let reason = if strict {
            " AND json_extract(r.wait_json, '$.reason') = 'event'"
        } else {
            ""
        };
        vec![
            Statement::new(
                format!(
                    "INSERT INTO {JOURNAL} (run_id, seq, entry_json, created_at_ms) \
                     SELECT ?1, r.journal_seq + 1, \
                       CASE WHEN ?5 IS NULL THEN e.entry ELSE json_set(e.entry, '$.source', ?5) END, ?4 \
                     FROM {RUNS} r, (SELECT json_object('kind', 'event', 'waitId', \
                         (SELECT w.wait_id {matching} ORDER BY w.created_at_ms, w.wait_id LIMIT 1), \
                         'signal', ?2, 'payload', json(?3)) AS entry) e \
                     WHERE r.run_id = ?1 AND r.status = 'waiting'{reason} \
                       AND EXISTS (SELECT 1 {matching})"
                ),
                vec![
                    run_id.into(),
                    signal.into(),
                    json_text(payload),
                    now.into(),
                    source.map(str::to_owned).into(),
                ],
            ),
            Statement::new(
                format!(
                    "UPDATE {RUNS} SET status = 'queued', wait_json = NULL, not_before_ms = 0, \
                       journal_seq = journal_seq + 1, \
                       journal_bytes = journal_bytes + (SELECT length(CAST(entry_json AS BLOB)) \
                         FROM {JOURNAL} j WHERE j.run_id = ?1 AND j.seq = journal_seq + 1), \
                       budget_json = CASE WHEN json_extract(wait_json, '$.reason') = 'budget-pause' \
                         THEN json_remove(budget_json, '$.maxWallMs') ELSE budget_json END, \
                       updated_at_ms = ?2 \
                     WHERE run_id = ?1 AND status = 'waiting' AND EXISTS \
                       (SELECT 1 FROM {JOURNAL} j WHERE j.run_id = ?1 AND j.seq = journal_seq + 1)"
                ),
                vec![run_id.into(), now.into()],
            ),
            Statement::new(
                format!(
                    "DELETE FROM agentos_core_run_event_waits WHERE run_id = ?1 \
                     AND NOT EXISTS (SELECT 1 FROM {RUNS} WHERE run_id = ?1 AND status = 'waiting')"
                ),
                vec![run_id.into()],
            ),
        ]
    }

    /// The waits of `account_id`'s runs for hypermedia activity (no
    /// signal, some criteria), the oldest first: their runs and criteria.
    pub async fn activity_waits(&self, account_id: &str) -> Result<Vec<(String, Value)>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT w.run_id, w.match_json FROM agentos_core_run_event_waits w \
                     JOIN {RUNS} r ON r.run_id = w.run_id \
                     WHERE r.account_id = ?1 AND r.status = 'waiting' \
                       AND json_extract(r.wait_json, '$.reason') = 'event' \
                       AND w.signal IS NULL AND w.match_json IS NOT NULL \
                     ORDER BY w.created_at_ms, w.wait_id"
                ),
                vec![account_id.into()],
            )
            .await?;
        agentos_schema::row::Row::all(rows, RUNS, 2, |mut row| {
            let run_id = row.text(0)?;
            let criteria = row.opt_json(1)?.unwrap_or_default();
            Ok((run_id, criteria))
        })
    }

    /// The runs of `account_id` waiting for an event that `signal` matches
    /// as a trigger's wake would deliver it (see
    /// [`RunStore::signal_statements`]), the oldest wait first.
    pub async fn waiting_on(&self, account_id: &str, signal: &str) -> Result<Vec<String>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT w.run_id FROM agentos_core_run_event_waits w \
                     JOIN {RUNS} r ON r.run_id = w.run_id \
                     WHERE r.account_id = ?1 AND r.status = 'waiting' \
                       AND json_extract(r.wait_json, '$.reason') = 'event' \
                       AND (w.signal = ?2 OR (w.signal IS NULL \
                         AND json_extract(coalesce(w.match_json, '{{}}'), '$.eventType') IS NULL \
                         AND json_extract(coalesce(w.match_json, '{{}}'), '$.resource') IS NULL \
                         AND json_extract(coalesce(w.match_json, '{{}}'), '$.author') IS NULL)) \
                     ORDER BY w.created_at_ms, w.wait_id"
                ),
                vec![account_id.into(), signal.into()],
            )
            .await?;
        let mut out: Vec<String> = Vec::new();
        for id in agentos_schema::row::texts(rows, RUNS)? {
            if !out.contains(&id) {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// Runs of `account_id` that ended after `after` (an end time and a run
    /// id, in that order), the oldest first, at most `limit`.
    pub async fn ended_since(
        &self,
        account_id: &str,
        after: &(i64, String),
        limit: u64,
    ) -> Result<Vec<Run>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM {RUNS} WHERE finished_at_ms IS NOT NULL \
                       AND (finished_at_ms > ?2 OR (finished_at_ms = ?2 AND run_id > ?3)) \
                       AND account_id = ?1 \
                     ORDER BY finished_at_ms, run_id LIMIT ?4"
                ),
                vec![
                    account_id.into(),
                    after.0.into(),
                    after.1.as_str().into(),
                    i64::try_from(limit).unwrap_or(i64::MAX).into(),
                ],
            )
            .await?;
        super::decode_all(rows)
    }

    /// Appends journal entries, checking the run's caps on its own row in
    /// the same statement; answers their seqs, or None when a cap would be
    /// passed (nothing written).
    pub async fn journal_append(
        &self,
        run_id: &str,
        entries: &[Value],
        max_entries: u64,
        max_bytes: u64,
        now: i64,
    ) -> Result<Option<Vec<u64>>, DbError> {
        if entries.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let texts: Vec<String> = entries.iter().map(Value::to_string).collect();
        let n = texts.len() as i64;
        let bytes: i64 = texts.iter().map(|t| t.len() as i64).sum();
        let mut statements = vec![Statement::new(
            format!(
                "UPDATE {RUNS} SET journal_seq = journal_seq + ?2, \
                   journal_bytes = journal_bytes + ?3, updated_at_ms = ?6 \
                 WHERE run_id = ?1 AND journal_seq + ?2 <= ?4 AND journal_bytes + ?3 <= ?5 \
                 RETURNING journal_seq"
            ),
            vec![
                run_id.into(),
                n.into(),
                bytes.into(),
                i64::try_from(max_entries).unwrap_or(i64::MAX).into(),
                i64::try_from(max_bytes).unwrap_or(i64::MAX).into(),
                now.into(),
            ],
        )
        .expect_changes(1)];
        for (i, text) in texts.into_iter().enumerate() {
            statements.push(Statement::new(
                format!(
                    "INSERT INTO {JOURNAL} (run_id, seq, entry_json, created_at_ms) \
                     SELECT ?1, journal_seq - ?2, ?3, ?4 FROM {RUNS} WHERE run_id = ?1"
                ),
                vec![
                    run_id.into(),
                    (n - 1 - i as i64).into(),
                    text.into(),
                    now.into(),
                ],
            ));
        }
        match self.db.transaction(statements).await {
            Ok(rows) => {
                let last = rows
                    .first()
                    .and_then(|r| r.scalar_i64())
                    .and_then(|v| u64::try_from(v).ok())
                    .ok_or_else(|| corrupt(RUNS, "journal_seq was not read back"))?;
                let first = last + 1 - n as u64;
                Ok(Some((first..=last).collect()))
            }
            Err(DbError::ExpectedChanges { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A run's journal after `after`, oldest first, at most `limit`.
    pub async fn journal(
        &self,
        run_id: &str,
        after: u64,
        limit: u64,
    ) -> Result<Vec<JournalRow>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT run_id, seq, entry_json, created_at_ms FROM {JOURNAL} \
                     WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"
                ),
                vec![
                    run_id.into(),
                    i64::try_from(after).unwrap_or(i64::MAX).into(),
                    i64::try_from(limit).unwrap_or(i64::MAX).into(),
                ],
            )
            .await?;
        Row::all(rows, JOURNAL, 4, |mut r| {
            Ok(JournalRow {
                run_id: r.text(0)?,
                seq: r.uint(1)?,
                entry: r.json(2)?,
                created_at_ms: r.int(3)?,
            })
        })
    }

    /// Replaces a run's plan.
    pub async fn set_plan(&self, run_id: &str, plan: &Value, now: i64) -> Result<(), DbError> {
        self.db
            .transaction(vec![Statement::new(
                format!("UPDATE {RUNS} SET plan_json = ?2, updated_at_ms = ?3 WHERE run_id = ?1"),
                vec![run_id.into(), json_text(plan), now.into()],
            )])
            .await
            .map(drop)
    }
}
