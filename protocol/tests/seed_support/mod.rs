//! Shared by the Seed vector and cross-implementation tests: the golden
//! vector file, its input specs, and building envelopes and capabilities
//! from them.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use agentos_protocol::seed::{
    json_to_ipld, Capability, Envelope, Ipld, JsonForm, Principal, Role, SigningKey,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where the golden vectors live.
pub fn vectors_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/seed_envelopes.json")
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Vectors {
    pub comment: String,
    pub capabilities: Vec<CapabilityVector>,
    pub envelopes: Vec<EnvelopeVector>,
}

/// Inputs of one envelope. `action` is DAG-JSON: a byte string is
/// `{"/": {"bytes": "<base64>"}}`. A whole number is an integer however it
/// is written (`1.0` is 1), as Seed's encoder writes it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvelopeSpec {
    pub seed_hex: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_seed_hex: Option<String>,
    pub ts_ms: i64,
    pub action: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability_blob_hex: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvelopeVector {
    pub name: String,
    pub spec: EnvelopeSpec,
    pub signer_id: String,
    pub account_id: String,
    pub signing_bytes_hex: String,
    pub signature_hex: String,
    pub envelope_hex: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilitySpec {
    pub issuer_seed_hex: String,
    pub delegate_seed_hex: String,
    pub role: String,
    pub ts_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityVector {
    pub name: String,
    pub spec: CapabilitySpec,
    pub blob_hex: String,
    pub cid: String,
}

pub fn load_vectors() -> Vectors {
    let text = std::fs::read_to_string(vectors_path()).expect("the golden vectors are checked in");
    serde_json::from_str(&text).expect("the golden vectors parse")
}

pub fn key(seed_hex: &str) -> SigningKey {
    let seed: [u8; 32] = hex::decode(seed_hex)
        .expect("hex seed")
        .try_into()
        .expect("32-byte seed");
    SigningKey::from_bytes(&seed)
}

/// DAG-JSON as the vectors write it, to IPLD, by the one conversion.
pub fn ipld_from_dag_json(value: &Value) -> Ipld {
    json_to_ipld(value, JsonForm::DagJson).expect("a vector's action converts")
}

/// Signs an envelope from its spec with this crate.
pub fn build_envelope(spec: &EnvelopeSpec) -> Envelope {
    let signer = key(&spec.seed_hex);
    let account = match &spec.account_seed_hex {
        Some(seed) => Principal::of_key(&key(seed)),
        None => Principal::of_key(&signer),
    };
    let Ipld::Map(action) = ipld_from_dag_json(&spec.action) else {
        panic!("an action spec is a JSON object");
    };
    let mut envelope = Envelope::unsigned(action, account, Principal::of_key(&signer), spec.ts_ms);
    envelope.protocol = spec.protocol;
    envelope.capability = spec.capability.clone();
    envelope.capability_blob = spec
        .capability_blob_hex
        .as_ref()
        .map(|blob| hex::decode(blob).expect("hex blob"));
    envelope.sign_with(&signer).expect("the spec encodes");
    envelope
}

pub fn envelope_vector(name: &str, spec: EnvelopeSpec) -> EnvelopeVector {
    let envelope = build_envelope(&spec);
    EnvelopeVector {
        name: name.to_string(),
        signer_id: envelope.signer.to_string(),
        account_id: envelope.account.to_string(),
        signing_bytes_hex: hex::encode(envelope.signing_bytes().unwrap()),
        signature_hex: hex::encode(envelope.sig),
        envelope_hex: hex::encode(envelope.encode().unwrap()),
        spec,
    }
}

/// Issues a Capability blob from its spec with this crate.
pub fn build_capability(spec: &CapabilitySpec) -> Vec<u8> {
    Capability::issue(
        &key(&spec.issuer_seed_hex),
        Principal::of_key(&key(&spec.delegate_seed_hex)),
        Role::parse(&spec.role),
        spec.ts_ms,
        spec.path.as_deref(),
        spec.label.as_deref(),
    )
    .expect("the spec encodes")
}

pub fn capability_vector(name: &str, spec: CapabilitySpec) -> CapabilityVector {
    let blob = build_capability(&spec);
    CapabilityVector {
        name: name.to_string(),
        cid: agentos_protocol::seed::cid_of(&blob),
        blob_hex: hex::encode(blob),
        spec,
    }
}

fn seed(byte: u8) -> String {
    hex::encode([byte; 32])
}

/// The inputs the checked-in vectors were generated from.
pub fn generate() -> Vectors {
    let delegation = capability_vector(
        "agent-delegation",
        CapabilitySpec {
            issuer_seed_hex: seed(3),
            delegate_seed_hex: seed(4),
            role: "AGENT".into(),
            ts_ms: 1_699_999_990_000,
            path: None,
            label: Some("laptop".into()),
        },
    );
    let writer = capability_vector(
        "writer-with-path",
        CapabilitySpec {
            issuer_seed_hex: seed(5),
            delegate_seed_hex: seed(6),
            role: "WRITER".into(),
            ts_ms: 1,
            path: Some("/notes".into()),
            label: None,
        },
    );
    let ts = 1_700_000_000_000;
    let spec = |seed_byte: u8, action: Value| EnvelopeSpec {
        seed_hex: seed(seed_byte),
        account_seed_hex: None,
        ts_ms: ts,
        action,
        protocol: None,
        capability: None,
        capability_blob_hex: None,
    };
    let envelopes = vec![
        envelope_vector(
            "list-agents",
            spec(1, serde_json::json!({"_": "ListAgents"})),
        ),
        envelope_vector(
            "create-agent",
            spec(
                2,
                serde_json::json!({
                    "_": "CreateAgent",
                    "clientRequestId": "req-1",
                    "definition": {
                        "name": "Résumé helper ✓",
                        "systemPrompt": [
                            {"block": {"id": "b1", "type": "Paragraph", "text": "Be brief."}, "children": []}
                        ],
                        "modelProvider": "openai",
                        "model": "gpt-5-mini",
                        "reasoningLevel": "low",
                        "tools": ["read", "write"],
                        "metadata": {
                            "temperature": 0.25,
                            "retries": 3,
                            "offset": -7,
                            "big": 4_294_967_296u64,
                            "flag": true,
                            "long": "x".repeat(300)
                        }
                    }
                }),
            ),
        ),
        envelope_vector(
            "set-secret",
            spec(
                1,
                serde_json::json!({
                    "_": "SetSecret",
                    "name": "openai-key",
                    "value": {"/": {"bytes": "c2stdGVzdA"}},
                    "metadata": {"kind": "api-key"}
                }),
            ),
        ),
        envelope_vector(
            "update-session-clears-override",
            spec(
                1,
                serde_json::json!({"_": "UpdateSession", "sessionId": "s1", "modelOverride": null}),
            ),
        ),
        envelope_vector(
            "message-session",
            spec(
                2,
                serde_json::json!({
                    "_": "MessageSession",
                    "sessionId": "s1",
                    "clientMessageId": "m-1",
                    "content": [
                        {"type": "text", "text": "Summarize this document."},
                        {"type": "context", "lines": ["Viewing hm://z6Mk/notes"]},
                        {"type": "attachment", "id": "e3b0c442"}
                    ]
                }),
            ),
        ),
        envelope_vector(
            "list-sessions-page",
            spec(
                1,
                serde_json::json!({
                    "_": "ListSessions",
                    "limit": 50,
                    "includeChildren": false,
                    "cursor": {"updatedBefore": 1_699_999_999_000i64, "idBefore": "s9"}
                }),
            ),
        ),
        envelope_vector(
            "delegated-subscribe",
            EnvelopeSpec {
                seed_hex: seed(4),
                account_seed_hex: Some(seed(3)),
                ts_ms: ts,
                action: serde_json::json!({"_": "Subscribe", "key": "sessions/s1", "afterSeq": 12}),
                protocol: Some(2),
                capability: Some(delegation.cid.clone()),
                capability_blob_hex: Some(delegation.blob_hex.clone()),
            },
        ),
    ];
    let mut vectors = Vectors {
        comment: String::new(),
        capabilities: vec![delegation, writer],
        envelopes,
    };
    vectors.comment = "Seed Agents signed envelopes and Capability blobs, generated by protocol/tests/seed_vectors.rs \
                       (generate_vectors, run with --ignored) from fixed Ed25519 seeds and timestamps. \
                       Each hex is canonical DAG-CBOR; signatures are Ed25519 over signingBytesHex."
        .to_string();
    vectors
}

/// The map an IPLD value holds; panics otherwise.
pub fn as_map(value: Ipld) -> BTreeMap<String, Ipld> {
    match value {
        Ipld::Map(map) => map,
        other => panic!("not a map: {other:?}"),
    }
}
