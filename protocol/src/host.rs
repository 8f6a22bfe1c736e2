//! The host protocol (v1): length-delimited JSON-RPC 2.0 on a Unix socket.
//!
//! A frame is a u32 big-endian length followed by exactly one UTF-8 JSON-RPC
//! 2.0 message. This module knows the framing, the message envelope, the
//! standard and application error shapes, every method's params and results,
//! and the public shape of a durable event. It does no I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

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

    // Notifications from the sidecar.
    pub const EVENT: &str = "sessions/event";
    pub const UPDATE: &str = "sessions/update";
    pub const SUBSCRIPTION_ENDED: &str = "sessions/subscriptionEnded";
    pub const AGENT_STDERR: &str = "sessions/agentStderr";
    pub const AGENT_EXITED: &str = "sessions/agentExited";
    pub const KEEP_AWAKE: &str = "lifecycle/keepAwake";
}

// ---------------------------------------------------------------------------
// Framing

/// Why a byte stream could not be cut into frames. Either way the stream is
/// no longer trustworthy and the connection ends after the error is answered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {length} bytes exceeds the limit of {limit} bytes")]
    TooLarge { length: u64, limit: u64 },
}

impl FrameError {
    pub fn code(&self) -> &'static str {
        match self {
            FrameError::TooLarge { .. } => "frame_too_large",
        }
    }
}

/// Incremental frame decoder: push bytes, pop whole frames.
#[derive(Debug)]
pub struct FrameDecoder {
    max_frame_bytes: u64,
    buf: Vec<u8>,
    start: usize,
}

impl FrameDecoder {
    pub fn new(max_frame_bytes: u64) -> Self {
        FrameDecoder {
            max_frame_bytes,
            buf: Vec::new(),
            start: 0,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received but not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next whole frame's payload, `None` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let available = &self.buf[self.start..];
        let Some(header) = available.get(..4) else {
            return Ok(None);
        };
        let length = u64::from(u32::from_be_bytes([
            header[0], header[1], header[2], header[3],
        ]));
        if length > self.max_frame_bytes {
            return Err(FrameError::TooLarge {
                length,
                limit: self.max_frame_bytes,
            });
        }
        let total = 4 + length as usize;
        if available.len() < total {
            return Ok(None);
        }
        let payload = available[4..total].to_vec();
        self.start += total;
        if self.start > (1 << 20) && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        Ok(Some(payload))
    }
}

/// Prefixes `payload` with its u32 big-endian length.
pub fn encode_frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

// ---------------------------------------------------------------------------
// JSON-RPC envelope

/// A JSON-RPC error object. Application errors use code -32000 and carry
/// `data.code` (stable snake_case) and, where a limit applies, `data.setting`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn parse_error(detail: impl Into<String>) -> Self {
        Self::new(
            codes::PARSE_ERROR,
            format!("Parse error: {}", detail.into()),
        )
    }

    pub fn invalid_request(detail: impl Into<String>) -> Self {
        Self::new(
            codes::INVALID_REQUEST,
            format!("Invalid request: {}", detail.into()),
        )
    }

    pub fn method_not_found(method: &str) -> Self {
        ErrorObject {
            code: codes::METHOD_NOT_FOUND,
            message: format!("Method not found: {method}"),
            data: Some(json!({ "method": method })),
        }
    }

    pub fn invalid_params(detail: impl Into<String>) -> Self {
        Self::new(
            codes::INVALID_PARAMS,
            format!("Invalid params: {}", detail.into()),
        )
    }

    /// An application error with a stable `data.code` and optional extra data
    /// fields (for example `setting`, `earliestAvailableSequence`).
    pub fn application(code: &str, message: impl Into<String>, extra: Map<String, Value>) -> Self {
        let mut data = Map::new();
        data.insert("code".into(), Value::String(code.to_owned()));
        data.extend(extra);
        ErrorObject {
            code: codes::APPLICATION_ERROR,
            message: message.into(),
            data: Some(Value::Object(data)),
        }
    }

    /// The `data.code` of an application error.
    pub fn data_code(&self) -> Option<&str> {
        self.data.as_ref()?.get("code")?.as_str()
    }
}

/// A JSON-RPC request id: a number or a string (null is not allowed for
/// requests we must answer).
pub type RequestId = Value;

/// A decoded inbound message.
#[derive(Clone, Debug, PartialEq)]
pub enum Inbound {
    Request {
        id: RequestId,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// A response to something we sent (the host never needs to send any,
    /// but a client does).
    Response {
        id: RequestId,
        result: Result<Value, ErrorObject>,
    },
    /// The frame could not be used; answer with `error` to `id` (null when
    /// no id could be read).
    Invalid {
        id: Value,
        error: ErrorObject,
    },
}

/// Decodes one frame's payload into a message, classifying every fault with
/// the standard code.
pub fn decode_message(payload: &[u8]) -> Inbound {
    let value: Value = match serde_json::from_slice(payload) {
        Ok(v) => v,
        Err(e) => {
            return Inbound::Invalid {
                id: Value::Null,
                error: ErrorObject::parse_error(e.to_string()),
            }
        }
    };
    let Value::Object(mut obj) = value else {
        let detail = if value.is_array() {
            "batches are not supported"
        } else {
            "a message must be a JSON object"
        };
        return Inbound::Invalid {
            id: Value::Null,
            error: ErrorObject::invalid_request(detail),
        };
    };
    let id = obj.remove("id");
    let id_valid = matches!(id, None | Some(Value::Number(_)) | Some(Value::String(_)));
    let reply_id = match &id {
        Some(v @ (Value::Number(_) | Value::String(_))) => v.clone(),
        _ => Value::Null,
    };
    if obj.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return Inbound::Invalid {
            id: reply_id,
            error: ErrorObject::invalid_request("jsonrpc must be \"2.0\""),
        };
    }
    if !id_valid {
        return Inbound::Invalid {
            id: Value::Null,
            error: ErrorObject::invalid_request("id must be a number or a string"),
        };
    }
    match obj.remove("method") {
        Some(Value::String(method)) => {
            let params = obj.remove("params").unwrap_or(Value::Null);
            if !matches!(params, Value::Null | Value::Object(_) | Value::Array(_)) {
                return Inbound::Invalid {
                    id: reply_id,
                    error: ErrorObject::invalid_request("params must be an object or an array"),
                };
            }
            match id {
                Some(id) => Inbound::Request { id, method, params },
                None => Inbound::Notification { method, params },
            }
        }
        Some(_) => Inbound::Invalid {
            id: reply_id,
            error: ErrorObject::invalid_request("method must be a string"),
        },
        None => {
            let Some(id) = id else {
                return Inbound::Invalid {
                    id: Value::Null,
                    error: ErrorObject::invalid_request("missing method"),
                };
            };
            if let Some(error) = obj.remove("error") {
                match serde_json::from_value::<ErrorObject>(error) {
                    Ok(error) => Inbound::Response {
                        id,
                        result: Err(error),
                    },
                    Err(e) => Inbound::Invalid {
                        id: Value::Null,
                        error: ErrorObject::invalid_request(format!("malformed error: {e}")),
                    },
                }
            } else {
                Inbound::Response {
                    id,
                    result: Ok(obj.remove("result").unwrap_or(Value::Null)),
                }
            }
        }
    }
}

pub fn encode_response(id: &Value, result: Result<&Value, &ErrorObject>) -> Vec<u8> {
    let msg = match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
    };
    serde_json::to_vec(&msg).unwrap_or_default()
}

pub fn encode_request(id: &Value, method: &str, params: &Value) -> Vec<u8> {
    let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    serde_json::to_vec(&msg).unwrap_or_default()
}

pub fn encode_notification(method: &str, params: &Value) -> Vec<u8> {
    let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
    serde_json::to_vec(&msg).unwrap_or_default()
}

// ---------------------------------------------------------------------------
// Method params and results

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InitializeParams {
    pub protocol_version: u64,
    #[serde(default)]
    pub client_info: Option<Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionPolicy {
    AllowAll,
    RejectAll,
    Ask,
}

impl PermissionPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionPolicy::AllowAll => "allow_all",
            PermissionPolicy::RejectAll => "reject_all",
            PermissionPolicy::Ask => "ask",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "allow_all" => Some(PermissionPolicy::AllowAll),
            "reject_all" => Some(PermissionPolicy::RejectAll),
            "ask" => Some(PermissionPolicy::Ask),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenSessionParams {
    #[serde(default)]
    pub session_id: Option<String>,
    pub agent: String,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub additional_directories: Option<Vec<String>>,
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub mcp_servers: Option<Vec<Value>>,
    #[serde(default)]
    pub permission_policy: Option<PermissionPolicy>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub metadata: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionIdParams {
    pub session_id: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListSessionsParams {
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    pub limit: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptParams {
    pub session_id: String,
    pub content: Vec<Value>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RespondPermissionParams {
    pub session_id: String,
    pub request_id: String,
    pub option_id: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HistoryParams {
    pub session_id: String,
    #[serde(default)]
    pub before: Option<u64>,
    #[serde(default)]
    pub after: Option<u64>,
    #[serde(default)]
    pub limit: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscribeParams {
    pub session_id: String,
    #[serde(default)]
    pub after: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnsubscribeParams {
    pub subscription_id: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetConfigOptionParams {
    pub session_id: String,
    pub config_id: String,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FsPathParams {
    pub path: String,
}

/// `fs/read`: a byte range, returned base64-encoded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FsReadParams {
    pub path: String,
    #[serde(default)]
    pub offset: Option<u64>,
    #[serde(default)]
    pub length: Option<u64>,
}

/// `fs/write`: base64 `data`; without `offset` the file is created or
/// replaced whole, with it the bytes land at that offset of an existing file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FsWriteParams {
    pub path: String,
    pub data: String,
    #[serde(default)]
    pub offset: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FsReaddirParams {
    pub path: String,
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    pub limit: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FsMkdirParams {
    pub path: String,
    #[serde(default)]
    pub parents: bool,
    #[serde(default)]
    pub mode: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FsRenameParams {
    pub from: String,
    pub to: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FsRemoveParams {
    pub path: String,
    #[serde(default)]
    pub recursive: bool,
}

// ---------------------------------------------------------------------------
// Public events

/// The scalar envelope of a stored event plus its exact native payload.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredEvent {
    pub session_id: String,
    pub sequence: u64,
    pub timestamp_ms: i64,
    pub kind: EventKind,
    pub correlation_id: Option<String>,
    pub outcome_status: Option<String>,
    pub terminal_reason: Option<String>,
    pub actor: Actor,
    /// The exact native ACP payload, as stored.
    pub payload_json: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    SessionUpdate,
    PermissionRequest,
    PermissionResponse,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::SessionUpdate => "session_update",
            EventKind::PermissionRequest => "permission_request",
            EventKind::PermissionResponse => "permission_response",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "session_update" => Some(EventKind::SessionUpdate),
            "permission_request" => Some(EventKind::PermissionRequest),
            "permission_response" => Some(EventKind::PermissionResponse),
            _ => None,
        }
    }
}

/// Who caused an event: a user (account and signer when known), the agent,
/// or the sidecar itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actor {
    User {
        account: Option<String>,
        signer: Option<String>,
    },
    Agent,
    System,
}

impl Actor {
    pub fn kind(&self) -> &'static str {
        match self {
            Actor::User { .. } => "user",
            Actor::Agent => "agent",
            Actor::System => "system",
        }
    }

    /// Appends the public form: `{"kind":…}` plus `account` and `signer`
    /// for a user when known.
    fn push_json(&self, out: &mut String) {
        out.push_str("{\"kind\":\"");
        out.push_str(self.kind());
        out.push('"');
        if let Actor::User { account, signer } = self {
            if let Some(account) = account {
                out.push_str(",\"account\":");
                push_json_str(out, account);
            }
            if let Some(signer) = signer {
                out.push_str(",\"signer\":");
                push_json_str(out, signer);
            }
        }
        out.push('}');
    }
}

/// Renders an RFC 3339 UTC timestamp with milliseconds.
pub fn rfc3339_ms(ms: i64) -> String {
    let mut out = String::with_capacity(24);
    push_rfc3339_ms(&mut out, ms);
    out
}

/// Appends [`rfc3339_ms`] of `ms` to `out` without formatting machinery
/// (it runs once per published event).
pub fn push_rfc3339_ms(out: &mut String, ms: i64) {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if !(0..=9999).contains(&year) {
        use std::fmt::Write;
        let _ = write!(
            out,
            "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{millis:03}Z"
        );
        return;
    }
    let mut buf = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut value: i64| {
        for i in (at..at + width).rev() {
            buf[i] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, h);
    put(14, 2, m);
    put(17, 2, s);
    put(20, 3, millis);
    // Every byte written is an ASCII digit or one of the template's.
    out.push_str(std::str::from_utf8(&buf).unwrap_or("1970-01-01T00:00:00.000Z"));
}

/// The top-level members of a JSON object, borrowed from its text in
/// order. `None` when the text is not an object or a key needs unescaping.
fn object_members(text: &str) -> Option<Vec<(&str, &RawValue)>> {
    struct Members<'a>(Vec<(&'a str, &'a RawValue)>);
    impl<'de> Deserialize<'de> for Members<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Members<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Self::Value, A::Error> {
                    let mut out = Vec::new();
                    while let Some((k, v)) = map.next_entry::<&'de str, &'de RawValue>()? {
                        out.push((k, v));
                    }
                    Ok(Members(out))
                }
            }
            d.deserialize_map(V)
        }
    }
    serde_json::from_str::<Members<'_>>(text).ok().map(|m| m.0)
}

fn push_json_str(out: &mut String, s: &str) {
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    match serde_json::to_string(s) {
        Ok(quoted) => out.push_str(&quoted),
        Err(_) => out.push_str("\"\""),
    }
}

impl StoredEvent {
    /// The native payload, parsed.
    pub fn payload(&self) -> Value {
        serde_json::from_str(&self.payload_json).unwrap_or(Value::Null)
    }

    /// The public shape: `{sessionId, sequence, timestamp, type, actor,
    /// …native fields}`. A session update's `sessionUpdate` becomes `type`;
    /// permission requests and responses are flattened beside their public
    /// `requestId`. Rendered straight from the stored text: the native
    /// members are copied, never re-parsed into values.
    pub fn public_json(&self) -> String {
        let mut out = String::with_capacity(self.payload_json.len() + 192);
        out.push_str("{\"sessionId\":");
        push_json_str(&mut out, &self.session_id);
        out.push_str(",\"sequence\":");
        {
            use std::fmt::Write;
            let _ = write!(out, "{}", self.sequence);
        }
        out.push_str(",\"timestamp\":\"");
        push_rfc3339_ms(&mut out, self.timestamp_ms);
        out.push_str("\",\"actor\":");
        self.actor.push_json(&mut out);
        let members = object_members(&self.payload_json);
        // Not an object (or an escaped key): the slow, exact path.
        let parsed = match members {
            Some(_) => None,
            None => match self.payload() {
                Value::Object(map) => Some(map),
                _ => Some(Map::new()),
            },
        };
        let skip: &[&str] = match self.kind {
            EventKind::SessionUpdate => {
                out.push_str(",\"type\":");
                match (&members, &parsed) {
                    (Some(members), _) => out.push_str(
                        members
                            .iter()
                            .find(|(k, _)| *k == "sessionUpdate")
                            .map_or("\"unknown\"", |(_, v)| v.get()),
                    ),
                    (None, parsed) => out.push_str(
                        &parsed
                            .as_ref()
                            .and_then(|m| m.get("sessionUpdate"))
                            .map_or_else(|| "\"unknown\"".to_owned(), Value::to_string),
                    ),
                }
                &[
                    "sessionUpdate",
                    "sessionId",
                    "sequence",
                    "timestamp",
                    "actor",
                    "type",
                ]
            }
            EventKind::PermissionRequest => {
                out.push_str(",\"type\":\"permission_request\",\"requestId\":");
                push_json_str(&mut out, self.correlation_id.as_deref().unwrap_or_default());
                &[
                    "sessionId",
                    "sequence",
                    "timestamp",
                    "actor",
                    "type",
                    "requestId",
                ]
            }
            EventKind::PermissionResponse => {
                out.push_str(",\"type\":\"permission_response\",\"requestId\":");
                push_json_str(&mut out, self.correlation_id.as_deref().unwrap_or_default());
                out.push_str(",\"status\":");
                push_json_str(&mut out, self.outcome_status.as_deref().unwrap_or_default());
                if let Some(reason) = &self.terminal_reason {
                    out.push_str(",\"reason\":");
                    push_json_str(&mut out, reason);
                }
                &[
                    "sessionId",
                    "sequence",
                    "timestamp",
                    "actor",
                    "type",
                    "requestId",
                    "status",
                    "reason",
                ]
            }
        };
        match members {
            Some(members) => {
                for (key, value) in members {
                    if skip.contains(&key) {
                        continue;
                    }
                    out.push(',');
                    push_json_str(&mut out, key);
                    out.push(':');
                    out.push_str(value.get());
                }
            }
            None => {
                for (key, value) in parsed.into_iter().flatten() {
                    if skip.contains(&key.as_str()) {
                        continue;
                    }
                    out.push(',');
                    push_json_str(&mut out, &key);
                    out.push(':');
                    out.push_str(&value.to_string());
                }
            }
        }
        out.push('}');
        out
    }

    /// The public shape as a value.
    pub fn to_public(&self) -> Value {
        serde_json::from_str(&self.public_json()).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_split() {
        let mut dec = FrameDecoder::new(1024);
        let a = encode_frame(b"{\"a\":1}");
        let b = encode_frame(b"[]");
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
