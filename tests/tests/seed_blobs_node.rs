//! Cross-implementation: every hypermedia blob we publish is the same bytes
//! as Seed's own published client builds (`@seed-hypermedia/client`,
//! driven through `protocol/tests/node/seed-blobs.mjs` with its clock
//! fixed per case): profiles, genesis and content changes, version,
//! tombstone and redirect refs, comments (new, replies, edits, tombstones,
//! from block nodes) with their record ids, contacts, capabilities, UnixFS
//! files from one leaf to a two-level tree, and the `PublishBlobs` request
//! body itself. The cases vary keys, times, names and shapes from a fixed
//! pseudo-random sequence.
//!
//! Needs node and the peers `scripts/install-peers` puts in `.peers/`;
//! without them the test prints a note and passes (CI installs the peers
//! first, so it runs there).

mod common;

use agentos_protocol::seed::blobs::{
    self, Blob, CommentSpec, ContactSpec, Lineage, PublishEntry, RefSpec, RefTarget,
};
use agentos_protocol::seed::unixfs::{self, CHUNK_BYTES};
use agentos_protocol::seed::{json_to_ipld, publishable, Capability, JsonForm, Principal, Role};
use agentos_protocol::seed::{Ipld, SigningKey};
use common::{node_package_present, node_script};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fixed pseudo-random sequence (64-bit LCG).
struct Sequence(u64);

impl Sequence {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 17
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn seed(&mut self) -> [u8; 32] {
        let mut seed = [0u8; 32];
        for byte in &mut seed {
            *byte = self.next() as u8;
        }
        seed
    }

    fn ts(&mut self) -> u64 {
        1_600_000_000_000 + self.below(200_000_000_000)
    }

    fn name(&mut self) -> String {
        const WORDS: [&str; 8] = [
            "Ada",
            "notes",
            "Ünïcode",
            "дневник",
            "日本語",
            "🌱 seed",
            "a \"quoted\" name",
            "x",
        ];
        let n = 1 + self.below(3);
        (0..n)
            .map(|_| WORDS[self.below(WORDS.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// One case: what the script is asked, and our bytes (or answer) for it.
struct Case {
    ask: Value,
    ours: Value,
}

fn principal(seed: &[u8; 32]) -> Principal {
    Principal::of_key(&SigningKey::from_bytes(seed))
}

fn blob_answer(blob: &Blob) -> Value {
    json!({"hex": hex(&blob.data), "cid": blob.cid.to_string()})
}

fn profiles(seq: &mut Sequence) -> Vec<Case> {
    (0..6)
        .map(|i| {
            let seed = seq.seed();
            let ts = seq.ts();
            let name = seq.name();
            let avatar = (i % 2 == 1).then(|| {
                "ipfs://bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e".to_owned()
            });
            let description = (i % 3 == 2).then(|| seq.name());
            let key = SigningKey::from_bytes(&seed);
            let blob =
                blobs::profile(&key, &name, avatar.as_deref(), description.as_deref(), ts).unwrap();
            let mut ask = json!({"kind": "profile", "seedHex": hex(&seed), "ts": ts, "name": name});
            if let Some(avatar) = avatar {
                ask["avatar"] = json!(avatar);
            }
            if let Some(description) = description {
                ask["description"] = json!(description);
            }
            Case {
                ask,
                ours: blob_answer(&blob),
            }
        })
        .collect()
}

/// Change ops as JSON (for the script) and as IPLD (for us).
fn ops(seq: &mut Sequence) -> Value {
    let mut ops = vec![json!({"type": "SetAttributes", "attrs": [
        {"key": ["name"], "value": seq.name()},
        {"key": ["tags"], "value": ["a", "b"]},
        {"key": ["count"], "value": seq.below(1000)},
        {"key": ["flag"], "value": true},
    ]})];
    let ids: Vec<String> = (0..1 + seq.below(3))
        .map(|i| format!("blk{i}x{}", seq.below(99)))
        .collect();
    for id in &ids {
        ops.push(json!({"type": "ReplaceBlock", "block": {
            "type": "Heading", "id": id, "text": seq.name(), "childrenType": "Group",
            "annotations": [{"type": "Bold", "starts": [0], "ends": [1]},
                            {"type": "Link", "starts": [1], "ends": [2], "link": "hm://z6Mk/x"}]}}));
    }
    ops.push(json!({"type": "MoveBlocks", "blocks": ids, "parent": ""}));
    ops.push(json!({"type": "DeleteBlocks", "blocks": ["gone"]}));
    Value::Array(ops)
}

fn changes(seq: &mut Sequence) -> Vec<Case> {
    let mut cases = Vec::new();
    for _ in 0..4 {
        let seed = seq.seed();
        let key = SigningKey::from_bytes(&seed);
        let genesis = blobs::genesis_change(&key).unwrap();
        cases.push(Case {
            ask: json!({"kind": "genesis", "seedHex": hex(&seed)}),
            ours: blob_answer(&genesis),
        });
        let ts = seq.ts();
        let depth = 1 + seq.below(40);
        let ops = ops(seq);
        let list = match json_to_ipld(&ops, JsonForm::Plain).unwrap() {
            Ipld::List(list) => list,
            _ => unreachable!("ops are a list"),
        };
        let lineage = Lineage {
            genesis: genesis.cid,
            deps: vec![genesis.cid],
            depth,
        };
        let change = blobs::change(&key, list, Some(&lineage), ts).unwrap();
        cases.push(Case {
            ask: json!({"kind": "change", "seedHex": hex(&seed), "ts": ts, "ops": ops, "depth": depth}),
            ours: blob_answer(&change),
        });
    }
    cases
}

fn refs(seq: &mut Sequence) -> Vec<Case> {
    let mut cases = Vec::new();
    for i in 0..9 {
        let seed = seq.seed();
        let key = SigningKey::from_bytes(&seed);
        let me = principal(&seed);
        let other = principal(&seq.seed());
        let genesis = blobs::genesis_change(&key).unwrap().cid;
        let heads: Vec<_> = (0..1 + seq.below(3))
            .map(|_| blobs::change(&key, vec![], None, seq.ts()).unwrap().cid)
            .collect();
        let capability = blobs::profile(&key, "cap", None, None, 1).unwrap().cid;
        let ts = seq.ts();
        let space = if i % 3 == 0 { other } else { me };
        let path = ["", "/notes", "/a/b-c"][i % 3];
        let generation = [0, ts, 7][(i / 3) % 3];
        let with_capability = i % 4 == 1;
        let target = match i % 3 {
            0 => RefTarget::Version(heads.clone()),
            1 => RefTarget::Tombstone,
            _ => RefTarget::Redirect {
                path: "/moved".into(),
                space: (i % 2 == 0).then_some(other),
                republish: i % 4 == 0,
            },
        };
        let spec = RefSpec {
            space: Some(&space),
            path,
            genesis,
            generation,
            capability: with_capability.then_some(capability),
            target: target.clone(),
            ts_ms: ts,
        };
        let blob = blobs::reference(&key, &spec).unwrap();
        let mut ask = json!({"kind": "ref", "seedHex": hex(&seed), "ts": ts,
            "space": space.to_string(), "path": path, "genesis": genesis.to_string(),
            "generation": generation});
        if with_capability {
            ask["capability"] = json!(capability.to_string());
        }
        match target {
            RefTarget::Version(heads) => {
                let version: Vec<String> = heads.iter().map(ToString::to_string).collect();
                ask["version"] = json!(version.join("."));
            }
            RefTarget::Tombstone => ask["tombstone"] = json!(true),
            RefTarget::Redirect {
                path,
                space: target_space,
                republish,
            } => {
                let mut redirect = json!({"targetPath": path, "republish": republish});
                if let Some(target_space) = target_space {
                    redirect["targetSpace"] = json!(target_space.to_string());
                }
                ask["redirect"] = redirect;
            }
        }
        cases.push(Case {
            ask,
            ours: json!({"hex": hex(&blob.data)}),
        });
    }
    cases
}

fn content(seq: &mut Sequence) -> Value {
    json!([
        {"block": {"id": "h1", "type": "Heading", "text": seq.name(), "annotations": [],
                   "attributes": {"childrenType": "Group"}},
         "children": [
            {"block": {"id": "p1", "type": "Paragraph", "text": seq.name(),
                       "annotations": [{"type": "Italic", "starts": [0], "ends": [2]},
                                       {"type": "Embed", "starts": [2], "ends": [3], "link": "hm://z6Mkx/y"},
                                       {"type": "TextColor", "starts": [0], "ends": [1], "attributes": {"value": "red"}}],
                       "attributes": {}},
             "children": []},
            {"block": {"id": "empty", "type": "Paragraph", "text": "", "annotations": [], "attributes": {}},
             "children": []}
         ]},
        {"block": {"id": "l1", "type": "Paragraph", "text": "", "annotations": [],
                   "attributes": {"childrenType": "Unordered"}},
         "children": [{"block": {"id": "li", "type": "Paragraph", "text": "item", "annotations": [], "attributes": {}}}]},
        {"block": {"id": "c1", "type": "Code", "text": "let x = 1;", "annotations": [],
                   "attributes": {"language": "rust"}}},
        {"block": {"id": "i1", "type": "Image", "text": "alt", "link": "ipfs://bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e",
                   "annotations": [], "attributes": {"width": "200"}}},
        {"block": {"id": "e1", "type": "Embed", "link": "hm://z6Mkx/y", "attributes": {"view": "Card"}}},
        {"block": {"id": "v1", "type": "Video", "link": "ipfs://x", "attributes": {}}},
        {"block": {"id": "b1", "type": "Button", "text": "Go", "link": "https://example.com", "attributes": {}}},
        {"block": {"id": "t", "type": "Paragraph", "text": "  ", "annotations": [], "attributes": {}}}
    ])
}

fn comments(seq: &mut Sequence) -> Vec<Case> {
    let mut cases = Vec::new();
    for i in 0..6 {
        let seed = seq.seed();
        let key = SigningKey::from_bytes(&seed);
        let space = principal(&seq.seed());
        let ts = seq.ts();
        let path = ["", "/doc", "/a/b"][i % 3];
        let version: Vec<_> = (0..1 + seq.below(2))
            .map(|_| blobs::change(&key, vec![], None, seq.ts()).unwrap().cid)
            .collect();
        let version_text = version
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(".");
        let parent = blobs::profile(&key, "p", None, None, 2).unwrap().cid;
        let root = blobs::profile(&key, "r", None, None, 3).unwrap().cid;
        let nodes = content(seq);
        let mut ask = json!({"kind": "comment", "seedHex": hex(&seed), "ts": ts,
            "docUid": space.to_string(), "docPath": path, "docVersion": version_text,
            "content": nodes});
        let (id, body, reply_parent, thread_root) = match i % 3 {
            // A reply (to a reply: its own thread root).
            0 => {
                ask["replyCommentVersion"] = json!(parent.to_string());
                ask["rootReplyCommentVersion"] = json!(root.to_string());
                let nodes = nodes.as_array().unwrap();
                let body = publishable::blocks(publishable::trim_trailing_empty(nodes)).unwrap();
                (None, body, Some(parent), Some(root))
            }
            // An edit.
            1 => {
                ask["commentId"] = json!(format!("{}/z63DQXD4R7zuBg", principal(&seed)));
                let nodes = nodes.as_array().unwrap();
                let body = publishable::blocks(publishable::trim_trailing_empty(nodes)).unwrap();
                (Some("z63DQXD4R7zuBg"), body, None, None)
            }
            // A tombstone.
            _ => {
                ask["commentId"] = json!(format!("{}/z63DQXD4R7zuBg", principal(&seed)));
                ask["delete"] = json!(true);
                (Some("z63DQXD4R7zuBg"), Vec::new(), None, None)
            }
        };
        let blob = blobs::comment(
            &key,
            &CommentSpec {
                id,
                body,
                space: &space,
                path,
                version: &version,
                reply_parent,
                thread_root,
                visibility: None,
                ts_ms: ts,
            },
        )
        .unwrap();
        let record = format!(
            "{}/{}",
            principal(&seed),
            blobs::record_tsid(ts, &blob.data)
        );
        cases.push(Case {
            ask,
            ours: json!({"hex": hex(&blob.data), "recordId": record}),
        });
    }
    cases
}

fn contacts_and_capabilities(seq: &mut Sequence) -> Vec<Case> {
    let mut cases = Vec::new();
    for i in 0..4 {
        let seed = seq.seed();
        let key = SigningKey::from_bytes(&seed);
        let subject = principal(&seq.seed());
        let ts = seq.ts();
        let name = (i % 2 == 0).then(|| seq.name());
        let blob = blobs::contact(
            &key,
            &ContactSpec {
                id: None,
                subject: Some(&subject),
                name: name.as_deref(),
                account: None,
                ts_ms: ts,
            },
        )
        .unwrap();
        let mut ask = json!({"kind": "contact", "seedHex": hex(&seed), "ts": ts,
            "subjectUid": subject.to_string()});
        if let Some(name) = &name {
            ask["name"] = json!(name);
        }
        cases.push(Case {
            ask,
            ours: json!({"hex": hex(&blob.data),
                         "recordId": format!("{}/{}", principal(&seed), blobs::record_tsid(ts, &blob.data))}),
        });
        let role = if i % 2 == 0 {
            Role::Writer
        } else {
            Role::Agent
        };
        let path = (i >= 2).then_some("/team");
        let label = (i % 3 == 0).then(|| seq.name());
        let data = Capability::issue(
            &key,
            subject,
            role.clone(),
            ts as i64,
            path,
            label.as_deref(),
        )
        .unwrap();
        let mut ask = json!({"kind": "capability", "seedHex": hex(&seed), "ts": ts,
            "delegateUid": subject.to_string(), "role": role.as_str()});
        if let Some(path) = path {
            ask["path"] = json!(path);
        }
        if let Some(label) = label {
            ask["label"] = json!(label);
        }
        cases.push(Case {
            ask,
            ours: json!({"hex": hex(&data)}),
        });
    }
    cases
}

fn files() -> Vec<Case> {
    let sizes = [
        (7u8, 0usize),
        (1, 11),
        (2, CHUNK_BYTES),
        (3, CHUNK_BYTES + 1),
        (4, 3 * CHUNK_BYTES + 7),
        // 175 leaves: a second level of nodes under the root.
        (5, 174 * CHUNK_BYTES + 1),
    ];
    sizes
        .iter()
        .map(|&(fill, length)| {
            let made = unixfs::file_blocks(&vec![fill; length]);
            let blocks: Vec<Value> = made
                .blocks
                .iter()
                .map(|b| json!({"cid": b.cid.to_string(), "sha256": hex(&Sha256::digest(&b.data))}))
                .collect();
            Case {
                ask: json!({"kind": "file", "seedHex": hex(&[0u8; 32]), "fill": fill, "length": length}),
                ours: json!({"root": made.root.to_string(), "blocks": blocks}),
            }
        })
        .collect()
}

fn publish_bodies(seq: &mut Sequence) -> Vec<Case> {
    let key = SigningKey::from_bytes(&seq.seed());
    let profile = blobs::profile(&key, &seq.name(), None, None, seq.ts()).unwrap();
    let genesis = blobs::genesis_change(&key).unwrap();
    let reference =
        blobs::version_ref(&key, None, "", genesis.cid, &[genesis.cid], 5, seq.ts()).unwrap();
    let entries = vec![
        PublishEntry::named(profile),
        PublishEntry::named(genesis),
        PublishEntry::bare(reference),
    ];
    let body = blobs::publish_body(&entries).unwrap();
    let listed: Vec<Value> = entries
        .iter()
        .map(|e| match &e.cid {
            Some(cid) => json!({"cid": cid, "hex": hex(&e.data)}),
            None => json!({"hex": hex(&e.data)}),
        })
        .collect();
    vec![Case {
        ask: json!({"kind": "publish", "seedHex": hex(&[0u8; 32]), "blobs": listed}),
        ours: json!({"bodyHex": hex(&body)}),
    }]
}

#[test]
fn our_blobs_are_seeds_bytes() {
    if !node_package_present(
        "the hypermedia blob cross-check",
        "seed-client/node_modules/@seed-hypermedia/client",
    ) {
        return;
    }
    let mut seq = Sequence(0x5eed_b10b);
    let mut cases = Vec::new();
    cases.extend(profiles(&mut seq));
    cases.extend(changes(&mut seq));
    cases.extend(refs(&mut seq));
    cases.extend(comments(&mut seq));
    cases.extend(contacts_and_capabilities(&mut seq));
    cases.extend(files());
    cases.extend(publish_bodies(&mut seq));
    let asks: Vec<Value> = cases.iter().map(|c| c.ask.clone()).collect();
    let output = node_script("seed-blobs.mjs", &[], &Value::Array(asks));
    let theirs: Vec<Value> = serde_json::from_str(&output).expect("a list of answers");
    assert_eq!(theirs.len(), cases.len());
    for (case, theirs) in cases.iter().zip(&theirs) {
        assert_eq!(&case.ours, theirs, "case {}", case.ask);
    }
}
