//! What MCP tools are called: their callable addresses
//! (`mcp:<server>/<tool>`), the provider-facing name of a promoted one
//! (`mcp__<server>__<tool>`, in the charset providers take), their infos in
//! responses, and the contract the model reads.

use agentos_protocol::mcp::ToolDescriptor;
use agentos_protocol::seed::response::McpToolInfo;
use serde_json::json;

use super::ADDRESS_PREFIX;

/// `mcp:<server>/<tool>` as its parts.
pub fn parse_address(address: &str) -> Option<(&str, &str)> {
    let rest = address.strip_prefix(ADDRESS_PREFIX)?;
    let (server, tool) = rest.split_once('/')?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

pub fn address(server: &str, tool: &str) -> String {
    format!("{ADDRESS_PREFIX}{server}/{tool}")
}

/// A segment in the `[a-zA-Z0-9_-]` providers take for tool names.
fn sanitize(segment: &str) -> String {
    let mut out = String::new();
    let mut gap = false;
    for c in segment.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            if gap && !out.is_empty() {
                out.push('_');
            }
            gap = false;
            out.push(c);
        } else {
            gap = true;
        }
    }
    let trimmed = out.trim_matches('_');
    if trimmed.is_empty() {
        "mcp".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// The longest tool name every provider takes (Anthropic's bound).
const MAX_PROVIDER_NAME: usize = 64;

/// The provider-facing name of a promoted MCP tool
/// (`mcp__<server>__<tool>`, as the reference names them). A name that
/// sanitizing changed or that `__` makes ambiguous, or one past 64
/// characters, is told apart by a hash of the address, so two tools never
/// share one.
pub fn provider_name(server: &str, tool: &str) -> String {
    use sha2::{Digest, Sha256};
    let (s, t) = (sanitize(server), sanitize(tool));
    let plain = s == server && t == tool && !server.contains("__") && !tool.contains("__");
    let name = format!("mcp__{s}__{t}");
    if plain && name.len() <= MAX_PROVIDER_NAME {
        return name;
    }
    let digest = Sha256::digest(address(server, tool).as_bytes());
    let tag = hex::encode(&digest[..4]);
    let keep = name.len().min(MAX_PROVIDER_NAME - tag.len() - 1);
    // Sanitized names are ASCII: any byte index is a boundary.
    format!("{}_{tag}", &name[..keep])
}

pub fn tool_infos(server: &str, tools: &[ToolDescriptor]) -> Vec<McpToolInfo> {
    tools
        .iter()
        .map(|tool| McpToolInfo {
            name: tool.name.clone(),
            qualified_name: address(server, &tool.name),
            description: tool.description.clone(),
            input_schema: tool
                .input_schema
                .as_ref()
                .map(agentos_protocol::seed::json_to_ipld_clipped),
        })
        .collect()
}

/// The contract the model reads for an MCP tool.
pub fn contract_markdown(server: &str, tool: &ToolDescriptor) -> String {
    let description = tool
        .description
        .clone()
        .filter(|d| !d.trim().is_empty())
        .unwrap_or_else(|| format!("Tool \"{}\" from MCP server \"{server}\".", tool.name));
    let schema = tool
        .input_schema
        .clone()
        .unwrap_or_else(|| json!({"type": "object", "additionalProperties": true}));
    format!(
        "# {}\n\n> mcp tool · server `{server}`\n\n{description}\n\n## Input schema\n\n```json\n{}\n```\n",
        address(server, &tool.name),
        serde_json::to_string_pretty(&schema).unwrap_or_else(|_| "{}".into())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_provider_names() {
        assert_eq!(
            parse_address("mcp:everything/get-sum"),
            Some(("everything", "get-sum"))
        );
        assert_eq!(parse_address("mcp:s/a/b"), Some(("s", "a/b")));
        assert_eq!(parse_address("mcp:/t"), None);
        assert_eq!(parse_address("mcp:s/"), None);
        assert_eq!(parse_address("search"), None);
        assert_eq!(address("s", "t"), "mcp:s/t");
        assert_eq!(
            provider_name("everything", "get-sum"),
            "mcp__everything__get-sum"
        );
        let dotted = provider_name("s", "a.b c");
        assert!(
            dotted.starts_with("mcp__s__a_b_c_") && dotted.len() == 22,
            "{dotted}"
        );
        assert_ne!(dotted, provider_name("s", "a_b_c"));
        assert_eq!(provider_name("s", "a_b_c"), "mcp__s__a_b_c");
        assert!(provider_name("s", "...").starts_with("mcp__s__mcp_"));
        // `__` would make server and tool ambiguous.
        assert_ne!(provider_name("a", "b__c"), provider_name("a__b", "c"));
        let long = provider_name("server", &"t".repeat(100));
        assert_eq!(long.len(), 64);
        assert!(long.starts_with("mcp__server__ttt"));
        assert_ne!(long, provider_name("server", &"t".repeat(101)));
    }
}
