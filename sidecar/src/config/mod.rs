//! The VM config: one database descriptor, the host socket, the agent registry
//! and the limits. Parsed strictly (unknown fields are rejected) and validated
//! once, with errors that name the offending field. This module owns plain
//! data and its validation only; the services convert what they need (the
//! VFS builds its policy from `FilesystemConfig` and takes its bounds only as
//! `ValidFsLimits`, so it never re-checks them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod builtin;
mod http;
pub mod hypermedia;
pub mod mcp;
mod runs;

pub use agentos_storage::{DatabaseDescriptor, SqliteLimits};
pub use agentos_vfs::{
    FilesystemConfig, FsLimits, InvalidSetting, ValidFsLimits, MAX_FS_CHUNK_BYTES,
};
pub use builtin::BuiltinConfig;
pub use http::{ControlLimits, HttpConfig, HttpListen, SecretsConfig, WsLimits};
pub use runs::RunLimits;

/// Why a config was refused. The message always starts with the field path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

impl From<InvalidSetting> for ConfigError {
    fn from(e: InvalidSetting) -> Self {
        ConfigError::new(e.field, e.message)
    }
}

impl ConfigError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn code(&self) -> &'static str {
        "invalid_config"
    }
}

/// One entry of the agent registry: how to launch an ACP adapter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// How the adapter is confined (see `sandbox.rs`).
    #[serde(default)]
    pub sandbox: SandboxSpec,
}

/// `agents.<id>.sandbox`: widening or switching off the default confinement
/// of one agent's processes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct SandboxSpec {
    /// `false` runs the adapter unconfined (warned about at start).
    pub enabled: bool,
    /// Extra absolute paths the adapter may read (and execute).
    pub read_paths: Vec<PathBuf>,
    /// Extra absolute paths the adapter may read and write.
    pub write_paths: Vec<PathBuf>,
}

impl Default for SandboxSpec {
    fn default() -> Self {
        SandboxSpec {
            enabled: true,
            read_paths: Vec::new(),
            write_paths: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    pub database: DatabaseDescriptor,
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// The uids whose processes may connect to the host socket (checked with
    /// `SO_PEERCRED`); absent means only the sidecar's own uid.
    #[serde(default)]
    pub allowed_uids: Option<Vec<u32>>,
    /// Where each session's adapter gets its own working and temporary
    /// directories; absent means `sessions/` beside the database file, or
    /// `<socket>.sessions/` beside the actor socket.
    #[serde(default)]
    pub sessions_dir: Option<PathBuf>,
    #[serde(default)]
    pub agents: BTreeMap<String, AgentSpec>,
    #[serde(default)]
    pub limits: Limits,
    /// The VM's file-system policy: the roots sessions may touch and the
    /// read-only subtrees.
    #[serde(default)]
    pub filesystem: FilesystemConfig,
    /// The signed control plane (off unless `http.listen` is set).
    #[serde(default)]
    pub http: HttpConfig,
    /// Where the key of the provider secrets lives.
    #[serde(default)]
    pub secrets: SecretsConfig,
    /// How the builtin model agent reaches providers.
    #[serde(default)]
    pub builtin: BuiltinConfig,
    /// When the schedule monitor looks at the triggers.
    #[serde(default)]
    pub triggers: TriggersConfig,
    /// How MCP servers are reached, and the operator's own.
    #[serde(default)]
    pub mcp: mcp::McpConfig,
    /// The Seed hypermedia server reads go to, and the activity pace.
    #[serde(default)]
    pub hypermedia: hypermedia::HypermediaConfig,
}

/// The schedule monitor's pace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct TriggersConfig {
    /// Milliseconds between two looks at the enabled schedule triggers
    /// (the reference's 5 s); at least 10.
    pub tick_ms: u64,
}

impl Default for TriggersConfig {
    fn default() -> Self {
        TriggersConfig { tick_ms: 5_000 }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Limits {
    #[serde(default)]
    pub sqlite: SqliteLimits,
    #[serde(default)]
    pub host: HostLimits,
    #[serde(default)]
    pub acp: AcpLimits,
    #[serde(default)]
    pub fs: FsLimits,
    #[serde(default)]
    pub control: ControlLimits,
    #[serde(default)]
    pub runs: RunLimits,
}

/// The agent id of the builtin model agent: always known, reserved in the
/// registry (a session of it runs no configured command).
pub const BUILTIN_AGENT: &str = "builtin";

/// Where the embedded default serves the signed API.
pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:7878";

pub(crate) const MIB: u64 = 1024 * 1024;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct HostLimits {
    pub max_frame_bytes: u64,
    pub max_connections: u32,
    /// Bytes of frames (responses, notifications, events) one connection may
    /// have queued for its client, the answers of its running reads
    /// included. Past it the connection is not read, notices to it are
    /// dropped (and counted) and its subscriptions end with `overflow`.
    pub max_queued_bytes_per_connection: u64,
    /// The same bytes of every host connection together; a connection
    /// that finds no room here is treated as over its own budget.
    pub max_queued_bytes: u64,
    /// Large request frames of every host connection together, counted
    /// twice (as received and decoded) from their first byte until they are
    /// answered; a connection waits for room before reading more.
    pub max_inbound_bytes: u64,
    /// How long a connection over its queue budget may go without reading
    /// anything before it is closed.
    pub stalled_write_timeout_ms: u64,
    /// Subscriptions one connection may hold at once.
    pub max_subscriptions_per_connection: u64,
}

impl Default for HostLimits {
    fn default() -> Self {
        HostLimits {
            max_frame_bytes: 80 * MIB,
            max_connections: 1024,
            max_queued_bytes_per_connection: 128 * MIB,
            max_queued_bytes: 128 * MIB,
            max_inbound_bytes: 128 * MIB,
            stalled_write_timeout_ms: 30_000,
            max_subscriptions_per_connection: 10_000,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct AcpLimits {
    pub max_read_line_bytes: u64,
    /// Adapter stdout read but not yet consumed; when full the reader stops
    /// reading the pipe.
    pub stdout_buffer_byte_limit: u64,
    pub max_completed_message_bytes: u64,
    pub max_turn_output_bytes: u64,
    pub max_prompt_bytes: u64,
    pub max_prompt_blocks: u64,
    pub max_fallback_continuation_bytes: u64,
    pub max_session_history_bytes: u64,
    pub max_session_history_events: u64,
    pub max_history_page_entries: u64,
    pub max_session_list_entries: u64,
    pub max_sessions_per_vm: u64,
    pub max_prompts_per_session: u64,
    /// Prompts waiting behind a session's live turn (the signed API's
    /// messages from several writers); past it, `session_busy`.
    pub max_queued_prompts_per_session: u64,
    pub max_prompts_per_vm: u64,
    pub max_pending_permissions_per_session: u64,
    pub max_pending_permissions_per_vm: u64,
    pub max_permission_outcomes_per_session: u64,
    pub max_permission_outcomes_per_vm: u64,
    /// Bytes of lines queued for one adapter's stdin. When full, the
    /// adapter's requests wait; past `stalledStdinTimeoutMs` the turn fails
    /// (`resource_limit`) and the adapter is stopped.
    pub max_queued_stdin_bytes: u64,
    /// The same bytes of every adapter together; an adapter's requests
    /// wait for room here too.
    pub max_queued_stdin_bytes_per_vm: u64,
    /// Stdout lines of every adapter together, from when they are read
    /// (a long one from where it passes 64 KiB) until their event is
    /// taken; a line that finds no room within `stalledStdinTimeoutMs` is
    /// refused (its turn fails naming this).
    pub max_stdout_bytes_per_vm: u64,
    pub stalled_stdin_timeout_ms: u64,
    /// The largest answer to one `fs/read_text_file` (after `line`/`limit`).
    pub max_read_text_file_bytes: u64,
    /// Stderr bytes per second forwarded from one adapter (with a burst of
    /// one second's worth); the rest is dropped and counted.
    pub max_stderr_bytes_per_second: u64,
}

impl Default for AcpLimits {
    fn default() -> Self {
        AcpLimits {
            max_read_line_bytes: 16 * MIB,
            stdout_buffer_byte_limit: MIB,
            max_completed_message_bytes: 64 * MIB,
            max_turn_output_bytes: 256 * MIB,
            max_prompt_bytes: 64 * MIB,
            max_prompt_blocks: 16_384,
            max_fallback_continuation_bytes: 4 * MIB,
            max_session_history_bytes: 1024 * MIB,
            max_session_history_events: 1_000_000,
            max_history_page_entries: 10_000,
            max_session_list_entries: 10_000,
            max_sessions_per_vm: 10_000,
            max_prompts_per_session: 100_000,
            max_queued_prompts_per_session: 32,
            max_prompts_per_vm: 1_000_000,
            max_pending_permissions_per_session: 1_000,
            max_pending_permissions_per_vm: 10_000,
            max_permission_outcomes_per_session: 10_000,
            max_permission_outcomes_per_vm: 100_000,
            max_queued_stdin_bytes: 64 * MIB,
            max_queued_stdin_bytes_per_vm: 128 * MIB,
            max_stdout_bytes_per_vm: 128 * MIB,
            stalled_stdin_timeout_ms: 30_000,
            max_read_text_file_bytes: 16 * MIB,
            max_stderr_bytes_per_second: MIB,
        }
    }
}

impl AcpLimits {
    /// Every `limits.acp` setting as `(setting, value)`, for `vm/status`.
    pub fn entries(&self) -> Vec<(&'static str, u64)> {
        let a = self;
        vec![
            ("limits.acp.maxReadLineBytes", a.max_read_line_bytes),
            (
                "limits.acp.stdoutBufferByteLimit",
                a.stdout_buffer_byte_limit,
            ),
            (
                "limits.acp.maxCompletedMessageBytes",
                a.max_completed_message_bytes,
            ),
            ("limits.acp.maxTurnOutputBytes", a.max_turn_output_bytes),
            ("limits.acp.maxPromptBytes", a.max_prompt_bytes),
            ("limits.acp.maxPromptBlocks", a.max_prompt_blocks),
            (
                "limits.acp.maxFallbackContinuationBytes",
                a.max_fallback_continuation_bytes,
            ),
            (
                "limits.acp.maxSessionHistoryBytes",
                a.max_session_history_bytes,
            ),
            (
                "limits.acp.maxSessionHistoryEvents",
                a.max_session_history_events,
            ),
            (
                "limits.acp.maxHistoryPageEntries",
                a.max_history_page_entries,
            ),
            (
                "limits.acp.maxSessionListEntries",
                a.max_session_list_entries,
            ),
            ("limits.acp.maxSessionsPerVm", a.max_sessions_per_vm),
            ("limits.acp.maxPromptsPerSession", a.max_prompts_per_session),
            (
                "limits.acp.maxQueuedPromptsPerSession",
                a.max_queued_prompts_per_session,
            ),
            ("limits.acp.maxPromptsPerVm", a.max_prompts_per_vm),
            (
                "limits.acp.maxPendingPermissionsPerSession",
                a.max_pending_permissions_per_session,
            ),
            (
                "limits.acp.maxPendingPermissionsPerVm",
                a.max_pending_permissions_per_vm,
            ),
            (
                "limits.acp.maxPermissionOutcomesPerSession",
                a.max_permission_outcomes_per_session,
            ),
            (
                "limits.acp.maxPermissionOutcomesPerVm",
                a.max_permission_outcomes_per_vm,
            ),
            ("limits.acp.maxQueuedStdinBytes", a.max_queued_stdin_bytes),
            (
                "limits.acp.maxQueuedStdinBytesPerVm",
                a.max_queued_stdin_bytes_per_vm,
            ),
            ("limits.acp.maxStdoutBytesPerVm", a.max_stdout_bytes_per_vm),
            (
                "limits.acp.stalledStdinTimeoutMs",
                a.stalled_stdin_timeout_ms,
            ),
            (
                "limits.acp.maxReadTextFileBytes",
                a.max_read_text_file_bytes,
            ),
            (
                "limits.acp.maxStderrBytesPerSecond",
                a.max_stderr_bytes_per_second,
            ),
        ]
    }
}

impl Limits {
    /// Every configured limit outside `limits.acp` as `(setting, value)`,
    /// for `vm/status`.
    pub fn other_entries(&self) -> Vec<(&'static str, u64)> {
        let (s, h, f) = (&self.sqlite, &self.host, &self.fs);
        vec![
            ("limits.sqlite.maxResultBytes", s.max_result_bytes),
            (
                "limits.sqlite.maxInFlightRequests",
                u64::from(s.max_in_flight_requests),
            ),
            (
                "limits.sqlite.maxQueuedRequestBytes",
                s.max_queued_request_bytes,
            ),
            (
                "limits.sqlite.maxLeasesPerConnection",
                u64::from(s.max_leases_per_connection),
            ),
            ("limits.sqlite.maxQueuedJobs", u64::from(s.max_queued_jobs)),
            ("limits.host.maxFrameBytes", h.max_frame_bytes),
            ("limits.host.maxConnections", u64::from(h.max_connections)),
            (
                "limits.host.maxQueuedBytesPerConnection",
                h.max_queued_bytes_per_connection,
            ),
            ("limits.host.maxQueuedBytes", h.max_queued_bytes),
            ("limits.host.maxInboundBytes", h.max_inbound_bytes),
            (
                "limits.host.stalledWriteTimeoutMs",
                h.stalled_write_timeout_ms,
            ),
            (
                "limits.host.maxSubscriptionsPerConnection",
                h.max_subscriptions_per_connection,
            ),
            (
                "limits.sqlite.maxSocketFrameBytes",
                u64::from(s.max_socket_frame_bytes),
            ),
            ("limits.fs.maxTotalBytes", f.max_total_bytes),
            ("limits.fs.maxInodes", f.max_inodes),
            ("limits.fs.maxFileBytes", f.max_file_bytes),
        ]
    }
}

/// `limits.fs`: the VFS's bounds and storage granularity.
impl Config {
    /// The data directory: where the database file (or the actor socket)
    /// lives. Sessions' directories default to `sessions/` inside it.
    pub fn data_dir(&self) -> PathBuf {
        self.database
            .path()
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"))
    }

    /// Where each session's adapter directories live: `sessionsDir`, else
    /// `sessions/` beside a database file, else, for an actor socket,
    /// `<socket>.sessions/` beside it. An actor runtime's socket directory
    /// is shared by every actor of its process (Rivet's is), so a plain
    /// `sessions/` there would give two VMs' sessions of the same id one
    /// directory.
    pub fn sessions_dir(&self) -> PathBuf {
        if let Some(dir) = &self.sessions_dir {
            return dir.clone();
        }
        match &self.database {
            DatabaseDescriptor::SqliteFile { .. } => self.data_dir().join("sessions"),
            DatabaseDescriptor::ActorUds { path } => {
                let mut name = path.as_os_str().to_owned();
                name.push(".sessions");
                PathBuf::from(name)
            }
        }
    }

    /// Parses and validates a config document.
    pub fn from_json(text: &str) -> Result<Config, ConfigError> {
        let config: Config = serde_json::from_str(text).map_err(|e| {
            // serde_json reports "unknown field `x`" and friends; keep its words.
            ConfigError::new("config", e.to_string())
        })?;
        config.validate()?;
        Ok(config)
    }

    /// The embedded default: a SQLite file and a socket under `dir`, and one
    /// bundled `echo` agent (the fake agent, a sibling of this binary).
    pub fn embedded_default(dir: &Path, fake_agent: &Path) -> Config {
        let mut agents = BTreeMap::new();
        agents.insert(
            "echo".to_owned(),
            AgentSpec {
                command: fake_agent.display().to_string(),
                args: vec![],
                env: BTreeMap::new(),
                sandbox: SandboxSpec::default(),
            },
        );
        Config {
            database: DatabaseDescriptor::SqliteFile {
                path: dir.join("vm.sqlite"),
            },
            socket: Some(dir.join("sidecar.sock")),
            allowed_uids: None,
            sessions_dir: None,
            agents,
            limits: Limits::default(),
            filesystem: FilesystemConfig::default(),
            http: HttpConfig {
                listen: Some(DEFAULT_HTTP_LISTEN.to_owned()),
                ..HttpConfig::default()
            },
            secrets: SecretsConfig::default(),
            builtin: BuiltinConfig::default(),
            triggers: TriggersConfig::default(),
            mcp: mcp::McpConfig::default(),
            hypermedia: hypermedia::HypermediaConfig::default(),
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_path("database.path", self.database.path())?;
        if let Some(socket) = &self.socket {
            validate_path("socket", socket)?;
        }
        if let Some(dir) = &self.sessions_dir {
            validate_path("sessionsDir", dir)?;
        }
        if self.allowed_uids.as_ref().is_some_and(Vec::is_empty) {
            return Err(ConfigError::new(
                "allowedUids",
                "must name at least one uid (leave it out for the sidecar's own)",
            ));
        }
        for (id, agent) in &self.agents {
            if id == BUILTIN_AGENT {
                return Err(ConfigError::new(
                    format!("agents.{id}"),
                    "the id `builtin` is reserved for the builtin model agent",
                ));
            }
            if id.is_empty() || id.len() > 256 {
                return Err(ConfigError::new(
                    format!("agents.{id}"),
                    "agent ids must be 1..=256 bytes",
                ));
            }
            if agent.command.is_empty() {
                return Err(ConfigError::new(
                    format!("agents.{id}.command"),
                    "must not be empty",
                ));
            }
            // Adapters run in their session's directory, so a relative path
            // would name a different program there than here.
            if agent.command.contains('/') && !agent.command.starts_with('/') {
                return Err(ConfigError::new(
                    format!("agents.{id}.command"),
                    "must be an absolute path, or a bare program name looked up on PATH",
                ));
            }
            let lists = [
                ("readPaths", &agent.sandbox.read_paths),
                ("writePaths", &agent.sandbox.write_paths),
            ];
            for (name, paths) in lists {
                for (i, path) in paths.iter().enumerate() {
                    validate_path(&format!("agents.{id}.sandbox.{name}[{i}]"), path)?;
                }
            }
        }
        if self.triggers.tick_ms < 10 {
            return Err(ConfigError::new("triggers.tickMs", "must be at least 10"));
        }
        let positive: [(&str, u64); 19] = [
            (
                "limits.sqlite.maxResultBytes",
                self.limits.sqlite.max_result_bytes,
            ),
            (
                "limits.sqlite.maxInFlightRequests",
                u64::from(self.limits.sqlite.max_in_flight_requests),
            ),
            (
                "limits.sqlite.maxQueuedRequestBytes",
                self.limits.sqlite.max_queued_request_bytes,
            ),
            (
                "limits.sqlite.maxLeasesPerConnection",
                u64::from(self.limits.sqlite.max_leases_per_connection),
            ),
            (
                "limits.sqlite.maxQueuedJobs",
                u64::from(self.limits.sqlite.max_queued_jobs),
            ),
            (
                "limits.host.maxFrameBytes",
                self.limits.host.max_frame_bytes,
            ),
            (
                "limits.host.maxConnections",
                u64::from(self.limits.host.max_connections),
            ),
            (
                "limits.host.maxQueuedBytesPerConnection",
                self.limits.host.max_queued_bytes_per_connection,
            ),
            (
                "limits.host.maxQueuedBytes",
                self.limits.host.max_queued_bytes,
            ),
            (
                "limits.host.maxInboundBytes",
                self.limits.host.max_inbound_bytes,
            ),
            (
                "limits.host.stalledWriteTimeoutMs",
                self.limits.host.stalled_write_timeout_ms,
            ),
            (
                "limits.host.maxSubscriptionsPerConnection",
                self.limits.host.max_subscriptions_per_connection,
            ),
            (
                "limits.acp.maxQueuedStdinBytes",
                self.limits.acp.max_queued_stdin_bytes,
            ),
            (
                "limits.acp.maxQueuedStdinBytesPerVm",
                self.limits.acp.max_queued_stdin_bytes_per_vm,
            ),
            (
                "limits.acp.maxStdoutBytesPerVm",
                self.limits.acp.max_stdout_bytes_per_vm,
            ),
            (
                "limits.acp.stalledStdinTimeoutMs",
                self.limits.acp.stalled_stdin_timeout_ms,
            ),
            (
                "limits.acp.maxReadTextFileBytes",
                self.limits.acp.max_read_text_file_bytes,
            ),
            (
                "limits.acp.maxStderrBytesPerSecond",
                self.limits.acp.max_stderr_bytes_per_second,
            ),
            (
                "limits.sqlite.maxSocketFrameBytes",
                u64::from(self.limits.sqlite.max_socket_frame_bytes),
            ),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(ConfigError::new(field, "must be greater than 0"));
            }
        }
        self.limits.fs.validate()?;
        self.filesystem.validate()?;
        self.http.validate()?;
        self.limits.control.validate()?;
        self.limits.runs.validate()?;
        self.builtin.validate()?;
        self.mcp.validate()?;
        self.hypermedia.validate()?;
        if let Some(path) = &self.secrets.key_file {
            validate_path("secrets.keyFile", path)?;
        }
        if self.limits.host.max_frame_bytes > u64::from(u32::MAX) {
            return Err(ConfigError::new(
                "limits.host.maxFrameBytes",
                "must fit a u32 frame length",
            ));
        }
        Ok(())
    }
}

pub(crate) fn validate_path(field: &str, path: &Path) -> Result<(), ConfigError> {
    let text = path.as_os_str().as_encoded_bytes();
    if text.is_empty() {
        return Err(ConfigError::new(field, "must not be empty"));
    }
    if text.contains(&0) {
        return Err(ConfigError::new(field, "must not contain NUL"));
    }
    if !path.is_absolute() {
        return Err(ConfigError::new(field, "must be absolute"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
