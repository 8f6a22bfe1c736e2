//! The host protocol (v1): length-delimited JSON-RPC 2.0 on a Unix socket.
//!
//! A frame is a u32 big-endian length followed by exactly one UTF-8 JSON-RPC
//! 2.0 message. This module knows the framing, the message envelope, the
//! standard and application error shapes, every method's params and results,
//! and the public shape of a durable event. It does no I/O.
//!
//! Submodules: `frame` (framing), `envelope` (JSON-RPC messages and error
//! objects), `params` (what each method takes), `results` (what each method
//! answers), `event` (the public event).

mod envelope;
mod frame;
mod params;
mod results;

pub use envelope::*;
pub use frame::*;
pub use params::*;
pub use results::*;
// The shared session vocabulary, in the host protocol's namespace too.
pub use crate::session::*;

pub const PROTOCOL_VERSION: u64 = 1;

/// Standard JSON-RPC codes, plus the one application code whose `data.code`
/// carries the stable snake_case reason.
pub mod codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const APPLICATION_ERROR: i64 = -32000;
}

/// Method names, in one place so the server and the CLI agree.
pub mod methods {
    pub const INITIALIZE: &str = "initialize";
    pub const SESSIONS_OPEN: &str = "sessions/open";
    pub const SESSIONS_GET: &str = "sessions/get";
    pub const SESSIONS_LIST: &str = "sessions/list";
    pub const SESSIONS_DELETE: &str = "sessions/delete";
    pub const SESSIONS_UNLOAD: &str = "sessions/unload";
    pub const SESSIONS_PROMPT: &str = "sessions/prompt";
    pub const SESSIONS_CANCEL: &str = "sessions/cancel";
    pub const SESSIONS_RESPOND_PERMISSION: &str = "sessions/respondPermission";
    pub const SESSIONS_HISTORY: &str = "sessions/history";
    pub const SESSIONS_SUBSCRIBE: &str = "sessions/subscribe";
    pub const SESSIONS_UNSUBSCRIBE: &str = "sessions/unsubscribe";
    pub const SESSIONS_GET_CONFIG: &str = "sessions/getConfig";
    pub const SESSIONS_SET_CONFIG_OPTION: &str = "sessions/setConfigOption";
    pub const SESSIONS_CAPABILITIES: &str = "sessions/capabilities";
    pub const SESSIONS_AGENT_INFO: &str = "sessions/agentInfo";
    pub const AGENTS_LIST: &str = "agents/list";
    pub const VM_STATUS: &str = "vm/status";
    pub const FS_STAT: &str = "fs/stat";
    pub const FS_READ: &str = "fs/read";
    pub const FS_WRITE: &str = "fs/write";
    pub const FS_READDIR: &str = "fs/readdir";
    pub const FS_MKDIR: &str = "fs/mkdir";
    pub const FS_RENAME: &str = "fs/rename";
    pub const FS_REMOVE: &str = "fs/remove";
    pub const HTTP_REQUEST: &str = "http/request";
    pub const SIGNERS_AUTHORIZE: &str = "signers/authorize";
    pub const SIGNERS_REVOKE: &str = "signers/revoke";
    pub const SIGNERS_LIST: &str = "signers/list";
    pub const RUNS_GET: &str = "runs/get";
    pub const RUNS_LIST: &str = "runs/list";
    pub const RUNS_CANCEL: &str = "runs/cancel";
    pub const RUNS_SIGNAL: &str = "runs/signal";
    pub const RUNS_JOURNAL: &str = "runs/journal";
    pub const TRIGGERS_LIST: &str = "triggers/list";
    pub const TRIGGERS_GET: &str = "triggers/get";
    pub const TRIGGERS_CREATE: &str = "triggers/create";
    pub const TRIGGERS_UPDATE: &str = "triggers/update";
    pub const TRIGGERS_DELETE: &str = "triggers/delete";
    pub const TRIGGERS_TICK: &str = "triggers/tick";

    // Notifications from the sidecar.
    pub const EVENT: &str = "sessions/event";
    pub const UPDATE: &str = "sessions/update";
    pub const SUBSCRIPTION_ENDED: &str = "sessions/subscriptionEnded";
    pub const AGENT_STDERR: &str = "sessions/agentStderr";
    pub const AGENT_EXITED: &str = "sessions/agentExited";
    pub const KEEP_AWAKE: &str = "lifecycle/keepAwake";
    /// The sidecar is shutting down: no new requests are read; those in
    /// flight are answered, then the connection closes.
    pub const SHUTDOWN: &str = "lifecycle/shutdown";
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn frames_round_trip_and_split() {
        let mut dec = FrameDecoder::new(1024);
        let a = encode_frame(b"{\"a\":1}").unwrap();
        let b = encode_frame(b"[]").unwrap();
        let mut all = a.clone();
        all.extend_from_slice(&b);
        dec.push(&all[..3]);
        assert_eq!(dec.next_frame().unwrap(), None);
        dec.push(&all[3..]);
        assert_eq!(dec.next_frame().unwrap().unwrap(), b"{\"a\":1}");
        assert_eq!(dec.next_frame().unwrap().unwrap(), b"[]");
        assert_eq!(dec.next_frame().unwrap(), None);
    }

    #[test]
    fn oversize_frame_is_refused_before_reading_it() {
        let mut dec = FrameDecoder::new(10);
        dec.push(&100u32.to_be_bytes());
        assert_eq!(
            dec.next_frame().unwrap_err(),
            FrameError::TooLarge {
                length: 100,
                limit: 10
            }
        );
    }

    #[test]
    fn classifies_faults() {
        let bad = decode_message(b"{not json");
        assert!(
            matches!(bad, Inbound::Invalid { ref error, .. } if error.code == codes::PARSE_ERROR)
        );
        let batch = decode_message(br#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#);
        assert!(
            matches!(batch, Inbound::Invalid { ref error, .. } if error.code == codes::INVALID_REQUEST)
        );
        let no_version = decode_message(br#"{"id":4,"method":"x"}"#);
        assert!(
            matches!(no_version, Inbound::Invalid { ref id, ref error } if error.code == codes::INVALID_REQUEST && id == &json!(4))
        );
        let bad_method = decode_message(br#"{"jsonrpc":"2.0","id":1,"method":7}"#);
        assert!(
            matches!(bad_method, Inbound::Invalid { ref error, .. } if error.code == codes::INVALID_REQUEST)
        );
        let ok = decode_message(br#"{"jsonrpc":"2.0","id":"a","method":"m","params":{"x":1}}"#);
        assert_eq!(
            ok,
            Inbound::Request {
                id: json!("a"),
                method: "m".into(),
                params: json!({"x":1})
            }
        );
        let note = decode_message(br#"{"jsonrpc":"2.0","method":"n"}"#);
        assert!(matches!(note, Inbound::Notification { .. }));
    }

    #[test]
    fn frame_helpers_build_whole_frames() {
        let mut dec = FrameDecoder::new(1 << 20);
        let raw = serde_json::value::RawValue::from_string("{\"ok\":true}".into()).unwrap();
        dec.push(&response_frame(&json!(7), Ok(&raw)).unwrap());
        let error = ErrorObject::invalid_params("x");
        dec.push(&response_frame(&json!("a"), Err(&error)).unwrap());
        dec.push(
            &notification_frame(methods::SHUTDOWN, &json!({"reason": "vm_shutdown"})).unwrap(),
        );
        dec.push(&event_notification_frame("sub\"1", "{\"sequence\":3}").unwrap());
        let mut frames = Vec::new();
        while let Some(frame) = dec.next_frame().unwrap() {
            frames.push(serde_json::from_slice::<Value>(&frame).unwrap());
        }
        assert_eq!(
            frames,
            vec![
                json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true}}),
                json!({"jsonrpc": "2.0", "id": "a", "error": error}),
                json!({"jsonrpc": "2.0", "method": "lifecycle/shutdown", "params": {"reason": "vm_shutdown"}}),
                json!({"jsonrpc": "2.0", "method": "sessions/event", "params": {"subscriptionId": "sub\"1", "event": {"sequence": 3}}}),
            ]
        );
    }

    #[test]
    fn timestamps_are_rfc3339_with_millis() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_709_210_096_789), "2024-02-29T12:34:56.789Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(rfc3339_ms(253_402_300_800_000), "10000-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(-62_167_219_200_001), "-001-12-31T23:59:59.999Z");
    }

    #[test]
    fn public_json_escapes_what_it_writes_itself() {
        let ev = StoredEvent {
            session_id: "s\"1\\".into(),
            sequence: 9_007_199_254_740_991,
            timestamp_ms: 1_709_210_096_789,
            kind: EventKind::SessionUpdate,
            correlation_id: None,
            outcome_status: None,
            terminal_reason: None,
            actor: Actor::User {
                account: Some("acc\n\"x\"".into()),
                signer: Some("key".into()),
            },
            payload_json: r#"{"sessionUpdate":"plan","entries":[],"we\"ird":1}"#.into(),
        };
        let text = ev.public_json();
        let p: Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(p["sessionId"], "s\"1\\");
        assert_eq!(p["sequence"], 9_007_199_254_740_991_u64);
        assert_eq!(p["timestamp"], "2024-02-29T12:34:56.789Z");
        assert_eq!(
            p["actor"],
            json!({"kind": "user", "account": "acc\n\"x\"", "signer": "key"})
        );
        assert_eq!(p["we\"ird"], 1);
        assert_eq!(p["type"], "plan");
    }

    #[test]
    fn session_update_is_flattened_with_type() {
        let ev = StoredEvent {
            session_id: "s".into(),
            sequence: 3,
            timestamp_ms: 0,
            kind: EventKind::SessionUpdate,
            correlation_id: None,
            outcome_status: None,
            terminal_reason: None,
            actor: Actor::Agent,
            payload_json:
                json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}})
                    .to_string(),
        };
        let p = ev.to_public();
        assert_eq!(p["type"], "agent_message_chunk");
        assert_eq!(p["content"]["text"], "hi");
        assert_eq!(p["sequence"], 3);
        assert!(p.get("sessionUpdate").is_none());
        assert_eq!(p["actor"]["kind"], "agent");
    }

    #[test]
    fn permission_events_are_flattened_beside_their_request_id() {
        let request = StoredEvent {
            session_id: "s".into(),
            sequence: 4,
            timestamp_ms: 0,
            kind: EventKind::PermissionRequest,
            correlation_id: Some("r-1".into()),
            outcome_status: None,
            terminal_reason: None,
            actor: Actor::Agent,
            payload_json: r#"{"sessionId":"s","toolCall":{"toolCallId":"c"},"options":[]}"#.into(),
        };
        let p = request.to_public();
        assert_eq!(p["type"], "permission_request");
        assert_eq!(p["requestId"], "r-1");
        assert_eq!(p["toolCall"]["toolCallId"], "c");
        let response = StoredEvent {
            kind: EventKind::PermissionResponse,
            outcome_status: Some("not_pending".into()),
            terminal_reason: Some("prompt_cancelled".into()),
            actor: Actor::System,
            payload_json: r#"{"outcome":{"outcome":"cancelled"}}"#.into(),
            ..request
        };
        let p = response.to_public();
        assert_eq!(p["status"], "not_pending");
        assert_eq!(p["reason"], "prompt_cancelled");
        assert_eq!(p["outcome"]["outcome"], "cancelled");
        // A payload that is not an object still renders valid JSON.
        let odd = StoredEvent {
            kind: EventKind::SessionUpdate,
            payload_json: "[1,2]".into(),
            ..response
        };
        assert_eq!(odd.to_public()["type"], "unknown");
    }
}
