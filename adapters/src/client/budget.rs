//! What every adapter connection of one process shares: a budget for the
//! bytes queued to all adapters' stdin, and one for their stdout lines,
//! from when they are read (a long one from the moment it grows past what a
//! connection reads for free) until their event is taken. Each connection
//! keeps its own bounds too; these make the sum of many connections fit the
//! machine.
//!
//! Stdin: a connection's [`AdapterConnection::stdin_room`] waits until its
//! own queue and everyone's fit. Stdout: a line longer than
//! [`FREE_LINE_BYTES`] takes the rest of its length from the budget as it
//! arrives, waiting (the reader reads no more meanwhile) up to the budget's
//! wait; a line that finds no room in that time is refused
//! ([`AdapterError::StdoutBudget`]) and skipped to its end, so readers that
//! each hold part of the budget cannot wait for each other forever.
//!
//! [`AdapterConnection::stdin_room`]: super::AdapterConnection::stdin_room
//! [`AdapterError::StdoutBudget`]: super::AdapterError::StdoutBudget

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use agentos_base::budget::ByteBudget;

/// The start of a line every connection reads without asking the budget.
pub const FREE_LINE_BYTES: usize = 64 * 1024;

/// The budgets shared by a process's adapter connections.
pub struct ProcessBudget {
    stdin_max: usize,
    stdin: AtomicUsize,
    stdin_room: Notify,
    stdout: Arc<ByteBudget>,
    stdout_wait: Duration,
}

impl std::fmt::Debug for ProcessBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessBudget")
            .field("stdin_max", &self.stdin_max)
            .field("stdout_max", &self.stdout.max())
            .finish()
    }
}

/// One budget is equal only to itself.
impl PartialEq for ProcessBudget {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for ProcessBudget {}

impl ProcessBudget {
    /// `max_stdin_bytes` queued to every adapter's stdin together;
    /// `max_stdout_bytes` of long stdout lines, waited for at most
    /// `stdout_wait`.
    pub fn new(
        max_stdin_bytes: usize,
        max_stdout_bytes: usize,
        stdout_wait: Duration,
    ) -> Arc<Self> {
        Arc::new(ProcessBudget {
            stdin_max: max_stdin_bytes,
            stdin: AtomicUsize::new(0),
            stdin_room: Notify::new(),
            stdout: ByteBudget::new(max_stdout_bytes.max(1)),
            stdout_wait,
        })
    }

    /// A budget that never binds (one connection on its own).
    pub fn unbounded() -> Arc<Self> {
        Self::new(usize::MAX, usize::MAX, Duration::from_secs(3600))
    }

    /// Bytes queued to every adapter's stdin now.
    pub fn stdin_queued(&self) -> usize {
        self.stdin.load(Ordering::Acquire)
    }

    /// Whether everyone's stdin queue fits.
    pub(super) fn stdin_fits(&self) -> bool {
        self.stdin_queued() <= self.stdin_max
    }

    pub(super) fn stdin_added(&self, n: usize) {
        self.stdin.fetch_add(n, Ordering::AcqRel);
    }

    pub(super) fn stdin_written(&self, n: usize) {
        self.stdin.fetch_sub(n, Ordering::AcqRel);
        self.stdin_room.notify_waiters();
    }

    pub(super) fn stdin_room(&self) -> tokio::sync::futures::Notified<'_> {
        self.stdin_room.notified()
    }

    /// Stdout bytes of long lines held now.
    pub fn stdout_held(&self) -> usize {
        self.stdout.used()
    }

    pub fn stdout_limit(&self) -> usize {
        self.stdout.max()
    }

    /// Takes `n` more bytes for a line, waiting up to the budget's wait;
    /// false when they did not come (or can never: more than the budget).
    pub(super) async fn take_stdout(&self, n: usize) -> bool {
        if n > self.stdout.max() {
            return false;
        }
        match tokio::time::timeout(self.stdout_wait, self.stdout.take(n)).await {
            Ok(held) => {
                // Given back by count when the event is taken.
                let _ = held.into_bytes();
                true
            }
            Err(_) => false,
        }
    }

    pub(super) fn give_stdout(&self, n: usize) {
        self.stdout.give(n);
    }
}
