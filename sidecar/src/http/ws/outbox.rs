//! One socket's outgoing side: the queue of what is still to be sent,
//! bounded in bytes by `http.ws.maxQueuedBytesPerSocket`, and the socket's
//! close signal.
//!
//! Queuing never waits: the session hub and the change feed push from
//! their own tasks, and a socket that does not read must not slow either.
//! An entry that does not fit closes the socket instead (1008, naming the
//! setting); one entry larger than the whole bound still passes when
//! nothing else is queued, so no single event is undeliverable. The bytes
//! of a session event are estimated from its stored form when it is
//! queued; it is rendered when it is sent.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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
    /// A frame already rendered (acknowledgements, errors, changes).
    Frame(String),
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

/// The queue and the close signal of one socket.
pub(super) struct Outbox {
    tx: mpsc::UnboundedSender<(Out, usize)>,
    queued: AtomicUsize,
    limit: usize,
    close: watch::Sender<Option<Close>>,
}

impl Outbox {
    pub(super) fn new(limit: u64) -> (Outbox, mpsc::UnboundedReceiver<(Out, usize)>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (close, _) = watch::channel(None);
        let outbox = Outbox {
            tx,
            queued: AtomicUsize::new(0),
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            close,
        };
        (outbox, rx)
    }

    /// Queues `out` if it fits; otherwise the socket closes as a consumer
    /// that fell behind.
    pub(super) fn push(&self, out: Out) -> Result<(), SinkRefusal> {
        if self.is_closing() {
            return Err(SinkRefusal::Closed);
        }
        let n = out.estimate();
        let fits = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                (queued == 0 || queued.saturating_add(n) <= self.limit)
                    .then(|| queued.saturating_add(n))
            })
            .is_ok();
        if !fits {
            tracing::warn!(
                queued = self.queued(),
                limit = self.limit,
                "closing a websocket over http.ws.maxQueuedBytesPerSocket"
            );
            self.close(CLOSE_OVERFLOW);
            return Err(SinkRefusal::Overflow);
        }
        if self.tx.send((out, n)).is_err() {
            self.taken(n);
            return Err(SinkRefusal::Closed);
        }
        Ok(())
    }

    /// A rendered frame; false when the socket is closing.
    pub(super) fn frame(&self, text: String) -> bool {
        self.push(Out::Frame(text)).is_ok()
    }

    /// The writer took an entry of `n` bytes off the queue.
    pub(super) fn taken(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::AcqRel);
    }

    pub(super) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Asks the socket to close; the first reason wins.
    pub(super) fn close(&self, close: Close) {
        self.close.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(close);
            true
        });
    }

    pub(super) fn is_closing(&self) -> bool {
        self.close.borrow().is_some()
    }

    /// Watches for the close request.
    pub(super) fn closing(&self) -> watch::Receiver<Option<Close>> {
        self.close.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_bounded_in_bytes_and_overflow_closes() {
        let (outbox, mut rx) = Outbox::new(100);
        // Alone, a frame larger than the bound passes.
        assert!(outbox.frame("x".repeat(150)));
        let (_, n) = rx.try_recv().unwrap();
        outbox.taken(n);
        assert_eq!(outbox.queued(), 0);
        assert!(outbox.frame("a".repeat(60)));
        assert!(outbox.frame("b".repeat(40)));
        assert_eq!(outbox.queued(), 100);
        assert!(!outbox.is_closing());
        assert_eq!(
            outbox.push(Out::Frame("c".into())),
            Err(SinkRefusal::Overflow)
        );
        assert_eq!(*outbox.closing().borrow(), Some(CLOSE_OVERFLOW));
        // Closing: nothing more is queued, and a later reason does not win.
        assert!(!outbox.frame("d".into()));
        outbox.close(CLOSE_IDLE);
        assert_eq!(*outbox.closing().borrow(), Some(CLOSE_OVERFLOW));
    }
}
