//! A reference Actor Runtime Socket v1 server over a real SQLite file.
//!
//! It exists so every store test runs against the actor_uds client as well as
//! the local file, and so hosts can try the sidecar without an actor runtime
//! (`agentos-sidecar ars-serve --db FILE --socket PATH`). It follows the
//! reference server's rules: per-connection leases with a deadline, one
//! writer at a time (SQLite has one), bounded queues answered with QueueFull,
//! and GoAway for anything malformed, after which only that connection closes.
//!
//! It also holds up under abuse: a lease key is forgotten once its
//! transaction commits, rolls back or expires (an expired lease is
//! remembered as expired until its holder ends it, a bounded number per
//! connection); a client's lease timeout is capped by the server's maximum;
//! connections are capped; and each connection's outbox is bounded in bytes,
//! so a client that pipelines requests and stops reading is closed rather
//! than buffered for.
//!
//! All SQLite work happens on one dedicated thread that owns the connection
//! and the transaction coordinator; connection tasks only parse, validate the
//! lease rules that need no database state, and write responses.

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use agentos_protocol::ars::{
    self, ArsError, ClientFrame, FrameDecoder, GoAway, GoAwayReason, HelloOk, InvalidLeaseKey,
    LeaseExpired, QueueFull, RequestPayload, Response, ResponsePayload, ServerFrame, ServerHello,
    SqlError, SqliteQueryOk,
};
use agentos_schema::DbError;
use bytes::{Bytes, BytesMut};
use rusqlite::Connection;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc as tmpsc, watch};
use tokio::task::JoinHandle;

use super::ars_values::to_wire;
use super::sqlite_file::{open_connection, run_statement, sql_error};

/// Tunables of the reference server; the defaults are the reference runtime's.
#[derive(Clone, Debug)]
pub struct ArsServerOptions {
    pub max_frame_bytes: u32,
    /// How long a lease may stay open before it is rolled back.
    pub lease_timeout: Duration,
    /// Begins allowed to wait for the writer (`transactionCoordinatorQueue`).
    pub coordinator_queue_capacity: u32,
    /// Requests accepted but not yet answered (`sqliteWorkerQueue`).
    pub worker_queue_capacity: u32,
    pub handshake_timeout: Duration,
    /// The longest lease a client may ask for; longer requests are capped.
    pub max_lease_timeout: Duration,
    /// Connections served at once; more are closed as they arrive.
    pub max_connections: usize,
    /// Encoded responses waiting for one client to read them; a client
    /// over this is closed.
    pub max_outbox_bytes: usize,
    /// Fault injection for tests: counts down on every successful commit;
    /// the commit that brings it to zero lands, but its connection is
    /// dropped before the answer is written (the client then sees
    /// `sqlite_commit_outcome_unknown`). `None` (the default) never drops.
    pub drop_connection_at_commit: Option<Arc<AtomicU64>>,
}

impl Default for ArsServerOptions {
    fn default() -> Self {
        ArsServerOptions {
            max_frame_bytes: ars::DEFAULT_MAX_FRAME_BYTES,
            lease_timeout: Duration::from_secs(60),
            coordinator_queue_capacity: 1024,
            worker_queue_capacity: 8192,
            handshake_timeout: Duration::from_secs(10),
            max_lease_timeout: Duration::from_secs(300),
            max_connections: 1024,
            max_outbox_bytes: 256 * 1024 * 1024,
            drop_connection_at_commit: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ArsServerError {
    #[error("cannot bind the socket {path}: {message}")]
    Bind { path: String, message: String },
    #[error("cannot open the database: {0}")]
    Database(#[from] DbError),
    #[error("server i/o failed: {0}")]
    Io(String),
    #[error("{message}")]
    Locked { code: &'static str, message: String },
}

impl ArsServerError {
    pub fn code(&self) -> &'static str {
        match self {
            ArsServerError::Bind { .. } => "ars_server_bind_failed",
            ArsServerError::Database(_) => "ars_server_database_failed",
            ArsServerError::Io(_) => "ars_server_io_failed",
            ArsServerError::Locked { code, .. } => code,
        }
    }
}

/// A running server. Dropping it does not stop it; call [`shutdown`].
///
/// [`shutdown`]: ArsServerHandle::shutdown
pub struct ArsServerHandle {
    socket_path: PathBuf,
    shutdown: watch::Sender<bool>,
    accept: JoinHandle<()>,
    waiting_begins: Arc<AtomicUsize>,
}

impl ArsServerHandle {
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }

    /// Begins queued behind the current writer, as of the SQLite thread's
    /// last step: an observable point for callers that must know a Begin
    /// is waiting before they go on.
    pub fn waiting_begins(&self) -> usize {
        self.waiting_begins.load(Ordering::Acquire)
    }

    /// Stops accepting, closes every connection (rolling back their leases)
    /// and removes the socket file.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.accept.await;
        let _ = std::fs::remove_file(&self.socket_path);
    }
}

/// Binds `socket_path` and serves `db_path`. The socket's directory is created
/// with mode 0700 when missing (an existing directory is left as it is, since
/// it may be shared); the socket itself is made 0600.
pub async fn bind(
    db_path: &Path,
    socket_path: &Path,
    options: ArsServerOptions,
) -> Result<ArsServerHandle, ArsServerError> {
    let bind_error = |message: String| ArsServerError::Bind {
        path: socket_path.display().to_string(),
        message,
    };
    if let Some(dir) = socket_path.parent() {
        if !dir.as_os_str().is_empty() && !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| bind_error(format!("cannot create its directory: {e}")))?;
        }
    }
    // Only a socket nobody answers on may be replaced.
    crate::private::remove_stale_socket(socket_path).map_err(|e| bind_error(e.to_string()))?;
    let db_path = db_path.to_owned();
    let conn = tokio::task::spawn_blocking(move || open_connection(&db_path))
        .await
        .map_err(|e| ArsServerError::Io(e.to_string()))??;
    // Bound under a restrictive umask: no window in which others could
    // connect before the mode is set.
    // SAFETY: umask(2) only swaps the process's file-creation mask.
    let old_umask = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(socket_path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old_umask) };
    let listener = bound.map_err(|e| bind_error(e.to_string()))?;
    std::fs::set_permissions(socket_path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| bind_error(format!("cannot make the socket 0600: {e}")))?;

    let (jobs, rx) = mpsc::channel::<Job>();
    let queued = Arc::new(AtomicUsize::new(0));
    let waiting_begins = Arc::new(AtomicUsize::new(0));
    let worker = Worker::new(
        conn,
        rx,
        options.clone(),
        queued.clone(),
        waiting_begins.clone(),
    );
    thread::Builder::new()
        .name("agentos-ars-sqlite".into())
        .spawn(move || worker.run())
        .map_err(|e| ArsServerError::Io(format!("cannot start the SQLite thread: {e}")))?;
    let shared = Arc::new(Shared {
        jobs: Mutex::new(jobs),
        queued,
        options,
        next_conn: AtomicU64::new(1),
    });
    let (shutdown, shutdown_rx) = watch::channel(false);
    let accept = tokio::spawn(accept_loop(listener, shared, shutdown_rx));
    Ok(ArsServerHandle {
        socket_path: socket_path.to_owned(),
        shutdown,
        accept,
        waiting_begins,
    })
}

/// The `ars-serve` subcommand: serve until SIGINT or SIGTERM.
pub async fn run_cli(db: &Path, socket: &Path) -> Result<(), ArsServerError> {
    // One server per database file.
    let _lock = crate::private::StoreLock::acquire(db).map_err(|e| ArsServerError::Locked {
        code: e.code(),
        message: e.to_string(),
    })?;
    let handle = bind(db, socket, ArsServerOptions::default()).await?;
    eprintln!(
        "serving {} on {} (Actor Runtime Socket v1)",
        db.display(),
        handle.socket_path().display()
    );
    // One JSON line once the socket listens, like `serve`, so scripts and
    // hosts can wait for it.
    println!(
        "{}",
        serde_json::json!({
            "event": "ready",
            "socket": handle.socket_path(),
            "database": db,
            "protocol": "actor_runtime_socket_v1",
        })
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| ArsServerError::Io(e.to_string()))?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    handle.shutdown().await;
    Ok(())
}

struct Shared {
    jobs: Mutex<mpsc::Sender<Job>>,
    queued: Arc<AtomicUsize>,
    options: ArsServerOptions,
    next_conn: AtomicU64,
}

impl Shared {
    /// Hands `job` to the SQLite thread, or gives it back if that is gone.
    fn send(&self, job: Job) -> Result<(), Job> {
        match self.jobs.lock() {
            Ok(jobs) => jobs.send(job).map_err(|e| e.0),
            Err(_) => Err(job),
        }
    }
}

async fn accept_loop(
    listener: UnixListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = Vec::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.retain(|task: &JoinHandle<()>| !task.is_finished());
                    if connections.len() >= shared.options.max_connections {
                        tracing::warn!(max = shared.options.max_connections, "ars server: refusing a connection over the cap");
                        drop(stream);
                        continue;
                    }
                    let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
                    connections.push(tokio::spawn(serve_connection(
                        stream,
                        id,
                        shared.clone(),
                        shutdown.clone(),
                    )));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "ars server: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    for task in connections {
        let _ = task.await;
    }
}

/// How much a connection asks the socket for at once.
const READ_CHUNK: usize = 64 * 1024;

/// A write is flushed once this much is coalesced, even if more is queued.
const WRITE_BATCH: usize = 1024 * 1024;

/// What a connection's writer task sends.
enum Outgoing {
    Response(u32, ResponsePayload),
    /// Responses the SQLite thread produced in one pass, in order.
    Responses(Vec<(u32, ResponsePayload)>),
    GoAway(GoAwayReason),
    /// The reader is done; stop once everything before this is written.
    Close,
}

impl Outgoing {
    /// About what this costs once encoded: what bounds an outbox.
    fn approx_bytes(&self) -> usize {
        match self {
            Outgoing::Response(_, payload) => payload_bytes(payload),
            Outgoing::Responses(all) => all.iter().map(|(_, p)| payload_bytes(p)).sum(),
            Outgoing::GoAway(_) | Outgoing::Close => 16,
        }
    }
}

/// An estimate of a response's encoded size (never below its real size by
/// more than the per-frame header slack).
fn payload_bytes(payload: &ResponsePayload) -> usize {
    const FRAME: usize = 16;
    match payload {
        ResponsePayload::SqliteQueryOk(ok) => {
            let columns: usize = ok.columns.iter().map(|c| c.len() + 4).sum();
            let values: usize = ok
                .rows
                .iter()
                .flatten()
                .map(|v| match v {
                    ars::SqlValue::SqlText(t) => t.len() + 4,
                    ars::SqlValue::SqlBlob(b) => b.len() + 4,
                    _ => 9,
                })
                .sum();
            FRAME + columns + values + ok.rows.len() * 4
        }
        ResponsePayload::SqlError(e) => FRAME + e.message.len(),
        ResponsePayload::InvalidLeaseKey(e) => FRAME + e.message.len(),
        ResponsePayload::LeaseExpired(e) => FRAME + e.message.len(),
        ResponsePayload::QueueFull(q) => FRAME + q.limit.len(),
        _ => FRAME,
    }
}

/// A connection's outbox: a queue for its writer task, bounded in bytes.
/// Going over the bound marks the connection for closing.
#[derive(Clone)]
struct Outbox {
    tx: tmpsc::UnboundedSender<Outgoing>,
    bytes: Arc<AtomicUsize>,
    limit: usize,
    overflow: Arc<tokio::sync::Notify>,
}

impl Outbox {
    fn send(&self, message: Outgoing) {
        let size = message.approx_bytes();
        let total = self.bytes.fetch_add(size, Ordering::AcqRel) + size;
        if self.tx.send(message).is_err() {
            return;
        }
        if total > self.limit {
            self.overflow.notify_one();
        }
    }
}

/// Lease keys in use on one connection, shared with the SQLite thread,
/// which forgets each once its transaction has ended.
type LeaseKeys = Arc<Mutex<HashSet<String>>>;

fn forget_key(keys: &LeaseKeys, key: &str) {
    if let Ok(mut keys) = keys.lock() {
        keys.remove(key);
    }
}

enum ReadOutcome {
    Frame(Bytes),
    Eof,
    TooLarge,
}

async fn read_frame(
    rd: &mut OwnedReadHalf,
    buf: &mut BytesMut,
    decoder: &FrameDecoder,
) -> std::io::Result<ReadOutcome> {
    loop {
        match decoder.decode(buf) {
            Ok(Some(payload)) => return Ok(ReadOutcome::Frame(payload)),
            Ok(None) => {}
            Err(_) => return Ok(ReadOutcome::TooLarge),
        }
        if rd.read_buf(buf).await? == 0 {
            return Ok(ReadOutcome::Eof);
        }
    }
}

async fn serve_connection(
    stream: UnixStream,
    conn_id: u64,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (mut rd, mut wr) = stream.into_split();
    let decoder = FrameDecoder::new(shared.options.max_frame_bytes);
    let mut buf = BytesMut::with_capacity(READ_CHUNK);

    let hello = tokio::time::timeout(
        shared.options.handshake_timeout,
        read_frame(&mut rd, &mut buf, &decoder),
    )
    .await;
    let reply = match hello {
        Ok(Ok(ReadOutcome::Frame(payload))) => match ars::decode_client_hello(payload) {
            Ok(_) => ServerHello::HelloOk(HelloOk {
                max_frame_bytes: shared.options.max_frame_bytes,
            }),
            Err(ArsError::UnsupportedVersion { .. }) => ServerHello::HelloRejectUnsupportedVersion,
            Err(_) => return,
        },
        _ => return,
    };
    let Ok(frame) = ars::server_hello_frame(&reply) else {
        return;
    };
    if wr.write_all(&frame).await.is_err() || !matches!(reply, ServerHello::HelloOk(_)) {
        let _ = wr.shutdown().await;
        return;
    }

    let in_flight: Arc<Mutex<HashSet<u32>>> = Arc::default();
    let (out_tx, out_rx) = tmpsc::unbounded_channel();
    let out = Outbox {
        tx: out_tx,
        bytes: Arc::default(),
        limit: shared.options.max_outbox_bytes,
        overflow: Arc::default(),
    };
    let writer = tokio::spawn(write_loop(
        wr,
        out_rx,
        in_flight.clone(),
        shared.options.max_frame_bytes,
        out.bytes.clone(),
    ));
    let keys: LeaseKeys = Arc::default();
    let mut overflowed = false;
    let mut accepted: Vec<Req> = Vec::new();
    'serve: loop {
        // Take every complete frame the last read brought in and hand the
        // accepted ones to the SQLite thread as one job: one wake-up per read
        // rather than per request.
        let mut go_away = None;
        loop {
            let payload = match decoder.decode(&mut buf) {
                Ok(Some(payload)) => payload,
                Ok(None) => break,
                Err(_) => {
                    go_away = Some(GoAwayReason::FrameTooLarge);
                    break;
                }
            };
            let request = match ars::decode_client_frame(payload) {
                Ok(ClientFrame::Request(request)) => request,
                Err(_) => {
                    go_away = Some(GoAwayReason::MalformedFrame);
                    break;
                }
            };
            let fresh = match in_flight.lock() {
                Ok(mut ids) => ids.insert(request.request_id),
                Err(_) => false,
            };
            if !fresh {
                go_away = Some(GoAwayReason::MalformedFrame);
                break;
            }
            if let Some(rejection) = check_lease_rules(&request, &keys) {
                out.send(Outgoing::Response(
                    request.request_id,
                    ResponsePayload::InvalidLeaseKey(InvalidLeaseKey { message: rejection }),
                ));
                continue;
            }
            let capacity = shared.options.worker_queue_capacity;
            if shared.queued.fetch_add(1, Ordering::AcqRel) >= capacity as usize {
                shared.queued.fetch_sub(1, Ordering::AcqRel);
                out.send(Outgoing::Response(
                    request.request_id,
                    ResponsePayload::QueueFull(QueueFull {
                        limit: "sqliteWorkerQueue".into(),
                        capacity,
                    }),
                ));
                continue;
            }
            accepted.push(Req {
                conn: conn_id,
                request_id: request.request_id,
                lease: request.lease_key,
                payload: request.payload,
                out: out.clone(),
                keys: keys.clone(),
            });
        }
        if !accepted.is_empty() {
            let requests = std::mem::take(&mut accepted);
            if let Err(Job::Requests(refused)) = shared.send(Job::Requests(requests)) {
                for req in refused {
                    shared.queued.fetch_sub(1, Ordering::AcqRel);
                    out.send(Outgoing::Response(
                        req.request_id,
                        ResponsePayload::EndpointClosed,
                    ));
                }
            }
        }
        if let Some(reason) = go_away {
            out.send(Outgoing::GoAway(reason));
            break;
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let read = tokio::select! {
            _ = shutdown.changed() => break,
            _ = out.overflow.notified() => {
                overflowed = true;
                break;
            }
            read = rd.read_buf(&mut buf) => read,
        };
        match read {
            Ok(0) | Err(_) => break 'serve,
            Ok(_) => {}
        }
    }
    let _ = shared.send(Job::Closed { conn: conn_id });
    if overflowed {
        // The client stopped reading: nothing more is written to it.
        tracing::warn!(
            conn = conn_id,
            max = shared.options.max_outbox_bytes,
            "ars server: closing a connection whose unread responses exceeded the outbox bound"
        );
        writer.abort();
        return;
    }
    out.send(Outgoing::Close);
    drop(out);
    let _ = writer.await;
}

/// The lease rules that depend only on this connection's history.
fn check_lease_rules(request: &ars::Request, keys: &LeaseKeys) -> Option<String> {
    let Ok(mut used_keys) = keys.lock() else {
        return Some("the connection's lease table is unusable".into());
    };
    match &request.payload {
        RequestPayload::SqliteBegin(begin) => {
            if request.lease_key.is_some() {
                Some("SqliteBegin must not carry Request.leaseKey".into())
            } else if begin.lease_key.is_empty() {
                Some("the lease key is empty".into())
            } else if !used_keys.insert(begin.lease_key.clone()) {
                Some("the lease key was already used on this connection".into())
            } else {
                None
            }
        }
        RequestPayload::SqliteCommit(ars::SqliteCommit { lease_key })
        | RequestPayload::SqliteRollback(ars::SqliteRollback { lease_key }) => {
            if request.lease_key.is_some() {
                Some("SqliteCommit and SqliteRollback must not carry Request.leaseKey".into())
            } else if !used_keys.contains(lease_key) {
                Some("no lease with this key was begun on this connection".into())
            } else {
                None
            }
        }
        RequestPayload::SqliteQuery(_) | RequestPayload::SqliteExec(_) => {
            match &request.lease_key {
                Some(key) if !used_keys.contains(key) => {
                    Some("no lease with this key was begun on this connection".into())
                }
                _ => None,
            }
        }
    }
}

async fn write_loop(
    mut wr: OwnedWriteHalf,
    mut rx: tmpsc::UnboundedReceiver<Outgoing>,
    in_flight: Arc<Mutex<HashSet<u32>>>,
    max_frame_bytes: u32,
    queued_bytes: Arc<AtomicUsize>,
) {
    let mut batch: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut responses: Vec<(u32, ResponsePayload)> = Vec::new();
    'outer: while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        let mut stop = false;
        let mut taken = 0;
        // Coalesce whatever is already queued into one write.
        while let Some(message) = next.take() {
            taken += message.approx_bytes();
            match message {
                Outgoing::Response(id, payload) => responses.push((id, payload)),
                Outgoing::Responses(mut more) => responses.append(&mut more),
                Outgoing::GoAway(reason) => {
                    if !encode_responses(&mut responses, &in_flight, max_frame_bytes, &mut batch) {
                        break 'outer;
                    }
                    let frame = ServerFrame::GoAway(GoAway { reason });
                    let _ = ars::server_frame_into(&frame, max_frame_bytes, &mut batch);
                    stop = true;
                    break;
                }
                Outgoing::Close => {
                    stop = true;
                    break;
                }
            }
            if !encode_responses(&mut responses, &in_flight, max_frame_bytes, &mut batch) {
                break 'outer;
            }
            if batch.len() < WRITE_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !encode_responses(&mut responses, &in_flight, max_frame_bytes, &mut batch) {
            break;
        }
        if !batch.is_empty() {
            if wr.write_all(&batch).await.is_err() {
                break;
            }
            batch.clear();
        }
        queued_bytes.fetch_sub(taken, Ordering::AcqRel);
        if stop {
            break;
        }
    }
    let _ = wr.shutdown().await;
}

/// Appends `responses` to `batch` as frames and retires their request ids.
/// A response over the frame limit is replaced by `ResponseTooLarge`; false
/// when even that cannot be encoded.
fn encode_responses(
    responses: &mut Vec<(u32, ResponsePayload)>,
    in_flight: &Mutex<HashSet<u32>>,
    max_frame_bytes: u32,
    batch: &mut Vec<u8>,
) -> bool {
    if responses.is_empty() {
        return true;
    }
    if let Ok(mut ids) = in_flight.lock() {
        for (id, _) in responses.iter() {
            ids.remove(id);
        }
    }
    for (id, payload) in responses.drain(..) {
        let frame = ServerFrame::Response(Response {
            request_id: id,
            payload,
        });
        if ars::server_frame_into(&frame, max_frame_bytes, batch).is_err() {
            let too_large = ServerFrame::Response(Response {
                request_id: id,
                payload: ResponsePayload::ResponseTooLarge,
            });
            if ars::server_frame_into(&too_large, max_frame_bytes, batch).is_err() {
                return false;
            }
        }
    }
    true
}

// ---------------------------------------------------------------------------
// The SQLite thread: coordinator and executor in one.

struct Req {
    conn: u64,
    request_id: u32,
    lease: Option<String>,
    payload: RequestPayload,
    out: Outbox,
    keys: LeaseKeys,
}

enum Job {
    /// Requests of one connection, in arrival order.
    Requests(Vec<Req>),
    Closed {
        conn: u64,
    },
}

/// Responses held back until the SQLite thread runs out of queued work, so a
/// connection's writer wakes once per pass instead of once per statement.
struct Replies {
    conn: u64,
    out: Outbox,
    replies: Vec<(u32, ResponsePayload)>,
}

/// Held-back responses are flushed at this count even while work remains,
/// so a steady stream of requests cannot delay them indefinitely.
const MAX_HELD_REPLIES: usize = 128;

type LeaseId = (u64, String);

enum LeaseState {
    Waiting,
    Active,
    Expired { timeout_ms: u64 },
}

struct ActiveLease {
    id: LeaseId,
    deadline: Instant,
    timeout_ms: u64,
    keys: LeaseKeys,
}

/// Expired leases remembered (so their holder is told `LeaseExpired`) until
/// the holder ends them; beyond this many the oldest are forgotten.
const MAX_REMEMBERED_EXPIRED: usize = 1024;

struct Worker {
    db: Connection,
    rx: mpsc::Receiver<Job>,
    options: ArsServerOptions,
    queued: Arc<AtomicUsize>,
    active: Option<ActiveLease>,
    states: HashMap<LeaseId, LeaseState>,
    /// Begins waiting for the writer, each with its requested timeout.
    waiting: VecDeque<(Req, u64)>,
    /// `waiting.len()` for the handle, updated after every step.
    waiting_gauge: Arc<AtomicUsize>,
    /// Requests for leases that have not begun yet, in arrival order.
    parked: HashMap<LeaseId, VecDeque<Req>>,
    /// Lease-less requests that arrived while a transaction held the writer.
    deferred: VecDeque<Req>,
    /// Work that is ready to run before anything new is received.
    ready: VecDeque<Req>,
    /// Received requests not handled yet, in arrival order.
    incoming: VecDeque<Req>,
    replies: Vec<Replies>,
    held: usize,
    /// Expired leases in expiry order, with their connection's key table.
    expired: VecDeque<(LeaseId, LeaseKeys)>,
}

impl Worker {
    fn new(
        db: Connection,
        rx: mpsc::Receiver<Job>,
        options: ArsServerOptions,
        queued: Arc<AtomicUsize>,
        waiting_gauge: Arc<AtomicUsize>,
    ) -> Self {
        Worker {
            db,
            rx,
            options,
            queued,
            waiting_gauge,
            active: None,
            states: HashMap::new(),
            waiting: VecDeque::new(),
            parked: HashMap::new(),
            deferred: VecDeque::new(),
            ready: VecDeque::new(),
            incoming: VecDeque::new(),
            replies: Vec::new(),
            held: 0,
            expired: VecDeque::new(),
        }
    }

    fn run(mut self) {
        loop {
            self.waiting_gauge
                .store(self.waiting.len(), Ordering::Release);
            if let Some(req) = self.ready.pop_front() {
                self.handle(req);
                continue;
            }
            if let Some(req) = self.incoming.pop_front() {
                self.handle(req);
                continue;
            }
            let job = match self.rx.try_recv() {
                Ok(job) => job,
                Err(mpsc::TryRecvError::Disconnected) => break,
                Err(mpsc::TryRecvError::Empty) => {
                    // Out of work: answer everything before waiting for more.
                    self.flush();
                    match self.wait() {
                        Some(job) => job,
                        None => continue,
                    }
                }
            };
            match job {
                Job::Requests(reqs) => self.incoming.extend(reqs),
                Job::Closed { conn } => self.close_connection(conn),
            }
        }
        self.rollback_if_open();
        self.flush();
    }

    /// Blocks for the next job, up to the active lease's deadline; `None`
    /// after expiring that lease.
    fn wait(&mut self) -> Option<Job> {
        match &self.active {
            Some(active) => {
                let wait = active.deadline.saturating_duration_since(Instant::now());
                match self.rx.recv_timeout(wait) {
                    Ok(job) => Some(job),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        self.expire_active();
                        None
                    }
                    // The next try_recv sees the disconnection and stops.
                    Err(mpsc::RecvTimeoutError::Disconnected) => None,
                }
            }
            None => self.rx.recv().ok(),
        }
    }

    fn respond(&mut self, req: Req, payload: ResponsePayload) {
        self.queued.fetch_sub(1, Ordering::AcqRel);
        match self.replies.iter_mut().find(|r| r.conn == req.conn) {
            Some(held) => held.replies.push((req.request_id, payload)),
            None => self.replies.push(Replies {
                conn: req.conn,
                out: req.out,
                replies: vec![(req.request_id, payload)],
            }),
        }
        self.held += 1;
        if self.held >= MAX_HELD_REPLIES {
            self.flush();
        }
    }

    fn flush(&mut self) {
        for held in self.replies.drain(..) {
            held.out.send(Outgoing::Responses(held.replies));
        }
        self.held = 0;
    }

    fn drop_request(&self, _req: Req) {
        self.queued.fetch_sub(1, Ordering::AcqRel);
    }

    fn handle(&mut self, req: Req) {
        if self
            .active
            .as_ref()
            .is_some_and(|a| Instant::now() >= a.deadline)
        {
            self.expire_active();
        }
        match &req.payload {
            RequestPayload::SqliteBegin(begin) => {
                let id = (req.conn, begin.lease_key.clone());
                // The client's wish, within the server's maximum.
                let max_ms =
                    u64::try_from(self.options.max_lease_timeout.as_millis()).unwrap_or(u64::MAX);
                let timeout_ms = begin
                    .timeout_ms
                    .unwrap_or(self.options.lease_timeout.as_millis() as u64)
                    .min(max_ms);
                if self.active.is_none() {
                    self.start(req, id, timeout_ms);
                } else if self.waiting.len() >= self.options.coordinator_queue_capacity as usize {
                    forget_key(&req.keys, &id.1);
                    let capacity = self.options.coordinator_queue_capacity;
                    self.respond(
                        req,
                        ResponsePayload::QueueFull(QueueFull {
                            limit: "transactionCoordinatorQueue".into(),
                            capacity,
                        }),
                    );
                } else {
                    self.states.insert(id, LeaseState::Waiting);
                    self.waiting.push_back((req, timeout_ms));
                }
            }
            RequestPayload::SqliteCommit(ars::SqliteCommit { lease_key })
            | RequestPayload::SqliteRollback(ars::SqliteRollback { lease_key }) => {
                let id = (req.conn, lease_key.clone());
                let commit = matches!(req.payload, RequestPayload::SqliteCommit(_));
                self.finish(req, id, commit);
            }
            RequestPayload::SqliteQuery(_) | RequestPayload::SqliteExec(_) => {
                match req.lease.clone() {
                    None if self.active.is_some() => self.deferred.push_back(req),
                    None => self.execute(req),
                    Some(key) => {
                        let id = (req.conn, key);
                        match self.states.get(&id) {
                            Some(LeaseState::Active) => self.execute(req),
                            Some(LeaseState::Waiting) => {
                                self.parked.entry(id).or_default().push_back(req)
                            }
                            Some(LeaseState::Expired { timeout_ms }) => {
                                let timeout_ms = *timeout_ms;
                                self.respond(req, expired(timeout_ms));
                            }
                            None => self.respond(req, not_active()),
                        }
                    }
                }
            }
        }
    }

    /// Takes the writer for lease `id` and releases its parked requests.
    fn start(&mut self, req: Req, id: LeaseId, timeout_ms: u64) {
        match self.db.execute_batch("BEGIN IMMEDIATE") {
            Ok(()) => {
                let now = Instant::now();
                self.active = Some(ActiveLease {
                    id: id.clone(),
                    deadline: now
                        .checked_add(Duration::from_millis(timeout_ms))
                        .unwrap_or(now + self.options.max_lease_timeout),
                    timeout_ms,
                    keys: req.keys.clone(),
                });
                self.states.insert(id.clone(), LeaseState::Active);
                self.respond(req, ResponsePayload::SqliteBeginOk);
                if let Some(parked) = self.parked.remove(&id) {
                    for (offset, parked_req) in parked.into_iter().enumerate() {
                        self.ready.insert(offset, parked_req);
                    }
                }
            }
            Err(e) => {
                self.states.remove(&id);
                forget_key(&req.keys, &id.1);
                let parked = self.parked.remove(&id).unwrap_or_default();
                self.respond(req, db_error_payload(sql_error(0)(e)));
                for parked_req in parked {
                    self.respond(parked_req, not_active());
                }
            }
        }
    }

    fn finish(&mut self, req: Req, id: LeaseId, commit: bool) {
        match self.states.get(&id) {
            Some(LeaseState::Active) => {}
            Some(LeaseState::Waiting) => {
                self.parked.entry(id).or_default().push_back(req);
                return;
            }
            Some(LeaseState::Expired { timeout_ms }) => {
                let timeout_ms = *timeout_ms;
                self.states.remove(&id);
                forget_key(&req.keys, &id.1);
                self.respond(req, expired(timeout_ms));
                return;
            }
            None => {
                self.respond(req, not_active());
                return;
            }
        }
        let payload = if commit {
            match self.db.execute_batch("COMMIT") {
                Ok(()) if self.drop_at_this_commit() => {
                    // Landed, but the client never hears so: earlier answers
                    // go out, then the connection closes.
                    self.states.remove(&id);
                    self.active = None;
                    self.queued.fetch_sub(1, Ordering::AcqRel);
                    self.flush();
                    req.out.send(Outgoing::Close);
                    self.promote();
                    return;
                }
                Ok(()) => ResponsePayload::SqliteCommitOk,
                Err(e) => {
                    self.rollback_if_open();
                    db_error_payload(sql_error(0)(e))
                }
            }
        } else {
            self.rollback_if_open();
            ResponsePayload::SqliteRollbackOk
        };
        self.states.remove(&id);
        // Ended: the key is forgotten, so a long-lived connection's table
        // holds only its open leases.
        forget_key(&req.keys, &id.1);
        self.active = None;
        self.respond(req, payload);
        self.promote();
    }

    /// Whether the fault hook says to drop the connection at this commit.
    fn drop_at_this_commit(&self) -> bool {
        let Some(countdown) = &self.options.drop_connection_at_commit else {
            return false;
        };
        countdown
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok_and(|before| before == 1)
    }

    fn expire_active(&mut self) {
        if let Some(active) = self.active.take() {
            self.rollback_if_open();
            self.states.insert(
                active.id.clone(),
                LeaseState::Expired {
                    timeout_ms: active.timeout_ms,
                },
            );
            self.expired.push_back((active.id, active.keys));
            while self.expired.len() > MAX_REMEMBERED_EXPIRED {
                let Some((id, keys)) = self.expired.pop_front() else {
                    break;
                };
                if matches!(self.states.get(&id), Some(LeaseState::Expired { .. })) {
                    self.states.remove(&id);
                    forget_key(&keys, &id.1);
                }
            }
            self.promote();
        }
    }

    /// Runs what waited for the writer: lease-less requests first, then the
    /// next Begin in line.
    fn promote(&mut self) {
        while let Some(req) = self.deferred.pop_front() {
            self.execute(req);
        }
        while self.active.is_none() {
            let Some((req, timeout_ms)) = self.waiting.pop_front() else {
                break;
            };
            let id = match &req.payload {
                RequestPayload::SqliteBegin(begin) => (req.conn, begin.lease_key.clone()),
                _ => {
                    self.respond(req, not_active());
                    continue;
                }
            };
            self.start(req, id, timeout_ms);
        }
    }

    fn close_connection(&mut self, conn: u64) {
        if self.active.as_ref().is_some_and(|a| a.id.0 == conn) {
            self.rollback_if_open();
            self.active = None;
        }
        self.states.retain(|id, _| id.0 != conn);
        self.expired.retain(|(id, _)| id.0 != conn);
        for (id, parked) in std::mem::take(&mut self.parked) {
            if id.0 == conn {
                parked.into_iter().for_each(|r| self.drop_request(r));
            } else {
                self.parked.insert(id, parked);
            }
        }
        for (req, timeout_ms) in std::mem::take(&mut self.waiting) {
            if req.conn == conn {
                self.drop_request(req);
            } else {
                self.waiting.push_back((req, timeout_ms));
            }
        }
        for req in std::mem::take(&mut self.deferred) {
            if req.conn == conn {
                self.drop_request(req);
            } else {
                self.deferred.push_back(req);
            }
        }
        self.promote();
    }

    fn rollback_if_open(&self) {
        if !self.db.is_autocommit() {
            if let Err(e) = self.db.execute_batch("ROLLBACK") {
                tracing::error!(error = %e, "ERR_AGENTOS_SQLITE_ROLLBACK: rollback failed");
            }
        }
    }

    fn execute(&mut self, req: Req) {
        let payload = match &req.payload {
            RequestPayload::SqliteExec(exec) => match self.db.execute_batch(&exec.script) {
                Ok(()) => ResponsePayload::SqliteExecOk,
                Err(e) => db_error_payload(sql_error(0)(e)),
            },
            RequestPayload::SqliteQuery(query) => {
                match run_statement(
                    &self.db,
                    0,
                    &query.sql,
                    &query.params,
                    u64::from(self.options.max_frame_bytes),
                ) {
                    Ok(rows) => ResponsePayload::SqliteQueryOk(SqliteQueryOk {
                        columns: rows.columns,
                        rows: rows
                            .rows
                            .into_iter()
                            .map(|row| row.into_iter().map(to_wire).collect())
                            .collect(),
                        changes: i64::try_from(rows.changes).unwrap_or(i64::MAX),
                        last_insert_row_id: rows.last_insert_rowid,
                    }),
                    Err(e) => db_error_payload(e),
                }
            }
            _ => not_active(),
        };
        self.respond(req, payload);
    }
}

fn expired(timeout_ms: u64) -> ResponsePayload {
    ResponsePayload::LeaseExpired(LeaseExpired {
        timeout_ms,
        message: "the lease deadline passed and its transaction was rolled back".into(),
    })
}

fn not_active() -> ResponsePayload {
    ResponsePayload::InvalidLeaseKey(InvalidLeaseKey {
        message: "the lease is not active".into(),
    })
}

fn db_error_payload(error: DbError) -> ResponsePayload {
    match error {
        DbError::Sql {
            code,
            statement_index,
            message,
        } => ResponsePayload::SqlError(SqlError {
            code,
            statement_index,
            message,
        }),
        DbError::ResultLimit { .. } => ResponsePayload::ResponseTooLarge,
        other => ResponsePayload::SqlError(SqlError {
            code: -1,
            statement_index: 0,
            message: other.to_string(),
        }),
    }
}
