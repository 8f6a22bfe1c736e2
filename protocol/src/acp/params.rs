//! The params and results the sidecar sends its agents, typed: what the
//! client side of ACP writes (`initialize`, the session set-up ladder,
//! `session/prompt`, `session/cancel`, `session/set_config_option`) and
//! what it answers an agent's own requests with (a permission outcome, the
//! `fs/*` results). Each becomes the JSON object on the wire through
//! [`to_params`].

use serde::Serialize;
use serde_json::Value;

/// The JSON object of a typed message. These types hold only strings,
/// sequences and JSON values, so serialising them cannot fail; `Null`
/// stands in should that ever change.
pub fn to_params<T: Serialize>(message: &T) -> Value {
    serde_json::to_value(message).unwrap_or(Value::Null)
}

/// `initialize`'s `clientInfo`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClientInfo<'a> {
    pub name: &'a str,
    pub version: &'a str,
}

/// `initialize`'s `clientCapabilities`: the `fs/*` methods this client
/// serves, and no terminal.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClientCapabilities {
    pub fs: FsCapabilities,
    pub terminal: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FsCapabilities {
    pub read_text_file: bool,
    pub write_text_file: bool,
}

/// `session/new`, and with `session_id` `session/load` and
/// `session/resume`: where the session works and which MCP servers it has.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSetup<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<&'a str>,
    pub cwd: &'a str,
    pub mcp_servers: &'a [Value],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub additional_directories: &'a [String],
}

/// What an agent's `initialize` says it takes in a prompt besides text and
/// resource links (`agentCapabilities.promptCapabilities`); absent or
/// malformed, nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PromptCapabilities {
    pub image: bool,
    pub embedded_context: bool,
}

impl PromptCapabilities {
    pub fn of(agent_capabilities: &Value) -> PromptCapabilities {
        let caps = &agent_capabilities["promptCapabilities"];
        PromptCapabilities {
            image: caps["image"].as_bool().unwrap_or(false),
            embedded_context: caps["embeddedContext"].as_bool().unwrap_or(false),
        }
    }
}

/// `session/prompt`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptParams<'a> {
    pub session_id: &'a str,
    pub prompt: &'a [Value],
}

/// `session/cancel` (a notification).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelParams<'a> {
    pub session_id: &'a str,
}

/// `session/set_config_option`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetConfigOptionParams<'a> {
    pub session_id: &'a str,
    pub config_id: &'a str,
    pub value: &'a Value,
}

/// The answer to `session/request_permission`:
/// `{"outcome": {"outcome": "selected", "optionId": …}}` or
/// `{"outcome": {"outcome": "cancelled"}}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PermissionResponse<'a> {
    pub outcome: PermissionOutcome<'a>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum PermissionOutcome<'a> {
    #[serde(rename_all = "camelCase")]
    Selected {
        option_id: &'a str,
    },
    Cancelled,
}

impl PermissionResponse<'_> {
    pub fn cancelled() -> Value {
        to_params(&PermissionResponse {
            outcome: PermissionOutcome::Cancelled,
        })
    }

    pub fn selected(option_id: &str) -> Value {
        to_params(&PermissionResponse {
            outcome: PermissionOutcome::Selected { option_id },
        })
    }
}

/// `fs/read_text_file`'s result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReadTextFileResult {
    pub content: String,
}

/// `fs/write_text_file`'s result: an empty object.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WriteTextFileResult {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_have_the_wire_shapes() {
        assert_eq!(
            PermissionResponse::selected("ok"),
            json!({"outcome": {"outcome": "selected", "optionId": "ok"}})
        );
        assert_eq!(
            PermissionResponse::cancelled(),
            json!({"outcome": {"outcome": "cancelled"}})
        );
        let servers = vec![json!({"name": "m"})];
        assert_eq!(
            to_params(&SessionSetup {
                session_id: None,
                cwd: "/w",
                mcp_servers: &servers,
                additional_directories: &[],
            }),
            json!({"cwd": "/w", "mcpServers": [{"name": "m"}]})
        );
        assert_eq!(
            to_params(&SessionSetup {
                session_id: Some("s"),
                cwd: "/w",
                mcp_servers: &[],
                additional_directories: &["/x".to_owned()],
            }),
            json!({"sessionId": "s", "cwd": "/w", "mcpServers": [], "additionalDirectories": ["/x"]})
        );
        assert_eq!(
            to_params(&SetConfigOptionParams {
                session_id: "s",
                config_id: "mode",
                value: &json!("fast"),
            }),
            json!({"sessionId": "s", "configId": "mode", "value": "fast"})
        );
        assert_eq!(
            to_params(&ClientCapabilities {
                fs: FsCapabilities {
                    read_text_file: true,
                    write_text_file: true,
                },
                terminal: false,
            }),
            json!({"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": false})
        );
        assert_eq!(to_params(&WriteTextFileResult {}), json!({}));
    }
}
