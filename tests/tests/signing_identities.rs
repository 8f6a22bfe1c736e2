//! Signing identities through the signed API: an imported hypermedia
//! account key is kept as a sealed vault secret named after its account,
//! listed (newest first; an agent's reader sees only those granted to
//! the agent) and deleted, with the reference's words for a seed that is
//! not 32 bytes, a key imported twice and a name that is no identity. No
//! answer ever holds the key.

#[path = "common/builtin.rs"]
mod builtin;
#[path = "signed_ws/client.rs"]
#[allow(dead_code)]
mod client;
mod common;

use agentos_protocol::seed::{Principal, SigningKey};
use agentos_tests::provider_server::Flavor;
use agentos_tests::seed::{bytes, call};
use builtin::{json_of, ok, world_sections};
use serde_json::json;

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
