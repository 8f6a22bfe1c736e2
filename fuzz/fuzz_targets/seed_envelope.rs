//! Fuzz target: arbitrary bytes as a Seed signed envelope, then its action
//! read as a typed action. Decoding must return an envelope or a typed
//! error, never panic or overflow the stack; a decoded envelope must
//! re-encode, its encoding must decode to the same envelope, and its
//! signing bytes must encode too (verification then fails or succeeds, but
//! never panics). A typed action that decodes must encode and decode again
//! to itself.

#![no_main]

use agentos_protocol::seed::{Action, Envelope};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(envelope) = Envelope::decode(data, 1 << 16) else {
        return;
    };
    let again = envelope.encode().expect("a decoded envelope re-encodes");
    assert_eq!(Envelope::decode(&again, 1 << 17).expect("re-encoded bytes decode"), envelope);
    envelope.signing_bytes().expect("signing bytes encode");
    let _ = envelope.verify_signature();
    let _ = envelope.ts_ms();
    if let Ok(action) = envelope.typed_action() {
        if !matches!(action, Action::Unsupported(_)) {
            let map = action.to_map().expect("a decoded action re-encodes");
            assert_eq!(Action::from_map(&map).expect("it decodes again"), action);
        }
    }
});
