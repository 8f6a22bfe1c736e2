//! What the server sends on `/agents/ws`: JSON text frames, one event each,
//! named under `_` (`connected`, `subscribed`, `unsubscribed`, `append`,
//! `appendPartial`, `change`, `error`).
//!
//! These frames are unsigned JSON as in the reference service; only the
//! client's `Subscribe` is a signed CBOR envelope. Byte strings inside
//! opaque values, if any, are written as arrays of numbers.

use serde::{Deserialize, Serialize};

use super::response::{AgentInfo, RunInfo, SessionEvent, SessionInfo};

/// One server-to-client WebSocket event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "_", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum WsEvent {
    /// Sent once when the socket opens; nothing private comes before a
    /// subscription.
    Connected { connected_at: i64 },
    /// A `Subscribe` was accepted.
    Subscribed { key: String, account_id: String },
    /// An `Unsubscribe` was accepted.
    Unsubscribed { key: String },
    /// A durable session event (`key` is `sessions/<id>`).
    Append { key: String, event: SessionEvent },
    /// A live, non-durable piece of the assistant message being written.
    AppendPartial {
        key: String,
        partial_id: String,
        patch: PartialPatch,
    },
    /// The current state of what `key` names.
    /// (Boxed: a session's state is far larger than the other frames.)
    Change {
        key: String,
        value: Box<ChangeValue>,
    },
    /// A refused subscription or a failure on the socket.
    Error {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
}

impl WsEvent {
    /// The JSON text of the frame.
    pub fn to_json(&self) -> String {
        // Every field is a string, a number, a boolean or an opaque value
        // with string keys, all of which JSON can hold.
        serde_json::to_string(self).unwrap_or_else(|_| UNENCODABLE_EVENT.to_string())
    }
}

const UNENCODABLE_EVENT: &str =
    r#"{"_":"error","message":"event could not be encoded","code":"encode_failed"}"#;

/// What a `runs/<rootRunId>` subscriber hears: one `change` per run of the
/// tree as it stands and at every transition, each journal entry as an
/// `append`, and live progress as `appendPartial` (never stored). Its own
/// enum, since a run's `append` carries other fields than a session's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "_", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum RunWsEvent {
    Change {
        key: String,
        value: Box<RunInfo>,
    },
    Append {
        key: String,
        run_id: String,
        seq: u64,
        entry: serde_json::Value,
        created_at: i64,
    },
    AppendPartial {
        key: String,
        run_id: String,
        partial_id: String,
        patch: serde_json::Value,
    },
}

impl RunWsEvent {
    /// The JSON text of the frame.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| UNENCODABLE_EVENT.to_string())
    }
}

/// A live update to the assistant message with `partialId`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartialPatch {
    /// Text to append.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_delta: Option<String>,
    /// True just before the durable `append` of the finished message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<RunUsage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<RunActivity>,
}

/// Token usage so far in the current run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunUsage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub total: u64,
}

/// What the agent is doing right now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunActivity {
    /// `starting`, `thinking`, `responding`, `tool` or `finalizing`.
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
}

/// The value of a `change`: a session (`sessions/…`), an agent
/// (`agents/…`), or what changed on an account (`account/…`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ChangeValue {
    Session(SessionInfo),
    Agent(AgentInfo),
    Account(AccountChange),
}

/// Why an account's view changed (an agent or session created, updated or
/// deleted, an invitation arrived, …).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountChange {
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ipld_core::ipld::Ipld;

    use super::*;
    use crate::seed::vocab::SessionStatus;

    #[test]
    fn events_render_as_the_reference_json() {
        let connected = WsEvent::Connected {
            connected_at: 1_700_000_000_000,
        };
        assert_eq!(
            connected.to_json(),
            r#"{"_":"connected","connectedAt":1700000000000}"#
        );

        let partial = WsEvent::AppendPartial {
            key: "sessions/s1".into(),
            partial_id: "p1".into(),
            patch: PartialPatch {
                text_delta: Some("Hel".into()),
                ..PartialPatch::default()
            },
        };
        assert_eq!(
            partial.to_json(),
            r#"{"_":"appendPartial","key":"sessions/s1","partialId":"p1","patch":{"textDelta":"Hel"}}"#
        );

        let error = WsEvent::Error {
            message: "nope".into(),
            code: None,
        };
        assert_eq!(error.to_json(), r#"{"_":"error","message":"nope"}"#);
    }

    #[test]
    fn events_read_back() {
        let mut payload = BTreeMap::new();
        payload.insert("type".to_string(), Ipld::String("message".into()));
        payload.insert("bytes".to_string(), Ipld::Bytes(vec![1, 2]));
        let events = [
            WsEvent::Append {
                key: "sessions/s1".into(),
                event: SessionEvent {
                    id: "e1".into(),
                    session_id: "s1".into(),
                    seq: 3,
                    event: Ipld::Map(payload),
                    created_at: 5,
                },
            },
            WsEvent::Change {
                key: "sessions/s1".into(),
                value: Box::new(ChangeValue::Session(SessionInfo {
                    id: "s1".into(),
                    account: "z6Mk".into(),
                    agent_id: "a1".into(),
                    title: None,
                    status: SessionStatus::Streaming,
                    created_at: 1,
                    updated_at: 2,
                    parent_session_id: None,
                    run_id: None,
                    child_session_count: None,
                    model_override: None,
                    description: None,
                    plan: None,
                    started_by_trigger: None,
                })),
            },
            WsEvent::Change {
                key: "account/z6Mk".into(),
                value: Box::new(ChangeValue::Account(AccountChange {
                    reason: "agent-created".into(),
                    agent_id: Some("a1".into()),
                    session_id: None,
                })),
            },
            WsEvent::Subscribed {
                key: "account/z6Mk".into(),
                account_id: "z6Mk".into(),
            },
        ];
        for event in events {
            let json = event.to_json();
            // Bytes travel as an array of numbers.
            if json.contains("\"bytes\"") {
                assert!(json.contains("\"bytes\":[1,2]"), "{json}");
                continue;
            }
            let back: WsEvent = serde_json::from_str(&json).unwrap();
            assert_eq!(back, event, "{json}");
        }
    }
}
