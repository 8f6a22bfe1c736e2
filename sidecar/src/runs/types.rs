//! The values of the runs domain: a run row as read back, what a new run is
//! made of, why a run waits, and the closed vocabularies (status, kind,
//! queue, origin) with their stored spellings. Plain data; no SQL here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use agentos_protocol::runs::RunStatus;

use super::RunError;

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
    /// The trigger firing that started it (a firing's own run only).
    pub trigger_firing_id: Option<String>,
}

/// Where a new run sits in its tree: its root, its parent and the tool
/// call that started it, its depth, and whether its parent waits for it.
pub type Place = (String, Option<String>, Option<String>, u32, bool);

/// A turn's input with `inputAt`, where its words start in the log, as
/// the accept that starts it stores it.
pub(crate) fn with_input_at(input: &Value, input_at: u64) -> Value {
    let mut input = input.clone();
    if let Value::Object(members) = &mut input {
        members.insert("inputAt".into(), Value::from(input_at));
    }
    input
}

impl NewRun {
    /// A root run of no account and no agent (the host door's turns): no
    /// feed shows it and no trigger watches it, so its transitions are
    /// published as [`super::RunEvent::Moved`], for its waiters only.
    pub fn quiet(&self) -> bool {
        self.parent.is_none()
            && self.account_id.is_none()
            && self.agent_id.is_none()
            && self.trigger_firing_id.is_none()
    }

    /// Where the run sits in its tree (a root run is its own root).
    pub fn place(&self) -> Place {
        match &self.parent {
            Some(p) => (
                p.root_run_id.clone(),
                Some(p.run_id.clone()),
                p.tool_call_id.clone(),
                p.depth,
                p.awaits,
            ),
            None => (self.run_id.clone(), None, None, 0, false),
        }
    }

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
            trigger_firing_id: None,
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
    /// The trigger firing that started it, while that firing exists.
    pub trigger_firing_id: Option<String>,
}

impl Run {
    /// The row a new run's insert as `running`, leased to `lease` (owner,
    /// expiry) at `now`, writes: what its subscribers hear as it starts,
    /// without reading it back.
    pub fn started(new: &NewRun, input_at: u64, lease: (&str, i64), now: i64) -> Run {
        let (root, parent, tool_call, depth, awaits) = new.place();
        Run {
            run_id: new.run_id.clone(),
            account_id: new.account_id.clone(),
            root_run_id: root,
            parent_run_id: parent,
            parent_tool_call_id: tool_call,
            continued_from_run_id: new.continued_from.clone(),
            depth,
            kind: new.kind,
            agent_id: new.agent_id.clone(),
            session_id: new.session_id.clone(),
            origin: new.origin,
            title: new.title.clone(),
            queue: new.queue,
            status: RunStatus::Running,
            attempt: 1,
            max_attempts: new.max_attempts.max(1),
            not_before_ms: new.not_before_ms,
            lease_owner: Some(lease.0.to_owned()),
            lease_expires_at_ms: Some(lease.1),
            cancel_requested: false,
            idempotency_key: new.idempotency_key.clone(),
            input: with_input_at(&new.input, input_at),
            output: None,
            error: None,
            wait: None,
            usage: None,
            budget: new.budget.clone(),
            plan: None,
            obligations: None,
            source_text: new.source_text.clone(),
            source_cid: new.source_cid.clone(),
            plan_step_id: new.plan_step_id.clone(),
            step_label: new.step_label.clone(),
            child_count: 0,
            parent_awaits: awaits,
            resolved: false,
            result: None,
            journal_seq: 0,
            journal_bytes: 0,
            created_at_ms: now,
            started_at_ms: Some(now),
            finished_at_ms: None,
            updated_at_ms: now,
            trigger_firing_id: new.trigger_firing_id.clone(),
        }
    }
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

/// What a listing request names, before a tree is found from the run that
/// names it. Both doors read it with [`RunScope::named`], authorize what
/// it names (the signed door; the host socket is trusted), then list
/// [`RunScope::tree_of`] the named run, or the session or the agent.
#[derive(Clone, Debug, PartialEq)]
pub enum Named {
    /// A tree, named by any of its runs.
    Tree(String),
    Session(String),
    Agent(String),
}

impl RunScope {
    /// The rule of a listing's scope: exactly one of a run (its whole tree
    /// is listed), a session and an agent.
    pub fn named(
        root_run_id: Option<String>,
        session_id: Option<String>,
        agent_id: Option<String>,
    ) -> Result<Named, RunError> {
        match (root_run_id, session_id, agent_id) {
            (Some(run_id), None, None) => Ok(Named::Tree(run_id)),
            (None, Some(session_id), None) => Ok(Named::Session(session_id)),
            (None, None, Some(agent_id)) => Ok(Named::Agent(agent_id)),
            _ => Err(RunError::InvalidArgument(
                "give exactly one of rootRunId, sessionId and agentId".into(),
            )),
        }
    }

    /// The tree `run` belongs to: a tree may be named by any of its runs.
    pub fn tree_of(run: &Run) -> RunScope {
        RunScope::Root(run.root_run_id.clone())
    }

    /// A listing's status filter, as a request spells it.
    pub fn status(text: Option<&str>) -> Result<Option<RunStatus>, RunError> {
        text.map(|text| {
            RunStatus::parse(text).ok_or_else(|| {
                RunError::InvalidArgument(format!("status {text:?} is not a run status"))
            })
        })
        .transpose()
    }
}

/// Journal entries one page holds at most, and by default.
pub const JOURNAL_PAGE: u64 = 1_000;

/// How a page of a run's journal is cut: the entries after `after` (from
/// the start unless a request says where), at most `limit` of them, which
/// is at most and by default [`JOURNAL_PAGE`]; a limit of 0 is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalPage {
    pub after: u64,
    pub limit: u64,
}

impl JournalPage {
    pub fn new(after_seq: Option<u64>, limit: Option<u64>) -> Result<JournalPage, RunError> {
        let limit = match limit {
            Some(0) => return Err(RunError::InvalidArgument("limit must be at least 1".into())),
            Some(n) => n.min(JOURNAL_PAGE),
            None => JOURNAL_PAGE,
        };
        Ok(JournalPage {
            after: after_seq.unwrap_or(0),
            limit,
        })
    }

    /// Whether `entries` rows fill the page, so more may follow.
    pub fn is_full(&self, entries: usize) -> bool {
        entries as u64 >= self.limit
    }
}

/// The error a run stores: `{code, message, retryable?}` plus details.
pub fn run_error(code: &str, message: &str) -> Value {
    serde_json::json!({"code": code, "message": message})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_names_exactly_one_scope() {
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(
            RunScope::named(some("r"), None, None),
            Ok(Named::Tree("r".into()))
        );
        assert_eq!(
            RunScope::named(None, some("s"), None),
            Ok(Named::Session("s".into()))
        );
        assert_eq!(
            RunScope::named(None, None, some("a")),
            Ok(Named::Agent("a".into()))
        );
        for (root, session, agent) in [
            (None, None, None),
            (some("r"), some("s"), None),
            (None, some("s"), some("a")),
            (some("r"), None, some("a")),
        ] {
            let e = RunScope::named(root, session, agent).unwrap_err();
            assert_eq!(e.code(), "invalid_argument");
        }
        assert_eq!(RunScope::status(None), Ok(None));
        assert_eq!(
            RunScope::status(Some("failed")),
            Ok(Some(RunStatus::Failed))
        );
        assert!(RunScope::status(Some("sleeping")).is_err());
    }

    #[test]
    fn a_journal_page_is_at_most_and_by_default_a_thousand_entries() {
        assert_eq!(
            JournalPage::new(None, None),
            Ok(JournalPage {
                after: 0,
                limit: JOURNAL_PAGE
            })
        );
        assert_eq!(JournalPage::new(Some(7), Some(5_000)).unwrap().limit, 1_000);
        assert_eq!(JournalPage::new(Some(7), Some(3)).unwrap().after, 7);
        assert!(JournalPage::new(None, Some(0)).is_err());
        let page = JournalPage::new(None, Some(3)).unwrap();
        assert!(page.is_full(3) && !page.is_full(2));
    }
}
