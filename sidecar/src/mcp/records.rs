//! An account's server records as the service reads and writes them: the
//! config checked with the reference's rules and words (and our name
//! rule), redacted for responses (header names, never values), and the
//! discovered tools as stored JSON.

use std::collections::BTreeMap;

use agentos_protocol::mcp::ToolDescriptor;
use agentos_protocol::seed::action::McpServerConfig;
use agentos_protocol::seed::response::RedactedMcpServer;
use serde_json::Value;

use super::{McpError, ServerRow};
use crate::config::mcp::is_server_name;

/// Longest URL and header value, and most headers, as the reference.
const MAX_URL_BYTES: usize = 2048;
const MAX_HEADERS: usize = 16;
const MAX_HEADER_NAME_BYTES: usize = 256;

pub(super) fn tools_json(tools: &[ToolDescriptor]) -> Value {
    Value::Array(tools.iter().map(ToolDescriptor::to_json).collect())
}

pub(super) fn tools_of(value: Option<&Value>) -> Vec<ToolDescriptor> {
    value
        .and_then(Value::as_array)
        .map(|tools| tools.iter().filter_map(ToolDescriptor::from_json).collect())
        .unwrap_or_default()
}

pub(super) fn config_of(row: &ServerRow) -> Result<McpServerConfig, McpError> {
    serde_json::from_value(row.config.clone()).map_err(|e| {
        McpError::Storage(format!(
            "the stored config of {:?} does not decode: {e}",
            row.name
        ))
    })
}

pub(super) fn redact(row: &ServerRow) -> RedactedMcpServer {
    let config = config_of(row).ok();
    let keys = |map: Option<&BTreeMap<String, String>>| -> Vec<String> {
        map.map(|m| m.keys().cloned().collect()).unwrap_or_default()
    };
    let secret_header_names = keys(config.as_ref().and_then(|c| c.secret_refs.as_ref()));
    RedactedMcpServer {
        id: row.server_id.clone(),
        name: row.name.clone(),
        url: config.as_ref().map(|c| c.url.clone()).unwrap_or_default(),
        transport: config
            .as_ref()
            .and_then(|c| c.transport.clone())
            .unwrap_or_else(|| "http".to_owned()),
        header_names: keys(config.as_ref().and_then(|c| c.headers.as_ref())),
        has_secrets: !secret_header_names.is_empty(),
        secret_header_names,
        created_at: row.created_at_ms,
        updated_at: row.updated_at_ms,
        tool_count: row
            .tools
            .as_ref()
            .and_then(Value::as_array)
            .map(|t| t.len() as u64),
        error: row.last_error.clone(),
        discovered_at: row.discovered_at_ms,
        operator: false,
    }
}

/// Checks a config as the reference does, with our name rule; answers it
/// normalized (empty maps left out).
pub(super) fn check_config(
    name: &str,
    mut config: McpServerConfig,
) -> Result<McpServerConfig, McpError> {
    if !is_server_name(name) {
        return Err(McpError::Invalid(
            "MCP server names are 1 to 32 of a-z, 0-9, _ and -, starting with a letter or digit"
                .into(),
        ));
    }
    let url = config.url.trim().to_owned();
    if url.is_empty() {
        return Err(McpError::Invalid("MCP server URL is required".into()));
    }
    if url.len() > MAX_URL_BYTES {
        return Err(McpError::Invalid("MCP server URL is too long".into()));
    }
    let parsed = reqwest::Url::parse(&url)
        .map_err(|_| McpError::Invalid("MCP server URL is invalid".into()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(McpError::Invalid(
            "MCP server URL must start with http:// or https://".into(),
        ));
    }
    config.url = url;
    if let Some(transport) = &config.transport {
        if transport != "http" && transport != "sse" {
            return Err(McpError::Invalid("MCP transport is unsupported".into()));
        }
    }
    for (what, map) in [
        ("headers", &config.headers),
        ("secret headers", &config.secret_refs),
    ] {
        let Some(map) = map else { continue };
        if map.len() > MAX_HEADERS {
            return Err(McpError::Invalid(format!("Too many MCP {what}")));
        }
        for (header, value) in map {
            if header.is_empty()
                || header.len() > MAX_HEADER_NAME_BYTES
                || reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err()
            {
                return Err(McpError::Invalid(format!(
                    "MCP header name {header:?} is invalid"
                )));
            }
            if value.is_empty() || value.len() > MAX_URL_BYTES {
                return Err(McpError::Invalid(format!(
                    "MCP header {header:?} needs a value of 1 to {MAX_URL_BYTES} bytes"
                )));
            }
        }
    }
    if let Some(headers) = &config.headers {
        for (header, value) in headers {
            if reqwest::header::HeaderValue::from_str(value).is_err() {
                return Err(McpError::Invalid(format!(
                    "MCP header {header:?} has an invalid value"
                )));
            }
        }
    }
    config.headers = config.headers.filter(|m| !m.is_empty());
    config.secret_refs = config.secret_refs.filter(|m| !m.is_empty());
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> McpServerConfig {
        McpServerConfig {
            url: url.into(),
            transport: None,
            headers: None,
            secret_refs: None,
        }
    }

    #[test]
    fn configs_are_checked_as_the_reference() {
        let ok = check_config("weather", config(" https://mcp.example/mcp ")).unwrap();
        assert_eq!(ok.url, "https://mcp.example/mcp");
        let refused =
            |name: &str, c: McpServerConfig| check_config(name, c).unwrap_err().to_string();
        assert!(refused("Weather", config("https://x")).contains("server names"));
        assert_eq!(refused("w", config("")), "MCP server URL is required");
        assert_eq!(
            refused("w", config("not a url")),
            "MCP server URL is invalid"
        );
        assert_eq!(
            refused("w", config("ftp://x/")),
            "MCP server URL must start with http:// or https://"
        );
        let mut c = config("https://x/");
        c.transport = Some("stdio".into());
        assert_eq!(refused("w", c), "MCP transport is unsupported");
        let mut c = config("https://x/");
        c.headers = Some((0..17).map(|i| (format!("h{i}"), "v".into())).collect());
        assert_eq!(refused("w", c), "Too many MCP headers");
        let mut c = config("https://x/");
        c.headers = Some([("bad header".into(), "v".into())].into());
        assert!(refused("w", c).contains("is invalid"));
        let mut c = config("https://x/");
        c.secret_refs = Some(BTreeMap::new());
        assert_eq!(check_config("w", c).unwrap().secret_refs, None);
    }
}
