//! Start-up time on a large database: builds (once per size and schema
//! version) a sqlite_file database holding `BENCH_STARTUP_SESSIONS` sessions
//! (100,000 by default) of 100 events each, with consistent counters, and a
//! few sessions a crash left mid-turn, then times `Vm::open` (open, migrate,
//! bootstrap recovery) several times.
//!
//! Run with `scripts/bench-startup` (release build).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use agentos_sidecar::config::{Config, DatabaseDescriptor, Limits};
use agentos_sidecar::vm::Vm;

/// The allocator the `agentos-sidecar` binary runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn sessions() -> usize {
    std::env::var("BENCH_STARTUP_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

/// Sessions left `running` with an accepted prompt, as a crash leaves them.
const INTERRUPTED: usize = 10;
const EVENTS_PER_SESSION: usize = 100;

fn build(path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let conn = rusqlite::Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    let tx = conn.unchecked_transaction()?;
    {
        let mut session = tx.prepare(
            "INSERT INTO agentos_core_sessions (session_id, agent, cwd, permission_policy, \
             latest_sequence, oldest_retained_sequence, retained_event_count, retained_event_bytes, \
             created_at_ms, updated_at_ms) VALUES (?1, 'echo', '/home/agentos', 'allow_all', ?2, 1, ?2, ?3, ?4, ?4)",
        )?;
        let mut event = tx.prepare(
            "INSERT INTO agentos_core_events (session_id, sequence, occurred_at_ms, acp_protocol_version, \
             event_kind, payload_json, payload_bytes, actor_kind) VALUES (?1, ?2, ?3, 1, 'session_update', ?4, ?5, 'agent')",
        )?;
        for s in 0..sessions() {
            let id = format!("session-{s:05}");
            let mut bytes = 0usize;
            for e in 1..=EVENTS_PER_SESSION {
                let payload = format!(
                    "{{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t{e}\",\"status\":\"completed\",\"content\":[{{\"type\":\"content\",\"content\":{{\"type\":\"text\",\"text\":\"result {s} {e} lorem ipsum dolor sit amet\"}}}}]}}"
                );
                bytes += payload.len();
                event.execute(rusqlite::params![
                    id,
                    e as i64,
                    1_700_000_000_000i64,
                    payload,
                    payload.len() as i64
                ])?;
            }
            session.execute(rusqlite::params![
                id,
                EVENTS_PER_SESSION as i64,
                bytes as i64,
                1_700_000_000_000i64 + s as i64
            ])?;
        }
        tx.execute(
            "UPDATE agentos_core_vm_counters SET session_count = ?1 WHERE singleton = 1",
            [sessions() as i64],
        )?;
    }
    tx.commit()?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
    Ok(())
}

/// A crash mid-turn, as each start finds it: [`INTERRUPTED`] sessions left
/// running with an accepted prompt and a history counter the turn had not
/// moved yet, for recovery to settle.
fn interrupt(path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let mut conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let tx = conn.transaction()?;
    let n = INTERRUPTED.min(sessions());
    for s in 0..n {
        let id = format!("session-{s:05}");
        tx.execute(
            "DELETE FROM agentos_core_prompts WHERE session_id = ?1",
            [&id],
        )?;
        tx.execute(
            "UPDATE agentos_core_sessions SET state = 'running', state_prompt_id = 'p1', \
             state_started_at_ms = 1, state_error_json = NULL, prompt_count = 1, \
             retained_event_count = ?2 - 1 WHERE session_id = ?1",
            rusqlite::params![id, EVENTS_PER_SESSION as i64],
        )?;
        tx.execute(
            "INSERT INTO agentos_core_prompts (session_id, prompt_id, input_hash, state, \
             created_at_ms, updated_at_ms) VALUES (?1, 'p1', zeroblob(32), 'accepted', 1, 1)",
            [&id],
        )?;
    }
    tx.execute(
        "UPDATE agentos_core_vm_counters SET prompt_count = ?1 WHERE singleton = 1",
        [n as i64],
    )?;
    tx.commit()?;
    Ok(())
}

fn config(path: &Path) -> Config {
    Config {
        database: DatabaseDescriptor::SqliteFile {
            path: path.to_owned(),
        },
        socket: None,
        allowed_uids: None,
        sessions_dir: None,
        agents: BTreeMap::new(),
        limits: Limits::default(),
        filesystem: Default::default(),
        http: Default::default(),
        secrets: Default::default(),
        builtin: Default::default(),
        triggers: Default::default(),
        mcp: Default::default(),
        hypermedia: Default::default(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::var_os("BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("agentos-bench-startup"));
    std::fs::create_dir_all(&dir)?;
    // Named by schema version: a database built by an older binary would
    // measure its one-time migration instead of a start.
    let version = agentos_schema::ladders::core::MIGRATIONS
        .last()
        .map_or(0, |m| m.version);
    let path = dir.join(format!("large-core-v{version}-{}.sqlite", sessions()));
    if !path.exists() {
        eprintln!(
            "building {} sessions x {EVENTS_PER_SESSION} events in {} ...",
            sessions(),
            path.display()
        );
        // Migrate through the real runner first so the schema is the shipped one.
        drop(Vm::open(config(&path)).await?);
        let t = Instant::now();
        build(&path)?;
        eprintln!("built in {:.1} s", t.elapsed().as_secs_f64());
    }
    let size = std::fs::metadata(&path)?.len();
    println!(
        "database: {} sessions, {} events, {:.0} MiB",
        sessions(),
        sessions() * EVENTS_PER_SESSION,
        size as f64 / 1048576.0
    );
    let mut times = Vec::new();
    for _ in 0..5 {
        interrupt(&path)?;
        let t = Instant::now();
        let vm = Vm::open(config(&path)).await?;
        let ready = t.elapsed();
        let status = vm.sessions.status().await?;
        assert_eq!(status.sessions.used, sessions() as u64);
        let repaired = vm.sessions.get("session-00000").await?;
        assert_eq!(
            repaired.state.status(),
            "failed",
            "recovery settled the turn"
        );
        assert_eq!(
            repaired.retained_event_count, EVENTS_PER_SESSION as u64,
            "and repaired its counter"
        );
        times.push(ready.as_secs_f64() * 1000.0);
        drop(vm);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "ready (open + migrate + recovery of {INTERRUPTED} interrupted turns): min {:.0} ms, median {:.0} ms, max {:.0} ms (goal < 1000 ms)",
        times[0],
        times[times.len() / 2],
        times[times.len() - 1]
    );
    Ok(())
}
