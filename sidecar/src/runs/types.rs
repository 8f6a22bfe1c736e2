//! The values of the runs domain: a run row as read back, what a new run is
//! made of, why a run waits, and the closed vocabularies (status, kind,
//! queue, origin) with their stored spellings. Plain data; no SQL here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use agentos_protocol::runs::RunStatus;

/// What executes a run: a model turn in a session, or a script.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunKind {
    Agent,
    Script,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Agent => "agent",
            RunKind::Script => "script",
        }
    }

    pub fn parse(text: &str) -> Option<RunKind> {
        match text {
            "agent" => Some(RunKind::Agent),
            "script" => Some(RunKind::Script),
            _ => None,
        }
    }
}

/// Claim order: interactive rows before background ones, then by age.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queue {
    Interactive,
    Background,
}

impl Queue {
    pub fn as_str(self) -> &'static str {
        match self {
            Queue::Interactive => "interactive",
            Queue::Background => "background",
        }
    }

    pub fn parse(text: &str) -> Option<Queue> {
        match text {
            "interactive" => Some(Queue::Interactive),
            "background" => Some(Queue::Background),
            _ => None,
        }
    }
}

/// Who started a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    User,
    Trigger,
    Agent,
    Workflow,
    System,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::User => "user",
            Origin::Trigger => "trigger",
            Origin::Agent => "agent",
            Origin::Workflow => "workflow",
            Origin::System => "system",
        }
    }

    pub fn parse(text: &str) -> Option<Origin> {
        [
            Origin::User,
            Origin::Trigger,
            Origin::Agent,
            Origin::Workflow,
            Origin::System,
        ]
        .into_iter()
        .find(|o| o.as_str() == text)
    }
}

/// Why a run waits (its `wait_json`). A waiting run holds no slot and no
/// lease; what wakes it moves it back to `queued`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunWait {
    /// `children`, `timer`, `event` or `budget-pause`.
    pub reason: WaitReason,
    /// When the clock wakes it (a sleep's end, an event wait's timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<i64>,
    /// The delegate calls whose children it waits for.
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaitReason {
    #[serde(rename = "children")]
    Children,
    #[serde(rename = "timer")]
    Timer,
    #[serde(rename = "event")]
    Event,
    #[serde(rename = "budget-pause")]
    BudgetPause,
}

/// One event wait of a waiting run: a signal name (none accepts any
/// signal) and what an activity matcher would look at.
#[derive(Clone, Debug, PartialEq)]
pub struct EventWait {
    pub wait_id: String,
    pub signal: Option<String>,
    pub match_json: Option<Value>,
}

/// The tree position of a child run.
#[derive(Clone, Debug, PartialEq)]
pub struct ParentLink {
    pub run_id: String,
    pub root_run_id: String,
    pub tool_call_id: Option<String>,
    pub depth: u32,
    /// The parent waits for this child's result (a detached child's parent
    /// does not).
    pub awaits: bool,
}

/// What a new run is made of.
#[derive(Clone, Debug, PartialEq)]
pub struct NewRun {
    pub run_id: String,
    pub account_id: Option<String>,
    pub parent: Option<ParentLink>,
    pub continued_from: Option<String>,
    pub kind: RunKind,
    pub agent_id: Option<String>,
    pub session_id: Option<String>,
    pub origin: Origin,
    pub title: Option<String>,
    pub queue: Queue,
    pub max_attempts: u32,
    pub idempotency_key: Option<String>,
    pub input: Value,
    pub source_text: Option<String>,
    pub source_cid: Option<String>,
    pub plan_step_id: Option<String>,
    pub step_label: Option<String>,
    pub budget: Option<Value>,
    pub not_before_ms: i64,
}

impl NewRun {
    /// A root run of `kind` with defaults for everything optional.
    pub fn root(kind: RunKind, origin: Origin, queue: Queue, input: Value) -> NewRun {
        NewRun {
            run_id: uuid::Uuid::new_v4().to_string(),
            account_id: None,
            parent: None,
            continued_from: None,
            kind,
            agent_id: None,
            session_id: None,
            origin,
            title: None,
            queue,
            max_attempts: 1,
            idempotency_key: None,
            input,
            source_text: None,
            source_cid: None,
            plan_step_id: None,
            step_label: None,
            budget: None,
            not_before_ms: 0,
        }
    }
}

/// A run row as read back.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub run_id: String,
    pub account_id: Option<String>,
    pub root_run_id: String,
    pub parent_run_id: Option<String>,
    pub parent_tool_call_id: Option<String>,
    pub continued_from_run_id: Option<String>,
    pub depth: u32,
    pub kind: RunKind,
    pub agent_id: Option<String>,
    pub session_id: Option<String>,
    pub origin: Origin,
    pub title: Option<String>,
    pub queue: Queue,
    pub status: RunStatus,
    pub attempt: u32,
    pub max_attempts: u32,
    pub not_before_ms: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at_ms: Option<i64>,
    pub cancel_requested: bool,
    pub idempotency_key: Option<String>,
    pub input: Value,
    pub output: Option<Value>,
    pub error: Option<Value>,
    pub wait: Option<RunWait>,
    pub usage: Option<Value>,
    pub budget: Option<Value>,
    pub plan: Option<Value>,
    pub obligations: Option<Value>,
    pub source_text: Option<String>,
    pub source_cid: Option<String>,
    pub plan_step_id: Option<String>,
    pub step_label: Option<String>,
    pub child_count: u64,
    pub parent_awaits: bool,
    /// The child's result reached its parent.
    pub resolved: bool,
    /// A typed child's result, as `return_result` delivered it.
    pub result: Option<Value>,
    pub journal_seq: u64,
    pub journal_bytes: u64,
    pub created_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub updated_at_ms: i64,
}

/// How a live run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Finish {
    Succeeded(Value),
    Failed(Value),
    Canceled,
    /// The turn ended waiting for the children it delegated to: the run
    /// waits for those whose results have not reached it (or, when every
    /// one already has, goes straight back to the queue to resume).
    AwaitChildren,
    /// The turn ended with obligations open: the run goes back to the
    /// queue at once with this input (its continuation prompt).
    Continue(Value),
}

/// One journal entry as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct JournalRow {
    pub run_id: String,
    pub seq: u64,
    pub entry: Value,
    pub created_at_ms: i64,
}

/// Which runs a listing names: exactly one of a tree, a session or an
/// agent.
#[derive(Clone, Debug, PartialEq)]
pub enum RunScope {
    Root(String),
    Session(String),
    Agent(String),
}

/// The error a run stores: `{code, message, retryable?}` plus details.
pub fn run_error(code: &str, message: &str) -> Value {
    serde_json::json!({"code": code, "message": message})
}
