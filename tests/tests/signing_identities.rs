//! Signing identities through the signed API: an imported hypermedia
//! account key is kept as a sealed vault secret named after its account,
//! listed (newest first; an agent's reader sees only those granted to
//! the agent) and deleted, with the reference's words for a seed that is
//! not 32 bytes, a key imported twice and a name that is no identity.
//! Created and updated identities publish Seed's account blobs. A key
//! that signs in a turn is in no answer, event, provider request, log
//! line or file the sidecar keeps, in any encoding.

#[path = "common/builtin.rs"]
mod builtin;
#[path = "signed_ws/client.rs"]
#[allow(dead_code)]
mod client;
mod common;

use agentos_protocol::seed::{Principal, SigningKey};
use agentos_tests::hm_server::{Fault, HmServer, Published};
use agentos_tests::provider_server::Flavor;
use agentos_tests::seed::{bytes, call};
use builtin::{json_of, ok, world_sections};
use serde_json::{json, Value};

const SEED: [u8; 32] = [7; 32];

/// A world whose hypermedia server is not there (nothing here publishes),
/// and the account `SEED` signs as, with its identity's secret name.
async fn world() -> (builtin::World, String, String) {
    let w = world_sections(
        Flavor::Anthropic,
        json!({"hypermedia": {"serverUrl": "http://127.0.0.1:9"}}),
    )
    .await;
    let account = Principal::of_key(&SigningKey::from_bytes(&SEED)).to_string();
    let name = format!("hm-account-{}", &account[..16]);
    (w, account, name)
}

#[tokio::test]
async fn an_imported_key_is_listed_never_shown_and_deleted() {
    let (w, account, name) = world().await;
    let imported = w
        .act(
            json!({"_": "ImportSigningIdentity", "seed": bytes(SEED), "label": " Scribe ",
                    "clientRequestId": "import-1"}),
        )
        .await;
    ok(&imported);
    let identity = json_of(&imported.body)["identity"].clone();
    assert_eq!(identity["name"], name.as_str());
    assert_eq!(identity["accountId"], account.as_str());
    assert_eq!(identity["label"], "Scribe");
    assert_eq!(identity["serverUrl"], "http://127.0.0.1:9");
    assert!(identity.get("importedBy").is_none());
    // The same request again replays; the key again (another request) is a
    // conflict; a bad seed is refused in the reference's words.
    let replay = w
        .act(
            json!({"_": "ImportSigningIdentity", "seed": bytes(SEED), "label": " Scribe ",
                    "clientRequestId": "import-1"}),
        )
        .await;
    ok(&replay);
    assert_eq!(json_of(&replay.body)["identity"], identity);
    let twice = w
        .act(json!({"_": "ImportSigningIdentity", "seed": bytes(SEED)}))
        .await;
    assert_eq!(twice.status, 409, "{:?}", twice.body);
    assert_eq!(
        json_of(&twice.body)["message"],
        format!("This account key is already on the server ({account})")
    );
    for seed in [bytes([1u8; 31]), json!("not bytes")] {
        let bad = w
            .act(json!({"_": "ImportSigningIdentity", "seed": seed}))
            .await;
        assert_eq!(bad.status, 400);
        assert_eq!(
            json_of(&bad.body)["message"],
            "Key seed must be exactly 32 bytes"
        );
    }
    // Listed, as an identity and as a secret without its value.
    let listed = w.act(json!({"_": "ListSigningIdentities"})).await;
    ok(&listed);
    assert_eq!(
        json_of(&listed.body)["identities"],
        json!([identity.clone()])
    );
    let secrets = w.act(json!({"_": "ListSecrets"})).await;
    let text = format!("{:?}", secrets.body);
    assert!(text.contains(&name));
    assert!(!text.contains("[7, 7, 7"), "no key in any answer: {text}");

    // An agent's reader sees the identities granted to the agent only.
    let reader = w.collaborator("reader").await;
    let as_reader = |w: &builtin::World| {
        let target = w.target.clone();
        let reader = reader.clone();
        let agent = w.agent_id.clone();
        async move {
            let listed = call(
                &target,
                &reader,
                json!({"_": "ListSigningIdentities", "agentId": agent}),
            )
            .await;
            ok(&listed);
            json_of(&listed.body)["identities"].clone()
        }
    };
    assert_eq!(as_reader(&w).await, json!([]));
    let mut definition = builtin::definition(None);
    definition["signingKeys"] = json!([name]);
    ok(&w
        .act(json!({"_": "UpdateAgent", "agentId": w.agent_id, "definition": definition}))
        .await);
    assert_eq!(as_reader(&w).await, json!([identity]));

    // Deleted once; then it is not found, as is a secret that is no
    // identity.
    ok(&w
        .act(json!({"_": "SetSecret", "name": "plain", "value": bytes(b"x")}))
        .await);
    let plain = w
        .act(json!({"_": "DeleteSigningIdentity", "name": "plain"}))
        .await;
    assert_eq!(plain.status, 404);
    assert_eq!(
        json_of(&plain.body)["message"],
        "Signing identity not found"
    );
    let deleted = w
        .act(json!({"_": "DeleteSigningIdentity", "name": name}))
        .await;
    ok(&deleted);
    assert_eq!(json_of(&deleted.body)["name"], name.as_str());
    let again = w
        .act(json!({"_": "DeleteSigningIdentity", "name": name}))
        .await;
    assert_eq!(again.status, 404);
    let listed = w.act(json!({"_": "ListSigningIdentities"})).await;
    assert_eq!(json_of(&listed.body)["identities"], json!([]));
}

#[tokio::test]
async fn an_agent_that_signs_gets_its_mention_trigger_and_sees_its_identity() {
    let (w, account, name) = world().await;
    ok(&w
        .act(json!({"_": "ImportSigningIdentity", "seed": bytes(SEED), "label": "Scribe"}))
        .await);
    // The world's own agent signs as nobody: no trigger.
    let none = w
        .act(json!({"_": "ListAgentTriggers", "agentId": w.agent_id}))
        .await;
    ok(&none);
    assert_eq!(json_of(&none.body)["triggers"], json!([]));
    let mut definition = builtin::definition(None);
    definition["name"] = json!("Herald");
    definition["signingKeys"] = json!([name]);
    let created = w
        .act(json!({"_": "CreateAgent", "definition": definition}))
        .await;
    ok(&created);
    let agent = created.text("agentId");
    let listed = w
        .act(json!({"_": "ListAgentTriggers", "agentId": agent}))
        .await;
    ok(&listed);
    let triggers = json_of(&listed.body)["triggers"].clone();
    assert_eq!(triggers.as_array().map(Vec::len), Some(1), "{triggers}");
    assert_eq!(triggers[0]["name"], "Mentions of Herald");
    assert_eq!(triggers[0]["enabled"], true);
    assert_eq!(
        triggers[0]["source"],
        json!({"type": "user-mention", "mentionedAccounts": [account]})
    );
    assert_eq!(
        triggers[0]["prompt"][0]["block"]["text"],
        "Respond to the mention, performing the action requested."
    );
    // Its turns are told which identity it may sign as.
    let session = w.act(json!({"_": "CreateSession", "agentId": agent})).await;
    ok(&session);
    w.provider.push(builtin::text("Noted."));
    ok(&w.message(&session.text("sessionId"), "who are you?").await);
    let body = w.last_body();
    let system = builtin::Sent::new(Flavor::Anthropic, &body).system();
    assert!(
        system.contains(&format!(
            "<available_signing_identities>\n[\n  {{\n    \"name\": \"Scribe\",\n    \"publicKey\": \"{account}\"\n  }}\n]\n</available_signing_identities>"
        )),
        "{system}"
    );
}

/// A world publishing to `server`.
async fn publishing_world(server: &HmServer) -> builtin::World {
    world_sections(
        Flavor::Anthropic,
        json!({"hypermedia": {"serverUrl": server.url(), "readTimeoutMs": 2000}}),
    )
    .await
}

fn field<'a>(blob: &'a Published, key: &str) -> &'a Value {
    &blob.value.as_ref().expect("a DAG-CBOR blob")[key]
}

/// The principal a blob's `signer` bytes (DAG-JSON) name.
fn signer_of(blob: &Published) -> String {
    use base64::Engine as _;
    let encoded = field(blob, "signer")["/"]["bytes"]
        .as_str()
        .expect("signer bytes");
    let raw = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(encoded)
        .expect("base64");
    Principal::from_bytes(&raw)
        .expect("a principal")
        .to_string()
}

#[tokio::test]
async fn a_created_identity_is_published_as_seeds_account_before_it_is_kept() {
    let server = HmServer::start().await;
    let w = publishing_world(&server).await;

    // The server fails: a 502 in the reference's words, and nothing kept,
    // not even the request id.
    server.fault(
        "PublishBlobs",
        Fault::Status(500, "blockstore unavailable".into()),
    );
    let create = json!({"_": "CreateSigningIdentity", "clientRequestId": "create-1"});
    let failed = w.act(create.clone()).await;
    assert_eq!(failed.status, 502, "{:?}", failed.body);
    assert_eq!(
        json_of(&failed.body)["message"],
        format!(
            "Failed to publish agent account to {}: HTTP 500 from PublishBlobs: \
             Internal Server Error: blockstore unavailable",
            server.url()
        )
    );
    let listed = w.act(json!({"_": "ListSigningIdentities"})).await;
    assert_eq!(json_of(&listed.body)["identities"], json!([]));
    let secrets = w.act(json!({"_": "ListSecrets"})).await;
    let names = json_of(&secrets.body)["secrets"].to_string();
    assert!(!names.contains("hm-account-"), "{names}");
    assert!(server.published().is_empty());

    // It heals: the same request now publishes the account in one request
    // of four blobs, Seed's order, each verified by the server.
    server.heal("PublishBlobs");
    let created = w.act(create.clone()).await;
    ok(&created);
    let identity = json_of(&created.body)["identity"].clone();
    let account = identity["accountId"]
        .as_str()
        .expect("accountId")
        .to_owned();
    assert_eq!(identity["name"], format!("hm-account-{}", &account[..16]));
    assert_eq!(
        identity["label"],
        format!("Agent account {}", &account[..10])
    );
    assert_eq!(identity["serverUrl"], server.url());
    assert!(identity.get("generatedBy").is_none() && identity.get("icon").is_none());
    let published = server.published();
    assert_eq!(published.len(), 1);
    let blobs = &published[0];
    assert_eq!(blobs.len(), 4);
    let types: Vec<&Value> = blobs.iter().map(|b| field(b, "type")).collect();
    assert_eq!(types, ["Profile", "Change", "Change", "Ref"]);
    assert!(blobs.iter().all(|b| signer_of(b) == account));
    assert!(blobs[..3]
        .iter()
        .all(|b| b.named.as_deref() == Some(b.cid.as_str())));
    assert_eq!(blobs[3].named, None);
    assert_eq!(field(&blobs[0], "name"), &identity["label"]);
    assert_eq!(field(&blobs[1], "ts"), 0);
    let ops = &field(&blobs[2], "body")["ops"];
    assert_eq!(ops[0]["attrs"][0]["value"], identity["label"]);
    assert_eq!(ops[1]["block"]["text"], "This is an agentic account.");
    assert_eq!(field(&blobs[2], "genesis")["/"], blobs[1].cid.as_str());
    assert_eq!(field(&blobs[3], "heads")[0]["/"], blobs[2].cid.as_str());
    assert_eq!(field(&blobs[3], "genesisBlob")["/"], blobs[1].cid.as_str());

    // Replayed, not published again; listed; no key anywhere.
    let replay = w.act(create).await;
    ok(&replay);
    assert_eq!(json_of(&replay.body)["identity"], identity);
    assert_eq!(server.published().len(), 1);
    let listed = w.act(json!({"_": "ListSigningIdentities"})).await;
    assert_eq!(
        json_of(&listed.body)["identities"],
        json!([identity.clone()])
    );

    // A label is the account's name.
    let named = w
        .act(json!({"_": "CreateSigningIdentity", "label": "  Herald "}))
        .await;
    ok(&named);
    assert_eq!(json_of(&named.body)["identity"]["label"], "Herald");
    assert_eq!(field(&server.published()[1][0], "name"), "Herald");
    let blank = w
        .act(json!({"_": "CreateSigningIdentity", "label": "  "}))
        .await;
    assert_eq!(blank.status, 400);
    assert_eq!(
        json_of(&blank.body)["message"],
        "Signing identity label is required"
    );
}

#[tokio::test]
async fn an_update_publishes_its_icon_then_its_profile() {
    let server = HmServer::start().await;
    let w = publishing_world(&server).await;
    let account = Principal::of_key(&SigningKey::from_bytes(&SEED)).to_string();
    let name = format!("hm-account-{}", &account[..16]);
    ok(&w
        .act(json!({"_": "ImportSigningIdentity", "seed": bytes(SEED)}))
        .await);
    assert!(server.published().is_empty(), "an import publishes nothing");

    // An icon of more than one chunk: its blocks, then the profile naming
    // its root.
    let icon: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let updated = w
        .act(
            json!({"_": "UpdateSigningIdentity", "name": name, "label": "Scribe",
                    "icon": {"data": bytes(&icon), "mimeType": "image/png"}}),
        )
        .await;
    ok(&updated);
    let identity = json_of(&updated.body)["identity"].clone();
    let root = agentos_protocol::seed::unixfs::file_blocks(&icon)
        .root
        .to_string();
    assert_eq!(identity["icon"], format!("ipfs://{root}"));
    assert_eq!(identity["label"], "Scribe");
    assert_eq!(identity["accountId"], account.as_str());
    let published = server.published();
    assert_eq!(published.len(), 2);
    assert_eq!(published[0].len(), 3, "two leaves and their node");
    let leaves: Vec<u8> = published[0][..2]
        .iter()
        .flat_map(|b| b.data.clone())
        .collect();
    assert_eq!(leaves, icon);
    let profile = &published[1][0];
    assert_eq!(field(profile, "name"), "Scribe");
    assert_eq!(field(profile, "avatar"), format!("ipfs://{root}").as_str());
    assert_eq!(signer_of(profile), account);

    // A later update keeps the icon; the profile fails: a 502, the
    // identity as it was.
    server.fault("PublishBlobs", Fault::Status(503, "later".into()));
    let failed = w
        .act(json!({"_": "UpdateSigningIdentity", "name": name, "label": "Scribe II"}))
        .await;
    assert_eq!(failed.status, 502);
    assert!(json_of(&failed.body)["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("Failed to publish agent account profile to ")));
    let listed = w.act(json!({"_": "ListSigningIdentities"})).await;
    assert_eq!(json_of(&listed.body)["identities"][0]["label"], "Scribe");
    server.heal("PublishBlobs");
    let renamed = w
        .act(json!({"_": "UpdateSigningIdentity", "name": name, "label": "Scribe II"}))
        .await;
    ok(&renamed);
    assert_eq!(
        json_of(&renamed.body)["identity"]["icon"],
        format!("ipfs://{root}")
    );
    assert_eq!(
        field(&server.published()[2][0], "avatar"),
        format!("ipfs://{root}").as_str()
    );

    // The reference's words for what is not there or not given.
    let missing = w
        .act(json!({"_": "UpdateSigningIdentity", "name": "hm-account-nobody", "label": "x"}))
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        json_of(&missing.body)["message"],
        "Signing identity not found"
    );
    let unlabelled = w
        .act(json!({"_": "UpdateSigningIdentity", "name": name}))
        .await;
    assert_eq!(unlabelled.status, 400);
    assert_eq!(
        json_of(&unlabelled.body)["message"],
        "Signing identity label is required"
    );
    let secrets = w.act(json!({"_": "ListSecrets"})).await;
    assert!(!format!("{:?}", secrets.body).contains("[7, 7, 7"));
}

#[tokio::test]
async fn a_memory_file_is_uploaded_to_ipfs_as_seeds_blocks() {
    let server = HmServer::start().await;
    let w = publishing_world(&server).await;
    ok(&w
        .act(json!({"_": "WriteAgentMemoryFile", "agentId": w.agent_id,
                    "path": "notes/plan.md", "content": "# Plan\n\nship it\n"}))
        .await);
    let uploaded = w
        .act(
            json!({"_": "UploadAgentMemoryFileToIpfs", "agentId": w.agent_id,
                    "path": "notes/plan.md"}),
        )
        .await;
    ok(&uploaded);
    let answer = json_of(&uploaded.body);
    let cid = agentos_protocol::seed::unixfs::file_blocks(b"# Plan\n\nship it\n")
        .root
        .to_string();
    assert_eq!(
        answer,
        json!({"_": "UploadAgentMemoryFileToIpfsResponse", "agentId": w.agent_id,
               "path": "notes/plan.md", "cid": cid, "url": format!("ipfs://{cid}"),
               "size": 16, "mimeType": "text/markdown"})
    );
    let published = server.published();
    assert_eq!(published.len(), 1);
    assert_eq!(published[0][0].data, b"# Plan\n\nship it\n");
    assert_eq!(published[0][0].cid, cid);

    // A stranger cannot; a missing file is not found; the server failing
    // is a 502.
    let stranger = agentos_tests::seed::Signer::new();
    let refused = call(
        &w.target,
        &stranger,
        json!({"_": "UploadAgentMemoryFileToIpfs", "agentId": w.agent_id, "path": "notes/plan.md"}),
    )
    .await;
    assert_eq!(refused.status, 404);
    let missing = w
        .act(
            json!({"_": "UploadAgentMemoryFileToIpfs", "agentId": w.agent_id,
                    "path": "notes/nothing.md"}),
        )
        .await;
    assert_eq!(missing.status, 404);
    server.fault("PublishBlobs", Fault::NotJson);
    let broken = w
        .act(
            json!({"_": "UploadAgentMemoryFileToIpfs", "agentId": w.agent_id,
                    "path": "notes/plan.md"}),
        )
        .await;
    assert_eq!(broken.status, 502);
    assert_eq!(server.published().len(), 1);
}

/// Every form a 32-byte key could be written in.
fn key_forms(seed: &[u8; 32]) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let engines = [
        base64::engine::general_purpose::STANDARD,
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    let mut forms = vec![
        seed.to_vec(),
        hex::encode(seed).into_bytes(),
        hex::encode_upper(seed).into_bytes(),
        format!("{:?}", &seed[..8])
            .trim_end_matches(']')
            .as_bytes()
            .to_vec(),
        serde_json::to_string(&seed[..8])
            .expect("json")
            .trim_end_matches(']')
            .as_bytes()
            .to_vec(),
    ];
    // Base64, wherever the key starts in a longer encoding: for each of
    // the three alignments, 27 of its bytes that fill whole groups.
    for engine in engines {
        for start in 0..3 {
            forms.push(engine.encode(&seed[start..start + 27]).into_bytes());
        }
    }
    forms
}

/// Every file under `dir`, read whole.
fn files_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.push((path, bytes));
            }
        }
    }
    out
}

#[tokio::test]
async fn a_key_that_signs_in_a_turn_is_in_no_answer_event_request_or_file() {
    let seed: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ 0x5c);
    let server = HmServer::start().await;
    let w = publishing_world(&server).await;
    let imported = w
        .act(json!({"_": "ImportSigningIdentity", "seed": bytes(seed), "label": "Quill"}))
        .await;
    ok(&imported);
    let identity = json_of(&imported.body)["identity"].clone();
    let account = identity["accountId"].as_str().expect("account").to_owned();
    let mut definition = builtin::definition(None);
    definition["signingKeys"] = json!([identity["name"]]);
    ok(&w
        .act(json!({"_": "UpdateAgent", "agentId": w.agent_id, "definition": definition}))
        .await);
    let session = w
        .act(json!({"_": "CreateSession", "agentId": w.agent_id}))
        .await;
    ok(&session);
    let session = session.text("sessionId");

    // The model publishes as the identity, in a turn.
    let address = format!("hm://{account}/quill-notes");
    w.provider.push(builtin::tool_calls(&[(
        "w1",
        "write",
        json!({"address": address, "content": "Signed in a turn.", "options": {"name": "Quill notes"}}),
    )]));
    w.provider.push(builtin::text("Published."));
    ok(&w.message(&session, "publish a note").await);
    let published = server.published();
    assert!(
        published
            .iter()
            .flatten()
            .any(|blob| signer_of(blob) == account && field(blob, "type") == "Change"),
        "the turn published a change signed by the key"
    );

    // Nowhere the key could leak to: answers, events, what the model
    // was sent, the sidecar's log and every file it keeps.
    let mut seen: Vec<(String, Vec<u8>)> = Vec::new();
    for action in [
        json!({"_": "ListSigningIdentities"}),
        json!({"_": "ListSecrets"}),
        json!({"_": "GetSession", "sessionId": session}),
    ] {
        let answer = w.act(action.clone()).await;
        ok(&answer);
        seen.push((
            action["_"].to_string(),
            serde_json::to_vec(&json_of(&answer.body)).expect("json"),
        ));
    }
    seen.push((
        "imported".into(),
        serde_json::to_vec(&json_of(&imported.body)).expect("json"),
    ));
    for record in w.event_records(&session).await {
        seen.push(("event".into(), serde_json::to_vec(&record).expect("json")));
    }
    for request in w.provider.requests() {
        seen.push((
            "provider request".into(),
            serde_json::to_vec(&request.body).expect("json"),
        ));
    }
    for (path, bytes) in files_under(w.sc.dir.path()) {
        seen.push((path.display().to_string(), bytes));
    }
    assert!(seen
        .iter()
        .any(|(what, _)| what.ends_with("sidecar.stderr")));
    assert!(seen.iter().any(|(what, _)| what.ends_with("vm.sqlite")));
    for form in key_forms(&seed) {
        for (what, bytes) in &seen {
            assert!(
                !bytes.windows(form.len()).any(|w| w == form.as_slice()),
                "the key, as {:?}, is in {what}",
                String::from_utf8_lossy(&form)
            );
        }
    }
}
