//! Builtin agent benchmark (release), run by `scripts/bench-agent`: the
//! builtin model agent against a scripted OpenAI provider that answers at
//! once, hosted in this process. (1) one session doing sequential turns,
//! driven once through the host socket's `sessions/prompt` and once through
//! the signed API's `MessageSession` (pre-signed envelopes on one keep-alive
//! connection): turns/s and turn latency; (2) the latency the sidecar adds
//! to a streamed token, from the instant the provider wrote a delta to its
//! arrival as a WebSocket `appendPartial` and as a host `sessions/update`;
//! (3) 500 sessions, each with its own agent process, doing turns at once:
//! the warm-up that spawns the processes, then rounds of 500 concurrent
//! turns (turns/s, latency, stalls, failures); (4) and (5) the CPU goals
//! (`goals.rs`); (6) 10,000 builtin sessions that each ran one turn (what
//! idle sessions hold). Each phase reports the sidecar's own CPU time per
//! turn and, separately, its agent children's. Nothing is asserted: figures
//! are printed side by side, each goal beside its figure.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentos_client::ctl::HostClient;
use agentos_protocol::seed::Ipld;
use agentos_tests::bench::{
    children_of, load_average, percentile, proc_cpu, start_sidecar, status_kib, threads_on_cpu,
    tree_cpu, ApiConnection, Error, Running,
};
use agentos_tests::http::Target;
use agentos_tests::provider_server::{Flavor, Reply, ScriptedProvider};
use agentos_tests::seed::{bytes, call, now_ms, Signer};
use serde_json::{json, Value};

mod goals;

/// Sequential turns of the one-session phase, per front door.
const ONE_SESSION_TURNS: usize = 300;
/// Sessions of the concurrent phase, each with its own agent process.
const SESSIONS: usize = 500;
/// Rounds of `SESSIONS` concurrent turns after the warm-up.
const ROUNDS: usize = 5;
/// Host socket connections the concurrent turns are spread over.
const CONNECTIONS: usize = 16;
/// Workers creating the sessions through the signed API.
const CREATORS: usize = 16;
/// Sessions of the idle phase: each runs one turn, then holds nothing.
const IDLE_SESSIONS: usize = 10_000;
/// Turns of the idle phase at once.
const IDLE_WAVE: usize = 64;
/// A turn slower than this counts as a stall.
const STALL: Duration = Duration::from_secs(10);
/// A turn not answered by then is abandoned and counted as failed.
const TURN_TIMEOUT: Duration = Duration::from_secs(120);
/// The streamed reply: this many deltas, this far apart, this many turns.
const STREAM_DELTAS: usize = 200;
const STREAM_GAP: Duration = Duration::from_millis(2);
const STREAM_TURNS: usize = 5;
/// Ends every streamed delta, so an arrival can be matched to its delta
/// however the pieces were merged or split on the way.
const DELTA_END: char = '|';

/// The short reply of every measured turn (a few deltas).
fn short_reply() -> Reply {
    Reply::Text(["Sure", ", ", "done", "."].map(String::from).to_vec())
}
const SHORT_TEXT: &str = "Sure, done.";

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Turn latencies and what went wrong, over one measured run.
#[derive(Default)]
struct Turns {
    latencies: Vec<Duration>,
    /// Error code (or `wrong_answer`, `timeout`) to count.
    failures: BTreeMap<String, usize>,
}

impl Turns {
    fn add(&mut self, latency: Duration, outcome: Result<(), String>) {
        self.latencies.push(latency);
        if let Err(code) = outcome {
            *self.failures.entry(code).or_default() += 1;
        }
    }

    fn extend(&mut self, other: Turns) {
        self.latencies.extend(other.latencies);
        for (code, n) in other.failures {
            *self.failures.entry(code).or_default() += n;
        }
    }

    fn stalled(&self) -> usize {
        self.latencies.iter().filter(|l| **l > STALL).count()
    }

    /// `p50 … p99 … max …` of the latencies.
    fn summary(&self) -> String {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            ms(percentile(&sorted, 0.5)),
            ms(percentile(&sorted, 0.99)),
            ms(sorted.last().copied().unwrap_or_default())
        )
    }

    fn problems(&self) -> String {
        let failures = if self.failures.is_empty() {
            "none".to_owned()
        } else {
            self.failures
                .iter()
                .map(|(code, n)| format!("{n} {code}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "stalled (> {} s): {}; failed: {failures}",
            STALL.as_secs(),
            self.stalled()
        )
    }
}

/// The sidecar's CPU, its agent children's, and this process's (the
/// scripted provider and the clients, which are not the sidecar's cost).
#[derive(Clone, Copy)]
struct CpuMark {
    sidecar: Duration,
    /// The sidecar's SQLite executor thread, part of `sidecar`.
    sqlite: Duration,
    agents: Duration,
    bench: Duration,
    at: Instant,
}

fn cpu_mark(pid: u32) -> CpuMark {
    let tree = tree_cpu(pid);
    CpuMark {
        sidecar: tree.map(|t| t.own).unwrap_or_default(),
        sqlite: threads_on_cpu(pid)
            .into_iter()
            .filter(|(name, _)| name == "agentos-sqlite")
            .map(|(_, t)| t)
            .sum(),
        agents: tree.map(|t| t.children).unwrap_or_default(),
        bench: proc_cpu(None).map(|c| c.own).unwrap_or_default(),
        at: Instant::now(),
    }
}

fn print_cpu(before: CpuMark, after: CpuMark, turns: usize) {
    let wall = after.at.duration_since(before.at).as_secs_f64().max(1e-9);
    let per_turn = |d: Duration| ms(d) / turns.max(1) as f64;
    let share = |d: Duration| 100.0 * d.as_secs_f64() / wall;
    let (sidecar, sqlite, agents, bench) = (
        after.sidecar.saturating_sub(before.sidecar),
        after.sqlite.saturating_sub(before.sqlite),
        after.agents.saturating_sub(before.agents),
        after.bench.saturating_sub(before.bench),
    );
    println!(
        "    CPU per turn: sidecar {:.3} ms ({:.0}% of a core; its SQLite thread {:.3} ms), \
         agent processes {:.3} ms ({:.0}%); this process (provider + clients, not counted) \
         {:.3} ms ({:.0}%)",
        per_turn(sidecar),
        share(sidecar),
        per_turn(sqlite),
        per_turn(agents),
        share(agents),
        per_turn(bench),
        share(bench)
    );
}

/// The text of a host `sessions/prompt` answer, checked against `expected`.
fn check_answer(answer: &Value, expected: &str) -> Result<(), String> {
    let text: String = answer
        .pointer("/message/content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if answer["stopReason"] == "end_turn" && text == expected {
        Ok(())
    } else {
        Err("wrong_answer".to_owned())
    }
}

/// One turn through the host socket: its latency and outcome.
async fn host_turn(
    client: &HostClient,
    session: &str,
    text: &str,
) -> (Duration, Result<(), String>) {
    host_turn_expecting(client, session, text, SHORT_TEXT).await
}

/// [`host_turn`], its answer expected to read `expected`.
async fn host_turn_expecting(
    client: &HostClient,
    session: &str,
    text: &str,
    expected: &str,
) -> (Duration, Result<(), String>) {
    let sent = Instant::now();
    let answer = tokio::time::timeout(
        TURN_TIMEOUT,
        client.call(
            "sessions/prompt",
            json!({"sessionId": session, "content": [{"type": "text", "text": text}]}),
        ),
    )
    .await;
    let latency = sent.elapsed();
    let outcome = match answer {
        Err(_) => Err("timeout".to_owned()),
        Ok(Err(e)) => Err(e.code()),
        Ok(Ok(answer)) => check_answer(&answer, expected),
    };
    (latency, outcome)
}

/// The sidecar, the provider, an account with a key and a provider, and a
/// builtin agent using it.
struct World {
    sidecar: Running,
    pid: u32,
    provider: ScriptedProvider,
    address: String,
    target: Target,
    owner: Signer,
    agent_id: String,
}

fn answer_text(body: &Ipld, name: &str) -> Result<String, Error> {
    match body {
        Ipld::Map(map) => match map.get(name) {
            Some(Ipld::String(s)) => Ok(s.clone()),
            other => Err(format!("{name}: {other:?} in {body:?}").into()),
        },
        other => Err(format!("not a map: {other:?}").into()),
    }
}

impl World {
    /// The sidecar with its builtin agent; `idle_agent_ms` is
    /// `builtin.idleAgentMs` when given.
    async fn start(idle_agent_ms: Option<u64>) -> Result<World, Error> {
        let provider = ScriptedProvider::start(Flavor::OpenAi).await;
        provider.set_recording(false);
        provider.set_default(short_reply());
        // Room for 500 sessions doing turns at once. The host socket takes
        // 4,096 requests in flight per connection and 1,024 connections by
        // default; the signed door's request pool (256) and connection cap
        // (1,024) are raised so the session setup never queues on them.
        let mut config = json!({
            "http": {"listen": "127.0.0.1:0", "maxConcurrentRequests": 2048,
                     "maxConnections": 4096},
            "builtin": {"providerEndpoints": {"openai": provider.base_url()}},
            "limits": {"acp": {"maxSessionsPerVm": IDLE_SESSIONS + 1_000}},
        });
        if let Some(ms) = idle_agent_ms {
            config["builtin"]["idleAgentMs"] = json!(ms);
        }
        let sidecar = start_sidecar(config).await?;
        let pid = sidecar.child.id().ok_or("the sidecar exited")?;
        let address = sidecar.ready["http"]
            .as_str()
            .ok_or("no http listener")?
            .to_owned();
        let target = Target::from_ready(&address);
        let owner = Signer::new();
        for action in [
            json!({"_": "SetSecret", "name": "key", "value": bytes("sk-scripted")}),
            json!({"_": "SetModelProvider", "name": "main",
                   "provider": {"type": "openai", "secretRefs": {"apiKey": "key"}}}),
        ] {
            let answer = call(&target, &owner, action.clone()).await;
            if answer.status != 200 {
                return Err(format!("{action}: {} {:?}", answer.status, answer.body).into());
            }
        }
        let created = call(
            &target,
            &owner,
            json!({"_": "CreateAgent", "definition": {
                "name": "Bench", "systemPrompt": "Be brief.",
                "modelProvider": "main", "model": "scripted-model"}}),
        )
        .await;
        if created.status != 200 {
            return Err(format!("CreateAgent: {} {:?}", created.status, created.body).into());
        }
        Ok(World {
            agent_id: answer_text(&created.body, "agentId")?,
            sidecar,
            pid,
            provider,
            address,
            target,
            owner,
        })
    }

    async fn session(&self) -> Result<String, Error> {
        create_session(&self.target, &self.owner, &self.agent_id).await
    }

    async fn host(&self) -> Result<HostClient, Error> {
        Ok(HostClient::connect(&self.sidecar.socket).await?.0)
    }
}

async fn create_session(target: &Target, owner: &Signer, agent_id: &str) -> Result<String, Error> {
    let created = call(
        target,
        owner,
        json!({"_": "CreateSession", "agentId": agent_id}),
    )
    .await;
    if created.status != 200 {
        return Err(format!("CreateSession: {} {:?}", created.status, created.body).into());
    }
    answer_text(&created.body, "sessionId")
}

/// (1) One session, sequential turns, through each front door.
async fn one_session(world: &World) -> Result<(), Error> {
    let client = world.host().await?;

    let session = world.session().await?;
    let (first, outcome) = host_turn(&client, &session, "hello").await;
    outcome.map_err(|code| format!("the first turn failed: {code}"))?;
    let before = cpu_mark(world.pid);
    let mut turns = Turns::default();
    for i in 0..ONE_SESSION_TURNS {
        let (latency, outcome) = host_turn(&client, &session, &format!("turn {i}")).await;
        turns.add(latency, outcome);
    }
    let after = cpu_mark(world.pid);
    let wall = after.at.duration_since(before.at).as_secs_f64();
    println!(
        "(1) one session, {ONE_SESSION_TURNS} sequential turns (first turn, spawning the agent: {:.1} ms)",
        ms(first)
    );
    println!(
        "  host socket sessions/prompt: {:.0} turns/s; {}; {}",
        ONE_SESSION_TURNS as f64 / wall,
        turns.summary(),
        turns.problems()
    );
    print_growth(&turns.latencies);
    print_cpu(before, after, ONE_SESSION_TURNS);

    // The signed door: envelopes signed before the clock starts, each with
    // its own timestamp so the replay cache admits every one.
    let session = world.session().await?;
    let (_, outcome) = host_turn(&client, &session, "hello").await;
    outcome.map_err(|code| format!("the first turn failed: {code}"))?;
    let base = now_ms();
    let envelopes: Vec<Vec<u8>> = (0..ONE_SESSION_TURNS)
        .map(|i| {
            let action = json!({"_": "MessageSession", "sessionId": session,
                                "content": [{"type": "text", "text": format!("turn {i}")}]});
            world
                .owner
                .envelope_at(&action, base - 1 - i as i64)
                .encode()
                .map_err(Error::from)
        })
        .collect::<Result<_, _>>()?;
    let mut conn = ApiConnection::open(&world.address).await?;
    let before = cpu_mark(world.pid);
    let mut turns = Turns::default();
    for envelope in envelopes {
        let sent = Instant::now();
        let status = tokio::time::timeout(TURN_TIMEOUT, conn.post(envelope))
            .await
            .map(|r| r.map(|(status, _)| status));
        let outcome = match status {
            Err(_) => Err("timeout".to_owned()),
            Ok(Err(e)) => Err(format!("http: {e}")),
            Ok(Ok(200)) => Ok(()),
            Ok(Ok(status)) => Err(format!("status_{status}")),
        };
        turns.add(sent.elapsed(), outcome);
    }
    let after = cpu_mark(world.pid);
    let wall = after.at.duration_since(before.at).as_secs_f64();
    println!(
        "  signed MessageSession (pre-signed, keep-alive): {:.0} turns/s; {}; {}",
        ONE_SESSION_TURNS as f64 / wall,
        turns.summary(),
        turns.problems()
    );
    print_growth(&turns.latencies);
    print_cpu(before, after, ONE_SESSION_TURNS);
    Ok(())
}

/// Every turn sends the whole conversation back to the provider, so later
/// turns carry more: the first and last tenths side by side.
fn print_growth(latencies: &[Duration]) {
    let tenth = (latencies.len() / 10).max(1);
    let median = |part: &[Duration]| {
        let mut sorted = part.to_vec();
        sorted.sort();
        ms(percentile(&sorted, 0.5))
    };
    println!(
        "    p50 of the first {tenth} turns {:.2} ms, of the last {tenth} {:.2} ms (the transcript grows)",
        median(&latencies[..tenth.min(latencies.len())]),
        median(&latencies[latencies.len().saturating_sub(tenth)..])
    );
}

/// Arrival instants of streamed deltas, in order, one per `DELTA_END` seen.
type Arrivals = Arc<Mutex<Vec<Instant>>>;

fn record(arrivals: &Arrivals, at: Instant, text: &str) {
    let n = text.matches(DELTA_END).count();
    let mut all = arrivals.lock().unwrap_or_else(|e| e.into_inner());
    all.extend(std::iter::repeat_n(at, n));
}

fn count(arrivals: &Arrivals) -> usize {
    arrivals.lock().unwrap_or_else(|e| e.into_inner()).len()
}

/// A WebSocket subscribed to `sessions/<id>`, recording the arrival of each
/// `appendPartial` text delta.
async fn ws_subscriber(world: &World, session: &str) -> Result<Arrivals, Error> {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let (mut ws, _) =
        tokio_tungstenite::connect_async(format!("ws://{}/agents/ws", world.address)).await?;
    let subscribe = world
        .owner
        .sign(&json!({"_": "Subscribe", "key": format!("sessions/{session}")}));
    ws.send(Message::Binary(subscribe.into())).await?;
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await?
            .ok_or("the WebSocket closed")??;
        if let Message::Text(text) = message {
            let event: Value = serde_json::from_str(&text)?;
            match event["_"].as_str() {
                Some("subscribed") => break,
                Some("error") => return Err(format!("Subscribe refused: {text}").into()),
                _ => {}
            }
        }
    }
    let arrivals = Arrivals::default();
    let sink = arrivals.clone();
    tokio::spawn(async move {
        while let Some(Ok(message)) = ws.next().await {
            let at = Instant::now();
            let Message::Text(text) = message else {
                continue;
            };
            let Ok(event) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            if event["_"] == "appendPartial" {
                if let Some(delta) = event.pointer("/patch/textDelta").and_then(Value::as_str) {
                    record(&sink, at, delta);
                }
            }
        }
    });
    Ok(arrivals)
}

/// A host connection subscribed to the session, reading frames straight
/// off the socket and recording the arrival of each agent text chunk sent
/// as `sessions/update`.
async fn host_subscriber(world: &World, session: &str) -> Result<Arrivals, Error> {
    use agentos_protocol::host::{encode_frame, FrameDecoder};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::UnixStream::connect(&world.sidecar.socket).await?;
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/subscribe",
                         "params": {"sessionId": session}});
    stream
        .write_all(&encode_frame(request.to_string().as_bytes())?)
        .await?;
    let arrivals = Arrivals::default();
    let sink = arrivals.clone();
    let (answered_tx, answered) = tokio::sync::oneshot::channel::<Result<(), String>>();
    tokio::spawn(async move {
        let mut answered_tx = Some(answered_tx);
        let mut decoder = FrameDecoder::new(u64::from(u32::MAX));
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let at = Instant::now();
            decoder.push(&buf[..n]);
            while let Ok(Some(frame)) = decoder.next_frame() {
                let Ok(message) = serde_json::from_slice::<Value>(&frame) else {
                    continue;
                };
                if message["id"] == 1 {
                    let outcome = match message.get("error") {
                        Some(error) => Err(error.to_string()),
                        None => Ok(()),
                    };
                    if let Some(tx) = answered_tx.take() {
                        let _ = tx.send(outcome);
                    }
                } else if message["method"] == "sessions/update"
                    && message["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
                {
                    if let Some(text) = message
                        .pointer("/params/update/content/text")
                        .and_then(Value::as_str)
                    {
                        record(&sink, at, text);
                    }
                }
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(30), answered)
        .await??
        .map_err(|e| format!("sessions/subscribe refused: {e}"))?;
    Ok(arrivals)
}

/// (2) The latency a streamed token gets from the sidecar.
async fn streaming(world: &World) -> Result<(), Error> {
    let client = world.host().await?;
    let session = world.session().await?;
    host_turn(&client, &session, "hello")
        .await
        .1
        .map_err(|code| format!("the first turn failed: {code}"))?;
    let ws = ws_subscriber(world, &session).await?;
    let host = host_subscriber(world, &session).await?;
    let mut sent_at = Vec::with_capacity(STREAM_DELTAS * STREAM_TURNS);
    let before = cpu_mark(world.pid);
    for turn in 0..STREAM_TURNS {
        let deltas = (0..STREAM_DELTAS)
            .map(|i| format!("t{turn}d{i}{DELTA_END}"))
            .collect();
        world.provider.push(Reply::Slow {
            deltas,
            gap: STREAM_GAP,
        });
        let answer = tokio::time::timeout(
            TURN_TIMEOUT,
            client.call(
                "sessions/prompt",
                json!({"sessionId": session,
                       "content": [{"type": "text", "text": format!("stream {turn}")}]}),
            ),
        )
        .await??;
        if answer["stopReason"] != "end_turn" {
            return Err(format!("a streamed turn ended with {answer}").into());
        }
        let sent = world.provider.delta_sent_at();
        if sent.len() != STREAM_DELTAS {
            return Err(format!("the provider sent {} deltas", sent.len()).into());
        }
        sent_at.extend(sent);
        // Live updates may trail the answer by a little.
        let want = sent_at.len();
        let deadline = Instant::now() + Duration::from_secs(10);
        while (count(&ws) < want || count(&host) < want) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let after = cpu_mark(world.pid);
    println!(
        "(2) streamed token latency, {STREAM_TURNS} turns x {STREAM_DELTAS} deltas {} ms apart \
         (provider wrote the delta → it arrived):",
        STREAM_GAP.as_millis()
    );
    for (name, arrivals) in [
        ("WebSocket appendPartial", &ws),
        ("host sessions/update  ", &host),
    ] {
        let arrivals = arrivals.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut latencies: Vec<Duration> = arrivals
            .iter()
            .zip(&sent_at)
            .map(|(got, sent)| got.saturating_duration_since(*sent))
            .collect();
        latencies.sort();
        let slow = latencies
            .iter()
            .filter(|l| **l > Duration::from_millis(5))
            .count();
        println!(
            "  {name}: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms, {slow} over 5 ms \
             ({} of {} deltas seen; goal p50 ≤ 1 ms)",
            ms(percentile(&latencies, 0.5)),
            ms(percentile(&latencies, 0.99)),
            ms(latencies.last().copied().unwrap_or_default()),
            arrivals.len(),
            sent_at.len()
        );
    }
    print_cpu(before, after, STREAM_TURNS);
    Ok(())
}

/// One round of a turn on every session at once.
async fn concurrent_round(
    clients: &[HostClient],
    sessions: &[String],
    round: usize,
) -> (Turns, Duration) {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, session) in sessions.iter().enumerate() {
        let client = clients[i % clients.len()].clone();
        let session = session.clone();
        tasks.spawn(async move { host_turn(&client, &session, &format!("round {round}")).await });
    }
    let mut turns = Turns::default();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((latency, outcome)) => turns.add(latency, outcome),
            Err(e) => turns.add(Duration::ZERO, Err(format!("task: {e}"))),
        }
    }
    (turns, started.elapsed())
}

/// Memory of the agent children: the median child's RSS and private
/// (anonymous) RSS, and the private RSS of all of them.
fn print_agent_memory(pid: u32) {
    let children = children_of(pid);
    let median = |field: &str| {
        let mut kib: Vec<u64> = children
            .iter()
            .filter_map(|c| status_kib(*c, field))
            .collect();
        kib.sort_unstable();
        let total: u64 = kib.iter().sum();
        (kib.get(kib.len() / 2).copied().unwrap_or(0), total)
    };
    let (rss, _) = median("VmRSS:");
    let (private, all_private) = median("RssAnon:");
    println!(
        "    agent processes: {} live; the median one has RSS {:.1} MiB ({:.1} MiB private); \
         all together {:.0} MiB private",
        children.len(),
        rss as f64 / 1024.0,
        private as f64 / 1024.0,
        all_private as f64 / 1024.0
    );
}

fn print_sidecar_memory(pid: u32) {
    println!(
        "    sidecar RSS {:.1} MiB (peak {:.1} MiB)",
        status_kib(pid, "VmRSS:").unwrap_or(0) as f64 / 1024.0,
        status_kib(pid, "VmHWM:").unwrap_or(0) as f64 / 1024.0
    );
}

/// (3) `SESSIONS` sessions doing turns at once.
async fn many_sessions(world: &World) -> Result<(), Error> {
    let started = Instant::now();
    let mut creators = tokio::task::JoinSet::new();
    let per_worker = SESSIONS.div_ceil(CREATORS);
    for worker in 0..CREATORS {
        let (target, owner, agent_id) = (
            world.target.clone(),
            world.owner.clone(),
            world.agent_id.clone(),
        );
        let n = per_worker.min(SESSIONS.saturating_sub(worker * per_worker));
        creators.spawn(async move {
            let mut ids = Vec::with_capacity(n);
            for _ in 0..n {
                ids.push(create_session(&target, &owner, &agent_id).await?);
            }
            Ok::<_, Error>(ids)
        });
    }
    let mut sessions = Vec::with_capacity(SESSIONS);
    while let Some(joined) = creators.join_next().await {
        sessions.extend(joined??);
    }
    let created = started.elapsed();
    let mut clients = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        clients.push(world.host().await?);
    }
    println!(
        "(3) {SESSIONS} sessions ({:.1} s to create through the signed API), {CONNECTIONS} host connections",
        created.as_secs_f64()
    );

    let before = cpu_mark(world.pid);
    let (warm, wall) = concurrent_round(&clients, &sessions, 0).await;
    let after = cpu_mark(world.pid);
    println!(
        "  warm-up, {SESSIONS} first turns at once (each spawns its agent process): {:.1} s, \
         {:.0} turns/s; {}; {}",
        wall.as_secs_f64(),
        SESSIONS as f64 / wall.as_secs_f64(),
        warm.summary(),
        warm.problems()
    );
    print_cpu(before, after, SESSIONS);
    print_agent_memory(world.pid);
    print_sidecar_memory(world.pid);

    let before = cpu_mark(world.pid);
    let mut all = Turns::default();
    let mut walls = Duration::ZERO;
    for round in 1..=ROUNDS {
        let (turns, wall) = concurrent_round(&clients, &sessions, round).await;
        println!(
            "  round {round}/{ROUNDS}: {:.0} turns/s; {}; {}",
            SESSIONS as f64 / wall.as_secs_f64(),
            turns.summary(),
            turns.problems()
        );
        walls += wall;
        all.extend(turns);
    }
    let after = cpu_mark(world.pid);
    let n = SESSIONS * ROUNDS;
    println!(
        "  all {ROUNDS} rounds: {n} turns, {:.0} turns/s; {}; {}",
        n as f64 / walls.as_secs_f64(),
        all.summary(),
        all.problems()
    );
    print_cpu(before, after, n);
    print_agent_memory(world.pid);
    print_sidecar_memory(world.pid);
    Ok(())
}

/// (6) `IDLE_SESSIONS` builtin sessions that each ran one turn, their
/// agents ending with their turns (`builtin.idleAgentMs` 0): what the
/// sidecar holds for them afterwards (goals: no process, at most 64 KiB a
/// session, under 256 MiB in all).
async fn idle_sessions(world: &World) -> Result<(), Error> {
    let before = status_kib(world.pid, "VmRSS:").unwrap_or(0);
    let started = Instant::now();
    let clients = [world.host().await?, world.host().await?];
    let mut all = Turns::default();
    let mut done = 0;
    while done < IDLE_SESSIONS {
        let n = IDLE_WAVE.min(IDLE_SESSIONS - done);
        let mut sessions = Vec::with_capacity(n);
        for _ in 0..n {
            sessions.push(world.session().await?);
        }
        let (turns, _) = concurrent_round(&clients, &sessions, 0).await;
        all.extend(turns);
        done += n;
    }
    let wall = started.elapsed();
    // The last agents end with their turns; give them a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = status_kib(world.pid, "VmRSS:").unwrap_or(0);
    println!(
        "(6) {IDLE_SESSIONS} builtin sessions, one turn each ({IDLE_WAVE} at once, \
         {:.0} turns/s, each starting its agent); {}; {}",
        IDLE_SESSIONS as f64 / wall.as_secs_f64(),
        all.summary(),
        all.problems()
    );
    let live = children_of(world.pid).len();
    // In-process agents are no process: what the sidecar reports live.
    let status = clients[0].call("vm/status", json!({})).await?;
    let agents = status["liveAdapters"]
        .as_u64()
        .ok_or("vm/status has no liveAdapters")?;
    let per_session = after.saturating_sub(before) as f64 / IDLE_SESSIONS as f64;
    let mib = after as f64 / 1024.0;
    println!(
        "  afterwards: {live} agent processes and {agents} agents live (goal 0: {}); sidecar RSS {mib:.1} MiB (goal \
         < 256 MiB: {}), {per_session:.1} KiB more per idle session than before them (goal ≤ 64 \
         KiB: {})",
        goals::verdict(live == 0 && agents == 0),
        goals::verdict(mib < 256.0),
        goals::verdict(per_session <= 64.0)
    );
    print_sidecar_memory(world.pid);
    Ok(())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), Error> {
    // `bench_agent one stream many cpu flat idle` runs the parts named
    // (all by default).
    const PARTS: [&str; 6] = ["one", "stream", "many", "cpu", "flat", "idle"];
    let parts: Vec<String> = std::env::args().skip(1).collect();
    for part in &parts {
        if !PARTS.contains(&part.as_str()) {
            return Err(format!("unknown part {part:?}: {}", PARTS.join(", ")).into());
        }
    }
    let runs = |part: &str| parts.is_empty() || parts.iter().any(|p| p == part);
    println!("load average before: {}", load_average());
    let world = World::start(None).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    print_sidecar_memory(world.pid);
    if runs("one") {
        one_session(&world).await?;
    }
    if runs("stream") {
        streaming(&world).await?;
        print_agent_memory(world.pid);
        print_sidecar_memory(world.pid);
    }
    if runs("many") {
        many_sessions(&world).await?;
    }
    drop(world);
    // The goals' phases on a sidecar of their own, so that the sessions
    // above cost them nothing.
    if runs("cpu") || runs("flat") {
        let world = World::start(None).await?;
        if runs("cpu") {
            goals::cpu_per_turn(&world).await?;
        }
        if runs("flat") {
            goals::flat_in_length(&world).await?;
        }
    }
    if runs("idle") {
        let world = World::start(Some(0)).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        idle_sessions(&world).await?;
    }
    println!("load average after: {}", load_average());
    Ok(())
}
