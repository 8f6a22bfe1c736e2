//! The queue in front of the account-wide feed (`account.rs`): what the
//! session hub's tap, the session-state relay and the renames hand the
//! feed's task. Offering never waits; what does not fit, past
//! [`FEED_MESSAGES`] messages or [`FEED_BYTES`] bytes, is dropped and marks
//! the feed fallen behind, and the task then closes the sockets that hold
//! an account (their clients subscribe again).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::outbox::Announced;
use crate::sessions::Item;

/// Messages waiting for the feed, at most.
pub const FEED_MESSAGES: usize = 16_384;
/// Bytes of events and updates waiting for the feed, at most.
pub const FEED_BYTES: usize = 64 * 1024 * 1024;
/// Bytes charged for a message besides what it carries.
const OVERHEAD: usize = 256;

/// What the feed is handed.
pub(super) enum FeedMsg {
    /// A session's committed event or live update.
    Item { session_id: Arc<str>, item: Item },
    /// A session's new state.
    State(Arc<Announced>),
    /// The sidecar renamed a session: its accounts hear `session-updated`.
    Renamed(String),
}

impl FeedMsg {
    fn estimate(&self) -> usize {
        OVERHEAD
            + match self {
                FeedMsg::Item {
                    item: Item::Durable(_, public, _),
                    ..
                } => public.len(),
                FeedMsg::Item {
                    item: Item::Ephemeral { update, .. },
                    ..
                } => update
                    .pointer("/content/text")
                    .and_then(serde_json::Value::as_str)
                    .map_or(0, str::len),
                FeedMsg::State(_) => 0,
                FeedMsg::Renamed(id) => id.len(),
            }
    }
}

/// The feed's door: never waits; what does not fit marks the feed fallen
/// behind.
pub(super) struct FeedSender {
    tx: mpsc::Sender<(FeedMsg, usize)>,
    bytes: Arc<AtomicUsize>,
    overflowed: Arc<AtomicBool>,
}

/// The feed task's end of the queue.
pub(super) struct FeedReceiver {
    rx: mpsc::Receiver<(FeedMsg, usize)>,
    bytes: Arc<AtomicUsize>,
    overflowed: Arc<AtomicBool>,
}

/// A queue of at most `capacity` messages and [`FEED_BYTES`] bytes.
pub(super) fn channel(capacity: usize) -> (FeedSender, FeedReceiver) {
    let (tx, rx) = mpsc::channel(capacity);
    let bytes = Arc::new(AtomicUsize::new(0));
    let overflowed = Arc::new(AtomicBool::new(false));
    let sender = FeedSender {
        tx,
        bytes: bytes.clone(),
        overflowed: overflowed.clone(),
    };
    (
        sender,
        FeedReceiver {
            rx,
            bytes,
            overflowed,
        },
    )
}

impl FeedSender {
    pub(super) fn offer(&self, msg: FeedMsg) {
        let size = msg.estimate();
        if self.bytes.fetch_add(size, Ordering::AcqRel) + size > FEED_BYTES {
            self.bytes.fetch_sub(size, Ordering::AcqRel);
            self.overflowed.store(true, Ordering::Release);
            return;
        }
        if self.tx.try_send((msg, size)).is_err() {
            self.bytes.fetch_sub(size, Ordering::AcqRel);
            self.overflowed.store(true, Ordering::Release);
        }
    }
}

impl FeedReceiver {
    /// The next message; `None` once every sender is gone.
    pub(super) async fn recv(&mut self) -> Option<FeedMsg> {
        let (msg, size) = self.rx.recv().await?;
        self.bytes.fetch_sub(size, Ordering::AcqRel);
        Some(msg)
    }

    /// Whether something was dropped since the last time this was asked.
    pub(super) fn fell_behind(&self) -> bool {
        self.overflowed.swap(false, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(capacity: usize) -> (FeedSender, FeedReceiver) {
        channel(capacity)
    }

    fn update(text: &str) -> FeedMsg {
        FeedMsg::Item {
            session_id: Arc::from("s"),
            item: Item::Ephemeral {
                session_id: Arc::from("s"),
                after_sequence: 1,
                update: Arc::new(serde_json::json!({"content": {"text": text}})),
            },
        }
    }

    #[test]
    fn what_does_not_fit_marks_the_feed_fallen_behind() {
        let (feed, mut rx) = sender(2);
        feed.offer(update("a"));
        feed.offer(update("b"));
        assert!(!feed.overflowed.load(Ordering::Acquire));
        feed.offer(update("c"));
        assert!(feed.overflowed.load(Ordering::Acquire), "past its messages");
        assert_eq!(feed.bytes.load(Ordering::Acquire), 2 * (OVERHEAD + 1));
        while rx.rx.try_recv().is_ok() {}

        let (feed, _rx) = sender(FEED_MESSAGES);
        feed.offer(update(&"x".repeat(FEED_BYTES)));
        assert!(feed.overflowed.load(Ordering::Acquire), "past its bytes");
        assert_eq!(feed.bytes.load(Ordering::Acquire), 0);
    }
}
