//! The WebSocket fan-out: `SUBSCRIBERS` lean clients on one session while
//! a burst of `FANOUT_EVENTS` events (plus the user's message) is
//! published, twice, each event's delay measured from its `createdAt` to
//! its arrival. The publisher is the sidecar (a signed `MessageSession` to
//! a session whose agent floods) or the bare fan-out (`bare.rs`), the
//! ceiling this machine sets for the same bytes to the same clients.

use std::time::{Duration, Instant};

use serde_json::json;

use super::lean::{created_at, frame_kind, FrameKind, LeanSocket};
use super::{act, now_ms, sign, BURSTS, FANOUT_EVENTS, SUBSCRIBERS};
use agentos_protocol::seed::SigningKey;
use agentos_tests::bench::{ApiConnection, Error};

/// What publishes the bursts, as the subscribers reach it.
pub(super) struct Publisher {
    /// What the figures call it.
    pub(super) name: &'static str,
    address: String,
    /// The process whose CPU a burst costs.
    pid: u32,
    /// Each subscriber's first frame.
    envelopes: Vec<Vec<u8>>,
    fire: Fire,
}

enum Fire {
    Sidecar {
        conn: ApiConnection,
        key: SigningKey,
        session_id: String,
    },
    Bare(super::bare::Bare),
}

impl Publisher {
    /// A new session of `agent_id` on the sidecar at `address`, with a
    /// signed `Subscribe` for each subscriber.
    pub(super) async fn sidecar(
        address: &str,
        key: &SigningKey,
        agent_id: &str,
        pid: u32,
    ) -> Result<Publisher, Error> {
        let mut conn = ApiConnection::open(address).await?;
        let session_id = act(
            &mut conn,
            key,
            json!({"_": "CreateSession", "agentId": agent_id}),
            "sessionId",
        )
        .await?;
        let base = now_ms();
        let envelopes = (0..SUBSCRIBERS)
            .map(|i| {
                sign(
                    key,
                    json!({"_": "Subscribe", "key": format!("sessions/{session_id}")}),
                    base - i as i64,
                )
            })
            .collect::<Result<_, _>>()?;
        Ok(Publisher {
            name: "sidecar",
            address: address.to_owned(),
            pid,
            envelopes,
            fire: Fire::Sidecar {
                conn,
                key: key.clone(),
                session_id,
            },
        })
    }

    /// The bare fan-out, started as a process of its own.
    pub(super) async fn bare() -> Result<Publisher, Error> {
        let bare = super::bare::Bare::start().await?;
        Ok(Publisher {
            name: "bare fan-out",
            address: bare.address.clone(),
            pid: bare.pid,
            envelopes: vec![b"subscribe".to_vec(); SUBSCRIBERS],
            fire: Fire::Bare(bare),
        })
    }

    async fn burst(&mut self) -> Result<(), Error> {
        match &mut self.fire {
            Fire::Sidecar {
                conn,
                key,
                session_id,
            } => {
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
                Ok(())
            }
            Fire::Bare(bare) => bare.burst().await,
        }
    }
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

/// One burst of the fan-out as measured.
pub(super) struct Burst {
    pub(super) rate: f64,
    pub(super) p99: f64,
    pub(super) delivered: u64,
}

/// WebSocket fan-out: `SUBSCRIBERS` sockets on one session while a turn
/// appends `FANOUT_EVENTS` durable events (plus the user's message), then
/// again: the first burst meets sockets that have sent nothing yet (their
/// buffers grow as they fill), the second the same sockets warm, as a
/// long-lived subscription is.
pub(super) async fn fan_out(mut publisher: Publisher) -> Result<Vec<Burst>, Error> {
    let want = FANOUT_EVENTS + 1;
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(SUBSCRIBERS);
    let mut tasks = Vec::with_capacity(SUBSCRIBERS);
    for envelope in std::mem::take(&mut publisher.envelopes) {
        tasks.push(tokio::spawn(subscriber(
            publisher.address.clone(),
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
                agentos_tests::bench::on_cpu(publisher.pid),
                agentos_tests::bench::on_cpu(std::process::id()),
            ));
            // The previous turn ends before the next message.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let started = Instant::now();
        let server_before = agentos_tests::bench::on_cpu(publisher.pid);
        let client_before = agentos_tests::bench::on_cpu(std::process::id());
        publisher.burst().await?;
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
        agentos_tests::bench::on_cpu(publisher.pid),
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
            "fan-out burst {} ({}): CPU {} {:.0} ms ({:.2} µs per frame), this client {:.0} ms, \
             over {:.0} ms; the events were stamped over {} ms",
            burst + 1,
            if burst == 0 {
                "new sockets"
            } else {
                "warm sockets"
            },
            publisher.name,
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

pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
