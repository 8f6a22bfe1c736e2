//! Principals: who signs and on whose behalf.
//!
//! A principal is an Ed25519 public key behind its multicodec varint prefix
//! (`0xed 0x01`), 34 bytes in all. On the wire it is a CBOR byte string; as
//! text (account ids, `accountId` fields, subscription keys) it is multibase
//! base58btc: `z` followed by the base58 of the 34 bytes, so every Ed25519
//! principal reads `z6Mk…`.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::SeedError;

/// The Ed25519 multicodec (0xed) as an unsigned varint.
pub const ED25519_PREFIX: [u8; 2] = [0xed, 0x01];

/// Bytes in a principal: the prefix and a 32-byte key.
pub const PRINCIPAL_LEN: usize = 34;

/// An Ed25519 principal: `0xed 0x01` followed by the 32-byte public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal([u8; PRINCIPAL_LEN]);

impl Principal {
    /// Reads a principal from its 34 wire bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SeedError> {
        let array: [u8; PRINCIPAL_LEN] = bytes.try_into().map_err(|_| {
            SeedError::bad_principal(format!(
                "expected {PRINCIPAL_LEN} bytes, got {}",
                bytes.len()
            ))
        })?;
        if array[..2] != ED25519_PREFIX {
            return Err(SeedError::bad_principal(
                "expected the Ed25519 multicodec prefix 0xed01",
            ));
        }
        Ok(Principal(array))
    }

    /// The principal of an Ed25519 public key.
    pub fn from_public_key(key: [u8; 32]) -> Self {
        let mut array = [0u8; PRINCIPAL_LEN];
        array[..2].copy_from_slice(&ED25519_PREFIX);
        array[2..].copy_from_slice(&key);
        Principal(array)
    }

    /// The principal of a signing key's public half.
    pub fn of_key(key: &ed25519_dalek::SigningKey) -> Self {
        Self::from_public_key(key.verifying_key().to_bytes())
    }

    /// The 32-byte Ed25519 public key.
    pub fn public_key(&self) -> [u8; 32] {
        let mut key = [0u8; 32];
        key.copy_from_slice(&self.0[2..]);
        key
    }

    /// The 34 wire bytes.
    pub fn as_bytes(&self) -> &[u8; PRINCIPAL_LEN] {
        &self.0
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "z{}", bs58::encode(&self.0).into_string())
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Principal({self})")
    }
}

impl FromStr for Principal {
    type Err = SeedError;

    fn from_str(text: &str) -> Result<Self, SeedError> {
        let body = text.strip_prefix('z').ok_or_else(|| {
            SeedError::bad_principal("expected base58btc multibase (a leading 'z')")
        })?;
        // A principal is 34 bytes, about 47 base58 digits; anything much
        // longer is refused before decoding it.
        if body.len() > 64 {
            return Err(SeedError::bad_principal("string too long for a principal"));
        }
        let bytes = bs58::decode(body)
            .into_vec()
            .map_err(|error| SeedError::bad_principal(format!("invalid base58: {error}")))?;
        Principal::from_bytes(&bytes)
    }
}

impl Serialize for Principal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Principal {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PrincipalVisitor;

        impl Visitor<'_> for PrincipalVisitor {
            type Value = Principal;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("34 bytes of an Ed25519 principal")
            }

            fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Principal, E> {
                Principal::from_bytes(bytes).map_err(E::custom)
            }
        }

        deserializer.deserialize_bytes(PrincipalVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_form_round_trips_and_reads_z6mk() {
        for seed in [[0u8; 32], [7u8; 32], [255u8; 32]] {
            let key = ed25519_dalek::SigningKey::from_bytes(&seed);
            let principal = Principal::of_key(&key);
            let text = principal.to_string();
            assert!(text.starts_with("z6Mk"), "{text}");
            assert_eq!(text.parse::<Principal>().unwrap(), principal);
            assert_eq!(principal.public_key(), key.verifying_key().to_bytes());
        }
    }

    #[test]
    fn wrong_length_or_prefix_is_bad_principal() {
        let good = Principal::from_public_key([1; 32]);
        assert_eq!(
            Principal::from_bytes(&good.as_bytes()[..33])
                .unwrap_err()
                .code(),
            "bad_principal"
        );
        let mut long = good.as_bytes().to_vec();
        long.push(0);
        assert_eq!(
            Principal::from_bytes(&long).unwrap_err().code(),
            "bad_principal"
        );
        let mut wrong_prefix = *good.as_bytes();
        wrong_prefix[0] = 0xe7; // secp256k1
        assert_eq!(
            Principal::from_bytes(&wrong_prefix).unwrap_err().code(),
            "bad_principal"
        );
        for text in ["", "6Mk", "z0OIl", "z", &format!("z{}", "1".repeat(100))] {
            assert_eq!(
                text.parse::<Principal>().unwrap_err().code(),
                "bad_principal",
                "{text}"
            );
        }
        // Valid base58, wrong length.
        let short = format!("z{}", bs58::encode(&good.as_bytes()[..20]).into_string());
        assert_eq!(
            short.parse::<Principal>().unwrap_err().code(),
            "bad_principal"
        );
    }

    #[test]
    fn serde_is_cbor_bytes() {
        let principal = Principal::from_public_key([9; 32]);
        let bytes = crate::seed::cbor::to_canonical(&principal).unwrap();
        assert_eq!(bytes[..2], [0x58, 34]);
        let back: Principal = crate::seed::cbor::from_slice(&bytes, 100).unwrap();
        assert_eq!(back, principal);
        let wrong =
            crate::seed::cbor::to_canonical(&ipld_core::ipld::Ipld::Bytes(vec![0xed, 1, 2]))
                .unwrap();
        assert_eq!(
            crate::seed::cbor::from_slice::<Principal>(&wrong, 100)
                .unwrap_err()
                .code(),
            "bad_cbor"
        );
    }
}
