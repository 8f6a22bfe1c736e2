//! Seed's signed hypermedia blobs, as its own client builds them: canonical
//! DAG-CBOR maps signed with Ed25519 over their encoding with `signer` set
//! and `sig` 64 zero bytes, then re-encoded with the signature; a blob is
//! named by its CIDv1 (dag-cbor, sha2-256). This file has the blobs an
//! account needs to exist: a `Profile`, its key's genesis `Change`
//! (`ts: 0`, so one per key), a content `Change` and a version `Ref`.
//! Timestamps are Unix milliseconds, given by the caller. Pure: no clock,
//! no randomness, no I/O; the test vectors were made with Seed's own
//! published encoders.

use std::collections::BTreeMap;

use ed25519_dalek::Signer as _;
use ipld_core::cid::multihash::Multihash;
use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;
use sha2::{Digest, Sha256};

use super::{cbor, Principal, SeedError, SigningKey};

/// The multicodec of DAG-CBOR.
const DAG_CBOR: u64 = 0x71;
/// The multihash code of sha2-256.
const SHA2_256: u64 = 0x12;

/// An encoded blob and its name.
#[derive(Clone, Debug, PartialEq)]
pub struct Blob {
    pub cid: Cid,
    pub data: Vec<u8>,
}

/// The CIDv1 of DAG-CBOR `data`.
pub fn dag_cbor_cid(data: &[u8]) -> Cid {
    let digest = Sha256::digest(data);
    // A 32-byte digest always fits a 64-byte multihash.
    let hash = Multihash::<64>::wrap(SHA2_256, &digest).unwrap_or_default();
    Cid::new_v1(DAG_CBOR, hash)
}

fn text(value: &str) -> Ipld {
    Ipld::String(value.to_owned())
}

/// Signs `fields` as `key`: `signer` and a zero `sig` set, the encoding
/// signed, the signature put in, encoded again.
fn signed(mut fields: BTreeMap<String, Ipld>, key: &SigningKey) -> Result<Blob, SeedError> {
    let signer = Principal::of_key(key);
    fields.insert("signer".into(), Ipld::Bytes(signer.as_bytes().to_vec()));
    fields.insert("sig".into(), Ipld::Bytes(vec![0; 64]));
    let unsigned = cbor::to_canonical(&Ipld::Map(fields.clone()))?;
    let signature = key.sign(&unsigned);
    fields.insert("sig".into(), Ipld::Bytes(signature.to_bytes().to_vec()));
    let data = cbor::to_canonical(&Ipld::Map(fields))?;
    Ok(Blob {
        cid: dag_cbor_cid(&data),
        data,
    })
}

/// The key's genesis `Change`: `{type, signer, sig, ts: 0}`, the same
/// blob for every document the key starts.
pub fn genesis_change(key: &SigningKey) -> Result<Blob, SeedError> {
    signed(
        BTreeMap::from([
            ("type".to_owned(), text("Change")),
            ("ts".to_owned(), Ipld::Integer(0)),
        ]),
        key,
    )
}

/// A `Profile`: the account's name, and its avatar (`ipfs://<cid>`) and
/// description when given.
pub fn profile(
    key: &SigningKey,
    name: &str,
    avatar: Option<&str>,
    description: Option<&str>,
    ts_ms: u64,
) -> Result<Blob, SeedError> {
    let mut fields = BTreeMap::from([
        ("type".to_owned(), text("Profile")),
        ("ts".to_owned(), Ipld::Integer(ts_ms.into())),
        ("name".to_owned(), text(name)),
    ]);
    if let Some(avatar) = avatar {
        fields.insert("avatar".into(), text(avatar));
    }
    if let Some(description) = description {
        fields.insert("description".into(), text(description));
    }
    signed(fields, key)
}

/// Where a content change sits in its document's history.
#[derive(Clone, Debug, PartialEq)]
pub struct Lineage {
    /// The document's genesis change.
    pub genesis: Cid,
    /// The changes it follows (the document's heads).
    pub deps: Vec<Cid>,
    /// One more than the deepest of them.
    pub depth: u64,
}

/// A content `Change`: `ops` (as the reference's operation maps) under
/// `body` with their count, after `lineage`.
pub fn change(
    key: &SigningKey,
    ops: Vec<Ipld>,
    lineage: Option<&Lineage>,
    ts_ms: u64,
) -> Result<Blob, SeedError> {
    let count = ops.len() as i128;
    let mut fields = BTreeMap::from([
        ("type".to_owned(), text("Change")),
        ("ts".to_owned(), Ipld::Integer(ts_ms.into())),
        (
            "body".to_owned(),
            Ipld::Map(BTreeMap::from([
                ("ops".to_owned(), Ipld::List(ops)),
                ("opCount".to_owned(), Ipld::Integer(count)),
            ])),
        ),
    ]);
    if let Some(lineage) = lineage {
        fields.insert("genesis".into(), Ipld::Link(lineage.genesis));
        fields.insert(
            "deps".into(),
            Ipld::List(lineage.deps.iter().copied().map(Ipld::Link).collect()),
        );
        fields.insert("depth".into(), Ipld::Integer(lineage.depth.into()));
    }
    signed(fields, key)
}

/// A version `Ref`: the document at `path` (`''` for the account's home)
/// of `space` (the signer's own when `None`) is at `heads`.
pub fn version_ref(
    key: &SigningKey,
    space: Option<&Principal>,
    path: &str,
    genesis: Cid,
    heads: &[Cid],
    generation: u64,
    ts_ms: u64,
) -> Result<Blob, SeedError> {
    let mut fields = BTreeMap::from([
        ("type".to_owned(), text("Ref")),
        ("ts".to_owned(), Ipld::Integer(ts_ms.into())),
        ("genesisBlob".to_owned(), Ipld::Link(genesis)),
        (
            "heads".to_owned(),
            Ipld::List(heads.iter().copied().map(Ipld::Link).collect()),
        ),
    ]);
    if generation != 0 {
        fields.insert("generation".into(), Ipld::Integer(generation.into()));
    }
    if let Some(space) = space.filter(|s| **s != Principal::of_key(key)) {
        fields.insert("space".into(), Ipld::Bytes(space.as_bytes().to_vec()));
    }
    if !path.is_empty() {
        fields.insert("path".into(), text(path));
    }
    signed(fields, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed's vectors' key A: 32 bytes of 0x2a.
    fn key_a() -> SigningKey {
        SigningKey::from_bytes(&[0x2a; 32])
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    const TS: u64 = 1_700_000_000_000;

    #[test]
    fn a_keys_genesis_and_profile_match_seeds_encoders() {
        let key = key_a();
        assert_eq!(
            Principal::of_key(&key).to_string(),
            "z6MkgAnvkP45uNxwCKeNdt6wrYkEjpYX4f7Nrd8MQqFL8Fbn"
        );
        let genesis = genesis_change(&key).unwrap();
        assert_eq!(
            genesis.cid.to_string(),
            "bafyreigvj5l7ze6qds5ngjkhqai2bzvwnmn37uga4nbf44wginvl3eyrr4"
        );
        assert_eq!(
            hex(&genesis.data),
            "a462747300637369675840c85ad9866db7a32ded11b9e3745c6608d4796676c12306da3cd608f0e905c7aeaa66e859653efb69312fb1fd4326069a98eda58faad2f2cf9e6acd42775563006474797065664368616e6765667369676e65725822ed01197f6b23e16c8532c6abc838facd5ea789be0c76b2920334039bfa8b3d368d61"
        );
        let profile = profile(&key, "Test", None, None, TS).unwrap();
        assert_eq!(
            profile.cid.to_string(),
            "bafyreigtnhgzgax2s3re3jvqwak42vv637pu5g5h5qb4vs52aab3g4ijbm"
        );
    }

    #[test]
    fn an_accounts_first_blobs_match_seeds_encoders() {
        let key = key_a();
        let name = "Agent account z6MkgAnvkP";
        let profile = profile(&key, name, None, None, TS).unwrap();
        assert_eq!(
            profile.cid.to_string(),
            "bafyreieb33msis42z6vrtme7z2i7cfjhfhxs7cgt5h2oubj54caogl6rzu"
        );
        let genesis = genesis_change(&key).unwrap();
        let map = |pairs: Vec<(&str, Ipld)>| {
            Ipld::Map(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
        };
        let ops = vec![
            map(vec![
                ("type", text("SetAttributes")),
                (
                    "attrs",
                    Ipld::List(vec![map(vec![
                        ("key", Ipld::List(vec![text("name")])),
                        ("value", text(name)),
                    ])]),
                ),
            ]),
            map(vec![
                ("type", text("ReplaceBlock")),
                (
                    "block",
                    map(vec![
                        ("type", text("Paragraph")),
                        ("id", text("AAAAAAAA")),
                        ("text", text("This is an agentic account.")),
                        ("annotations", Ipld::List(vec![])),
                    ]),
                ),
            ]),
            map(vec![
                ("type", text("MoveBlocks")),
                ("blocks", Ipld::List(vec![text("AAAAAAAA")])),
                ("parent", text("")),
            ]),
        ];
        let lineage = Lineage {
            genesis: genesis.cid,
            deps: vec![genesis.cid],
            depth: 1,
        };
        let home = change(&key, ops, Some(&lineage), TS).unwrap();
        assert_eq!(
            home.cid.to_string(),
            "bafyreiftznmgeosgxtvgndlmvn4q6puioaowkfomda7nfqtquysb6v73m4"
        );
        let reference = version_ref(&key, None, "", genesis.cid, &[home.cid], TS, TS).unwrap();
        assert_eq!(
            reference.cid.to_string(),
            "bafyreibbiufdbyublunojcgl2w3gry7cte2eydkvzf35e5pp7iflqdz36a"
        );
        // Another account's space is named; the signer's own is not.
        let other = Principal::of_key(&SigningKey::from_bytes(&[7; 32]));
        let into = version_ref(&key, Some(&other), "/x", genesis.cid, &[], 0, TS).unwrap();
        let decoded: Ipld = cbor::from_slice(&into.data, 1 << 20).unwrap();
        let Ipld::Map(fields) = decoded else {
            panic!("a map")
        };
        assert!(fields.contains_key("space") && !fields.contains_key("generation"));
    }
}
