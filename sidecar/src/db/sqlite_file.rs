//! The `sqlite_file` backend: one rusqlite connection owned by one dedicated
//! thread, fed through a bounded queue, for every write and ordered query;
//! and read-only connections for `Database::read` (WAL lets them read while
//! the writer commits): a few a task on a multi-threaded runtime borrows to
//! read on its own thread inside `block_in_place`, and a small pool on
//! threads of their own behind a bounded queue for everything else.
//!
//! Async callers never touch SQLite on a worker the runtime counts on: they
//! enqueue a job and await a oneshot reply, or read inside `block_in_place`,
//! so no tokio worker ever blocks on disk. A full queue is a
//! typed `QueueFull` error rather than unbounded memory. Every transaction is
//! `BEGIN IMMEDIATE … COMMIT`; any failure or expected-change mismatch rolls
//! back everything.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::thread;

use agentos_schema::{
    blob_range_of, blob_range_query, Database, DatabaseKind, DbError, Rows, SqlValue, Statement,
};
use async_trait::async_trait;
use rusqlite::types::{ToSql, ToSqlOutput, ValueRef};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::config::SqliteLimits;

const STATEMENT_CACHE: usize = 512;

enum Job {
    Query {
        sql: String,
        params: Vec<SqlValue>,
        reply: oneshot::Sender<Result<Rows, DbError>>,
    },
    Transaction {
        statements: Vec<Statement>,
        reply: oneshot::Sender<Result<Vec<Rows>, DbError>>,
    },
    /// Ends the executor once the jobs queued before it are done; the
    /// connection is dropped (and the WAL checkpointed) before the reply.
    Close { reply: oneshot::Sender<()> },
}

/// Read connections beside the writer: WAL lets each read while the writer
/// commits. Two, the cores these machines have.
const READERS: usize = 2;
/// How much of the file a read connection maps.
const READER_MMAP_BYTES: i64 = 1 << 30;

/// A job for the read pool.
enum ReadJob {
    Query {
        sql: String,
        params: Vec<SqlValue>,
        reply: oneshot::Sender<Result<Rows, DbError>>,
    },
    /// A byte range of one BLOB (`Database::read_blob`).
    Blob {
        blob: BlobRange,
        reply: oneshot::Sender<Result<Option<Vec<u8>>, DbError>>,
    },
    /// Ends the reader that takes it.
    Close { reply: oneshot::Sender<()> },
}

/// Which bytes of which BLOB a `read_blob` wants.
struct BlobRange {
    table: &'static str,
    column: &'static str,
    rowid: i64,
    offset: u64,
    len: u64,
}

impl BlobRange {
    /// Reads the range through SQLite's incremental blob I/O: only the pages
    /// that hold it are touched and copied. A row that cannot be opened so
    /// (missing, or not a BLOB) is read with `substr` instead, which tells
    /// the two apart.
    fn read(&self, conn: &Connection, max_result_bytes: u64) -> Result<Option<Vec<u8>>, DbError> {
        let opened = conn.blob_open(rusqlite::MAIN_DB, self.table, self.column, self.rowid, true);
        let Ok(blob) = opened else {
            return self.read_with_substr(conn, max_result_bytes);
        };
        let size = blob.len() as u64;
        let start = self.offset.min(size);
        let n = self.len.min(size - start);
        if n > max_result_bytes {
            return Err(DbError::ResultLimit {
                limit: max_result_bytes,
            });
        }
        let mut bytes = vec![0u8; usize::try_from(n).unwrap_or(usize::MAX)];
        blob.read_at_exact(&mut bytes, usize::try_from(start).unwrap_or(usize::MAX))
            .map_err(sql_error(0))?;
        Ok(Some(bytes))
    }

    fn read_with_substr(
        &self,
        conn: &Connection,
        max_result_bytes: u64,
    ) -> Result<Option<Vec<u8>>, DbError> {
        let (sql, params) =
            blob_range_query(self.table, self.column, self.rowid, self.offset, self.len);
        Ok(blob_range_of(run_statement(
            conn,
            0,
            &sql,
            &params,
            max_result_bytes,
        )?))
    }
}

/// The local-file database handle.
pub struct SqliteFileDatabase {
    jobs: SyncSender<Job>,
    /// The read pool's queue (None when no read connection could open: reads
    /// then go through the writer).
    reads: Option<SyncSender<ReadJob>>,
    readers: usize,
    /// Read connections a task on a multi-threaded runtime borrows to read
    /// on its own thread (see [`Database::read`] here).
    inline: std::sync::Mutex<Vec<Connection>>,
    max_result_bytes: u64,
    capacity: u32,
    path: PathBuf,
    closed: std::sync::atomic::AtomicBool,
}

impl SqliteFileDatabase {
    /// Runs `read` on a borrowed read connection on this thread, inside
    /// `block_in_place`, when this is a multi-threaded runtime's thread and
    /// one is free; None otherwise (the caller queues for the readers).
    fn inline<T>(&self, read: impl FnOnce(&Connection, u64) -> T) -> Option<T> {
        let multi_threaded = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if !multi_threaded {
            return None;
        }
        let conn = self
            .inline
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop()?;
        let max = self.max_result_bytes;
        let result = tokio::task::block_in_place(|| read(&conn, max));
        self.inline
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(conn);
        Some(result)
    }

    fn read_queue_error<T>(&self, e: TrySendError<T>) -> DbError {
        match e {
            TrySendError::Full(_) => DbError::QueueFull {
                limit: "sqliteReadQueue".into(),
                capacity: self.capacity,
            },
            TrySendError::Disconnected(_) => DbError::Closed,
        }
    }

    /// Opens (creating if needed) the file, applies the connection settings and
    /// starts the executor thread.
    pub fn open(path: &Path, limits: &SqliteLimits) -> Result<SqliteFileDatabase, DbError> {
        let conn = open_connection(path)?;
        let capacity = limits.max_queued_jobs.max(1);
        let (jobs, rx) = mpsc::sync_channel::<Job>(capacity as usize);
        let max_result_bytes = limits.max_result_bytes;
        thread::Builder::new()
            .name("agentos-sqlite".into())
            .spawn(move || executor(conn, rx, max_result_bytes))
            .map_err(|e| DbError::Connect(format!("cannot start the executor thread: {e}")))?;
        let (reads, readers) = match start_readers(path, capacity as usize, max_result_bytes) {
            Ok((reads, readers)) => (Some(reads), readers),
            Err(e) => {
                tracing::warn!(error = %e, "no read connections: reads share the writer's queue");
                (None, 0)
            }
        };
        let inline = match reads {
            Some(_) => (0..READERS)
                .filter_map(|_| open_reader(path).ok())
                .collect(),
            None => Vec::new(),
        };
        Ok(SqliteFileDatabase {
            jobs,
            reads,
            readers,
            inline: std::sync::Mutex::new(inline),
            max_result_bytes,
            capacity,
            path: path.to_owned(),
            closed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn submit(&self, job: Job) -> Result<(), DbError> {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(DbError::Closed);
        }
        self.jobs.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => DbError::QueueFull {
                limit: "sqliteWorkerQueue".into(),
                capacity: self.capacity,
            },
            TrySendError::Disconnected(_) => DbError::Closed,
        })
    }
}

#[async_trait]
impl Database for SqliteFileDatabase {
    fn kind(&self) -> DatabaseKind {
        DatabaseKind::SqliteFile
    }

    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Rows, DbError> {
        let (reply, rx) = oneshot::channel();
        self.submit(Job::Query {
            sql: sql.to_owned(),
            params,
            reply,
        })?;
        rx.await.map_err(|_| DbError::Closed)?
    }

    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Rows>, DbError> {
        let (reply, rx) = oneshot::channel();
        self.submit(Job::Transaction { statements, reply })?;
        rx.await.map_err(|_| DbError::Closed)?
    }

    /// A read on a multi-threaded runtime runs on the caller's own thread,
    /// on a borrowed read connection, inside `block_in_place` (the runtime
    /// moves its other tasks to another thread meanwhile, so no worker is
    /// held by the database): a page-cache read then costs no thread
    /// hand-off at all. Otherwise, or with every borrowed connection in use,
    /// it queues for the reader threads.
    async fn read(&self, sql: &str, params: Vec<SqlValue>) -> Result<Rows, DbError> {
        let Some(reads) = &self.reads else {
            return self.query(sql, params).await;
        };
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(DbError::Closed);
        }
        if let Some(result) = self.inline(|conn, max| run_statement(conn, 0, sql, &params, max)) {
            return result;
        }
        let (reply, rx) = oneshot::channel();
        reads
            .try_send(ReadJob::Query {
                sql: sql.to_owned(),
                params,
                reply,
            })
            .map_err(|e| self.read_queue_error(e))?;
        rx.await.map_err(|_| DbError::Closed)?
    }

    async fn read_blob(
        &self,
        table: &'static str,
        column: &'static str,
        rowid: i64,
        offset: u64,
        len: u64,
    ) -> Result<Option<Vec<u8>>, DbError> {
        let Some(reads) = &self.reads else {
            let (sql, params) = blob_range_query(table, column, rowid, offset, len);
            return Ok(blob_range_of(self.query(&sql, params).await?));
        };
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(DbError::Closed);
        }
        let blob = BlobRange {
            table,
            column,
            rowid,
            offset,
            len,
        };
        if let Some(result) = self.inline(|conn, max| blob.read(conn, max)) {
            return result;
        }
        let (reply, rx) = oneshot::channel();
        reads
            .try_send(ReadJob::Blob { blob, reply })
            .map_err(|e| self.read_queue_error(e))?;
        rx.await.map_err(|_| DbError::Closed)?
    }

    async fn close(&self) {
        if self.closed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        // The readers first, so the writer's close can checkpoint the WAL
        // whole. A borrowed connection goes when its read is done.
        self.inline
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
        if let Some(reads) = self.reads.clone() {
            let readers = self.readers;
            let closed = tokio::task::spawn_blocking(move || {
                let mut waits = Vec::with_capacity(readers);
                for _ in 0..readers {
                    let (reply, done) = oneshot::channel();
                    if reads.send(ReadJob::Close { reply }).is_err() {
                        break;
                    }
                    waits.push(done);
                }
                waits
            })
            .await;
            for done in closed.unwrap_or_default() {
                let _ = done.await;
            }
        }
        let (reply, done) = oneshot::channel();
        let jobs = self.jobs.clone();
        // The queue may be full: wait for room off the async threads.
        let queued =
            tokio::task::spawn_blocking(move || jobs.send(Job::Close { reply }).is_ok()).await;
        if matches!(queued, Ok(true)) {
            let _ = done.await;
        }
    }
}

/// Opens a connection with the settings every backend's file must have.
pub fn open_connection(path: &Path) -> Result<Connection, DbError> {
    // Private whatever the umask: the file is created 0600 first, and
    // SQLite gives the WAL and SHM the database file's mode.
    crate::private::prepare_database_file(path)
        .map_err(|e| DbError::Connect(format!("{}: {e}", path.display())))?;
    let conn =
        Connection::open(path).map_err(|e| DbError::Connect(format!("{}: {e}", path.display())))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(sql_error(0))?;
    // WAL with synchronous=NORMAL: a commit survives a process crash (the WAL
    // is written before COMMIT returns); fsync happens at checkpoints.
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(sql_error(0))?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(sql_error(0))?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(sql_error(0))?;
    let on: i64 = conn
        .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
        .map_err(sql_error(0))?;
    if on != 1 {
        return Err(DbError::ForeignKeysDisabled);
    }
    // The WAL and SHM exist now; an older deployment may have left them wider.
    crate::private::restrict_database_files(path)
        .map_err(|e| DbError::Connect(format!("{}: {e}", path.display())))?;
    Ok(conn)
}

/// Opens the read connections (read-only, on the same file the writer set
/// up in WAL mode) and their threads, which share one bounded queue.
fn start_readers(
    path: &Path,
    capacity: usize,
    max_result_bytes: u64,
) -> Result<(SyncSender<ReadJob>, usize), DbError> {
    let mut conns = Vec::with_capacity(READERS);
    for _ in 0..READERS {
        conns.push(open_reader(path)?);
    }
    let (reads, rx) = mpsc::sync_channel::<ReadJob>(capacity.max(1));
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    let mut started = 0;
    for (n, conn) in conns.into_iter().enumerate() {
        let rx = rx.clone();
        thread::Builder::new()
            .name(format!("agentos-sqlite-read-{n}"))
            .spawn(move || reader(conn, &rx, max_result_bytes))
            .map_err(|e| DbError::Connect(format!("cannot start a reader thread: {e}")))?;
        started += 1;
    }
    Ok((reads, started))
}

fn open_reader(path: &Path) -> Result<Connection, DbError> {
    use rusqlite::OpenFlags;
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| DbError::Connect(format!("{}: {e}", path.display())))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(sql_error(0))?;
    conn.pragma_update(None, "query_only", "ON")
        .map_err(sql_error(0))?;
    // Pages come straight from the OS cache through a mapping instead of a
    // read call each: a file's part is sixteen pages. The writer keeps
    // plain I/O (a mapping's fault is a signal, not an error code, and the
    // writer is the one that extends and checkpoints the file).
    conn.pragma_update(None, "mmap_size", READER_MMAP_BYTES)
        .map_err(sql_error(0))?;
    Ok(conn)
}

/// One reader: takes the next job from the shared queue (the thread that
/// holds the queue stays awake briefly for the next one, the others wait
/// their turn), answers it on its own connection.
fn reader(
    conn: Connection,
    jobs: &std::sync::Mutex<mpsc::Receiver<ReadJob>>,
    max_result_bytes: u64,
) {
    loop {
        let job = {
            let queue = jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            match next_soon(&queue) {
                Some(job) => job,
                None => match queue.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                },
            }
        };
        match job {
            ReadJob::Query { sql, params, reply } => {
                let _ = reply.send(run_statement(&conn, 0, &sql, &params, max_result_bytes));
            }
            ReadJob::Blob { blob, reply } => {
                let _ = reply.send(blob.read(&conn, max_result_bytes));
            }
            ReadJob::Close { reply } => {
                drop(conn);
                let _ = reply.send(());
                return;
            }
        }
    }
}

/// Transactions committed together at most, so one group never holds the
/// first caller in it for long.
const GROUP_COMMIT_MAX: usize = 64;

type TransactionReply = oneshot::Sender<Result<Vec<Rows>, DbError>>;
type TransactionJob = (Vec<Statement>, TransactionReply);

fn executor(conn: Connection, jobs: mpsc::Receiver<Job>, max_result_bytes: u64) {
    let closed = execute(conn, &jobs, max_result_bytes);
    if let Some(reply) = closed {
        let _ = reply.send(());
    }
}

/// Runs jobs until the queue closes or a `Close` arrives; returns the
/// close's reply after the connection has been dropped.
fn execute(
    mut conn: Connection,
    jobs: &mpsc::Receiver<Job>,
    max_result_bytes: u64,
) -> Option<oneshot::Sender<()>> {
    let mut next: Option<Job> = None;
    loop {
        let job = match next.take().or_else(|| next_soon(jobs)) {
            Some(job) => job,
            None => match jobs.recv() {
                Ok(job) => job,
                Err(_) => return None,
            },
        };
        match job {
            Job::Close { reply } => {
                if let Err((_, e)) = conn.close() {
                    tracing::warn!(error = %e, "closing the database file failed");
                }
                return Some(reply);
            }
            Job::Query { sql, params, reply } => {
                let result = run_statement(&conn, 0, &sql, &params, max_result_bytes);
                let _ = reply.send(result);
            }
            Job::Transaction { statements, reply } => {
                // Group commit: transactions already waiting share one
                // commit, each inside its own savepoint.
                let mut group: Vec<TransactionJob> = vec![(statements, reply)];
                while group.len() < GROUP_COMMIT_MAX {
                    match jobs.try_recv() {
                        Ok(Job::Transaction { statements, reply }) => {
                            group.push((statements, reply))
                        }
                        Ok(other) => {
                            next = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                if group.len() == 1 {
                    if let Some((statements, reply)) = group.pop() {
                        let _ =
                            reply.send(run_transaction(&mut conn, &statements, max_result_bytes));
                    }
                } else {
                    run_group(&mut conn, group, max_result_bytes);
                }
            }
        }
    }
}

/// How long the executor keeps looking for the next job before it sleeps.
/// A caller that awaits each transaction sends the next one a few
/// microseconds after its answer; catching it awake saves a thread wake-up
/// (tens of microseconds on a virtual machine) per transaction.
const STAY_AWAKE: std::time::Duration = std::time::Duration::from_micros(200);

/// The next job if one arrives within `STAY_AWAKE`, yielding the core
/// meanwhile so the caller can run.
fn next_soon<T>(jobs: &mpsc::Receiver<T>) -> Option<T> {
    let start = std::time::Instant::now();
    loop {
        match jobs.try_recv() {
            Ok(job) => return Some(job),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) => {}
        }
        if start.elapsed() >= STAY_AWAKE {
            return None;
        }
        std::thread::yield_now();
    }
}

/// Runs several transactions under one `BEGIN IMMEDIATE … COMMIT`, each in a
/// savepoint: a failing one rolls back to its savepoint alone, and nobody is
/// answered before the shared commit has succeeded.
fn run_group(conn: &mut Connection, group: Vec<TransactionJob>, max_result_bytes: u64) {
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let error = sql_error(0)(e);
        for (_, reply) in group {
            let _ = reply.send(Err(error.clone()));
        }
        return;
    }
    let mut done: Vec<(TransactionReply, Result<Vec<Rows>, DbError>)> =
        Vec::with_capacity(group.len());
    let mut rest = group.into_iter();
    for (statements, reply) in rest.by_ref() {
        if let Err(e) = conn.execute_batch("SAVEPOINT agentos_group_member") {
            done.push((reply, Err(sql_error(0)(e))));
            continue;
        }
        let outcome = run_statements(conn, &statements, max_result_bytes);
        if outcome.is_err() {
            let _ = conn
                .execute_batch("ROLLBACK TO agentos_group_member; RELEASE agentos_group_member");
        } else if let Err(e) = conn.execute_batch("RELEASE agentos_group_member") {
            done.push((reply, Err(sql_error(statements.len() as u32)(e))));
            continue;
        }
        let lost = conn.is_autocommit();
        done.push((reply, outcome));
        if lost {
            // Some errors (I/O, full disk) end the whole transaction: nothing
            // of the group was committed. Fail it, and run the rest alone.
            let error = DbError::Sql {
                code: -1,
                statement_index: 0,
                message: "the group transaction was rolled back by SQLite".into(),
            };
            for (reply, outcome) in done {
                let _ = reply.send(outcome.and(Err(error.clone())));
            }
            for (statements, reply) in rest {
                let _ = reply.send(run_transaction(conn, &statements, max_result_bytes));
            }
            return;
        }
    }
    match conn.execute_batch("COMMIT") {
        Ok(()) => {
            for (reply, outcome) in done {
                let _ = reply.send(outcome);
            }
        }
        Err(e) => {
            rollback(conn);
            let error = sql_error(0)(e);
            for (reply, outcome) in done {
                let _ = reply.send(outcome.and(Err(error.clone())));
            }
        }
    }
}

/// Runs `statements` in one `BEGIN IMMEDIATE` transaction on `conn`. Shared
/// with the reference actor socket server, which serves the same file shape.
pub fn run_transaction(
    conn: &mut Connection,
    statements: &[Statement],
    max_result_bytes: u64,
) -> Result<Vec<Rows>, DbError> {
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(sql_error(0))?;
    let results = match run_statements(conn, statements, max_result_bytes) {
        Ok(results) => results,
        Err(error) => {
            rollback(conn);
            return Err(error);
        }
    };
    if let Err(e) = conn.execute_batch("COMMIT") {
        rollback(conn);
        return Err(sql_error(statements.len() as u32)(e));
    }
    Ok(results)
}

/// Runs the statements of one transaction, checking expected change counts;
/// stops at the first failure (the caller rolls back).
fn run_statements(
    conn: &Connection,
    statements: &[Statement],
    max_result_bytes: u64,
) -> Result<Vec<Rows>, DbError> {
    let mut results = Vec::with_capacity(statements.len());
    for (index, statement) in statements.iter().enumerate() {
        let index = index as u32;
        let rows = run_statement(
            conn,
            index,
            &statement.sql,
            &statement.params,
            max_result_bytes,
        )?;
        match statement.expected_changes {
            Some(expected) if expected != rows.changes => {
                return Err(DbError::ExpectedChanges {
                    statement_index: index,
                    expected,
                    actual: rows.changes,
                })
            }
            _ => results.push(rows),
        }
    }
    Ok(results)
}

fn rollback(conn: &Connection) {
    if !conn.is_autocommit() {
        if let Err(e) = conn.execute_batch("ROLLBACK") {
            tracing::error!(error = %e, "ERR_AGENTOS_SQLITE_ROLLBACK: rollback failed");
        }
    }
}

/// Runs one statement, materializing its rows within the result limit.
pub fn run_statement<P: BindValue>(
    conn: &Connection,
    index: u32,
    sql: &str,
    params: &[P],
    max_result_bytes: u64,
) -> Result<Rows, DbError> {
    let mut stmt = conn.prepare_cached(sql).map_err(sql_error(index))?;
    for (i, param) in params.iter().enumerate() {
        stmt.raw_bind_parameter(i + 1, Param(param.value_ref()))
            .map_err(sql_error(index))?;
    }
    let before = conn.total_changes();
    let columns: Vec<String> = stmt
        .column_names()
        .iter()
        .map(|c| (*c).to_owned())
        .collect();
    let width = columns.len();
    let mut out = Vec::new();
    let mut bytes: u64 = 0;
    {
        let mut rows = stmt.raw_query();
        while let Some(row) = rows.next().map_err(sql_error(index))? {
            let mut values = Vec::with_capacity(width);
            for c in 0..width {
                let value = from_value_ref(row.get_ref(c).map_err(sql_error(index))?);
                bytes += value.approx_bytes() as u64;
                values.push(value);
            }
            if bytes > max_result_bytes {
                return Err(DbError::ResultLimit {
                    limit: max_result_bytes,
                });
            }
            out.push(values);
        }
    }
    let changes = conn.total_changes().saturating_sub(before);
    Ok(Rows {
        columns,
        rows: out,
        changes,
        last_insert_rowid: Some(conn.last_insert_rowid()),
    })
}

/// A parameter value SQLite can bind by reference. Implemented for the
/// handle's values and for the actor socket's wire values, so the reference
/// server binds what it decoded without copying texts and blobs first.
pub trait BindValue {
    fn value_ref(&self) -> ValueRef<'_>;
}

impl BindValue for SqlValue {
    fn value_ref(&self) -> ValueRef<'_> {
        match self {
            SqlValue::Null => ValueRef::Null,
            SqlValue::Integer(i) => ValueRef::Integer(*i),
            SqlValue::Real(f) => ValueRef::Real(*f),
            SqlValue::Text(s) => ValueRef::Text(s.as_bytes()),
            SqlValue::Blob(b) => ValueRef::Blob(b),
        }
    }
}

impl BindValue for agentos_protocol::ars::SqlValue {
    fn value_ref(&self) -> ValueRef<'_> {
        use agentos_protocol::ars::SqlValue as Wire;
        match self {
            Wire::SqlNull => ValueRef::Null,
            Wire::SqlInteger(i) => ValueRef::Integer(*i),
            Wire::SqlReal(f) => ValueRef::Real(*f),
            Wire::SqlText(s) => ValueRef::Text(s.as_bytes()),
            Wire::SqlBlob(b) => ValueRef::Blob(b),
        }
    }
}

/// Binds a parameter by reference: large texts and blobs are never copied.
struct Param<'a>(ValueRef<'a>);

impl ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(self.0))
    }
}

pub fn from_value_ref(v: ValueRef<'_>) -> SqlValue {
    match v {
        ValueRef::Null => SqlValue::Null,
        ValueRef::Integer(i) => SqlValue::Integer(i),
        ValueRef::Real(f) => SqlValue::Real(f),
        // Valid UTF-8 (the normal case) takes the fast check; anything else
        // is repaired rather than rejected.
        ValueRef::Text(t) => SqlValue::Text(match std::str::from_utf8(t) {
            Ok(text) => text.to_owned(),
            Err(_) => String::from_utf8_lossy(t).into_owned(),
        }),
        ValueRef::Blob(b) => SqlValue::Blob(b.to_vec()),
    }
}

/// Maps a rusqlite error to `DbError::Sql` with SQLite's extended code.
pub fn sql_error(index: u32) -> impl Fn(rusqlite::Error) -> DbError {
    move |e| {
        let code = match &e {
            rusqlite::Error::SqliteFailure(f, _) => f.extended_code,
            _ => -1,
        };
        DbError::Sql {
            code,
            statement_index: index,
            message: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(
        statements: Vec<Statement>,
    ) -> (
        TransactionJob,
        oneshot::Receiver<Result<Vec<Rows>, DbError>>,
    ) {
        let (tx, rx) = oneshot::channel();
        ((statements, tx), rx)
    }

    #[test]
    fn a_group_commits_its_members_and_isolates_a_failure() {
        let dir = tempfile::tempdir().expect("dir");
        let mut conn = open_connection(&dir.path().join("g.sqlite")).expect("open");
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY) STRICT")
            .expect("table");
        let insert = |id: i64| Statement::new("INSERT INTO t (id) VALUES (?1)", vec![id.into()]);
        let (a, a_rx) = member(vec![insert(1)]);
        let (b, b_rx) = member(vec![
            insert(2),
            Statement::new("DELETE FROM t WHERE id = 99", vec![]).expect_changes(1),
        ]);
        let (c, c_rx) = member(vec![insert(3), insert(1)]);
        let (d, d_rx) = member(vec![insert(4)]);
        run_group(&mut conn, vec![a, b, c, d], u64::MAX);
        assert!(a_rx.blocking_recv().expect("a").is_ok());
        assert_eq!(
            b_rx.blocking_recv().expect("b").unwrap_err().code(),
            "expected_changes_mismatch"
        );
        assert!(c_rx
            .blocking_recv()
            .expect("c")
            .unwrap_err()
            .is_constraint());
        assert!(d_rx.blocking_recv().expect("d").is_ok());
        let ids: Vec<i64> = conn
            .prepare("SELECT id FROM t ORDER BY id")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(ids, [1, 4], "only the members that succeeded committed");
        assert!(conn.is_autocommit(), "the group transaction is closed");
    }
}
