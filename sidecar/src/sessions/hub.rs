//! Publish and subscribe for committed events and live updates.
//!
//! A session's single writer publishes rows read back after commit, in
//! sequence order. A subscription replays history from its cursor and then
//! goes live with no gap and no duplicate: it registers first (so nothing
//! published after that point is missed), replays committed rows up to the
//! sequence published at registration, then drains what arrived meanwhile,
//! skipping anything already sent. Delivery never blocks the writer: a sink
//! that falls too far behind has its subscription closed with `overflow`, and
//! the client resumes with `after`. Subscriptions are indexed by session, by
//! id and by sink, so no operation walks every subscription of the VM, and a
//! sink (a host connection) holds at most a configured number of them.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use agentos_protocol::session::StoredEvent;
use serde_json::Value;

/// What a subscriber receives.
#[derive(Clone, Debug)]
pub enum Item {
    /// A committed event and its public JSON, rendered once for every
    /// subscriber (shared as rendered, not copied into a new allocation),
    /// and the frame another door renders of it, made once too.
    Durable(Arc<StoredEvent>, Arc<String>, Arc<FrameCache>),
    Ephemeral {
        session_id: Arc<str>,
        after_sequence: u64,
        update: Arc<Value>,
    },
}

impl Item {
    pub fn durable(event: StoredEvent) -> Item {
        let public = Arc::new(event.public_json());
        Item::Durable(Arc::new(event), public, Arc::default())
    }
}

/// A door's frame of a durable item, rendered by the first subscriber that
/// sends it and reused by every other subscriber of the same key (a
/// thousand sockets on one session render each event once). The frame is
/// the door's own type, shared, never copied: the hub knows nothing of it.
#[derive(Default)]
pub struct FrameCache(std::sync::OnceLock<(String, Arc<dyn Any + Send + Sync>)>);

impl std::fmt::Debug for FrameCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("FrameCache")
            .field(&self.0.get().map(|(key, _)| key))
            .finish()
    }
}

impl FrameCache {
    /// `read` of the frame for `key`: the cached one, else `render`'s
    /// (cached when it is the first; a frame for another key, or of
    /// another type, is rendered anew). The cached frame is lent, not
    /// shared: reading it touches no reference count.
    pub fn with<T: Any + Send + Sync, R>(
        &self,
        key: &str,
        render: impl Fn() -> T,
        read: impl FnOnce(&T) -> R,
    ) -> R {
        let (cached_key, cached) = self.0.get_or_init(|| {
            let frame: Arc<dyn Any + Send + Sync> = Arc::new(render());
            (key.to_owned(), frame)
        });
        match cached.downcast_ref::<T>() {
            Some(frame) if cached_key == key => read(frame),
            _ => read(&render()),
        }
    }
}

/// The items of one commit that a subscription takes: the commit's items,
/// shared by every subscription of the session (a clone is a reference
/// count, so a thousand subscriptions do not each copy the commit), from
/// the first one this subscription has not been sent.
#[derive(Clone, Debug)]
pub struct Batch {
    items: Arc<[Item]>,
    from: usize,
}

impl Batch {
    /// The items, in order.
    pub fn items(&self) -> &[Item] {
        self.items.get(self.from..).unwrap_or_default()
    }
}

impl From<Vec<Item>> for Batch {
    fn from(items: Vec<Item>) -> Batch {
        Batch {
            items: items.into(),
            from: 0,
        }
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
    fn deliver(&self, subscription_id: &Arc<str>, item: &Item) -> Result<(), SinkRefusal>;
    /// Several items in order, as one commit published them. A sink whose
    /// consumer wakes per entry takes them as one; by default they are
    /// delivered one by one, and the first refusal ends the delivery.
    fn deliver_all(&self, subscription_id: &Arc<str>, items: Batch) -> Result<(), SinkRefusal> {
        items
            .items()
            .iter()
            .try_for_each(|item| self.deliver(subscription_id, item))
    }
    /// The subscription ended for `reason`; best effort.
    fn ended(&self, subscription_id: &str, session_id: &str, reason: &str, last_sequence: u64);
}

enum SubState {
    Replaying { buffer: Vec<Item> },
    Live { last_sent: u64 },
    Ended,
}

pub struct Subscription {
    /// Shared with every item delivered under it.
    pub id: Arc<str>,
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

/// Whether a live subscription that sent up to `last_sent` wants `item`.
fn wanted(item: &Item, last_sent: u64) -> bool {
    match item {
        Item::Durable(e, ..) => e.sequence > last_sent,
        Item::Ephemeral { after_sequence, .. } => *after_sequence >= last_sent,
    }
}

impl Subscription {
    /// Offers live items, in order, as one delivery; returns false when the
    /// subscription must go.
    fn offer_all(&self, items: &Arc<[Item]>) -> bool {
        let mut state = lock(&self.state);
        match &mut *state {
            SubState::Replaying { buffer } => {
                if buffer.len() + items.len() > REPLAY_BUFFER_ITEMS {
                    *state = SubState::Ended;
                    return false;
                }
                buffer.extend_from_slice(items);
                true
            }
            SubState::Live { last_sent } => {
                // A commit's rows come in sequence order, so what this
                // subscription was not sent yet is the commit from its
                // first such row on, shared as it is.
                let Some(from) = items.iter().position(|item| wanted(item, *last_sent)) else {
                    return true;
                };
                let mut last = *last_sent;
                let mut suffix = true;
                for item in &items[from..] {
                    suffix &= wanted(item, last);
                    if let Item::Durable(e, ..) = item {
                        last = last.max(e.sequence);
                    }
                }
                let batch = if suffix {
                    Batch {
                        items: items.clone(),
                        from,
                    }
                } else {
                    // Rows out of order: only the wanted ones, copied.
                    let mut last = *last_sent;
                    let mut wanted_items = Vec::new();
                    for item in &items[from..] {
                        if wanted(item, last) {
                            if let Item::Durable(e, ..) = item {
                                last = e.sequence;
                            }
                            wanted_items.push(item.clone());
                        }
                    }
                    Batch::from(wanted_items)
                };
                match self.sink.deliver_all(&self.id, batch) {
                    Ok(()) => {
                        *last_sent = last;
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
                if !wanted(item, *last_sent) {
                    return true;
                }
                match self.sink.deliver(&self.id, item) {
                    Ok(()) => {
                        if let Item::Durable(e, ..) = item {
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
    /// This session's subscriptions, by id.
    subscriptions: HashMap<String, Arc<Subscription>>,
}

impl SessionChannel {
    fn new(last_published: u64) -> SessionChannel {
        SessionChannel {
            last_published,
            subscriptions: HashMap::new(),
        }
    }
}

/// A sink's identity: the address of its allocation.
fn sink_key(sink: &Arc<dyn Sink>) -> usize {
    Arc::as_ptr(sink).cast::<()>() as usize
}

/// The hub's state under its one lock. Subscriptions are indexed by session
/// (publishing touches only that session's), by id (unsubscribing is one
/// lookup) and by sink (a closed connection drops only its own, and the
/// per-connection cap is one count).
#[derive(Default)]
struct State {
    sessions: HashMap<String, SessionChannel>,
    by_id: HashMap<String, String>,
    by_sink: HashMap<usize, HashSet<String>>,
}

impl State {
    /// Forgets `ids` of `session_id` and tells their sinks `reason`.
    fn drop_subscriptions(&mut self, session_id: &str, ids: Vec<String>, reason: Option<&str>) {
        for id in ids {
            let sub = self
                .sessions
                .get_mut(session_id)
                .and_then(|channel| channel.subscriptions.remove(&id));
            let Some(sub) = sub else {
                continue;
            };
            self.forget(&sub);
            if let Some(reason) = reason {
                sub.sink
                    .ended(&sub.id, &sub.session_id, reason, sub.last_sent());
            }
        }
    }

    /// Removes a subscription from the id and sink indexes.
    fn forget(&mut self, sub: &Subscription) {
        self.by_id.remove(&*sub.id);
        let key = sink_key(&sub.sink);
        if let Some(ids) = self.by_sink.get_mut(&key) {
            ids.remove(&*sub.id);
            if ids.is_empty() {
                self.by_sink.remove(&key);
            }
        }
    }
}

/// Sees every committed event and live update of every session as it is
/// published, under the hub's lock: it must not block or take the lock.
pub trait Tap: Send + Sync {
    /// Whether it wants items now; when not, none is rendered for it.
    fn wants(&self) -> bool;
    fn see(&self, session_id: &str, item: &Item);
}

/// All sessions' channels.
#[derive(Default)]
pub struct Hub {
    state: Mutex<State>,
    tap: std::sync::OnceLock<Box<dyn Tap>>,
}

/// A sink already holds its maximum number of subscriptions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManySubscriptions {
    pub held: u64,
}

impl Hub {
    /// Sets the tap that sees everything published from now on; once.
    pub fn set_tap(&self, tap: Box<dyn Tap>) {
        let _ = self.tap.set(tap);
    }

    /// Notes the latest committed sequence of a session whose writer starts.
    pub fn set_published(&self, session_id: &str, latest: u64) {
        let mut state = lock(&self.state);
        let channel = state
            .sessions
            .entry(session_id.to_owned())
            .or_insert_with(|| SessionChannel::new(latest));
        channel.last_published = channel.last_published.max(latest);
    }

    /// Publishes committed events, oldest first.
    pub fn publish(&self, session_id: &str, events: Vec<StoredEvent>) {
        let mut state = lock(&self.state);
        let Some(channel) = state.sessions.get_mut(session_id) else {
            return;
        };
        let tap = self.tap.get().filter(|tap| tap.wants());
        if let Some(latest) = events.iter().map(|event| event.sequence).max() {
            channel.last_published = channel.last_published.max(latest);
        }
        if channel.subscriptions.is_empty() && tap.is_none() {
            return;
        }
        let items: Arc<[Item]> = events.into_iter().map(Item::durable).collect();
        if items.is_empty() {
            return;
        }
        if let Some(tap) = tap {
            for item in items.iter() {
                tap.see(session_id, item);
            }
        }
        // Each subscription takes the commit's rows as one delivery: a
        // thousand sockets on one session are woken once per commit, not
        // once per row.
        let dropped: Vec<String> = channel
            .subscriptions
            .values()
            .filter(|sub| match &*items {
                [item] => !sub.offer(item),
                _ => !sub.offer_all(&items),
            })
            .map(|sub| sub.id.to_string())
            .collect();
        state.drop_subscriptions(session_id, dropped, Some("overflow"));
    }

    /// Publishes a live, ephemeral update after `after_sequence`.
    pub fn publish_ephemeral(&self, session_id: &str, after_sequence: u64, update: Value) {
        self.publish_ephemeral_with(session_id, after_sequence, || update);
    }

    /// [`Hub::publish_ephemeral`] of the update `update` makes, made only
    /// when anyone listens.
    pub fn publish_ephemeral_with(
        &self,
        session_id: &str,
        after_sequence: u64,
        update: impl FnOnce() -> Value,
    ) {
        let mut state = lock(&self.state);
        let Some(channel) = state.sessions.get_mut(session_id) else {
            return;
        };
        let tap = self.tap.get().filter(|tap| tap.wants());
        if channel.subscriptions.is_empty() && tap.is_none() {
            return;
        }
        let item = Item::Ephemeral {
            session_id: Arc::from(session_id),
            after_sequence,
            update: Arc::new(update()),
        };
        if let Some(tap) = tap {
            tap.see(session_id, &item);
        }
        let dropped: Vec<String> = channel
            .subscriptions
            .values()
            .filter(|sub| !sub.offer(&item))
            .map(|sub| sub.id.to_string())
            .collect();
        state.drop_subscriptions(session_id, dropped, Some("overflow"));
    }

    /// Registers a subscription in replay mode, unless `sink` already holds
    /// `max_per_sink`. Returns it and the sequence published at
    /// registration: replay covers `(after, upto]`.
    pub fn register(
        &self,
        id: String,
        session_id: &str,
        committed_latest: u64,
        sink: Arc<dyn Sink>,
        max_per_sink: u64,
    ) -> Result<(Arc<Subscription>, u64), TooManySubscriptions> {
        let mut state = lock(&self.state);
        let key = sink_key(&sink);
        let held = state.by_sink.get(&key).map_or(0, |ids| ids.len() as u64);
        if held >= max_per_sink {
            return Err(TooManySubscriptions { held });
        }
        let sub = Arc::new(Subscription {
            id: Arc::from(id.as_str()),
            session_id: session_id.to_owned(),
            sink,
            state: Mutex::new(SubState::Replaying { buffer: Vec::new() }),
        });
        state.by_id.insert(id.clone(), session_id.to_owned());
        state.by_sink.entry(key).or_default().insert(id.clone());
        let channel = state
            .sessions
            .entry(session_id.to_owned())
            .or_insert_with(|| SessionChannel::new(committed_latest));
        channel.subscriptions.insert(id, sub.clone());
        Ok((sub, channel.last_published))
    }

    /// Ends replay: drains what was published meanwhile and goes live.
    /// `last_sent` is the last durable sequence the replay delivered.
    pub fn go_live(&self, sub: &Arc<Subscription>, last_sent: u64) -> bool {
        let mut state = lock(&self.state);
        let mut sub_state = lock(&sub.state);
        let SubState::Replaying { buffer } = std::mem::replace(&mut *sub_state, SubState::Ended)
        else {
            return false;
        };
        let mut last = last_sent;
        for item in &buffer {
            if !wanted(item, last) {
                continue;
            }
            if sub.sink.deliver(&sub.id, item).is_err() {
                drop(sub_state);
                state.drop_subscriptions(
                    &sub.session_id,
                    vec![sub.id.to_string()],
                    Some("overflow"),
                );
                return false;
            }
            if let Item::Durable(e, ..) = item {
                last = e.sequence;
            }
        }
        *sub_state = SubState::Live { last_sent: last };
        true
    }

    /// Removes a subscription; true if it existed.
    pub fn unsubscribe(&self, subscription_id: &str) -> bool {
        let mut state = lock(&self.state);
        let Some(session_id) = state.by_id.get(subscription_id).cloned() else {
            return false;
        };
        let sub = state
            .sessions
            .get_mut(&session_id)
            .and_then(|channel| channel.subscriptions.remove(subscription_id));
        match sub {
            Some(sub) => {
                state.forget(&sub);
                *lock(&sub.state) = SubState::Ended;
                true
            }
            None => {
                state.by_id.remove(subscription_id);
                false
            }
        }
    }

    /// Ends every subscription of a session whose committed rows could not
    /// be published; the channel stays for the session's writer.
    pub fn end_subscriptions(&self, session_id: &str, reason: &str) {
        let mut state = lock(&self.state);
        let ids: Vec<String> = match state.sessions.get(session_id) {
            Some(channel) => channel.subscriptions.keys().cloned().collect(),
            None => return,
        };
        state.drop_subscriptions(session_id, ids, Some(reason));
    }

    /// Ends every subscription of a deleted session.
    pub fn close_session(&self, session_id: &str, reason: &str) {
        let mut state = lock(&self.state);
        self.end_locked(&mut state, session_id, reason);
        state.sessions.remove(session_id);
    }

    fn end_locked(&self, state: &mut State, session_id: &str, reason: &str) {
        let ids: Vec<String> = match state.sessions.get(session_id) {
            Some(channel) => channel.subscriptions.keys().cloned().collect(),
            None => return,
        };
        state.drop_subscriptions(session_id, ids, Some(reason));
    }

    /// Ends the subscriptions delivering to `sink` (a closed connection).
    pub fn drop_sink(&self, sink: &Arc<dyn Sink>) {
        let mut state = lock(&self.state);
        let Some(ids) = state.by_sink.remove(&sink_key(sink)) else {
            return;
        };
        for id in ids {
            let Some(session_id) = state.by_id.remove(&id) else {
                continue;
            };
            if let Some(channel) = state.sessions.get_mut(&session_id) {
                if let Some(sub) = channel.subscriptions.remove(&id) {
                    *lock(&sub.state) = SubState::Ended;
                }
            }
        }
    }

    /// Subscriptions `sink` holds.
    pub fn subscriptions_of(&self, sink: &Arc<dyn Sink>) -> usize {
        lock(&self.state)
            .by_sink
            .get(&sink_key(sink))
            .map_or(0, HashSet::len)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use agentos_protocol::session::{Actor, EventKind};

    use super::*;

    /// A sink that records each delivery as the sequences it carried (and
    /// each commit's batch as handed over), and refuses once
    /// `refuse_after` deliveries were made.
    #[derive(Default)]
    struct Recorder {
        deliveries: Mutex<Vec<Vec<u64>>>,
        batches: Mutex<Vec<Batch>>,
        ended: Mutex<Vec<String>>,
        refuse_after: Option<usize>,
    }

    fn sequence(item: &Item) -> u64 {
        match item {
            Item::Durable(event, ..) => event.sequence,
            Item::Ephemeral { after_sequence, .. } => *after_sequence,
        }
    }

    impl Recorder {
        fn record(&self, sequences: Vec<u64>) -> Result<(), SinkRefusal> {
            let mut deliveries = lock(&self.deliveries);
            if self.refuse_after.is_some_and(|n| deliveries.len() >= n) {
                return Err(SinkRefusal::Overflow);
            }
            deliveries.push(sequences);
            Ok(())
        }
    }

    impl Sink for Recorder {
        fn deliver(&self, _: &Arc<str>, item: &Item) -> Result<(), SinkRefusal> {
            self.record(vec![sequence(item)])
        }

        fn deliver_all(&self, _: &Arc<str>, items: Batch) -> Result<(), SinkRefusal> {
            self.record(items.items().iter().map(sequence).collect())?;
            lock(&self.batches).push(items);
            Ok(())
        }

        fn ended(&self, _: &str, _: &str, reason: &str, _: u64) {
            lock(&self.ended).push(reason.to_owned());
        }
    }

    fn event(sequence: u64) -> StoredEvent {
        StoredEvent {
            session_id: "s".into(),
            sequence,
            timestamp_ms: 1,
            kind: EventKind::SessionUpdate,
            correlation_id: None,
            outcome_status: None,
            terminal_reason: None,
            actor: Actor::Agent,
            payload_json: "{}".into(),
        }
    }

    fn events(sequences: std::ops::RangeInclusive<u64>) -> Vec<StoredEvent> {
        sequences.map(event).collect()
    }

    /// A hub with one live subscription of session `s`, sent up to row 1.
    fn live(sink: Arc<Recorder>) -> Hub {
        let hub = Hub::default();
        hub.set_published("s", 1);
        let (sub, _) = hub
            .register("sub".into(), "s", 1, sink, 8)
            .expect("registered");
        assert!(hub.go_live(&sub, 1));
        hub
    }

    #[test]
    fn a_commit_reaches_a_subscription_as_one_delivery_in_order() {
        let sink = Arc::new(Recorder::default());
        let hub = live(sink.clone());
        hub.publish("s", events(2..=4));
        hub.publish("s", events(5..=5));
        // Rows already sent are skipped, even within a commit.
        hub.publish("s", events(4..=6));
        hub.publish("s", events(3..=5));
        assert_eq!(
            *lock(&sink.deliveries),
            vec![vec![2, 3, 4], vec![5], vec![6]]
        );
        assert!(lock(&sink.ended).is_empty());
    }

    #[test]
    fn subscriptions_share_a_commit_each_from_its_first_row_not_sent() {
        let first = Arc::new(Recorder::default());
        let second = Arc::new(Recorder::default());
        let hub = live(first.clone());
        // The second replayed up to row 3 before going live.
        let (sub, _) = hub
            .register("second".into(), "s", 1, second.clone(), 8)
            .expect("registered");
        assert!(hub.go_live(&sub, 3));
        hub.publish("s", events(2..=5));
        assert_eq!(*lock(&first.deliveries), vec![vec![2, 3, 4, 5]]);
        assert_eq!(*lock(&second.deliveries), vec![vec![4, 5]]);
        // One commit, one copy of its items, whatever each was sent.
        {
            let (a, b) = (lock(&first.batches), lock(&second.batches));
            assert!(Arc::ptr_eq(&a[0].items, &b[0].items));
        }
        // Rows out of order within a commit (never from a session's single
        // writer, but never sent twice either): the unsent ones, in order.
        let hub = live(first.clone());
        hub.publish("s", events(2..=2));
        hub.publish("s", vec![event(4), event(3), event(5)]);
        assert_eq!(lock(&first.deliveries)[1..], [vec![2], vec![4, 5]]);
    }

    #[test]
    fn a_refused_commit_ends_the_subscription_with_overflow() {
        let sink = Arc::new(Recorder {
            refuse_after: Some(1),
            ..Recorder::default()
        });
        let hub = live(sink.clone());
        hub.publish("s", events(2..=3));
        hub.publish("s", events(4..=5));
        assert_eq!(*lock(&sink.ended), vec!["overflow".to_owned()]);
        // Gone: nothing more is offered.
        hub.publish("s", events(6..=7));
        assert_eq!(*lock(&sink.deliveries), vec![vec![2, 3]]);
    }

    #[test]
    fn a_frame_is_rendered_once_for_its_key_and_anew_for_another() {
        let cache = FrameCache::default();
        let renders = AtomicUsize::new(0);
        let render = |key: &'static str| {
            let renders = &renders;
            move || {
                renders.fetch_add(1, Ordering::SeqCst);
                format!("frame of {key}")
            }
        };
        let at = |frame: &String| (frame.as_ptr(), frame.clone());
        let (first, text) = cache.with("sessions/s", render("sessions/s"), at);
        for _ in 0..1_000 {
            let (again, _) = cache.with("sessions/s", render("sessions/s"), at);
            // The one frame, not a copy.
            assert_eq!(first, again);
        }
        assert_eq!(text, "frame of sessions/s");
        assert_eq!(renders.load(Ordering::SeqCst), 1);
        let (_, other) = cache.with("sessions/t", render("sessions/t"), at);
        assert_eq!(other, "frame of sessions/t");
        assert_eq!(renders.load(Ordering::SeqCst), 2);
        // Another door's frame type for the same key is its own.
        let typed = cache.with("sessions/s", || 7u32, |n| *n);
        assert_eq!(typed, 7);
        assert_eq!(renders.load(Ordering::SeqCst), 2);
    }
}
