//! The reference server's SQLite thread: it owns the connection and the
//! transaction coordinator (one writer at a time, Begins queued behind it up
//! to a bound, leases with deadlines capped by the server's maximum, lease
//! every key refused once used on its connection). Like the reference runtime
//! it promises no order among a connection's pipelined requests (they run
//! newest first), and what waits behind a lease that expires is answered
//! `LeaseExpired` without running.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use agentos_protocol::ars::{
    self, InvalidLeaseKey, LeaseExpired, QueueFull, RequestPayload, ResponsePayload, SqlError,
    SqliteQueryOk,
};
use agentos_schema::DbError;
use rusqlite::Connection;

use crate::ars_values::to_wire;
use crate::sqlite_conn::{run_statement, sql_error, Awake};

use super::lease_keys::{release_key, LeaseKeys};
use super::outbox::{Outbox, Outgoing};
use super::ArsServerOptions;

pub(super) struct Req {
    pub(super) conn: u64,
    pub(super) request_id: u32,
    pub(super) lease: Option<String>,
    pub(super) payload: RequestPayload,
    pub(super) out: Outbox,
    pub(super) keys: LeaseKeys,
    /// Arrival order across the server, set when the SQLite thread takes it.
    pub(super) seq: u64,
    /// The inbound budget a large request frame took, held until answered.
    pub(super) _inbound: Option<agentos_base::budget::Held>,
}

pub(super) enum Job {
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
}

/// Expired leases remembered (so their holder is told `LeaseExpired`) until
/// the holder ends them; beyond this many the oldest are forgotten.
const MAX_REMEMBERED_EXPIRED: usize = 1024;

pub(super) struct Worker {
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
    /// Expired leases in expiry order.
    expired: VecDeque<LeaseId>,
    /// Requests taken so far (each one's `seq`).
    arrivals: u64,
    /// Whether to stay awake for the next job when out of work.
    awake: Awake,
}

impl Worker {
    pub(super) fn new(
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
            arrivals: 0,
            awake: Awake::default(),
        }
    }

    pub(super) fn run(mut self) {
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
                Job::Requests(reqs) => self.admit(reqs),
                Job::Closed { conn } => self.close_connection(conn),
            }
        }
        self.rollback_if_open();
        self.flush();
    }

    /// Blocks for the next job, up to the active lease's deadline; `None`
    /// after expiring that lease. A client that awaits each answer sends its
    /// next request moments after it: the thread stays awake for it briefly
    /// (yielding the core) instead of sleeping and being woken, while that
    /// pays (`Awake`).
    fn wait(&mut self) -> Option<Job> {
        if let Some(job) = self.awake.next_soon(&self.rx) {
            return Some(job);
        }
        let job = match &self.active {
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
        };
        if job.is_some() {
            self.awake.woke();
        }
        job
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

    /// Takes one read's worth of a connection's requests. Like a server that
    /// runs every request on a task of its own (Rivet's does, and its
    /// scheduler starts the newest task first), they run in no promised
    /// order: here last to first, so a client that counts on pipelined
    /// requests running in the order sent fails against this server too.
    /// Only a Begin's lease is registered in arrival order, first, so a
    /// statement sent after its Begin waits for that lease whatever runs
    /// first.
    fn admit(&mut self, mut reqs: Vec<Req>) {
        for req in &mut reqs {
            self.arrivals += 1;
            req.seq = self.arrivals;
            if let RequestPayload::SqliteBegin(begin) = &req.payload {
                self.states
                    .entry((req.conn, begin.lease_key.clone()))
                    .or_insert(LeaseState::Waiting);
            }
        }
        self.incoming.extend(reqs.into_iter().rev());
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
                    let capacity = self.options.coordinator_queue_capacity;
                    self.refuse_begin(
                        req,
                        id,
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
                });
                self.states.insert(id.clone(), LeaseState::Active);
                self.respond(req, ResponsePayload::SqliteBeginOk);
                // Everything parked on the lease is woken at once and runs in
                // no promised order: newest first, as in `admit`.
                if let Some(parked) = self.parked.remove(&id) {
                    let mut parked = Vec::from(parked);
                    parked.sort_by_key(|r| std::cmp::Reverse(r.seq));
                    for (offset, parked_req) in parked.into_iter().enumerate() {
                        self.ready.insert(offset, parked_req);
                    }
                }
            }
            Err(e) => self.refuse_begin(req, id, db_error_payload(sql_error(0)(e))),
        }
    }

    /// Answers a Begin that will never begin: its key is free again, and
    /// what waited for its lease is told the lease is unknown.
    fn refuse_begin(&mut self, req: Req, id: LeaseId, payload: ResponsePayload) {
        self.states.remove(&id);
        release_key(&req.keys, &id.1);
        let parked = self.parked.remove(&id).unwrap_or_default();
        self.respond(req, payload);
        for parked_req in parked {
            self.respond(parked_req, not_active());
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
        // Ended: its state goes, its key stays used on the connection.
        self.states.remove(&id);
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
            let timeout_ms = active.timeout_ms;
            self.states
                .insert(active.id.clone(), LeaseState::Expired { timeout_ms });
            self.expired.push_back(active.id);
            while self.expired.len() > MAX_REMEMBERED_EXPIRED {
                let Some(id) = self.expired.pop_front() else {
                    break;
                };
                if matches!(self.states.get(&id), Some(LeaseState::Expired { .. })) {
                    self.states.remove(&id);
                }
            }
            self.fail_waiters(timeout_ms);
        }
    }

    /// What waited behind a lease that expired (by its deadline or because
    /// its connection closed) does not run: lease-less requests and queued
    /// Begins are answered `LeaseExpired` with that lease's timeout, as the
    /// reference runtime answers them, and may be sent again.
    fn fail_waiters(&mut self, timeout_ms: u64) {
        for req in std::mem::take(&mut self.deferred) {
            self.respond(req, expired(timeout_ms));
        }
        for (req, _) in std::mem::take(&mut self.waiting) {
            let id = match &req.payload {
                RequestPayload::SqliteBegin(begin) => (req.conn, begin.lease_key.clone()),
                _ => {
                    self.respond(req, not_active());
                    continue;
                }
            };
            self.refuse_begin(req, id, expired(timeout_ms));
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
        let mut expired_lease = None;
        if let Some(active) = self.active.take_if(|a| a.id.0 == conn) {
            self.rollback_if_open();
            expired_lease = Some(active.timeout_ms);
        }
        self.states.retain(|id, _| id.0 != conn);
        self.expired.retain(|id| id.0 != conn);
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
        // The closed connection's open lease expires: what other
        // connections queued behind it is told so.
        match expired_lease {
            Some(timeout_ms) => self.fail_waiters(timeout_ms),
            None => self.promote(),
        }
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
            RequestPayload::SqliteExec(exec) => match exec_script(&self.db, &exec.script) {
                Ok(()) => ResponsePayload::SqliteExecOk,
                Err(e) => db_error_payload(e),
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

/// Runs a script statement by statement, stepping each to its end; an
/// error names the statement by its index among the script's non-empty
/// statements, as the reference runtime does.
fn exec_script(db: &Connection, script: &str) -> Result<(), DbError> {
    use fallible_iterator::FallibleIterator;
    let mut batch = rusqlite::Batch::new(db, script);
    let mut index = 0;
    loop {
        let mut statement = match batch.next() {
            Ok(Some(statement)) => statement,
            Ok(None) => return Ok(()),
            Err(e) => return Err(sql_error(index)(e)),
        };
        let mut rows = statement.raw_query();
        loop {
            match rows.next() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => return Err(sql_error(index)(e)),
            }
        }
        index += 1;
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
