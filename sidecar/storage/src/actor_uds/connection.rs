//! One actor socket connection: the hello, the map of pending requests,
//! the reader task that settles them, and the writer task that sends what
//! callers could not write at once. A caller encodes its frames under the
//! state lock (fresh request ids, bytes counted against
//! `maxQueuedRequestBytes`) and writes them itself when nothing is queued
//! before them; a dead connection fails everything pending with its error.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agentos_protocol::ars::{
    self, ArsError, ClientFrame, FrameDecoder, Request, RequestPayload, ResponsePayload,
    ServerFrame, ServerHello,
};
use agentos_schema::DbError;
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::{receive, CONNECT_TIMEOUT};
use crate::SqliteLimits;

/// How much the reader asks the socket for at once.
const READ_CHUNK: usize = 64 * 1024;

pub(super) type Reply = oneshot::Receiver<Result<ResponsePayload, DbError>>;

struct Pending {
    reply: oneshot::Sender<Result<ResponsePayload, DbError>>,
    _slot: OwnedSemaphorePermit,
}

#[derive(Default)]
struct State {
    pending: HashMap<u32, Pending>,
    /// Set once; every later call fails with it.
    dead: Option<DbError>,
}

struct Shared {
    state: Mutex<State>,
    slots: Arc<Semaphore>,
    queued_bytes: AtomicU64,
}

impl Shared {
    /// Marks the connection dead and fails everything pending with `error`.
    fn kill(&self, error: DbError) {
        let pending = match self.state.lock() {
            Ok(mut state) => {
                if state.dead.is_none() {
                    state.dead = Some(error.clone());
                }
                std::mem::take(&mut state.pending)
            }
            Err(_) => return,
        };
        self.slots.close();
        for (_, p) in pending {
            let _ = p.reply.send(Err(error.clone()));
        }
    }
}

/// The socket's sending side: frames not written yet, and whether the
/// writer task is writing (then everything queues behind it, in order).
struct Outbound {
    half: OwnedWriteHalf,
    queue: Mutex<Queued>,
    wake: Notify,
}

#[derive(Default)]
struct Queued {
    bytes: Vec<u8>,
    busy: bool,
}

pub(super) struct Connection {
    shared: Arc<Shared>,
    pub(super) slots: Arc<Semaphore>,
    out: Arc<Outbound>,
    next_id: AtomicU32,
    /// Leases begun on this connection (`maxLeasesPerConnection`).
    pub(super) leases_begun: AtomicU32,
    pub(super) max_in_flight: u32,
    max_queued_bytes: u64,
    max_frame_bytes: u32,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Connection {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Connection {
    pub(super) async fn open(
        path: &Path,
        limits: &SqliteLimits,
    ) -> Result<Arc<Connection>, DbError> {
        let (stream, max_frame_bytes, buf) = tokio::time::timeout(CONNECT_TIMEOUT, handshake(path))
            .await
            .map_err(|_| {
                DbError::Connect(format!(
                    "{}: no hello within {} s",
                    path.display(),
                    CONNECT_TIMEOUT.as_secs()
                ))
            })??;
        // Responses are buffered whole: never let the server choose how much.
        if max_frame_bytes > limits.max_socket_frame_bytes {
            return Err(DbError::SocketFrameLimit {
                announced: max_frame_bytes,
                limit: limits.max_socket_frame_bytes,
            });
        }
        let max_in_flight = limits.max_in_flight_requests.max(1);
        let slots = Arc::new(Semaphore::new(max_in_flight as usize));
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            slots: slots.clone(),
            queued_bytes: AtomicU64::new(0),
        });
        let (rd, wr) = stream.into_split();
        let out = Arc::new(Outbound {
            half: wr,
            queue: Mutex::new(Queued::default()),
            wake: Notify::new(),
        });
        // Responses are bounded by the server's limit, which the hello
        // announced, and never by more than our own cap.
        let response_limit = max_frame_bytes
            .max(ars::DEFAULT_MAX_FRAME_BYTES)
            .min(limits.max_socket_frame_bytes);
        let reader = tokio::spawn(read_loop(rd, buf, response_limit, shared.clone()));
        let writer = tokio::spawn(write_loop(out.clone(), shared.clone()));
        Ok(Arc::new(Connection {
            shared,
            slots,
            out,
            next_id: AtomicU32::new(1),
            leases_begun: AtomicU32::new(0),
            max_in_flight,
            max_queued_bytes: limits.max_queued_request_bytes,
            max_frame_bytes,
            tasks: [reader, writer],
        }))
    }

    pub(super) fn is_alive(&self) -> bool {
        self.shared
            .state
            .lock()
            .map(|s| s.dead.is_none())
            .unwrap_or(false)
    }

    pub(super) fn death(&self) -> DbError {
        self.shared
            .state
            .lock()
            .ok()
            .and_then(|s| s.dead.clone())
            .unwrap_or_else(|| DbError::ConnectionLost("the connection closed".into()))
    }

    pub(super) async fn call(
        &self,
        slots: &Arc<Semaphore>,
        lease_key: Option<String>,
        payload: RequestPayload,
    ) -> Result<ResponsePayload, DbError> {
        receive(self.send(slots, lease_key, payload).await?).await
    }

    /// Queues one request and returns where its response will arrive. Waits
    /// for an in-flight slot from `slots`; never waits for queued bytes.
    pub(super) async fn send(
        &self,
        slots: &Arc<Semaphore>,
        lease_key: Option<String>,
        payload: RequestPayload,
    ) -> Result<Reply, DbError> {
        let slot = slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| self.death())?;
        let mut out = Vec::new();
        let mut frame = ClientFrame::Request(Request {
            request_id: 0,
            lease_key,
            payload,
        });
        let mut state = self.lock_state()?;
        let (reply, len) = self.encode(&mut state, &mut frame, slot, &mut out)?;
        drop(state);
        self.enqueue(out, len);
        Ok(reply)
    }

    /// Queues `requests` as one write, in order, once one in-flight slot
    /// from `slots` is free for each; returns where their responses will
    /// arrive, in the same order. When one cannot be queued, none is sent.
    pub(super) async fn send_all(
        &self,
        slots: &Arc<Semaphore>,
        requests: Vec<(Option<String>, RequestPayload)>,
    ) -> Result<Vec<Reply>, DbError> {
        let count = u32::try_from(requests.len()).unwrap_or(u32::MAX);
        let mut permits = slots
            .clone()
            .acquire_many_owned(count)
            .await
            .map_err(|_| self.death())?;
        let mut out = Vec::new();
        let mut encoded = Vec::with_capacity(requests.len());
        let mut state = self.lock_state()?;
        for (lease_key, payload) in requests {
            let Some(slot) = permits.split(1) else { break };
            let mut frame = ClientFrame::Request(Request {
                request_id: 0,
                lease_key,
                payload,
            });
            match self.encode(&mut state, &mut frame, slot, &mut out) {
                Ok((reply, len)) => {
                    let ClientFrame::Request(request) = &frame;
                    encoded.push((reply, len, request.request_id));
                }
                Err(e) => {
                    // Nothing of this write goes out: forget what was
                    // registered and give back the bytes counted for it.
                    for (_, len, request_id) in encoded {
                        state.pending.remove(&request_id);
                        self.shared.queued_bytes.fetch_sub(len, Ordering::AcqRel);
                    }
                    return Err(e);
                }
            }
        }
        drop(state);
        let queued = encoded.iter().map(|(_, len, _)| len).sum();
        self.enqueue(out, queued);
        Ok(encoded.into_iter().map(|(reply, _, _)| reply).collect())
    }

    fn lock_state(&self) -> Result<std::sync::MutexGuard<'_, State>, DbError> {
        let state = self
            .shared
            .state
            .lock()
            .map_err(|_| DbError::ConnectionLost("connection state poisoned".into()))?;
        if let Some(dead) = &state.dead {
            return Err(dead.clone());
        }
        Ok(state)
    }

    /// Gives `request` a fresh id, appends its frame to `out` and registers
    /// where its response goes. Returns that and the frame's length, already
    /// counted against `maxQueuedRequestBytes`.
    fn encode(
        &self,
        state: &mut State,
        frame: &mut ClientFrame,
        slot: OwnedSemaphorePermit,
        out: &mut Vec<u8>,
    ) -> Result<(Reply, u64), DbError> {
        let mut request_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        while state.pending.contains_key(&request_id) {
            request_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        }
        let ClientFrame::Request(request) = &mut *frame;
        request.request_id = request_id;
        let start = out.len();
        ars::client_frame_into(frame, self.max_frame_bytes, out).map_err(|e| match e {
            ArsError::FrameTooLarge { len, max } => DbError::Protocol(format!(
                "a request of {len} bytes exceeds the socket's maxFrameBytes {max}"
            )),
            other => DbError::Protocol(other.to_string()),
        })?;
        let len = (out.len() - start) as u64;
        let before = self.shared.queued_bytes.fetch_add(len, Ordering::AcqRel);
        if before + len > self.max_queued_bytes {
            self.shared.queued_bytes.fetch_sub(len, Ordering::AcqRel);
            out.truncate(start);
            return Err(DbError::QueueFull {
                limit: "maxQueuedRequestBytes".into(),
                capacity: u32::try_from(self.max_queued_bytes).unwrap_or(u32::MAX),
            });
        }
        let (reply, rx) = oneshot::channel();
        state
            .pending
            .insert(request_id, Pending { reply, _slot: slot });
        Ok((rx, len))
    }

    /// Sends encoded frames of `len` bytes (already counted): written at
    /// once when nothing waits before them and the socket takes them whole,
    /// else (or for what it did not take) queued for the writer task.
    fn enqueue(&self, frames: Vec<u8>, len: u64) {
        debug_assert_eq!(frames.len() as u64, len);
        let mut queued = match self.out.queue.lock() {
            Ok(queued) => queued,
            Err(_) => {
                self.shared.kill(DbError::ConnectionLost(
                    "the writer's queue poisoned".into(),
                ));
                return;
            }
        };
        if queued.busy || !queued.bytes.is_empty() {
            queued.bytes.extend_from_slice(&frames);
            drop(queued);
            self.out.wake.notify_one();
            return;
        }
        // Non-blocking, under the queue's lock so nothing interleaves.
        let written = match self.out.half.try_write(&frames) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => {
                drop(queued);
                self.shared.kill(DbError::ConnectionLost(e.to_string()));
                return;
            }
        };
        self.shared
            .queued_bytes
            .fetch_sub(written as u64, Ordering::AcqRel);
        if written < frames.len() {
            queued.bytes.extend_from_slice(&frames[written..]);
            queued.busy = true;
            drop(queued);
            self.out.wake.notify_one();
        }
    }
}

async fn handshake(path: &Path) -> Result<(UnixStream, u32, BytesMut), DbError> {
    let connect_error = |e: String| DbError::Connect(format!("{}: {e}", path.display()));
    let mut stream = UnixStream::connect(path)
        .await
        .map_err(|e| connect_error(e.to_string()))?;
    let hello = ars::client_hello_frame().map_err(|e| connect_error(e.to_string()))?;
    stream
        .write_all(&hello)
        .await
        .map_err(|e| connect_error(e.to_string()))?;
    let decoder = FrameDecoder::new(ars::DEFAULT_MAX_FRAME_BYTES);
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let payload = loop {
        match decoder.decode(&mut buf) {
            Ok(Some(payload)) => break payload,
            Ok(None) => {}
            Err(e) => return Err(connect_error(e.to_string())),
        }
        let n = stream
            .read_buf(&mut buf)
            .await
            .map_err(|e| connect_error(e.to_string()))?;
        if n == 0 {
            return Err(connect_error("the server closed during the hello".into()));
        }
    };
    match ars::decode_server_hello(payload) {
        Ok(ServerHello::HelloOk(ok)) => Ok((stream, ok.max_frame_bytes, buf)),
        Ok(ServerHello::HelloRejectUnsupportedVersion) => Err(connect_error(format!(
            "the server does not support protocol version {}",
            ars::VERSION
        ))),
        Err(e) => Err(connect_error(format!("bad hello: {e}"))),
    }
}

async fn read_loop(
    mut rd: OwnedReadHalf,
    mut buf: BytesMut,
    response_limit: u32,
    shared: Arc<Shared>,
) {
    let decoder = FrameDecoder::new(response_limit);
    let mut responses = Vec::new();
    let error = 'read: loop {
        // Decode everything one read brought in, then settle it all under one
        // lock of the pending map.
        let mut failure = None;
        loop {
            let payload = match decoder.decode(&mut buf) {
                Ok(Some(payload)) => payload,
                Ok(None) => break,
                Err(e) => {
                    failure = Some(DbError::Protocol(e.to_string()));
                    break;
                }
            };
            match ars::decode_server_frame(payload) {
                Ok(ServerFrame::Response(response)) => responses.push(response),
                Ok(ServerFrame::GoAway(go_away)) => {
                    failure = Some(DbError::GoAway(format!("{:?}", go_away.reason)));
                    break;
                }
                Err(e) => {
                    failure = Some(DbError::Protocol(e.to_string()));
                    break;
                }
            }
        }
        if !responses.is_empty() {
            let mut settled = Vec::with_capacity(responses.len());
            match shared.state.lock() {
                Ok(mut state) => {
                    for response in responses.drain(..) {
                        match state.pending.remove(&response.request_id) {
                            Some(p) => settled.push((p, response.payload)),
                            None => {
                                failure = Some(DbError::Protocol(format!(
                                    "response for unknown request id {}",
                                    response.request_id
                                )));
                                break;
                            }
                        }
                    }
                }
                Err(_) => {
                    failure = Some(DbError::ConnectionLost("connection state poisoned".into()))
                }
            }
            // Replies are sent outside the lock: each may wake a caller.
            for (pending, payload) in settled {
                let _ = pending.reply.send(Ok(payload));
            }
            responses.clear();
        }
        if let Some(error) = failure {
            break error;
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) => break 'read DbError::ConnectionLost("the server closed the socket".into()),
            Ok(_) => {}
            Err(e) => break 'read DbError::ConnectionLost(e.to_string()),
        }
    };
    shared.kill(error);
}

/// Writes what callers queued (when the socket did not take their frames at
/// once, or others were queued before them), in order, until the queue is
/// empty; then callers write directly again.
async fn write_loop(out: Arc<Outbound>, shared: Arc<Shared>) {
    loop {
        out.wake.notified().await;
        loop {
            let batch = {
                let Ok(mut queued) = out.queue.lock() else {
                    shared.kill(DbError::ConnectionLost(
                        "the writer's queue poisoned".into(),
                    ));
                    return;
                };
                if queued.bytes.is_empty() {
                    queued.busy = false;
                    break;
                }
                queued.busy = true;
                std::mem::take(&mut queued.bytes)
            };
            let mut at = 0;
            while at < batch.len() {
                if let Err(e) = out.half.writable().await {
                    shared.kill(DbError::ConnectionLost(e.to_string()));
                    return;
                }
                match out.half.try_write(&batch[at..]) {
                    Ok(n) => at += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => {
                        shared.kill(DbError::ConnectionLost(e.to_string()));
                        return;
                    }
                }
            }
            shared
                .queued_bytes
                .fetch_sub(batch.len() as u64, Ordering::AcqRel);
        }
    }
}
