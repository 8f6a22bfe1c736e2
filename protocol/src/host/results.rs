//! What each host method answers, as it travels: the session service's
//! domain values are mapped into these by the host door, and the operator
//! client reads them back with the same types.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::session::{CancelStatus, NotPendingReason, PermissionPolicy};

/// `sessions/open`, `sessions/get` (under `session`), and each entry of
/// `sessions/list`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub session_id: String,
    pub agent: String,
    pub cwd: String,
    pub additional_directories: Vec<String>,
    pub permission_policy: PermissionPolicy,
    pub state: SessionState,
    pub latest_sequence: u64,
    pub oldest_retained_sequence: u64,
    pub retained_events: u64,
    pub retained_bytes: u64,
    pub title: Option<String>,
    pub metadata: Option<Value>,
    /// RFC 3339 with milliseconds.
    pub created_at: String,
    pub updated_at: String,
}

/// A session's state. `requests` (the pending permission request ids) is
/// present on a single session and omitted in list pages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SessionState {
    Idle,
    #[serde(rename_all = "camelCase")]
    Running {
        prompt_id: Option<String>,
        started_at: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Waiting {
        prompt_id: Option<String>,
        waiting_since: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requests: Option<Vec<String>>,
    },
    Failed {
        error: Option<Value>,
    },
}

/// `sessions/get`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GetSessionResult {
    pub session: SessionInfo,
}

/// `sessions/list`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionPage {
    pub sessions: Vec<SessionInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `sessions/prompt`: the turn's stop reason and the agent's whole message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptResult {
    pub stop_reason: String,
    pub message: AgentMessage,
    pub session_id: String,
    pub prompt_id: String,
}

/// The agent's reply of one turn, its chunks coalesced into content blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentMessage {
    pub id: String,
    pub role: String,
    pub content: Vec<Value>,
}

/// `sessions/cancel`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelResult {
    pub status: CancelStatus,
}

/// `sessions/respondPermission`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RespondPermissionResult {
    Accepted,
    NotPending { reason: NotPendingReason },
}

/// `sessions/history`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryResult {
    /// Public events, each already rendered (see `StoredEvent::public_json`).
    pub events: Vec<Box<serde_json::value::RawValue>>,
    pub has_more_before: bool,
    pub has_more_after: bool,
}

/// `sessions/getConfig` and `sessions/setConfigOption`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionConfig {
    pub revision: u64,
    /// The agent's config options, as it reported them.
    pub options: Vec<Value>,
}

/// One counted resource against its configured limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub used: u64,
    pub limit: u64,
    pub setting: String,
    pub near_limit: bool,
}

/// `vm/status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmStatus {
    pub sessions: Usage,
    pub prompts: Usage,
    pub pending_permissions: Usage,
    pub permission_outcomes: Usage,
    pub live_adapters: u64,
    pub keep_awake_holders: u64,
    pub database: DatabaseInfo,
    pub uptime_ms: u64,
    /// Whether adapters run confined.
    pub confinement: ConfinementInfo,
    /// Every configured limit, with its current use where one is counted
    /// VM-wide.
    #[serde(default)]
    pub limits: Vec<LimitStatus>,
    /// The bounded queues towards peers, and what they dropped.
    #[serde(default)]
    pub memory: MemoryStatus,
    /// Whether provider secrets can be sealed and opened.
    #[serde(default)]
    pub secrets: SecretsStatus,
}

/// The secrets vault in `vm/status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretsStatus {
    /// True when the VM started without a secrets key: setting a secret or
    /// opening a provider key answers `vault_locked`.
    pub locked: bool,
    /// The setting that names the key (`secrets.keyFile`).
    pub setting: String,
}

/// How the VM's adapter processes are confined.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfinementInfo {
    /// True when the kernel offers the mechanism and adapters enter it.
    pub active: bool,
    /// `"landlock"`, or `"none"` when the kernel offers nothing.
    pub mechanism: String,
    /// The Landlock ABI version the kernel offers (0 when none).
    pub abi: u32,
    /// Agents whose registry entry turned confinement off.
    pub unconfined_agents: Vec<String>,
}

/// One configured limit in `vm/status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitStatus {
    pub setting: String,
    pub limit: u64,
    /// Absent for a bound that is per item (one line, one turn, one
    /// session) rather than counted VM-wide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<u64>,
    #[serde(default)]
    pub near_limit: bool,
}

/// `vm/status.memory`: bytes queued for host clients (summed over the VM),
/// host notices dropped because a connection was over
/// `limits.host.maxQueuedBytesPerConnection`, connections closed after
/// `limits.host.stalledWriteTimeoutMs`, and adapter stderr bytes dropped over
/// `limits.acp.maxStderrBytesPerSecond`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStatus {
    pub host_queued_bytes: u64,
    pub host_notices_dropped: u64,
    pub host_connections_closed_stalled: u64,
    pub agent_stderr_dropped_bytes: u64,
}

/// The database kind a VM runs on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DatabaseInfo {
    #[serde(rename = "type")]
    pub kind: String,
}

/// `agents/list`: the VM's agent registry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentsList {
    pub agents: Vec<AgentEntry>,
}

/// One registry entry. The environment is listed by name only: its values
/// are the agent's secrets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentEntry {
    pub id: String,
    pub command: String,
    pub args: Vec<String>,
    pub env_names: Vec<String>,
}

/// The answer of `http/request`: what the listener would have sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpResponseResult {
    pub status: u16,
    pub headers: std::collections::BTreeMap<String, String>,
    pub body_base64: String,
}

/// One signer of an account, as `signers/*` answer it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignerEntry {
    pub account: String,
    pub signer: String,
    /// `AGENT` or `WRITER`; absent for a key revoked before it was known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
    pub created_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at_ms: Option<i64>,
}

/// `signers/list`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignersList {
    pub signers: Vec<SignerEntry>,
}

/// A run as the host socket shows it: the fields of the signed API's
/// `RunInfo`, with the host protocol's RFC 3339 timestamps, and the row's
/// `queue`, attempts, input, output and whole stored error besides (the
/// socket is trusted).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunInfo {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    pub root_run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_from_run_id: Option<String>,
    pub depth: u32,
    /// `agent` or `script`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// `user`, `trigger`, `agent`, `workflow` or `system`.
    pub origin: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `interactive` or `background`.
    pub queue: String,
    /// `queued`, `claimed`, `running`, `waiting`, `succeeded`, `failed` or
    /// `canceled`.
    pub status: String,
    pub attempt: u32,
    pub max_attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<RunWaitInfo>,
    /// The stored error `{code, message, …}` of the latest failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Value>,
    pub child_run_count: u64,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    pub updated_at: String,
}

/// Why a waiting run waits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunWaitInfo {
    /// `children`, `timer`, `event` or `budget-pause`.
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<String>,
    /// For `children`: how many delegate calls it still waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_children: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_call_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The signal that answers it by hand, when one can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_with: Option<String>,
}

/// `runs/get`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GetRunResult {
    pub run: RunInfo,
}

/// `runs/list`: a tree oldest first, a session's or an agent's runs newest
/// first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListRunsResult {
    pub runs: Vec<RunInfo>,
}

/// `runs/cancel`: whether anything was newly canceled (false for a run
/// that had already ended, or the second time).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelRunResult {
    pub run_id: String,
    pub canceled: bool,
}

/// `runs/signal`: whether the run was waiting on that signal and took it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalRunResult {
    pub run_id: String,
    pub delivered: bool,
}

/// One entry of a run's journal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunJournalEntry {
    pub run_id: String,
    pub seq: u64,
    pub entry: Value,
    pub created_at: String,
}

/// `runs/journal`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunJournalResult {
    pub run_id: String,
    pub entries: Vec<RunJournalEntry>,
}

/// `initialize`: the protocol spoken, the sidecar, its database and its
/// limits (the config's `limits`, as configured). Members in the order the
/// object has always had on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult<L> {
    pub database: DatabaseInfo,
    pub limits: L,
    pub protocol_version: u64,
    pub sidecar: SidecarInfo,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SidecarInfo {
    pub name: String,
    pub version: String,
}

/// `sessions/delete`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeleteSessionResult {
    pub deleted: bool,
}

/// `sessions/unload`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnloadSessionResult {
    pub unloaded: bool,
}

/// `sessions/subscribe`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscribeResult {
    pub subscription_id: String,
}

/// `sessions/unsubscribe`: whether the subscription was live.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnsubscribeResult {
    pub unsubscribed: bool,
}

/// `sessions/capabilities`: the agent's capabilities from its last
/// `initialize` (null before one).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapabilitiesResult {
    pub capabilities: Option<Value>,
}

/// `sessions/agent_info`: the agent's `agentInfo` from its last
/// `initialize` (null before one).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInfoResult {
    pub agent_info: Option<Value>,
}

/// `triggers/list`: `AgentTriggerInfo` objects, the latest edited first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTriggersResult {
    pub triggers: Vec<Value>,
}

/// `triggers/get`: the trigger and the ids of the sessions it started that
/// still exist, the newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetTriggerResult {
    pub trigger: Value,
    pub session_ids: Vec<String>,
}

/// `triggers/create` and `triggers/update`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerResult {
    pub trigger: Value,
}

/// `triggers/delete`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteTriggerResult {
    pub trigger_id: String,
}

/// `triggers/tick`: what one look at the schedules did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TickTriggersResult {
    /// The instant the look was made as of.
    pub at: i64,
    pub checked: u64,
    pub matched: u64,
    pub fired: u64,
    pub skipped: u64,
    pub errors: u64,
}
