//! The structured values inside actions, several of which come back in
//! responses: agent definitions, provider configs, message content parts,
//! the session list cursor.
//!
//! Each is read strictly (unknown fields refused, errors naming the field)
//! whether it arrives inside an action or through serde, and written with
//! absent fields left out.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::fields::{wrong_type, Fields, FromField};
use crate::seed::vocab::AuthMode;
use crate::seed::SeedError;

/// Lets serde read a type the way an action reads it.
macro_rules! deserialize_via_fields {
    ($($ty:ty => $path:literal,)+) => {$(
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = Ipld::deserialize(deserializer)?;
                <$ty as FromField>::from_field(value, $path).map_err(serde::de::Error::custom)
            }
        }
    )+};
}

deserialize_via_fields! {
    AgentDefinition => "definition",
    SystemPrompt => "systemPrompt",
    ModelProviderConfig => "provider",
    McpServerConfig => "config",
    SessionListCursor => "cursor",
    ContentPart => "content",
}

/// What an agent is: its prompt, model and grants.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentDefinition {
    pub name: String,
    pub system_prompt: SystemPrompt,
    /// The name of one of the account's model providers. Required for the
    /// builtin agent (the signed API refuses it empty); a registry adapter
    /// runs its own model, and may leave both out (read as empty).
    pub model_provider: String,
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_level: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Names of the account's MCP servers whose tools this agent may call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_keys: Option<Vec<String>>,
    /// A map, kept as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Ipld>,
    /// Which agent runs it: absent means `builtin` (the sidecar's own model
    /// agent); otherwise the name of an external ACP adapter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
}

impl FromField for AgentDefinition {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        let mut f = Fields::nested(value, path)?;
        let definition = AgentDefinition {
            name: f.req("name")?,
            system_prompt: f.req("systemPrompt")?,
            model_provider: f.opt("modelProvider")?.unwrap_or_default(),
            model: f.opt("model")?.unwrap_or_default(),
            reasoning_level: f.opt("reasoningLevel")?,
            tools: f.opt("tools")?,
            mcp_servers: f.opt("mcpServers")?,
            signing_key: f.opt("signingKey")?,
            signing_keys: f.opt("signingKeys")?,
            metadata: f.opt_map("metadata")?,
            adapter: f.opt("adapter")?,
        };
        f.finish()?;
        Ok(definition)
    }
}

/// A system prompt: plain text, or Seed's rich block tree kept as sent.
#[derive(Clone, Debug, PartialEq)]
pub enum SystemPrompt {
    Text(String),
    Blocks(Vec<Ipld>),
}

impl FromField for SystemPrompt {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        match value {
            Ipld::String(text) => Ok(SystemPrompt::Text(text)),
            Ipld::List(blocks) => Ok(SystemPrompt::Blocks(blocks)),
            _ => Err(wrong_type(path, "a string or a list of blocks")),
        }
    }
}

impl Serialize for SystemPrompt {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            SystemPrompt::Text(text) => serializer.serialize_str(text),
            SystemPrompt::Blocks(blocks) => {
                let mut seq = serializer.serialize_seq(Some(blocks.len()))?;
                for block in blocks {
                    seq.serialize_element(block)?;
                }
                seq.end()
            }
        }
    }
}

/// A named model provider's configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelProviderConfig {
    /// `openai`, `anthropic`, `ollama`, `custom`, …
    #[serde(rename = "type")]
    pub provider_type: String,
    /// A map, kept as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_defaults: Option<Ipld>,
    /// Role (`apiKey`, `oauth`) to the name of an account secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_refs: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_mode: Option<AuthMode>,
}

impl FromField for ModelProviderConfig {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        let mut f = Fields::nested(value, path)?;
        let config = ModelProviderConfig {
            provider_type: f.req("type")?,
            model_defaults: f.opt_map("modelDefaults")?,
            secret_refs: f.opt("secretRefs")?,
            base_url: f.opt("baseUrl")?,
            auth_mode: f.opt("authMode")?,
        };
        f.finish()?;
        Ok(config)
    }
}

/// A remote MCP server as an account configures it (`SetMcpServer`).
/// Checked by the service (URL, transport, header names and counts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct McpServerConfig {
    /// The server's `http(s)` endpoint.
    pub url: String,
    /// `http` (Streamable HTTP) or `sse`; absent tries the first, then the
    /// second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// Headers sent on every request, in the clear (never secrets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// Header name to the name of an account secret, opened at call time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_refs: Option<BTreeMap<String, String>>,
}

impl FromField for McpServerConfig {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        let mut f = Fields::nested(value, path)?;
        let config = McpServerConfig {
            url: f.req("url")?,
            transport: f.opt("transport")?,
            headers: f.opt("headers")?,
            secret_refs: f.opt("secretRefs")?,
        };
        f.finish()?;
        Ok(config)
    }
}

/// Keyset position in `ListSessions`, ordered by `(updatedAt, id)`
/// descending; a client passes back `nextCursor` verbatim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionListCursor {
    pub updated_before: i64,
    pub id_before: String,
}

impl FromField for SessionListCursor {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        let mut f = Fields::nested(value, path)?;
        let cursor = SessionListCursor {
            updated_before: f.req("updatedBefore")?,
            id_before: f.req("idBefore")?,
        };
        f.finish()?;
        Ok(cursor)
    }
}

/// One part of a message sent to a session.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "lowercase",
    rename_all_fields = "camelCase"
)]
pub enum ContentPart {
    /// The user's words, with Seed's rich blocks kept as sent.
    Text {
        text: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        blocks: Option<Vec<Ipld>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_message_id: Option<String>,
    },
    /// Ambient client state for the model, kept out of the transcript.
    Context { lines: Vec<String> },
    /// A file uploaded earlier, by id.
    Attachment { id: String },
}

impl FromField for ContentPart {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        let mut f = Fields::nested(value, path)?;
        let kind: String = f.req("type")?;
        let part = match kind.as_str() {
            "text" => ContentPart::Text {
                text: f.req("text")?,
                blocks: f.opt("blocks")?,
                client_message_id: f.opt("clientMessageId")?,
            },
            "context" => ContentPart::Context {
                lines: f.req("lines")?,
            },
            "attachment" => ContentPart::Attachment { id: f.req("id")? },
            _ => {
                return Err(wrong_type(
                    &f.path("type"),
                    "one of \"text\", \"context\", \"attachment\"",
                ))
            }
        };
        f.finish()?;
        Ok(part)
    }
}

/// Where a chunked upload's bytes go (`BeginFileUpload.target`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(
    tag = "kind",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
pub enum FileUploadTarget {
    SessionAttachment {
        session_id: String,
        name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    Memory {
        agent_id: String,
        path: String,
    },
}

impl FromField for FileUploadTarget {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        let mut f = Fields::nested(value, path)?;
        let kind: String = f.req("kind")?;
        let target = match kind.as_str() {
            "session-attachment" => FileUploadTarget::SessionAttachment {
                session_id: f.req("sessionId")?,
                name: f.req("name")?,
                mime_type: f.opt("mimeType")?,
            },
            "memory" => FileUploadTarget::Memory {
                agent_id: f.req("agentId")?,
                path: f.req("path")?,
            },
            _ => {
                return Err(wrong_type(
                    &f.path("kind"),
                    "one of \"session-attachment\", \"memory\"",
                ))
            }
        };
        f.finish()?;
        Ok(target)
    }
}
