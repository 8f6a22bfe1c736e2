//! Seed's signed hypermedia blobs, as its own client builds them: canonical
//! DAG-CBOR maps signed with Ed25519 over their encoding with `signer` set
//! and `sig` 64 zero bytes, then re-encoded with the signature; a blob is
//! named by its CIDv1 (dag-cbor, sha2-256). This file has them all but the
//! `Capability` (in [`super::capability`]): a `Profile`, a key's genesis
//! `Change` (`ts: 0`, so one per key), a content `Change`, a `Ref` (a
//! version, a tombstone or a redirect), a `Comment` and a `Contact`, with
//! the record ids Seed derives for the last two. Timestamps are Unix
//! milliseconds, given by the caller. Pure: no clock, no randomness, no
//! I/O; the test vectors were made with Seed's own published encoders.

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

/// A `Profile` alias: the signer's profile is `alias`'s.
pub fn profile_alias(key: &SigningKey, alias: &Principal, ts_ms: u64) -> Result<Blob, SeedError> {
    signed(
        BTreeMap::from([
            ("type".to_owned(), text("Profile")),
            ("ts".to_owned(), Ipld::Integer(ts_ms.into())),
            ("alias".to_owned(), Ipld::Bytes(alias.as_bytes().to_vec())),
        ]),
        key,
    )
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

/// What a `Ref` says about its document.
#[derive(Clone, Debug, PartialEq)]
pub enum RefTarget {
    /// The document is at these heads (its version, split on `.`).
    Version(Vec<Cid>),
    /// The document is deleted.
    Tombstone,
    /// The document now lives at `path` of `space` (the ref's own space
    /// when `None`); `republish` asks readers to show the target's content
    /// here.
    Redirect {
        path: String,
        space: Option<Principal>,
        republish: bool,
    },
}

/// A `Ref`: where the document at `path` (`''` for the account's home) of
/// `space` (the signer's own when `None`) stands.
#[derive(Clone, Debug, PartialEq)]
pub struct RefSpec<'a> {
    pub space: Option<&'a Principal>,
    pub path: &'a str,
    pub genesis: Cid,
    /// The document's generation (its first change's time); 0 is left out.
    pub generation: u64,
    /// The Capability that lets the signer write into `space`.
    pub capability: Option<Cid>,
    pub target: RefTarget,
    pub ts_ms: u64,
}

/// A signed `Ref` blob.
pub fn reference(key: &SigningKey, spec: &RefSpec<'_>) -> Result<Blob, SeedError> {
    let signer = Principal::of_key(key);
    let space = spec.space.copied().unwrap_or(signer);
    let heads = match &spec.target {
        RefTarget::Version(heads) => heads.iter().copied().map(Ipld::Link).collect(),
        RefTarget::Tombstone | RefTarget::Redirect { .. } => Vec::new(),
    };
    let mut fields = BTreeMap::from([
        ("type".to_owned(), text("Ref")),
        ("ts".to_owned(), Ipld::Integer(spec.ts_ms.into())),
        ("genesisBlob".to_owned(), Ipld::Link(spec.genesis)),
        ("heads".to_owned(), Ipld::List(heads)),
    ]);
    if spec.generation != 0 {
        fields.insert("generation".into(), Ipld::Integer(spec.generation.into()));
    }
    if space != signer {
        fields.insert("space".into(), Ipld::Bytes(space.as_bytes().to_vec()));
    }
    if !spec.path.is_empty() {
        fields.insert("path".into(), text(spec.path));
    }
    if let Some(capability) = spec.capability {
        fields.insert("capability".into(), Ipld::Link(capability));
    }
    if let RefTarget::Redirect {
        path,
        space: target_space,
        republish,
    } = &spec.target
    {
        let mut redirect = BTreeMap::from([("path".to_owned(), text(path))]);
        if let Some(target_space) = target_space.filter(|t| *t != space) {
            redirect.insert(
                "space".into(),
                Ipld::Bytes(target_space.as_bytes().to_vec()),
            );
        }
        if *republish {
            redirect.insert("republish".into(), Ipld::Bool(true));
        }
        fields.insert("redirect".into(), Ipld::Map(redirect));
    }
    signed(fields, key)
}

/// A version `Ref`: the document at `path` of `space` is at `heads`.
pub fn version_ref(
    key: &SigningKey,
    space: Option<&Principal>,
    path: &str,
    genesis: Cid,
    heads: &[Cid],
    generation: u64,
    ts_ms: u64,
) -> Result<Blob, SeedError> {
    reference(
        key,
        &RefSpec {
            space,
            path,
            genesis,
            generation,
            capability: None,
            target: RefTarget::Version(heads.to_vec()),
            ts_ms,
        },
    )
}

/// A `Comment` on the document at `path` (API form, `''` for home) of
/// `space`, at `version`. `id` (a record's tsid) makes it an edit of that
/// comment, and an empty `body` with an `id` its tombstone. `body` is the
/// publishable blocks, built by the caller.
#[derive(Clone, Debug, PartialEq)]
pub struct CommentSpec<'a> {
    pub id: Option<&'a str>,
    pub body: Vec<Ipld>,
    pub space: &'a Principal,
    pub path: &'a str,
    pub version: &'a [Cid],
    pub reply_parent: Option<Cid>,
    pub thread_root: Option<Cid>,
    /// `Private` for a comment on a private document.
    pub visibility: Option<&'a str>,
    pub ts_ms: u64,
}

/// A signed `Comment` blob.
pub fn comment(key: &SigningKey, spec: &CommentSpec<'_>) -> Result<Blob, SeedError> {
    let mut fields = BTreeMap::from([
        ("type".to_owned(), text("Comment")),
        ("ts".to_owned(), Ipld::Integer(spec.ts_ms.into())),
        ("body".to_owned(), Ipld::List(spec.body.clone())),
        (
            "space".to_owned(),
            Ipld::Bytes(spec.space.as_bytes().to_vec()),
        ),
        ("path".to_owned(), text(spec.path)),
        (
            "version".to_owned(),
            Ipld::List(spec.version.iter().copied().map(Ipld::Link).collect()),
        ),
    ]);
    if let Some(id) = spec.id {
        fields.insert("id".into(), text(id));
    }
    if let Some(parent) = spec.reply_parent {
        fields.insert("replyParent".into(), Ipld::Link(parent));
    }
    if let Some(root) = spec.thread_root {
        fields.insert("threadRoot".into(), Ipld::Link(root));
    }
    if let Some(visibility) = spec.visibility.filter(|v| !v.is_empty()) {
        fields.insert("visibility".into(), text(visibility));
    }
    signed(fields, key)
}

/// A `Contact`: the signer's name for `subject` (a new record), or, with
/// `id`, an edit of a record of `account`'s; with `id` and no `subject`,
/// that record's tombstone.
#[derive(Clone, Debug, PartialEq)]
pub struct ContactSpec<'a> {
    pub id: Option<&'a str>,
    pub subject: Option<&'a Principal>,
    pub name: Option<&'a str>,
    pub account: Option<&'a Principal>,
    pub ts_ms: u64,
}

/// A signed `Contact` blob.
pub fn contact(key: &SigningKey, spec: &ContactSpec<'_>) -> Result<Blob, SeedError> {
    let mut fields = BTreeMap::from([
        ("type".to_owned(), text("Contact")),
        ("ts".to_owned(), Ipld::Integer(spec.ts_ms.into())),
    ]);
    if let Some(id) = spec.id {
        fields.insert("id".into(), text(id));
    }
    if let Some(subject) = spec.subject {
        fields.insert("subject".into(), Ipld::Bytes(subject.as_bytes().to_vec()));
    }
    if let Some(name) = spec.name.filter(|n| !n.is_empty()) {
        fields.insert("name".into(), text(name));
    }
    if let Some(account) = spec.account {
        fields.insert("account".into(), Ipld::Bytes(account.as_bytes().to_vec()));
    }
    signed(fields, key)
}

/// The tsid Seed gives a record blob (a comment or a contact) signed at
/// `ts_ms`: base58btc multibase of the time's low six bytes (big-endian)
/// and the first four bytes of the blob's sha2-256.
pub fn record_tsid(ts_ms: u64, data: &[u8]) -> String {
    let mut bytes = [0u8; 10];
    bytes[..6].copy_from_slice(&ts_ms.to_be_bytes()[2..]);
    bytes[6..].copy_from_slice(&Sha256::digest(data)[..4]);
    format!("z{}", bs58::encode(bytes).into_string())
}

/// One entry of a `PublishBlobs` request: the blob's bytes, and its name
/// when the publisher gives it (Seed's client leaves it out for refs,
/// comments, contacts and capabilities).
#[derive(Clone, Debug, PartialEq)]
pub struct PublishEntry {
    pub cid: Option<String>,
    pub data: Vec<u8>,
}

impl PublishEntry {
    /// An entry named by its CID.
    pub fn named(blob: Blob) -> Self {
        PublishEntry {
            cid: Some(blob.cid.to_string()),
            data: blob.data,
        }
    }

    /// An entry without a name.
    pub fn bare(blob: Blob) -> Self {
        PublishEntry {
            cid: None,
            data: blob.data,
        }
    }
}

/// The body of `POST /api/PublishBlobs`: `{blobs: [{cid?, data}]}` in
/// canonical DAG-CBOR.
pub fn publish_body(entries: &[PublishEntry]) -> Result<Vec<u8>, SeedError> {
    let list = entries
        .iter()
        .map(|entry| {
            let mut fields = BTreeMap::from([("data".to_owned(), Ipld::Bytes(entry.data.clone()))]);
            if let Some(cid) = &entry.cid {
                fields.insert("cid".into(), text(cid));
            }
            Ipld::Map(fields)
        })
        .collect();
    cbor::to_canonical(&Ipld::Map(BTreeMap::from([(
        "blobs".to_owned(),
        Ipld::List(list),
    )])))
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
        let b = Principal::of_key(&SigningKey::from_bytes(&[0x07; 32]));
        assert_eq!(
            profile_alias(&key, &b, TS).unwrap().cid.to_string(),
            "bafyreifyzd44ue37qu5uqngjo4y5p4vrn7h4ryix7mg43jfpi5f7a33sim"
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

    fn key_b() -> Principal {
        Principal::of_key(&SigningKey::from_bytes(&[0x07; 32]))
    }

    fn genesis_a() -> Cid {
        genesis_change(&key_a()).unwrap().cid
    }

    #[test]
    fn tombstone_and_redirect_refs_match_seeds_encoders() {
        let key = key_a();
        let spec = RefSpec {
            space: None,
            path: "/x",
            genesis: genesis_a(),
            generation: 0,
            capability: None,
            target: RefTarget::Tombstone,
            ts_ms: TS,
        };
        assert_eq!(
            hex(&reference(&key, &spec).unwrap().data),
            "a76274731b0000018bcfe56800637369675840547798759c2aaafe7ac8c889b6843741c659d4f6e64c2911eba7d744268370ce03e7602e91196a7f1f58e5d191738ab16b7fcee48a4f4ef44c92be25b4c34f066470617468622f7864747970656352656665686561647380667369676e65725822ed01197f6b23e16c8532c6abc838facd5ea789be0c76b2920334039bfa8b3d368d616b67656e65736973426c6f62d82a58250001711220d54f57fc93d01cbad325478011a0e6b66b1bbfd0c0e3425e72c6436abd93118f"
        );
        let redirect = RefSpec {
            generation: 3,
            target: RefTarget::Redirect {
                path: "/y".into(),
                space: Some(key_b()),
                republish: true,
            },
            ..spec
        };
        assert_eq!(
            hex(&reference(&key, &redirect).unwrap().data),
            "a96274731b0000018bcfe5680063736967584021871306e0766c93f513533c19757e4068382d5639e19278a229d2dd508e7de748a515089ac1a93a7bc76f1346eba75d66c42ec27fa5967d948e709721569a096470617468622f7864747970656352656665686561647380667369676e65725822ed01197f6b23e16c8532c6abc838facd5ea789be0c76b2920334039bfa8b3d368d61687265646972656374a36470617468622f796573706163655822ed01ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c6972657075626c697368f56a67656e65726174696f6e036b67656e65736973426c6f62d82a58250001711220d54f57fc93d01cbad325478011a0e6b66b1bbfd0c0e3425e72c6436abd93118f"
        );
    }

    #[test]
    fn a_comment_and_a_contact_match_seeds_encoders_with_their_record_ids() {
        let key = key_a();
        let me = Principal::of_key(&key);
        let version: Cid = "bafyreia7iqo5vzlqi6d7mleflkjxp7m7j3dvmrllofal464xffrii634vq"
            .parse()
            .unwrap();
        let paragraph = Ipld::Map(BTreeMap::from([
            ("id".to_owned(), text("b1")),
            ("type".to_owned(), text("Paragraph")),
            ("text".to_owned(), text("hi")),
            ("annotations".to_owned(), Ipld::List(vec![])),
            ("children".to_owned(), Ipld::List(vec![])),
        ]));
        let blob = comment(
            &key,
            &CommentSpec {
                id: None,
                body: vec![paragraph],
                space: &me,
                path: "/x",
                version: &[version],
                reply_parent: None,
                thread_root: None,
                visibility: None,
                ts_ms: TS,
            },
        )
        .unwrap();
        assert_eq!(
            hex(&blob.data),
            "a86274731b0000018bcfe56800637369675840fc9ea4a957ec155e7313a69744dff41974a398403631c9eff283650508ebcfb27d786a92aeee47d163813f318bf113efdff45f4d19e0017d0c3bd8269baadd0164626f647981a56269646262316474657874626869647479706569506172616772617068686368696c6472656e806b616e6e6f746174696f6e73806470617468622f78647479706567436f6d6d656e746573706163655822ed01197f6b23e16c8532c6abc838facd5ea789be0c76b2920334039bfa8b3d368d61667369676e65725822ed01197f6b23e16c8532c6abc838facd5ea789be0c76b2920334039bfa8b3d368d616776657273696f6e81d82a582500017112201f441ddae5704787f62c855a9377fd9f4ec756456b7140be7b972962847b7cac"
        );
        assert_eq!(record_tsid(TS, &blob.data), "z63DQXD4R7zuBg");
        let bob = key_b();
        let blob = contact(
            &key,
            &ContactSpec {
                id: None,
                subject: Some(&bob),
                name: Some("Bob"),
                account: None,
                ts_ms: TS,
            },
        )
        .unwrap();
        assert_eq!(
            hex(&blob.data),
            "a66274731b0000018bcfe56800637369675840c07c65360ce76fb0b7874842b1c6c2c8dc30a211807b52f24c8b8f3b7364a0ff9fbe687bdd56f31f93fa299ad17bd28944e9f0a0f9d220a2bfac9b3dedca8a0e646e616d6563426f62647479706567436f6e74616374667369676e65725822ed01197f6b23e16c8532c6abc838facd5ea789be0c76b2920334039bfa8b3d368d61677375626a6563745822ed01ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c"
        );
        assert_eq!(record_tsid(TS, &blob.data), "z63DQXD4Rr11Kn");
    }
}
