//! Reading rows back. Rows are input: with the `actor_uds` backend they
//! come from a socket. Every decoder checks a row's width and each value's
//! type and answers `DbError::CorruptRow` instead of indexing blindly or
//! turning a wrong value into a default; NULL is accepted only where the
//! column is nullable.

use agentos_protocol::session::{Actor, EventKind, PermissionPolicy, StoredEvent};
pub(super) use agentos_schema::row::{count, texts, Row};
use agentos_schema::{DbError, Rows, SqlValue};

use super::{SessionRow, SessionStatus};

pub(super) const SESSIONS: &str = "agentos_core_sessions";
pub(super) const EVENTS: &str = "agentos_core_events";
pub(super) const PROMPTS: &str = "agentos_core_prompts";
pub(super) const PERMISSION_RECORDS: &str = "agentos_core_permission_records";
pub(super) const PERMISSION_OUTCOMES: &str = "agentos_core_permission_outcomes";
pub(super) const VM_COUNTERS: &str = "agentos_core_vm_counters";

/// Columns of a session row, in `SESSION_COLUMNS` order.
pub(super) const SESSION_WIDTH: usize = 30;
/// Columns of an event row, in `EVENT_COLUMNS` order.
pub(super) const EVENT_WIDTH: usize = 11;

/// Rows of `(session_id, key)`.
pub(super) fn pairs(rows: Rows, table: &'static str) -> Result<Vec<(String, String)>, DbError> {
    Row::all(rows, table, 2, |mut r| Ok((r.text(0)?, r.text(1)?)))
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
        description: r.opt_text(28)?,
        plan: r.opt_json(29)?,
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
        // description, plan_json
        v.push(SqlValue::Null);
        v.push(SqlValue::Null);
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
