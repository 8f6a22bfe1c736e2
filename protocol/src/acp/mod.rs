//! ACP JSON-RPC 2.0 line messages exchanged with adapter processes.
//!
//! ACP over stdio is newline-delimited JSON-RPC: one UTF-8 JSON object per
//! line, never an embedded newline. This module classifies one received line
//! into a request, a notification or a response (by shape, because each
//! direction has its own id space), encodes outgoing messages, and names the
//! methods and standard error codes the sidecar uses; `params` types what
//! the client side writes. It does no I/O.

mod params;
mod update_line;

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

pub use params::*;

/// The only ACP major version this client speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// The `jsonrpc` member every message carries.
pub const JSONRPC_VERSION: &str = "2.0";

/// Method names of the stable v1 protocol.
pub mod methods {
    pub const INITIALIZE: &str = "initialize";
    pub const AUTHENTICATE: &str = "authenticate";
    pub const SESSION_NEW: &str = "session/new";
    pub const SESSION_LOAD: &str = "session/load";
    pub const SESSION_RESUME: &str = "session/resume";
    pub const SESSION_LIST: &str = "session/list";
    pub const SESSION_CLOSE: &str = "session/close";
    pub const SESSION_PROMPT: &str = "session/prompt";
    pub const SESSION_CANCEL: &str = "session/cancel";
    pub const SESSION_SET_MODE: &str = "session/set_mode";
    pub const SESSION_SET_CONFIG_OPTION: &str = "session/set_config_option";
    pub const SESSION_UPDATE: &str = "session/update";
    pub const SESSION_REQUEST_PERMISSION: &str = "session/request_permission";
    pub const FS_READ_TEXT_FILE: &str = "fs/read_text_file";
    pub const FS_WRITE_TEXT_FILE: &str = "fs/write_text_file";
    pub const TERMINAL_CREATE: &str = "terminal/create";
    pub const TERMINAL_OUTPUT: &str = "terminal/output";
    pub const TERMINAL_WAIT_FOR_EXIT: &str = "terminal/wait_for_exit";
    pub const TERMINAL_KILL: &str = "terminal/kill";
    pub const TERMINAL_RELEASE: &str = "terminal/release";
    pub const CANCEL_REQUEST: &str = "$/cancel_request";
}

/// Standard JSON-RPC error codes plus the ACP additions.
pub mod error_codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const REQUEST_CANCELLED: i64 = -32800;
    pub const AUTH_REQUIRED: i64 = -32000;
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
}

/// A JSON-RPC error object, as received from or sent to an agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The answer to a request whose method the receiver does not implement;
    /// the method name goes in `data` the way the reference SDK does it.
    pub fn method_not_found(method: &str) -> Self {
        RpcError::new(error_codes::METHOD_NOT_FOUND, "Method not found")
            .with_data(serde_json::json!({ "method": method }))
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        RpcError::new(error_codes::INVALID_PARAMS, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        RpcError::new(error_codes::INTERNAL_ERROR, message)
    }

    pub fn parse_error(message: impl Into<String>) -> Self {
        RpcError::new(error_codes::PARSE_ERROR, message)
    }

    pub fn resource_not_found(message: impl Into<String>) -> Self {
        RpcError::new(error_codes::RESOURCE_NOT_FOUND, message)
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

/// One received line, classified by shape.
#[derive(Clone, Debug, PartialEq)]
pub enum AcpMessage {
    /// Has `method` and `id`: the peer expects an answer carrying this id.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// Has `method` and no `id`.
    Notification { method: String, params: Value },
    /// Has no `method`: the answer to one of the receiver's own requests.
    Response {
        id: Value,
        result: Result<Value, RpcError>,
    },
}

/// Why a line is not an ACP message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AcpDecodeError {
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    #[error("not a JSON-RPC message: {0}")]
    InvalidMessage(String),
}

impl AcpDecodeError {
    pub fn code(&self) -> &'static str {
        match self {
            AcpDecodeError::InvalidJson(_) => "acp_invalid_json",
            AcpDecodeError::InvalidMessage(_) => "acp_invalid_message",
        }
    }
}

/// `Some(value)` whenever the member is present, so that `"id": null` (a
/// valid id) stays distinguishable from a missing id.
fn present<'de, D: Deserializer<'de>>(de: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(de).map(Some)
}

#[derive(Deserialize)]
struct RawMessage {
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default)]
    error: Option<RpcError>,
}

/// The deepest nesting of arrays and objects a line may have, the line's own
/// object included: serde_json's recursion limit (128) is exclusive, so a
/// value parsed from a stored line never exceeds it. Skipped values (an
/// update kept as bytes, an unknown member) are not counted by serde_json,
/// so both decoders check it themselves, before anything else.
pub const MAX_JSON_DEPTH: usize = 127;

/// Whether `text`'s arrays and objects nest deeper than `max`. Brackets
/// inside strings do not count; the text need not be valid JSON.
pub fn nests_deeper_than(text: &[u8], max: usize) -> bool {
    // A line with no more opening brackets than `max` cannot nest deeper:
    // one vectorised count settles nearly every line.
    let opening = memchr::memchr2_iter(b'[', b'{', text).count();
    if opening <= max {
        return false;
    }
    let mut depth = 0usize;
    let mut at = 0;
    while let Some(&b) = text.get(at) {
        at += 1;
        match b {
            b'"' => {
                // Jump to the string's end, over escapes.
                loop {
                    match memchr::memchr2(b'"', b'\\', &text[at.min(text.len())..]) {
                        Some(i) if text[at + i] == b'\\' => at += i + 2,
                        Some(i) => {
                            at += i + 1;
                            break;
                        }
                        None => return false,
                    }
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Classifies one line (without its newline). Unknown members are ignored so
/// that extensions do not break the stream. A line nested deeper than
/// [`MAX_JSON_DEPTH`] is invalid JSON here.
pub fn decode_line(line: &[u8]) -> Result<AcpMessage, AcpDecodeError> {
    if nests_deeper_than(line, MAX_JSON_DEPTH) {
        return Err(AcpDecodeError::InvalidJson(format!(
            "nested deeper than {MAX_JSON_DEPTH} levels"
        )));
    }
    let raw: RawMessage = match serde_json::from_slice(line) {
        Ok(raw) => raw,
        Err(e) if e.is_data() => return Err(AcpDecodeError::InvalidMessage(e.to_string())),
        Err(e) => return Err(AcpDecodeError::InvalidJson(e.to_string())),
    };
    let params = raw.params.unwrap_or(Value::Null);
    match (raw.method, raw.id) {
        (Some(method), Some(id)) => Ok(AcpMessage::Request { id, method, params }),
        (Some(method), None) => Ok(AcpMessage::Notification { method, params }),
        (None, Some(id)) => {
            let result = match (raw.result, raw.error) {
                (_, Some(error)) => Err(error),
                (Some(result), None) => Ok(result),
                (None, None) => {
                    return Err(AcpDecodeError::InvalidMessage(
                        "response has neither result nor error".to_owned(),
                    ))
                }
            };
            Ok(AcpMessage::Response { id, result })
        }
        (None, None) => Err(AcpDecodeError::InvalidMessage(
            "message has neither method nor id".to_owned(),
        )),
    }
}

/// A `session/update` notification, kept exactly as the agent wrote it: the
/// hot path stores `update_json` without parsing it into values.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionUpdate {
    /// The agent's own session id.
    pub session_id: String,
    /// `update.sessionUpdate`.
    pub kind: String,
    /// `update.messageId`, when present.
    pub message_id: Option<String>,
    /// The `update` object, byte for byte.
    pub update_json: String,
}

impl SessionUpdate {
    /// The update, parsed.
    pub fn update(&self) -> Value {
        serde_json::from_str(&self.update_json).unwrap_or(Value::Null)
    }
}

/// Recognises a well-formed `session/update` notification without building
/// values; `None` for any other line (which then takes [`decode_line`]).
pub fn decode_session_update(line: &[u8]) -> Option<SessionUpdate> {
    // The common shape in one pass; anything else takes the exact path.
    update_line::decode(line).or_else(|| decode_session_update_exactly(line))
}

/// [`decode_session_update`] through serde: every shape serde accepts.
fn decode_session_update_exactly(line: &[u8]) -> Option<SessionUpdate> {
    // Two passes over the text: the envelope with its params (checking and
    // capturing the update's bytes), then the update's head, off its members. Any other shape fails the
    // first pass quickly and is left to `decode_line`.
    #[derive(Deserialize)]
    struct Line<'a> {
        #[serde(borrow)]
        method: Option<Cow<'a, str>>,
        id: Option<IgnoredAny>,
        #[serde(borrow)]
        params: Option<Params<'a>>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Params<'a> {
        session_id: String,
        #[serde(borrow)]
        update: &'a RawValue,
    }
    let text = line;
    // Skipped values are not depth-checked by serde_json; refuse what the
    // general decoder refuses.
    if nests_deeper_than(text, MAX_JSON_DEPTH) {
        return None;
    }
    let line: Line<'_> = serde_json::from_slice(text).ok()?;
    if line.id.is_some() || line.method.as_deref() != Some(methods::SESSION_UPDATE) {
        return None;
    }
    // Skipped values are checked for grammar, not for what a `\u` escape
    // encodes; a lone surrogate would be stored as text no strict reader
    // accepts. Rare (some encoders escape every non-ASCII character), so
    // only such lines pay for a full parse.
    if has_surrogate_escape(text) && serde_json::from_slice::<Value>(text).is_err() {
        return None;
    }
    let params = line.params?;
    let update = params.update.get();
    // The update was checked whole by the first pass: its head is read off
    // its members, unless it needs the exact decoder (escapes, a duplicate
    // or a value that is not a plain string).
    let head = match fast_head(update) {
        Some(head) => head,
        None => serde_json::from_str(update).ok()?,
    };
    Some(SessionUpdate {
        session_id: params.session_id,
        kind: head.session_update,
        message_id: head.message_id,
        update_json: update.to_owned(),
    })
}

/// An update's `sessionUpdate` and `messageId`, read off its members when
/// both are plain strings (or `messageId` is absent or null) and neither is
/// given twice; `None` leaves the update to the exact decoder.
fn fast_head(update: &str) -> Option<Head> {
    use crate::json_text::{object_members, plain_string};
    let (mut kind, mut message_id) = (None, None);
    for (key, value) in object_members(update)? {
        match key {
            "sessionUpdate" if kind.is_none() => kind = Some(plain_string(value)?),
            "messageId" if message_id.is_none() => {
                message_id = Some(match value {
                    "null" => None,
                    text => Some(plain_string(text)?),
                });
            }
            "sessionUpdate" | "messageId" => return None,
            _ => {}
        }
    }
    Some(Head {
        session_update: kind?.to_owned(),
        message_id: message_id.flatten().map(str::to_owned),
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head {
    session_update: String,
    #[serde(default)]
    message_id: Option<String>,
}

/// Whether `text` holds a `\uD800`–`\uDFFF` escape.
fn has_surrogate_escape(text: &[u8]) -> bool {
    let mut rest = text;
    while let Some(at) = memchr::memchr(b'\\', rest) {
        let escape = &rest[at..];
        if let [b'\\', b'u', d, second, ..] = escape {
            if d.eq_ignore_ascii_case(&b'd')
                && matches!(second, b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
            {
                return true;
            }
        }
        // Skip the backslash and the character it escapes.
        rest = escape.get(2..).unwrap_or_default();
    }
    false
}

#[derive(Serialize)]
struct OutRequest<'a, I: Serialize> {
    jsonrpc: &'static str,
    id: I,
    method: &'a str,
    params: &'a Value,
}

#[derive(Serialize)]
struct OutNotification<'a> {
    jsonrpc: &'static str,
    method: &'a str,
    params: &'a Value,
}

#[derive(Serialize)]
struct OutResult<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: &'a Value,
}

#[derive(Serialize)]
struct OutError<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    error: &'a RpcError,
}

fn to_line<T: Serialize>(message: &T) -> String {
    // Compact serde_json output escapes control characters inside strings, so
    // the line can never contain a raw newline. Serializing these shapes
    // cannot fail: every key is a string and every value is already JSON.
    let mut line = serde_json::to_string(message).unwrap_or_default();
    line.push('\n');
    line
}

/// A request line (with its trailing newline).
pub fn encode_request(id: &Value, method: &str, params: &Value) -> String {
    to_line(&OutRequest {
        jsonrpc: JSONRPC_VERSION,
        id,
        method,
        params,
    })
}

/// A request line with a numeric id, the kind this client allocates.
pub fn encode_request_u64(id: u64, method: &str, params: &Value) -> String {
    to_line(&OutRequest {
        jsonrpc: JSONRPC_VERSION,
        id,
        method,
        params,
    })
}

/// A notification line (with its trailing newline).
pub fn encode_notification(method: &str, params: &Value) -> String {
    to_line(&OutNotification {
        jsonrpc: JSONRPC_VERSION,
        method,
        params,
    })
}

/// A response line echoing the peer's request id verbatim.
pub fn encode_response(id: &Value, result: &Result<Value, RpcError>) -> String {
    match result {
        Ok(result) => to_line(&OutResult {
            jsonrpc: JSONRPC_VERSION,
            id,
            result,
        }),
        Err(error) => to_line(&OutError {
            jsonrpc: JSONRPC_VERSION,
            id,
            error,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true},"clientInfo":{"name":"sidecar-probe","version":"0.0.1"}}}"#;
    const INITIALIZE_RESULT: &str = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false}}}"#;
    const UPDATE: &str = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"2d320735bc097228614b1482efa9cf7a","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"I'll help you with that. Let me start by reading some files to understand the current situation."}}}}"#;
    const PERMISSION: &str = r#"{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":"2d320735bc097228614b1482efa9cf7a","toolCall":{"toolCallId":"call_2","title":"Modifying critical configuration file","kind":"edit","status":"pending","locations":[{"path":"/home/user/project/config.json"}],"rawInput":{"path":"/home/user/project/config.json","content":"{\"database\": {\"host\": \"new-host\"}}"}},"options":[{"kind":"allow_once","name":"Allow this change","optionId":"allow"},{"kind":"reject_once","name":"Skip this change","optionId":"reject"}]}}"#;
    const PERMISSION_ANSWER: &str = r#"{"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}}"#;

    fn nested_update(depth: usize) -> String {
        let open = "[".repeat(depth);
        let close = "]".repeat(depth);
        format!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s","update":{{"sessionUpdate":"plan","x":{open}{close},"s":"[[[{{"}}}}}}"#
        )
    }

    #[test]
    fn updates_nested_too_deep_are_refused_by_both_decoders() {
        // The line, params and update objects are three levels.
        let deepest = nested_update(MAX_JSON_DEPTH - 3);
        let update = decode_session_update(deepest.as_bytes()).expect("at the bound");
        assert!(serde_json::from_str::<Value>(&update.update_json).is_ok());
        assert!(decode_line(deepest.as_bytes()).is_ok());
        for depth in [MAX_JSON_DEPTH - 2, 900] {
            let line = nested_update(depth);
            assert_eq!(decode_session_update(line.as_bytes()), None);
            assert!(matches!(
                decode_line(line.as_bytes()),
                Err(AcpDecodeError::InvalidJson(_))
            ));
        }
        // Brackets inside strings do not count, escaped quotes and
        // backslashes included, and a string left open ends the text.
        let text = format!(r#"["\"{}"]"#, "[".repeat(500));
        assert!(!nests_deeper_than(text.as_bytes(), 2));
        let text = format!(r#"["\\", [["{}"]]]"#, "[".repeat(500));
        assert!(!nests_deeper_than(text.as_bytes(), 3));
        assert!(nests_deeper_than(text.as_bytes(), 2));
        let text = format!(r#"[["{}\"#, "{".repeat(500));
        assert!(!nests_deeper_than(text.as_bytes(), 2));
        assert!(nests_deeper_than(text.as_bytes(), 1));
    }

    /// The scan agrees with the plain byte-by-byte reading of the rule on
    /// texts made of little but brackets, quotes and backslashes.
    #[test]
    fn the_depth_scan_agrees_with_a_byte_by_byte_reading() {
        // The deepest level reached, one byte at a time.
        fn reference(text: &[u8], max: usize) -> bool {
            let (mut depth, mut deepest) = (0usize, 0usize);
            let (mut in_string, mut escaped) = (false, false);
            for &b in text {
                let opens = !in_string && (b == b'[' || b == b'{');
                let closes = !in_string && (b == b']' || b == b'}');
                depth = if opens {
                    depth + 1
                } else if closes {
                    depth.saturating_sub(1)
                } else {
                    depth
                };
                deepest = deepest.max(depth);
                let quote = b == b'"' && !escaped;
                escaped = in_string && !escaped && b == b'\\';
                in_string ^= quote;
            }
            deepest > max
        }
        let alphabet = b"[{]}\"\\a";
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut deeper = 0;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 40) as usize;
            let text: Vec<u8> = (0..len)
                .map(|i| alphabet[((state >> (i % 60)) as usize + i * 7) % alphabet.len()])
                .collect();
            for max in 0..4 {
                let expected = reference(&text, max);
                deeper += usize::from(expected);
                assert_eq!(
                    nests_deeper_than(&text, max),
                    expected,
                    "{:?} at {max}",
                    String::from_utf8_lossy(&text)
                );
            }
        }
        // Both answers were tried often.
        assert!((10_000..70_000).contains(&deeper), "{deeper}");
    }

    #[test]
    fn session_updates_are_recognised_in_any_member_order() {
        let update = decode_session_update(UPDATE.as_bytes()).expect("an update");
        assert_eq!(update.session_id, "2d320735bc097228614b1482efa9cf7a");
        assert_eq!(update.kind, "agent_message_chunk");
        assert_eq!(update.message_id, None);
        assert_eq!(update.update()["content"]["type"], "text");
        let reordered = r#"{"params":{"update":{"content":{},"messageId":"m","sessionUpdate":"plan"},"sessionId":"s","extra":[1]},"method":"session/update","jsonrpc":"2.0"}"#;
        let update = decode_session_update(reordered.as_bytes()).expect("an update");
        assert_eq!(
            (update.session_id.as_str(), update.kind.as_str()),
            ("s", "plan")
        );
        assert_eq!(update.message_id.as_deref(), Some("m"));
        assert_eq!(
            update.update_json,
            r#"{"content":{},"messageId":"m","sessionUpdate":"plan"}"#
        );
    }

    /// The head read off the members is the exact decoder's, or is left
    /// to it.
    #[test]
    fn the_fast_head_agrees_with_the_exact_decoder() {
        for update in [
            r#"{"sessionUpdate":"plan"}"#,
            r#" { "sessionUpdate" : "plan" , "messageId" : "m1" } "#,
            r#"{"messageId":null,"sessionUpdate":"plan"}"#,
            r#"{"content":{"sessionUpdate":"x","messageId":"y"},"sessionUpdate":"plan"}"#,
            r#"{"sessionUpdate":"plan","sessionUpdate":"again"}"#,
            r#"{"sessionUpdate":"plan","messageId":"a","messageId":"b"}"#,
            r#"{"sessionUpdate":"pl\u0061n"}"#,
            r#"{"session\u0055pdate":"plan"}"#,
            r#"{"sessionUpdate":"plan","messageId":7}"#,
            r#"{"sessionUpdate":null}"#,
            r#"{"messageId":"m"}"#,
            r#"{"sessionUpdate":"a\"b"}"#,
            r#"{"sessionUpdate":"plan","messageId":"m\nn"}"#,
        ] {
            let exact = serde_json::from_str::<Head>(update)
                .ok()
                .map(|h| (h.session_update, h.message_id));
            let fast = fast_head(update).map(|h| (h.session_update, h.message_id));
            if let Some(fast) = fast {
                assert_eq!(Some(fast), exact, "{update}");
            }
            let line = format!(
                r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s","update":{update}}}}}"#
            );
            let decoded = decode_session_update(line.as_bytes()).map(|u| (u.kind, u.message_id));
            assert_eq!(decoded, exact, "{update}");
        }
    }

    #[test]
    fn surrogate_escapes_are_held_to_the_strict_grammar() {
        let line = |text: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s","update":{{"sessionUpdate":"plan","note":"{text}"}}}}}}"#
            )
        };
        // A pair is a character; an escaped backslash before `ud800` is text.
        for ok in [r"\ud83d\ude00", r"\\ud800", r"\u00e9"] {
            let update = decode_session_update(line(ok).as_bytes());
            assert!(update.is_some(), "{ok}");
        }
        // A lone surrogate is refused here and by the general decoder.
        for bad in [r"a\ud800b", r"\udc00", r"\ud83d\u0041"] {
            let text = line(bad);
            assert!(decode_session_update(text.as_bytes()).is_none(), "{bad}");
            assert!(decode_line(text.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn other_lines_are_left_to_the_general_decoder() {
        for line in [
            INITIALIZE,
            INITIALIZE_RESULT,
            PERMISSION,
            PERMISSION_ANSWER,
            r#"{"jsonrpc":"2.0","id":7,"method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"plan"}}}"#,
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s"}}"#,
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"content":1}}}"#,
            r#"{"jsonrpc":"2.0","method":"session/update","params":[1,2]}"#,
            r#"{"jsonrpc":"2.0","method":"session/update"}"#,
            r#"{"jsonrpc":"2.0","method":"session/other","params":{"sessionId":"s","update":{"sessionUpdate":"plan"}}}"#,
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"plan"}"#,
            "not json",
        ] {
            assert!(decode_session_update(line.as_bytes()).is_none(), "{line}");
        }
    }
    const METHOD_NOT_FOUND: &str = r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"\"Method not found\": session/load","data":{"method":"session/load"}}}"#;
    const PARSE_ERROR: &str =
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;

    #[test]
    fn request_from_transcript() {
        let message = decode_line(INITIALIZE.as_bytes()).unwrap();
        let AcpMessage::Request { id, method, params } = message else {
            panic!("expected a request, got {message:?}");
        };
        assert_eq!(id, json!(0));
        assert_eq!(method, methods::INITIALIZE);
        assert_eq!(params["protocolVersion"], json!(1));
    }

    #[test]
    fn agent_request_keeps_its_own_id() {
        let message = decode_line(PERMISSION.as_bytes()).unwrap();
        let AcpMessage::Request { id, method, params } = message else {
            panic!("expected a request, got {message:?}");
        };
        assert_eq!(id, json!(0));
        assert_eq!(method, methods::SESSION_REQUEST_PERMISSION);
        assert_eq!(params["options"][1]["kind"], json!("reject_once"));
    }

    #[test]
    fn string_and_null_ids_are_requests() {
        let line = br#"{"jsonrpc":"2.0","id":"abc","method":"_x/y"}"#;
        let message = decode_line(line).unwrap();
        assert_eq!(
            message,
            AcpMessage::Request {
                id: json!("abc"),
                method: "_x/y".into(),
                params: Value::Null
            }
        );
        let line = br#"{"jsonrpc":"2.0","id":null,"method":"_x/y","params":{}}"#;
        let AcpMessage::Request { id, .. } = decode_line(line).unwrap() else {
            panic!("null id must still make a request");
        };
        assert_eq!(id, Value::Null);
    }

    #[test]
    fn notification_from_transcript() {
        let message = decode_line(UPDATE.as_bytes()).unwrap();
        let AcpMessage::Notification { method, params } = message else {
            panic!("expected a notification, got {message:?}");
        };
        assert_eq!(method, methods::SESSION_UPDATE);
        assert_eq!(
            params["update"]["sessionUpdate"],
            json!("agent_message_chunk")
        );
    }

    #[test]
    fn responses_with_result_and_error() {
        let message = decode_line(INITIALIZE_RESULT.as_bytes()).unwrap();
        let AcpMessage::Response { id, result } = message else {
            panic!("expected a response, got {message:?}");
        };
        assert_eq!(id, json!(0));
        assert_eq!(
            result.unwrap()["agentCapabilities"]["loadSession"],
            json!(false)
        );

        let AcpMessage::Response { id, result } = decode_line(METHOD_NOT_FOUND.as_bytes()).unwrap()
        else {
            panic!("expected a response");
        };
        assert_eq!(id, json!(3));
        let error = result.unwrap_err();
        assert_eq!(error.code, error_codes::METHOD_NOT_FOUND);
        assert_eq!(error.data, Some(json!({"method": "session/load"})));

        let AcpMessage::Response { id, result } = decode_line(PARSE_ERROR.as_bytes()).unwrap()
        else {
            panic!("expected a response");
        };
        assert_eq!(id, Value::Null);
        assert_eq!(result.unwrap_err().code, error_codes::PARSE_ERROR);
    }

    #[test]
    fn null_result_is_a_result() {
        let line = br#"{"jsonrpc":"2.0","id":4,"result":null}"#;
        assert_eq!(
            decode_line(line).unwrap(),
            AcpMessage::Response {
                id: json!(4),
                result: Ok(Value::Null)
            }
        );
    }

    #[test]
    fn bad_lines_are_typed_errors() {
        assert!(matches!(
            decode_line(b"not json"),
            Err(AcpDecodeError::InvalidJson(_))
        ));
        assert!(matches!(
            decode_line(b"{\"id\":1"),
            Err(AcpDecodeError::InvalidJson(_))
        ));
        assert!(matches!(
            decode_line(b"[1,2]"),
            Err(AcpDecodeError::InvalidMessage(_))
        ));
        assert!(matches!(
            decode_line(br#"{"jsonrpc":"2.0"}"#),
            Err(AcpDecodeError::InvalidMessage(_))
        ));
        assert!(matches!(
            decode_line(br#"{"jsonrpc":"2.0","id":1}"#),
            Err(AcpDecodeError::InvalidMessage(_))
        ));
        assert!(matches!(
            decode_line(br#"{"jsonrpc":"2.0","method":7}"#),
            Err(AcpDecodeError::InvalidMessage(_))
        ));
        assert_eq!(decode_line(b"nope").unwrap_err().code(), "acp_invalid_json");
    }

    #[test]
    fn encodes_exact_transcript_lines() {
        let params = json!({"cwd": "/tmp", "mcpServers": []});
        assert_eq!(
            encode_request_u64(1, methods::SESSION_NEW, &params),
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session/new\",\"params\":{\"cwd\":\"/tmp\",\"mcpServers\":[]}}\n"
        );
        let answer = encode_response(
            &json!(0),
            &Ok(json!({"outcome": {"outcome": "selected", "optionId": "allow"}})),
        );
        // Key order inside `result` follows serde_json's map, so compare values.
        let expected: Value = serde_json::from_str(PERMISSION_ANSWER).unwrap();
        let actual: Value = serde_json::from_str(answer.trim_end()).unwrap();
        assert_eq!(actual, expected);
        assert!(answer.starts_with("{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":"));
        let cancel = encode_notification(methods::SESSION_CANCEL, &json!({"sessionId": "06c2"}));
        assert_eq!(
            cancel,
            "{\"jsonrpc\":\"2.0\",\"method\":\"session/cancel\",\"params\":{\"sessionId\":\"06c2\"}}\n"
        );
    }

    #[test]
    fn encoded_errors_round_trip_and_never_embed_newlines() {
        let error = RpcError::method_not_found("_sidecar/ping");
        let line = encode_response(&json!("req-1"), &Err(error.clone()));
        assert_eq!(line.matches('\n').count(), 1);
        assert!(line.ends_with('\n'));
        let decoded = decode_line(line.trim_end().as_bytes()).unwrap();
        assert_eq!(
            decoded,
            AcpMessage::Response {
                id: json!("req-1"),
                result: Err(error)
            }
        );
        let text = json!({"text": "a\nb\r\nc"});
        let line = encode_notification(methods::SESSION_UPDATE, &text);
        assert_eq!(line.matches('\n').count(), 1);
    }
}
