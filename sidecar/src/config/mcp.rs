//! `mcp`: how the sidecar reaches MCP servers. Accounts configure remote
//! servers over the signed API (`SetMcpServer`); this section bounds them
//! and names the servers only the operator may run: commands started on
//! this machine (`servers`), confined like adapters. A signed client never
//! introduces a command.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{AgentSpec, ConfigError};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct McpConfig {
    /// How long one tool call may take (milliseconds) before it answers
    /// `mcp_timeout`.
    pub call_timeout_ms: u64,
    /// How long connecting and listing a server's tools may take.
    pub connect_timeout_ms: u64,
    /// Lets an account's server URL lead to loopback or private addresses.
    /// Off: public addresses only, as for custom providers.
    pub allow_private_urls: bool,
    /// Servers one account may configure.
    pub max_servers_per_account: u64,
    /// Open connections to servers in the whole VM; an idle one is closed
    /// to make room, and past it with none idle a call answers `mcp_busy`.
    pub max_connections: u64,
    /// Tool calls and tool listings in flight in the whole VM; past it a
    /// call answers `mcp_busy` (and a refresh 429).
    pub max_calls: u64,
    /// Bytes of one message from a server (an answer, an event, a stdio
    /// line), at most. What the VM holds of them is one per call or listing
    /// in flight (`maxCalls`) and one per connection's stream or stdout
    /// (`maxConnections`).
    pub max_message_bytes: u64,
    /// An idle connection is closed after this long (milliseconds).
    pub idle_ms: u64,
    /// Servers the operator runs as commands (stdio), by name; every
    /// account sees them, and an agent uses one when its definition names
    /// it in `mcpServers`.
    pub servers: BTreeMap<String, AgentSpec>,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            call_timeout_ms: 120_000,
            connect_timeout_ms: 20_000,
            allow_private_urls: false,
            max_servers_per_account: 32,
            max_connections: 64,
            max_calls: 64,
            max_message_bytes: 1024 * 1024,
            idle_ms: 60_000,
            servers: BTreeMap::new(),
        }
    }
}

/// Whether `name` is a server name: a slug of 1 to 32 characters.
pub fn is_server_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 32
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

impl McpConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value, min) in [
            ("mcp.callTimeoutMs", self.call_timeout_ms, 1),
            ("mcp.connectTimeoutMs", self.connect_timeout_ms, 1),
            ("mcp.maxConnections", self.max_connections, 1),
            ("mcp.maxCalls", self.max_calls, 1),
            ("mcp.maxMessageBytes", self.max_message_bytes, 1024),
            ("mcp.idleMs", self.idle_ms, 1),
        ] {
            if value < min {
                return Err(ConfigError::new(field, format!("must be at least {min}")));
            }
        }
        for (name, spec) in &self.servers {
            if !is_server_name(name) {
                return Err(ConfigError::new(
                    format!("mcp.servers.{name}"),
                    "server names are 1 to 32 of a-z, 0-9, _ and -, starting with a letter or digit",
                ));
            }
            if spec.command.is_empty() {
                return Err(ConfigError::new(
                    format!("mcp.servers.{name}.command"),
                    "must not be empty",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_slugs() {
        for good in ["a", "0", "everything", "my_server-2", &"a".repeat(32)] {
            assert!(is_server_name(good), "{good}");
        }
        for bad in [
            "",
            "-a",
            "_a",
            "A",
            "a b",
            "a.b",
            "a/b",
            &"a".repeat(33),
            "é",
        ] {
            assert!(!is_server_name(bad), "{bad}");
        }
    }

    #[test]
    fn bounds_and_commands_are_checked() {
        assert_eq!(McpConfig::default().validate(), Ok(()));
        let mut config = McpConfig {
            max_calls: 0,
            ..McpConfig::default()
        };
        assert_eq!(config.validate().unwrap_err().field, "mcp.maxCalls");
        config.max_calls = 1;
        config.servers.insert("Bad".into(), AgentSpec::default());
        assert_eq!(config.validate().unwrap_err().field, "mcp.servers.Bad");
        config.servers.clear();
        config.servers.insert("ok".into(), AgentSpec::default());
        assert_eq!(
            config.validate().unwrap_err().field,
            "mcp.servers.ok.command"
        );
    }
}
