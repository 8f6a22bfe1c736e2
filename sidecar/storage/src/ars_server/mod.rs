//! A reference Actor Runtime Socket v1 server over a real SQLite file.
//!
//! It exists so every store test runs against the actor_uds client as well as
//! the local file, and so hosts can try the sidecar without an actor runtime
//! (`agentos-sidecar ars-serve --db FILE --socket PATH`). It follows the
//! reference server's rules: per-connection leases with a deadline, one
//! writer at a time (SQLite has one), bounded queues answered with QueueFull,
//! and GoAway for anything malformed, after which only that connection closes.
//!
//! It also holds up under abuse: every lease key a connection used is
//! refused again for that connection's life, at a bounded cost (a 16-byte
//! digest per key whatever its length, and at most
//! `max_leases_per_connection` leases per connection); an expired lease is
//! remembered as expired until its holder ends it, a bounded number; a
//! client's lease timeout is capped by the server's maximum;
//! connections are capped; each connection's outbox is bounded in bytes,
//! so a client that pipelines requests and stops reading is closed rather
//! than buffered for, and all outboxes together are bounded too (the
//! client with the most unread goes first); and a request frame over
//! 64 KiB takes from one inbound budget before the rest of it is read.
//!
//! All SQLite work happens on one dedicated thread that owns the connection
//! and the transaction coordinator (`worker.rs`); connection tasks
//! (`connection.rs`) only parse, validate the lease rules that need no
//! database state, and write responses. Both answer through the bounded
//! outboxes of `outbox.rs` and share each connection's used lease keys
//! (`lease_keys.rs`). This file holds the options, the handle, binding and
//! the accept loop.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use agentos_protocol::ars::{self};
use agentos_schema::DbError;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::sqlite_conn::open_connection;

mod connection;
mod lease_keys;
mod outbox;
mod worker;

use connection::serve_connection;
use worker::{Job, Worker};

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
    /// The same for every client together; over it, the client with the
    /// most unread is closed.
    pub max_outbox_bytes_total: usize,
    /// Request frames over 64 KiB of every client together, from their
    /// header until their request is answered; a client waits for room
    /// before more of its frame is read.
    pub max_inbound_bytes: usize,
    /// Leases one connection may begin; every key it used is remembered
    /// (so a reuse is refused), and a connection past this is told to open
    /// a new one. The client's `limits.sqlite.maxLeasesPerConnection` must
    /// not exceed it.
    pub max_leases_per_connection: u32,
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
            max_outbox_bytes_total: 256 * 1024 * 1024,
            max_inbound_bytes: 256 * 1024 * 1024,
            max_leases_per_connection: 65_536,
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
        agentos_base::private::create_private_dir(dir)
            .map_err(|e| bind_error(format!("cannot create its directory: {e}")))?;
    }
    // Only a socket nobody answers on may be replaced.
    agentos_base::private::remove_stale_socket(socket_path)
        .map_err(|e| bind_error(e.to_string()))?;
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
        outboxes: outbox::Outboxes::new(options.max_outbox_bytes_total),
        inbound: agentos_base::budget::ByteBudget::new(options.max_inbound_bytes.max(1)),
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
    let _lock =
        agentos_base::private::StoreLock::acquire(db).map_err(|e| ArsServerError::Locked {
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
    /// Every connection's unread responses (`max_outbox_bytes_total`).
    outboxes: Arc<outbox::Outboxes>,
    /// `max_inbound_bytes`.
    inbound: Arc<agentos_base::budget::ByteBudget>,
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
