//! The session service's answers as domain values.
//!
//! Front doors decode their requests into these and render the answers in
//! their own wire forms (the host door's JSON-RPC, the signed door's
//! DAG-CBOR); nothing here knows either. A session's state is built
//! from its row in one place, `SessionState::of`, whichever call asks.

use agentos_protocol::session::PermissionPolicy;
use std::collections::BTreeMap;

use serde_json::Value;

use super::store::{SessionRow, SessionStatus};

pub use agentos_protocol::session::{CancelStatus, NotPendingReason};

/// What opening a session asks for. A member left `None` takes its default
/// for a new session and is not compared with an existing one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpenSession {
    /// The session's id (`default` when absent).
    pub session_id: Option<String>,
    pub agent: String,
    pub cwd: Option<String>,
    pub additional_directories: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, String>>,
    pub mcp_servers: Option<Vec<Value>>,
    pub permission_policy: Option<PermissionPolicy>,
    pub title: Option<String>,
    pub metadata: Option<Value>,
}

/// Where a session is in its life.
#[derive(Clone, Debug, PartialEq)]
pub enum SessionState {
    Idle,
    Running {
        prompt_id: Option<String>,
        started_at_ms: Option<i64>,
    },
    /// A turn waits for answers to permission requests. `requests` is known
    /// when the session was read alone; list pages leave it out rather than
    /// query per session.
    Waiting {
        prompt_id: Option<String>,
        since_ms: Option<i64>,
        requests: Option<Vec<String>>,
    },
    /// The last turn could not even be settled normally; the stored error
    /// says why. The session stays usable.
    Failed {
        error: Option<Value>,
    },
}

impl SessionState {
    /// The state's name: `idle`, `running`, `waiting` or `failed`.
    pub fn status(&self) -> &'static str {
        match self {
            SessionState::Idle => "idle",
            SessionState::Running { .. } => "running",
            SessionState::Waiting { .. } => "waiting",
            SessionState::Failed { .. } => "failed",
        }
    }

    /// A turn is live (running, or waiting for permission answers).
    pub fn is_live(&self) -> bool {
        matches!(
            self,
            SessionState::Running { .. } | SessionState::Waiting { .. }
        )
    }

    /// The state recorded on `row`; `requests` are its pending permission
    /// request ids when the caller read them.
    pub fn of(row: &SessionRow, requests: Option<Vec<String>>) -> SessionState {
        match row.state {
            SessionStatus::Idle => SessionState::Idle,
            SessionStatus::Running => SessionState::Running {
                prompt_id: row.state_prompt_id.clone(),
                started_at_ms: row.state_started_at_ms,
            },
            SessionStatus::Waiting => SessionState::Waiting {
                prompt_id: row.state_prompt_id.clone(),
                since_ms: row.state_started_at_ms,
                requests,
            },
            SessionStatus::Failed => SessionState::Failed {
                error: row.state_error.clone(),
            },
        }
    }
}

/// One session as the service describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionInfo {
    pub session_id: String,
    pub agent: String,
    pub cwd: String,
    pub additional_directories: Vec<String>,
    pub permission_policy: PermissionPolicy,
    pub state: SessionState,
    pub latest_sequence: u64,
    pub oldest_retained_sequence: u64,
    pub retained_event_count: u64,
    pub retained_event_bytes: u64,
    pub title: Option<String>,
    /// What the agent says the session is doing.
    pub description: Option<String>,
    /// The agent's plan snapshot.
    pub plan: Option<Value>,
    pub metadata: Option<Value>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl SessionInfo {
    pub(crate) fn from_row(row: &SessionRow, state: SessionState) -> SessionInfo {
        SessionInfo {
            session_id: row.session_id.clone(),
            agent: row.agent.clone(),
            cwd: row.cwd.clone(),
            additional_directories: row.additional_directories.clone(),
            permission_policy: row.permission_policy,
            state,
            latest_sequence: row.latest_sequence,
            oldest_retained_sequence: row.oldest_retained_sequence,
            retained_event_count: row.retained_event_count,
            retained_event_bytes: row.retained_event_bytes,
            title: row.title.clone(),
            description: row.description.clone(),
            plan: row.plan.clone(),
            metadata: row.metadata.clone(),
            created_at_ms: row.created_at_ms,
            updated_at_ms: row.updated_at_ms,
        }
    }
}

/// A page of sessions, most recently updated first.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionPage {
    pub sessions: Vec<SessionInfo>,
    /// Present when more sessions follow; opaque to callers.
    pub next_cursor: Option<String>,
}

/// A completed (or cancelled) turn: the agent's stop reason and its whole
/// reply, as stored with the prompt record.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptOutcome {
    pub session_id: String,
    pub prompt_id: String,
    pub stop_reason: String,
    pub message: AgentReply,
}

/// The agent's reply of one turn, its chunks coalesced into content blocks.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentReply {
    pub id: String,
    pub role: String,
    pub content: Vec<Value>,
}

impl PromptOutcome {
    /// The result object stored with the prompt record, read back by
    /// `from_stored` when the same idempotency key is used again.
    pub(crate) fn stored(&self) -> Value {
        serde_json::json!({
            "stopReason": self.stop_reason,
            "message": {
                "id": self.message.id,
                "role": self.message.role,
                "content": self.message.content,
            },
        })
    }

    /// The outcome from the result object stored with a prompt record
    /// (`{stopReason, message: {id, role, content}}`); `None` when the
    /// stored object does not have that shape.
    pub fn from_stored(session_id: &str, prompt_id: &str, stored: &Value) -> Option<PromptOutcome> {
        let message = stored.get("message")?;
        Some(PromptOutcome {
            session_id: session_id.to_owned(),
            prompt_id: prompt_id.to_owned(),
            stop_reason: stored.get("stopReason")?.as_str()?.to_owned(),
            message: AgentReply {
                id: message.get("id")?.as_str()?.to_owned(),
                role: message.get("role")?.as_str()?.to_owned(),
                content: message.get("content")?.as_array()?.clone(),
            },
        })
    }
}

/// The answer to a permission response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PermissionAnswer {
    /// The answer went to the agent.
    Accepted,
    /// Nothing was waiting for it.
    NotPending(NotPendingReason),
}

/// A session's agent config options at a revision.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionConfig {
    pub revision: u64,
    pub options: Vec<Value>,
}

/// One counted resource against its configured limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usage {
    pub used: u64,
    pub limit: u64,
    pub setting: &'static str,
}

/// At or above 80 % of a nonzero limit: what `vm/status` calls near.
fn near(used: u64, limit: u64) -> bool {
    limit > 0 && used.saturating_mul(5) >= limit.saturating_mul(4)
}

impl Usage {
    /// At or above 80 % of the limit.
    pub fn near_limit(&self) -> bool {
        near(self.used, self.limit)
    }
}

/// One configured limit and, where it is counted VM-wide, its current use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitUse {
    pub setting: &'static str,
    pub limit: u64,
    pub used: Option<u64>,
}

impl LimitUse {
    /// At or above 80 % of the limit (never for an uncounted one).
    pub fn near_limit(&self) -> bool {
        self.used.is_some_and(|used| near(used, self.limit))
    }
}

/// VM-wide counts of the session domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmStatus {
    pub sessions: Usage,
    pub prompts: Usage,
    pub pending_permissions: Usage,
    pub permission_outcomes: Usage,
    pub live_adapters: u64,
    pub keep_awake_holders: u64,
    /// Every `limits.acp` setting, with the use of the VM-wide counters.
    pub limits: Vec<LimitUse>,
    pub memory: super::MemorySnapshot,
}

impl VmStatus {
    /// Fills `limits` with every `limits.acp` setting, counted where this
    /// status counts it.
    pub fn with_limits(mut self, acp: &crate::config::AcpLimits) -> VmStatus {
        self.limits = acp
            .entries()
            .into_iter()
            .map(|(setting, limit)| LimitUse {
                setting,
                limit,
                used: self.used(setting),
            })
            .collect();
        self
    }

    /// The counted use of `setting`, if this status counts it.
    pub fn used(&self, setting: &str) -> Option<u64> {
        [
            &self.sessions,
            &self.prompts,
            &self.pending_permissions,
            &self.permission_outcomes,
        ]
        .into_iter()
        .find(|usage| usage.setting == setting)
        .map(|usage| usage.used)
    }
}
