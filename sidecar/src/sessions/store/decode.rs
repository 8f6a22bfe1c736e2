//! Reading rows back: the column decoders and the session and event row
//! decoders.

use agentos_protocol::host::{Actor, EventKind, StoredEvent};
use agentos_schema::{Rows, SqlValue};
use serde_json::Value;

use super::SessionRow;

pub(super) fn pairs(rows: &Rows) -> Vec<(String, String)> {
    rows.rows
        .iter()
        .filter_map(|r| Some((text(&r[0])?, text(&r[1])?)))
        .collect()
}

pub(super) fn text(v: &SqlValue) -> Option<String> {
    v.as_str().map(str::to_owned)
}

fn int(v: &SqlValue) -> i64 {
    v.as_i64().unwrap_or(0)
}

pub(super) fn uint(v: &SqlValue) -> u64 {
    u64::try_from(int(v)).unwrap_or(0)
}

pub(super) fn json_col(v: &SqlValue) -> Option<Value> {
    v.as_str().and_then(|s| serde_json::from_str(s).ok())
}

pub(super) fn decode_session(r: &[SqlValue]) -> SessionRow {
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
pub(super) fn decode_event(mut r: Vec<SqlValue>) -> StoredEvent {
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
