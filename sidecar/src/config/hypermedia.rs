//! `hypermedia`: the Seed hypermedia server the agents read from (and,
//! later, publish to), and the activity monitor's pace. The operator names
//! these URLs, so a loopback or private address is allowed here; an
//! address a signed client or a model chose still follows the public-only
//! rule. Defaults are the reference's.

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// The reference's hypermedia server.
pub const DEFAULT_SERVER_URL: &str = "https://hyper.media";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct HypermediaConfig {
    /// Where `hm://` reads go: `GET {serverUrl}/api/<Key>`.
    pub server_url: String,
    /// Where `ipfs://` reads go (`GET {ipfsServerUrl}/ipfs/<cid>`); empty
    /// means the hypermedia server.
    pub ipfs_server_url: String,
    /// How often an account's activity is polled (milliseconds).
    pub activity_poll_interval_ms: u64,
    /// Events asked for per `ListEvents` page.
    pub activity_page_size: u64,
    /// Pages read per poll at most.
    pub activity_max_pages: u64,
    /// How long one read may take (milliseconds), answer included.
    pub read_timeout_ms: u64,
    /// Bytes of one answer, at most; a larger one is refused
    /// (`hm_too_large`), not cut.
    pub max_response_bytes: u64,
}

impl Default for HypermediaConfig {
    fn default() -> Self {
        HypermediaConfig {
            server_url: DEFAULT_SERVER_URL.to_owned(),
            ipfs_server_url: String::new(),
            activity_poll_interval_ms: 5_000,
            activity_page_size: 50,
            activity_max_pages: 5,
            read_timeout_ms: 30_000,
            max_response_bytes: 8 * 1024 * 1024,
        }
    }
}

impl HypermediaConfig {
    /// The hypermedia server's base URL, without a trailing slash.
    pub fn server(&self) -> String {
        normalize(&self.server_url).unwrap_or_else(|| DEFAULT_SERVER_URL.to_owned())
    }

    /// The IPFS gateway's base URL: the hypermedia server's unless named.
    pub fn ipfs_server(&self) -> String {
        normalize(&self.ipfs_server_url).unwrap_or_else(|| self.server())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if normalize(&self.server_url).is_none() {
            return Err(ConfigError::new(
                "hypermedia.serverUrl",
                "must be an http:// or https:// URL",
            ));
        }
        if !self.ipfs_server_url.trim().is_empty() && normalize(&self.ipfs_server_url).is_none() {
            return Err(ConfigError::new(
                "hypermedia.ipfsServerUrl",
                "must be an http:// or https:// URL, or empty for the hypermedia server",
            ));
        }
        for (field, value, min) in [
            (
                "hypermedia.activityPollIntervalMs",
                self.activity_poll_interval_ms,
                1,
            ),
            ("hypermedia.activityPageSize", self.activity_page_size, 1),
            ("hypermedia.activityMaxPages", self.activity_max_pages, 1),
            ("hypermedia.readTimeoutMs", self.read_timeout_ms, 1),
            ("hypermedia.maxResponseBytes", self.max_response_bytes, 1024),
        ] {
            if value < min {
                return Err(ConfigError::new(field, format!("must be at least {min}")));
            }
        }
        Ok(())
    }
}

/// The reference's `normalizeHttpUrl`: trimmed, an http(s) URL, without
/// trailing slashes; `None` when it is not one.
fn normalize(raw: &str) -> Option<String> {
    let trimmed = raw.trim().trim_end_matches('/');
    let url = url::Url::parse(trimmed).ok()?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return None;
    }
    Some(url.as_str().trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_normalized_and_the_ipfs_server_defaults_to_the_hypermedia_one() {
        let mut config = HypermediaConfig::default();
        assert_eq!(config.server(), "https://hyper.media");
        assert_eq!(config.ipfs_server(), "https://hyper.media");
        config.server_url = " http://127.0.0.1:4000/// ".into();
        assert!(config.validate().is_ok());
        assert_eq!(config.server(), "http://127.0.0.1:4000");
        assert_eq!(config.ipfs_server(), "http://127.0.0.1:4000");
        config.ipfs_server_url = "https://gw.example/base/".into();
        assert_eq!(config.ipfs_server(), "https://gw.example/base");
        for bad in ["", "hyper.media", "ftp://x.example", "https://"] {
            config.server_url = bad.into();
            let error = config.validate().unwrap_err();
            assert_eq!(error.field, "hypermedia.serverUrl", "{bad:?}");
        }
        config.server_url = DEFAULT_SERVER_URL.into();
        config.ipfs_server_url = "gopher://x".into();
        assert_eq!(
            config.validate().unwrap_err().field,
            "hypermedia.ipfsServerUrl"
        );
        config.ipfs_server_url = String::new();
        config.activity_page_size = 0;
        assert_eq!(
            config.validate().unwrap_err().field,
            "hypermedia.activityPageSize"
        );
    }
}
