//! The replay cache: every accepted signature is remembered until its
//! timestamp window closes, so a captured request cannot be sent again.
//!
//! Bounded by a count. When full, the entries with the oldest timestamps go
//! first and the cache remembers, for the key that signed each forgotten
//! entry, the newest timestamp it forgot (that signer's floor): a request of
//! that signer at or before its floor can no longer be told apart from a
//! replay and is refused. The floor is per signer so that one key flooding
//! the cache (future timestamps are allowed up to the window) makes only its
//! own older requests unverifiable, never another signer's.
//!
//! The floors are bounded too: a floor older than the window refuses nothing
//! the window does not, so it is dropped once there are more floors than
//! entries; if still too many remain (very many keys evicted within one
//! window), the lowest are folded into one floor shared by every signer,
//! which refuses more than needed but never admits a replay.
//!
//! The cache keeps its own clock: the highest `now` any caller gave, under
//! the lock, so it never moves backwards. A request older than that clock's
//! window is refused here even if the caller's own window check, made with
//! an earlier `now`, passed: its entry may already have been purged.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

type Signature = [u8; 64];
/// The Ed25519 public key that signed a request.
type Signer = [u8; 32];

pub struct ReplayCache {
    max_entries: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    seen: HashSet<Signature>,
    by_ts: BTreeSet<(i64, Signature, Signer)>,
    floors: HashMap<Signer, i64>,
    /// Floor of every signer whose own floor was folded away.
    shared_floor: Option<i64>,
    /// The highest `now` seen (ms).
    high_water: i64,
}

/// Why a request was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// This exact signed request was accepted before.
    Replayed,
    /// At or before its signer's floor: older than what the cache still
    /// remembers of that signer.
    Forgotten,
    /// Outside the window of the cache's own clock.
    Expired,
}

impl ReplayCache {
    pub fn new(max_entries: u64) -> ReplayCache {
        ReplayCache {
            max_entries: usize::try_from(max_entries).unwrap_or(usize::MAX).max(1),
            state: Mutex::new(State {
                high_water: i64::MIN,
                ..State::default()
            }),
        }
    }

    /// Admits a verified request that `signer` signed at `ts` (ms), whose
    /// window makes it acceptable until `ts + window`; expired entries are
    /// dropped first.
    pub fn admit(
        &self,
        signer: &Signer,
        sig: &Signature,
        ts: i64,
        now: i64,
        window: i64,
    ) -> Result<(), Refusal> {
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        state.high_water = state.high_water.max(now);
        let oldest_valid = state.high_water.saturating_sub(window);
        if ts < oldest_valid {
            return Err(Refusal::Expired);
        }
        while let Some(&first) = state.by_ts.first() {
            if first.0 >= oldest_valid {
                break;
            }
            state.by_ts.remove(&first);
            state.seen.remove(&first.1);
        }
        if state.seen.contains(sig) {
            return Err(Refusal::Replayed);
        }
        let floor = state.floors.get(signer).copied().max(state.shared_floor);
        if floor.is_some_and(|floor| ts <= floor) {
            return Err(Refusal::Forgotten);
        }
        // Evicting may raise this signer's own floor above `ts`; admitting
        // it anyway is sound, since it was neither seen nor forgotten before
        // and is remembered from now on.
        while state.seen.len() >= self.max_entries {
            let Some(first) = state.by_ts.pop_first() else {
                break;
            };
            let (first_ts, first_sig, first_signer) = first;
            state.seen.remove(&first_sig);
            let floor = state.floors.entry(first_signer).or_insert(first_ts);
            *floor = (*floor).max(first_ts);
        }
        self.bound_floors(&mut state, oldest_valid);
        state.seen.insert(*sig);
        state.by_ts.insert((ts, *sig, *signer));
        Ok(())
    }

    /// Keeps at most `max_entries` floors: first drops those the window
    /// already covers, then folds the lowest half into the shared floor.
    fn bound_floors(&self, state: &mut State, oldest_valid: i64) {
        if state.floors.len() <= self.max_entries {
            return;
        }
        state.floors.retain(|_, floor| *floor >= oldest_valid);
        if state.floors.len() <= self.max_entries {
            return;
        }
        let mut values: Vec<i64> = state.floors.values().copied().collect();
        let keep = self.max_entries / 2;
        let cut = values.len() - keep;
        let (_, &mut highest_folded, _) = values.select_nth_unstable(cut - 1);
        state.floors.retain(|_, floor| *floor > highest_folded);
        state.shared_floor = state.shared_floor.max(Some(highest_folded));
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

    #[cfg(test)]
    fn floors(&self) -> usize {
        match self.state.lock() {
            Ok(state) => state.floors.len(),
            Err(poisoned) => poisoned.into_inner().floors.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: Signer = [1; 32];
    const MALLORY: Signer = [2; 32];

    fn sig(n: u8) -> Signature {
        [n; 64]
    }

    fn sig_n(n: u32) -> Signature {
        let mut sig = [0xee; 64];
        sig[..4].copy_from_slice(&n.to_be_bytes());
        sig
    }

    #[test]
    fn a_signature_is_accepted_once_within_its_window() {
        let cache = ReplayCache::new(10);
        assert_eq!(cache.admit(&ALICE, &sig(1), 1_000, 1_000, 300), Ok(()));
        assert_eq!(
            cache.admit(&ALICE, &sig(1), 1_000, 1_100, 300),
            Err(Refusal::Replayed)
        );
        assert_eq!(cache.admit(&ALICE, &sig(2), 1_050, 1_100, 300), Ok(()));
        // Once the window closed the entry is dropped.
        cache.admit(&ALICE, &sig(3), 2_000, 2_000, 300).unwrap();
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn the_cache_clock_never_moves_back_and_refuses_what_it_purged() {
        let cache = ReplayCache::new(10);
        cache.admit(&ALICE, &sig(1), 1_000, 1_000, 300).unwrap();
        // Another request moved the clock on, purging the entry at 1,000.
        cache.admit(&ALICE, &sig(2), 1_400, 1_400, 300).unwrap();
        assert_eq!(cache.len(), 1);
        // A caller whose window check ran earlier (now = 1,100) must not get
        // the purged request in again.
        assert_eq!(
            cache.admit(&ALICE, &sig(1), 1_000, 1_100, 300),
            Err(Refusal::Expired)
        );
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn when_full_the_oldest_go_and_their_signers_older_requests_are_refused() {
        let cache = ReplayCache::new(3);
        for (i, ts) in [(1, 100), (2, 200), (3, 300)] {
            cache.admit(&ALICE, &sig(i), ts, 300, 1_000).unwrap();
        }
        // Full: the entry at 100 goes, and 100 becomes Alice's floor.
        cache.admit(&ALICE, &sig(4), 400, 400, 1_000).unwrap();
        assert_eq!(cache.len(), 3);
        assert_eq!(
            cache.admit(&ALICE, &sig(1), 100, 400, 1_000),
            Err(Refusal::Forgotten)
        );
        assert_eq!(
            cache.admit(&ALICE, &sig(9), 90, 400, 1_000),
            Err(Refusal::Forgotten)
        );
        // Another signer's requests at the same time are not affected.
        cache.admit(&MALLORY, &sig(10), 90, 400, 1_000).unwrap();
        // Still remembered entries are replays, newer ones are fine.
        assert_eq!(
            cache.admit(&ALICE, &sig(3), 300, 400, 1_000),
            Err(Refusal::Replayed)
        );
        cache.admit(&ALICE, &sig(5), 350, 400, 1_000).unwrap();
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn a_flood_of_future_requests_does_not_refuse_another_signer() {
        let window = 300_000;
        let now = 1_000_000_000;
        let cache = ReplayCache::new(1_000);
        for n in 0..10_000 {
            // Mallory signs as far in the future as the window allows.
            let ts = now + window - 1 + i64::from(n);
            let _ = cache.admit(&MALLORY, &sig_n(n), ts, now + i64::from(n), window);
        }
        assert_eq!(cache.len(), 1_000);
        // Alice's current requests still pass, one after another...
        for n in 0..100u8 {
            let at = now + 10_000 + i64::from(n);
            assert_eq!(cache.admit(&ALICE, &sig(n), at, at, window), Ok(()));
        }
        // ...and are still refused as replays.
        let at = now + 10_099;
        assert_eq!(
            cache.admit(&ALICE, &sig(99), at, at, window),
            Err(Refusal::Replayed)
        );
        // Mallory's old requests are the ones that became unverifiable.
        assert_eq!(
            cache.admit(&MALLORY, &sig_n(1), now + window, now + 10_100, window),
            Err(Refusal::Forgotten)
        );
    }

    #[test]
    fn floors_are_bounded_and_folding_them_never_admits_a_replay() {
        let cache = ReplayCache::new(4);
        // Every admit evicts one entry of a different signer, each leaving a
        // floor within the window.
        for n in 0..40u8 {
            let signer = [n; 32];
            let ts = 1_000 + i64::from(n);
            cache.admit(&signer, &sig(n), ts, 1_000, 10_000).unwrap();
            assert!(cache.floors() <= 4, "{} floors", cache.floors());
        }
        // The first signer's request was evicted long ago: refused.
        assert_eq!(
            cache.admit(&[0; 32], &sig(0), 1_000, 1_040, 10_000),
            Err(Refusal::Forgotten)
        );
        // Floors older than the window are simply dropped.
        let cache = ReplayCache::new(2);
        for n in 0..10u8 {
            let ts = 1_000 * i64::from(n);
            cache.admit(&[n; 32], &sig(n), ts, ts, 1_500).unwrap();
            assert!(cache.floors() <= 2);
        }
    }
}
