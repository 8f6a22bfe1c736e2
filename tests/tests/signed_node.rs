//! Cross-implementation, end to end: envelopes signed by Node with the
//! libraries Seed's own client uses (`@ipld/dag-cbor`, `@noble/curves`,
//! through `protocol/tests/node/seed-sign.mjs`, exactly as Seed's client
//! builds them) are accepted by our server. Node only signs; this test
//! posts its bytes to a real sidecar and reads the answers.
//!
//! Needs node and the peers `scripts/install-peers` puts in `.peers/`;
//! without them the test prints a note and passes (CI installs the peers
//! first, so it runs there).

mod common;

use agentos_protocol::seed::Ipld;
use agentos_tests::http::Target;
use agentos_tests::seed::{field, fresh_ts, post, Answer, Signer};
use base64::Engine;
use common::{node_peers_present, seed_sign, unhex, Backend, Options, Sidecar};
use serde_json::{json, Value};

/// A Node signer: a key's seed, the account it acts for, and optionally a
/// capability (CID, and its blob while it is sent).
struct NodeSigner {
    seed_hex: String,
    account_seed_hex: Option<String>,
    protocol: Option<u64>,
    capability: Option<(String, Option<String>)>,
}

impl NodeSigner {
    fn of(signer: &Signer) -> NodeSigner {
        NodeSigner {
            seed_hex: signer.seed_hex(),
            account_seed_hex: None,
            protocol: Some(2),
            capability: None,
        }
    }

    /// The envelope bytes Node signs for `action` (DAG-JSON bytes allowed).
    fn sign(&self, action: Value) -> Vec<u8> {
        let mut spec = json!({"seedHex": self.seed_hex, "tsMs": fresh_ts(), "action": action});
        if let Some(account) = &self.account_seed_hex {
            spec["accountSeedHex"] = json!(account);
        }
        if let Some(protocol) = self.protocol {
            spec["protocol"] = json!(protocol);
        }
        if let Some((cid, blob)) = &self.capability {
            spec["capability"] = json!(cid);
            if let Some(blob) = blob {
                spec["capabilityBlobHex"] = json!(blob);
            }
        }
        unhex(&seed_sign("sign", &spec))
    }

    async fn send(&self, t: &Target, action: Value) -> Answer {
        let answer = post(t, &self.sign(action.clone())).await;
        assert_eq!(answer.status, 200, "{action}: {:?}", answer.body);
        answer
    }
}

fn definition(adapter: Option<&str>) -> Value {
    let mut d = json!({"name": "From Node", "systemPrompt": "Be brief.",
                       "modelProvider": "openai", "model": "gpt-5-mini"});
    if let Some(adapter) = adapter {
        d["adapter"] = json!(adapter);
    }
    d
}

fn list(answer: &Answer, name: &str) -> Vec<Ipld> {
    match answer.field(name) {
        Ipld::List(items) => items.clone(),
        other => panic!("{name}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_signed_by_seeds_libraries_are_accepted() {
    if !node_peers_present("the Node-signed requests") {
        return;
    }
    let sc = Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            config: json!({"http": {"listen": "127.0.0.1:0"}}),
            ..Options::default()
        },
    )
    .await;
    let t = sc.api();
    let owner = Signer::new();
    let node_owner = NodeSigner::of(&owner);

    let created = node_owner
        .send(
            &t,
            json!({"_": "CreateAgent", "definition": definition(None), "clientRequestId": "n-1"}),
        )
        .await;
    let agent_id = created.text("agentId");
    let listed = node_owner.send(&t, json!({"_": "ListAgents"})).await;
    let agents = list(&listed, "agents");
    assert_eq!(agents.len(), 1);
    assert_eq!(field(&agents[0], "id"), &Ipld::String(agent_id.clone()));
    assert_eq!(field(&agents[0], "account"), &Ipld::String(owner.id()));
    assert_eq!(
        field(&agents[0], "accessRole"),
        &Ipld::String("owner".into())
    );
    // The same client request id from Node replays.
    let again = node_owner
        .send(
            &t,
            json!({"_": "CreateAgent", "definition": definition(None), "clientRequestId": "n-1"}),
        )
        .await;
    assert_eq!(again.raw.body, created.raw.body);

    // A protocol-1 client (no `protocol`) gets sessions, not a count.
    let old = NodeSigner {
        protocol: None,
        ..NodeSigner::of(&owner)
    };
    let got = old
        .send(&t, json!({"_": "GetAgent", "agentId": agent_id}))
        .await;
    assert_eq!(got.field("sessions"), &Ipld::List(vec![]));
    assert_eq!(got.field("sessionCount"), &Ipld::Null);

    // Bytes in an action, as Seed's client writes them.
    let value = base64::engine::general_purpose::STANDARD_NO_PAD.encode(b"not a real key");
    node_owner
        .send(
            &t,
            json!({"_": "SetSecret", "name": "k", "value": {"/": {"bytes": value}}}),
        )
        .await;

    // A session and a turn on a registry adapter.
    let echo = node_owner
        .send(
            &t,
            json!({"_": "CreateAgent", "definition": definition(Some("echo"))}),
        )
        .await
        .text("agentId");
    let session = node_owner
        .send(
            &t,
            json!({"_": "CreateSession", "agentId": echo, "title": "n"}),
        )
        .await
        .text("sessionId");
    let said = node_owner
        .send(
            &t,
            json!({"_": "MessageSession", "sessionId": session,
                   "content": [{"type": "text", "text": "echo from node",
                                "clientMessageId": "n-m-1"}]}),
        )
        .await;
    assert!(!said.text("assistantEventId").is_empty());
    assert_eq!(sc.delivered_prompts().len(), 1);

    // A trigger as Seed's automations tab sends it: integers and a string
    // prompt as its encoder writes them, an idempotent create, a patch.
    let trigger = json!({"name": "Nightly", "enabled": true, "prompt": "Check **open** issues",
        "source": {"type": "schedule", "schedule": {"kind": "weekly", "daysOfWeek": [1, 3, 5],
                   "timeOfDay": "21:00", "timezone": "America/New_York"}}});
    let made = node_owner
        .send(
            &t,
            json!({"_": "CreateAgentTrigger", "agentId": echo, "trigger": trigger,
                   "clientRequestId": "n-t-1"}),
        )
        .await;
    let again = node_owner
        .send(
            &t,
            json!({"_": "CreateAgentTrigger", "agentId": echo, "trigger": trigger,
                   "clientRequestId": "n-t-1"}),
        )
        .await;
    assert_eq!(again.raw.body, made.raw.body);
    let made = made.field("trigger").clone();
    assert_eq!(
        field(field(&made, "source"), "schedule"),
        &agentos_protocol::seed::json_to_ipld(
            &json!({"kind": "weekly", "daysOfWeek": [1, 3, 5], "timeOfDay": "21:00",
                    "timezone": "America/New_York"}),
            agentos_protocol::seed::JsonForm::Plain
        )
        .expect("ipld")
    );
    let Ipld::String(trigger_id) = field(&made, "id").clone() else {
        panic!("an id: {made:?}");
    };
    let patched = node_owner
        .send(
            &t,
            json!({"_": "UpdateAgentTrigger", "triggerId": trigger_id,
                   "patch": {"source": {"type": "run-completed", "status": "failed"}}}),
        )
        .await;
    assert_eq!(
        field(field(patched.field("trigger"), "source"), "status"),
        &Ipld::String("failed".into())
    );
    let listed = node_owner
        .send(&t, json!({"_": "ListAgentTriggers", "agentId": echo}))
        .await;
    assert_eq!(list(&listed, "triggers").len(), 1);

    // A delegate holding a Capability Node issued acts for the owner: first
    // with the blob, then with the CID alone.
    let delegate = Signer::delegate_of(owner.account);
    let made: Value = serde_json::from_str(&seed_sign(
        "capability",
        &json!({"issuerSeedHex": owner.seed_hex(), "delegateSeedHex": delegate.seed_hex(),
                "role": "WRITER", "tsMs": fresh_ts()}),
    ))
    .expect("capability JSON");
    let cid = made["cid"].as_str().expect("cid").to_owned();
    let blob = made["blobHex"].as_str().expect("blob").to_owned();
    let mut node_delegate = NodeSigner {
        account_seed_hex: Some(owner.seed_hex()),
        capability: Some((cid.clone(), Some(blob))),
        ..NodeSigner::of(&delegate)
    };
    let theirs = node_delegate.send(&t, json!({"_": "ListAgents"})).await;
    assert_eq!(list(&theirs, "agents").len(), 2);
    node_delegate.capability = Some((cid.clone(), None));
    node_delegate
        .send(&t, json!({"_": "GetSession", "sessionId": session}))
        .await;
    let signers = node_owner.send(&t, json!({"_": "ListSigners"})).await;
    let signers = list(&signers, "signers");
    assert_eq!(signers.len(), 1);
    assert_eq!(field(&signers[0], "capability"), &Ipld::String(cid));

    // And what Node signs wrong is refused as ours would be: a replay.
    let once = node_owner.sign(json!({"_": "ListAgents"}));
    assert_eq!(post(&t, &once).await.status, 200);
    let replayed = post(&t, &once).await;
    assert_eq!((replayed.status, replayed.code()), (401, "replayed".into()));
}
