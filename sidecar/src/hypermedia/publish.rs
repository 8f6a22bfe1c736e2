//! Publishing to the hypermedia server: signed blobs built as Seed's client
//! builds them (`agentos_protocol::seed::blobs`, `unixfs`) and sent in one
//! `PublishBlobs` each. An account's first publish (its profile, its key's
//! genesis, a home document saying it is an agentic account, and the ref
//! naming that home), a profile on its own, and a file as IPFS blocks.
//! Nothing here is retried or kept: a caller that must keep nothing on a
//! failure simply does not store until this answers.

use agentos_protocol::seed::blobs::{self, Lineage, PublishEntry};
use agentos_protocol::seed::unixfs;
use agentos_protocol::seed::{Ipld, SigningKey};
use std::collections::BTreeMap;

use super::{HmError, Hypermedia};

/// The body of an agentic account's home document.
pub const HOME_TEXT: &str = "This is an agentic account.";

/// Letters Seed's client draws block ids from.
const BLOCK_ID_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// A fresh block id: eight letters or digits, as Seed's client makes them.
pub fn block_id() -> String {
    use rand::Rng as _;
    let mut rng = rand::thread_rng();
    (0..8)
        .map(|_| BLOCK_ID_ALPHABET[rng.gen_range(0..BLOCK_ID_ALPHABET.len())] as char)
        .collect()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn encoding(error: agentos_protocol::seed::SeedError) -> HmError {
    HmError::Malformed {
        key: "PublishBlobs".into(),
        message: error.to_string(),
    }
}

fn map(pairs: Vec<(&str, Ipld)>) -> Ipld {
    Ipld::Map(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn text(value: &str) -> Ipld {
    Ipld::String(value.to_owned())
}

/// The blobs of an account's first publish, in the order Seed sends them:
/// profile, genesis and home change (named), then the ref (bare).
pub fn account_blobs(
    key: &SigningKey,
    name: &str,
    home_block: &str,
    profile_ts: u64,
    change_ts: u64,
    ref_ts: u64,
) -> Result<Vec<PublishEntry>, HmError> {
    let profile = blobs::profile(key, name, None, None, profile_ts).map_err(encoding)?;
    let genesis = blobs::genesis_change(key).map_err(encoding)?;
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
                Ipld::Map(BTreeMap::from([
                    ("type".to_owned(), text("Paragraph")),
                    ("id".to_owned(), text(home_block)),
                    ("text".to_owned(), text(HOME_TEXT)),
                    ("annotations".to_owned(), Ipld::List(Vec::new())),
                ])),
            ),
        ]),
        map(vec![
            ("type", text("MoveBlocks")),
            ("blocks", Ipld::List(vec![text(home_block)])),
            ("parent", text("")),
        ]),
    ];
    let lineage = Lineage {
        genesis: genesis.cid,
        deps: vec![genesis.cid],
        depth: 1,
    };
    let home = blobs::change(key, ops, Some(&lineage), change_ts).map_err(encoding)?;
    let reference = blobs::version_ref(key, None, "", genesis.cid, &[home.cid], change_ts, ref_ts)
        .map_err(encoding)?;
    Ok(vec![
        PublishEntry::named(profile),
        PublishEntry::named(genesis),
        PublishEntry::named(home),
        PublishEntry::bare(reference),
    ])
}

impl Hypermedia {
    /// Publishes a new account for `key` named `name`, in one request.
    pub async fn publish_account(&self, key: &SigningKey, name: &str) -> Result<(), HmError> {
        let profile_ts = now_ms();
        let change_ts = now_ms();
        let entries = account_blobs(key, name, &block_id(), profile_ts, change_ts, now_ms())?;
        self.client.publish(&entries).await.map(drop)
    }

    /// Publishes `key`'s profile: `name`, and `avatar` when given.
    pub async fn publish_profile(
        &self,
        key: &SigningKey,
        name: &str,
        avatar: Option<&str>,
    ) -> Result<(), HmError> {
        let profile = blobs::profile(key, name, avatar, None, now_ms()).map_err(encoding)?;
        self.client
            .publish(&[PublishEntry::named(profile)])
            .await
            .map(drop)
    }

    /// Publishes `bytes` as IPFS blocks, in one request; answers the root
    /// CID (`ipfs://<root>` names the file).
    pub async fn publish_file(&self, bytes: &[u8]) -> Result<String, HmError> {
        let file = unixfs::file_blocks(bytes);
        let entries: Vec<PublishEntry> = file
            .blocks
            .into_iter()
            .map(|block| PublishEntry {
                cid: Some(block.cid.to_string()),
                data: block.data,
            })
            .collect();
        self.client.publish(&entries).await?;
        Ok(file.root.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accounts_first_publish_is_seeds_request_byte_for_byte() {
        // Seed's vector: key A (32 × 0x2a), no label, block id AAAAAAAA,
        // every clock reading 1,700,000,000,000.
        let key = SigningKey::from_bytes(&[0x2a; 32]);
        let ts = 1_700_000_000_000;
        let entries = account_blobs(&key, "Agent account z6MkgAnvkP", "AAAAAAAA", ts, ts, ts)
            .expect("builds");
        let body = blobs::publish_body(&entries).expect("encodes");
        assert_eq!(body.len(), 1266);
        use sha2::Digest as _;
        let digest: String = sha2::Sha256::digest(&body)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            digest,
            "084e51e62f51bde06e8b1ee6a3299aee43244a12691cbc28fef71b0bd0917301"
        );
    }

    #[test]
    fn block_ids_are_eight_of_seeds_letters() {
        let id = block_id();
        assert_eq!(id.len(), 8);
        assert!(id.bytes().all(|b| BLOCK_ID_ALPHABET.contains(&b)));
    }
}
