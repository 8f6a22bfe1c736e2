//! The signed control plane's settings: `http` (the listener and its
//! bounds), `secrets` (where the key lives) and `limits.control` (the
//! bounds of its collections). Plain data and validation, like the rest of
//! the config; the `http/` module and `control/` read it.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{validate_path, ConfigError, MIB};

/// `http`: the signed API. Off unless `listen` is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct HttpConfig {
    /// A loopback `host:port`, or `unix:/abs/path` (a socket of mode 0600).
    pub listen: Option<String>,
    /// Largest request body; larger is 413.
    pub max_body_bytes: u64,
    /// Request bodies of every request together, counted twice (as
    /// received and decoded) from before they are read until they are
    /// answered; a request waits for room at most half of
    /// `bodyReadTimeoutMs`, else it is answered 503 `busy`.
    pub max_buffered_body_bytes: u64,
    /// How far an action's `ts` may be from the sidecar's clock, either way.
    pub timestamp_window_ms: u64,
    /// Accepted signatures remembered until their window closes. When full,
    /// the oldest go first and anything older than what is remembered is
    /// refused.
    pub replay_cache_entries: u64,
    /// Requests served at once; more wait for a slot.
    pub max_concurrent_requests: u32,
    /// Connections open at once. Past it a new one takes an idle one's
    /// place; only while every one is inside a request does it wait in
    /// the listen backlog.
    pub max_connections: u32,
    /// How long a connection may take to send a request's headers, idle
    /// keep-alive time included; past it the connection is closed.
    pub header_read_timeout_ms: u64,
    /// How long a request may take to send its body once its headers are
    /// in; past it the request is answered 408 `body_timeout`, so a client
    /// trickling bytes cannot hold a request slot and a body buffer.
    pub body_read_timeout_ms: u64,
    #[serde(default)]
    pub ws: WsLimits,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: None,
            max_body_bytes: 16 * MIB,
            max_buffered_body_bytes: 128 * MIB,
            timestamp_window_ms: 5 * 60 * 1000,
            replay_cache_entries: 100_000,
            max_concurrent_requests: 256,
            max_connections: 1024,
            header_read_timeout_ms: 30_000,
            body_read_timeout_ms: 30_000,
            ws: WsLimits::default(),
        }
    }
}

/// `http.ws`: bounds of one `/agents/ws` socket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct WsLimits {
    /// Sockets open at once.
    pub max_sockets: u32,
    /// Subscriptions one socket may hold.
    pub max_subscriptions_per_socket: u32,
    /// Bytes of frames queued for one socket; past it the socket is closed
    /// with a close reason (a consumer that fell too far behind).
    pub max_queued_bytes_per_socket: u64,
    /// Bytes of frames queued for all sockets together; past it the
    /// sockets furthest behind are closed.
    pub max_queued_bytes: u64,
    /// Sockets one account may have open (bound to it by their first
    /// signed frame) at once.
    pub max_sockets_per_account: u32,
    /// Largest frame a client may send.
    pub max_frame_bytes: u64,
    /// How often the server pings.
    pub ping_interval_ms: u64,
    /// A socket that sends nothing (not even a pong) for this long is closed.
    pub idle_timeout_ms: u64,
}

impl Default for WsLimits {
    fn default() -> Self {
        WsLimits {
            max_sockets: 1024,
            max_subscriptions_per_socket: 64,
            max_queued_bytes_per_socket: 8 * MIB,
            max_queued_bytes: 128 * MIB,
            max_sockets_per_account: 64,
            max_frame_bytes: 64 * 1024,
            ping_interval_ms: 20_000,
            idle_timeout_ms: 60_000,
        }
    }
}

/// Where the HTTP listener binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpListen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl HttpListen {
    /// Parses `http.listen`: `unix:/abs/path` or a loopback `host:port`.
    pub fn parse(text: &str) -> Result<HttpListen, ConfigError> {
        if let Some(path) = text.strip_prefix("unix:") {
            let path = PathBuf::from(path);
            validate_path("http.listen", &path)?;
            return Ok(HttpListen::Unix(path));
        }
        let addr: SocketAddr = text.parse().map_err(|_| {
            ConfigError::new(
                "http.listen",
                "must be a loopback host:port (e.g. 127.0.0.1:7878) or unix:/abs/path",
            )
        })?;
        if !addr.ip().is_loopback() {
            return Err(ConfigError::new(
                "http.listen",
                "must be a loopback address: the sidecar is reached from outside through its host",
            ));
        }
        Ok(HttpListen::Tcp(addr))
    }
}

impl std::fmt::Display for HttpListen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpListen::Tcp(addr) => write!(f, "{addr}"),
            HttpListen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl HttpConfig {
    /// The parsed listener, if the API is on.
    pub fn listener(&self) -> Result<Option<HttpListen>, ConfigError> {
        self.listen.as_deref().map(HttpListen::parse).transpose()
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.listener()?;
        let positive: [(&str, u64); 16] = [
            ("http.maxConnections", u64::from(self.max_connections)),
            ("http.headerReadTimeoutMs", self.header_read_timeout_ms),
            ("http.bodyReadTimeoutMs", self.body_read_timeout_ms),
            ("http.maxBodyBytes", self.max_body_bytes),
            ("http.maxBufferedBodyBytes", self.max_buffered_body_bytes),
            ("http.timestampWindowMs", self.timestamp_window_ms),
            ("http.replayCacheEntries", self.replay_cache_entries),
            (
                "http.maxConcurrentRequests",
                u64::from(self.max_concurrent_requests),
            ),
            ("http.ws.maxSockets", u64::from(self.ws.max_sockets)),
            (
                "http.ws.maxSubscriptionsPerSocket",
                u64::from(self.ws.max_subscriptions_per_socket),
            ),
            (
                "http.ws.maxQueuedBytesPerSocket",
                self.ws.max_queued_bytes_per_socket,
            ),
            ("http.ws.maxQueuedBytes", self.ws.max_queued_bytes),
            (
                "http.ws.maxSocketsPerAccount",
                u64::from(self.ws.max_sockets_per_account),
            ),
            ("http.ws.maxFrameBytes", self.ws.max_frame_bytes),
            ("http.ws.pingIntervalMs", self.ws.ping_interval_ms),
            ("http.ws.idleTimeoutMs", self.ws.idle_timeout_ms),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(ConfigError::new(field, "must be greater than 0"));
            }
        }
        if self.ws.idle_timeout_ms <= self.ws.ping_interval_ms {
            return Err(ConfigError::new(
                "http.ws.idleTimeoutMs",
                "must be longer than http.ws.pingIntervalMs",
            ));
        }
        Ok(())
    }
}

/// `secrets`: where the key that encrypts provider secrets lives. Never in
/// the database.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretsConfig {
    /// The key file (32 bytes, created 0600 when missing). Absent: the
    /// `AGENTOS_SECRETS_KEY` environment variable, else `secrets.key` beside
    /// a `sqlite_file` database; an `actor_uds` VM without one has a locked
    /// vault.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

/// The bounds of every control-plane collection. A full collection answers
/// `ControlError::Limit` naming the setting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ControlLimits {
    /// Accounts the VM stores (any verified key can make one).
    pub max_accounts: u64,
    pub max_agents_per_account: u64,
    pub max_providers_per_account: u64,
    pub max_secrets_per_account: u64,
    /// Collaborators of one agent, pending and accepted.
    pub max_collaborators_per_agent: u64,
    /// Collaborations one account holds on others' agents, pending and
    /// accepted (so invitations to one account are bounded too).
    pub max_collaborations_per_account: u64,
    /// Signer rows of one account, revoked ones included.
    pub max_signers_per_account: u64,
    /// Idempotency records VM-wide; the oldest beyond this are pruned.
    pub max_idempotency_records: u64,
    /// Bytes of one stored agent definition.
    pub max_agent_definition_bytes: u64,
    /// Authored (lambda) tool documents of one agent; its builtins do not
    /// count.
    pub max_tools_per_agent: u64,
    /// Triggers of one agent.
    pub max_triggers_per_agent: u64,
    /// Firings of one trigger kept; the oldest beyond this are pruned.
    pub max_firings_per_trigger: u64,
    /// Bytes of one session attachment.
    pub max_attachment_bytes: u64,
    /// Attachments of one session.
    pub max_attachments_per_session: u64,
    /// Chunked uploads in progress per owner account.
    pub max_uploads_per_account: u64,
    /// Chunked uploads in progress in the whole VM.
    pub max_uploads: u64,
    /// An upload untouched this long (milliseconds) is gone.
    pub upload_idle_ms: u64,
    /// Bytes of one upload chunk (`maxChunkBytes` in `BeginFileUpload`'s
    /// answer); a chunk's action must also fit `http.maxBodyBytes`.
    pub max_upload_chunk_bytes: u64,
    /// Bytes of one file uploaded or downloaded into an agent's memory.
    pub max_memory_upload_bytes: u64,
    /// Distinct attachments one message may name.
    pub max_attachments_per_message: u64,
    /// Lines of one message's context part.
    pub max_context_lines: u64,
    /// Bytes of one context line.
    pub max_context_line_bytes: u64,
    /// Downloads into memory (`DownloadAgentMemoryFile`) at once, in the
    /// whole VM; past it a download is refused (429) until one ends.
    pub max_downloads: u64,
}

impl Default for ControlLimits {
    fn default() -> Self {
        ControlLimits {
            max_accounts: 10_000,
            max_agents_per_account: 1_000,
            max_providers_per_account: 100,
            max_secrets_per_account: 1_000,
            max_collaborators_per_agent: 100,
            max_collaborations_per_account: 1_000,
            max_signers_per_account: 100,
            max_idempotency_records: 100_000,
            max_agent_definition_bytes: 256 * 1024,
            max_tools_per_agent: 200,
            max_triggers_per_agent: 100,
            max_firings_per_trigger: 1_000,
            max_attachment_bytes: 100 * 1024 * 1024,
            max_attachments_per_session: 200,
            max_uploads_per_account: 8,
            max_uploads: 1_024,
            upload_idle_ms: 3_600_000,
            max_upload_chunk_bytes: 8 * 1024 * 1024,
            max_memory_upload_bytes: 2 * 1024 * 1024 * 1024,
            max_attachments_per_message: 16,
            max_context_lines: 64,
            max_context_line_bytes: 2_048,
            max_downloads: 16,
        }
    }
}

/// The setting names, as `ControlError::Limit` and the config use them.
impl ControlLimits {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("limits.control.maxAccounts", self.max_accounts),
            (
                "limits.control.maxAgentsPerAccount",
                self.max_agents_per_account,
            ),
            (
                "limits.control.maxProvidersPerAccount",
                self.max_providers_per_account,
            ),
            (
                "limits.control.maxSecretsPerAccount",
                self.max_secrets_per_account,
            ),
            (
                "limits.control.maxCollaboratorsPerAgent",
                self.max_collaborators_per_agent,
            ),
            (
                "limits.control.maxCollaborationsPerAccount",
                self.max_collaborations_per_account,
            ),
            (
                "limits.control.maxSignersPerAccount",
                self.max_signers_per_account,
            ),
            (
                "limits.control.maxIdempotencyRecords",
                self.max_idempotency_records,
            ),
            (
                "limits.control.maxAgentDefinitionBytes",
                self.max_agent_definition_bytes,
            ),
            ("limits.control.maxToolsPerAgent", self.max_tools_per_agent),
            (
                "limits.control.maxTriggersPerAgent",
                self.max_triggers_per_agent,
            ),
            (
                "limits.control.maxFiringsPerTrigger",
                self.max_firings_per_trigger,
            ),
            (
                "limits.control.maxAttachmentBytes",
                self.max_attachment_bytes,
            ),
            (
                "limits.control.maxAttachmentsPerSession",
                self.max_attachments_per_session,
            ),
            (
                "limits.control.maxUploadsPerAccount",
                self.max_uploads_per_account,
            ),
            ("limits.control.maxUploads", self.max_uploads),
            ("limits.control.uploadIdleMs", self.upload_idle_ms),
            (
                "limits.control.maxUploadChunkBytes",
                self.max_upload_chunk_bytes,
            ),
            (
                "limits.control.maxMemoryUploadBytes",
                self.max_memory_upload_bytes,
            ),
            (
                "limits.control.maxAttachmentsPerMessage",
                self.max_attachments_per_message,
            ),
            ("limits.control.maxContextLines", self.max_context_lines),
            (
                "limits.control.maxContextLineBytes",
                self.max_context_line_bytes,
            ),
            ("limits.control.maxDownloads", self.max_downloads),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(ConfigError::new(field, "must be greater than 0"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_accepts_loopback_and_unix_only() {
        assert_eq!(
            HttpListen::parse("127.0.0.1:7878").unwrap(),
            HttpListen::Tcp("127.0.0.1:7878".parse().unwrap())
        );
        assert!(matches!(
            HttpListen::parse("[::1]:80").unwrap(),
            HttpListen::Tcp(_)
        ));
        assert_eq!(
            HttpListen::parse("unix:/run/a.sock").unwrap(),
            HttpListen::Unix("/run/a.sock".into())
        );
        for bad in [
            "0.0.0.0:7878",
            "10.0.0.1:1",
            "localhost",
            "unix:rel.sock",
            "",
        ] {
            let e = HttpListen::parse(bad).unwrap_err();
            assert_eq!(e.field, "http.listen", "{bad}");
        }
    }

    #[test]
    fn idle_timeout_must_exceed_ping_interval() {
        let mut http = HttpConfig::default();
        http.ws.idle_timeout_ms = http.ws.ping_interval_ms;
        assert_eq!(http.validate().unwrap_err().field, "http.ws.idleTimeoutMs");
    }

    #[test]
    fn tools_per_agent_is_a_positive_control_limit() {
        let limits: ControlLimits = serde_json::from_str(r#"{"maxToolsPerAgent": 3}"#).unwrap();
        assert_eq!(limits.max_tools_per_agent, 3);
        assert_eq!(ControlLimits::default().max_tools_per_agent, 200);
        let zero = ControlLimits {
            max_tools_per_agent: 0,
            ..ControlLimits::default()
        };
        assert_eq!(
            zero.validate().unwrap_err().field,
            "limits.control.maxToolsPerAgent"
        );
    }
}
