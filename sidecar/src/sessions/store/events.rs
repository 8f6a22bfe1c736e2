//! The event log: appends cut into multi-row inserts of cached shapes,
//! compare-and-set on the session's history counters, retention of the
//! oldest events within the history budget, the read-back after a commit,
//! history pages, subscription replay and the updates a continuation is
//! built from.

use agentos_protocol::session::{Actor, EventKind, StoredEvent};
use agentos_schema::{DbError, Rows, SqlValue, Statement};
use serde_json::Value;

use super::decode::{decode_event, texts, Row, EVENTS};
use super::{SessionRow, SessionStore};

/// Rows per multi-row INSERT at most (a power of two); keeps bound
/// parameters far below SQLite's cap.
const INSERT_CHUNK: usize = 512;

const EVENT_COLUMNS: &str = "session_id, sequence, occurred_at_ms, event_kind, correlation_id, \
    payload_json, outcome_status, terminal_reason, actor_kind, actor_account, actor_signer";

/// An event to append; the store assigns its sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    pub kind: EventKind,
    pub correlation_id: Option<String>,
    pub outcome_status: Option<&'static str>,
    pub terminal_reason: Option<String>,
    pub actor: Actor,
    pub payload_json: String,
}

impl NewEvent {
    pub fn update(actor: Actor, payload: &Value) -> NewEvent {
        NewEvent {
            kind: EventKind::SessionUpdate,
            correlation_id: None,
            outcome_status: None,
            terminal_reason: None,
            actor,
            payload_json: payload.to_string(),
        }
    }

    /// A session update kept exactly as the agent sent it.
    pub fn raw_update(actor: Actor, payload_json: String) -> NewEvent {
        NewEvent {
            kind: EventKind::SessionUpdate,
            correlation_id: None,
            outcome_status: None,
            terminal_reason: None,
            actor,
            payload_json,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.payload_json.len() as u64
    }
}

/// The history counters a writer keeps in memory between commits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistoryCounters {
    pub latest_sequence: u64,
    pub oldest_retained_sequence: u64,
    pub retained_event_count: u64,
    pub retained_event_bytes: u64,
}

impl HistoryCounters {
    /// Events and bytes that must go for `incoming` more events of
    /// `incoming_bytes` to fit the budget; `(0, 0)` when they fit.
    pub fn excess(
        &self,
        incoming: u64,
        incoming_bytes: u64,
        max_events: u64,
        max_bytes: u64,
    ) -> (u64, u64) {
        (
            (self.retained_event_count + incoming).saturating_sub(max_events),
            (self.retained_event_bytes + incoming_bytes).saturating_sub(max_bytes),
        )
    }
}

impl From<&SessionRow> for HistoryCounters {
    fn from(row: &SessionRow) -> Self {
        HistoryCounters {
            latest_sequence: row.latest_sequence,
            oldest_retained_sequence: row.oldest_retained_sequence,
            retained_event_count: row.retained_event_count,
            retained_event_bytes: row.retained_event_bytes,
        }
    }
}

/// Oldest events to drop so that an append fits the retention budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prune {
    /// Delete every retained event with a sequence below this.
    pub before_sequence: u64,
    pub events: u64,
    pub bytes: u64,
}

/// One page of history.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryPage {
    pub events: Vec<StoredEvent>,
    pub has_more_before: bool,
    pub has_more_after: bool,
}

/// What an event row's INSERT text depends on: the closed-vocabulary
/// values written as SQL literals and which optional texts are bound.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct RowShape {
    kind: EventKind,
    outcome_status: Option<&'static str>,
    actor_kind: &'static str,
    correlation_id: bool,
    terminal_reason: bool,
    actor_account: bool,
    actor_signer: bool,
}

impl RowShape {
    fn of(event: &NewEvent) -> RowShape {
        let (actor_account, actor_signer) = match &event.actor {
            Actor::User { account, signer } => (account.is_some(), signer.is_some()),
            _ => (false, false),
        };
        RowShape {
            kind: event.kind,
            outcome_status: event.outcome_status,
            actor_kind: event.actor.kind(),
            correlation_id: event.correlation_id.is_some(),
            terminal_reason: event.terminal_reason.is_some(),
            actor_account,
            actor_signer,
        }
    }
}

/// Rows for the next INSERT of a run with `left` rows: the largest power of
/// two that fits, at most `INSERT_CHUNK`.
fn statement_rows(left: usize) -> usize {
    let cap = left.min(INSERT_CHUNK);
    1 << (usize::BITS - 1 - cap.leading_zeros())
}

/// One multi-row INSERT of `rows` events of one shape. `?1` is the session
/// and `?2` the time, bound once; each row binds its sequence, payload and
/// size plus the optional texts its shape has. The closed-vocabulary columns
/// are literals from the code's own enums, never from input.
fn insert_events(
    session_id: &str,
    shape: RowShape,
    sequence: &mut u64,
    now: i64,
    events: impl Iterator<Item = NewEvent>,
    rows: usize,
) -> Statement {
    let mut params = Vec::with_capacity(2 + rows * 3);
    params.push(SqlValue::from(session_id));
    params.push(SqlValue::Integer(now));
    for event in events {
        // The table does not check payloads (core migration 13): every one
        // was checked or rendered by serde before it came here.
        debug_assert!(
            serde_json::from_str::<serde::de::IgnoredAny>(&event.payload_json).is_ok(),
            "an event payload that is not JSON: {}",
            event.payload_json
        );
        let bytes = event.bytes() as i64;
        *sequence += 1;
        params.push(SqlValue::Integer(*sequence as i64));
        params.extend(event.correlation_id.map(SqlValue::Text));
        // Payloads move into the parameters: no copy of the event bodies.
        params.push(SqlValue::Text(event.payload_json));
        params.push(SqlValue::Integer(bytes));
        params.extend(event.terminal_reason.map(SqlValue::Text));
        if let Actor::User { account, signer } = event.actor {
            params.extend(account.map(SqlValue::Text));
            params.extend(signer.map(SqlValue::Text));
        }
    }
    Statement::new(insert_sql(shape, rows), params).expect_changes(rows as u64)
}

/// The text of [`insert_events`]'s statement, rendered once per shape and
/// size and kept for the life of the process. A shape is an event kind,
/// its actor's kind, an outcome from a closed list and which optional texts
/// are bound (a few dozen that the CHECKs accept), and the sizes are the ten
/// powers of two up to `INSERT_CHUNK`; one shape's ten texts come to about
/// 80 KiB, so the texts kept are bounded (a few MiB if every shape were
/// written, a few hundred KiB for the handful a sidecar writes).
fn insert_sql(shape: RowShape, rows: usize) -> &'static str {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Texts = Mutex<HashMap<(RowShape, usize), &'static str>>;
    static TEXTS: OnceLock<Texts> = OnceLock::new();
    let texts = TEXTS.get_or_init(Texts::default);
    let mut texts = texts
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    texts
        .entry((shape, rows))
        .or_insert_with(|| Box::leak(render_insert_sql(shape, rows).into_boxed_str()))
}

fn render_insert_sql(shape: RowShape, rows: usize) -> String {
    use std::fmt::Write;
    fn optional(sql: &mut String, bound: bool, next: &mut usize) {
        if bound {
            let _ = write!(sql, ",?{next}");
            *next += 1;
        } else {
            sql.push_str(",NULL");
        }
    }
    let mut sql = String::with_capacity(300 + rows * 64);
    sql.push_str(
        "INSERT INTO agentos_core_events (session_id, sequence, occurred_at_ms, \
         acp_protocol_version, event_kind, correlation_id, payload_json, payload_bytes, \
         outcome_status, terminal_reason, actor_kind, actor_account, actor_signer) VALUES ",
    );
    let mut next = 3;
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        let _ = write!(sql, "(?1,?{next},?2,1,'{}'", shape.kind.as_str());
        next += 1;
        optional(&mut sql, shape.correlation_id, &mut next);
        let _ = write!(sql, ",?{next},?{}", next + 1);
        next += 2;
        match shape.outcome_status {
            Some(status) => {
                let _ = write!(sql, ",'{status}'");
            }
            None => sql.push_str(",NULL"),
        }
        optional(&mut sql, shape.terminal_reason, &mut next);
        let _ = write!(sql, ",'{}'", shape.actor_kind);
        optional(&mut sql, shape.actor_account, &mut next);
        optional(&mut sql, shape.actor_signer, &mut next);
        sql.push(')');
    }
    sql
}

impl SessionStore {
    /// Statements that append `events` after `counters.latest_sequence`,
    /// dropping `prune` first, and update the counters; compare-and-set on
    /// the latest sequence so a stale writer fails instead of forking history.
    /// The last statement reads the new rows back.
    pub fn append_statements(
        session_id: &str,
        counters: &HistoryCounters,
        prune: Prune,
        events: Vec<NewEvent>,
        now: i64,
    ) -> (Vec<Statement>, HistoryCounters) {
        let k = events.len() as u64;
        let bytes: u64 = events.iter().map(NewEvent::bytes).sum();
        let next = HistoryCounters {
            latest_sequence: counters.latest_sequence + k,
            oldest_retained_sequence: if prune.events > 0 {
                prune.before_sequence
            } else {
                counters.oldest_retained_sequence
            },
            retained_event_count: counters.retained_event_count - prune.events + k,
            retained_event_bytes: counters.retained_event_bytes - prune.bytes + bytes,
        };
        let mut statements = Vec::with_capacity(3 + events.len() / INSERT_CHUNK + 8);
        if prune.events > 0 {
            statements.push(
                Statement::new(
                    "DELETE FROM agentos_core_events WHERE session_id = ?1 AND sequence < ?2",
                    vec![
                        session_id.into(),
                        SqlValue::Integer(prune.before_sequence as i64),
                    ],
                )
                .expect_changes(prune.events),
            );
        }
        statements.push(
            Statement::new(
                "UPDATE agentos_core_sessions SET latest_sequence = ?3, \
                   oldest_retained_sequence = ?4, retained_event_count = ?5, \
                   retained_event_bytes = ?6, updated_at_ms = max(updated_at_ms, ?7) \
                 WHERE session_id = ?1 AND latest_sequence = ?2",
                vec![
                    session_id.into(),
                    SqlValue::Integer(counters.latest_sequence as i64),
                    SqlValue::Integer(next.latest_sequence as i64),
                    SqlValue::Integer(next.oldest_retained_sequence as i64),
                    SqlValue::Integer(next.retained_event_count as i64),
                    SqlValue::Integer(next.retained_event_bytes as i64),
                    now.into(),
                ],
            )
            .expect_changes(1),
        );
        let mut sequence = counters.latest_sequence;
        let mut events = events.into_iter().peekable();
        while let Some(first) = events.peek() {
            // A run of rows of one shape, cut into power-of-two statements:
            // every statement text is one of a few cached shapes, so a batch
            // never pays for preparing a new one.
            let shape = RowShape::of(first);
            let mut run = Vec::new();
            while let Some(event) = events.next_if(|e| RowShape::of(e) == shape) {
                run.push(event);
            }
            let mut run = run.into_iter();
            while run.len() > 0 {
                let rows = statement_rows(run.len());
                let chunk = run.by_ref().take(rows);
                statements.push(insert_events(
                    session_id,
                    shape,
                    &mut sequence,
                    now,
                    chunk,
                    rows,
                ));
            }
        }
        (statements, next)
    }

    pub fn read_back_statement(session_id: &str, after: u64) -> Statement {
        Statement::new(
            format!(
                "SELECT {EVENT_COLUMNS} FROM agentos_core_events \
                 WHERE session_id = ?1 AND sequence > ?2 ORDER BY sequence"
            ),
            vec![session_id.into(), SqlValue::Integer(after as i64)],
        )
    }

    pub fn decode_events(rows: Rows) -> Result<Vec<StoredEvent>, DbError> {
        rows.rows.into_iter().map(decode_event).collect()
    }

    /// The retention read: finds the oldest events to drop so that `incoming`
    /// more events and `incoming_bytes` more bytes fit the budget. Reads the
    /// oldest events in bounded batches (at least the events needed, rounded
    /// up to 256) until both budgets are met, however large the events: one
    /// query in the common case, more only when a few events hold many bytes
    /// or many small events must go for a large batch. Each event is read at
    /// most once.
    pub async fn plan_prune(
        &self,
        session_id: &str,
        counters: &HistoryCounters,
        incoming: u64,
        incoming_bytes: u64,
        max_events: u64,
        max_bytes: u64,
    ) -> Result<Prune, DbError> {
        let (excess_events, excess_bytes) =
            counters.excess(incoming, incoming_bytes, max_events, max_bytes);
        let mut prune = Prune {
            before_sequence: counters.oldest_retained_sequence,
            events: 0,
            bytes: 0,
        };
        if excess_events == 0 && excess_bytes == 0 {
            return Ok(Prune::default());
        }
        loop {
            let remaining = counters.retained_event_count.saturating_sub(prune.events);
            if remaining == 0 {
                return Ok(prune);
            }
            let batch = excess_events
                .saturating_sub(prune.events)
                .max(256)
                .min(remaining);
            let rows = self
                .db
                .query(
                    "SELECT sequence, payload_bytes FROM agentos_core_events \
                     WHERE session_id = ?1 AND sequence >= ?2 ORDER BY sequence LIMIT ?3",
                    vec![
                        session_id.into(),
                        SqlValue::Integer(prune.before_sequence as i64),
                        SqlValue::Integer(batch as i64),
                    ],
                )
                .await?;
            if rows.rows.is_empty() {
                return Ok(prune);
            }
            for values in rows.rows {
                if prune.events >= excess_events && prune.bytes >= excess_bytes {
                    return Ok(prune);
                }
                let mut row = Row::new(EVENTS, values, 2)?;
                prune.events += 1;
                prune.bytes += row.uint(1)?;
                prune.before_sequence = row.uint(0)? + 1;
            }
            if prune.events >= excess_events && prune.bytes >= excess_bytes {
                return Ok(prune);
            }
        }
    }

    pub async fn history(
        &self,
        session_id: &str,
        before: Option<u64>,
        after: Option<u64>,
        limit: u64,
    ) -> Result<HistoryPage, DbError> {
        let (sql, bound) = match (before, after) {
            (_, Some(after)) => (
                format!(
                    "SELECT {EVENT_COLUMNS} FROM agentos_core_events \
                     WHERE session_id = ?1 AND sequence > ?2 ORDER BY sequence ASC LIMIT ?3"
                ),
                after,
            ),
            (Some(before), None) => (
                format!(
                    "SELECT {EVENT_COLUMNS} FROM agentos_core_events \
                     WHERE session_id = ?1 AND sequence < ?2 ORDER BY sequence DESC LIMIT ?3"
                ),
                before,
            ),
            // Without a cursor, the newest page.
            (None, None) => (
                format!(
                    "SELECT {EVENT_COLUMNS} FROM agentos_core_events \
                     WHERE session_id = ?1 AND sequence < ?2 ORDER BY sequence DESC LIMIT ?3"
                ),
                u64::MAX >> 11,
            ),
        };
        let rows = self
            .db
            .query(
                &sql,
                vec![
                    session_id.into(),
                    // A cursor past i64 (a host may send u64::MAX) is past
                    // every sequence, not a negative one.
                    SqlValue::Integer(i64::try_from(bound).unwrap_or(i64::MAX)),
                    SqlValue::Integer(limit as i64 + 1),
                ],
            )
            .await?;
        let mut events = Self::decode_events(rows)?;
        let overflow = events.len() as u64 > limit;
        events.truncate(limit as usize);
        if after.is_none() {
            events.reverse();
        }
        let first = events.first().map(|e| e.sequence);
        let last = events.last().map(|e| e.sequence);
        let meta = self.get_session(session_id).await?;
        let (oldest, latest) = meta
            .map(|m| (m.oldest_retained_sequence, m.latest_sequence))
            .unwrap_or((1, 0));
        let (has_more_before, has_more_after) = if after.is_some() {
            (
                first.map_or(after.unwrap_or(0) >= oldest, |f| f > oldest),
                overflow,
            )
        } else {
            (overflow, last.map_or(bound <= latest, |l| l < latest))
        };
        Ok(HistoryPage {
            events,
            has_more_before,
            has_more_after,
        })
    }

    /// Events after `after` up to and including `upto`, oldest first, for
    /// subscription replay.
    pub async fn events_between(
        &self,
        session_id: &str,
        after: u64,
        upto: u64,
        limit: u64,
    ) -> Result<Vec<StoredEvent>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {EVENT_COLUMNS} FROM agentos_core_events \
                     WHERE session_id = ?1 AND sequence > ?2 AND sequence <= ?3 \
                     ORDER BY sequence ASC LIMIT ?4"
                ),
                vec![
                    session_id.into(),
                    SqlValue::Integer(i64::try_from(after).unwrap_or(i64::MAX)),
                    SqlValue::Integer(i64::try_from(upto).unwrap_or(i64::MAX)),
                    SqlValue::Integer(limit as i64),
                ],
            )
            .await?;
        Self::decode_events(rows)
    }

    /// The newest `limit` session updates, newest first, for continuations.
    pub async fn recent_updates(
        &self,
        session_id: &str,
        limit: u64,
    ) -> Result<Vec<String>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT payload_json FROM agentos_core_events \
                 WHERE session_id = ?1 AND event_kind = 'session_update' \
                 ORDER BY sequence DESC LIMIT ?2",
                vec![session_id.into(), SqlValue::Integer(limit as i64)],
            )
            .await?;
        texts(rows, EVENTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(actor: Actor, i: usize) -> NewEvent {
        NewEvent::raw_update(actor, format!(r#"{{"sessionUpdate":"plan","i":{i}}}"#))
    }

    #[test]
    fn statements_take_the_largest_power_of_two_that_fits() {
        let sizes: Vec<usize> = [1, 2, 3, 511, 512, 513, 1000]
            .into_iter()
            .map(statement_rows)
            .collect();
        assert_eq!(sizes, [1, 2, 2, 256, 512, 512, 512]);
    }

    /// Runs of one row shape are cut into power-of-two inserts, in order,
    /// with every sequence once and the bodies moved in unchanged.
    #[test]
    fn appends_are_runs_of_one_shape_in_cached_sizes() {
        let user = || Actor::User {
            account: Some("acct".into()),
            signer: None,
        };
        let mut events: Vec<NewEvent> = (0..3).map(|i| update(Actor::Agent, i)).collect();
        events.push(update(user(), 3));
        events.extend((4..604).map(|i| update(Actor::Agent, i)));
        let counters = HistoryCounters {
            latest_sequence: 10,
            oldest_retained_sequence: 1,
            retained_event_count: 10,
            retained_event_bytes: 100,
        };
        let (statements, next) =
            SessionStore::append_statements("s", &counters, Prune::default(), events, 7);
        assert_eq!(next.latest_sequence, 614);
        assert_eq!(next.retained_event_count, 614);
        let inserts: Vec<&Statement> = statements
            .iter()
            .filter(|s| s.sql.starts_with("INSERT INTO agentos_core_events"))
            .collect();
        let rows: Vec<u64> = inserts.iter().filter_map(|s| s.expected_changes).collect();
        assert_eq!(rows, [2, 1, 1, 512, 64, 16, 8]);
        // Sequences are bound in order after `?1` (session) and `?2` (time);
        // the user row also binds its account.
        let mut sequences = Vec::new();
        let mut bodies = Vec::new();
        for insert in &inserts {
            assert_eq!(insert.params[0], SqlValue::from("s"));
            assert_eq!(insert.params[1], SqlValue::Integer(7));
            let per_row = if insert.sql.contains("'user'") { 4 } else { 3 };
            for row in insert.params[2..].chunks(per_row) {
                sequences.push(row[0].clone());
                bodies.push(row[1].clone());
            }
        }
        let expected: Vec<SqlValue> = (11..=614).map(SqlValue::Integer).collect();
        assert_eq!(sequences, expected);
        assert_eq!(
            bodies[3],
            SqlValue::from(r#"{"sessionUpdate":"plan","i":3}"#)
        );
        assert_eq!(
            bodies[603],
            SqlValue::from(r#"{"sessionUpdate":"plan","i":603}"#)
        );
        assert!(inserts[2].sql.contains("'user',?"), "{}", inserts[2].sql);
        assert!(!inserts[0].sql.contains("'user'"));
        // Every statement binds exactly the parameters its text numbers.
        for insert in &inserts {
            let highest = insert
                .sql
                .split('?')
                .skip(1)
                .filter_map(|rest| {
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse::<usize>().ok()
                })
                .max();
            assert_eq!(highest, Some(insert.params.len()), "{}", insert.sql);
        }
    }

    /// A shape's text is rendered once and kept; another shape or size
    /// has its own.
    #[test]
    fn insert_texts_are_rendered_once_per_shape_and_size() {
        let agent = RowShape::of(&update(Actor::Agent, 0));
        let user = RowShape::of(&update(
            Actor::User {
                account: Some("a".into()),
                signer: Some("s".into()),
            },
            0,
        ));
        let first = insert_sql(agent, 8);
        assert!(std::ptr::eq(first, insert_sql(agent, 8)));
        assert_eq!(first, render_insert_sql(agent, 8));
        assert_ne!(insert_sql(agent, 4), first);
        assert_ne!(insert_sql(user, 8), first);
        assert_eq!(insert_sql(user, 1).matches('?').count(), 7);
    }
}
