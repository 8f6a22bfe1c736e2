//! `builtin`: how the builtin model agent reaches providers. Signed clients
//! choose a provider's type, key and, for custom endpoints, its URL; the
//! public types' endpoints are pinned, and only the operator may move them
//! (`providerEndpoints`, e.g. to a proxy or a scripted server in tests).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Provider types whose endpoint is pinned.
pub const PINNED_TYPES: [&str; 5] = [
    "openai",
    "anthropic",
    "google",
    // Subscription sign-in's issuer and the ChatGPT Codex backend.
    "openai-oauth",
    "openai-codex",
];

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Lets `DownloadAgentMemoryFile` reach loopback and private addresses
    /// (a deployment whose files live on its own network). Off: public
    /// addresses only, as page reads.
    pub allow_private_downloads: bool,
    /// How many times a model call the provider refused as rate limited or
    /// overloaded (429, 503, 529, `overloaded_error`) is made again before
    /// the turn fails, each after the pause the provider asked for
    /// (`retry-after`) or a doubling backoff; 0 turns retries off. A call
    /// whose answer had begun streaming is never repeated.
    pub provider_retries: u32,
    /// Names each Seed session after its first turn while nobody named it
    /// (a short call to the agent's own model; a registry adapter's from
    /// the user's first words). Off: sessions keep what they were given.
    pub session_titles: bool,
    /// Offers "Sign in with ChatGPT" (`StartProviderOAuth`); off, as the
    /// reference, until an operator turns it on.
    pub subscription_auth: bool,
    /// A builtin session's agent process ends once its session has been
    /// idle this long (milliseconds; 0: as soon as its turn ends); the next
    /// turn starts another, which resumes from the log. Registry adapters
    /// are never ended for idleness (they may not restore).
    pub idle_agent_ms: u64,
    /// Runs each builtin session's agent as its own process
    /// (`agentos-sidecar agent`, confined as any adapter) instead of as a
    /// task of the sidecar speaking the same ACP over an in-memory pipe.
    /// Off by default: the builtin agent is the sidecar's own code, it holds
    /// no secret but the key lent to it per call, and its tools run in the
    /// sidecar either way; a process costs a turn its pipes and wake-ups.
    pub agent_process: bool,
}

/// Retries of a busy provider by default.
pub const DEFAULT_PROVIDER_RETRIES: u32 = 3;
/// The most retries a configuration may ask for.
pub const MAX_PROVIDER_RETRIES: u32 = 10;

impl Default for BuiltinConfig {
    fn default() -> Self {
        BuiltinConfig {
            provider_endpoints: BTreeMap::new(),
            allow_private_endpoints: false,
            allow_private_downloads: false,
            provider_retries: DEFAULT_PROVIDER_RETRIES,
            session_titles: true,
            subscription_auth: false,
            idle_agent_ms: 30_000,
            agent_process: false,
        }
    }
}

impl BuiltinConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.provider_retries > MAX_PROVIDER_RETRIES {
            return Err(ConfigError::new(
                "builtin.providerRetries",
                format!("must be at most {MAX_PROVIDER_RETRIES}"),
            ));
        }
        for (provider_type, url) in &self.provider_endpoints {
            let field = format!("builtin.providerEndpoints.{provider_type}");
            if !PINNED_TYPES.contains(&provider_type.as_str()) {
                return Err(ConfigError::new(
                    field,
                    "must be one of openai, anthropic, google, openai-oauth, openai-codex",
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

    #[test]
    fn provider_retries_are_bounded() {
        let mut config = BuiltinConfig::default();
        assert_eq!(config.provider_retries, DEFAULT_PROVIDER_RETRIES);
        config.provider_retries = 0;
        assert!(config.validate().is_ok());
        config.provider_retries = MAX_PROVIDER_RETRIES + 1;
        assert_eq!(
            config.validate().unwrap_err().field,
            "builtin.providerRetries"
        );
    }
}
