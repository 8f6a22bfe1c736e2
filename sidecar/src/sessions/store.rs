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

use std::collections::BTreeMap;

use agentos_protocol::host::{Actor, EventKind, StoredEvent};
use agentos_schema::{DbError, Rows, SharedDatabase, SqlValue, Statement};
use serde_json::Value;

/// Rows per multi-row INSERT at most (a power of two); keeps bound
/// parameters far below SQLite's cap.
const INSERT_CHUNK: usize = 512;

const SESSION_COLUMNS: &str = "session_id, agent, acp_session_id, cwd, permission_policy, \
    additional_directories_json, env_json, mcp_servers_json, capabilities_json, agent_info_json, \
    config_revision, config_options_json, pending_preamble, title, metadata_json, state, \
    state_prompt_id, state_started_at_ms, state_error_json, latest_sequence, \
    oldest_retained_sequence, retained_event_count, retained_event_bytes, prompt_count, \
    pending_permission_count, outcome_count, created_at_ms, updated_at_ms";

const EVENT_COLUMNS: &str = "session_id, sequence, occurred_at_ms, event_kind, correlation_id, \
    payload_json, outcome_status, terminal_reason, actor_kind, actor_account, actor_signer";

/// A session's stored state, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRow {
    pub session_id: String,
    pub agent: String,
    pub acp_session_id: Option<String>,
    pub cwd: String,
    pub permission_policy: String,
    pub additional_directories: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub mcp_servers: Vec<Value>,
    pub capabilities: Option<Value>,
    pub agent_info: Option<Value>,
    pub config_revision: u64,
    pub config_options: Vec<Value>,
    pub pending_preamble: Option<String>,
    pub title: Option<String>,
    pub metadata: Option<Value>,
    pub state: String,
    pub state_prompt_id: Option<String>,
    pub state_started_at_ms: Option<i64>,
    pub state_error: Option<Value>,
    pub latest_sequence: u64,
    pub oldest_retained_sequence: u64,
    pub retained_event_count: u64,
    pub retained_event_bytes: u64,
    pub prompt_count: u64,
    pub pending_permission_count: u64,
    pub outcome_count: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// The immutable creation options of a new session.
#[derive(Clone, Debug, PartialEq)]
pub struct NewSession {
    pub session_id: String,
    pub agent: String,
    pub cwd: String,
    pub permission_policy: String,
    pub additional_directories: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub mcp_servers: Vec<Value>,
    pub title: Option<String>,
    pub metadata: Option<Value>,
}

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

/// A stored prompt record.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptRow {
    pub prompt_id: String,
    pub idempotency_key: Option<String>,
    pub input_hash: Vec<u8>,
    pub state: String,
    pub result: Option<Value>,
    pub error: Option<Value>,
}

/// A stored permission record.
#[derive(Clone, Debug, PartialEq)]
pub struct PermissionRow {
    pub request_id: String,
    pub prompt_id: String,
    pub state: String,
    pub terminal_reason: Option<String>,
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

/// The bounded collections whose oldest records are pruned to admit new ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retained {
    /// Terminal prompt records (an active prompt is never pruned).
    Prompts,
    /// Permission outcome tombstones.
    Outcomes,
}

impl Retained {
    /// Table, key column, age column and row filter.
    fn columns(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Retained::Prompts => (
                "agentos_core_prompts",
                "prompt_id",
                "completed_at_ms",
                "AND state <> 'accepted'",
            ),
            Retained::Outcomes => (
                "agentos_core_permission_outcomes",
                "request_id",
                "terminal_at_ms",
                "",
            ),
        }
    }

    /// The counter column on the session and VM rows.
    fn counter(self) -> &'static str {
        match self {
            Retained::Prompts => "prompt_count",
            Retained::Outcomes => "outcome_count",
        }
    }
}

/// One page of history.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryPage {
    pub events: Vec<StoredEvent>,
    pub has_more_before: bool,
    pub has_more_after: bool,
}

/// What bootstrap reconciliation changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reconciliation {
    pub prompts_failed: u64,
    pub permissions_terminated: u64,
    pub sessions_failed: u64,
    pub counters_repaired: u64,
}

#[derive(Clone)]
pub struct SessionStore {
    db: SharedDatabase,
}

fn pairs(rows: &Rows) -> Vec<(String, String)> {
    rows.rows
        .iter()
        .filter_map(|r| Some((text(&r[0])?, text(&r[1])?)))
        .collect()
}

fn text(v: &SqlValue) -> Option<String> {
    v.as_str().map(str::to_owned)
}

fn int(v: &SqlValue) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn uint(v: &SqlValue) -> u64 {
    u64::try_from(int(v)).unwrap_or(0)
}

fn json_col(v: &SqlValue) -> Option<Value> {
    v.as_str().and_then(|s| serde_json::from_str(s).ok())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub(crate) fn clock_ms() -> i64 {
    now_ms()
}

fn decode_session(r: &[SqlValue]) -> SessionRow {
    SessionRow {
        session_id: text(&r[0]).unwrap_or_default(),
        agent: text(&r[1]).unwrap_or_default(),
        acp_session_id: text(&r[2]),
        cwd: text(&r[3]).unwrap_or_default(),
        permission_policy: text(&r[4]).unwrap_or_default(),
        additional_directories: json_col(&r[5])
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default(),
        env: json_col(&r[6])
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default(),
        mcp_servers: json_col(&r[7])
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default(),
        capabilities: json_col(&r[8]),
        agent_info: json_col(&r[9]),
        config_revision: uint(&r[10]),
        config_options: json_col(&r[11])
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default(),
        pending_preamble: text(&r[12]),
        title: text(&r[13]),
        metadata: json_col(&r[14]),
        state: text(&r[15]).unwrap_or_default(),
        state_prompt_id: text(&r[16]),
        state_started_at_ms: r[17].as_i64(),
        state_error: json_col(&r[18]),
        latest_sequence: uint(&r[19]),
        oldest_retained_sequence: uint(&r[20]),
        retained_event_count: uint(&r[21]),
        retained_event_bytes: uint(&r[22]),
        prompt_count: uint(&r[23]),
        pending_permission_count: uint(&r[24]),
        outcome_count: uint(&r[25]),
        created_at_ms: int(&r[26]),
        updated_at_ms: int(&r[27]),
    }
}

fn take_text(v: &mut SqlValue) -> Option<String> {
    match std::mem::replace(v, SqlValue::Null) {
        SqlValue::Text(t) => Some(t),
        _ => None,
    }
}

/// Decodes an event row, moving its strings out of the row.
fn decode_event(mut r: Vec<SqlValue>) -> StoredEvent {
    if r.len() < 11 {
        r.resize(11, SqlValue::Null);
    }
    let actor = match r[8].as_str() {
        Some("user") => Actor::User {
            account: take_text(&mut r[9]),
            signer: take_text(&mut r[10]),
        },
        Some("agent") => Actor::Agent,
        _ => Actor::System,
    };
    StoredEvent {
        session_id: take_text(&mut r[0]).unwrap_or_default(),
        sequence: uint(&r[1]),
        timestamp_ms: int(&r[2]),
        kind: r[3]
            .as_str()
            .and_then(EventKind::parse)
            .unwrap_or(EventKind::SessionUpdate),
        correlation_id: take_text(&mut r[4]),
        payload_json: take_text(&mut r[5]).unwrap_or_else(|| "null".into()),
        outcome_status: take_text(&mut r[6]),
        terminal_reason: take_text(&mut r[7]),
        actor,
    }
}

/// What an event row's INSERT text depends on: the closed-vocabulary
/// values written as SQL literals and which optional texts are bound.
#[derive(Clone, Copy, PartialEq, Eq)]
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
    let mut params = Vec::with_capacity(2 + rows * 3);
    params.push(SqlValue::from(session_id));
    params.push(SqlValue::Integer(now));
    let mut next = 3;
    for (i, event) in events.enumerate() {
        let bytes = event.bytes() as i64;
        *sequence += 1;
        if i > 0 {
            sql.push(',');
        }
        let _ = write!(sql, "(?1,?{next},?2,1,'{}'", shape.kind.as_str());
        next += 1;
        params.push(SqlValue::Integer(*sequence as i64));
        optional(&mut sql, shape.correlation_id, &mut next);
        params.extend(event.correlation_id.map(SqlValue::Text));
        let _ = write!(sql, ",?{next},?{}", next + 1);
        next += 2;
        // Payloads move into the parameters: no copy of the event bodies.
        params.push(SqlValue::Text(event.payload_json));
        params.push(SqlValue::Integer(bytes));
        match shape.outcome_status {
            Some(status) => {
                let _ = write!(sql, ",'{status}'");
            }
            None => sql.push_str(",NULL"),
        }
        optional(&mut sql, shape.terminal_reason, &mut next);
        params.extend(event.terminal_reason.map(SqlValue::Text));
        let _ = write!(sql, ",'{}'", shape.actor_kind);
        optional(&mut sql, shape.actor_account, &mut next);
        optional(&mut sql, shape.actor_signer, &mut next);
        if let Actor::User { account, signer } = event.actor {
            params.extend(account.map(SqlValue::Text));
            params.extend(signer.map(SqlValue::Text));
        }
        sql.push(')');
    }
    Statement::new(sql, params).expect_changes(rows as u64)
}

fn json_text(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

impl SessionStore {
    pub fn new(db: SharedDatabase) -> Self {
        SessionStore { db }
    }

    pub fn db(&self) -> &SharedDatabase {
        &self.db
    }

    // -- sessions -----------------------------------------------------------

    pub async fn get_session(&self, session_id: &str) -> Result<Option<SessionRow>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM agentos_core_sessions WHERE session_id = ?1"
                ),
                vec![session_id.into()],
            )
            .await?;
        Ok(rows.rows.first().map(|r| decode_session(r)))
    }

    /// Inserts a session and bumps the VM session count, refusing when the
    /// count has reached `max_sessions` (compare-and-set on the counter row).
    /// Returns the VM session count after the insert, or `None` at the limit.
    pub async fn insert_session(
        &self,
        new: &NewSession,
        max_sessions: u64,
    ) -> Result<Option<u64>, DbError> {
        let now = now_ms();
        let outcome = self
            .db
            .transaction(vec![
                Statement::new(
                    "UPDATE agentos_core_vm_counters SET session_count = session_count + 1 \
                     WHERE singleton = 1 AND session_count < ?1",
                    vec![SqlValue::Integer(max_sessions as i64)],
                )
                .expect_changes(1),
                Statement::new(
                    "INSERT INTO agentos_core_sessions (session_id, agent, cwd, permission_policy, \
                     additional_directories_json, env_json, mcp_servers_json, title, metadata_json, \
                     created_at_ms, updated_at_ms) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)",
                    vec![
                        new.session_id.as_str().into(),
                        new.agent.as_str().into(),
                        new.cwd.as_str().into(),
                        new.permission_policy.as_str().into(),
                        json_text(&new.additional_directories).into(),
                        json_text(&new.env).into(),
                        json_text(&new.mcp_servers).into(),
                        new.title.clone().into(),
                        new.metadata.as_ref().map(json_text).into(),
                        now.into(),
                    ],
                )
                .expect_changes(1),
                Statement::new(
                    "SELECT session_count FROM agentos_core_vm_counters WHERE singleton = 1",
                    vec![],
                ),
            ])
            .await;
        match outcome {
            Ok(results) => Ok(Some(results[2].scalar_i64().unwrap_or(0) as u64)),
            Err(DbError::ExpectedChanges {
                statement_index: 0, ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Keyset page on (updated_at_ms DESC, session_id ASC): one query.
    pub async fn list_sessions(
        &self,
        cursor: Option<(i64, String)>,
        limit: u64,
    ) -> Result<(Vec<SessionRow>, bool), DbError> {
        let rows = match cursor {
            Some((updated, id)) => {
                self.db
                    .query(
                        &format!(
                            "SELECT {SESSION_COLUMNS} FROM agentos_core_sessions \
                             WHERE updated_at_ms < ?1 OR (updated_at_ms = ?1 AND session_id > ?2) \
                             ORDER BY updated_at_ms DESC, session_id ASC LIMIT ?3"
                        ),
                        vec![
                            updated.into(),
                            id.into(),
                            SqlValue::Integer(limit as i64 + 1),
                        ],
                    )
                    .await?
            }
            None => {
                self.db
                    .query(
                        &format!(
                            "SELECT {SESSION_COLUMNS} FROM agentos_core_sessions \
                             ORDER BY updated_at_ms DESC, session_id ASC LIMIT ?1"
                        ),
                        vec![SqlValue::Integer(limit as i64 + 1)],
                    )
                    .await?
            }
        };
        let mut sessions: Vec<SessionRow> = rows.rows.iter().map(|r| decode_session(r)).collect();
        let more = sessions.len() as u64 > limit;
        sessions.truncate(limit as usize);
        Ok((sessions, more))
    }

    /// Deletes a session and everything it owns, adjusting the VM counters by
    /// the session's own counters (read in the same transaction).
    pub async fn delete_session(&self, session_id: &str) -> Result<bool, DbError> {
        let id = SqlValue::from(session_id);
        let results = self
            .db
            .transaction(vec![
                Statement::new(
                    "UPDATE agentos_core_vm_counters SET \
                       session_count = session_count - 1, \
                       prompt_count = prompt_count - s.prompts, \
                       pending_permission_count = pending_permission_count - s.pending, \
                       outcome_count = outcome_count - s.outcomes \
                     FROM (SELECT prompt_count AS prompts, pending_permission_count AS pending, \
                                  outcome_count AS outcomes \
                           FROM agentos_core_sessions WHERE session_id = ?1) AS s \
                     WHERE singleton = 1",
                    vec![id.clone()],
                ),
                Statement::new(
                    "DELETE FROM agentos_core_events WHERE session_id = ?1",
                    vec![id.clone()],
                ),
                Statement::new(
                    "DELETE FROM agentos_core_prompts WHERE session_id = ?1",
                    vec![id.clone()],
                ),
                Statement::new(
                    "DELETE FROM agentos_core_permission_records WHERE session_id = ?1",
                    vec![id.clone()],
                ),
                Statement::new(
                    "DELETE FROM agentos_core_permission_outcomes WHERE session_id = ?1",
                    vec![id.clone()],
                ),
                Statement::new(
                    "DELETE FROM agentos_core_sessions WHERE session_id = ?1",
                    vec![id],
                ),
            ])
            .await?;
        Ok(results[5].changes == 1)
    }

    /// Stores what an adapter negotiated: its private session id, capabilities,
    /// agent info and config options; clears a consumed continuation.
    pub async fn update_negotiated(
        &self,
        session_id: &str,
        acp_session_id: &str,
        capabilities: &Value,
        agent_info: Option<&Value>,
        config_options: Option<&Value>,
        pending_preamble: Option<&str>,
    ) -> Result<(), DbError> {
        self.db
            .transaction(vec![Statement::new(
                "UPDATE agentos_core_sessions SET acp_session_id = ?2, capabilities_json = ?3, \
                   agent_info_json = ?4, \
                   config_options_json = COALESCE(?5, config_options_json), \
                   pending_preamble = ?6, updated_at_ms = max(updated_at_ms, ?7) \
                 WHERE session_id = ?1",
                vec![
                    session_id.into(),
                    acp_session_id.into(),
                    capabilities.to_string().into(),
                    agent_info.map(Value::to_string).into(),
                    config_options.map(Value::to_string).into(),
                    pending_preamble.into(),
                    now_ms().into(),
                ],
            )
            .expect_changes(1)])
            .await?;
        Ok(())
    }

    pub async fn set_config_options(
        &self,
        session_id: &str,
        options: &Value,
    ) -> Result<u64, DbError> {
        let results = self
            .db
            .transaction(vec![
                Statement::new(
                    "UPDATE agentos_core_sessions SET config_options_json = ?2, \
                       config_revision = config_revision + 1, updated_at_ms = max(updated_at_ms, ?3) \
                     WHERE session_id = ?1",
                    vec![session_id.into(), options.to_string().into(), now_ms().into()],
                )
                .expect_changes(1),
                Statement::new(
                    "SELECT config_revision FROM agentos_core_sessions WHERE session_id = ?1",
                    vec![session_id.into()],
                ),
            ])
            .await?;
        Ok(results[1].scalar_i64().unwrap_or(0) as u64)
    }

    pub async fn clear_preamble(&self, session_id: &str) -> Result<(), DbError> {
        self.db
            .transaction(vec![Statement::new(
                "UPDATE agentos_core_sessions SET pending_preamble = NULL WHERE session_id = ?1",
                vec![session_id.into()],
            )])
            .await?;
        Ok(())
    }

    // -- events -------------------------------------------------------------

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

    pub fn decode_events(rows: Rows) -> Vec<StoredEvent> {
        rows.rows.into_iter().map(decode_event).collect()
    }

    /// The retention read: finds the oldest events to drop so that `incoming`
    /// more events and `incoming_bytes` more bytes fit the budget. At most one
    /// bounded query.
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
        if excess_events == 0 && excess_bytes == 0 {
            return Ok(Prune::default());
        }
        // Bounded batch: at least the events needed, rounded up to 256, and
        // at most the whole retained history.
        let batch = excess_events.max(256).min(counters.retained_event_count);
        let rows = self
            .db
            .query(
                "SELECT sequence, payload_bytes FROM agentos_core_events \
                 WHERE session_id = ?1 AND sequence >= ?2 ORDER BY sequence LIMIT ?3",
                vec![
                    session_id.into(),
                    SqlValue::Integer(counters.oldest_retained_sequence as i64),
                    SqlValue::Integer(batch as i64),
                ],
            )
            .await?;
        let mut prune = Prune {
            before_sequence: counters.oldest_retained_sequence,
            events: 0,
            bytes: 0,
        };
        for row in &rows.rows {
            if prune.events >= excess_events && prune.bytes >= excess_bytes {
                break;
            }
            prune.events += 1;
            prune.bytes += uint(&row[1]);
            prune.before_sequence = uint(&row[0]) + 1;
        }
        Ok(prune)
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
                    SqlValue::Integer(bound as i64),
                    SqlValue::Integer(limit as i64 + 1),
                ],
            )
            .await?;
        let mut events: Vec<StoredEvent> = rows.rows.into_iter().map(decode_event).collect();
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
                    SqlValue::Integer(after as i64),
                    SqlValue::Integer(upto as i64),
                    SqlValue::Integer(limit as i64),
                ],
            )
            .await?;
        Ok(rows.rows.into_iter().map(decode_event).collect())
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
        Ok(rows.rows.iter().filter_map(|r| text(&r[0])).collect())
    }

    // -- prompts ------------------------------------------------------------

    pub async fn find_prompt_by_key(
        &self,
        session_id: &str,
        key: &str,
    ) -> Result<Option<PromptRow>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT prompt_id, idempotency_key, input_hash, state, result_json, error_json \
                 FROM agentos_core_prompts WHERE session_id = ?1 AND idempotency_key = ?2",
                vec![session_id.into(), key.into()],
            )
            .await?;
        Ok(rows.rows.first().map(|r| PromptRow {
            prompt_id: text(&r[0]).unwrap_or_default(),
            idempotency_key: text(&r[1]),
            input_hash: r[2].as_blob().map(<[u8]>::to_vec).unwrap_or_default(),
            state: text(&r[3]).unwrap_or_default(),
            result: json_col(&r[4]),
            error: json_col(&r[5]),
        }))
    }

    /// Statements accepting a prompt: session → running (only from idle or
    /// failed), prompt row `accepted` (the partial unique index allows one),
    /// and the counters.
    pub fn accept_prompt_statements(
        session_id: &str,
        prompt_id: &str,
        idempotency_key: Option<&str>,
        input_hash: &[u8],
        first_input_sequence: u64,
        now: i64,
    ) -> Vec<Statement> {
        vec![
            Statement::new(
                "UPDATE agentos_core_sessions SET state = 'running', state_prompt_id = ?2, \
                   state_started_at_ms = ?3, state_error_json = NULL, \
                   prompt_count = prompt_count + 1, updated_at_ms = max(updated_at_ms, ?3) \
                 WHERE session_id = ?1 AND state IN ('idle', 'failed')",
                vec![session_id.into(), prompt_id.into(), now.into()],
            )
            .expect_changes(1),
            Statement::new(
                "INSERT INTO agentos_core_prompts (session_id, prompt_id, idempotency_key, \
                   input_hash, state, first_input_sequence, created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, 'accepted', ?5, ?6, ?6)",
                vec![
                    session_id.into(),
                    prompt_id.into(),
                    idempotency_key.into(),
                    input_hash.into(),
                    SqlValue::Integer(first_input_sequence as i64),
                    now.into(),
                ],
            )
            .expect_changes(1),
            Statement::new(
                "UPDATE agentos_core_vm_counters SET prompt_count = prompt_count + 1 \
                 WHERE singleton = 1",
                vec![],
            )
            .expect_changes(1),
        ]
    }

    /// Statements ending a prompt: its terminal state and the session back
    /// to idle (or failed with `session_error`). The route ends the prompt's
    /// pending permissions first, with the events that say so.
    #[allow(clippy::too_many_arguments)]
    pub fn finish_prompt_statements(
        session_id: &str,
        prompt_id: &str,
        state: &str,
        result: Option<&Value>,
        error: Option<&Value>,
        session_error: Option<&Value>,
        last_output_sequence: u64,
        now: i64,
    ) -> Vec<Statement> {
        let mut statements = vec![Statement::new(
            "UPDATE agentos_core_prompts SET state = ?3, result_json = ?4, error_json = ?5, \
                   last_output_sequence = ?6, updated_at_ms = ?7, completed_at_ms = ?7 \
                 WHERE session_id = ?1 AND prompt_id = ?2 AND state = 'accepted'",
            vec![
                session_id.into(),
                prompt_id.into(),
                state.into(),
                result.map(Value::to_string).into(),
                error.map(Value::to_string).into(),
                SqlValue::Integer(last_output_sequence as i64),
                now.into(),
            ],
        )
        .expect_changes(1)];
        statements.push(match session_error {
            None => Statement::new(
                "UPDATE agentos_core_sessions SET state = 'idle', state_prompt_id = NULL, \
                   state_started_at_ms = NULL, state_error_json = NULL, \
                   updated_at_ms = max(updated_at_ms, ?2) \
                 WHERE session_id = ?1",
                vec![session_id.into(), now.into()],
            ),
            Some(error) => Statement::new(
                "UPDATE agentos_core_sessions SET state = 'failed', state_error_json = ?2, \
                   updated_at_ms = max(updated_at_ms, ?3) \
                 WHERE session_id = ?1",
                vec![session_id.into(), error.to_string().into(), now.into()],
            ),
        });
        statements
    }

    /// The oldest retained records of a bounded collection (of one session,
    /// or VM-wide), oldest first: what retention drops to admit a new one.
    pub async fn oldest(
        &self,
        what: Retained,
        session_id: Option<&str>,
        n: u64,
    ) -> Result<Vec<(String, String)>, DbError> {
        let (table, key, age, filter) = what.columns();
        let rows = match session_id {
            Some(id) => {
                self.db
                    .query(
                        &format!(
                            "SELECT session_id, {key} FROM {table} WHERE session_id = ?1 {filter} \
                             ORDER BY {age}, {key} LIMIT ?2"
                        ),
                        vec![id.into(), SqlValue::Integer(n as i64)],
                    )
                    .await?
            }
            None => {
                self.db
                    .query(
                        &format!(
                            "SELECT session_id, {key} FROM {table} WHERE true {filter} \
                             ORDER BY {age}, session_id, {key} LIMIT ?1"
                        ),
                        vec![SqlValue::Integer(n as i64)],
                    )
                    .await?
            }
        };
        Ok(pairs(&rows))
    }

    /// Statements dropping retained records (for outcomes, with their
    /// terminal permission records: a late answer then gets
    /// `request_not_found`). Counters move by what is actually there, so two
    /// writers pruning the same record stay exact.
    pub fn delete_statements(what: Retained, victims: &[(String, String)]) -> Vec<Statement> {
        let (table, key, _, filter) = what.columns();
        let counter = what.counter();
        let mut statements = Vec::with_capacity(victims.len() * 4);
        for (session_id, id) in victims {
            let exists = format!(
                "(SELECT count(*) FROM {table} WHERE session_id = ?1 AND {key} = ?2 {filter})"
            );
            let params = vec![session_id.as_str().into(), id.as_str().into()];
            statements.push(Statement::new(
                format!(
                    "UPDATE agentos_core_vm_counters SET {counter} = {counter} - {exists} \
                     WHERE singleton = 1"
                ),
                params.clone(),
            ));
            statements.push(Statement::new(
                format!(
                    "UPDATE agentos_core_sessions SET {counter} = {counter} - {exists} \
                     WHERE session_id = ?1"
                ),
                params.clone(),
            ));
            statements.push(Statement::new(
                format!("DELETE FROM {table} WHERE session_id = ?1 AND {key} = ?2 {filter}"),
                params.clone(),
            ));
            if what == Retained::Outcomes {
                statements.push(Statement::new(
                    "DELETE FROM agentos_core_permission_records \
                     WHERE session_id = ?1 AND request_id = ?2 AND state <> 'pending'",
                    params,
                ));
            }
        }
        statements
    }

    // -- permissions --------------------------------------------------------

    /// Statements recording a new pending `ask` permission; the session goes
    /// to `waiting`.
    pub fn pending_permission_statements(
        session_id: &str,
        request_id: &str,
        prompt_id: &str,
        request_json: &str,
        request_sequence: u64,
        now: i64,
    ) -> Vec<Statement> {
        vec![
            Statement::new(
                "INSERT INTO agentos_core_permission_records (session_id, request_id, prompt_id, \
                   state, request_json, request_sequence, created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, 'pending', ?4, ?5, ?6, ?6)",
                vec![
                    session_id.into(),
                    request_id.into(),
                    prompt_id.into(),
                    request_json.into(),
                    SqlValue::Integer(request_sequence as i64),
                    now.into(),
                ],
            )
            .expect_changes(1),
            Statement::new(
                "UPDATE agentos_core_sessions SET state = 'waiting', \
                   pending_permission_count = pending_permission_count + 1 \
                 WHERE session_id = ?1 AND state IN ('running', 'waiting')",
                vec![session_id.into()],
            )
            .expect_changes(1),
            Statement::new(
                "UPDATE agentos_core_vm_counters SET pending_permission_count = pending_permission_count + 1 \
                 WHERE singleton = 1",
                vec![],
            )
            .expect_changes(1),
        ]
    }

    /// Statements resolving one pending permission with `reason`
    /// (`accepted` for an answer); the session returns to `running` when it
    /// was the last pending one.
    pub fn resolve_permission_statements(
        session_id: &str,
        request_id: &str,
        reason: &str,
        response_json: Option<&str>,
        terminal_sequence: u64,
        now: i64,
    ) -> Vec<Statement> {
        let state = if reason == "accepted" {
            "responded"
        } else {
            "terminal"
        };
        vec![
            Statement::new(
                "UPDATE agentos_core_permission_records SET state = ?3, terminal_reason = ?4, \
                   response_json = ?5, terminal_sequence = ?6, updated_at_ms = ?7 \
                 WHERE session_id = ?1 AND request_id = ?2 AND state = 'pending'",
                vec![
                    session_id.into(),
                    request_id.into(),
                    state.into(),
                    reason.into(),
                    response_json.into(),
                    SqlValue::Integer(terminal_sequence as i64),
                    now.into(),
                ],
            )
            .expect_changes(1),
            Statement::new(
                "INSERT INTO agentos_core_permission_outcomes (session_id, request_id, terminal_reason, terminal_at_ms) \
                 VALUES (?1, ?2, ?3, ?4)",
                vec![session_id.into(), request_id.into(), reason.into(), now.into()],
            )
            .expect_changes(1),
            Statement::new(
                "UPDATE agentos_core_sessions SET \
                   pending_permission_count = pending_permission_count - 1, \
                   outcome_count = outcome_count + 1, \
                   state = CASE WHEN state = 'waiting' AND pending_permission_count = 1 THEN 'running' ELSE state END \
                 WHERE session_id = ?1",
                vec![session_id.into()],
            )
            .expect_changes(1),
            Statement::new(
                "UPDATE agentos_core_vm_counters SET \
                   pending_permission_count = pending_permission_count - 1, \
                   outcome_count = outcome_count + 1 \
                 WHERE singleton = 1",
                vec![],
            )
            .expect_changes(1),
        ]
    }

    /// The stored verdict on a permission request: the record first, then the
    /// tombstone. `None` when neither is retained.
    pub async fn permission_status(
        &self,
        session_id: &str,
        request_id: &str,
    ) -> Result<Option<PermissionRow>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT request_id, prompt_id, state, terminal_reason \
                 FROM agentos_core_permission_records WHERE session_id = ?1 AND request_id = ?2",
                vec![session_id.into(), request_id.into()],
            )
            .await?;
        if let Some(r) = rows.rows.first() {
            return Ok(Some(PermissionRow {
                request_id: text(&r[0]).unwrap_or_default(),
                prompt_id: text(&r[1]).unwrap_or_default(),
                state: text(&r[2]).unwrap_or_default(),
                terminal_reason: text(&r[3]),
            }));
        }
        let rows = self
            .db
            .query(
                "SELECT terminal_reason FROM agentos_core_permission_outcomes \
                 WHERE session_id = ?1 AND request_id = ?2",
                vec![session_id.into(), request_id.into()],
            )
            .await?;
        Ok(rows.rows.first().map(|r| PermissionRow {
            request_id: request_id.to_owned(),
            prompt_id: String::new(),
            state: "terminal".into(),
            terminal_reason: text(&r[0]),
        }))
    }

    /// Pending permission requests of a session, for `state.requests`.
    pub async fn pending_permissions(&self, session_id: &str) -> Result<Vec<String>, DbError> {
        let rows = self
            .db
            .query(
                "SELECT request_id FROM agentos_core_permission_records \
                 WHERE session_id = ?1 AND state = 'pending' ORDER BY request_sequence",
                vec![session_id.into()],
            )
            .await?;
        Ok(rows.rows.iter().filter_map(|r| text(&r[0])).collect())
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

    // -- bootstrap ----------------------------------------------------------

    /// Crash recovery, in one transaction: accepted prompts fail with
    /// `prompt_delivery_uncertain`, their pending permissions become
    /// `vm_shutdown`, running or waiting sessions become failed-but-usable,
    /// and counters that disagree with the rows are recomputed.
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
        let results = self
            .db
            .transaction(vec![
                // 0: tombstones for the permissions about to end.
                Statement::new(
                    format!(
                        "INSERT INTO agentos_core_permission_outcomes (session_id, request_id, terminal_reason, terminal_at_ms) \
                         SELECT session_id, request_id, 'vm_shutdown', ?1 FROM ({pending}) WHERE true \
                         ON CONFLICT (session_id, request_id) DO UPDATE SET terminal_reason = 'vm_shutdown'"
                    ),
                    vec![now.into()],
                ),
                // 1: every pending permission ends: its prompt died with the process.
                Statement::new(
                    "UPDATE agentos_core_permission_records SET state = 'terminal', \
                       terminal_reason = 'vm_shutdown', updated_at_ms = ?1 WHERE state = 'pending'",
                    vec![now.into()],
                ),
                // 2: accepted prompts fail.
                Statement::new(
                    "UPDATE agentos_core_prompts SET state = 'failed', error_json = ?1, \
                       updated_at_ms = ?2, completed_at_ms = ?2 WHERE state = 'accepted'",
                    vec![error.into(), now.into()],
                ),
                // 3: busy sessions become failed but usable.
                Statement::new(
                    "UPDATE agentos_core_sessions SET state = 'failed', state_error_json = ?1, \
                       updated_at_ms = max(updated_at_ms, ?2) \
                     WHERE state IN ('running', 'waiting')",
                    vec![session_error.into(), now.into()],
                ),
                // 4: history counters that disagree with the rows.
                Statement::new(
                    "UPDATE agentos_core_sessions AS s SET \
                       retained_event_count = c.n, retained_event_bytes = c.b, \
                       oldest_retained_sequence = CASE WHEN c.n = 0 THEN s.latest_sequence + 1 ELSE c.lo END, \
                       latest_sequence = max(s.latest_sequence, c.hi) \
                     FROM (SELECT s2.session_id AS sid, count(e.sequence) AS n, \
                             coalesce(sum(e.payload_bytes), 0) AS b, \
                             coalesce(min(e.sequence), 0) AS lo, coalesce(max(e.sequence), 0) AS hi \
                           FROM agentos_core_sessions s2 LEFT JOIN agentos_core_events e \
                             ON e.session_id = s2.session_id GROUP BY s2.session_id) AS c \
                     WHERE c.sid = s.session_id AND (s.retained_event_count <> c.n \
                       OR s.retained_event_bytes <> c.b OR s.latest_sequence < c.hi \
                       OR (c.n > 0 AND s.oldest_retained_sequence <> c.lo))",
                    vec![],
                ),
                // 5: per-session record counters.
                Statement::new(
                    "UPDATE agentos_core_sessions AS s SET \
                       prompt_count = (SELECT count(*) FROM agentos_core_prompts p WHERE p.session_id = s.session_id), \
                       pending_permission_count = (SELECT count(*) FROM agentos_core_permission_records r \
                           WHERE r.session_id = s.session_id AND r.state = 'pending'), \
                       outcome_count = (SELECT count(*) FROM agentos_core_permission_outcomes o \
                           WHERE o.session_id = s.session_id)",
                    vec![],
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
            permissions_terminated: results[1].changes,
            prompts_failed: results[2].changes,
            sessions_failed: results[3].changes,
            counters_repaired: results[4].changes,
        })
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
    }
}
