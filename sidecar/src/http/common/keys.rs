//! Signers' keys, decompressed once: a verification starts by turning the
//! signer's 32 bytes into a curve point, which costs a good part of the
//! verification itself, and the same few keys sign almost every request.
//! Bounded: when full, the cache starts over.

use std::collections::HashMap;
use std::sync::Mutex;

use agentos_protocol::seed::{SeedError, VerifyingKey};

/// Keys kept at most.
const MAX_KEYS: usize = 4096;

#[derive(Default)]
pub struct KeyCache {
    keys: Mutex<HashMap<[u8; 32], VerifyingKey>>,
}

impl KeyCache {
    /// The decompressed key for `bytes`; an invalid point is a bad
    /// signature, as it would be when verifying.
    pub fn get(&self, bytes: [u8; 32]) -> Result<VerifyingKey, SeedError> {
        let mut keys = match self.keys.lock() {
            Ok(keys) => keys,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(key) = keys.get(&bytes) {
            return Ok(*key);
        }
        let key = VerifyingKey::from_bytes(&bytes).map_err(|_| SeedError::BadSignature)?;
        if keys.len() >= MAX_KEYS {
            keys.clear();
        }
        keys.insert(bytes, key);
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use agentos_protocol::seed::{generate_signing_key, Principal};

    use super::*;

    #[test]
    fn the_cache_answers_the_same_key_and_stays_bounded() {
        let cache = KeyCache::default();
        let key = generate_signing_key();
        let bytes = Principal::of_key(&key).public_key();
        assert_eq!(cache.get(bytes).unwrap(), key.verifying_key());
        assert_eq!(cache.get(bytes).unwrap(), key.verifying_key());
        for _ in 0..MAX_KEYS + 10 {
            let other = Principal::of_key(&generate_signing_key()).public_key();
            cache.get(other).unwrap();
        }
        assert!(cache.keys.lock().unwrap().len() <= MAX_KEYS);
    }
}
