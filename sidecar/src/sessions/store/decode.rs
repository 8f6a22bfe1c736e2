//! Reading rows back. Rows are input: with the `actor_uds` backend they
//! come from a socket. Every decoder checks a row's width and each value's
//! type and answers `DbError::CorruptRow` instead of indexing blindly or
//! turning a wrong value into a default; NULL is accepted only where the
//! column is nullable.

use agentos_protocol::host::{Actor, EventKind, PermissionPolicy, StoredEvent};
use agentos_schema::{DbError, Rows, SqlValue};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{SessionRow, SessionStatus};

pub(super) const SESSIONS: &str = "agentos_core_sessions";
pub(super) const EVENTS: &str = "agentos_core_events";
pub(super) const PROMPTS: &str = "agentos_core_prompts";
pub(super) const PERMISSION_RECORDS: &str = "agentos_core_permission_records";
pub(super) const PERMISSION_OUTCOMES: &str = "agentos_core_permission_outcomes";
pub(super) const VM_COUNTERS: &str = "agentos_core_vm_counters";

/// Columns of a session row, in `SESSION_COLUMNS` order.
pub(super) const SESSION_WIDTH: usize = 28;
/// Columns of an event row, in `EVENT_COLUMNS` order.
pub(super) const EVENT_WIDTH: usize = 11;

pub(super) fn corrupt(table: &str, message: impl Into<String>) -> DbError {
    DbError::CorruptRow {
        table: table.to_owned(),
        message: message.into(),
    }
}

fn type_name(v: &SqlValue) -> &'static str {
    match v {
        SqlValue::Null => "NULL",
        SqlValue::Integer(_) => "an integer",
        SqlValue::Real(_) => "a real",
        SqlValue::Text(_) => "text",
        SqlValue::Blob(_) => "a blob",
    }
}

/// One row read back, its width checked. Values move out as they are
/// taken, so each column is taken once.
pub(super) struct Row {
    table: &'static str,
    values: Vec<SqlValue>,
}

impl Row {
    pub(super) fn new(
        table: &'static str,
        values: Vec<SqlValue>,
        width: usize,
    ) -> Result<Row, DbError> {
        if values.len() != width {
            return Err(corrupt(
                table,
                format!("{} columns, expected {width}", values.len()),
            ));
        }
        Ok(Row { table, values })
    }

    /// The first row of `rows`, which must be there.
    pub(super) fn first(rows: Rows, table: &'static str, width: usize) -> Result<Row, DbError> {
        match rows.rows.into_iter().next() {
            Some(values) => Row::new(table, values, width),
            None => Err(corrupt(table, "the row is missing")),
        }
    }

    /// Every row of `rows`, each decoded by `decode`.
    pub(super) fn all<T>(
        rows: Rows,
        table: &'static str,
        width: usize,
        mut decode: impl FnMut(Row) -> Result<T, DbError>,
    ) -> Result<Vec<T>, DbError> {
        rows.rows
            .into_iter()
            .map(|values| decode(Row::new(table, values, width)?))
            .collect()
    }

    fn take(&mut self, i: usize) -> Result<SqlValue, DbError> {
        match self.values.get_mut(i) {
            Some(v) => Ok(std::mem::replace(v, SqlValue::Null)),
            None => Err(corrupt(self.table, format!("no column {i}"))),
        }
    }

    fn wrong(&self, i: usize, expected: &str, found: &SqlValue) -> DbError {
        corrupt(
            self.table,
            format!(
                "column {i}: expected {expected}, found {}",
                type_name(found)
            ),
        )
    }

    pub(super) fn text(&mut self, i: usize) -> Result<String, DbError> {
        match self.take(i)? {
            SqlValue::Text(t) => Ok(t),
            other => Err(self.wrong(i, "text", &other)),
        }
    }

    pub(super) fn opt_text(&mut self, i: usize) -> Result<Option<String>, DbError> {
        match self.take(i)? {
            SqlValue::Null => Ok(None),
            SqlValue::Text(t) => Ok(Some(t)),
            other => Err(self.wrong(i, "text or NULL", &other)),
        }
    }

    pub(super) fn int(&mut self, i: usize) -> Result<i64, DbError> {
        match self.take(i)? {
            SqlValue::Integer(v) => Ok(v),
            other => Err(self.wrong(i, "an integer", &other)),
        }
    }

    pub(super) fn opt_int(&mut self, i: usize) -> Result<Option<i64>, DbError> {
        match self.take(i)? {
            SqlValue::Null => Ok(None),
            SqlValue::Integer(v) => Ok(Some(v)),
            other => Err(self.wrong(i, "an integer or NULL", &other)),
        }
    }

    /// A count, size or sequence: a non-negative integer.
    pub(super) fn uint(&mut self, i: usize) -> Result<u64, DbError> {
        let v = self.int(i)?;
        u64::try_from(v).map_err(|_| corrupt(self.table, format!("column {i}: {v} is negative")))
    }

    pub(super) fn blob(&mut self, i: usize) -> Result<Vec<u8>, DbError> {
        match self.take(i)? {
            SqlValue::Blob(b) => Ok(b),
            other => Err(self.wrong(i, "a blob", &other)),
        }
    }

    /// A NOT NULL JSON column, parsed into `T`.
    pub(super) fn json<T: DeserializeOwned>(&mut self, i: usize) -> Result<T, DbError> {
        let text = self.text(i)?;
        serde_json::from_str(&text)
            .map_err(|e| corrupt(self.table, format!("column {i}: unexpected JSON: {e}")))
    }

    /// A nullable JSON column.
    pub(super) fn opt_json(&mut self, i: usize) -> Result<Option<Value>, DbError> {
        match self.opt_text(i)? {
            None => Ok(None),
            Some(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| corrupt(self.table, format!("column {i}: invalid JSON: {e}"))),
        }
    }

    /// A NOT NULL text column of a closed vocabulary, parsed by `parse`.
    pub(super) fn parse<T>(
        &mut self,
        i: usize,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, DbError> {
        let text = self.text(i)?;
        parse(&text).ok_or_else(|| {
            corrupt(
                self.table,
                format!("column {i}: {text:?} is outside its vocabulary"),
            )
        })
    }
}

/// Rows of `(session_id, key)`.
pub(super) fn pairs(rows: Rows, table: &'static str) -> Result<Vec<(String, String)>, DbError> {
    Row::all(rows, table, 2, |mut r| Ok((r.text(0)?, r.text(1)?)))
}

/// Rows of one NOT NULL text column.
pub(super) fn texts(rows: Rows, table: &'static str) -> Result<Vec<String>, DbError> {
    Row::all(rows, table, 1, |mut r| r.text(0))
}

/// The one non-negative integer a query selects (a counter read back).
pub(super) fn count(rows: Rows, table: &'static str) -> Result<u64, DbError> {
    Row::first(rows, table, 1)?.uint(0)
}

/// Decodes a session row (`SESSION_COLUMNS`).
pub(super) fn decode_session(values: Vec<SqlValue>) -> Result<SessionRow, DbError> {
    let mut r = Row::new(SESSIONS, values, SESSION_WIDTH)?;
    Ok(SessionRow {
        session_id: r.text(0)?,
        agent: r.text(1)?,
        acp_session_id: r.opt_text(2)?,
        cwd: r.text(3)?,
        permission_policy: r.parse(4, PermissionPolicy::parse)?,
        additional_directories: r.json(5)?,
        env: r.json(6)?,
        mcp_servers: r.json(7)?,
        capabilities: r.opt_json(8)?,
        agent_info: r.opt_json(9)?,
        config_revision: r.uint(10)?,
        config_options: r.json(11)?,
        pending_preamble: r.opt_text(12)?,
        title: r.opt_text(13)?,
        metadata: r.opt_json(14)?,
        state: r.parse(15, SessionStatus::parse)?,
        state_prompt_id: r.opt_text(16)?,
        state_started_at_ms: r.opt_int(17)?,
        state_error: r.opt_json(18)?,
        latest_sequence: r.uint(19)?,
        oldest_retained_sequence: r.uint(20)?,
        retained_event_count: r.uint(21)?,
        retained_event_bytes: r.uint(22)?,
        prompt_count: r.uint(23)?,
        pending_permission_count: r.uint(24)?,
        outcome_count: r.uint(25)?,
        created_at_ms: r.int(26)?,
        updated_at_ms: r.int(27)?,
    })
}

/// Decodes an event row (`EVENT_COLUMNS`), moving its strings out of the
/// row.
pub(super) fn decode_event(values: Vec<SqlValue>) -> Result<StoredEvent, DbError> {
    let mut r = Row::new(EVENTS, values, EVENT_WIDTH)?;
    let actor = r.parse(8, |kind| match kind {
        "user" => Some(None),
        "agent" => Some(Some(Actor::Agent)),
        "system" => Some(Some(Actor::System)),
        _ => None,
    })?;
    let (account, signer) = (r.opt_text(9)?, r.opt_text(10)?);
    let actor = actor.unwrap_or(Actor::User { account, signer });
    Ok(StoredEvent {
        session_id: r.text(0)?,
        sequence: r.uint(1)?,
        timestamp_ms: r.int(2)?,
        kind: r.parse(3, EventKind::parse)?,
        correlation_id: r.opt_text(4)?,
        payload_json: r.text(5)?,
        outcome_status: r.opt_text(6)?,
        terminal_reason: r.opt_text(7)?,
        actor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session_values() -> Vec<SqlValue> {
        let mut v: Vec<SqlValue> = vec![
            "s".into(),
            "agent".into(),
            SqlValue::Null,
            "/home".into(),
            "ask".into(),
            "[]".into(),
            "{}".into(),
            "[]".into(),
            SqlValue::Null,
            SqlValue::Null,
            SqlValue::Integer(0),
            "[]".into(),
            SqlValue::Null,
            SqlValue::Null,
            SqlValue::Null,
            "idle".into(),
            SqlValue::Null,
            SqlValue::Null,
            SqlValue::Null,
        ];
        v.extend([0, 1, 0, 0, 0, 0, 0, 5, 6].map(SqlValue::Integer));
        v
    }

    fn event_values() -> Vec<SqlValue> {
        vec![
            "s".into(),
            SqlValue::Integer(3),
            SqlValue::Integer(7),
            "session_update".into(),
            SqlValue::Null,
            r#"{"sessionUpdate":"plan"}"#.into(),
            SqlValue::Null,
            SqlValue::Null,
            "user".into(),
            "acct".into(),
            SqlValue::Null,
        ]
    }

    fn code(e: DbError) -> &'static str {
        e.code()
    }

    #[test]
    fn well_formed_rows_decode() {
        let row = decode_session(session_values()).expect("session");
        assert_eq!(row.session_id, "s");
        assert_eq!(row.oldest_retained_sequence, 1);
        assert_eq!(row.updated_at_ms, 6);
        let event = decode_event(event_values()).expect("event");
        assert_eq!(event.sequence, 3);
        assert_eq!(
            event.actor,
            Actor::User {
                account: Some("acct".into()),
                signer: None
            }
        );
    }

    #[test]
    fn a_row_of_the_wrong_width_is_corrupt() {
        let mut short = session_values();
        short.pop();
        assert_eq!(
            decode_session(short).map_err(code),
            Err("corrupt_row"),
            "short session row"
        );
        let mut long = event_values();
        long.push(SqlValue::Null);
        assert_eq!(decode_event(long).map_err(code), Err("corrupt_row"));
        assert_eq!(decode_event(Vec::new()).map_err(code), Err("corrupt_row"));
        let rows = Rows {
            rows: vec![vec![SqlValue::Integer(1), SqlValue::Integer(2)]],
            ..Rows::default()
        };
        assert_eq!(count(rows, VM_COUNTERS).map_err(code), Err("corrupt_row"));
    }

    #[test]
    fn a_value_of_the_wrong_type_is_corrupt() {
        // Text where a counter belongs.
        let mut v = session_values();
        v[19] = "12".into();
        assert_eq!(decode_session(v).map_err(code), Err("corrupt_row"));
        // NULL in a NOT NULL column.
        let mut v = session_values();
        v[1] = SqlValue::Null;
        assert_eq!(decode_session(v).map_err(code), Err("corrupt_row"));
        // A negative count.
        let mut v = session_values();
        v[23] = SqlValue::Integer(-1);
        assert_eq!(decode_session(v).map_err(code), Err("corrupt_row"));
        // JSON of the wrong shape.
        let mut v = session_values();
        v[6] = "[]".into();
        assert_eq!(decode_session(v).map_err(code), Err("corrupt_row"));
        // A status or policy outside its vocabulary.
        let mut v = session_values();
        v[15] = "busy".into();
        assert_eq!(decode_session(v).map_err(code), Err("corrupt_row"));
        let mut v = session_values();
        v[4] = "maybe".into();
        assert_eq!(decode_session(v).map_err(code), Err("corrupt_row"));
        // An integer where the payload text belongs.
        let mut v = event_values();
        v[5] = SqlValue::Integer(1);
        assert_eq!(decode_event(v).map_err(code), Err("corrupt_row"));
        // A kind outside the vocabulary.
        let mut v = event_values();
        v[3] = "telepathy".into();
        assert_eq!(decode_event(v).map_err(code), Err("corrupt_row"));
        let rows = Rows {
            rows: vec![vec![SqlValue::Blob(vec![1]), "x".into()]],
            ..Rows::default()
        };
        assert_eq!(pairs(rows, PROMPTS).map_err(code), Err("corrupt_row"));
    }
}
