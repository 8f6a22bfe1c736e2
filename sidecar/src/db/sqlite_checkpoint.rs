//! The `sqlite_file` backend's checkpointer: a thread with a connection of
//! its own that copies committed WAL frames into the database file (a
//! `PASSIVE` checkpoint, which never waits for the writer or a reader) soon
//! after the writer commits, so the writer never does that copy and its
//! `fsync`s in the middle of a caller's transaction.
//!
//! The writer only marks that it committed and wakes the thread if it sleeps;
//! the thread lets [`GATHER`] pass so one copy covers the commits of a burst.
//! The writer keeps SQLite's own automatic checkpoint at
//! [`WRITER_FALLBACK_PAGES`], far above what this thread lets the WAL reach,
//! so a WAL that outgrows it anyway (a writer that never pauses long enough
//! for the log to restart) is still bounded.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use agentos_schema::DbError;
use rusqlite::Connection;

use super::sqlite_file::open_connection;

/// How long the checkpointer lets commits gather before it copies them.
const GATHER: Duration = Duration::from_millis(2);

/// WAL pages past which the writer checkpoints itself (64 MiB of 4 KiB
/// pages; SQLite's default is 1,000).
pub const WRITER_FALLBACK_PAGES: i64 = 16_384;

/// What the writer and the checkpointer thread share.
struct State {
    /// Set by the writer after a commit; taken by the thread before it
    /// copies, so a commit during the copy brings another.
    committed: AtomicBool,
    closed: AtomicBool,
}

/// The writer's handle on the checkpointer thread.
pub struct Checkpointer {
    state: Arc<State>,
    thread: thread::Thread,
    handle: Mutex<Option<JoinHandle<()>>>,
}

impl Checkpointer {
    /// Opens the thread's connection on `path` (which the writer has already
    /// set up in WAL mode) and starts it.
    pub fn start(path: &Path) -> Result<Checkpointer, DbError> {
        let conn = open_connection(path)?;
        let state = Arc::new(State {
            committed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        let shared = state.clone();
        let handle = thread::Builder::new()
            .name("agentos-sqlite-checkpoint".into())
            .spawn(move || run(conn, &shared))
            .map_err(|e| DbError::Connect(format!("cannot start the checkpointer thread: {e}")))?;
        Ok(Checkpointer {
            state,
            thread: handle.thread().clone(),
            handle: Mutex::new(Some(handle)),
        })
    }

    /// The writer committed: wakes the thread unless a wake is pending.
    pub fn committed(&self) {
        if !self.state.committed.swap(true, Ordering::SeqCst) {
            self.thread.unpark();
        }
    }

    /// Stops the thread and waits until its connection is closed (blocking:
    /// call it off the async threads).
    pub fn close(&self) {
        self.state.closed.store(true, Ordering::SeqCst);
        self.thread.unpark();
        let handle = self
            .handle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.state.closed.store(true, Ordering::SeqCst);
        self.thread.unpark();
    }
}

fn run(conn: Connection, state: &State) {
    while !state.closed.load(Ordering::SeqCst) {
        if !state.committed.load(Ordering::SeqCst) {
            // An unpark that came first makes this return at once.
            thread::park();
            continue;
        }
        thread::sleep(GATHER);
        state.committed.store(false, Ordering::SeqCst);
        let copied = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            row.get::<_, i64>(0)
        });
        if let Err(e) = copied {
            tracing::warn!(error = %e, "a background WAL checkpoint failed");
        }
    }
    if let Err((_, e)) = conn.close() {
        tracing::warn!(error = %e, "closing the checkpointer's connection failed");
    }
}
