//! MCP servers in responses: a server's record without its secrets
//! (`RedactedMcpServer`, the reference's fields plus what discovery last
//! found), and one tool a server advertises (`McpToolInfo`).

use ipld_core::ipld::Ipld;
use serde::{Deserialize, Serialize};

/// An MCP server as an account sees it: header names, never their values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RedactedMcpServer {
    pub id: String,
    pub name: String,
    /// The endpoint; empty for a server the operator runs as a command.
    pub url: String,
    /// `http`, `sse`, or `stdio` for the operator's command servers.
    pub transport: String,
    /// Names of the headers sent in the clear.
    pub header_names: Vec<String>,
    /// Names of the headers whose values are account secrets.
    pub secret_header_names: Vec<String>,
    pub has_secrets: bool,
    pub created_at: i64,
    pub updated_at: i64,
    /// Tools the last discovery found (absent before any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_count: Option<u64>,
    /// Why the last discovery failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the last discovery ran (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovered_at: Option<i64>,
    /// `true` for a server of the VM's configuration (not the account's:
    /// it cannot be changed or deleted through the signed API).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub operator: bool,
}

/// One tool an MCP server advertises.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpToolInfo {
    /// The name the server gave it.
    pub name: String,
    /// Its callable address, `mcp:<server>/<tool>`: what `call` takes.
    pub qualified_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Ipld>,
}
