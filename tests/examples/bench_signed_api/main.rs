//! Signed API benchmark (release): verified `GetAgent` actions/s with 16
//! concurrent keep-alive clients beside raw Ed25519 verifications/s on one
//! core, and their ratio (the goal is ≥ 0.5); p50/p99 latency; WebSocket
//! fan-out of one session's events to 1,000 subscribers, twice (new
//! sockets, then the same sockets warm), beside the bare fan-out of the
//! same bytes to the same clients (`bare.rs`), the ceiling this machine
//! sets; the sidecar's idle and loaded RSS. Envelopes are signed before
//! the clock starts, each with its own timestamp, so the replay cache
//! admits every one.
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
/// Bursts of `FANOUT_EVENTS` to the same subscribers: new sockets, then warm.
const BURSTS: usize = 2;
/// The fan-out's p99 delay goal.
const FANOUT_GOAL_MS: f64 = 100.0;

use agentos_tests::bench::{start_sidecar, status_kib as rss_kib, ApiConnection, Error};

mod bare;
mod fanout;
mod lean;

use fanout::{fan_out, percentile, Publisher};

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

/// Signs `action` now, posts it on `conn`, and reads `field` of its
/// answer, which must be a 200.
async fn act(
    conn: &mut ApiConnection,
    key: &SigningKey,
    action: Value,
    field: &str,
) -> Result<String, Error> {
    let name = action["_"].as_str().unwrap_or("the action").to_owned();
    let (status, body) = conn.post(sign(key, action, now_ms())?).await?;
    if status != 200 {
        return Err(format!("{name} answered {status}").into());
    }
    text_field(&body, field)
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

fn main() -> Result<(), Error> {
    if std::env::args().nth(1).as_deref() == Some(bare::ROLE) {
        return bare::serve();
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> Result<(), Error> {
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
    let agent_id = act(
        &mut setup,
        &key,
        json!({"_": "CreateAgent", "definition": definition}),
        "agentId",
    )
    .await?;
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
    let ours = fan_out(Publisher::sidecar(address, key, agent_id, pid).await?).await?;
    let fanout_rss = rss_kib(pid, "VmHWM:").unwrap_or(0);
    let bare = fan_out(Publisher::bare().await?).await?;
    for (i, (burst, bare)) in ours.iter().zip(&bare).enumerate() {
        let sockets = ["new sockets", "warm sockets"][i.min(1)];
        let met = ["NOT MET", "met"][usize::from(burst.p99 <= FANOUT_GOAL_MS)];
        println!(
            "WebSocket fan-out, {SUBSCRIBERS} subscribers of one session ({sockets}): {:.0} \
             events/s delivered ({} in all), p99 delay {:.0} ms — goal ≤ {FANOUT_GOAL_MS} ms: \
             {met}; the bare fan-out of the same bytes: {:.0} events/s, p99 {:.0} ms \
             (sidecar ÷ bare {:.2})",
            burst.rate,
            burst.delivered,
            burst.p99,
            bare.rate,
            bare.p99,
            burst.p99 / bare.p99.max(1.0)
        );
    }
    println!("RSS peak with {SUBSCRIBERS} sockets {fanout_rss} KiB");
    Ok(())
}
