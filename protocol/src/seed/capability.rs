//! Capability blobs: how an account delegates to another key.
//!
//! A Capability is a signed Seed blob, one DAG-CBOR map `{type:
//! "Capability", signer, sig, ts, delegate, role, path?, label?,
//! audience?}`: the account (`signer`) grants `role` to `delegate`. Like
//! every Seed blob it is signed by its own `signer` over its canonical
//! encoding with `sig` set to 64 zero bytes, and it is named by its CID:
//! CIDv1, codec dag-cbor, sha2-256, printed in base32 lower case (`b…`).
//!
//! An envelope whose signer is not its account names such a blob
//! (`capability`, the CID) and may carry its bytes (`capabilityBlob`).
//! Whether the delegation is acceptable (delegate, role, issuer) is the
//! server's decision; this module only decodes and verifies the blob.

use std::collections::BTreeMap;
use std::fmt;

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use ipld_core::ipld::Ipld;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use super::envelope::SIGNATURE_LEN;
use super::{cbor, Principal, SeedError};

/// The value of a Capability blob's `type` key.
pub const CAPABILITY_TYPE: &str = "Capability";

/// Largest Capability blob accepted. Real ones are a few hundred bytes
/// (Seed caps a label at 512).
pub const MAX_CAPABILITY_BYTES: usize = 8 * 1024;

/// The dag-cbor multicodec.
const DAG_CBOR: u8 = 0x71;
/// The sha2-256 multihash code.
const SHA2_256: u8 = 0x12;

/// The role a Capability grants. Seed writes roles in capitals.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// `AGENT`: the delegate acts as the account.
    Agent,
    /// `WRITER`: the delegate may write the account's documents.
    Writer,
    /// Any other role, kept as written.
    Other(String),
}

impl Role {
    /// The wire text.
    pub fn as_str(&self) -> &str {
        match self {
            Role::Agent => "AGENT",
            Role::Writer => "WRITER",
            Role::Other(other) => other,
        }
    }

    /// The role for its wire text.
    pub fn parse(text: &str) -> Role {
        match text {
            "AGENT" => Role::Agent,
            "WRITER" => Role::Writer,
            other => Role::Other(other.to_string()),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Role {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(|text| Role::parse(&text))
    }
}

/// A decoded Capability blob whose signature has been verified.
#[derive(Clone, Debug, PartialEq)]
pub struct Capability {
    /// The issuer: the account that delegates.
    pub signer: Principal,
    /// The key that receives the delegation.
    pub delegate: Principal,
    pub role: Role,
    /// When it was issued, Unix epoch milliseconds.
    pub ts: i64,
    /// The document path it is scoped to, if any.
    pub path: Option<String>,
    pub label: Option<String>,
    /// The principal it authenticates against directly, if any.
    pub audience: Option<Principal>,
    pub sig: [u8; SIGNATURE_LEN],
    /// The blob's CID, string form.
    pub cid: String,
}

impl Capability {
    /// Decodes a Capability blob and verifies its own signature. Keys this
    /// module does not know are kept in the signed bytes, so a newer blob
    /// still verifies.
    pub fn decode_and_verify(blob: &[u8]) -> Result<Capability, SeedError> {
        let map = match cbor::from_slice::<Ipld>(blob, MAX_CAPABILITY_BYTES) {
            Ok(Ipld::Map(map)) => map,
            Ok(_) => return Err(SeedError::bad_capability("the blob must be a map")),
            Err(error) => return Err(SeedError::bad_capability(error.to_string())),
        };
        match map.get("type") {
            Some(Ipld::String(kind)) if kind == CAPABILITY_TYPE => {}
            _ => return Err(SeedError::bad_capability("`type` must be \"Capability\"")),
        }
        let signer = principal(&map, "signer")?.ok_or_else(|| missing("signer"))?;
        let delegate = principal(&map, "delegate")?.ok_or_else(|| missing("delegate"))?;
        let audience = principal(&map, "audience")?;
        let role = text(&map, "role")?
            .map(|role| Role::parse(&role))
            .ok_or_else(|| missing("role"))?;
        let path = text(&map, "path")?;
        let label = text(&map, "label")?;
        let ts = match map.get("ts") {
            Some(Ipld::Integer(ts)) => {
                i64::try_from(*ts).map_err(|_| SeedError::bad_capability("`ts` is out of range"))?
            }
            Some(_) => return Err(SeedError::bad_capability("`ts` must be an integer")),
            None => return Err(missing("ts")),
        };
        let sig: [u8; SIGNATURE_LEN] = match map.get("sig") {
            Some(Ipld::Bytes(sig)) => sig
                .as_slice()
                .try_into()
                .map_err(|_| SeedError::bad_capability("`sig` must be 64 bytes"))?,
            Some(_) => return Err(SeedError::bad_capability("`sig` must be bytes")),
            None => return Err(missing("sig")),
        };

        let mut unsigned = map;
        unsigned.insert("sig".to_string(), Ipld::Bytes(vec![0; SIGNATURE_LEN]));
        let signed_bytes = cbor::to_canonical(&unsigned)?;
        let key = VerifyingKey::from_bytes(&signer.public_key())
            .map_err(|_| SeedError::bad_capability("the signer is not a valid Ed25519 key"))?;
        key.verify_strict(&signed_bytes, &Signature::from_bytes(&sig))
            .map_err(|_| SeedError::bad_capability("the blob's signature does not verify"))?;

        Ok(Capability {
            signer,
            delegate,
            role,
            ts,
            path,
            label,
            audience,
            sig,
            cid: cid_of(blob),
        })
    }

    /// Issues a Capability: `issuer` grants `role` to `delegate` at `ts_ms`.
    /// Returns the blob's bytes, which [`Capability::decode_and_verify`]
    /// accepts. Absent options are left out of the blob, never written as
    /// null.
    pub fn issue(
        issuer: &SigningKey,
        delegate: Principal,
        role: Role,
        ts_ms: i64,
        path: Option<&str>,
        label: Option<&str>,
    ) -> Result<Vec<u8>, SeedError> {
        let mut map = BTreeMap::new();
        map.insert(
            "type".to_string(),
            Ipld::String(CAPABILITY_TYPE.to_string()),
        );
        map.insert(
            "signer".to_string(),
            Ipld::Bytes(Principal::of_key(issuer).as_bytes().to_vec()),
        );
        map.insert("sig".to_string(), Ipld::Bytes(vec![0; SIGNATURE_LEN]));
        map.insert("ts".to_string(), Ipld::Integer(i128::from(ts_ms)));
        map.insert(
            "delegate".to_string(),
            Ipld::Bytes(delegate.as_bytes().to_vec()),
        );
        map.insert("role".to_string(), Ipld::String(role.as_str().to_string()));
        if let Some(path) = path {
            map.insert("path".to_string(), Ipld::String(path.to_string()));
        }
        if let Some(label) = label {
            map.insert("label".to_string(), Ipld::String(label.to_string()));
        }
        let sig = issuer.sign(&cbor::to_canonical(&map)?).to_bytes();
        map.insert("sig".to_string(), Ipld::Bytes(sig.to_vec()));
        cbor::to_canonical(&map)
    }
}

/// The CID of a DAG-CBOR blob as IPFS prints it: CIDv1, codec dag-cbor
/// (0x71), multihash sha2-256, multibase base32 lower case (`bafyrei…`).
pub fn cid_of(blob: &[u8]) -> String {
    // Version 1, dag-cbor, sha2-256, 32 bytes: every code is below 0x80, so
    // each varint is one byte.
    let mut cid = vec![0x01, DAG_CBOR, SHA2_256, 32];
    cid.extend_from_slice(&Sha256::digest(blob));
    let mut text = String::with_capacity(1 + cid.len() * 8 / 5 + 1);
    text.push('b');
    base32_lower(&cid, &mut text);
    text
}

/// RFC 4648 base32, lower case, without padding (multibase `b`).
fn base32_lower(bytes: &[u8], out: &mut String) {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for byte in bytes {
        buffer = (buffer << 8) | u32::from(*byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((buffer >> bits) & 0x1f) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(
            ALPHABET[((buffer << (5 - bits)) & 0x1f) as usize],
        ));
    }
}

fn missing(key: &str) -> SeedError {
    SeedError::bad_capability(format!("missing `{key}`"))
}

fn principal(map: &BTreeMap<String, Ipld>, key: &str) -> Result<Option<Principal>, SeedError> {
    match map.get(key) {
        None => Ok(None),
        Some(Ipld::Bytes(bytes)) => Principal::from_bytes(bytes)
            .map(Some)
            .map_err(|error| SeedError::bad_capability(format!("`{key}`: {error}"))),
        Some(_) => Err(SeedError::bad_capability(format!("`{key}` must be bytes"))),
    }
}

fn text(map: &BTreeMap<String, Ipld>, key: &str) -> Result<Option<String>, SeedError> {
    match map.get(key) {
        None => Ok(None),
        Some(Ipld::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(SeedError::bad_capability(format!(
            "`{key}` must be a string"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> SigningKey {
        SigningKey::from_bytes(&[byte; 32])
    }

    #[test]
    fn issued_capability_verifies_and_has_a_base32_cid() {
        let delegate = Principal::of_key(&key(2));
        let blob = Capability::issue(
            &key(1),
            delegate,
            Role::Agent,
            1_700_000_000_000,
            None,
            Some("laptop"),
        )
        .unwrap();
        let capability = Capability::decode_and_verify(&blob).unwrap();
        assert_eq!(capability.signer, Principal::of_key(&key(1)));
        assert_eq!(capability.delegate, delegate);
        assert_eq!(capability.role, Role::Agent);
        assert_eq!(capability.label.as_deref(), Some("laptop"));
        assert_eq!(capability.path, None);
        assert!(capability.cid.starts_with("bafyrei"), "{}", capability.cid);
        assert_eq!(capability.cid, cid_of(&blob));
    }

    #[test]
    fn cid_of_matches_a_known_value() {
        // The CID of the DAG-CBOR empty map, as IPFS prints it.
        assert_eq!(
            cid_of(&[0xa0]),
            "bafyreigbtj4x7ip5legnfznufuopl4sg4knzc2cof6duas4b3q2fy6swua"
        );
    }

    #[test]
    fn cid_of_agrees_with_the_cid_crate() {
        use ipld_core::cid::multihash::Multihash;
        use ipld_core::cid::Cid;
        for len in [0usize, 1, 2, 3, 4, 5, 31, 32, 33, 1000] {
            let blob: Vec<u8> = (0..len).map(|i| (i * 37 % 256) as u8).collect();
            let hash = Multihash::<64>::wrap(0x12, &Sha256::digest(&blob)).unwrap();
            assert_eq!(cid_of(&blob), Cid::new_v1(0x71, hash).to_string());
        }
    }

    #[test]
    fn a_tampered_blob_does_not_verify() {
        let blob = Capability::issue(
            &key(1),
            Principal::of_key(&key(2)),
            Role::Writer,
            5,
            Some("/docs"),
            None,
        )
        .unwrap();
        let mut map: BTreeMap<String, Ipld> = serde_ipld_dagcbor::from_slice(&blob).unwrap();
        map.insert("role".to_string(), Ipld::String("AGENT".to_string()));
        let tampered = cbor::to_canonical(&map).unwrap();
        assert_eq!(
            Capability::decode_and_verify(&tampered).unwrap_err().code(),
            "bad_capability"
        );
    }

    #[test]
    fn malformed_blobs_are_bad_capability() {
        let good = Capability::issue(
            &key(1),
            Principal::of_key(&key(2)),
            Role::Agent,
            5,
            None,
            None,
        )
        .unwrap();
        let map: BTreeMap<String, Ipld> = serde_ipld_dagcbor::from_slice(&good).unwrap();
        let edits: Vec<(&str, Option<Ipld>)> = vec![
            ("type", Some(Ipld::String("Profile".into()))),
            ("signer", Some(Ipld::Bytes(vec![1, 2, 3]))),
            ("delegate", None),
            ("role", Some(Ipld::Integer(1))),
            ("ts", Some(Ipld::Float(1.5))),
            ("sig", Some(Ipld::Bytes(vec![0; 10]))),
        ];
        for (key, value) in edits {
            let mut edited = map.clone();
            match value {
                Some(value) => edited.insert(key.to_string(), value),
                None => edited.remove(key),
            };
            let bytes = cbor::to_canonical(&edited).unwrap();
            assert_eq!(
                Capability::decode_and_verify(&bytes).unwrap_err().code(),
                "bad_capability",
                "{key}"
            );
        }
        assert_eq!(
            Capability::decode_and_verify(&[0xff]).unwrap_err().code(),
            "bad_capability"
        );
        assert_eq!(
            Capability::decode_and_verify(&vec![0u8; MAX_CAPABILITY_BYTES + 1])
                .unwrap_err()
                .code(),
            "bad_capability"
        );
    }

    #[test]
    fn unknown_roles_are_kept() {
        assert_eq!(Role::parse("OWNER"), Role::Other("OWNER".to_string()));
        assert_eq!(Role::parse("OWNER").as_str(), "OWNER");
    }
}
