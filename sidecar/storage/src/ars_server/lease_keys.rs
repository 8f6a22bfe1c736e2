//! The lease keys one connection of the reference server has begun, shared
//! between its connection task (which takes a key when a Begin arrives) and
//! the SQLite thread (which frees the key of a Begin that never began).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Every lease key begun on one connection, shared with the SQLite thread.
/// A key is remembered for the connection's life, so a reused key is
/// refused (`InvalidLeaseKey`) however long ago its lease ended; only a
/// Begin that never began (refused, or queued behind a lease that expired)
/// frees its key again. Memory is bounded whatever the keys are: each is
/// kept as a 128-bit keyed digest (the hash key is the connection's own,
/// so a client cannot aim collisions), and a connection may begin at most
/// `maxLeasesPerConnection` leases (16 bytes each, about 1.5 MiB for
/// the default 65,536) before it must open a new one, as the client does.
pub(super) type LeaseKeys = Arc<Mutex<UsedKeys>>;

pub(super) struct UsedKeys {
    hash_key: [u8; 32],
    used: HashSet<u128>,
    max: usize,
}

/// Why a Begin's key cannot be taken.
pub(super) enum KeyRefusal {
    Reused,
    Exhausted(usize),
}

impl UsedKeys {
    pub(super) fn new(max: u32) -> Self {
        UsedKeys {
            hash_key: rand::random(),
            used: HashSet::new(),
            max: max as usize,
        }
    }

    fn digest(&self, key: &str) -> u128 {
        let hash = blake3::keyed_hash(&self.hash_key, key.as_bytes());
        let mut first = [0u8; 16];
        first.copy_from_slice(&hash.as_bytes()[..16]);
        u128::from_le_bytes(first)
    }

    /// Takes `key` for a new lease.
    pub(super) fn take(&mut self, key: &str) -> Result<(), KeyRefusal> {
        let digest = self.digest(key);
        if self.used.contains(&digest) {
            return Err(KeyRefusal::Reused);
        }
        if self.used.len() >= self.max {
            return Err(KeyRefusal::Exhausted(self.max));
        }
        self.used.insert(digest);
        Ok(())
    }

    pub(super) fn contains(&self, key: &str) -> bool {
        self.used.contains(&self.digest(key))
    }

    /// Frees the key of a Begin that never began.
    fn release(&mut self, key: &str) {
        let digest = self.digest(key);
        self.used.remove(&digest);
    }
}

/// Frees the key of a Begin that never began, so it may be sent again.
pub(super) fn release_key(keys: &LeaseKeys, key: &str) {
    if let Ok(mut keys) = keys.lock() {
        keys.release(key);
    }
}
