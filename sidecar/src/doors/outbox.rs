//! One connection's queue of outgoing entries, bounded in bytes, with every
//! connection's bytes also counted in one process-wide [`Pool`]: the outbox
//! of both front doors (a host connection's frames, a WebSocket's entries).
//! Whoever queues never waits for the peer; the connection's writer takes
//! entries off in order and gives their bytes back as it sends them.
//!
//! What a full bound does is the door's, chosen when the pool and each
//! outbox are made, never written twice:
//!
//! - one connection over its own bound: [`Overflow::Refuse`] refuses the
//!   entry and leaves the choice to the caller (the host door stops reading
//!   the connection, drops a notice and counts it, ends a subscription with
//!   `overflow`), and marks the connection starved until its writer makes
//!   progress; [`Overflow::Close`] closes the connection with the given
//!   reason (a WebSocket that fell behind).
//! - every connection together over the pool: [`PoolOverflow::Refuse`]
//!   refuses as above; [`PoolOverflow::CloseFurthestBehind`] takes the
//!   entry, then closes the connections holding the most, with the given
//!   reason, until the total is back under seven eighths of the pool, so a
//!   connection that reads keeps a short queue and keeps receiving.
//!
//! Either way an entry larger than a whole bound still passes when nothing
//! else is queued there, so no single entry is undeliverable. A closed
//! outbox's bytes leave the pool at once and nothing more is counted on
//! it; an outbox whose handles and queue are all dropped takes its bytes
//! with it.
//!
//! The pool is its own counter rather than a `ByteBudget`: a door may
//! charge past it (an answer to a request already admitted, a notice that
//! must not be lost), and the furthest-behind policy needs to know whose
//! bytes they are.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::{mpsc, watch, Notify};

/// Why and how a connection is closed (for a WebSocket, its close code and
/// reason; the reason names the setting that was passed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Close {
    pub code: u16,
    pub reason: &'static str,
}

/// What one connection's outbox does with an entry over its own bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Refuses it; the caller decides what that means.
    Refuse,
    /// Closes the connection with this reason.
    Close(Close),
}

/// What the pool does when every connection's bytes together pass it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolOverflow {
    /// Refuses the entry (unless nothing at all is queued); takers that
    /// must not lose it wait for room ([`Outbox::reserve`]).
    Refuse,
    /// Takes it, then closes the connections holding the most with this
    /// reason until the total is at most seven eighths of the pool.
    CloseFurthestBehind(Close),
}

/// Why an entry was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// It did not fit (and, under [`Overflow::Close`] or the
    /// furthest-behind policy, the connection is now closing).
    Full,
    /// The connection is closed or its writer is gone.
    Closed,
}

/// Told of every byte that enters or leaves a pool (a door's status
/// counters).
pub trait Tally: Send + Sync {
    fn queued(&self, bytes: usize);
    fn dequeued(&self, bytes: usize);
}

/// The bytes queued to every connection of a door, against its
/// process-wide setting.
pub struct Pool {
    limit: usize,
    total: AtomicUsize,
    overflow: PoolOverflow,
    /// Notified when bytes leave, for the takers that wait (refusing pools
    /// only).
    room: Notify,
    tally: Option<Arc<dyn Tally>>,
    /// The outboxes the furthest-behind policy may close.
    members: Mutex<HashMap<u64, Weak<Meter>>>,
    next_id: AtomicU64,
    /// One relief at a time; the others' pushes are covered by it.
    relieving: Mutex<()>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    pub fn new(limit: u64, overflow: PoolOverflow) -> Arc<Pool> {
        Pool::build(limit, overflow, None)
    }

    /// A pool whose every change is also told to `tally`.
    pub fn with_tally(limit: u64, overflow: PoolOverflow, tally: Arc<dyn Tally>) -> Arc<Pool> {
        Pool::build(limit, overflow, Some(tally))
    }

    fn build(limit: u64, overflow: PoolOverflow, tally: Option<Arc<dyn Tally>>) -> Arc<Pool> {
        Arc::new(Pool {
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            total: AtomicUsize::new(0),
            overflow,
            room: Notify::new(),
            tally,
            members: Mutex::default(),
            next_id: AtomicU64::new(1),
            relieving: Mutex::new(()),
        })
    }

    /// Bytes queued to all connections now.
    pub fn queued(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// Counts `n` bytes whatever the limit; answers the new total.
    fn add(&self, n: usize) -> usize {
        if let Some(tally) = &self.tally {
            tally.queued(n);
        }
        self.total.fetch_add(n, Ordering::AcqRel).saturating_add(n)
    }

    /// Counts `n` bytes if this pool's policy lets them in now.
    fn try_add(&self, n: usize) -> bool {
        if let PoolOverflow::CloseFurthestBehind(_) = self.overflow {
            self.add(n);
            return true;
        }
        let added = self
            .total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |total| {
                (total == 0 || total.saturating_add(n) <= self.limit)
                    .then(|| total.saturating_add(n))
            })
            .is_ok();
        if added {
            if let Some(tally) = &self.tally {
                tally.queued(n);
            }
        }
        added
    }

    fn sub(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.total.fetch_sub(n, Ordering::AcqRel);
        if let Some(tally) = &self.tally {
            tally.dequeued(n);
        }
        if self.overflow == PoolOverflow::Refuse {
            self.room.notify_waiters();
        }
    }

    /// Under the furthest-behind policy and over the pool: closes the
    /// connections holding the most until the total is back under seven
    /// eighths of it.
    fn relieve(&self) {
        let PoolOverflow::CloseFurthestBehind(why) = &self.overflow else {
            return;
        };
        if self.queued() <= self.limit {
            return;
        }
        let Ok(_one) = self.relieving.try_lock() else {
            return;
        };
        let target = self.limit - self.limit / 8;
        let mut behind: Vec<(usize, Arc<Meter>)> = lock(&self.members)
            .values()
            .filter_map(Weak::upgrade)
            .map(|meter| (meter.queued(), meter))
            .collect();
        behind.sort_by_key(|entry| std::cmp::Reverse(entry.0));
        let mut closed = 0usize;
        for (_, meter) in behind {
            if self.queued() <= target {
                break;
            }
            meter.close(why.clone());
            closed += 1;
        }
        tracing::warn!(
            closed,
            queued = self.queued(),
            limit = self.limit,
            reason = why.reason,
            "closed the connections furthest behind"
        );
    }
}

/// What one connection has queued, shared by every handle of its outbox
/// (and, weakly, by the pool that may close it).
struct Meter {
    id: u64,
    limit: usize,
    overflow: Overflow,
    queued: Mutex<Queued>,
    close: watch::Sender<Option<Close>>,
    /// Notified when bytes leave, for the takers that wait (refusing
    /// outboxes only).
    room: Notify,
    /// Something was refused since the writer last made progress.
    starved: AtomicBool,
    pool: Arc<Pool>,
}

#[derive(Default)]
struct Queued {
    bytes: usize,
    /// Closed: its bytes left the pool, nothing more is counted.
    closed: bool,
}

impl Meter {
    fn queued(&self) -> usize {
        lock(&self.queued).bytes
    }

    /// Takes `n` bytes if they fit this connection's bound and the pool's
    /// policy; otherwise applies this connection's overflow.
    fn try_charge(&self, n: usize) -> Result<(), Refused> {
        let mut queued = lock(&self.queued);
        if queued.closed {
            return Err(Refused::Closed);
        }
        if queued.bytes != 0 && queued.bytes.saturating_add(n) > self.limit {
            let bytes = queued.bytes;
            drop(queued);
            self.starved.store(true, Ordering::Release);
            if let Overflow::Close(why) = &self.overflow {
                tracing::warn!(
                    queued = bytes,
                    limit = self.limit,
                    reason = why.reason,
                    "closing a connection over its queue bound"
                );
                self.close(why.clone());
            }
            return Err(Refused::Full);
        }
        if !self.pool.try_add(n) {
            drop(queued);
            self.starved.store(true, Ordering::Release);
            return Err(Refused::Full);
        }
        queued.bytes += n;
        Ok(())
    }

    /// Takes `n` bytes whatever the bounds (nothing once closed).
    fn charge(&self, n: usize) {
        let mut queued = lock(&self.queued);
        if queued.closed {
            return;
        }
        queued.bytes += n;
        self.pool.add(n);
    }

    fn release(&self, n: usize) {
        let mut queued = lock(&self.queued);
        if queued.closed || n == 0 {
            return;
        }
        let n = n.min(queued.bytes);
        queued.bytes -= n;
        drop(queued);
        self.pool.sub(n);
        if self.overflow == Overflow::Refuse {
            self.room.notify_waiters();
        }
    }

    /// Asks the connection to close (the first reason wins) and takes its
    /// bytes out of the pool.
    fn close(&self, why: Close) {
        self.close.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(why);
            true
        });
        self.forget();
    }

    fn forget(&self) {
        let mut queued = lock(&self.queued);
        if !queued.closed {
            queued.closed = true;
            let bytes = std::mem::take(&mut queued.bytes);
            drop(queued);
            self.pool.sub(bytes);
        }
    }

    fn is_closing(&self) -> bool {
        self.close.borrow().is_some()
    }

    fn over(&self) -> bool {
        self.starved.load(Ordering::Acquire) || self.queued() > self.limit
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.forget();
        lock(&self.pool.members).remove(&self.id);
    }
}

/// The writer's side of an outbox: the entries in order, each with the
/// bytes it was charged, which the writer gives back as it sends them.
/// It holds the connection's count, so what it has not given back stays
/// counted until it does or the connection closes.
pub struct Queue<T> {
    rx: mpsc::UnboundedReceiver<(T, usize)>,
    meter: Arc<Meter>,
}

impl<T> Queue<T> {
    pub async fn recv(&mut self) -> Option<(T, usize)> {
        self.rx.recv().await
    }

    pub fn try_recv(&mut self) -> Result<(T, usize), mpsc::error::TryRecvError> {
        self.rx.try_recv()
    }

    /// Takes no more entries: later pushes fail and give their bytes back.
    pub fn close(&mut self) {
        self.rx.close();
    }

    /// Gives back `n` bytes the writer sent or dropped.
    pub fn release(&self, n: usize) {
        self.meter.release(n);
    }

    /// Bytes charged to this connection now.
    pub fn queued(&self) -> usize {
        self.meter.queued()
    }

    /// Over its bound, or something was refused since the writer last made
    /// progress.
    pub fn over(&self) -> bool {
        self.meter.over()
    }

    /// The writer made progress: the connection is no longer starved.
    pub fn progressed(&self) {
        self.meter.starved.store(false, Ordering::Release);
    }

    /// Asks the connection to close; the first reason wins.
    pub fn close_with(&self, why: Close) {
        self.meter.close(why);
    }

    /// Watches for the close request.
    pub fn closing(&self) -> watch::Receiver<Option<Close>> {
        self.meter.close.subscribe()
    }
}

/// A handle on one connection's outbox; every clone queues to the same
/// writer and counts against the same bound.
pub struct Outbox<T> {
    tx: mpsc::UnboundedSender<(T, usize)>,
    meter: Arc<Meter>,
}

impl<T> Clone for Outbox<T> {
    fn clone(&self) -> Self {
        Outbox {
            tx: self.tx.clone(),
            meter: self.meter.clone(),
        }
    }
}

impl<T> Outbox<T> {
    /// A connection's outbox bounded by `limit` bytes, counted in `pool`,
    /// and the queue its writer reads.
    pub fn new(pool: &Arc<Pool>, limit: u64, overflow: Overflow) -> (Outbox<T>, Queue<T>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (close, _) = watch::channel(None);
        let id = pool.next_id.fetch_add(1, Ordering::Relaxed);
        let meter = Arc::new(Meter {
            id,
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            overflow,
            queued: Mutex::default(),
            close,
            room: Notify::new(),
            starved: AtomicBool::new(false),
            pool: pool.clone(),
        });
        if let PoolOverflow::CloseFurthestBehind(_) = pool.overflow {
            lock(&pool.members).insert(id, Arc::downgrade(&meter));
        }
        let queue = Queue {
            rx,
            meter: meter.clone(),
        };
        (Outbox { tx, meter }, queue)
    }

    /// The bytes this outbox may hold.
    pub fn limit(&self) -> usize {
        self.meter.limit
    }

    /// Queues `entry`, charged `n` bytes, if it fits; otherwise applies the
    /// overflow policies. An entry queued just before the pool's relief
    /// closed this connection is refused too: it will not be sent.
    pub fn push(&self, entry: T, n: usize) -> Result<(), Refused> {
        self.meter.try_charge(n)?;
        if !self.send_charged(entry, n) {
            return Err(Refused::Closed);
        }
        self.meter.pool.relieve();
        if self.meter.is_closing() {
            return Err(Refused::Full);
        }
        Ok(())
    }

    /// Takes `n` bytes if they fit, for an entry queued later with
    /// [`Outbox::send_charged`] or for an answer being made.
    pub fn try_charge(&self, n: usize) -> bool {
        let charged = self.meter.try_charge(n).is_ok();
        if charged {
            self.meter.pool.relieve();
        }
        charged
    }

    /// Takes `n` bytes whether or not they fit (an answer to a request that
    /// was admitted, a small entry that must not be lost).
    pub fn charge(&self, n: usize) {
        self.meter.charge(n);
        self.meter.pool.relieve();
    }

    /// Waits until `n` bytes fit, and takes them. For refusing outboxes
    /// and pools: the caller holds back (a host connection is not read)
    /// until the writer makes room.
    pub async fn reserve(&self, n: usize) {
        loop {
            let room = self.meter.room.notified();
            let anywhere = self.meter.pool.room.notified();
            tokio::pin!(room);
            tokio::pin!(anywhere);
            room.as_mut().enable();
            anywhere.as_mut().enable();
            match self.meter.try_charge(n) {
                Ok(()) => return,
                // Closed: nothing will make room; the caller learns it from
                // its writer.
                Err(Refused::Closed) => return,
                Err(Refused::Full) if self.meter.is_closing() => return,
                Err(Refused::Full) => {}
            }
            tokio::select! {
                () = room => {}
                () = anywhere => {}
            }
        }
    }

    /// Queues an entry whose `n` bytes are already charged; false (and the
    /// bytes given back) when the writer is gone.
    pub fn send_charged(&self, entry: T, n: usize) -> bool {
        if self.tx.send((entry, n)).is_ok() {
            true
        } else {
            self.meter.release(n);
            false
        }
    }

    /// Gives back `n` bytes: the writer sent (or dropped) them, or a
    /// reservation was more than its answer needed.
    pub fn release(&self, n: usize) {
        self.meter.release(n);
    }

    /// Bytes charged to this connection now.
    pub fn queued(&self) -> usize {
        self.meter.queued()
    }

    /// Whether the writer is gone.
    pub fn is_gone(&self) -> bool {
        self.tx.is_closed()
    }

    /// Asks the connection to close; the first reason wins, and its bytes
    /// leave the pool now.
    pub fn close(&self, why: Close) {
        self.meter.close(why);
    }

    pub fn is_closing(&self) -> bool {
        self.meter.is_closing()
    }

    /// Watches for the close request.
    pub fn closing(&self) -> watch::Receiver<Option<Close>> {
        self.meter.close.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEHIND: Close = Close {
        code: 1008,
        reason: "behind",
    };
    const OVER: Close = Close {
        code: 1008,
        reason: "over",
    };

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Tally for Count {
        fn queued(&self, bytes: usize) {
            self.0.fetch_add(bytes, Ordering::AcqRel);
        }
        fn dequeued(&self, bytes: usize) {
            self.0.fetch_sub(bytes, Ordering::AcqRel);
        }
    }

    #[test]
    fn a_refusing_outbox_refuses_marks_itself_starved_and_stays_open() {
        let count = Arc::new(Count::default());
        let pool = Pool::with_tally(1000, PoolOverflow::Refuse, count.clone());
        let (outbox, mut queue) = Outbox::<u8>::new(&pool, 100, Overflow::Refuse);
        // Alone, an entry larger than the bound passes.
        assert_eq!(outbox.push(1, 150), Ok(()));
        assert_eq!(outbox.push(2, 1), Err(Refused::Full));
        assert!(queue.over() && !outbox.is_closing());
        let (_, n) = queue.try_recv().unwrap();
        queue.release(n);
        queue.progressed();
        assert!(!queue.over());
        assert_eq!(outbox.push(3, 60), Ok(()));
        // Charged past the bound when it must not be lost.
        outbox.charge(60);
        assert_eq!(outbox.queued(), 120);
        assert_eq!(count.0.load(Ordering::Acquire), 120);
        assert!(queue.over());
        outbox.release(120);
        assert_eq!(pool.queued(), 0);
        assert_eq!(count.0.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_refusing_pool_refuses_what_passes_it_unless_it_is_empty() {
        let pool = Pool::new(100, PoolOverflow::Refuse);
        let (a, _qa) = Outbox::<u8>::new(&pool, 1000, Overflow::Refuse);
        let (b, _qb) = Outbox::<u8>::new(&pool, 1000, Overflow::Refuse);
        assert!(a.try_charge(500), "alone in the pool");
        assert!(!b.try_charge(1));
        assert_eq!(b.queued(), 0);
        a.release(500);
        assert!(b.try_charge(60) && a.try_charge(40));
        assert!(!a.try_charge(1));
        assert_eq!(pool.queued(), 100);
    }

    #[tokio::test]
    async fn a_reservation_waits_for_the_writer() {
        let pool = Pool::new(1000, PoolOverflow::Refuse);
        let (outbox, _queue) = Outbox::<u8>::new(&pool, 100, Overflow::Refuse);
        assert!(outbox.try_charge(100));
        let waiting = tokio::spawn({
            let outbox = outbox.clone();
            async move { outbox.reserve(50).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        outbox.release(100);
        waiting.await.unwrap();
        assert_eq!(outbox.queued(), 50);
    }

    #[test]
    fn a_closing_outbox_closes_over_its_bound_and_lets_its_bytes_go() {
        let pool = Pool::new(1 << 30, PoolOverflow::CloseFurthestBehind(BEHIND));
        let (outbox, _queue) = Outbox::<u8>::new(&pool, 100, Overflow::Close(OVER));
        assert_eq!(outbox.push(1, 60), Ok(()));
        assert_eq!(outbox.push(2, 40), Ok(()));
        assert_eq!(outbox.push(3, 1), Err(Refused::Full));
        assert_eq!(*outbox.closing().borrow(), Some(OVER));
        assert_eq!(pool.queued(), 0);
        assert_eq!(outbox.push(4, 1), Err(Refused::Closed));
        outbox.close(BEHIND);
        assert_eq!(*outbox.closing().borrow(), Some(OVER), "the first wins");
        outbox.release(60);
        assert_eq!(pool.queued(), 0);
    }

    #[test]
    fn past_the_pool_the_furthest_behind_close_until_seven_eighths() {
        let pool = Pool::new(1000, PoolOverflow::CloseFurthestBehind(BEHIND));
        let open = |limit| Outbox::<u8>::new(&pool, limit, Overflow::Close(OVER));
        let (a, _qa) = open(10_000);
        let (b, _qb) = open(10_000);
        for _ in 0..4 {
            assert_eq!(a.push(0, 100), Ok(()));
        }
        for _ in 0..6 {
            assert_eq!(b.push(0, 100), Ok(()));
        }
        // 1,100 > 1,000: b holds most and goes; 400 is under 875.
        assert_eq!(a.push(0, 100), Ok(()));
        assert_eq!(*b.closing().borrow(), Some(BEHIND));
        assert!(!a.is_closing());
        assert_eq!(pool.queued(), 500);
        drop((a, _qa));
        assert_eq!(pool.queued(), 0, "a dropped outbox's bytes leave");
    }
}
