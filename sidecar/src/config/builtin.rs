//! `builtin`: how the builtin model agent reaches providers. Signed clients
//! choose a provider's type, key and, for custom endpoints, its URL; the
//! public types' endpoints are pinned, and only the operator may move them
//! (`providerEndpoints`, e.g. to a proxy or a scripted server in tests).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Provider types whose endpoint is pinned.
pub const PINNED_TYPES: [&str; 3] = ["openai", "anthropic", "google"];

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct BuiltinConfig {
    /// Provider type (`openai`, `anthropic`, `google`) to the base URL used
    /// instead of its public one.
    pub provider_endpoints: BTreeMap<String, String>,
    /// Lets a signed client's custom provider `baseUrl` (and an `ollama`
    /// provider without one, which means this machine) lead to loopback or
    /// private addresses. Off: only public addresses, so no account can
    /// make the sidecar call what only the machine can reach.
    pub allow_private_endpoints: bool,
}

impl BuiltinConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (provider_type, url) in &self.provider_endpoints {
            let field = format!("builtin.providerEndpoints.{provider_type}");
            if !PINNED_TYPES.contains(&provider_type.as_str()) {
                return Err(ConfigError::new(
                    field,
                    "must be one of openai, anthropic, google",
                ));
            }
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return Err(ConfigError::new(field, "must be an http(s) URL"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pinned_types_with_urls() {
        let mut config = BuiltinConfig::default();
        config
            .provider_endpoints
            .insert("openai".into(), "http://127.0.0.1:1/v1".into());
        assert!(config.validate().is_ok());
        config
            .provider_endpoints
            .insert("custom".into(), "http://x".into());
        assert_eq!(
            config.validate().unwrap_err().field,
            "builtin.providerEndpoints.custom"
        );
        let mut config = BuiltinConfig::default();
        config
            .provider_endpoints
            .insert("google".into(), "ftp://x".into());
        assert!(config.validate().is_err());
    }
}
