//! The actor_uds backend: an Actor Runtime Socket v1 client.
//!
//! One connection at a time, with a reader task and a writer task; requests
//! are pipelined under fresh request ids and matched to their responses in
//! whatever order those arrive. A caller writes its frames to the socket
//! itself when nothing is queued before them and the socket takes them
//! whole (no task hop); otherwise they queue for the writer task, which
//! keeps the order. In-flight requests are bounded by
//! `limits.sqlite.maxInFlightRequests` (callers wait for a slot) and encoded
//! bytes waiting for the socket by `maxQueuedRequestBytes` (the excess is a
//! typed `QueueFull` error, never unbounded memory).
//!
//! A server may run pipelined requests in any order (Rivet's runs each on a
//! task of its own), so only independent lease-less queries are pipelined.
//! A transaction is one lease with a fresh UUID key, pinned to the
//! connection that began it: Begin and its first statement go out in one
//! write (a server registers a Begin's lease in arrival order, and the
//! statement waits for it), every later statement and the commit only once
//! the one before is answered. It reserves its two slots before it begins,
//! so lease-less reads the server parks behind it can never starve it, its
//! rollback included. A request the server answers `LeaseExpired` without
//! having run it (it waited behind someone else's lease that expired: a
//! lease-less query, or a Begin) is sent again, a bounded number of times; a
//! statement of our own expired lease is not. After
//! `maxLeasesPerConnection` leases the next call opens a fresh connection,
//! since a server may remember every lease key a connection used until it
//! closes (Rivet's does). There is no pool, mux or
//! writer scheduler: the socket's owner owns isolation. A dead connection
//! fails its pending requests with `ConnectionLost`; the next call connects
//! again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentos_protocol::ars::{
    self, ArsError, ClientFrame, FrameDecoder, Request, RequestPayload, ResponsePayload,
    ServerFrame, ServerHello, SqliteBegin, SqliteCommit, SqliteQuery, SqliteQueryOk,
    SqliteRollback,
};
use agentos_schema::{Database, DatabaseKind, DbError, Rows, SqlValue, Statement};
use async_trait::async_trait;
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::ars_values::{from_wire, to_wire};
use crate::config::SqliteLimits;

/// Connect plus hello must finish within this.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How much the reader asks the socket for at once.
const READ_CHUNK: usize = 64 * 1024;

/// The actor socket database handle.
pub struct ActorUdsDatabase {
    path: PathBuf,
    limits: SqliteLimits,
    current: tokio::sync::Mutex<Option<Arc<Connection>>>,
    closed: std::sync::atomic::AtomicBool,
}

/// Connects, says hello, and turns foreign keys on (verifying they are on).
pub async fn connect(path: &Path, limits: &SqliteLimits) -> Result<ActorUdsDatabase, DbError> {
    let connection = Connection::open(path, limits).await?;
    let db = ActorUdsDatabase {
        path: path.to_owned(),
        limits: limits.clone(),
        current: tokio::sync::Mutex::new(Some(connection.clone())),
        closed: std::sync::atomic::AtomicBool::new(false),
    };
    db.query("PRAGMA foreign_keys = ON", vec![]).await?;
    let on = db.query("PRAGMA foreign_keys", vec![]).await?;
    if on.scalar_i64() != Some(1) {
        return Err(DbError::ForeignKeysDisabled);
    }
    Ok(db)
}

impl ActorUdsDatabase {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The live connection, or a new one when the last has died.
    async fn connection(&self) -> Result<Arc<Connection>, DbError> {
        let mut current = self.current.lock().await;
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(DbError::Closed);
        }
        if let Some(conn) = current.as_ref() {
            let leases = conn.leases_begun.load(Ordering::Relaxed);
            if conn.is_alive() && leases < self.limits.max_leases_per_connection {
                return Ok(conn.clone());
            }
        }
        // Dead, or it has begun its share of leases: a fresh one. A retired
        // connection closes once the calls still holding it are done.
        *current = None;
        let conn = Connection::open(&self.path, &self.limits).await?;
        // A fresh server connection starts with the server's own settings.
        conn.call(
            &conn.slots,
            None,
            query_payload("PRAGMA foreign_keys = ON", vec![]),
        )
        .await
        .and_then(|r| expect_query(r, 0))?;
        *current = Some(conn.clone());
        Ok(conn)
    }

    fn rows_of(&self, ok: SqliteQueryOk) -> Result<Rows, DbError> {
        decode_rows(ok, self.limits.max_result_bytes)
    }

    /// One try at a transaction. The server runs every request on a task of
    /// its own, so requests pipelined on one connection may run in any
    /// order; only a Begin's lease is registered in the order frames arrive.
    /// So Begin and the first statement go out in one write (the statement
    /// waits on the server for the lease it names), and every later
    /// statement, and the commit, only once the one before is answered.
    async fn transaction_once(&self, statements: &[Statement]) -> Result<Vec<Rows>, Attempt> {
        let conn = self.connection().await.map_err(Attempt::Failed)?;
        // The lease's own in-flight slots, taken before it begins: requests
        // parked on the server behind it (lease-less reads, other Begins)
        // can then never hold every slot it needs to finish, its rollback
        // included.
        let width = LEASE_SLOTS.min(conn.max_in_flight);
        let reserved = conn
            .slots
            .clone()
            .acquire_many_owned(width)
            .await
            .map_err(|_| Attempt::Failed(conn.death()))?;
        let slots = Arc::new(Semaphore::new(width as usize));
        conn.leases_begun.fetch_add(1, Ordering::Relaxed);
        let key = uuid::Uuid::new_v4().to_string();
        let mut lease = Lease {
            conn: conn.clone(),
            key: key.clone(),
            open: true,
            slots: slots.clone(),
            reserved: Some(reserved),
        };
        let begin = RequestPayload::SqliteBegin(SqliteBegin {
            lease_key: key.clone(),
            timeout_ms: None,
        });
        let mut first = vec![(None, begin)];
        let mut statements = statements.iter().peekable();
        if width > 1 {
            if let Some(statement) = statements.peek() {
                first.push((Some(key.clone()), statement_payload(statement)));
            }
        }
        let sent_with_begin = first.len() > 1;
        let mut replies = match conn.send_all(&slots, first).await {
            Ok(replies) => replies.into_iter(),
            Err(error) => {
                lease.open = false;
                return Err(Attempt::Failed(error));
            }
        };
        let begin = replies.next();
        let mut with_begin = replies.next();
        let begun = match begin {
            Some(reply) => receive(reply).await,
            None => Err(conn.death()),
        };
        match begun {
            Ok(ResponsePayload::SqliteBeginOk) => {}
            // It waited behind a lease that expired and never began; what was
            // sent with it named a lease that never existed.
            Ok(ResponsePayload::LeaseExpired(e)) => {
                lease.open = false;
                return Err(Attempt::NotRun(error_of(
                    ResponsePayload::LeaseExpired(e),
                    0,
                )));
            }
            Ok(other) => {
                lease.open = false;
                return Err(Attempt::Failed(error_of(other, 0)));
            }
            Err(e) => {
                lease.open = false;
                return Err(Attempt::Failed(e));
            }
        }
        debug_assert_eq!(with_begin.is_some(), sent_with_begin);
        let mut results = Vec::with_capacity(statements.len());
        for (index, statement) in statements.enumerate() {
            let index = index as u32;
            let reply = match with_begin.take() {
                Some(reply) => Ok(reply),
                None => {
                    conn.send(&slots, Some(key.clone()), statement_payload(statement))
                        .await
                }
            };
            let outcome = match reply {
                Ok(reply) => receive(reply).await,
                Err(e) => Err(e),
            }
            .and_then(|r| expect_query(r, index))
            .and_then(|ok| self.rows_of(ok))
            .and_then(|rows| match statement.expected_changes {
                Some(expected) if expected != rows.changes => Err(DbError::ExpectedChanges {
                    statement_index: index,
                    expected,
                    actual: rows.changes,
                }),
                _ => Ok(rows),
            });
            match outcome {
                Ok(rows) => results.push(rows),
                Err(error) => {
                    lease.rollback().await;
                    return Err(Attempt::Failed(error));
                }
            }
        }
        let sent = conn
            .send(
                &slots,
                None,
                RequestPayload::SqliteCommit(SqliteCommit {
                    lease_key: key.clone(),
                }),
            )
            .await;
        let commit = match sent {
            // Once the commit may have reached the server, anything but an
            // answer to it (a lost connection, a GoAway) leaves its outcome
            // unknown.
            Ok(reply) => receive(reply)
                .await
                .map_err(|e| DbError::CommitOutcomeUnknown(e.to_string())),
            Err(e) => Err(e),
        };
        match commit {
            Ok(ResponsePayload::SqliteCommitOk) => {
                lease.open = false;
                Ok(results)
            }
            Ok(other) => {
                lease.rollback().await;
                Err(Attempt::Failed(error_of(other, results.len() as u32)))
            }
            Err(e) => {
                lease.rollback().await;
                Err(Attempt::Failed(e))
            }
        }
    }
}

/// How a transaction's try ended, when it did not commit.
enum Attempt {
    /// The server says nothing of it ran (its Begin waited behind a lease
    /// that expired): it may be sent again.
    NotRun(DbError),
    Failed(DbError),
}

/// How often a request the server says never ran is sent again. One retry
/// is the usual case: the lease it waited behind is gone by then.
const NOT_RUN_RETRIES: u32 = 8;

/// Before sending again what never ran: a server may still be rolling the
/// expired lease back, and refuses what arrives meanwhile too (Rivet's
/// does), so each try waits a millisecond longer than the one before.
async fn not_run_pause(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(u64::from(attempt))).await;
}

/// In-flight slots one lease uses at most: its Begin and first statement.
const LEASE_SLOTS: u32 = 2;

/// A query result as the handle's rows. Every row must have exactly as many
/// values as the result has columns (checked once, here, for the whole
/// result), else `CorruptRow`; the decoded values must fit
/// `max_result_bytes`, else `ResultLimit`.
fn decode_rows(ok: SqliteQueryOk, max_result_bytes: u64) -> Result<Rows, DbError> {
    let width = ok.columns.len();
    if let Some((index, row)) = ok.rows.iter().enumerate().find(|(_, r)| r.len() != width) {
        return Err(DbError::CorruptRow {
            table: "query result".into(),
            message: format!(
                "row {index} has {} values, the result has {width} columns",
                row.len()
            ),
        });
    }
    let mut bytes: u64 = 0;
    let rows: Vec<Vec<SqlValue>> = ok
        .rows
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|v| {
                    let v = from_wire(v);
                    bytes += v.approx_bytes() as u64;
                    v
                })
                .collect()
        })
        .collect();
    if bytes > max_result_bytes {
        return Err(DbError::ResultLimit {
            limit: max_result_bytes,
        });
    }
    Ok(Rows {
        columns: ok.columns,
        rows,
        changes: u64::try_from(ok.changes).unwrap_or(0),
        last_insert_rowid: ok.last_insert_row_id,
    })
}

#[async_trait]
impl Database for ActorUdsDatabase {
    fn kind(&self) -> DatabaseKind {
        DatabaseKind::ActorUds
    }

    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Rows, DbError> {
        let mut attempt = 0;
        loop {
            let conn = self.connection().await?;
            let response = conn
                .call(&conn.slots, None, query_payload(sql, params.clone()))
                .await?;
            match response {
                // Parked behind a lease that expired: the server says it did
                // not run, so it is sent again.
                ResponsePayload::LeaseExpired(_) if attempt < NOT_RUN_RETRIES => {
                    attempt += 1;
                    not_run_pause(attempt).await;
                }
                other => return self.rows_of(expect_query(other, 0)?),
            }
        }
    }

    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Rows>, DbError> {
        let mut attempt = 0;
        loop {
            match self.transaction_once(&statements).await {
                Ok(rows) => return Ok(rows),
                Err(Attempt::NotRun(_)) if attempt < NOT_RUN_RETRIES => {
                    attempt += 1;
                    not_run_pause(attempt).await;
                }
                Err(Attempt::NotRun(error) | Attempt::Failed(error)) => return Err(error),
            }
        }
    }

    async fn close(&self) {
        let mut current = self.current.lock().await;
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        // Dropping the last handle ends the reader and writer tasks and
        // closes the socket; calls already holding it finish first.
        current.take();
    }
}

/// An open lease. Dropped while still open (the caller's future was
/// cancelled), it sends a rollback in the background rather than holding the
/// server's writer until the deadline.
struct Lease {
    conn: Arc<Connection>,
    key: String,
    open: bool,
    /// The lease's own slots, backed by `reserved` of the connection's.
    slots: Arc<Semaphore>,
    reserved: Option<OwnedSemaphorePermit>,
}

impl Lease {
    async fn rollback(&mut self) {
        self.open = false;
        let result = self
            .conn
            .call(&self.slots, None, rollback_payload(&self.key))
            .await;
        match result {
            Ok(ResponsePayload::SqliteRollbackOk) => {}
            // The server already ended the lease (a failed commit, a deadline):
            // nothing is left to roll back.
            Ok(ResponsePayload::InvalidLeaseKey(_) | ResponsePayload::LeaseExpired(_)) => {}
            Ok(other) => tracing::error!(
                error = %error_of(other, 0),
                "ERR_AGENTOS_SQLITE_ROLLBACK: rollback failed"
            ),
            Err(e) => tracing::error!(error = %e, "ERR_AGENTOS_SQLITE_ROLLBACK: rollback failed"),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let conn = self.conn.clone();
        let key = std::mem::take(&mut self.key);
        let slots = self.slots.clone();
        // The rollback goes out on the lease's own slots, which stay
        // reserved until it is answered.
        let reserved = self.reserved.take();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = conn.call(&slots, None, rollback_payload(&key)).await;
                drop(reserved);
            });
        }
    }
}

fn rollback_payload(key: &str) -> RequestPayload {
    RequestPayload::SqliteRollback(SqliteRollback {
        lease_key: key.to_owned(),
    })
}

fn query_payload(sql: &str, params: Vec<SqlValue>) -> RequestPayload {
    RequestPayload::SqliteQuery(SqliteQuery {
        sql: sql.to_owned(),
        params: params.into_iter().map(to_wire).collect(),
    })
}

/// A statement of a transaction as a request. The statement is kept (and
/// copied here) so that a transaction the server never ran can be sent again.
fn statement_payload(statement: &Statement) -> RequestPayload {
    query_payload(&statement.sql, statement.params.clone())
}

async fn receive(reply: Reply) -> Result<ResponsePayload, DbError> {
    reply
        .await
        .map_err(|_| DbError::ConnectionLost("the connection closed".into()))?
}

fn expect_query(response: ResponsePayload, index: u32) -> Result<SqliteQueryOk, DbError> {
    match response {
        ResponsePayload::SqliteQueryOk(ok) => Ok(ok),
        other => Err(error_of(other, index)),
    }
}

/// Maps a non-success response to the handle's error.
pub fn error_of(response: ResponsePayload, statement_index: u32) -> DbError {
    match response {
        ResponsePayload::SqlError(e) => DbError::Sql {
            code: e.code,
            statement_index,
            message: e.message,
        },
        ResponsePayload::EndpointClosed => DbError::EndpointClosed,
        ResponsePayload::QueueFull(q) => DbError::QueueFull {
            limit: q.limit,
            capacity: q.capacity,
        },
        ResponsePayload::InvalidLeaseKey(e) => DbError::InvalidLeaseKey(e.message),
        ResponsePayload::LeaseExpired(e) => DbError::LeaseExpired {
            timeout_ms: e.timeout_ms,
            message: e.message,
        },
        ResponsePayload::ResponseTooLarge => DbError::ResponseTooLarge,
        other => DbError::Protocol(format!("unexpected response {other:?}")),
    }
}

// ---------------------------------------------------------------------------
// One connection: the pending map, the reader and the writer.

type Reply = oneshot::Receiver<Result<ResponsePayload, DbError>>;

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

struct Connection {
    shared: Arc<Shared>,
    slots: Arc<Semaphore>,
    out: Arc<Outbound>,
    next_id: AtomicU32,
    /// Leases begun on this connection (`maxLeasesPerConnection`).
    leases_begun: AtomicU32,
    max_in_flight: u32,
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
    async fn open(path: &Path, limits: &SqliteLimits) -> Result<Arc<Connection>, DbError> {
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

    fn is_alive(&self) -> bool {
        self.shared
            .state
            .lock()
            .map(|s| s.dead.is_none())
            .unwrap_or(false)
    }

    fn death(&self) -> DbError {
        self.shared
            .state
            .lock()
            .ok()
            .and_then(|s| s.dead.clone())
            .unwrap_or_else(|| DbError::ConnectionLost("the connection closed".into()))
    }

    async fn call(
        &self,
        slots: &Arc<Semaphore>,
        lease_key: Option<String>,
        payload: RequestPayload,
    ) -> Result<ResponsePayload, DbError> {
        receive(self.send(slots, lease_key, payload).await?).await
    }

    /// Queues one request and returns where its response will arrive. Waits
    /// for an in-flight slot from `slots`; never waits for queued bytes.
    async fn send(
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
    async fn send_all(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn result(columns: &[&str], rows: Vec<Vec<ars::SqlValue>>) -> SqliteQueryOk {
        SqliteQueryOk {
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows,
            changes: 0,
            last_insert_row_id: None,
        }
    }

    #[test]
    fn rows_as_wide_as_the_columns_decode() {
        let ok = result(
            &["a", "b"],
            vec![
                vec![ars::SqlValue::SqlInteger(1), ars::SqlValue::SqlNull],
                vec![
                    ars::SqlValue::SqlText("x".into()),
                    ars::SqlValue::SqlBlob(vec![1]),
                ],
            ],
        );
        let rows = decode_rows(ok, u64::MAX).expect("decoded");
        assert_eq!(rows.columns, vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(rows.rows.len(), 2);
        assert_eq!(rows.rows[1][0], SqlValue::Text("x".into()));
        let empty = decode_rows(result(&[], vec![]), u64::MAX).expect("no columns, no rows");
        assert!(empty.rows.is_empty());
    }

    #[test]
    fn a_row_of_the_wrong_width_is_a_corrupt_row() {
        let short = result(
            &["a", "b"],
            vec![
                vec![ars::SqlValue::SqlInteger(1), ars::SqlValue::SqlNull],
                vec![ars::SqlValue::SqlInteger(2)],
            ],
        );
        let err = decode_rows(short, u64::MAX).expect_err("short row");
        assert_eq!(err.code(), "corrupt_row");
        assert_eq!(
            err.to_string(),
            "corrupt row from query result: row 1 has 1 values, the result has 2 columns"
        );
        let long = result(
            &["a"],
            vec![vec![ars::SqlValue::SqlNull, ars::SqlValue::SqlNull]],
        );
        assert!(matches!(
            decode_rows(long, u64::MAX),
            Err(DbError::CorruptRow { .. })
        ));
        let rows_without_columns = result(&[], vec![vec![ars::SqlValue::SqlNull]]);
        assert!(matches!(
            decode_rows(rows_without_columns, u64::MAX),
            Err(DbError::CorruptRow { .. })
        ));
    }

    #[test]
    fn the_result_limit_still_applies() {
        let ok = result(&["t"], vec![vec![ars::SqlValue::SqlText("x".repeat(64))]]);
        assert!(matches!(
            decode_rows(ok, 8),
            Err(DbError::ResultLimit { limit: 8 })
        ));
    }
}
