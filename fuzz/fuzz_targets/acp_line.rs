//! Fuzz target: arbitrary bytes as one line from an ACP adapter. The fast
//! `session/update` recogniser must never panic, and whenever it accepts a
//! line the general decoder must agree: a `session/update` notification
//! whose params carry the same session id and an `update` object equal to
//! the bytes kept, with the same `sessionUpdate` and `messageId`.

#![no_main]

use agentos_protocol::acp::{decode_line, decode_session_update, AcpMessage};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let fast = decode_session_update(data);
    let general = decode_line(data);
    let Some(update) = fast else {
        return;
    };
    let Ok(AcpMessage::Notification { method, params }) = general else {
        panic!("accepted as an update but not a notification: {general:?}");
    };
    assert_eq!(method, "session/update");
    assert_eq!(params["sessionId"], Value::from(update.session_id.clone()));
    let kept: Value = serde_json::from_str(&update.update_json).expect("kept bytes are JSON");
    assert_eq!(kept, params["update"]);
    assert_eq!(kept["sessionUpdate"], Value::from(update.kind.clone()));
    match &update.message_id {
        Some(id) => assert_eq!(kept["messageId"], Value::from(id.clone())),
        None => assert!(kept.get("messageId").map_or(true, Value::is_null)),
    }
});
