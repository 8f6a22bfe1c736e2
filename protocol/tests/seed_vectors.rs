//! Golden vectors: envelopes and Capability blobs signed from fixed seeds
//! and timestamps, checked in under `tests/vectors/`. Re-deriving them must
//! give the same bytes, so any change to canonical encoding or signing shows
//! up here. Regenerate (only for a deliberate change) with
//! `cargo test -p agentos-protocol --test seed_vectors -- --ignored`.

mod seed_support;

use agentos_protocol::seed::{cid_of, Capability, Envelope};
use seed_support::{build_capability, build_envelope, generate, load_vectors, vectors_path};

#[test]
fn envelopes_rederive_byte_exactly() {
    let vectors = load_vectors();
    assert!(!vectors.envelopes.is_empty());
    for vector in &vectors.envelopes {
        let envelope = build_envelope(&vector.spec);
        assert_eq!(
            hex::encode(envelope.encode().unwrap()),
            vector.envelope_hex,
            "{}",
            vector.name
        );
        assert_eq!(
            hex::encode(envelope.signing_bytes().unwrap()),
            vector.signing_bytes_hex,
            "{}",
            vector.name
        );
        assert_eq!(
            hex::encode(envelope.sig),
            vector.signature_hex,
            "{}",
            vector.name
        );
        assert_eq!(
            envelope.signer.to_string(),
            vector.signer_id,
            "{}",
            vector.name
        );
        assert_eq!(
            envelope.account.to_string(),
            vector.account_id,
            "{}",
            vector.name
        );

        let bytes = hex::decode(&vector.envelope_hex).unwrap();
        let decoded = Envelope::decode(&bytes, 1 << 20).unwrap();
        decoded.verify_signature().unwrap();
        assert_eq!(decoded.ts_ms().unwrap(), vector.spec.ts_ms);
        let action = decoded.typed_action().unwrap();
        assert_eq!(action.name(), decoded.action_name());
    }
}

#[test]
fn capabilities_rederive_byte_exactly() {
    let vectors = load_vectors();
    for vector in &vectors.capabilities {
        let blob = build_capability(&vector.spec);
        assert_eq!(hex::encode(&blob), vector.blob_hex, "{}", vector.name);
        assert_eq!(cid_of(&blob), vector.cid, "{}", vector.name);
        let capability = Capability::decode_and_verify(&blob).unwrap();
        assert_eq!(capability.cid, vector.cid);
        assert_eq!(capability.role.as_str(), vector.spec.role);
        assert_eq!(capability.ts, vector.spec.ts_ms);
    }
}

#[test]
fn the_checked_in_file_is_what_the_generator_writes() {
    let written = serde_json::to_string_pretty(&generate()).unwrap() + "\n";
    let checked_in = std::fs::read_to_string(vectors_path()).unwrap();
    assert_eq!(
        written, checked_in,
        "regenerate with --ignored after a deliberate change"
    );
}

#[test]
#[ignore = "writes tests/vectors/seed_envelopes.json; run after a deliberate change"]
fn generate_vectors() {
    let written = serde_json::to_string_pretty(&generate()).unwrap() + "\n";
    std::fs::write(vectors_path(), written).unwrap();
}
