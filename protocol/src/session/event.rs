//! The public shape of a durable event: the stored envelope (`StoredEvent`),
//! who caused it (`Actor`), and its one rendering to JSON, written straight
//! from the stored text.

use serde_json::{Map, Value};

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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

/// Whether `s` goes into JSON as it is, between quotes.
fn needs_no_escape(s: &str) -> bool {
    !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20)
}

/// The length of `s` as a JSON string, quotes included: what
/// [`push_json_str`] adds.
pub(crate) fn json_str_len(s: &str) -> usize {
    if needs_no_escape(s) {
        return s.len() + 2;
    }
    serde_json::to_string(s).map_or(2, |quoted| quoted.len())
}

/// [`push_json_str`] onto bytes.
pub(crate) fn push_json_str_bytes(out: &mut Vec<u8>, s: &str) {
    if needs_no_escape(s) {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        return;
    }
    match serde_json::to_string(s) {
        Ok(quoted) => out.extend_from_slice(quoted.as_bytes()),
        Err(_) => out.extend_from_slice(b"\"\""),
    }
}

pub(crate) fn push_json_str(out: &mut String, s: &str) {
    if needs_no_escape(s) {
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
        // Stored text is valid JSON (checked, or rendered by serde, before
        // it was appended): its members are found without checking the
        // grammar again.
        let members = crate::json_text::object_members(&self.payload_json);
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
                            .map_or("\"unknown\"", |(_, v)| *v),
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
                    out.push_str(value);
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
