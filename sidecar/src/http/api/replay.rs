//! The replay cache: every accepted signature is remembered until its
//! timestamp window closes, so a captured request cannot be sent again.
//!
//! Bounded by a count. When full, the entries with the oldest timestamps go
//! first and the cache remembers the newest timestamp it forgot (`floor`):
//! a request at or before it can no longer be told apart from a replay and
//! is refused.

use std::collections::{BTreeSet, HashSet};
use std::sync::Mutex;

type Signature = [u8; 64];

pub struct ReplayCache {
    max_entries: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    seen: HashSet<Signature>,
    by_ts: BTreeSet<(i64, Signature)>,
    floor: Option<i64>,
}

/// Why a request was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// This exact signed request was accepted before.
    Replayed,
    /// Older than what the cache still remembers, when it was full.
    Forgotten,
}

impl ReplayCache {
    pub fn new(max_entries: u64) -> ReplayCache {
        ReplayCache {
            max_entries: usize::try_from(max_entries).unwrap_or(usize::MAX).max(1),
            state: Mutex::new(State::default()),
        }
    }

    /// Admits a verified request signed at `ts` (ms), whose window makes it
    /// acceptable until `ts + window`; expired entries are dropped first.
    pub fn admit(&self, sig: &Signature, ts: i64, now: i64, window: i64) -> Result<(), Refusal> {
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        let oldest_valid = now.saturating_sub(window);
        while let Some(&(first_ts, first_sig)) = state.by_ts.first() {
            if first_ts >= oldest_valid {
                break;
            }
            state.by_ts.remove(&(first_ts, first_sig));
            state.seen.remove(&first_sig);
        }
        if state.seen.contains(sig) {
            return Err(Refusal::Replayed);
        }
        if state.floor.is_some_and(|floor| ts <= floor) {
            return Err(Refusal::Forgotten);
        }
        while state.seen.len() >= self.max_entries {
            let Some(&(first_ts, first_sig)) = state.by_ts.first() else {
                break;
            };
            // Making room would forget a request newer than this one.
            if ts <= first_ts {
                return Err(Refusal::Forgotten);
            }
            state.by_ts.remove(&(first_ts, first_sig));
            state.seen.remove(&first_sig);
            state.floor = Some(state.floor.map_or(first_ts, |f| f.max(first_ts)));
        }
        state.seen.insert(*sig);
        state.by_ts.insert((ts, *sig));
        Ok(())
    }

    pub fn len(&self) -> usize {
        match self.state.lock() {
            Ok(state) => state.seen.len(),
            Err(poisoned) => poisoned.into_inner().seen.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(n: u8) -> Signature {
        [n; 64]
    }

    #[test]
    fn a_signature_is_accepted_once_within_its_window() {
        let cache = ReplayCache::new(10);
        assert_eq!(cache.admit(&sig(1), 1_000, 1_000, 300), Ok(()));
        assert_eq!(
            cache.admit(&sig(1), 1_000, 1_100, 300),
            Err(Refusal::Replayed)
        );
        assert_eq!(cache.admit(&sig(2), 1_050, 1_100, 300), Ok(()));
        // Once the window closed the entry is dropped (the window check
        // refuses such a request before it reaches the cache).
        cache.admit(&sig(3), 2_000, 2_000, 300).unwrap();
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn when_full_the_oldest_go_and_older_requests_are_refused() {
        let cache = ReplayCache::new(3);
        for (i, ts) in [(1, 100), (2, 200), (3, 300)] {
            cache.admit(&sig(i), ts, 300, 1_000).unwrap();
        }
        // Full: the entry at 100 goes, and 100 becomes the floor.
        cache.admit(&sig(4), 400, 400, 1_000).unwrap();
        assert_eq!(cache.len(), 3);
        assert_eq!(
            cache.admit(&sig(1), 100, 400, 1_000),
            Err(Refusal::Forgotten)
        );
        assert_eq!(
            cache.admit(&sig(9), 90, 400, 1_000),
            Err(Refusal::Forgotten)
        );
        // Still remembered entries are replays, newer ones are fine.
        assert_eq!(
            cache.admit(&sig(2), 200, 400, 1_000),
            Err(Refusal::Replayed)
        );
        cache.admit(&sig(5), 350, 400, 1_000).unwrap();
        assert_eq!(cache.len(), 3);
        // A request older than every entry that must go for it is refused.
        assert_eq!(
            cache.admit(&sig(6), 150, 400, 1_000),
            Err(Refusal::Forgotten)
        );
    }
}
