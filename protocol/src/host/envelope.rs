//! The JSON-RPC 2.0 envelope of the host protocol: error objects (standard
//! codes and the application code with its stable `data.code`), inbound
//! message classification, and the encoders for responses, requests and
//! notifications.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::codes;
use crate::ErrorCode;

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
    pub fn application(
        code: ErrorCode,
        message: impl Into<String>,
        extra: Map<String, Value>,
    ) -> Self {
        let mut data = Map::new();
        data.insert("code".into(), Value::String(code.as_str().to_owned()));
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

/// A request payload (without its frame), for clients of the host door.
pub fn encode_request(id: &Value, method: &str, params: &Value) -> Vec<u8> {
    let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    serde_json::to_vec(&msg).unwrap_or_default()
}
