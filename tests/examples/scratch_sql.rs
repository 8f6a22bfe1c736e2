use std::time::Instant;
use rusqlite::types::ValueRef;

const N: u64 = 100_000;
const CHUNK: usize = 500;
const BATCH: usize = 4000;

fn setup(check: bool) -> (tempfile::TempDir, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("x.sqlite")).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
    for s in agentos_schema::ladders::core::MIGRATIONS[0].statements {
        let s = if check { s.to_string() } else { s.replace("CHECK (json_valid(payload_json))", "") };
        conn.execute_batch(&s).unwrap();
    }
    conn.execute("INSERT INTO agentos_core_sessions (session_id, agent, cwd, permission_policy, created_at_ms, updated_at_ms) VALUES ('flood','echo','/','allow_all',0,0)", []).unwrap();
    (dir, conn)
}

fn run(name: &str, check: bool, readback: bool, numbered: bool, lossy: bool) { run2(name, check, readback, numbered, lossy, CHUNK, "") }
fn run2(name: &str, check: bool, readback: bool, numbered: bool, lossy: bool, chunk: usize, pragmas: &str) {
    let (_d, conn) = setup(check);
    conn.execute_batch(pragmas).unwrap();
    let filler = "f".repeat(160);
    let start = Instant::now();
    let mut seq = 0u64;
    let mut sink = 0usize;
    while seq < N {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        let first = seq;
        let mut left = BATCH;
        if pragmas.contains("single") {
            let mut stmt = conn.prepare_cached("INSERT INTO agentos_core_events (session_id, sequence, occurred_at_ms, acp_protocol_version, event_kind, correlation_id, payload_json, payload_bytes, outcome_status, terminal_reason, actor_kind, actor_account, actor_signer) VALUES (?1,?2,?3,1,'session_update',NULL,?4,?5,NULL,NULL,'agent',NULL,NULL)").unwrap();
            stmt.raw_bind_parameter(1, "flood").unwrap();
            stmt.raw_bind_parameter(3, 0i64).unwrap();
            for _ in 0..left {
                seq += 1;
                let payload = format!(r#"{{"sessionUpdate":"tool_call_update","toolCallId":"flood","status":"in_progress","content":[{{"type":"content","content":{{"type":"text","text":"{seq:08} {filler}"}}}}]}}"#);
                stmt.raw_bind_parameter(2, seq as i64).unwrap();
                stmt.raw_bind_parameter(5, payload.len() as i64).unwrap();
                stmt.raw_bind_parameter(4, payload).unwrap();
                assert_eq!(stmt.raw_execute().unwrap(), 1);
            }
            left = 0;
        }
        while left > 0 {
            let rows = left.min(chunk);
            left -= rows;
            let mut sql = String::from("INSERT INTO agentos_core_events (session_id, sequence, occurred_at_ms, acp_protocol_version, event_kind, correlation_id, payload_json, payload_bytes, outcome_status, terminal_reason, actor_kind, actor_account, actor_signer) VALUES ");
            let mut params: Vec<rusqlite::types::Value> = Vec::new();
            if numbered {
                params.push("flood".to_string().into());
                params.push(0i64.into());
                params.push("session_update".to_string().into());
                params.push("agent".to_string().into());
            }
            for i in 0..rows {
                seq += 1;
                if i > 0 { sql.push(','); }
                let payload = format!(r#"{{"sessionUpdate":"tool_call_update","toolCallId":"flood","status":"in_progress","content":[{{"type":"content","content":{{"type":"text","text":"{seq:08} {filler}"}}}}]}}"#);
                let bytes = payload.len() as i64;
                if numbered {
                    let b = params.len() + 1;
                    sql.push_str(&format!("(?1,?{},?2,1,?3,NULL,?{},?{},NULL,NULL,?4,NULL,NULL)", b, b+1, b+2));
                    params.push((seq as i64).into());
                    params.push(payload.into());
                    params.push(bytes.into());
                } else if pragmas.contains("half") {
                    if i == 0 { params.push("flood".to_string().into()); params.push(0i64.into()); }
                    let b = params.len();
                    sql.push_str(&format!("(?1,?{},?2,1,?{},?{},?{},?{},?{},?{},?{},?{},?{})", b+1,b+2,b+3,b+4,b+5,b+6,b+7,b+8,b+9,b+10));
                    params.push((seq as i64).into());
                    params.push("session_update".to_string().into());
                    params.push(rusqlite::types::Value::Null);
                    params.push(payload.into());
                    params.push(bytes.into());
                    params.push(rusqlite::types::Value::Null);
                    params.push(rusqlite::types::Value::Null);
                    params.push("agent".to_string().into());
                    params.push(rusqlite::types::Value::Null);
                    params.push(rusqlite::types::Value::Null);
                } else {
                    sql.push_str("(?,?,?,1,?,?,?,?,?,?,?,?,?)");
                    params.push("flood".to_string().into());
                    params.push((seq as i64).into());
                    params.push(0i64.into());
                    params.push("session_update".to_string().into());
                    params.push(rusqlite::types::Value::Null);
                    params.push(payload.into());
                    params.push(bytes.into());
                    params.push(rusqlite::types::Value::Null);
                    params.push(rusqlite::types::Value::Null);
                    params.push("agent".to_string().into());
                    params.push(rusqlite::types::Value::Null);
                    params.push(rusqlite::types::Value::Null);
                }
            }
            if pragmas.contains("returning") {
                sql.push_str(" RETURNING session_id, sequence, occurred_at_ms, event_kind, correlation_id, payload_json, outcome_status, terminal_reason, actor_kind, actor_account, actor_signer");
                let mut stmt = conn.prepare_cached(&sql).unwrap();
                let mut rs = stmt.query(rusqlite::params_from_iter(params.iter())).unwrap();
                while let Some(row) = rs.next().unwrap() {
                    for c in 0..11 {
                        match row.get_ref(c).unwrap() {
                            ValueRef::Text(t) => { let s = match std::str::from_utf8(t) { Ok(s) => s.to_owned(), Err(_) => String::from_utf8_lossy(t).into_owned() }; sink += s.len(); }
                            _ => sink += 1,
                        }
                    }
                }
            } else {
            let mut stmt = conn.prepare_cached(&sql).unwrap();
            let n = stmt.execute(rusqlite::params_from_iter(params.iter())).unwrap();
            assert_eq!(n, rows);
            }
        }
        conn.execute("UPDATE agentos_core_sessions SET latest_sequence = ?1, retained_event_count = ?1 WHERE session_id = 'flood'", [seq as i64]).unwrap();
        if readback {
            let mut stmt = conn.prepare_cached("SELECT session_id, sequence, occurred_at_ms, event_kind, correlation_id, payload_json, outcome_status, terminal_reason, actor_kind, actor_account, actor_signer FROM agentos_core_events WHERE session_id = ?1 AND sequence > ?2 ORDER BY sequence").unwrap();
            let mut rows = stmt.query(rusqlite::params!["flood", first as i64]).unwrap();
            while let Some(row) = rows.next().unwrap() {
                for c in 0..11 {
                    match row.get_ref(c).unwrap() {
                        ValueRef::Text(t) => {
                            let s = if lossy { String::from_utf8_lossy(t).into_owned() } else { match std::str::from_utf8(t) { Ok(s) => s.to_owned(), Err(_) => String::from_utf8_lossy(t).into_owned() } };
                            sink += s.len();
                        }
                        _ => sink += 1,
                    }
                }
            }
        }
        conn.execute_batch("COMMIT").unwrap();
    }
    let el = start.elapsed();
    println!("{name:40} {:8.0} rows/s  {:.2} µs/row  ({sink})", N as f64 / el.as_secs_f64(), el.as_secs_f64() * 1e6 / N as f64);
}

fn main() {
    prep();
    let nock = "PRAGMA wal_autocheckpoint=0;";
    for _ in 0..3 {
        run2("numbered", true, true, true, false, CHUNK, nock);
        run2("single", true, true, true, false, CHUNK, "PRAGMA wal_autocheckpoint=0;--single");
    }
}
#[allow(dead_code)]
fn prep() {
    let (_d, conn) = setup(true);
    let mut sql = String::from("INSERT INTO agentos_core_events (session_id, sequence, occurred_at_ms, acp_protocol_version, event_kind, correlation_id, payload_json, payload_bytes, outcome_status, terminal_reason, actor_kind, actor_account, actor_signer) VALUES ");
    for i in 0..500 { if i>0 {sql.push(',');} let b = 5 + i*3; sql.push_str(&format!("(?1,?{},?2,1,?3,NULL,?{},?{},NULL,NULL,?4,NULL,NULL)", b, b+1, b+2)); }
    let t = Instant::now();
    for _ in 0..100 { let s = conn.prepare(&sql).unwrap(); drop(s); }
    println!("prepare 500 rows: {:?}", t.elapsed() / 100);
}
