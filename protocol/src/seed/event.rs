//! Stored session events as Seed session events: the same rows the host
//! door renders, in the reference's `SessionEvent` shape. Pure.
//!
//! A user's words become `{type:"message", role:"user", content}`, the
//! agent's `{type:"message", role:"assistant", content}`, a tool call
//! `{type:"tool_call", id, name, input}` and its end `{type:"tool_result",
//! toolCallId, name, output | error}`; every other ACP update keeps its
//! native fields under its own `type` (the reference allows any record),
//! except the builtin agent's failure update, `{type:"error", message}`.
//! Every event names its actor (`actor`, and for a user the exact account
//! and signer, when known, as `meta: {accountId, signerId}`). A user's
//! message sent through the signed door echoes its `clientMessageId`,
//! keeps its `blocks` and its text as `rawMarkdown`; the builtin agent's
//! messages and tool results carry the `meta` it stored with them (model,
//! provider, usage, `durationMs`). Stored JSON becomes IPLD by the one
//! conversion ([`super::ipld_json`]); what is nested deeper than an answer
//! can carry is null in its place.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use serde_json::Value;

use super::ipld_json::json_to_ipld_clipped;
use super::response::SessionEvent;
use crate::session::{Actor, EventKind, StoredEvent};

/// The stable public id of an event: its session and sequence.
pub fn event_id(session_id: &str, sequence: u64) -> String {
    format!("{session_id}:{sequence}")
}

/// Renders one stored event.
pub fn session_event(event: &StoredEvent) -> SessionEvent {
    let native: Value = serde_json::from_str(&event.payload_json).unwrap_or(Value::Null);
    let mut payload = match event.kind {
        EventKind::SessionUpdate => update(&native),
        EventKind::PermissionRequest => {
            let mut map = object(&native);
            map.insert("type".into(), Ipld::String("permission_request".into()));
            if let Some(id) = &event.correlation_id {
                map.insert("requestId".into(), Ipld::String(id.clone()));
            }
            map
        }
        EventKind::PermissionResponse => {
            let mut map = object(&native);
            map.insert("type".into(), Ipld::String("permission_response".into()));
            if let Some(id) = &event.correlation_id {
                map.insert("requestId".into(), Ipld::String(id.clone()));
            }
            if let Some(status) = &event.outcome_status {
                map.insert("outcomeStatus".into(), Ipld::String(status.clone()));
            }
            if let Some(reason) = &event.terminal_reason {
                map.insert("terminalReason".into(), Ipld::String(reason.clone()));
            }
            map
        }
    };
    stamp_actor(&mut payload, &event.actor);
    SessionEvent {
        id: event_id(&event.session_id, event.sequence),
        session_id: event.session_id.clone(),
        seq: event.sequence,
        event: Ipld::Map(payload),
        created_at: event.timestamp_ms,
    }
}

fn stamp_actor(payload: &mut BTreeMap<String, Ipld>, actor: &Actor) {
    payload.insert("actor".into(), Ipld::String(actor.kind().into()));
    if let Actor::User { account, signer } = actor {
        let origin = [("accountId", account), ("signerId", signer)];
        if origin.iter().all(|(_, v)| v.is_none()) {
            return;
        }
        let meta = payload
            .entry("meta".into())
            .or_insert_with(|| Ipld::Map(BTreeMap::new()));
        if let Ipld::Map(meta) = meta {
            for (key, value) in origin {
                if let Some(value) = value {
                    meta.insert(key.into(), Ipld::String(value.clone()));
                }
            }
        }
    }
}

/// What an update keeps under `_meta.agentos.meta` (the builtin agent's
/// `SessionEventMeta`), when it is a map.
fn stored_meta(native: &Value) -> Option<Ipld> {
    native
        .pointer("/_meta/agentos/meta")
        .filter(|m| m.is_object())
        .map(json_to_ipld_clipped)
}

/// A user's words as the signed door received them: the part's
/// `clientMessageId` and `blocks` (kept in the block's `_meta.seed`), and
/// the text as `rawMarkdown`.
fn seed_message_fields(content: &Value, map: &mut BTreeMap<String, Ipld>) {
    let Some(seed) = content.pointer("/_meta/seed").filter(|s| s.is_object()) else {
        return;
    };
    // The words as sent, when the model's text also carries the message's
    // context and attachments.
    let words = seed.get("text").or_else(|| content.get("text"));
    if let Some(text) = words.and_then(Value::as_str) {
        map.insert("content".into(), Ipld::String(text.to_owned()));
        map.insert("rawMarkdown".into(), Ipld::String(text.to_owned()));
    }
    if let Some(lines) = seed.get("contextLines").filter(|l| l.is_array()) {
        map.insert("contextLines".into(), json_to_ipld_clipped(lines));
    }
    if let Some(files) = seed.get("attachments").filter(|a| a.is_array()) {
        map.insert("attachments".into(), json_to_ipld_clipped(files));
    }
    if let Some(id) = seed.get("clientMessageId").and_then(Value::as_str) {
        map.insert("clientMessageId".into(), Ipld::String(id.to_owned()));
    }
    if let Some(blocks) = seed.get("blocks").filter(|b| b.is_array()) {
        map.insert("blocks".into(), json_to_ipld_clipped(blocks));
    }
}

fn text_of(content: &Value) -> Option<String> {
    match content.get("type").and_then(Value::as_str) {
        Some("text") => content
            .get("text")
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

fn update(native: &Value) -> BTreeMap<String, Ipld> {
    let kind = native
        .get("sessionUpdate")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let mut map = BTreeMap::new();
    let message = |role: &str, map: &mut BTreeMap<String, Ipld>| -> bool {
        let Some(text) = native.get("content").and_then(text_of) else {
            return false;
        };
        map.insert("type".into(), Ipld::String("message".into()));
        map.insert("role".into(), Ipld::String(role.into()));
        map.insert("content".into(), Ipld::String(text));
        true
    };
    match kind {
        "user_message_chunk" if message("user", &mut map) => {
            if let Some(content) = native.get("content") {
                seed_message_fields(content, &mut map);
            }
            return map;
        }
        "agent_message_chunk" if message("assistant", &mut map) => {
            if let Some(meta) = stored_meta(native) {
                map.insert("meta".into(), meta);
            }
            return map;
        }
        "tool_call" => {
            map.insert("type".into(), Ipld::String("tool_call".into()));
            map.insert("id".into(), string_field(native, "toolCallId"));
            map.insert("name".into(), string_field(native, "title"));
            map.insert(
                "input".into(),
                native
                    .get("rawInput")
                    .map(json_to_ipld_clipped)
                    .unwrap_or(Ipld::Null),
            );
            return map;
        }
        "tool_call_update" => {
            let status = native.get("status").and_then(Value::as_str);
            if matches!(status, Some("completed") | Some("failed")) {
                map.insert("type".into(), Ipld::String("tool_result".into()));
                map.insert("toolCallId".into(), string_field(native, "toolCallId"));
                map.insert("name".into(), string_field(native, "title"));
                let output = native
                    .get("rawOutput")
                    .or_else(|| native.get("content"))
                    .map(json_to_ipld_clipped);
                if status == Some("failed") {
                    let message = native
                        .get("rawOutput")
                        .and_then(Value::as_str)
                        .unwrap_or("the tool call failed");
                    map.insert("error".into(), Ipld::String(message.into()));
                } else if let Some(output) = output {
                    map.insert("output".into(), output);
                }
                if let Some(meta) = stored_meta(native) {
                    map.insert("meta".into(), meta);
                }
                return map;
            }
        }
        crate::agent_ext::ERROR_UPDATE => {
            map.insert("type".into(), Ipld::String("error".into()));
            map.insert("message".into(), string_field(native, "message"));
            if let Some(code) = native.get("code").and_then(Value::as_str) {
                map.insert("code".into(), Ipld::String(code.into()));
            }
            return map;
        }
        _ => {}
    }
    let mut map = object(native);
    map.remove("sessionUpdate");
    map.insert("type".into(), Ipld::String(kind.into()));
    map
}

fn string_field(native: &Value, name: &str) -> Ipld {
    Ipld::String(
        native
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    )
}

fn object(native: &Value) -> BTreeMap<String, Ipld> {
    match json_to_ipld_clipped(native) {
        Ipld::Map(map) => map,
        other => BTreeMap::from([("payload".to_owned(), other)]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::cbor;
    use crate::seed::ipld_json::CLIP_DEPTH;

    fn stored(payload: &str, actor: Actor) -> StoredEvent {
        StoredEvent {
            session_id: "s".into(),
            sequence: 7,
            timestamp_ms: 1_700_000_000_000,
            kind: EventKind::SessionUpdate,
            correlation_id: None,
            outcome_status: None,
            terminal_reason: None,
            actor,
            payload_json: payload.into(),
        }
    }

    fn field<'a>(event: &'a SessionEvent, name: &str) -> &'a Ipld {
        match &event.event {
            Ipld::Map(map) => map.get(name).unwrap_or(&Ipld::Null),
            _ => &Ipld::Null,
        }
    }

    #[test]
    fn messages_name_their_role_and_actor() {
        let user = Actor::User {
            account: Some("zAcc".into()),
            signer: Some("zSig".into()),
        };
        let e = session_event(&stored(
            r#"{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"}}"#,
            user,
        ));
        assert_eq!(e.id, "s:7");
        assert_eq!(e.seq, 7);
        assert_eq!(field(&e, "type"), &Ipld::String("message".into()));
        assert_eq!(field(&e, "role"), &Ipld::String("user".into()));
        assert_eq!(field(&e, "content"), &Ipld::String("hi".into()));
        assert_eq!(field(&e, "actor"), &Ipld::String("user".into()));
        // Provenance as the reference's `SessionEventMeta`, not at the root.
        assert_eq!(
            field(&e, "meta"),
            &Ipld::Map(BTreeMap::from([
                ("accountId".to_owned(), Ipld::String("zAcc".into())),
                ("signerId".to_owned(), Ipld::String("zSig".into())),
            ]))
        );
        assert_eq!(field(&e, "account"), &Ipld::Null);
        assert_eq!(field(&e, "signer"), &Ipld::Null);
        // Not sent through the signed door: no rawMarkdown.
        assert_eq!(field(&e, "rawMarkdown"), &Ipld::Null);
        let e = session_event(&stored(
            r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"yo"}}"#,
            Actor::Agent,
        ));
        assert_eq!(field(&e, "role"), &Ipld::String("assistant".into()));
        assert_eq!(field(&e, "actor"), &Ipld::String("agent".into()));
        assert_eq!(field(&e, "meta"), &Ipld::Null);
    }

    #[test]
    fn a_seed_message_keeps_its_id_blocks_and_markdown_and_the_agents_its_meta() {
        let user = Actor::User {
            account: Some("zAcc".into()),
            signer: None,
        };
        let e = session_event(&stored(
            r#"{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"see @doc",
                "_meta":{"seed":{"clientMessageId":"cm-1","blocks":[{"type":"paragraph","text":"see @doc"}]}}}}"#,
            user,
        ));
        assert_eq!(field(&e, "content"), &Ipld::String("see @doc".into()));
        assert_eq!(field(&e, "rawMarkdown"), &Ipld::String("see @doc".into()));
        assert_eq!(field(&e, "clientMessageId"), &Ipld::String("cm-1".into()));
        assert!(matches!(field(&e, "blocks"), Ipld::List(b) if b.len() == 1));
        assert_eq!(
            field(&e, "meta"),
            &Ipld::Map(BTreeMap::from([(
                "accountId".to_owned(),
                Ipld::String("zAcc".into())
            )]))
        );
        let e = session_event(&stored(
            r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"yo"},
                "_meta":{"agentos":{"meta":{"model":"m","provider":"openai","durationMs":12}}}}"#,
            Actor::Agent,
        ));
        let Ipld::Map(meta) = field(&e, "meta") else {
            panic!("no meta: {e:?}");
        };
        assert_eq!(meta.get("model"), Some(&Ipld::String("m".into())));
        assert_eq!(meta.get("durationMs"), Some(&Ipld::Integer(12)));
        let e = session_event(&stored(
            r#"{"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"completed","rawOutput":"ok",
                "_meta":{"agentos":{"meta":{"durationMs":3}}}}"#,
            Actor::Agent,
        ));
        assert!(
            matches!(field(&e, "meta"), Ipld::Map(m) if m.get("durationMs") == Some(&Ipld::Integer(3)))
        );
    }

    #[test]
    fn tools_map_to_calls_and_results_and_the_rest_keeps_its_fields() {
        let e = session_event(&stored(
            r#"{"sessionUpdate":"tool_call","toolCallId":"t1","title":"read","rawInput":{"n":1}}"#,
            Actor::Agent,
        ));
        assert_eq!(field(&e, "type"), &Ipld::String("tool_call".into()));
        assert_eq!(field(&e, "id"), &Ipld::String("t1".into()));
        let e = session_event(&stored(
            r#"{"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"completed","rawOutput":"ok"}"#,
            Actor::Agent,
        ));
        assert_eq!(field(&e, "type"), &Ipld::String("tool_result".into()));
        assert_eq!(field(&e, "output"), &Ipld::String("ok".into()));
        let e = session_event(&stored(
            r#"{"sessionUpdate":"plan","entries":[{"content":"x","priority":"high","status":"pending"}]}"#,
            Actor::Agent,
        ));
        assert_eq!(field(&e, "type"), &Ipld::String("plan".into()));
        assert!(matches!(field(&e, "entries"), Ipld::List(l) if l.len() == 1));
        assert_eq!(field(&e, "sessionUpdate"), &Ipld::Null);
    }

    #[test]
    fn stored_json_deeper_than_an_answer_carries_is_clipped_not_lost() {
        let deep = format!("{}1{}", "[".repeat(70), "]".repeat(70));
        let e = session_event(&stored(
            &format!(
                r#"{{"sessionUpdate":"tool_call","toolCallId":"t1","title":"read","rawInput":{deep}}}"#
            ),
            Actor::Agent,
        ));
        assert_eq!(field(&e, "id"), &Ipld::String("t1".into()));
        // The input keeps CLIP_DEPTH lists, then null in the next one's
        // place, and the event decodes within the decoder's bound.
        let mut input = field(&e, "input");
        let mut lists = 0;
        while let Ipld::List(items) = input {
            lists += 1;
            input = &items[0];
        }
        assert_eq!((lists, input), (CLIP_DEPTH, &Ipld::Null));
        let bytes = cbor::to_canonical(&e.event).unwrap();
        assert!(cbor::from_slice::<Ipld>(&bytes, 1 << 20).is_ok());
    }

    #[test]
    fn the_builtin_agents_failure_is_an_error_event() {
        let e = session_event(&stored(
            r#"{"sessionUpdate":"_agentos/error","message":"provider said no","code":"provider_auth"}"#,
            Actor::Agent,
        ));
        assert_eq!(field(&e, "type"), &Ipld::String("error".into()));
        assert_eq!(
            field(&e, "message"),
            &Ipld::String("provider said no".into())
        );
        assert_eq!(field(&e, "code"), &Ipld::String("provider_auth".into()));
        assert_eq!(field(&e, "actor"), &Ipld::String("agent".into()));
    }
}
