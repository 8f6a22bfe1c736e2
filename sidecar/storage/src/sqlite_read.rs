//! The read side of the `sqlite_file` backend: read-only, memory-mapped
//! connections beside the one writer (WAL lets them read while it commits).
//! A task on a multi-threaded runtime borrows one from a small pool and reads
//! on its own thread inside `block_in_place`; everything else queues (bounded)
//! for two reader threads.
//!
//! A read connection keeps its read snapshot open between reads while the
//! writer has answered no transaction since it began, and for at most
//! [`SNAPSHOT_MAX`]: beginning a read transaction takes SQLite's shared lock
//! on the file (a process-wide mutex and an `fcntl`), which two readers
//! otherwise fight over on every read. So a read still sees every transaction
//! answered before it, and a snapshot never pins the WAL for long: an idle
//! pooled connection's snapshot is ended by the sweeper thread, which runs
//! only while one may be open (within about twice [`SNAPSHOT_MAX`]), and a
//! reader thread ends its own once it has found no job for a moment.

use std::path::Path;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use agentos_schema::{blob_range_of, blob_range_query, DbError, Rows, SqlValue};
use rusqlite::Connection;
use tokio::sync::oneshot;

use super::sqlite_conn::{control, run_statement, sql_error, stable_plans, Awake, STATEMENT_CACHE};

/// Read connections of each kind (pooled, and on reader threads): two, the
/// cores these machines have.
const READERS: usize = 2;
/// How much of the file a read connection maps.
const READER_MMAP_BYTES: i64 = 1 << 30;
/// The longest a read snapshot is reused for.
pub const SNAPSHOT_MAX: Duration = Duration::from_millis(5);

/// A job for the reader threads.
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
    /// Ends the reader thread that takes it.
    Close { reply: oneshot::Sender<()> },
}

/// Which bytes of which BLOB a `read_blob` wants.
pub struct BlobRange {
    pub table: &'static str,
    pub column: &'static str,
    pub rowid: i64,
    pub offset: u64,
    pub len: u64,
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

/// A read connection and the snapshot it may hold open between reads.
struct Reader {
    conn: Connection,
    snapshot: Option<Snapshot>,
}

/// An open read transaction: the writer's answered count when it began, and
/// when.
struct Snapshot {
    answered: u64,
    began: Instant,
}

impl Reader {
    /// Runs `read` inside a snapshot that holds every transaction answered
    /// so far: the open one if nothing was answered since it began and it is
    /// young, a new one otherwise. A failed read ends the snapshot.
    fn run<T>(
        &mut self,
        answered: &AtomicU64,
        read: impl FnOnce(&Connection) -> Result<T, DbError>,
    ) -> Result<T, DbError> {
        // Loaded before the snapshot begins, so the snapshot holds at least
        // every transaction this count covers.
        let now = answered.load(Ordering::SeqCst);
        let current = self
            .snapshot
            .as_ref()
            .is_some_and(|s| s.answered == now && s.began.elapsed() < SNAPSHOT_MAX);
        if !current {
            self.end();
            if !self.conn.is_autocommit() {
                // Never read in a transaction this does not know the age of.
                return Err(DbError::Sql {
                    code: -1,
                    statement_index: 0,
                    message: "a read connection could not end its snapshot".into(),
                });
            }
            // Deferred: the read transaction starts at the first statement.
            if control(&self.conn, "BEGIN").is_ok() {
                self.snapshot = Some(Snapshot {
                    answered: now,
                    began: Instant::now(),
                });
            }
        }
        let result = read(&self.conn);
        if result.is_err() {
            self.end();
        }
        result
    }

    fn end(&mut self) {
        self.snapshot = None;
        if !self.conn.is_autocommit() {
            if let Err(e) = control(&self.conn, "COMMIT") {
                tracing::warn!(error = %e, "ending a read snapshot failed");
                let _ = control(&self.conn, "ROLLBACK");
            }
        }
    }

    fn is_stale(&self) -> bool {
        self.snapshot
            .as_ref()
            .is_some_and(|s| s.began.elapsed() >= SNAPSHOT_MAX)
    }
}

/// The pooled read connections, and whether the sweeper is watching their
/// snapshots. Each connection has a slot of its own (a lock on cache lines
/// of its own), and a thread tries its own slot first, so two readers do
/// not take turns on one lock.
struct Pool {
    slots: Vec<Slot>,
    /// The writer's count of answered transactions (it counts before each
    /// answer).
    answered: Arc<AtomicU64>,
    /// Set while some pooled snapshot may be open: the sweeper then sweeps
    /// every [`SNAPSHOT_MAX`].
    watched: AtomicBool,
    /// Set when the read side is closed or dropped: the sweeper ends.
    closed: AtomicBool,
}

/// One pooled connection (None once the read side is closed), aligned so
/// that no two slots share a cache line.
#[repr(align(128))]
struct Slot(Mutex<Option<Reader>>);

thread_local! {
    /// The pool slot this thread tries first.
    static SLOT_HINT: usize = NEXT_HINT.fetch_add(1, Ordering::Relaxed);
}
static NEXT_HINT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Pool {
    /// A free slot holding a connection, this thread's own first.
    fn borrow(&self) -> Option<MutexGuard<'_, Option<Reader>>> {
        let n = self.slots.len();
        let start = SLOT_HINT.with(|hint| *hint);
        (0..n).find_map(|i| {
            let slot = self.slots[(start + i) % n].0.try_lock().ok()?;
            slot.is_some().then_some(slot)
        })
    }

    /// Ends the pooled snapshots that are past their age, and keeps watching
    /// while any other is open. A borrowed connection is not seen here: its
    /// borrower asks for the watch when it gives it back (see
    /// [`ReadSide::inline`]), after this has stopped watching or before this
    /// looks.
    fn sweep(&self) {
        self.watched.store(false, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let mut open = false;
        for slot in &self.slots {
            let Ok(mut slot) = slot.0.try_lock() else {
                continue;
            };
            let Some(reader) = slot.as_mut() else {
                continue;
            };
            if reader.is_stale() {
                reader.end();
            }
            open |= reader.snapshot.is_some();
        }
        if open {
            self.watched.store(true, Ordering::SeqCst);
        }
    }
}

/// The read connections of one database file.
pub struct ReadSide {
    queue: SyncSender<ReadJob>,
    threads: usize,
    pool: Arc<Pool>,
    sweeper: thread::Thread,
    max_result_bytes: u64,
    capacity: u32,
}

impl ReadSide {
    /// Opens the read connections (read-only, on the file the writer has set
    /// up in WAL mode) and starts the reader threads. `answered` is the
    /// writer's count of answered transactions.
    pub fn start(
        path: &Path,
        capacity: u32,
        max_result_bytes: u64,
        answered: Arc<AtomicU64>,
    ) -> Result<ReadSide, DbError> {
        let mut threaded = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            threaded.push(open_reader(path)?);
        }
        let pooled = (0..READERS)
            .filter_map(|_| open_reader(path).ok())
            .map(|conn| {
                Slot(Mutex::new(Some(Reader {
                    conn,
                    snapshot: None,
                })))
            })
            .collect();
        let pool = Arc::new(Pool {
            slots: pooled,
            answered,
            watched: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        let (queue, rx) = mpsc::sync_channel::<ReadJob>(capacity.max(1) as usize);
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = 0;
        for (n, conn) in threaded.into_iter().enumerate() {
            let (rx, pool) = (rx.clone(), pool.clone());
            let reader = Reader {
                conn,
                snapshot: None,
            };
            thread::Builder::new()
                .name(format!("agentos-sqlite-read-{n}"))
                .spawn(move || serve(reader, &rx, &pool.answered, max_result_bytes))
                .map_err(|e| DbError::Connect(format!("cannot start a reader thread: {e}")))?;
            threads += 1;
        }
        // Last: a failure above leaves no thread behind (the reader threads
        // end with their queue).
        let watched = pool.clone();
        let sweeper = thread::Builder::new()
            .name("agentos-sqlite-sweep".into())
            .spawn(move || sweep_while_watched(&watched))
            .map_err(|e| DbError::Connect(format!("cannot start the sweeper thread: {e}")))?
            .thread()
            .clone();
        Ok(ReadSide {
            queue,
            threads,
            pool,
            sweeper,
            max_result_bytes,
            capacity,
        })
    }

    /// A query on a read connection: inline when this is a multi-threaded
    /// runtime's thread and a pooled connection is free, else queued.
    pub async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Rows, DbError> {
        if let Some(result) = self.inline(|conn, max| run_statement(conn, 0, sql, &params, max)) {
            return result;
        }
        let (reply, rx) = oneshot::channel();
        self.send(ReadJob::Query {
            sql: sql.to_owned(),
            params,
            reply,
        })?;
        rx.await.map_err(|_| DbError::Closed)?
    }

    /// A byte range of one BLOB, the same two ways.
    pub async fn blob(&self, blob: BlobRange) -> Result<Option<Vec<u8>>, DbError> {
        if let Some(result) = self.inline(|conn, max| blob.read(conn, max)) {
            return result;
        }
        let (reply, rx) = oneshot::channel();
        self.send(ReadJob::Blob { blob, reply })?;
        rx.await.map_err(|_| DbError::Closed)?
    }

    /// Ends every read connection, off the async threads: the pooled ones
    /// once no read or sweep holds them, the threads' once the reads queued
    /// before are answered.
    pub async fn close(&self) {
        self.stop_sweeper();
        let (queue, threads, pool) = (self.queue.clone(), self.threads, self.pool.clone());
        let closed = tokio::task::spawn_blocking(move || {
            for slot in &pool.slots {
                slot.0
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .take();
            }
            let mut waits = Vec::with_capacity(threads);
            for _ in 0..threads {
                let (reply, done) = oneshot::channel();
                if queue.send(ReadJob::Close { reply }).is_err() {
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

    /// Runs `read` on a borrowed pooled connection on this thread, inside
    /// `block_in_place` (the runtime moves its other tasks to another thread
    /// meanwhile, so no worker is held by the database), when this is a
    /// multi-threaded runtime's thread and one is free; None otherwise.
    fn inline<T>(
        &self,
        read: impl FnOnce(&Connection, u64) -> Result<T, DbError>,
    ) -> Option<Result<T, DbError>> {
        let multi_threaded = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if !multi_threaded {
            return None;
        }
        let mut slot = self.pool.borrow()?;
        let reader = slot.as_mut()?;
        let max = self.max_result_bytes;
        let result =
            tokio::task::block_in_place(|| reader.run(&self.pool.answered, |c| read(c, max)));
        let open = reader.snapshot.is_some();
        drop(slot);
        // Given back first, so a sweep that stops watching before this
        // either sees the snapshot or is asked again here (the fence orders
        // the slot's release before the load, as the sweep's orders its
        // store before its look).
        fence(Ordering::SeqCst);
        if open
            && !self.pool.watched.load(Ordering::SeqCst)
            && !self.pool.watched.swap(true, Ordering::SeqCst)
        {
            self.sweeper.unpark();
        }
        Some(result)
    }

    fn stop_sweeper(&self) {
        self.pool.closed.store(true, Ordering::SeqCst);
        self.sweeper.unpark();
    }

    fn send(&self, job: ReadJob) -> Result<(), DbError> {
        self.queue.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => DbError::QueueFull {
                limit: "sqliteReadQueue".into(),
                capacity: self.capacity,
            },
            TrySendError::Disconnected(_) => DbError::Closed,
        })
    }
}

fn open_reader(path: &Path) -> Result<Connection, DbError> {
    use rusqlite::OpenFlags;
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| DbError::Connect(format!("{}: {e}", path.display())))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    stable_plans(&conn)?;
    conn.busy_timeout(Duration::from_secs(5))
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

impl Drop for ReadSide {
    fn drop(&mut self) {
        self.stop_sweeper();
    }
}

/// The sweeper thread: parked while no pooled snapshot can be open, else
/// sweeping every [`SNAPSHOT_MAX`]; ends with the read side.
fn sweep_while_watched(pool: &Pool) {
    while !pool.closed.load(Ordering::SeqCst) {
        if pool.watched.load(Ordering::SeqCst) {
            thread::sleep(SNAPSHOT_MAX);
            pool.sweep();
        } else {
            // An unpark that came first makes this return at once.
            thread::park();
        }
    }
}

/// One reader thread: takes the next job from the shared queue and answers
/// it on its own connection. The thread that holds the queue stays awake
/// briefly for the next job (while that pays: `Awake`), then ends its snapshot and waits; the other
/// waits its turn for the queue, with its snapshot ended too.
fn serve(
    mut reader: Reader,
    jobs: &Mutex<mpsc::Receiver<ReadJob>>,
    answered: &AtomicU64,
    max_result_bytes: u64,
) {
    let mut awake = Awake::default();
    loop {
        let queue = match jobs.try_lock() {
            Ok(queue) => queue,
            Err(_) => {
                reader.end();
                jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
            }
        };
        let job = match awake.next_soon(&queue) {
            Some(job) => job,
            None => {
                reader.end();
                match queue.recv() {
                    Ok(job) => {
                        awake.woke();
                        job
                    }
                    Err(_) => return,
                }
            }
        };
        drop(queue);
        match job {
            ReadJob::Query { sql, params, reply } => {
                let result = reader.run(answered, |conn| {
                    run_statement(conn, 0, &sql, &params, max_result_bytes)
                });
                let _ = reply.send(result);
            }
            ReadJob::Blob { blob, reply } => {
                let result = reader.run(answered, |conn| blob.read(conn, max_result_bytes));
                let _ = reply.send(result);
            }
            ReadJob::Close { reply } => {
                drop(reader);
                let _ = reply.send(());
                return;
            }
        }
    }
}
