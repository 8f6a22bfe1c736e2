//! The actor_uds request/response timeline: a recording proxy between the
//! handle and the reference server forwards every byte as it arrives and
//! notes, for each read, when it came, which way it went and which frames it
//! completed. One transaction's record shows how many round trips it took:
//! each burst of requests after the first waited for an answer.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use agentos_protocol::ars::{
    self, ClientFrame, FrameDecoder, RequestPayload, ResponsePayload, ServerFrame,
};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Way {
    ToServer,
    ToClient,
}

/// One read the proxy forwarded: when, which way, the frames it completed.
pub struct Burst {
    at: Instant,
    way: Way,
    frames: Vec<&'static str>,
}

/// The proxy: listens on its own socket and relays each connection to the
/// server's, recording while `recording` holds a log.
pub struct Proxy {
    pub socket: PathBuf,
    log: Arc<Mutex<Option<Vec<Burst>>>>,
}

impl Proxy {
    pub async fn start(dir: &Path, server: &Path) -> std::io::Result<Proxy> {
        let socket = dir.join("proxy.sock");
        let listener = UnixListener::bind(&socket)?;
        let log: Arc<Mutex<Option<Vec<Burst>>>> = Arc::new(Mutex::new(None));
        let (server, relay_log) = (server.to_owned(), log.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = UnixStream::connect(&server).await else {
                    continue;
                };
                let (client_rx, client_tx) = client.into_split();
                let (server_rx, server_tx) = upstream.into_split();
                tokio::spawn(relay(
                    client_rx,
                    server_tx,
                    Way::ToServer,
                    relay_log.clone(),
                ));
                tokio::spawn(relay(
                    server_rx,
                    client_tx,
                    Way::ToClient,
                    relay_log.clone(),
                ));
            }
        });
        Ok(Proxy { socket, log })
    }

    pub fn record(&self) {
        *self.lock() = Some(Vec::new());
    }

    pub fn take(&self) -> Vec<Burst> {
        self.lock().take().unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<Burst>>> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn relay(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    way: Way,
    log: Arc<Mutex<Option<Vec<Burst>>>>,
) {
    let decoder = FrameDecoder::new(ars::DEFAULT_MAX_FRAME_BYTES);
    let mut pending = BytesMut::new();
    let mut buf = vec![0u8; 256 * 1024];
    // The hello goes first each way; it is not a request or a response.
    let mut greeted = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let at = Instant::now();
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        pending.extend_from_slice(&buf[..n]);
        let mut frames = Vec::new();
        while let Ok(Some(payload)) = decoder.decode(&mut pending) {
            if !greeted {
                greeted = true;
                continue;
            }
            frames.push(match way {
                Way::ToServer => request_name(ars::decode_client_frame(payload).ok()),
                Way::ToClient => response_name(ars::decode_server_frame(payload).ok()),
            });
        }
        if let Some(log) = log.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            log.push(Burst { at, way, frames });
        }
    }
}

fn request_name(frame: Option<ClientFrame>) -> &'static str {
    match frame {
        Some(ClientFrame::Request(request)) => match request.payload {
            RequestPayload::SqliteExec(_) => "Exec",
            RequestPayload::SqliteQuery(_) => "Query",
            RequestPayload::SqliteBegin(_) => "Begin",
            RequestPayload::SqliteCommit(_) => "Commit",
            RequestPayload::SqliteRollback(_) => "Rollback",
        },
        None => "(undecodable)",
    }
}

fn response_name(frame: Option<ServerFrame>) -> &'static str {
    match frame {
        Some(ServerFrame::Response(response)) => match response.payload {
            ResponsePayload::SqliteExecOk => "ExecOk",
            ResponsePayload::SqliteQueryOk(_) => "QueryOk",
            ResponsePayload::SqliteBeginOk => "BeginOk",
            ResponsePayload::SqliteCommitOk => "CommitOk",
            ResponsePayload::SqliteRollbackOk => "RollbackOk",
            ResponsePayload::SqlError(_) => "SqlError",
            _ => "(other response)",
        },
        Some(ServerFrame::GoAway(_)) => "GoAway",
        None => "(undecodable)",
    }
}

/// Prints the record, reads running the same way merged into one line, and
/// returns the round trips: the bursts of requests, each after the first
/// having waited for an answer.
pub fn print(bursts: &[Burst]) -> usize {
    let Some(start) = bursts.first().map(|b| b.at) else {
        return 0;
    };
    let mut round_trips = 0;
    let mut i = 0;
    while i < bursts.len() {
        let way = bursts[i].way;
        let at = bursts[i].at;
        let mut frames = Vec::new();
        while i < bursts.len() && bursts[i].way == way {
            frames.extend_from_slice(&bursts[i].frames);
            i += 1;
        }
        if way == Way::ToServer {
            round_trips += 1;
        }
        let arrow = match way {
            Way::ToServer => "handle -> server",
            Way::ToClient => "server -> handle",
        };
        println!(
            "      +{:>6.1} µs  {arrow}  {}",
            at.duration_since(start).as_secs_f64() * 1e6,
            runs(&frames)
        );
    }
    round_trips
}

/// `Begin, Query ×63` for a run of names.
fn runs(frames: &[&str]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < frames.len() {
        let n = frames[i..].iter().take_while(|f| **f == frames[i]).count();
        out.push(match n {
            1 => frames[i].to_owned(),
            n => format!("{} ×{n}", frames[i]),
        });
        i += n;
    }
    out.join(", ")
}
