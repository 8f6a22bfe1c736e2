//! One socket's outgoing side, on the doors' shared outbox
//! (`doors/outbox.rs`): the queue of what is still to be sent, bounded in
//! bytes by `http.ws.maxQueuedBytesPerSocket`, and the socket's close
//! signal; and the process-wide pool every socket's queue counts against
//! (`http.ws.maxQueuedBytes`). This door configures it to close, never to
//! refuse and wait:
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

use std::sync::Arc;

use tokio::sync::watch;
use tungstenite::Utf8Bytes;

use super::wire::Framed;
use crate::control::SessionLink;
use crate::doors::outbox::{self, Overflow, Pool, PoolOverflow, Refused};
use crate::http::common::render;
use crate::sessions::{Batch, FrameCache, Item, SessionInfo, SinkRefusal};
use agentos_protocol::seed::ws::{ChangeValue, WsEvent};

/// Why and how a socket closes (a WebSocket close code and its reason).
pub use crate::doors::outbox::Close;

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
    /// A frame framed once for every socket it goes to.
    Framed(Framed),
    /// A session subscription starts; its items follow.
    Open {
        sub_id: Arc<str>,
        key: String,
        link: SessionLink,
        after: u64,
    },
    /// An item for a session subscription, rendered when sent.
    Item { sub_id: Arc<str>, item: Item },
    /// Items of one commit for a session subscription, in order, shared
    /// with the session's other subscriptions.
    Items { sub_id: Arc<str>, items: Batch },
    /// A session's new state, for every subscription of it on the socket.
    State(Arc<Announced>),
    /// A session subscription ended; `frame` follows its last item.
    End {
        sub_id: Arc<str>,
        frame: Option<String>,
    },
    /// The answer to a client's ping, with its payload.
    Pong(bytes::Bytes),
}

/// A session's new state as every socket holding the session is handed
/// it: the state, and its `change` frame, rendered by the first socket that
/// sends it and shared by the others (a session's key and link are the
/// same on every socket, so the frame is too).
pub(super) struct Announced {
    pub(super) info: SessionInfo,
    frame: FrameCache,
}

impl Announced {
    pub(super) fn new(info: SessionInfo) -> Arc<Announced> {
        Arc::new(Announced {
            info,
            frame: FrameCache::default(),
        })
    }

    /// The `change` frame under `key`, for the session `link` describes.
    pub(super) fn frame(&self, key: &str, link: &SessionLink) -> Framed {
        let render = || {
            Framed::text(
                &WsEvent::Change {
                    key: key.to_owned(),
                    value: Box::new(ChangeValue::Session(render::session(&self.info, link))),
                }
                .to_json(),
            )
        };
        self.frame.with(key, render, Framed::clone)
    }
}

/// Bytes charged for an entry that is not a rendered frame.
const ENTRY_OVERHEAD: usize = 192;

impl Out {
    /// The bytes charged to the queue for this entry.
    pub(super) fn estimate(&self) -> usize {
        match self {
            Out::Frame(text) => text.len(),
            Out::Framed(frame) => frame.bytes().len(),
            Out::Open { key, .. } => key.len() + ENTRY_OVERHEAD,
            Out::Item { item, .. } => item_estimate(item),
            Out::Items { items, .. } => items.items().iter().map(item_estimate).sum(),
            Out::State(_) => 4 * ENTRY_OVERHEAD,
            Out::End { frame, .. } => ENTRY_OVERHEAD + frame.as_ref().map_or(0, String::len),
            Out::Pong(payload) => ENTRY_OVERHEAD + payload.len(),
        }
    }
}

/// The bytes charged for a session item: its stored form, or a live
/// chunk's text, and the frame around it.
fn item_estimate(item: &Item) -> usize {
    ENTRY_OVERHEAD
        + match item {
            Item::Durable(_, public, _) => public.len(),
            Item::Ephemeral { update, .. } => update
                .get("content")
                .and_then(|c| c.get("text"))
                .and_then(serde_json::Value::as_str)
                .map_or(0, str::len),
        }
}

/// The bytes queued to every socket of the process, against
/// `http.ws.maxQueuedBytes`.
pub type Budget = Pool;

/// The sockets' pool: past it, the sockets furthest behind close.
pub fn budget(max: u64) -> Arc<Budget> {
    Pool::new(max, PoolOverflow::CloseFurthestBehind(CLOSE_BUDGET))
}

/// What the writer takes off a socket's outbox.
pub(super) type Queue = outbox::Queue<Out>;

/// The queue and the close signal of one socket; dropped, the socket is
/// closed.
pub(super) struct Outbox {
    outbox: outbox::Outbox<Out>,
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.outbox.close(CLOSE_NORMAL);
    }
}

impl Outbox {
    pub(super) fn new(limit: u64, budget: &Arc<Budget>) -> (Outbox, Queue) {
        let (outbox, queue) = outbox::Outbox::new(budget, limit, Overflow::Close(CLOSE_OVERFLOW));
        (Outbox { outbox }, queue)
    }

    /// A commit's items for one subscription, as one entry: its writer
    /// wakes once for them. Items that together pass the socket's whole
    /// bound go one entry each, so only a single item may ever pass it.
    pub(super) fn push_items(&self, sub_id: &Arc<str>, items: Batch) -> Result<(), SinkRefusal> {
        let entry = Out::Items {
            sub_id: sub_id.clone(),
            items,
        };
        if entry.estimate() <= self.outbox.limit() {
            return self.push(entry);
        }
        let Out::Items { items, .. } = entry else {
            return Ok(());
        };
        items.items().iter().try_for_each(|item| {
            self.push(Out::Item {
                sub_id: sub_id.clone(),
                item: item.clone(),
            })
        })
    }

    /// Queues `out` if it fits; otherwise the socket closes as a consumer
    /// that fell behind.
    pub(super) fn push(&self, out: Out) -> Result<(), SinkRefusal> {
        let n = out.estimate();
        self.outbox.push(out, n).map_err(|refused| match refused {
            Refused::Full => SinkRefusal::Overflow,
            Refused::Closed => SinkRefusal::Closed,
        })
    }

    /// A rendered frame; false when the socket is closing.
    pub(super) fn frame(&self, text: impl Into<Utf8Bytes>) -> bool {
        self.push(Out::Frame(text.into())).is_ok()
    }

    /// The writer took an entry of `n` bytes off the queue.
    #[cfg(test)]
    pub(super) fn taken(&self, n: usize) {
        self.outbox.release(n);
    }

    #[cfg(test)]
    pub(super) fn queued(&self) -> usize {
        self.outbox.queued()
    }

    /// Asks the socket to close; the first reason wins.
    pub(super) fn close(&self, why: Close) {
        self.outbox.close(why);
    }

    #[cfg(test)]
    pub(super) fn is_closing(&self) -> bool {
        self.outbox.is_closing()
    }

    /// Watches for the close request.
    pub(super) fn closing(&self) -> watch::Receiver<Option<Close>> {
        self.outbox.closing()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_bounded_in_bytes_and_overflow_closes() {
        let budget = budget(1 << 30);
        let (outbox, mut rx) = Outbox::new(100, &budget);
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

    fn durable(sequence: u64, payload: &str) -> Item {
        Item::durable(agentos_protocol::session::StoredEvent {
            session_id: "s".into(),
            sequence,
            timestamp_ms: 1,
            kind: agentos_protocol::session::EventKind::SessionUpdate,
            correlation_id: None,
            outcome_status: None,
            terminal_reason: None,
            actor: agentos_protocol::session::Actor::Agent,
            payload_json: payload.into(),
        })
    }

    #[test]
    fn a_commit_is_one_entry_unless_it_would_pass_the_whole_bound() {
        let budget = budget(1 << 30);
        let sub: Arc<str> = Arc::from("sub");
        let items: Vec<Item> = (1..=3).map(|seq| durable(seq, "{}")).collect();
        let one: usize = items.iter().map(item_estimate).sum();
        let (outbox, mut rx) = Outbox::new(one as u64, &budget);
        outbox.push_items(&sub, items.clone().into()).unwrap();
        let (entry, n) = rx.try_recv().unwrap();
        assert!(matches!(entry, Out::Items { ref items, .. } if items.items().len() == 3));
        assert_eq!(n, one);
        assert!(rx.try_recv().is_err());
        outbox.taken(n);
        // Four rows pass the bound together: they go one entry each, so
        // the fourth overflows as it would have alone.
        let more: Vec<Item> = (4..=7).map(|seq| durable(seq, "{}")).collect();
        assert_eq!(
            outbox.push_items(&sub, more.into()),
            Err(SinkRefusal::Overflow)
        );
        assert_eq!(*outbox.closing().borrow(), Some(CLOSE_OVERFLOW));
        let mut singles = 0;
        while let Ok((entry, _)) = rx.try_recv() {
            assert!(matches!(entry, Out::Item { .. }));
            singles += 1;
        }
        assert_eq!(singles, 3);
    }

    #[test]
    fn over_the_budget_the_sockets_furthest_behind_close_first() {
        let budget = budget(1000);
        let (slow, _slow_rx) = Outbox::new(10_000, &budget);
        let (slower, _slower_rx) = Outbox::new(10_000, &budget);
        let (reader, mut reader_rx) = Outbox::new(10_000, &budget);
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
