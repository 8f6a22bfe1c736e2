//! The signed envelope from the outside: what a verifier accepts and every
//! way it refuses, each with its typed error.

use std::collections::BTreeMap;

use agentos_protocol::seed::{
    cbor, Action, ActionMap, Capability, Envelope, Ipld, Principal, Role, SeedError, SigningKey,
    VerifyingKey,
};

const MAX: usize = 1 << 20;
const TS: i64 = 1_700_000_000_000;

fn key(byte: u8) -> SigningKey {
    SigningKey::from_bytes(&[byte; 32])
}

fn get_agent() -> ActionMap {
    let mut action = BTreeMap::new();
    action.insert("_".to_string(), Ipld::String("GetAgent".into()));
    action.insert("agentId".to_string(), Ipld::String("a1".into()));
    action
}

fn signed() -> Envelope {
    let signer = key(1);
    Envelope::sign(get_agent(), Principal::of_key(&signer), &signer, TS).unwrap()
}

/// The envelope as a generic map, for edits a well-behaved signer would
/// never make.
fn as_map(envelope: &Envelope) -> BTreeMap<String, Ipld> {
    cbor::from_slice(&envelope.encode().unwrap(), MAX).unwrap()
}

fn encode_map(map: &BTreeMap<String, Ipld>) -> Vec<u8> {
    cbor::to_canonical(map).unwrap()
}

fn code_of(bytes: &[u8]) -> &'static str {
    Envelope::decode(bytes, MAX).unwrap_err().code()
}

#[test]
fn a_signed_envelope_decodes_and_verifies() {
    let envelope = signed();
    let bytes = envelope.encode().unwrap();
    let decoded = Envelope::decode(&bytes, MAX).unwrap();
    assert_eq!(decoded, envelope);
    decoded.verify_signature().unwrap();
    assert_eq!(decoded.action_name(), "GetAgent");
    assert_eq!(decoded.ts_ms().unwrap(), TS);
    assert_eq!(
        decoded.typed_action().unwrap(),
        Action::GetAgent {
            agent_id: "a1".into()
        }
    );
    // Re-encoding what was decoded gives the same bytes.
    assert_eq!(decoded.encode().unwrap(), bytes);
}

#[test]
fn signing_bytes_keep_a_zeroed_sig() {
    let envelope = signed();
    let signing: BTreeMap<String, Ipld> =
        cbor::from_slice(&envelope.signing_bytes().unwrap(), MAX).unwrap();
    assert_eq!(signing.get("sig"), Some(&Ipld::Bytes(vec![0; 64])));
    let mut wire = as_map(&envelope);
    wire.insert("sig".into(), Ipld::Bytes(vec![0; 64]));
    assert_eq!(encode_map(&wire), envelope.signing_bytes().unwrap());
}

#[test]
fn a_wrong_signature_fails() {
    let mut envelope = signed();
    envelope.sig[0] ^= 1;
    assert_eq!(envelope.verify_signature(), Err(SeedError::BadSignature));

    // Signed by another key than the one it names.
    let mut envelope = signed();
    envelope.signer = Principal::of_key(&key(2));
    assert_eq!(envelope.verify_signature(), Err(SeedError::BadSignature));

    // A key given ahead must be the signer's own.
    let envelope = signed();
    let own = VerifyingKey::from_bytes(&envelope.signer.public_key()).unwrap();
    assert_eq!(envelope.verify_signature_with(&own), Ok(()));
    let other = key(2).verifying_key();
    assert_eq!(
        envelope.verify_signature_with(&other),
        Err(SeedError::BadSignature)
    );
}

#[test]
fn a_tampered_action_fails_verification() {
    let envelope = signed();
    let bytes = envelope.encode().unwrap();
    // Flip one byte inside the action's agent id ("a1" → "a0").
    let at = bytes.windows(2).rposition(|w| w == b"a1").unwrap();
    let mut tampered = bytes.clone();
    tampered[at + 1] = b'0';
    let decoded = Envelope::decode(&tampered, MAX).unwrap();
    assert_eq!(decoded.verify_signature(), Err(SeedError::BadSignature));

    // The same through the fields: a changed timestamp.
    let mut changed = signed();
    changed
        .action
        .insert("ts".into(), Ipld::Integer(i128::from(TS + 1)));
    assert_eq!(changed.verify_signature(), Err(SeedError::BadSignature));

    // Or an added capability reference.
    let mut added = signed();
    added.capability = Some("bafyrei".into());
    assert_eq!(added.verify_signature(), Err(SeedError::BadSignature));
}

#[test]
fn principals_must_be_34_bytes_with_the_ed25519_prefix() {
    let envelope = signed();
    let mut wrong_prefix = as_map(&envelope);
    let mut bytes = envelope.signer.as_bytes().to_vec();
    bytes[0] = 0xe7;
    wrong_prefix.insert("signer".into(), Ipld::Bytes(bytes));
    assert_eq!(code_of(&encode_map(&wrong_prefix)), "bad_principal");

    let mut short = as_map(&envelope);
    short.insert(
        "account".into(),
        Ipld::Bytes(envelope.account.as_bytes()[..33].to_vec()),
    );
    assert_eq!(code_of(&encode_map(&short)), "bad_principal");

    let mut text = as_map(&envelope);
    text.insert("account".into(), Ipld::String(envelope.account.to_string()));
    assert_eq!(code_of(&encode_map(&text)), "bad_principal");
}

#[test]
fn the_timestamp_must_be_an_integer() {
    let mut float = signed();
    float
        .action
        .insert("ts".into(), Ipld::Float(1_700_000_000_000.5));
    let decoded = Envelope::decode(&float.encode().unwrap(), MAX).unwrap();
    assert_eq!(decoded.ts_ms().unwrap_err().code(), "bad_timestamp");

    let mut text = signed();
    text.action
        .insert("ts".into(), Ipld::String("1700000000000".into()));
    assert_eq!(text.ts_ms().unwrap_err().code(), "bad_timestamp");

    let mut missing = signed();
    missing.action.remove("ts");
    let decoded = Envelope::decode(&missing.encode().unwrap(), MAX).unwrap();
    assert_eq!(decoded.ts_ms().unwrap_err().code(), "bad_timestamp");

    let mut huge = signed();
    huge.action
        .insert("ts".into(), Ipld::Integer(i128::from(u64::MAX)));
    assert_eq!(huge.ts_ms().unwrap_err().code(), "bad_timestamp");
}

#[test]
fn the_envelope_shape_is_checked() {
    let envelope = signed();
    let edits: Vec<(&str, Option<Ipld>, &str)> = vec![
        ("extra", Some(Ipld::Integer(1)), "bad_envelope"),
        ("type", Some(Ipld::String("Profile".into())), "bad_envelope"),
        ("type", None, "bad_envelope"),
        ("action", Some(Ipld::List(vec![])), "bad_envelope"),
        (
            "action",
            Some(Ipld::String("GetAgent".into())),
            "bad_envelope",
        ),
        ("action", None, "bad_envelope"),
        ("sig", Some(Ipld::Bytes(vec![0; 63])), "bad_envelope"),
        ("sig", None, "bad_envelope"),
        ("signer", None, "bad_envelope"),
        ("protocol", Some(Ipld::Integer(-1)), "bad_envelope"),
        ("protocol", Some(Ipld::Null), "bad_envelope"),
        ("capability", Some(Ipld::Bytes(vec![1])), "bad_envelope"),
        (
            "capabilityBlob",
            Some(Ipld::String("x".into())),
            "bad_envelope",
        ),
    ];
    for (key, value, code) in edits {
        let mut map = as_map(&envelope);
        match value {
            Some(value) => map.insert(key.into(), value),
            None => map.remove(key),
        };
        assert_eq!(code_of(&encode_map(&map)), code, "{key}");
    }
    let mut nameless = as_map(&envelope);
    if let Some(Ipld::Map(action)) = nameless.get_mut("action") {
        action.insert("_".into(), Ipld::Integer(3));
    }
    assert_eq!(code_of(&encode_map(&nameless)), "bad_envelope");
    assert_eq!(
        code_of(&cbor::to_canonical(&Ipld::List(vec![])).unwrap()),
        "bad_envelope"
    );
}

#[test]
fn bad_bytes_are_typed_errors() {
    assert_eq!(code_of(&[]), "bad_cbor");
    assert_eq!(code_of(&[0xa1]), "bad_cbor");
    let bytes = signed().encode().unwrap();
    assert_eq!(code_of(&bytes[..bytes.len() - 1]), "bad_cbor");
    assert_eq!(
        Envelope::decode(&bytes, bytes.len() - 1),
        Err(SeedError::TooLarge {
            size: bytes.len(),
            limit: bytes.len() - 1,
            unit: "bytes",
        })
    );
}

#[test]
fn an_envelope_holding_too_many_items_is_refused_before_decoding() {
    // A map whose one value is an array of 200k zeros: 200 KB of bytes.
    let mut bytes = vec![0xa1, 0x66];
    bytes.extend_from_slice(b"action");
    bytes.push(0x9a);
    bytes.extend_from_slice(&200_000u32.to_be_bytes());
    bytes.resize(bytes.len() + 200_000, 0x00);
    assert!(matches!(
        Envelope::decode(&bytes, 16 << 20),
        Err(SeedError::TooLarge { unit: "items", .. })
    ));
}

#[test]
fn deep_nesting_inside_an_action_is_too_deep() {
    let mut value = Ipld::Null;
    for _ in 0..200 {
        value = Ipld::List(vec![value]);
    }
    let mut action = get_agent();
    action.insert("agentId".into(), value);
    let signer = key(1);
    let envelope = Envelope::sign(action, Principal::of_key(&signer), &signer, TS).unwrap();
    let bytes = envelope.encode().unwrap();
    assert_eq!(code_of(&bytes), "too_deep");
}

#[test]
fn protocol_and_capability_fields_are_signed_and_round_trip() {
    let account = key(1);
    let device = key(2);
    let blob = Capability::issue(
        &account,
        Principal::of_key(&device),
        Role::Agent,
        TS - 1000,
        None,
        None,
    )
    .unwrap();
    let capability = Capability::decode_and_verify(&blob).unwrap();
    let mut envelope = Envelope::unsigned(
        get_agent(),
        Principal::of_key(&account),
        Principal::of_key(&device),
        TS,
    );
    envelope.protocol = Some(2);
    envelope.capability = Some(capability.cid.clone());
    envelope.capability_blob = Some(blob.clone());
    envelope.sign_with(&device).unwrap();

    let decoded = Envelope::decode(&envelope.encode().unwrap(), MAX).unwrap();
    decoded.verify_signature().unwrap();
    assert_eq!(decoded.protocol, Some(2));
    assert_eq!(decoded.capability.as_deref(), Some(capability.cid.as_str()));
    assert_eq!(decoded.signer, Principal::of_key(&device));
    assert_eq!(decoded.account, Principal::of_key(&account));
    let carried =
        Capability::decode_and_verify(decoded.capability_blob.as_deref().unwrap()).unwrap();
    assert_eq!(carried.delegate, decoded.signer);
    assert_eq!(carried.signer, decoded.account);
    assert_eq!(agentos_protocol::seed::cid_of(&blob), carried.cid);
}

#[test]
fn typed_actions_sign_without_null_placeholders() {
    let signer = key(5);
    let action = Action::CreateSession {
        agent_id: "a1".into(),
        title: None,
        client_request_id: None,
    };
    let envelope = Envelope::sign_action(&action, Principal::of_key(&signer), &signer, TS).unwrap();
    assert_eq!(envelope.action.len(), 3, "{:?}", envelope.action);
    let wire = as_map(&envelope);
    let Some(Ipld::Map(wire_action)) = wire.get("action") else {
        panic!("no action");
    };
    assert!(!wire_action.values().any(|value| *value == Ipld::Null));
    envelope.verify_signature().unwrap();
    assert_eq!(envelope.typed_action().unwrap(), action);
}

#[test]
fn unencodable_actions_are_refused_when_signing() {
    let signer = key(1);
    let mut action = get_agent();
    action.insert("x".into(), Ipld::Float(f64::INFINITY));
    let error = Envelope::sign(action, Principal::of_key(&signer), &signer, TS).unwrap_err();
    assert_eq!(error.code(), "encode_failed");
}

/// The `seed_envelope` fuzz target's checks on a few thousand mutations of
/// real envelopes: nothing panics, and whatever decodes re-encodes to the
/// same envelope and the same typed action.
#[test]
fn mutated_envelopes_never_panic() {
    let signer = key(7);
    let create = Action::CreateAgent {
        definition: agentos_protocol::seed::AgentDefinition {
            name: "n".into(),
            system_prompt: agentos_protocol::seed::SystemPrompt::Text("p".into()),
            model_provider: "openai".into(),
            model: "m".into(),
            reasoning_level: None,
            tools: Some(vec!["read".into()]),
            mcp_servers: None,
            signing_key: None,
            signing_keys: None,
            metadata: None,
            adapter: None,
        },
        client_request_id: Some("r".into()),
    };
    let seeds = [
        signed().encode().unwrap(),
        Envelope::sign_action(&create, Principal::of_key(&signer), &signer, TS)
            .unwrap()
            .encode()
            .unwrap(),
    ];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..4000 {
        let mut bytes = seeds[round % seeds.len()].clone();
        for _ in 0..=(next() % 4) {
            let at = (next() as usize) % bytes.len();
            match next() % 4 {
                0 => bytes[at] ^= 1 << (next() % 8),
                1 => bytes[at] = next() as u8,
                2 => bytes.truncate(at.max(1)),
                _ => bytes.insert(at, next() as u8),
            }
        }
        let Ok(envelope) = Envelope::decode(&bytes, 1 << 16) else {
            continue;
        };
        let again = envelope.encode().unwrap();
        assert_eq!(Envelope::decode(&again, 1 << 17).unwrap(), envelope);
        let _ = envelope.verify_signature();
        let _ = envelope.ts_ms();
        if let Ok(action) = envelope.typed_action() {
            if !matches!(action, Action::Unsupported(_)) {
                let map = action.to_map().unwrap();
                assert_eq!(Action::from_map(&map).unwrap(), action);
            }
        }
    }
}
