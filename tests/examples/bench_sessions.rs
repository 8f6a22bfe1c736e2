//! Session benchmark, run by `scripts/bench-sessions` against the release
//! binaries: (1) end-to-end durable events per second (one `flood 100000`
//! turn, committed and delivered to a subscriber) beside raw SQLite inserts
//! of similar rows; (2) dispatch overhead p50/p99 (an echo turn through the
//! sidecar minus the same turn driven directly over the adapter client);
//! (3) 1,000 sessions doing echo turns concurrently: turns/s and the
//! sidecar's peak RSS.

use std::path::Path;
use std::time::{Duration, Instant};

use agentos_adapters::{AdapterCommand, AdapterConnection, AdapterOptions};
use agentos_client::ctl::HostClient;
use agentos_protocol::acp::methods;
use serde_json::{json, Value};

const FLOOD: u64 = 100_000;
const ROUNDS: usize = 5;
const DISPATCH_TURNS: usize = 500;
const SESSIONS: usize = 1_000;
const TURNS_PER_SESSION: usize = 5;
const CONNECTIONS: usize = 16;

use agentos_tests::bench::{binary, start_sidecar, status_kib, Error};

fn text(t: &str) -> Value {
    json!([{"type": "text", "text": t}])
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

/// CPU time (user + system) a process has used, from /proc.
fn cpu_time(pid: u32) -> Option<Duration> {
    stat_cpu(&format!("/proc/{pid}/stat"))
}

/// CPU time of one of a process's threads, found by its name.
fn thread_cpu_time(pid: u32, name: &str) -> Option<Duration> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            return stat_cpu(&task.path().join("stat").display().to_string());
        }
    }
    None
}

fn stat_cpu(path: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_micros(ticks * 1_000_000 / hz))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A subscriber that reads its frames straight off the socket and decodes
/// only what it checks (the method and the event's sequence), so the
/// figure measures the sidecar rather than a client building a JSON tree
/// per event. It fails on a gap, a duplicate or an out-of-order event.
struct LeanSubscriber {
    stream: tokio::net::UnixStream,
    decoder: agentos_protocol::host::FrameDecoder,
    buf: Vec<u8>,
}

#[derive(serde::Deserialize)]
struct Frame<'a> {
    #[serde(borrow, default)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    params: Option<FrameParams>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct FrameParams {
    #[serde(default)]
    event: Option<FrameEvent>,
}

#[derive(serde::Deserialize)]
struct FrameEvent {
    sequence: u64,
}

/// The sequence of a `sessions/event` frame as the sidecar splices it
/// (its fixed head, then the event's public members, `sessionId` then
/// `sequence`), found without parsing the rest; `None` for any other frame,
/// which then takes the parser. The subscriber's CPU is taken from the same
/// two cores as the sidecar's, so a client that parses every event whole
/// measures itself as much as the sidecar.
fn spliced_sequence(frame: &[u8]) -> Option<u64> {
    use std::sync::LazyLock;
    const HEAD: &[u8] =
        br#"{"jsonrpc":"2.0","method":"sessions/event","params":{"subscriptionId":""#;
    static EVENT: LazyLock<memchr::memmem::Finder<'static>> =
        LazyLock::new(|| memchr::memmem::Finder::new(br#","event":{"sessionId":""#));
    static SEQUENCE: LazyLock<memchr::memmem::Finder<'static>> =
        LazyLock::new(|| memchr::memmem::Finder::new(br#"","sequence":"#));
    let rest = frame.strip_prefix(HEAD)?;
    let event = EVENT.find(rest)?;
    let rest = &rest[event..];
    let rest = &rest[SEQUENCE.find(rest)? + SEQUENCE.needle().len()..];
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || !matches!(rest.get(digits), Some(b',' | b'}')) {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

impl LeanSubscriber {
    async fn subscribe(socket: &Path, session_id: &str) -> Result<LeanSubscriber, Error> {
        use tokio::io::AsyncWriteExt;
        let mut stream = tokio::net::UnixStream::connect(socket).await?;
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/subscribe",
                             "params": {"sessionId": session_id}});
        let frame = agentos_protocol::host::encode_frame(request.to_string().as_bytes())?;
        stream.write_all(&frame).await?;
        let mut sub = LeanSubscriber {
            stream,
            decoder: agentos_protocol::host::FrameDecoder::new(u64::from(u32::MAX)),
            buf: vec![0; 256 * 1024],
        };
        // The first frame answers the subscription.
        let answer = sub.next_frame().await?;
        let answer: Frame<'_> = serde_json::from_slice(&answer)?;
        if answer.error.is_some() || answer.method.is_some() {
            return Err("sessions/subscribe was not answered with a result".into());
        }
        Ok(sub)
    }

    async fn next_frame(&mut self) -> Result<Vec<u8>, Error> {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some(frame) = self.decoder.next_frame()? {
                return Ok(frame);
            }
            let n = self.stream.read(&mut self.buf).await?;
            if n == 0 {
                return Err("the sidecar closed the subscription".into());
            }
            self.decoder.push(&self.buf[..n]);
        }
    }

    /// Reads until the event with sequence `target` arrives; returns the
    /// number of durable events seen. Every event must follow the last.
    async fn until(&mut self, target: u64) -> Result<u64, Error> {
        let mut last = None;
        let mut seen = 0;
        loop {
            let frame = self.next_frame().await?;
            let sequence = match spliced_sequence(&frame) {
                Some(sequence) => sequence,
                None => {
                    let frame: Frame<'_> = serde_json::from_slice(&frame)?;
                    if frame.method.as_deref() != Some("sessions/event") {
                        continue;
                    }
                    frame
                        .params
                        .and_then(|p| p.event)
                        .ok_or("a sessions/event without an event")?
                        .sequence
                }
            };
            if let Some(last) = last {
                if sequence != last + 1 {
                    return Err(format!("event {sequence} after {last}").into());
                }
            }
            last = Some(sequence);
            seen += 1;
            if sequence >= target {
                return Ok(seen);
            }
        }
    }
}

/// (1a) End to end: prompt sent → subscriber holds the last durable event.
async fn end_to_end_events_per_second() -> Result<f64, Error> {
    let sc = start_sidecar(json!({})).await?;
    let (client, _notes) = HostClient::connect(&sc.socket).await?;
    client
        .call(
            "sessions/open",
            json!({"sessionId": "flood", "agent": "echo"}),
        )
        .await?;
    // Start the adapter first so the measurement is the flood itself.
    client
        .call(
            "sessions/prompt",
            json!({"sessionId": "flood", "content": text("echo warm")}),
        )
        .await?;
    let mut sub = LeanSubscriber::subscribe(&sc.socket, "flood").await?;
    let target = 2 + 1 + FLOOD; // two warm-up events, the user chunk, the flood
    let pid = sc.child.id().ok_or("the sidecar exited")?;
    let cpu_before = cpu_time(pid);
    let sqlite_before = thread_cpu_time(pid, "agentos-sqlite");
    let start = Instant::now();
    let prompt = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call(
                    "sessions/prompt",
                    json!({"sessionId": "flood", "content": text(&format!("flood {FLOOD}"))}),
                )
                .await
        })
    };
    let seen = sub.until(target).await?;
    let elapsed = start.elapsed();
    if seen != 1 + FLOOD {
        return Err(format!("the subscriber saw {seen} events, expected {}", 1 + FLOOD).into());
    }
    if let (Some(before), Some(after)) = (cpu_before, cpu_time(pid)) {
        let used = after.saturating_sub(before);
        println!(
            "    sidecar CPU during the flood: {:.1} µs per event, {:.0}% of one core",
            used.as_secs_f64() * 1e6 / FLOOD as f64,
            100.0 * used.as_secs_f64() / elapsed.as_secs_f64()
        );
    }
    if let (Some(before), Some(after)) = (sqlite_before, thread_cpu_time(pid, "agentos-sqlite")) {
        let used = after.saturating_sub(before);
        println!(
            "    of which the SQLite executor thread: {:.1} µs per event, {:.0}% busy",
            used.as_secs_f64() * 1e6 / FLOOD as f64,
            100.0 * used.as_secs_f64() / elapsed.as_secs_f64()
        );
    }
    prompt.await??;
    Ok(FLOOD as f64 / elapsed.as_secs_f64())
}

/// (1b) Raw SQLite: 100-row transactions of ~200-byte rows.
fn raw_sqlite_rows_per_second() -> Result<f64, Error> {
    let dir = tempfile::tempdir()?;
    let conn = rusqlite::Connection::open(dir.path().join("raw.sqlite"))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(
        "CREATE TABLE events (session_id TEXT NOT NULL, sequence INTEGER NOT NULL, \
         ts INTEGER NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL, \
         PRIMARY KEY (session_id, sequence))",
    )?;
    let filler = "f".repeat(160);
    let start = Instant::now();
    let mut seq = 0u64;
    while seq < FLOOD {
        let tx = conn.unchecked_transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO events (session_id, sequence, ts, kind, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for _ in 0..100 {
                seq += 1;
                let payload = format!(
                    r#"{{"sessionUpdate":"tool_call_update","toolCallId":"flood","text":"{seq:08} {filler}"}}"#
                );
                stmt.execute(rusqlite::params![
                    "flood",
                    seq,
                    0,
                    "session_update",
                    payload
                ])?;
            }
        }
        tx.commit()?;
    }
    Ok(FLOOD as f64 / start.elapsed().as_secs_f64())
}

/// (2) Round trips of echo turns through the sidecar and directly.
async fn dispatch_overhead() -> Result<(Vec<Duration>, Vec<Duration>), Error> {
    let sc = start_sidecar(json!({})).await?;
    let (client, _notes) = HostClient::connect(&sc.socket).await?;
    client
        .call("sessions/open", json!({"sessionId": "d", "agent": "echo"}))
        .await?;
    let turn = |i: usize| json!({"sessionId": "d", "content": text(&format!("echo {i}"))});
    client.call("sessions/prompt", turn(0)).await?;
    let mut via_sidecar = Vec::with_capacity(DISPATCH_TURNS);
    for i in 0..DISPATCH_TURNS {
        let t = Instant::now();
        client.call("sessions/prompt", turn(i)).await?;
        via_sidecar.push(t.elapsed());
    }

    let command = AdapterCommand::new(binary("agentos-fake-agent")?.display().to_string());
    let (conn, mut events) = AdapterConnection::spawn(&command, AdapterOptions::default()).await?;
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    conn.initialize(json!({"name": "bench", "version": "0"}), json!({}))
        .await?;
    let session = conn
        .request(methods::SESSION_NEW, json!({"cwd": "/", "mcpServers": []}))
        .await?;
    let sid = session["sessionId"].clone();
    let mut direct = Vec::with_capacity(DISPATCH_TURNS);
    for i in 0..=DISPATCH_TURNS {
        let t = Instant::now();
        conn.request(
            methods::SESSION_PROMPT,
            json!({"sessionId": sid, "prompt": text(&format!("echo {i}"))}),
        )
        .await?;
        if i > 0 {
            direct.push(t.elapsed());
        }
    }
    conn.shutdown().await;
    via_sidecar.sort();
    direct.sort();
    Ok((via_sidecar, direct))
}

/// (3) Many sessions at once: turns per second and the sidecar's peak RSS.
async fn many_sessions() -> Result<(f64, u64, u64, u64), Error> {
    let sc = start_sidecar(json!({})).await?;
    let pid = sc.child.id().ok_or("the sidecar exited")?;
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        clients.push(HostClient::connect(&sc.socket).await?);
    }
    // Open every session and start its adapter with one warm-up turn.
    let mut warm = tokio::task::JoinSet::new();
    for i in 0..SESSIONS {
        let client = clients[i % CONNECTIONS].0.clone();
        warm.spawn(async move {
            let id = format!("m{i}");
            client
                .call("sessions/open", json!({"sessionId": id, "agent": "echo"}))
                .await?;
            client
                .call(
                    "sessions/prompt",
                    json!({"sessionId": id, "content": text("echo warm")}),
                )
                .await?;
            Ok::<(), Error>(())
        });
    }
    while let Some(r) = warm.join_next().await {
        r??;
    }
    let start = Instant::now();
    let mut turns = tokio::task::JoinSet::new();
    for i in 0..SESSIONS {
        let client = clients[i % CONNECTIONS].0.clone();
        turns.spawn(async move {
            let id = format!("m{i}");
            for t in 0..TURNS_PER_SESSION {
                client
                    .call(
                        "sessions/prompt",
                        json!({"sessionId": id, "content": text(&format!("echo {t}"))}),
                    )
                    .await?;
            }
            Ok::<(), Error>(())
        });
    }
    while let Some(r) = turns.join_next().await {
        r??;
    }
    let rate = (SESSIONS * TURNS_PER_SESSION) as f64 / start.elapsed().as_secs_f64();
    let rss = peak_rss_kib(pid).ok_or("cannot read VmHWM")?;
    // What is resident now, split: the process's own memory, and the
    // database file's pages its readers have mapped (shared with the page
    // cache, and given back under pressure).
    let anon = status_kib(pid, "RssAnon:").unwrap_or(0);
    let file = status_kib(pid, "RssFile:").unwrap_or(0);
    Ok((rate, rss, anon, file))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// (1) Durable events end to end beside raw inserts, in interleaved rounds.
async fn end_to_end() -> Result<(), Error> {
    // Interleaved rounds; the medians are the figures (a shared virtual
    // machine's disk and CPU vary from one second to the next).
    let mut e2e_rounds = Vec::new();
    let mut raw_rounds = Vec::new();
    for round in 1..=ROUNDS {
        println!("  round {round}/{ROUNDS}:");
        let e2e = end_to_end_events_per_second().await?;
        let raw = raw_sqlite_rows_per_second()?;
        println!(
            "    end to end {e2e:.0} events/s, raw {raw:.0} rows/s, ratio {:.2}",
            e2e / raw
        );
        e2e_rounds.push(e2e);
        raw_rounds.push(raw);
    }
    let (e2e, raw) = (median(&mut e2e_rounds), median(&mut raw_rounds));
    println!("(1) durable events/s end to end (flood {FLOOD}, to a subscriber), median: {e2e:.0}");
    println!("    raw SQLite inserts/s (100-row transactions, WAL, NORMAL), median:    {raw:.0}");
    println!("    ratio of the medians: {:.2} (goal >= 0.75)", e2e / raw);
    Ok(())
}

/// (2) The echo turn's round trip through the sidecar and direct.
async fn dispatch() -> Result<(), Error> {
    let (via, direct) = dispatch_overhead().await?;
    let (v50, v99) = (percentile(&via, 0.5), percentile(&via, 0.99));
    let (d50, d99) = (percentile(&direct, 0.5), percentile(&direct, 0.99));
    println!("(2) echo turn round trip over {DISPATCH_TURNS} turns:");
    println!(
        "    through the sidecar p50 {:.3} ms p99 {:.3} ms; direct p50 {:.3} ms p99 {:.3} ms",
        ms(v50),
        ms(v99),
        ms(d50),
        ms(d99)
    );
    println!(
        "    dispatch overhead p50 {:.3} ms p99 {:.3} ms",
        ms(v50.saturating_sub(d50)),
        ms(v99.saturating_sub(d99))
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // `bench_sessions e2e`, `dispatch` or `many` runs that part alone, for
    // profiling.
    let part = std::env::args().nth(1);
    let only_e2e = part.as_deref() == Some("e2e");
    let only_dispatch = part.as_deref() == Some("dispatch");
    let only_many = part.as_deref() == Some("many");
    if !only_dispatch && !only_many {
        end_to_end().await?;
    }
    if only_e2e {
        return Ok(());
    }

    if !only_many {
        dispatch().await?;
    }
    if only_dispatch {
        return Ok(());
    }

    let (rate, rss, anon, file) = many_sessions().await?;
    println!(
        "(3) {SESSIONS} sessions x {TURNS_PER_SESSION} echo turns concurrently: {rate:.0} turns/s; sidecar peak RSS {:.1} MiB",
        rss as f64 / 1024.0
    );
    println!(
        "    resident after the turns: {:.1} MiB own memory, {:.1} MiB mapped database pages",
        anon as f64 / 1024.0,
        file as f64 / 1024.0
    );
    Ok(())
}
