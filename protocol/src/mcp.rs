//! The Model Context Protocol as this sidecar speaks it to MCP servers (as
//! a client): the method names, the `initialize` request, the tool
//! descriptors of `tools/list` and the flattening of a `tools/call` result
//! into what the model reads. JSON-RPC 2.0 framing is shared with ACP
//! (`acp::RpcError`); the transports live in the sidecar.
//!
//! Reading is lenient where the reference client is (a tool without a
//! string name is skipped, an absent schema is absent) and bounded: a
//! result's text is cut at [`MAX_RESULT_BYTES`] with the reference's
//! notice.

use serde_json::{json, Map, Value};

use crate::acp::RpcError;

/// The protocol revision asked for in `initialize`; a server may answer
/// another it supports, which is then sent back in `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

pub mod methods {
    pub const INITIALIZE: &str = "initialize";
    pub const INITIALIZED: &str = "notifications/initialized";
    pub const CANCELLED: &str = "notifications/cancelled";
    pub const PING: &str = "ping";
    pub const TOOLS_LIST: &str = "tools/list";
    pub const TOOLS_CALL: &str = "tools/call";
}

/// HTTP headers of the Streamable HTTP transport.
pub mod headers {
    pub const SESSION_ID: &str = "mcp-session-id";
    pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
}

/// The most bytes of a tool result's text the model reads (the
/// reference's tool-result cap).
pub const MAX_RESULT_BYTES: usize = 256 * 1024;
/// What follows a cut result, as the reference writes it.
pub const TRUNCATED_NOTICE: &str = "\n\n_[MCP result truncated]_";

/// `initialize`'s parameters: no client capabilities (no roots, sampling
/// or elicitation are offered).
pub fn initialize_params(client_name: &str, client_version: &str) -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": client_name, "version": client_version},
    })
}

/// A JSON-RPC request line.
pub fn request(id: u64, method: &str, params: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A JSON-RPC notification.
pub fn notification(method: &str, params: &Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// An error answer to a request of the server's (we serve none but ping).
pub fn error_response(id: &Value, error: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// One message a server sent.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// The answer to our request `id` (a numeric id we chose).
    Response {
        id: Option<u64>,
        result: Result<Value, RpcError>,
    },
    /// A request of the server's, to be answered.
    Request { id: Value, method: String },
    /// A notification (logging, progress, list changes): read and dropped.
    Notification { method: String },
}

/// Classifies one JSON-RPC message; `None` when it is none.
pub fn classify(message: &Value) -> Option<Incoming> {
    let object = message.as_object()?;
    if let Some(method) = object.get("method").and_then(Value::as_str) {
        return Some(match object.get("id") {
            Some(id) if !id.is_null() => Incoming::Request {
                id: id.clone(),
                method: method.to_owned(),
            },
            _ => Incoming::Notification {
                method: method.to_owned(),
            },
        });
    }
    let id = object.get("id").and_then(Value::as_u64);
    if let Some(error) = object.get("error") {
        let error = serde_json::from_value::<RpcError>(error.clone())
            .unwrap_or_else(|_| RpcError::internal(format!("malformed error: {error}")));
        return Some(Incoming::Response {
            id,
            result: Err(error),
        });
    }
    let result = object.get("result")?;
    Some(Incoming::Response {
        id,
        result: Ok(result.clone()),
    })
}

/// One tool a server advertises.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDescriptor {
    pub name: String,
    pub description: Option<String>,
    /// Its input's JSON Schema, when it gave an object.
    pub input_schema: Option<Value>,
}

impl ToolDescriptor {
    pub fn to_json(&self) -> Value {
        let mut object = Map::new();
        object.insert("name".into(), Value::String(self.name.clone()));
        if let Some(description) = &self.description {
            object.insert("description".into(), Value::String(description.clone()));
        }
        if let Some(schema) = &self.input_schema {
            object.insert("inputSchema".into(), schema.clone());
        }
        Value::Object(object)
    }

    /// Reads a descriptor back (ours, or a server's `tools` entry).
    pub fn from_json(value: &Value) -> Option<ToolDescriptor> {
        let object = value.as_object()?;
        let name = object.get("name")?.as_str()?;
        Some(ToolDescriptor {
            name: name.to_owned(),
            description: object
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned),
            input_schema: object.get("inputSchema").filter(|s| s.is_object()).cloned(),
        })
    }
}

/// One page of `tools/list`: its tools and the cursor of the next page.
pub fn tools_page(result: &Value) -> (Vec<ToolDescriptor>, Option<String>) {
    let tools = result
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| tools.iter().filter_map(ToolDescriptor::from_json).collect())
        .unwrap_or_default();
    let next = result
        .get("nextCursor")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_owned);
    (tools, next)
}

/// A `tools/call` result as the model reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct CallOutcome {
    /// The text parts joined by newlines, other parts as compact JSON,
    /// trimmed; the structured content's JSON when there is no text; cut
    /// with [`TRUNCATED_NOTICE`] so that the whole is within the bound.
    pub text: String,
    pub structured: Option<Value>,
    pub is_error: bool,
}

/// Flattens a `tools/call` result as the reference does, its text within
/// `max_bytes`.
pub fn flatten_result(result: &Value, max_bytes: usize) -> CallOutcome {
    let is_error = result.get("isError") == Some(&Value::Bool(true));
    let structured = result.get("structuredContent").cloned();
    let mut pieces: Vec<String> = Vec::new();
    for part in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if !part.is_object() {
            continue;
        }
        match (part.get("type"), part.get("text")) {
            (Some(Value::String(kind)), Some(Value::String(text))) if kind == "text" => {
                pieces.push(text.clone());
            }
            _ => pieces.push(part.to_string()),
        }
    }
    let mut text = crate::seed::text::js_trim(&pieces.join("\n")).to_owned();
    if text.is_empty() {
        if let Some(structured) = &structured {
            text = structured.to_string();
        }
    }
    cut(&mut text, max_bytes);
    CallOutcome {
        text,
        structured,
        is_error,
    }
}

/// Cuts `text` to at most `max_bytes` on a character boundary, ending in
/// [`TRUNCATED_NOTICE`] when it was longer (the notice counts).
pub fn cut(text: &mut String, max_bytes: usize) {
    if text.len() <= max_bytes {
        return;
    }
    let mut end = max_bytes.saturating_sub(TRUNCATED_NOTICE.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(TRUNCATED_NOTICE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_classified() {
        assert_eq!(
            classify(&json!({"jsonrpc":"2.0","id":3,"result":{"a":1}})),
            Some(Incoming::Response {
                id: Some(3),
                result: Ok(json!({"a":1}))
            })
        );
        let Some(Incoming::Response { result: Err(e), .. }) =
            classify(&json!({"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"bad"}}))
        else {
            panic!("an error answer")
        };
        assert_eq!((e.code, e.message.as_str()), (-32602, "bad"));
        assert_eq!(
            classify(&json!({"jsonrpc":"2.0","id":"s1","method":"roots/list"})),
            Some(Incoming::Request {
                id: json!("s1"),
                method: "roots/list".into()
            })
        );
        assert_eq!(
            classify(&json!({"jsonrpc":"2.0","method":"notifications/message","params":{}})),
            Some(Incoming::Notification {
                method: "notifications/message".into()
            })
        );
        assert_eq!(classify(&json!([1])), None);
        assert_eq!(classify(&json!({"id": 1})), None);
    }

    #[test]
    fn tools_are_read_leniently() {
        let (tools, next) = tools_page(&json!({
            "tools": [
                {"name": "echo", "description": "Echoes", "inputSchema": {"type": "object"}},
                {"name": 7},
                "x",
                {"name": "bare", "inputSchema": "not a schema"},
            ],
            "nextCursor": "c2",
        }));
        assert_eq!(tools.len(), 2);
        assert_eq!(tools[0].input_schema, Some(json!({"type": "object"})));
        assert_eq!(tools[1].input_schema, None);
        assert_eq!(next.as_deref(), Some("c2"));
        assert_eq!(
            ToolDescriptor::from_json(&tools[0].to_json()).as_ref(),
            Some(&tools[0])
        );
    }

    #[test]
    fn results_flatten_as_the_reference() {
        let outcome = flatten_result(
            &json!({"content": [
                {"type": "text", "text": "  one"},
                {"type": "image", "data": "AA==", "mimeType": "image/png"},
                {"type": "text", "text": "two  "},
            ]}),
            MAX_RESULT_BYTES,
        );
        assert_eq!(
            outcome.text,
            "one\n{\"data\":\"AA==\",\"mimeType\":\"image/png\",\"type\":\"image\"}\ntwo"
        );
        assert!(!outcome.is_error);
        let structured = flatten_result(
            &json!({"content": [], "structuredContent": {"t": 22}, "isError": true}),
            MAX_RESULT_BYTES,
        );
        assert_eq!(structured.text, "{\"t\":22}");
        assert!(structured.is_error);
        let long = flatten_result(
            &json!({"content": [{"type": "text", "text": "é".repeat(30)}]}),
            TRUNCATED_NOTICE.len() + 5,
        );
        assert_eq!(long.text, format!("éé{TRUNCATED_NOTICE}"));
        assert!(long.text.len() <= TRUNCATED_NOTICE.len() + 5);
    }
}
