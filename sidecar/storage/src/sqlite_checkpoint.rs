//! The `sqlite_file` backend's checkpointer: a thread with a connection of
//! its own that copies committed WAL frames into the database file (a
//! `PASSIVE` checkpoint, which never waits for the writer or a reader) once
//! [`CHECKPOINT_PAGES`] wait to be copied, so the writer does not do that
//! copy and its `fsync`s between callers' transactions.
//!
//! The writer's connection carries a WAL hook (which replaces SQLite's own
//! automatic checkpoint) that notes the log's size after each commit; after
//! each job the writer wakes the thread if that many pages are not copied
//! yet and no wake is pending.
//!
//! The log restarts (is written again from its start, over pages the file
//! already has) only when the writer begins at a moment it is wholly copied
//! and no reader holds it. A writer that commits while the thread copies
//! would never see that moment, and its log would only grow, every page
//! a new block of the file. So the thread copies again at once what was
//! committed during its pass, while that is more than [`TAIL_PAGES`]; then
//! the writer copies the rest itself after its next job (a few pages and
//! the file's sync), and the transaction after that restarts the log. Past
//! [`WRITER_FALLBACK_PAGES`] the hook checkpoints on the writer itself, as
//! SQLite's own automatic checkpoint would, so the log is restarted as soon
//! as the read snapshots (each short-lived) let it.

use std::cell::Cell;
use std::os::raw::c_int;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use agentos_schema::DbError;
use rusqlite::hooks::Wal;
use rusqlite::Connection;

use super::sqlite_conn::open_connection;

/// WAL pages not yet copied at which the thread checkpoints (SQLite's own
/// default mark).
const CHECKPOINT_PAGES: i64 = 1_000;

/// Pages committed during the thread's pass that the writer copies itself,
/// at most (more are copied by another pass of the thread).
const TAIL_PAGES: i64 = 256;

/// Passes the thread makes back to back, at most, to bring what the writer
/// committed meanwhile under [`TAIL_PAGES`].
const CATCH_UP_PASSES: u32 = 4;

/// WAL pages past which the writer checkpoints itself (64 MiB of 4 KiB
/// pages): a writer that never pauses may never begin at a moment the log is
/// wholly copied; its own checkpoint copies what the thread has not.
const WRITER_FALLBACK_PAGES: i64 = 16_384;

thread_local! {
    /// The WAL's size after the last commit of the writer on this thread.
    static WAL_PAGES: Cell<i64> = const { Cell::new(0) };
    /// The size the writer last acted on: a smaller one means the log has
    /// restarted since.
    static SEEN_PAGES: Cell<i64> = const { Cell::new(0) };
}

/// How far into the current log the thread has copied, with the log's
/// generation (bumped by the writer at each restart) in the high half, so a
/// pass that began before a restart cannot report into the new log.
fn pack(generation: u64, copied: i64) -> u64 {
    (generation << 32) | u64::try_from(copied.clamp(0, i64::from(u32::MAX))).unwrap_or(0)
}

fn unpack(packed: u64) -> (u64, i64) {
    (packed >> 32, (packed & u64::from(u32::MAX)) as i64)
}

/// Installs the WAL hook on the writer's connection (its thread is the one
/// that then calls [`Checkpointer::after_job`]).
pub fn watch_wal(conn: &Connection) {
    conn.wal_hook(Some(on_commit));
}

fn on_commit(wal: &Wal, pages: c_int) -> rusqlite::Result<()> {
    let pages = i64::from(pages);
    WAL_PAGES.with(|p| p.set(pages));
    if pages >= WRITER_FALLBACK_PAGES {
        // Busy while the thread copies: it is already doing the work.
        if let Err(e) = wal.checkpoint() {
            tracing::debug!(error = %e, "the writer's fallback checkpoint did not run");
        }
    }
    // The commit has happened whatever this returns.
    Ok(())
}

/// What the writer and the checkpointer thread share.
struct State {
    /// Set by the writer when the WAL reached the mark; taken by the thread
    /// before it copies, so a commit during the copy brings another.
    committed: AtomicBool,
    /// [`pack`]ed: the log's generation and how far the thread copied it.
    copied: AtomicU64,
    /// The log's size after the writer's last job.
    pages: AtomicI64,
    /// Set by the thread when what is left to copy is the writer's to copy.
    tail: AtomicBool,
    closed: AtomicBool,
}

impl State {
    /// Notes a checkpoint's result: `copied` frames of the log as it was
    /// `before` it (unless the writer saw the log restart meanwhile, or the
    /// checkpoint did not run: -1).
    fn copied(&self, before: u64, copied: i64) {
        if copied < 0 {
            return;
        }
        let (generation, _) = unpack(before);
        let _ = self.copied.compare_exchange(
            before,
            pack(generation, copied),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
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
            copied: AtomicU64::new(0),
            pages: AtomicI64::new(0),
            tail: AtomicBool::new(false),
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

    /// Called by the writer after each job, on its connection `conn`: copies
    /// the last pages of the log when the thread left them to it; wakes the
    /// thread if the WAL has reached [`CHECKPOINT_PAGES`] and no wake is
    /// pending.
    pub fn after_job(&self, conn: &Connection) {
        if self.state.tail.swap(false, Ordering::SeqCst) {
            let before = self.state.copied.load(Ordering::SeqCst);
            match checkpoint(conn) {
                Ok((_, copied)) => self.state.copied(before, copied),
                Err(e) => {
                    tracing::debug!(error = %e, "the writer's checkpoint of the log's tail failed")
                }
            }
        }
        let pages = WAL_PAGES.with(Cell::get);
        self.state.pages.store(pages, Ordering::SeqCst);
        // A restart whose first commit is larger than the old log was goes
        // unseen here: the thread is then woken that much later, once.
        if pages < SEEN_PAGES.with(|seen| seen.replace(pages)) {
            // The log restarted: nothing of the new one is copied yet.
            let (generation, _) = unpack(self.state.copied.load(Ordering::SeqCst));
            self.state.copied.store(
                pack(generation.wrapping_add(1) & u64::from(u32::MAX), 0),
                Ordering::SeqCst,
            );
        }
        let (_, copied) = unpack(self.state.copied.load(Ordering::SeqCst));
        let pending = pages - copied.min(pages);
        if pending >= CHECKPOINT_PAGES && !self.state.committed.swap(true, Ordering::SeqCst) {
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

/// A `PASSIVE` checkpoint on `conn`: (frames in the log, frames copied);
/// -1s when not in WAL mode.
fn checkpoint(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    // (busy, frames in the log, frames copied)
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
    })
}

fn run(conn: Connection, state: &State) {
    let mut passes = 0;
    while !state.closed.load(Ordering::SeqCst) {
        if passes == 0 && !state.committed.load(Ordering::SeqCst) {
            // An unpark that came first makes this return at once.
            thread::park();
            continue;
        }
        state.committed.store(false, Ordering::SeqCst);
        let before = state.copied.load(Ordering::SeqCst);
        match checkpoint(&conn) {
            Ok((log, copied)) => {
                state.copied(before, copied);
                // What the writer committed during the pass (or a reader
                // kept from being copied).
                let left = state.pages.load(Ordering::SeqCst).max(log) - copied;
                passes += 1;
                if copied < 0 || left <= 0 {
                    passes = 0;
                } else if left <= TAIL_PAGES {
                    passes = 0;
                    state.tail.store(true, Ordering::SeqCst);
                } else if passes >= CATCH_UP_PASSES {
                    // The writer outpaces the thread: its fallback will do.
                    passes = 0;
                }
            }
            Err(e) => {
                passes = 0;
                tracing::warn!(error = %e, "a background WAL checkpoint failed");
            }
        }
    }
    if let Err((_, e)) = conn.close() {
        tracing::warn!(error = %e, "closing the checkpointer's connection failed");
    }
}
