//! Checks on the SQLite file as the crash left it and after restart:
//! contiguous sequences, counters equal to the rows, no prompt left
//! `accepted`; plus readers for stored events, prompt rows and the
//! adapter's prompt log (which prompts were delivered, and how often).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use agentos_protocol::host::{Actor, EventKind, StoredEvent};
use rusqlite::{Connection, OpenFlags};
use serde_json::{json, Value};

use super::MARKER;

pub(super) struct PromptRow {
    pub(super) session: String,
    pub(super) prompt_id: String,
    pub(super) state: String,
    pub(super) result: Option<Value>,
    pub(super) error: Option<Value>,
    pub(super) first_input: Option<u64>,
    pub(super) last_output: Option<u64>,
}

pub(super) fn open_ro(path: &Path) -> Option<Connection> {
    if !path.is_file() {
        return None;
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()?;
    let _ = conn.busy_timeout(Duration::from_secs(10));
    let migrated: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'agentos_core_vm_counters'",
            [],
            |r| r.get(0),
        )
        .ok()?;
    (migrated == 1).then_some(conn)
}

pub(super) type Found = Vec<(&'static str, String)>;

/// Sequences contiguous, counters equal to the rows, session state agreeing
/// with the prompts; with `reconciled`, nothing left in flight.
pub(super) fn check_store(conn: &Connection, reconciled: bool) -> Result<Found, rusqlite::Error> {
    let mut found = Found::new();
    let tx = conn.unchecked_transaction()?;
    let mut aggregates: HashMap<String, (i64, i64, i64, i64)> = HashMap::new();
    {
        let mut stmt = tx.prepare(
            "SELECT session_id, count(*), coalesce(sum(payload_bytes), 0), min(sequence), max(sequence) \
             FROM agentos_core_events GROUP BY session_id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?),
            ))
        })?;
        for row in rows {
            let (sid, agg) = row?;
            aggregates.insert(sid, agg);
        }
    }
    let count = |sql: &str, sid: &str| -> Result<i64, rusqlite::Error> {
        tx.query_row(sql, [sid], |r| r.get(0))
    };
    let mut stmt = tx.prepare(
        "SELECT session_id, state, state_prompt_id, latest_sequence, oldest_retained_sequence, \
           retained_event_count, retained_event_bytes, prompt_count, pending_permission_count, \
           outcome_count FROM agentos_core_sessions",
    )?;
    let sessions = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                [
                    r.get::<_, i64>(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                ],
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    for (sid, state, state_prompt, c) in &sessions {
        let [latest, oldest, n, bytes, prompts, pending, outcomes] = *c;
        let (en, eb, lo, hi) = aggregates.remove(sid).unwrap_or((0, 0, 0, 0));
        if en > 0 && hi - lo + 1 != en {
            found.push((
                "sequence_gap",
                format!("{sid}: {en} events span sequences {lo}..={hi}"),
            ));
        }
        let expected_oldest = if en == 0 { latest + 1 } else { lo };
        if oldest != expected_oldest || (en > 0 && latest != hi) {
            found.push((
                "sequence_counters",
                format!(
                    "{sid}: row says oldest {oldest} latest {latest}; events {lo}..={hi} ({en})"
                ),
            ));
        }
        if n != en || bytes != eb {
            found.push((
                "event_counters",
                format!("{sid}: row says {n} events / {bytes} bytes; rows hold {en} / {eb}"),
            ));
        }
        let rp = count(
            "SELECT count(*) FROM agentos_core_prompts WHERE session_id = ?1",
            sid,
        )?;
        let rpend = count(
            "SELECT count(*) FROM agentos_core_permission_records WHERE session_id = ?1 AND state = 'pending'",
            sid,
        )?;
        let rout = count(
            "SELECT count(*) FROM agentos_core_permission_outcomes WHERE session_id = ?1",
            sid,
        )?;
        if (prompts, pending, outcomes) != (rp, rpend, rout) {
            found.push((
                "record_counters",
                format!(
                    "{sid}: row says prompts {prompts} pending {pending} outcomes {outcomes}; rows hold {rp} / {rpend} / {rout}"
                ),
            ));
        }
        let accepted: Vec<String> = {
            let mut s = tx.prepare(
                "SELECT prompt_id FROM agentos_core_prompts WHERE session_id = ?1 AND state = 'accepted'",
            )?;
            let v = s
                .query_map([sid], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            v
        };
        let busy = state == "running" || state == "waiting";
        let consistent = if busy {
            accepted.len() == 1 && state_prompt.as_deref() == Some(accepted[0].as_str())
        } else {
            accepted.is_empty()
        };
        if !consistent {
            found.push((
                "session_state",
                format!("{sid}: state {state} (prompt {state_prompt:?}) but accepted prompts {accepted:?}"),
            ));
        }
        if busy && (state == "waiting") != (rpend > 0) {
            found.push((
                "session_state",
                format!("{sid}: state {state} with {rpend} pending permissions"),
            ));
        }
        let stray = count(
            "SELECT count(*) FROM agentos_core_permission_records r WHERE r.session_id = ?1 \
               AND r.state = 'pending' AND NOT EXISTS (SELECT 1 FROM agentos_core_prompts p \
               WHERE p.session_id = r.session_id AND p.prompt_id = r.prompt_id AND p.state = 'accepted')",
            sid,
        )?;
        if stray > 0 {
            found.push((
                "permission_state",
                format!("{sid}: {stray} pending permissions of a prompt that is not accepted"),
            ));
        }
        if reconciled && (busy || !accepted.is_empty() || rpend > 0) {
            found.push((
                "not_reconciled",
                format!(
                    "{sid}: after restart state {state}, accepted prompts {accepted:?}, pending permissions {rpend}"
                ),
            ));
        }
    }
    for (sid, (en, ..)) in aggregates {
        found.push((
            "orphan_events",
            format!("{en} events of missing session {sid}"),
        ));
    }
    let vm: [i64; 4] = tx.query_row(
        "SELECT session_count, prompt_count, pending_permission_count, outcome_count \
         FROM agentos_core_vm_counters WHERE singleton = 1",
        [],
        |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?]),
    )?;
    let rows: [i64; 4] = tx.query_row(
        "SELECT (SELECT count(*) FROM agentos_core_sessions), \
           (SELECT count(*) FROM agentos_core_prompts), \
           (SELECT count(*) FROM agentos_core_permission_records WHERE state = 'pending'), \
           (SELECT count(*) FROM agentos_core_permission_outcomes)",
        [],
        |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?]),
    )?;
    if vm != rows {
        found.push((
            "vm_counters",
            format!("counter row [sessions, prompts, pending, outcomes] = {vm:?}; rows {rows:?}"),
        ));
    }
    Ok(found)
}

/// Every stored event of a session in its public shape, by sequence.
pub(super) fn stored_events(
    conn: &Connection,
    sid: &str,
) -> Result<BTreeMap<u64, Value>, rusqlite::Error> {
    let mut stmt = conn.prepare(
        "SELECT sequence, occurred_at_ms, event_kind, correlation_id, payload_json, outcome_status, \
           terminal_reason, actor_kind, actor_account, actor_signer \
         FROM agentos_core_events WHERE session_id = ?1 ORDER BY sequence",
    )?;
    let rows = stmt.query_map([sid], |r| {
        let kind: String = r.get(2)?;
        let payload: String = r.get(4)?;
        let actor = match r.get::<_, String>(7)?.as_str() {
            "user" => Actor::User {
                account: r.get(8)?,
                signer: r.get(9)?,
            },
            "agent" => Actor::Agent,
            _ => Actor::System,
        };
        Ok(StoredEvent {
            session_id: sid.to_owned(),
            sequence: r.get::<_, i64>(0)? as u64,
            timestamp_ms: r.get(1)?,
            kind: EventKind::parse(&kind).unwrap_or(EventKind::SessionUpdate),
            correlation_id: r.get(3)?,
            outcome_status: r.get(5)?,
            terminal_reason: r.get(6)?,
            actor,
            payload_json: payload,
        })
    })?;
    let mut out = BTreeMap::new();
    for event in rows {
        let event = event?;
        out.insert(event.sequence, event.to_public());
    }
    Ok(out)
}

pub(super) fn prompt_rows(
    conn: &Connection,
) -> Result<HashMap<String, PromptRow>, rusqlite::Error> {
    let mut stmt = conn.prepare(
        // A turn's key is on its run, whose id its first prompt takes.
        "SELECT p.session_id, p.prompt_id, r.idempotency_key, p.state, p.result_json, \
           p.error_json, p.first_input_sequence, p.last_output_sequence \
         FROM agentos_core_prompts p JOIN agentos_core_runs r \
           ON r.run_id = p.prompt_id AND r.session_id = p.session_id \
         WHERE r.idempotency_key IS NOT NULL",
    )?;
    let rows = stmt.query_map([], |r| {
        let json = |s: Option<String>| s.and_then(|s| serde_json::from_str(&s).ok());
        Ok((
            r.get::<_, String>(2)?,
            PromptRow {
                session: r.get(0)?,
                prompt_id: r.get(1)?,
                state: r.get(3)?,
                result: json(r.get(4)?),
                error: json(r.get(5)?),
                first_input: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
                last_output: r.get::<_, Option<i64>>(7)?.map(|v| v as u64),
            },
        ))
    })?;
    let mut out = HashMap::new();
    for row in rows {
        let (key, row) = row?;
        out.insert(format!("{}\u{0}{key}", row.session), row);
    }
    Ok(out)
}

pub(super) fn row_key(session: &str, key: &str) -> String {
    format!("{session}\u{0}{key}")
}

/// The answer a stored terminal prompt replays.
pub(super) fn stored_answer(row: &PromptRow) -> Value {
    let mut result = row.result.clone().unwrap_or_else(|| json!({}));
    if let Some(obj) = result.as_object_mut() {
        obj.insert("sessionId".into(), json!(row.session));
        obj.insert("promptId".into(), json!(row.prompt_id));
    }
    result
}

/// Markers of every prompt the adapters received, with counts, and the
/// lines that could not be read (which would hide deliveries).
pub(super) fn delivered_markers(log: &Path) -> (HashMap<String, usize>, Vec<String>) {
    let mut out = HashMap::new();
    let mut unreadable = Vec::new();
    let Ok(text) = std::fs::read_to_string(log) else {
        return (out, unreadable);
    };
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            unreadable.push(line.chars().take(200).collect());
            continue;
        };
        for block in entry["prompt"].as_array().into_iter().flatten() {
            if let Some(marker) = block["text"].as_str().and_then(|t| t.strip_prefix(MARKER)) {
                *out.entry(marker.to_owned()).or_default() += 1;
            }
        }
    }
    (out, unreadable)
}
