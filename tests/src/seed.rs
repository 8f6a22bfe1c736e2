//! A signing client for the end-to-end tests of the signed API: a key, the
//! account it acts for, and JSON-described actions turned into signed
//! DAG-CBOR envelopes, sent with the minimal HTTP client (`http.rs`).
//! Responses come back as IPLD.

use agentos_protocol::seed::{
    cbor, cid_of, generate_signing_key, json_to_ipld, ActionMap, Capability, Envelope, Ipld,
    JsonForm, Principal, Role, SigningKey,
};
use serde_json::Value;

use crate::http::{request, Reply, Target};

/// A test's JSON as IPLD, by the protocol's one conversion as DAG-JSON
/// (bytes are `{"/": {"bytes": "<base64>"}}`, as the CLI and Seed's client
/// write them; see [`bytes`]).
pub fn ipld(value: &Value) -> Ipld {
    json_to_ipld(value, JsonForm::DagJson).expect("a test's JSON converts")
}

/// DAG-JSON bytes holding `data`.
pub fn bytes(data: impl AsRef<[u8]>) -> Value {
    use base64::Engine;
    let text = base64::engine::general_purpose::STANDARD_NO_PAD.encode(data);
    serde_json::json!({"/": {"bytes": text}})
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The clock in milliseconds, but later than every earlier call's answer:
/// Ed25519 signatures are deterministic, so the same action signed twice in
/// one millisecond would be the same bytes.
pub fn fresh_ts() -> i64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = now_ms();
    let previous = LAST
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
            Some(now.max(last + 1))
        })
        .unwrap_or(now);
    now.max(previous + 1)
}

/// One signing identity.
#[derive(Clone)]
pub struct Signer {
    pub key: SigningKey,
    pub account: Principal,
    /// Set on every envelope (`protocol`), when present.
    pub protocol: Option<u64>,
    /// The CID of a Capability by which `account` delegated to this key,
    /// set on every envelope when present.
    pub capability: Option<String>,
    /// That Capability's bytes, sent beside the CID when present.
    pub capability_blob: Option<Vec<u8>>,
}

impl Signer {
    pub fn new() -> Signer {
        let key = generate_signing_key();
        let account = Principal::of_key(&key);
        Signer {
            key,
            account,
            protocol: Some(2),
            capability: None,
            capability_blob: None,
        }
    }

    /// A key acting for another account.
    pub fn delegate_of(account: Principal) -> Signer {
        Signer {
            key: generate_signing_key(),
            account,
            protocol: Some(2),
            capability: None,
            capability_blob: None,
        }
    }

    /// A fresh key holding a Capability that `issuer`'s account issued to
    /// it with `role`: its envelopes act for that account and carry the CID
    /// and the blob (drop the blob with [`Signer::cid_only`]).
    pub fn with_capability(issuer: &Signer, role: Role) -> Signer {
        Signer::delegate_of(issuer.account).holding_capability(issuer, role)
    }

    /// This key, given a fresh Capability from `issuer` with `role`.
    pub fn holding_capability(mut self, issuer: &Signer, role: Role) -> Signer {
        let blob = Capability::issue(&issuer.key, self.principal(), role, now_ms(), None, None)
            .expect("issue a capability");
        self.capability = Some(cid_of(&blob));
        self.capability_blob = Some(blob);
        self
    }

    /// From now on, envelopes carry only the capability's CID.
    pub fn cid_only(&mut self) {
        self.capability_blob = None;
    }

    /// The key's own principal as text (`z6Mk…`), as actions name signers.
    pub fn key_id(&self) -> String {
        self.principal().to_string()
    }

    /// The 32-byte seed of the key, in hex (what a Node signer is given).
    pub fn seed_hex(&self) -> String {
        self.key
            .to_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    pub fn principal(&self) -> Principal {
        Principal::of_key(&self.key)
    }

    pub fn id(&self) -> String {
        self.account.to_string()
    }

    /// The signed envelope of `action` (`{"_": name, ...}`) at `ts`.
    pub fn envelope_at(&self, action: &Value, ts: i64) -> Envelope {
        let Ipld::Map(map) = ipld(action) else {
            panic!("an action is a map");
        };
        let map: ActionMap = map;
        let mut envelope = Envelope::unsigned(map, self.account, self.principal(), ts);
        envelope.protocol = self.protocol;
        envelope.capability = self.capability.clone();
        envelope.capability_blob = self.capability_blob.clone();
        envelope.sign_with(&self.key).expect("sign");
        envelope
    }

    /// The signed envelope of `action` now. Each call gets its own `ts`
    /// (see [`fresh_ts`]), so two identical actions are never the same
    /// bytes, which the server would refuse as a replay.
    pub fn sign(&self, action: &Value) -> Vec<u8> {
        self.envelope_at(action, fresh_ts())
            .encode()
            .expect("encode")
    }
}

impl Default for Signer {
    fn default() -> Self {
        Signer::new()
    }
}

/// A decoded answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Ipld,
    pub raw: Reply,
}

impl Answer {
    pub fn field(&self, name: &str) -> &Ipld {
        field(&self.body, name)
    }

    pub fn text(&self, name: &str) -> String {
        match self.field(name) {
            Ipld::String(s) => s.clone(),
            other => panic!("{name} is not a string: {other:?} in {:?}", self.body),
        }
    }

    /// `code` of an error answer.
    pub fn code(&self) -> String {
        self.text("code")
    }
}

pub fn field<'a>(value: &'a Ipld, name: &str) -> &'a Ipld {
    match value {
        Ipld::Map(map) => map.get(name).unwrap_or(&Ipld::Null),
        _ => &Ipld::Null,
    }
}

/// POSTs `body` as CBOR to `/api/message`.
pub async fn post(target: &Target, body: &[u8]) -> Answer {
    let raw = request(
        target,
        "POST",
        "/api/message",
        &[("content-type", "application/cbor")],
        body,
    )
    .await
    .expect("POST /api/message");
    let body = cbor::from_slice(&raw.body, 64 << 20).unwrap_or(Ipld::Null);
    Answer {
        status: raw.status,
        body,
        raw,
    }
}

/// Signs and sends `action`.
pub async fn call(target: &Target, signer: &Signer, action: Value) -> Answer {
    post(target, &signer.sign(&action)).await
}
