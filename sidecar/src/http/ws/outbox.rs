//! One socket's outgoing side: the queue of what is still to be sent,
//! bounded in bytes by `http.ws.maxQueuedBytesPerSocket`, and the socket's
//! close signal; and the process-wide budget every socket's queue counts
//! against (`http.ws.maxQueuedBytes`).
//!
//! Queuing never waits: the session hub and the change feed push from
//! their own tasks, and a socket that does not read must not slow either.
//! An entry that does not fit closes the socket instead (1008, naming the
//! setting); one entry larger than the whole bound still passes when
//! nothing else is queued, so no single event is undeliverable. The bytes
//! of a session event are estimated from its stored form when it is
//! queued; it is rendered when it is sent. A frame rendered for many
//! sockets is one shared buffer; each socket is charged its full length,
//! so the budget counts at least what is really held.
//!
//! When the sockets' queues together pass the process-wide budget, the
//! sockets furthest behind are closed (1008, naming it) until the total is
//! back under seven eighths of it; a socket that reads keeps a short queue
//! and keeps receiving. A closing socket's bytes leave the budget at once:
//! nothing queued is sent after a close.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use axum::extract::ws::Utf8Bytes;
use tokio::sync::{mpsc, watch};

use crate::control::SessionLink;
use crate::sessions::{Item, SessionInfo, SinkRefusal};

/// Why and how a socket closes (a WebSocket close code and its reason).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Close {
    pub code: u16,
    pub reason: &'static str,
}

/// 1000: the peer left or asked to close.
pub const CLOSE_NORMAL: Close = Close {
    code: 1000,
    reason: "closing",
};
/// 1001 on shutdown.
pub const CLOSE_SHUTDOWN: Close = Close {
    code: 1001,
    reason: "server shutting down",
};
/// 1001 when the client sent nothing, not even a pong.
pub const CLOSE_IDLE: Close = Close {
    code: 1001,
    reason: "idle: nothing received within http.ws.idleTimeoutMs",
};
/// 1008 when the client reads too slowly.
pub const CLOSE_OVERFLOW: Close = Close {
    code: 1008,
    reason: "fell behind: queued frames exceed http.ws.maxQueuedBytesPerSocket",
};
/// 1008 when the sockets together hold too much and this one is among
/// those furthest behind.
pub const CLOSE_BUDGET: Close = Close {
    code: 1008,
    reason: "fell behind: queued frames of all sockets exceed http.ws.maxQueuedBytes",
};
/// 1008 when a key that signed on the socket is revoked: its feed ends
/// with its authority.
pub const CLOSE_REVOKED: Close = Close {
    code: 1008,
    reason: "signer revoked",
};
/// 1009 when a client frame is too large.
pub const CLOSE_TOO_BIG: Close = Close {
    code: 1009,
    reason: "a frame exceeds http.ws.maxFrameBytes",
};
/// 1002 when the client broke the WebSocket protocol.
pub const CLOSE_PROTOCOL: Close = Close {
    code: 1002,
    reason: "websocket protocol error",
};

/// What the writer is handed, in order.
pub(super) enum Out {
    /// A frame already rendered (acknowledgements, errors, changes),
    /// shared by every socket it goes to.
    Frame(Utf8Bytes),
    /// A session subscription starts; its items follow.
    Open {
        sub_id: Arc<str>,
        key: String,
        link: SessionLink,
        after: u64,
    },
    /// An item for a session subscription, rendered when sent.
    Item { sub_id: Arc<str>, item: Item },
    /// A session's new state, for every subscription of it on the socket.
    State(Arc<SessionInfo>),
    /// A session subscription ended; `frame` follows its last item.
    End {
        sub_id: Arc<str>,
        frame: Option<String>,
    },
}

/// Bytes charged for an entry that is not a rendered frame.
const ENTRY_OVERHEAD: usize = 192;

impl Out {
    /// The bytes charged to the queue for this entry.
    pub(super) fn estimate(&self) -> usize {
        match self {
            Out::Frame(text) => text.len(),
            Out::Open { key, .. } => key.len() + ENTRY_OVERHEAD,
            Out::Item { item, .. } => {
                ENTRY_OVERHEAD
                    + match item {
                        Item::Durable(_, public) => public.len(),
                        Item::Ephemeral { update, .. } => update
                            .get("content")
                            .and_then(|c| c.get("text"))
                            .and_then(serde_json::Value::as_str)
                            .map_or(0, str::len),
                    }
            }
            Out::State(_) => 4 * ENTRY_OVERHEAD,
            Out::End { frame, .. } => ENTRY_OVERHEAD + frame.as_ref().map_or(0, String::len),
        }
    }
}

/// What one socket has queued, shared with the budget (which closes the
/// sockets furthest behind).
struct Account {
    queued: Mutex<Queued>,
    close: watch::Sender<Option<Close>>,
}

#[derive(Default)]
struct Queued {
    bytes: usize,
    /// The socket is closing: its bytes left the budget, nothing more is
    /// queued or counted.
    released: bool,
}

impl Account {
    fn lock(&self) -> MutexGuard<'_, Queued> {
        self.queued.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The bytes queued to every socket of the process, against
/// `http.ws.maxQueuedBytes`.
pub struct Budget {
    max: usize,
    total: AtomicUsize,
    members: Mutex<HashMap<u64, Weak<Account>>>,
    /// One relief at a time; the others' pushes are covered by it.
    relieving: Mutex<()>,
}

impl Budget {
    pub fn new(max: u64) -> Arc<Budget> {
        Arc::new(Budget {
            max: usize::try_from(max).unwrap_or(usize::MAX),
            total: AtomicUsize::new(0),
            members: Mutex::default(),
            relieving: Mutex::new(()),
        })
    }

    /// Bytes queued to all sockets now.
    pub fn queued(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    fn members(&self) -> MutexGuard<'_, HashMap<u64, Weak<Account>>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Over the budget: closes the sockets furthest behind until the total
    /// is back under seven eighths of it.
    fn relieve(&self) {
        let Ok(_one) = self.relieving.try_lock() else {
            return;
        };
        let target = self.max - self.max / 8;
        if self.queued() <= self.max {
            return;
        }
        let mut behind: Vec<(usize, Arc<Account>)> = self
            .members()
            .values()
            .filter_map(Weak::upgrade)
            .map(|account| {
                let bytes = account.lock().bytes;
                (bytes, account)
            })
            .collect();
        behind.sort_by_key(|entry| std::cmp::Reverse(entry.0));
        let mut closed = 0usize;
        for (_, account) in behind {
            if self.queued() <= target {
                break;
            }
            close(&account, &self.total, CLOSE_BUDGET);
            closed += 1;
        }
        tracing::warn!(
            closed,
            queued = self.queued(),
            limit = self.max,
            "closed the websockets furthest behind: over http.ws.maxQueuedBytes"
        );
    }
}

/// Asks the socket to close (the first reason wins) and takes its bytes
/// out of the budget.
fn close(account: &Account, total: &AtomicUsize, why: Close) {
    account.close.send_if_modified(|current| {
        if current.is_some() {
            return false;
        }
        *current = Some(why);
        true
    });
    let mut queued = account.lock();
    if !queued.released {
        queued.released = true;
        total.fetch_sub(queued.bytes, Ordering::AcqRel);
        queued.bytes = 0;
    }
}

/// The queue and the close signal of one socket.
pub(super) struct Outbox {
    id: u64,
    tx: mpsc::UnboundedSender<(Out, usize)>,
    limit: usize,
    account: Arc<Account>,
    budget: Arc<Budget>,
}

impl Drop for Outbox {
    fn drop(&mut self) {
        close(&self.account, &self.budget.total, CLOSE_NORMAL);
        self.budget.members().remove(&self.id);
    }
}

impl Outbox {
    pub(super) fn new(
        id: u64,
        limit: u64,
        budget: Arc<Budget>,
    ) -> (Outbox, mpsc::UnboundedReceiver<(Out, usize)>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (close, _) = watch::channel(None);
        let account = Arc::new(Account {
            queued: Mutex::default(),
            close,
        });
        budget.members().insert(id, Arc::downgrade(&account));
        let outbox = Outbox {
            id,
            tx,
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            account,
            budget,
        };
        (outbox, rx)
    }

    /// Queues `out` if it fits; otherwise the socket closes as a consumer
    /// that fell behind.
    pub(super) fn push(&self, out: Out) -> Result<(), SinkRefusal> {
        let n = out.estimate();
        let total = {
            let mut queued = self.account.lock();
            if queued.released {
                return Err(SinkRefusal::Closed);
            }
            if queued.bytes != 0 && queued.bytes.saturating_add(n) > self.limit {
                let bytes = queued.bytes;
                drop(queued);
                tracing::warn!(
                    queued = bytes,
                    limit = self.limit,
                    "closing a websocket over http.ws.maxQueuedBytesPerSocket"
                );
                self.close(CLOSE_OVERFLOW);
                return Err(SinkRefusal::Overflow);
            }
            queued.bytes += n;
            self.budget.total.fetch_add(n, Ordering::AcqRel) + n
        };
        if self.tx.send((out, n)).is_err() {
            self.taken(n);
            return Err(SinkRefusal::Closed);
        }
        if total > self.budget.max {
            self.budget.relieve();
        }
        if self.is_closing() {
            // Closed by the relief: what was just queued is not sent.
            return Err(SinkRefusal::Overflow);
        }
        Ok(())
    }

    /// A rendered frame; false when the socket is closing.
    pub(super) fn frame(&self, text: impl Into<Utf8Bytes>) -> bool {
        self.push(Out::Frame(text.into())).is_ok()
    }

    /// The writer took an entry of `n` bytes off the queue.
    pub(super) fn taken(&self, n: usize) {
        let mut queued = self.account.lock();
        if !queued.released {
            queued.bytes -= n.min(queued.bytes);
            self.budget.total.fetch_sub(n, Ordering::AcqRel);
        }
    }

    #[cfg(test)]
    pub(super) fn queued(&self) -> usize {
        self.account.lock().bytes
    }

    /// Asks the socket to close; the first reason wins.
    pub(super) fn close(&self, why: Close) {
        close(&self.account, &self.budget.total, why);
    }

    pub(super) fn is_closing(&self) -> bool {
        self.account.close.borrow().is_some()
    }

    /// Watches for the close request.
    pub(super) fn closing(&self) -> watch::Receiver<Option<Close>> {
        self.account.close.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_bounded_in_bytes_and_overflow_closes() {
        let budget = Budget::new(1 << 30);
        let (outbox, mut rx) = Outbox::new(1, 100, budget.clone());
        // Alone, a frame larger than the bound passes.
        assert!(outbox.frame("x".repeat(150)));
        let (_, n) = rx.try_recv().unwrap();
        outbox.taken(n);
        assert_eq!(outbox.queued(), 0);
        assert!(outbox.frame("a".repeat(60)));
        assert!(outbox.frame("b".repeat(40)));
        assert_eq!(outbox.queued(), 100);
        assert_eq!(budget.queued(), 100);
        assert!(!outbox.is_closing());
        assert_eq!(
            outbox.push(Out::Frame("c".into())),
            Err(SinkRefusal::Overflow)
        );
        assert_eq!(*outbox.closing().borrow(), Some(CLOSE_OVERFLOW));
        // Closing: its bytes leave the budget, nothing more is queued, and
        // a later reason does not win.
        assert_eq!(budget.queued(), 0);
        assert!(!outbox.frame("d"));
        outbox.close(CLOSE_IDLE);
        assert_eq!(*outbox.closing().borrow(), Some(CLOSE_OVERFLOW));
        // The writer's later accounting of what it drops changes nothing.
        while let Ok((_, n)) = rx.try_recv() {
            outbox.taken(n);
        }
        assert_eq!(budget.queued(), 0);
    }

    #[test]
    fn over_the_budget_the_sockets_furthest_behind_close_first() {
        let budget = Budget::new(1000);
        let (slow, _slow_rx) = Outbox::new(1, 10_000, budget.clone());
        let (slower, _slower_rx) = Outbox::new(2, 10_000, budget.clone());
        let (reader, mut reader_rx) = Outbox::new(3, 10_000, budget.clone());
        let frame: Utf8Bytes = "f".repeat(100).into();
        for _ in 0..3 {
            assert!(slow.frame(frame.clone()));
        }
        for _ in 0..5 {
            assert!(slower.frame(frame.clone()));
        }
        // The reader takes what it is sent.
        for _ in 0..20 {
            assert!(reader.frame(frame.clone()));
            let (_, n) = reader_rx.try_recv().unwrap();
            reader.taken(n);
        }
        assert_eq!(budget.queued(), 800);
        assert!(slow.frame(frame.clone()));
        assert!(slower.frame(frame.clone()));
        // 1,000 is the budget; the next push passes it: the slower one
        // goes first, and that is enough (under 875).
        assert!(slow.frame(frame.clone()));
        assert_eq!(*slower.closing().borrow(), Some(CLOSE_BUDGET));
        assert!(!slow.is_closing() && !reader.is_closing());
        assert_eq!(budget.queued(), 500);
        assert!(reader.frame(frame.clone()));
        // A socket that is gone leaves the budget.
        drop(slow);
        assert_eq!(budget.queued(), 100);
    }
}
