//! Signed API benchmark (release): verified `GetAgent` actions/s with 16
//! concurrent keep-alive clients beside raw Ed25519 verifications/s on one
//! core, and their ratio (the goal is ≥ 0.5); p50/p99 latency; WebSocket
//! fan-out of one session's events to 1,000 subscribers, twice (new
//! sockets, then the same sockets warm); the sidecar's idle and loaded RSS. Envelopes are signed before the clock starts, each with
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
/// Bursts of `FANOUT_EVENTS` to the same subscribers: new sockets, then warm.
const BURSTS: usize = 2;
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
/// durable appends it receives, `want` per burst for `BURSTS` bursts,
/// recording each one's delay from its commit (`createdAt`, the same
/// machine's clock). It says on `ready` once subscribed and after each
/// burst but the last.
///
/// It reads the WebSocket itself ([`LeanSocket`]) and takes from each text
/// frame only its `_` and `createdAt`: the 1,000 subscribers share this
/// machine's two cores with the sidecar they measure, and a general client
/// (tungstenite, each frame parsed whole) spent more CPU per frame than the
/// sidecar did, so the figure was mostly the client's.
async fn subscriber(
    address: String,
    envelope: Vec<u8>,
    want: u64,
    ready: tokio::sync::mpsc::Sender<()>,
) -> Result<Vec<Vec<(i64, f64)>>, Error> {
    let mut ws = LeanSocket::connect(&address, "/agents/ws").await?;
    ws.send_binary(&envelope).await?;
    let mut bursts = Vec::with_capacity(BURSTS);
    let mut delays = Vec::with_capacity(want as usize);
    let mut subscribed = false;
    loop {
        let (kind, created_at) = {
            let Some(text) = ws.next_text().await? else {
                return Err("the server closed the socket".into());
            };
            (frame_kind(text)?, created_at(text))
        };
        // Frames that came in one read arrived together.
        let arrived = ws.read_at_ms;
        match kind {
            FrameKind::Subscribed if !subscribed => {
                subscribed = true;
                let _ = ready.send(()).await;
            }
            FrameKind::Append => {
                let created = created_at.ok_or("an append without createdAt")?;
                delays.push((created, (arrived - created) as f64));
                if delays.len() as u64 >= want {
                    bursts.push(std::mem::take(&mut delays));
                    if bursts.len() == BURSTS {
                        return Ok(bursts);
                    }
                    let _ = ready.send(()).await;
                }
            }
            FrameKind::Error => {
                let text = ws.last_text();
                return Err(format!("subscriber error: {text}").into());
            }
            _ => {}
        }
    }
}

#[derive(PartialEq)]
enum FrameKind {
    Subscribed,
    Append,
    Error,
    Other,
}

/// A Seed event frame's `_`, which the server writes first.
fn frame_kind(text: &[u8]) -> Result<FrameKind, Error> {
    let rest = text
        .strip_prefix(br#"{"_":""#)
        .ok_or_else(|| format!("not a Seed event: {}", String::from_utf8_lossy(text)))?;
    let kind = rest.split(|b| *b == b'"').next().unwrap_or_default();
    Ok(match kind {
        b"subscribed" => FrameKind::Subscribed,
        b"append" => FrameKind::Append,
        b"error" => FrameKind::Error,
        _ => FrameKind::Other,
    })
}

/// The `createdAt` of a frame: a key is the only place the text can hold
/// those bytes unescaped.
fn created_at(text: &[u8]) -> Option<i64> {
    static KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(br#""createdAt":"#));
    let digits = &text[KEY.find(text)? + KEY.needle().len()..];
    let end = digits
        .iter()
        .position(|c| !c.is_ascii_digit() && *c != b'-')
        .unwrap_or(digits.len());
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// A client WebSocket reduced to what the fan-out needs: the upgrade, one
/// masked binary frame out, pongs, and unfragmented frames in.
struct LeanSocket {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The last text frame, as `start..end` of `buf`.
    text: (usize, usize),
    /// When the last read returned, in Unix ms: every frame it brought
    /// arrived then, so the clock is read once per read, not per frame.
    read_at_ms: i64,
}

impl LeanSocket {
    async fn connect(address: &str, path: &str) -> Result<LeanSocket, Error> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut end = 0;
        let head = loop {
            let n = stream.read(&mut buf[end..]).await?;
            if n == 0 {
                return Err("the server closed the socket during the upgrade".into());
            }
            end += n;
            if let Some(at) = buf[..end].windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if end == buf.len() {
                return Err("an upgrade answer larger than the buffer".into());
            }
        };
        if !buf.starts_with(b"HTTP/1.1 101") {
            return Err(format!(
                "the upgrade was refused: {}",
                String::from_utf8_lossy(&buf[..head])
            )
            .into());
        }
        Ok(LeanSocket {
            stream,
            buf,
            start: head,
            end,
            text: (0, 0),
            read_at_ms: now_ms(),
        })
    }

    /// One masked frame with `opcode`.
    async fn send(&mut self, opcode: u8, payload: &[u8]) -> Result<(), Error> {
        use tokio::io::AsyncWriteExt;
        let mask = [0x5a, 0x17, 0xc3, 0x88];
        let mut frame = Vec::with_capacity(payload.len() + 14);
        frame.push(0x80 | opcode);
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n <= 0xffff => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream.write_all(&frame).await?;
        Ok(())
    }

    async fn send_binary(&mut self, payload: &[u8]) -> Result<(), Error> {
        self.send(0x2, payload).await
    }

    /// The next text frame's bytes, unchecked (pings answered, binary
    /// frames skipped); `None` once the server closes.
    async fn next_text(&mut self) -> Result<Option<&[u8]>, Error> {
        loop {
            let (opcode, payload) = self.next_frame().await?;
            match opcode {
                0x1 => {
                    self.text = payload;
                    return Ok(Some(&self.buf[payload.0..payload.1]));
                }
                0x8 => return Ok(None),
                0x9 => {
                    let ping = self.buf[payload.0..payload.1].to_vec();
                    self.send(0xA, &ping).await?;
                }
                0x0 => return Err("a fragmented frame".into()),
                _ => {}
            }
        }
    }

    fn last_text(&self) -> &str {
        std::str::from_utf8(&self.buf[self.text.0..self.text.1]).unwrap_or("(not UTF-8)")
    }

    /// The next frame's opcode and payload (as a range of `buf`).
    async fn next_frame(&mut self) -> Result<(u8, (usize, usize)), Error> {
        loop {
            if let Some((opcode, fin, header, len)) = self.header()? {
                if self.end - self.start >= header + len {
                    if !fin {
                        return Err("a fragmented frame".into());
                    }
                    let payload = (self.start + header, self.start + header + len);
                    self.start += header + len;
                    return Ok((opcode, payload));
                }
                if header + len > self.buf.len() {
                    self.buf.resize(header + len, 0);
                }
            }
            self.fill().await?;
        }
    }

    /// The frame header at `start`, once whole: opcode, FIN, header length
    /// and payload length.
    fn header(&self) -> Result<Option<(u8, bool, usize, usize)>, Error> {
        let bytes = &self.buf[self.start..self.end];
        let [b0, b1, ..] = *bytes else {
            return Ok(None);
        };
        if b1 & 0x80 != 0 {
            return Err("the server masked a frame".into());
        }
        let (header, len) = match b1 & 0x7f {
            126 => match bytes.get(2..4) {
                Some(n) => (4, u16::from_be_bytes([n[0], n[1]]) as usize),
                None => return Ok(None),
            },
            127 => match bytes.get(2..10) {
                Some(n) => {
                    let mut be = [0u8; 8];
                    be.copy_from_slice(n);
                    (10, usize::try_from(u64::from_be_bytes(be))?)
                }
                None => return Ok(None),
            },
            n => (2, n as usize),
        };
        Ok(Some((b0 & 0x0f, b0 & 0x80 != 0, header, len)))
    }

    /// Reads more, first moving what is unread to the front.
    async fn fill(&mut self) -> Result<(), Error> {
        use tokio::io::AsyncReadExt;
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = self.stream.read(&mut self.buf[self.end..]).await?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        self.end += n;
        self.read_at_ms = now_ms();
        Ok(())
    }
}

/// One burst of the fan-out as measured.
struct Burst {
    rate: f64,
    p99: f64,
    delivered: u64,
}

/// WebSocket fan-out: `SUBSCRIBERS` sockets on one session while a turn
/// appends `FANOUT_EVENTS` durable events (plus the user's message), then
/// again: the first burst meets sockets that have sent nothing yet (their
/// buffers grow as they fill), the second the same sockets warm, as a
/// long-lived subscription is.
async fn fan_out(
    address: &str,
    key: &SigningKey,
    agent_id: &str,
    pid: u32,
) -> Result<Vec<Burst>, Error> {
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
    let mut times = Vec::with_capacity(BURSTS);
    let mut ends = Vec::with_capacity(BURSTS);
    for burst in 0..BURSTS {
        // Every subscriber is subscribed (the first time) or has the whole
        // previous burst.
        for _ in 0..SUBSCRIBERS {
            tokio::time::timeout(Duration::from_secs(120), ready_rx.recv())
                .await?
                .ok_or("a subscriber ended early")?;
        }
        if burst > 0 {
            ends.push((
                Instant::now(),
                agentos_tests::bench::on_cpu(pid),
                agentos_tests::bench::on_cpu(std::process::id()),
            ));
            // The previous turn ends before the next message.
            tokio::time::sleep(Duration::from_millis(300)).await;
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
        times.push((started, server_before, client_before));
        if burst + 1 == BURSTS {
            break;
        }
    }
    let mut per_burst: Vec<Vec<(i64, f64)>> = vec![Vec::new(); BURSTS];
    for task in tasks {
        let bursts = tokio::time::timeout(Duration::from_secs(120), task).await???;
        for (burst, delays) in bursts.into_iter().enumerate() {
            per_burst[burst].extend(delays);
        }
    }
    ends.push((
        Instant::now(),
        agentos_tests::bench::on_cpu(pid),
        agentos_tests::bench::on_cpu(std::process::id()),
    ));
    let mut out = Vec::with_capacity(BURSTS);
    for (burst, delays) in per_burst.into_iter().enumerate() {
        let (started, server_before, client_before) = times[burst];
        // A burst ends when the last subscriber has its last event.
        let (until, server_until, client_until) = ends[burst];
        let (first, last) = delays.iter().fold((i64::MAX, i64::MIN), |(a, b), (c, _)| {
            (a.min(*c), b.max(*c))
        });
        let mut delays: Vec<f64> = delays.into_iter().map(|(_, delay)| delay).collect();
        delays.sort_by(f64::total_cmp);
        let delivered = delays.len() as u64;
        let server = server_until.saturating_sub(server_before);
        let client = client_until.saturating_sub(client_before);
        println!(
            "fan-out burst {} ({}): CPU sidecar {:.0} ms ({:.2} µs per frame), this client {:.0} ms, \
             over {:.0} ms; the events were committed over {} ms",
            burst + 1,
            if burst == 0 { "new sockets" } else { "warm sockets" },
            server.as_secs_f64() * 1000.0,
            server.as_secs_f64() * 1e6 / delivered.max(1) as f64,
            client.as_secs_f64() * 1000.0,
            until.duration_since(started).as_secs_f64() * 1000.0,
            last.saturating_sub(first)
        );
        out.push(Burst {
            rate: delivered as f64 / until.duration_since(started).as_secs_f64(),
            p99: percentile(&delays, 0.99),
            delivered,
        });
    }
    Ok(out)
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
    let bursts = fan_out(address, key, agent_id, pid).await?;
    let fanout_rss = rss_kib(pid, "VmHWM:").unwrap_or(0);
    for (i, burst) in bursts.iter().enumerate() {
        let sockets = ["new sockets", "warm sockets"][i.min(1)];
        let met = ["NOT MET", "met"][usize::from(burst.p99 <= FANOUT_GOAL_MS)];
        println!(
            "WebSocket fan-out, {SUBSCRIBERS} subscribers of one session ({sockets}): {:.0} \
             events/s delivered ({} in all), p99 delay {:.0} ms — goal ≤ {FANOUT_GOAL_MS} ms: \
             {met}",
            burst.rate, burst.delivered, burst.p99
        );
    }
    println!("RSS peak with {SUBSCRIBERS} sockets {fanout_rss} KiB");
    Ok(())
}
