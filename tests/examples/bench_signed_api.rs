//! Signed API benchmark (release): verified `GetAgent` actions/s with 16
//! concurrent keep-alive clients beside raw Ed25519 verifications/s on one
//! core, and their ratio (the goal is ≥ 0.5); p50/p99 latency; WebSocket
//! fan-out of one session's events to 1,000 subscribers; the sidecar's idle
//! and loaded RSS. Envelopes are signed before the clock starts, each with
//! its own timestamp, so the replay cache admits every one.
//!
//! Run with `scripts/bench-signed-api`; `scripts/bench-signed-api fanout`
//! runs the fan-out alone (as `scripts/bench-agent` does, for its goal).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentos_protocol::seed::{cbor, generate_signing_key, Envelope, Ipld, Principal, SigningKey};
use serde_json::{json, Value};

const CLIENTS: usize = 16;
const LOAD_SECONDS: u64 = 5;
const ENVELOPES: usize = 200_000;
const VERIFY_SECONDS: f64 = 2.0;
const SUBSCRIBERS: usize = 1_000;
const FANOUT_EVENTS: u64 = 200;
/// The fan-out's p99 delay goal.
const FANOUT_GOAL_MS: f64 = 100.0;

use agentos_tests::bench::{start_sidecar, status_kib as rss_kib, ApiConnection, Error};

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn action(value: Value) -> std::collections::BTreeMap<String, Ipld> {
    match agentos_tests::seed::ipld(&value) {
        Ipld::Map(map) => map,
        _ => Default::default(),
    }
}

fn sign(key: &SigningKey, value: Value, ts: i64) -> Result<Vec<u8>, Error> {
    let mut envelope = Envelope::unsigned(
        action(value),
        Principal::of_key(key),
        Principal::of_key(key),
        ts,
    );
    envelope.protocol = Some(2);
    envelope.sign_with(key)?;
    Ok(envelope.encode()?)
}

fn text_field(body: &[u8], name: &str) -> Result<String, Error> {
    let value: Ipld = cbor::from_slice(body, 1 << 24)?;
    match value {
        Ipld::Map(map) => match map.get(name) {
            Some(Ipld::String(s)) => Ok(s.clone()),
            other => Err(format!("{name}: {other:?}").into()),
        },
        _ => Err("not a map".into()),
    }
}

/// Raw `verify_strict` of one envelope's signing bytes, one thread.
fn raw_verifications_per_second(key: &SigningKey, agent_id: &str) -> Result<f64, Error> {
    let envelope = Envelope::decode(
        &sign(key, json!({"_": "GetAgent", "agentId": agent_id}), now_ms())?,
        1 << 20,
    )?;
    let message = envelope.signing_bytes()?;
    let signature = ed25519_dalek::Signature::from_bytes(&envelope.sig);
    let verifying = key.verifying_key();
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed().as_secs_f64() < VERIFY_SECONDS {
        for _ in 0..256 {
            verifying.verify_strict(&message, &signature)?;
        }
        n += 256;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// One subscriber: connects, subscribes with `envelope`, and counts the
/// durable appends it receives until it has `want` of them, recording each
/// one's delay from its commit (`createdAt`, the same machine's clock).
async fn subscriber(
    address: String,
    envelope: Vec<u8>,
    want: u64,
    ready: tokio::sync::mpsc::Sender<()>,
) -> Result<Vec<(i64, f64)>, Error> {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    // A small read buffer: tungstenite zeroes the whole buffer before each
    // read, and 1,000 subscribers share this machine's cores with the
    // sidecar they measure.
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(32 * 1024);
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(
        format!("ws://{address}/agents/ws"),
        Some(config),
        false,
    )
    .await?;
    ws.send(Message::Binary(envelope.into())).await?;
    let mut delays = Vec::with_capacity(want as usize);
    let mut subscribed = false;
    while let Some(message) = ws.next().await {
        let Message::Text(text) = message? else {
            continue;
        };
        // Only the fields the figure needs are kept; the frame is still
        // parsed whole, as JSON.
        let event: Frame = serde_json::from_str(&text)?;
        match event.kind.as_str() {
            "subscribed" if !subscribed => {
                subscribed = true;
                let _ = ready.send(()).await;
            }
            "append" => {
                let created = event.event.map_or(0, |event| event.created_at);
                delays.push((created, (now_ms() - created) as f64));
                if delays.len() as u64 >= want {
                    break;
                }
            }
            "error" => return Err(format!("subscriber error: {text}").into()),
            _ => {}
        }
    }
    Ok(delays)
}

/// A server frame as the subscribers read it.
#[derive(serde::Deserialize)]
struct Frame {
    #[serde(rename = "_")]
    kind: String,
    event: Option<AppendedEvent>,
}

#[derive(serde::Deserialize)]
struct AppendedEvent {
    #[serde(rename = "createdAt", default)]
    created_at: i64,
}

/// WebSocket fan-out: `SUBSCRIBERS` sockets on one session while one turn
/// appends `FANOUT_EVENTS` durable events (plus the user's message).
async fn fan_out(
    address: &str,
    key: &SigningKey,
    agent_id: &str,
    pid: u32,
) -> Result<(f64, f64, u64), Error> {
    let mut conn = ApiConnection::open(address).await?;
    let (status, body) = conn
        .post(sign(
            key,
            json!({"_": "CreateSession", "agentId": agent_id}),
            now_ms(),
        )?)
        .await?;
    if status != 200 {
        return Err(format!("CreateSession answered {status}").into());
    }
    let session_id = text_field(&body, "sessionId")?;
    let want = FANOUT_EVENTS + 1;
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(SUBSCRIBERS);
    let base = now_ms();
    let mut tasks = Vec::with_capacity(SUBSCRIBERS);
    for i in 0..SUBSCRIBERS {
        let envelope = sign(
            key,
            json!({"_": "Subscribe", "key": format!("sessions/{session_id}")}),
            base - i as i64,
        )?;
        tasks.push(tokio::spawn(subscriber(
            address.to_owned(),
            envelope,
            want,
            ready_tx.clone(),
        )));
    }
    for _ in 0..SUBSCRIBERS {
        tokio::time::timeout(Duration::from_secs(60), ready_rx.recv())
            .await?
            .ok_or("a subscriber ended before it subscribed")?;
    }
    let started = Instant::now();
    let server_before = agentos_tests::bench::on_cpu(pid);
    let client_before = agentos_tests::bench::on_cpu(std::process::id());
    let (status, _) = conn
        .post(sign(
            key,
            json!({"_": "MessageSession", "sessionId": session_id,
                   "content": [{"type": "text", "text": format!("flood {FANOUT_EVENTS}")}]}),
            now_ms(),
        )?)
        .await?;
    if status != 200 {
        return Err(format!("MessageSession answered {status}").into());
    }
    let mut delays = Vec::new();
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    for task in tasks {
        for (created, delay) in tokio::time::timeout(Duration::from_secs(120), task).await??? {
            first = first.min(created);
            last = last.max(created);
            delays.push(delay);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let server = agentos_tests::bench::on_cpu(pid).saturating_sub(server_before);
    let client = agentos_tests::bench::on_cpu(std::process::id()).saturating_sub(client_before);
    delays.sort_by(f64::total_cmp);
    let delivered = delays.len() as u64;
    println!(
        "fan-out CPU: sidecar {:.0} ms ({:.2} µs per frame), this client {:.0} ms, over {:.0} ms; \
         the events were committed over {} ms",
        server.as_secs_f64() * 1000.0,
        server.as_secs_f64() * 1e6 / delivered.max(1) as f64,
        client.as_secs_f64() * 1000.0,
        elapsed * 1000.0,
        last.saturating_sub(first)
    );
    Ok((
        delivered as f64 / elapsed,
        percentile(&delays, 0.99),
        delivered,
    ))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let sidecar = start_sidecar(json!({
        "http": {"listen": "127.0.0.1:0", "replayCacheEntries": ENVELOPES * 2,
                 // One account holds every subscriber's socket.
                 "ws": {"maxSockets": 2048, "maxSocketsPerAccount": 2048,
                        "maxQueuedBytesPerSocket": 64 << 20}},
    }))
    .await?;
    let pid = sidecar.child.id().ok_or("no pid")?;
    let address = sidecar.ready["http"]
        .as_str()
        .ok_or("no http listener")?
        .to_owned();
    let key = generate_signing_key();
    let mut setup = ApiConnection::open(&address).await?;
    let definition = json!({"name": "bench", "systemPrompt": "x", "modelProvider": "p",
                            "model": "m", "adapter": "echo"});
    let (status, body) = setup
        .post(sign(
            &key,
            json!({"_": "CreateAgent", "definition": definition}),
            now_ms(),
        )?)
        .await?;
    if status != 200 {
        return Err(format!("CreateAgent answered {status}").into());
    }
    let agent_id = text_field(&body, "agentId")?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_rss = rss_kib(pid, "VmRSS:").unwrap_or(0);
    let fanout_only = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("fanout") => true,
        Some(other) => return Err(format!("unknown part {other:?}: fanout").into()),
    };
    if fanout_only {
        return print_fan_out(&address, &key, &agent_id, pid).await;
    }

    let raw = tokio::task::spawn_blocking({
        let key = key.clone();
        let agent_id = agent_id.clone();
        move || raw_verifications_per_second(&key, &agent_id)
    })
    .await??;

    // Envelopes signed up front, each with its own timestamp.
    let base = now_ms();
    let mut envelopes = Vec::with_capacity(ENVELOPES);
    for i in 0..ENVELOPES {
        envelopes.push(sign(
            &key,
            json!({"_": "GetAgent", "agentId": agent_id}),
            base - i as i64,
        )?);
    }
    let envelopes = Arc::new(envelopes);
    let next = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(LOAD_SECONDS);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let envelopes = envelopes.clone();
        let next = next.clone();
        let address = address.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = ApiConnection::open(&address).await?;
            let mut latencies = Vec::new();
            let mut failures = 0u64;
            while Instant::now() < deadline {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = envelopes.get(i) else { break };
                let sent = Instant::now();
                let (status, _) = conn.post(body.clone()).await?;
                latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
                if status != 200 {
                    failures += 1;
                }
            }
            Ok::<_, Error>((latencies, failures))
        }));
    }
    let mut latencies = Vec::new();
    let mut failures = 0;
    for task in tasks {
        let (l, f) = task.await??;
        latencies.extend(l);
        failures += f;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let loaded_rss = rss_kib(pid, "VmHWM:").unwrap_or(0);
    latencies.sort_by(f64::total_cmp);
    let ok = latencies.len() as u64 - failures;
    let rate = ok as f64 / elapsed;
    println!("raw Ed25519 verify_strict, one core: {raw:.0} verifications/s");
    println!(
        "verified GetAgent, {CLIENTS} clients: {rate:.0} actions/s ({ok} in {elapsed:.1} s, {failures} refused)"
    );
    println!(
        "ratio actions/s ÷ verifications/s: {:.2} (goal ≥ 0.5)",
        rate / raw
    );
    println!(
        "latency p50 {:.2} ms, p99 {:.2} ms",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    );
    println!("RSS idle {idle_rss} KiB, peak under HTTP load {loaded_rss} KiB");
    print_fan_out(&address, &key, &agent_id, pid).await
}

async fn print_fan_out(
    address: &str,
    key: &SigningKey,
    agent_id: &str,
    pid: u32,
) -> Result<(), Error> {
    let (rate, p99, delivered) = fan_out(address, key, agent_id, pid).await?;
    let fanout_rss = rss_kib(pid, "VmHWM:").unwrap_or(0);
    let met = if p99 <= FANOUT_GOAL_MS {
        "met"
    } else {
        "NOT MET"
    };
    println!(
        "WebSocket fan-out, {SUBSCRIBERS} subscribers of one session: {rate:.0} events/s delivered \
         ({delivered} in all), p99 delay {p99:.0} ms — goal ≤ {FANOUT_GOAL_MS} ms: {met}"
    );
    println!("RSS peak with {SUBSCRIBERS} sockets {fanout_rss} KiB");
    Ok(())
}
