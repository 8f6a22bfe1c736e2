//! A budget of bytes shared by many holders: taken whole or not at all,
//! either at once (`try_take`) or by waiting for room (`take`), and given
//! back when the [`Held`] share is dropped. Unlike a fair semaphore, a
//! large taker that waits holds nothing meanwhile, so small takers still
//! find the room that is left.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

pub struct ByteBudget {
    max: usize,
    used: AtomicUsize,
    room: Notify,
}

/// A share of a [`ByteBudget`], given back on drop.
#[must_use]
pub struct Held {
    /// `None` once handed over with [`Held::into_bytes`].
    budget: Option<Arc<ByteBudget>>,
    bytes: usize,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").field("bytes", &self.bytes).finish()
    }
}

impl Held {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Keeps the bytes taken without the guard: whoever holds the count
    /// gives it back with [`ByteBudget::give`].
    pub fn into_bytes(mut self) -> usize {
        self.budget = None;
        self.bytes
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.give(self.bytes);
        }
    }
}

impl std::fmt::Debug for ByteBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteBudget")
            .field("max", &self.max)
            .field("used", &self.used())
            .finish()
    }
}

impl ByteBudget {
    pub fn new(max: usize) -> Arc<ByteBudget> {
        Arc::new(ByteBudget {
            max,
            used: AtomicUsize::new(0),
            room: Notify::new(),
        })
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// Takes `n` bytes (at most the whole budget) if they fit now.
    pub fn try_take(self: &Arc<Self>, n: usize) -> Option<Held> {
        let n = n.min(self.max);
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used.saturating_add(n) <= self.max).then(|| used + n)
            })
            .ok()
            .map(|_| Held {
                budget: Some(self.clone()),
                bytes: n,
            })
    }

    /// Takes `n` bytes (at most the whole budget), waiting for room.
    pub async fn take(self: &Arc<Self>, n: usize) -> Held {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if let Some(held) = self.try_take(n) {
                return held;
            }
            room.await;
        }
    }

    /// Gives back bytes kept with [`Held::into_bytes`].
    pub fn give(&self, n: usize) {
        if n > 0 {
            self.used.fetch_sub(n, Ordering::AcqRel);
            self.room.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiting_large_taker_leaves_room_for_small_ones() {
        let budget = ByteBudget::new(100);
        let first = budget.try_take(70).expect("room");
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.take(60).await.bytes() }
        });
        tokio::task::yield_now().await;
        // The large taker waits holding nothing: a small one still fits.
        let small = budget.try_take(30).expect("the rest is free");
        assert!(budget.try_take(1).is_none());
        drop(small);
        drop(first);
        assert_eq!(waiting.await.expect("join"), 60);
        assert_eq!(budget.used(), 0);
        // More than the whole budget takes the whole budget.
        assert_eq!(budget.try_take(500).expect("alone").bytes(), 100);
    }
}
