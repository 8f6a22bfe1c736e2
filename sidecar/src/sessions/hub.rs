//! Publish and subscribe for committed events and live updates.
//!
//! A session's single writer publishes rows read back after commit, in
//! sequence order. A subscription replays history from its cursor and then
//! goes live with no gap and no duplicate: it registers first (so nothing
//! published after that point is missed), replays committed rows up to the
//! sequence published at registration, then drains what arrived meanwhile,
//! skipping anything already sent. Delivery never blocks the writer: a sink
//! that falls too far behind has its subscription closed with `overflow`, and
//! the client resumes with `after`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use agentos_protocol::host::StoredEvent;
use serde_json::Value;

/// What a subscriber receives.
#[derive(Clone, Debug)]
pub enum Item {
    /// A committed event and its public JSON, rendered once for every
    /// subscriber.
    Durable(Arc<StoredEvent>, Arc<str>),
    Ephemeral {
        session_id: Arc<str>,
        after_sequence: u64,
        update: Arc<Value>,
    },
}

impl Item {
    pub fn durable(event: StoredEvent) -> Item {
        let public: Arc<str> = Arc::from(event.public_json());
        Item::Durable(Arc::new(event), public)
    }
}

/// Why a sink refused an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkRefusal {
    Overflow,
    Closed,
}

/// Where a subscription's items go (a host connection, in practice). Must not
/// block.
pub trait Sink: Send + Sync {
    fn deliver(&self, subscription_id: &str, item: &Item) -> Result<(), SinkRefusal>;
    /// The subscription ended for `reason`; best effort.
    fn ended(&self, subscription_id: &str, session_id: &str, reason: &str, last_sequence: u64);
}

enum SubState {
    Replaying { buffer: Vec<Item> },
    Live { last_sent: u64 },
    Ended,
}

pub struct Subscription {
    pub id: String,
    pub session_id: String,
    sink: Arc<dyn Sink>,
    state: Mutex<SubState>,
}

/// Live items held back while a subscription replays; beyond this the
/// subscription overflows.
const REPLAY_BUFFER_ITEMS: usize = 1 << 20;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Subscription {
    /// Offers a live item; returns false when the subscription must go.
    fn offer(&self, item: &Item) -> bool {
        let mut state = lock(&self.state);
        match &mut *state {
            SubState::Replaying { buffer } => {
                if buffer.len() >= REPLAY_BUFFER_ITEMS {
                    *state = SubState::Ended;
                    return false;
                }
                buffer.push(item.clone());
                true
            }
            SubState::Live { last_sent } => {
                let wanted = match item {
                    Item::Durable(e, _) => e.sequence > *last_sent,
                    Item::Ephemeral { after_sequence, .. } => *after_sequence >= *last_sent,
                };
                if !wanted {
                    return true;
                }
                match self.sink.deliver(&self.id, item) {
                    Ok(()) => {
                        if let Item::Durable(e, _) = item {
                            *last_sent = e.sequence;
                        }
                        true
                    }
                    Err(_) => {
                        *state = SubState::Ended;
                        false
                    }
                }
            }
            SubState::Ended => false,
        }
    }

    fn last_sent(&self) -> u64 {
        match &*lock(&self.state) {
            SubState::Live { last_sent } => *last_sent,
            _ => 0,
        }
    }
}

struct SessionChannel {
    last_published: u64,
    subscriptions: Vec<Arc<Subscription>>,
}

/// All sessions' channels.
#[derive(Default)]
pub struct Hub {
    sessions: Mutex<HashMap<String, SessionChannel>>,
}

impl Hub {
    /// Notes the latest committed sequence of a session whose writer starts.
    pub fn set_published(&self, session_id: &str, latest: u64) {
        let mut sessions = lock(&self.sessions);
        let channel = sessions
            .entry(session_id.to_owned())
            .or_insert(SessionChannel {
                last_published: latest,
                subscriptions: Vec::new(),
            });
        channel.last_published = channel.last_published.max(latest);
    }

    /// Publishes committed events, oldest first.
    pub fn publish(&self, session_id: &str, events: Vec<StoredEvent>) {
        let mut sessions = lock(&self.sessions);
        let Some(channel) = sessions.get_mut(session_id) else {
            return;
        };
        let mut dropped = Vec::new();
        for event in events {
            channel.last_published = channel.last_published.max(event.sequence);
            if channel.subscriptions.is_empty() {
                continue;
            }
            let item = Item::durable(event);
            for sub in &channel.subscriptions {
                if !sub.offer(&item) {
                    dropped.push(sub.clone());
                }
            }
        }
        Self::drop_subscriptions(channel, dropped, "overflow");
    }

    /// Publishes a live, ephemeral update after `after_sequence`.
    pub fn publish_ephemeral(&self, session_id: &str, after_sequence: u64, update: Value) {
        let mut sessions = lock(&self.sessions);
        let Some(channel) = sessions.get_mut(session_id) else {
            return;
        };
        if channel.subscriptions.is_empty() {
            return;
        }
        let item = Item::Ephemeral {
            session_id: Arc::from(session_id),
            after_sequence,
            update: Arc::new(update),
        };
        let dropped: Vec<_> = channel
            .subscriptions
            .iter()
            .filter(|sub| !sub.offer(&item))
            .cloned()
            .collect();
        Self::drop_subscriptions(channel, dropped, "overflow");
    }

    fn drop_subscriptions(
        channel: &mut SessionChannel,
        dropped: Vec<Arc<Subscription>>,
        reason: &str,
    ) {
        for sub in dropped {
            channel.subscriptions.retain(|s| !Arc::ptr_eq(s, &sub));
            sub.sink
                .ended(&sub.id, &sub.session_id, reason, sub.last_sent());
        }
    }

    /// Registers a subscription in replay mode. Returns it and the sequence
    /// published at registration: replay covers `(after, upto]`.
    pub fn register(
        &self,
        id: String,
        session_id: &str,
        committed_latest: u64,
        sink: Arc<dyn Sink>,
    ) -> (Arc<Subscription>, u64) {
        let mut sessions = lock(&self.sessions);
        let channel = sessions
            .entry(session_id.to_owned())
            .or_insert(SessionChannel {
                last_published: committed_latest,
                subscriptions: Vec::new(),
            });
        let sub = Arc::new(Subscription {
            id,
            session_id: session_id.to_owned(),
            sink,
            state: Mutex::new(SubState::Replaying { buffer: Vec::new() }),
        });
        channel.subscriptions.push(sub.clone());
        (sub, channel.last_published)
    }

    /// Ends replay: drains what was published meanwhile and goes live.
    /// `last_sent` is the last durable sequence the replay delivered.
    pub fn go_live(&self, sub: &Arc<Subscription>, last_sent: u64) -> bool {
        let mut sessions = lock(&self.sessions);
        let mut state = lock(&sub.state);
        let SubState::Replaying { buffer } = std::mem::replace(&mut *state, SubState::Ended) else {
            return false;
        };
        let mut last = last_sent;
        for item in &buffer {
            let wanted = match item {
                Item::Durable(e, _) => e.sequence > last,
                Item::Ephemeral { after_sequence, .. } => *after_sequence >= last,
            };
            if !wanted {
                continue;
            }
            if sub.sink.deliver(&sub.id, item).is_err() {
                drop(state);
                if let Some(channel) = sessions.get_mut(&sub.session_id) {
                    Self::drop_subscriptions(channel, vec![sub.clone()], "overflow");
                }
                return false;
            }
            if let Item::Durable(e, _) = item {
                last = e.sequence;
            }
        }
        *state = SubState::Live { last_sent: last };
        true
    }

    /// Removes a subscription; true if it existed.
    pub fn unsubscribe(&self, subscription_id: &str) -> bool {
        let mut sessions = lock(&self.sessions);
        for channel in sessions.values_mut() {
            if let Some(pos) = channel
                .subscriptions
                .iter()
                .position(|s| s.id == subscription_id)
            {
                let sub = channel.subscriptions.remove(pos);
                *lock(&sub.state) = SubState::Ended;
                return true;
            }
        }
        false
    }

    /// Ends every subscription of a session whose committed rows could not
    /// be published; the channel stays for the session's writer.
    pub fn end_subscriptions(&self, session_id: &str, reason: &str) {
        let mut sessions = lock(&self.sessions);
        if let Some(channel) = sessions.get_mut(session_id) {
            let subs = std::mem::take(&mut channel.subscriptions);
            Self::drop_subscriptions(channel, subs, reason);
        }
    }

    /// Ends every subscription of a deleted session.
    pub fn close_session(&self, session_id: &str, reason: &str) {
        let mut sessions = lock(&self.sessions);
        if let Some(mut channel) = sessions.remove(session_id) {
            let subs = std::mem::take(&mut channel.subscriptions);
            Self::drop_subscriptions(&mut channel, subs, reason);
        }
    }

    /// Ends the subscriptions delivering to `sink` (a closed connection).
    pub fn drop_sink(&self, sink: &Arc<dyn Sink>) {
        let mut sessions = lock(&self.sessions);
        for channel in sessions.values_mut() {
            channel
                .subscriptions
                .retain(|s| !Arc::ptr_eq(&s.sink, sink));
        }
    }
}
