//! What both doors show of a run, read from the domain row once. The host
//! protocol's `RunInfo` and the Seed API's are two public wire shapes that
//! differ (the host's times are RFC 3339 text and it shows the queue, the
//! attempts, the input and output and the whole stored error; the Seed
//! record calls a script a `workflow`, shows a failed run's error as
//! `{code, message}`, and carries the plan step and the source), so each
//! door keeps its renderer; what they have in common, which fields a run
//! shows and how its wait reads, is [`fields`], which both renderers build
//! on.

use serde_json::Value;

use crate::runs::{Run, RunKind, RunWait, WaitReason};

/// The fields both wire forms of a run carry, with its times in the form
/// `T` the door writes.
#[derive(Clone, Debug, PartialEq)]
pub struct RunFields<T> {
    pub id: String,
    pub account: Option<String>,
    pub root_run_id: String,
    pub parent_run_id: Option<String>,
    pub parent_tool_call_id: Option<String>,
    pub continued_from_run_id: Option<String>,
    pub depth: u32,
    /// Each door spells it in its own vocabulary.
    pub kind: RunKind,
    pub agent_id: Option<String>,
    pub session_id: Option<String>,
    /// `user`, `trigger`, `agent`, `workflow` or `system`.
    pub origin: String,
    pub title: Option<String>,
    pub status: String,
    pub wait: Option<WaitFields<T>>,
    pub plan: Option<Value>,
    pub usage: Option<Value>,
    pub child_run_count: u64,
    pub created_at: T,
    pub started_at: Option<T>,
    pub finished_at: Option<T>,
    pub updated_at: T,
}

/// Why a waiting run waits, as both doors show it.
#[derive(Clone, Debug, PartialEq)]
pub struct WaitFields<T> {
    /// `children`, `timer`, `event` or `budget-pause`.
    pub reason: String,
    pub wake_at: Option<T>,
    /// For `children`: how many delegate calls it still waits for.
    pub pending_children: Option<u64>,
    pub tool_call_ids: Vec<String>,
    pub wait_id: Option<String>,
    pub label: Option<String>,
    /// The signal that answers it by hand, when one can.
    pub answer_with: Option<String>,
}

/// The fields of `run` both doors show, each time written with `time`.
pub fn fields<T>(run: &Run, time: impl Fn(i64) -> T) -> RunFields<T> {
    RunFields {
        id: run.run_id.clone(),
        account: run.account_id.clone(),
        root_run_id: run.root_run_id.clone(),
        parent_run_id: run.parent_run_id.clone(),
        parent_tool_call_id: run.parent_tool_call_id.clone(),
        continued_from_run_id: run.continued_from_run_id.clone(),
        depth: run.depth,
        kind: run.kind,
        agent_id: run.agent_id.clone(),
        session_id: run.session_id.clone(),
        origin: run.origin.as_str().to_owned(),
        title: run.title.clone(),
        status: run.status.as_str().to_owned(),
        wait: run.wait.as_ref().map(|w| wait(w, &time)),
        plan: run.plan.clone(),
        usage: run.usage.clone(),
        child_run_count: run.child_count,
        created_at: time(run.created_at_ms),
        started_at: run.started_at_ms.map(&time),
        finished_at: run.finished_at_ms.map(&time),
        updated_at: time(run.updated_at_ms),
    }
}

fn wait<T>(wait: &RunWait, time: impl Fn(i64) -> T) -> WaitFields<T> {
    let children = wait.reason == WaitReason::Children;
    WaitFields {
        reason: match wait.reason {
            WaitReason::Children => "children",
            WaitReason::Timer => "timer",
            WaitReason::Event => "event",
            WaitReason::BudgetPause => "budget-pause",
        }
        .to_owned(),
        wake_at: wait.wake_at.map(time),
        pending_children: children.then_some(wait.tool_call_ids.len() as u64),
        tool_call_ids: wait.tool_call_ids.clone(),
        wait_id: wait.wait_id.clone(),
        label: wait.label.clone(),
        answer_with: wait.answer_with.clone(),
    }
}

/// Runs that exercise every field both renderers read.
#[cfg(test)]
pub(crate) fn samples() -> Vec<Run> {
    use crate::runs::{Origin, Queue, RunStatus};
    use serde_json::json;
    let full = Run {
        run_id: "r2".into(),
        account_id: Some("z6Mk".into()),
        root_run_id: "r1".into(),
        parent_run_id: Some("r1".into()),
        parent_tool_call_id: Some("t1".into()),
        continued_from_run_id: Some("r0".into()),
        depth: 1,
        kind: RunKind::Agent,
        agent_id: Some("a1".into()),
        session_id: Some("s1".into()),
        origin: Origin::Agent,
        title: Some("child".into()),
        queue: Queue::Background,
        status: RunStatus::Waiting,
        attempt: 2,
        max_attempts: 3,
        not_before_ms: 5,
        lease_owner: Some("me".into()),
        lease_expires_at_ms: Some(9),
        cancel_requested: false,
        idempotency_key: Some("k".into()),
        input: json!({"words": "go"}),
        output: Some(json!({"text": "done"})),
        error: Some(json!({"code": "boom", "message": "it broke", "retryable": true})),
        wait: Some(RunWait {
            reason: WaitReason::Children,
            wake_at: Some(1_700_000_123_456),
            tool_call_ids: vec!["t2".into(), "t3".into()],
            wait_id: Some("w1".into()),
            label: Some("children".into()),
            answer_with: Some("go".into()),
        }),
        usage: Some(json!({"input": 10, "output": 2})),
        budget: Some(json!({"maxWallMs": 1000})),
        plan: Some(json!({"steps": [{"id": "p1", "status": "pending"}]})),
        obligations: Some(json!({"plan": ["p1"]})),
        source_text: Some("export default 1".into()),
        source_cid: Some("bafy".into()),
        plan_step_id: Some("p1".into()),
        step_label: Some("step one".into()),
        child_count: 2,
        parent_awaits: true,
        resolved: false,
        result: Some(json!(1)),
        journal_seq: 4,
        journal_bytes: 100,
        created_at_ms: 1_700_000_000_000,
        started_at_ms: Some(1_700_000_000_500),
        finished_at_ms: Some(1_700_000_001_000),
        updated_at_ms: 1_700_000_002_000,
        trigger_firing_id: None,
    };
    let bare = Run {
        run_id: "r3".into(),
        account_id: None,
        root_run_id: "r3".into(),
        parent_run_id: None,
        parent_tool_call_id: None,
        continued_from_run_id: None,
        depth: 0,
        kind: RunKind::Script,
        agent_id: None,
        session_id: None,
        origin: Origin::System,
        title: None,
        queue: Queue::Interactive,
        status: RunStatus::Queued,
        attempt: 0,
        max_attempts: 1,
        not_before_ms: 0,
        lease_owner: None,
        lease_expires_at_ms: None,
        cancel_requested: false,
        idempotency_key: None,
        input: serde_json::Value::Null,
        output: None,
        error: None,
        wait: None,
        usage: None,
        budget: None,
        plan: None,
        obligations: None,
        source_text: None,
        source_cid: None,
        plan_step_id: None,
        step_label: None,
        child_count: 0,
        parent_awaits: false,
        resolved: false,
        result: None,
        journal_seq: 0,
        journal_bytes: 0,
        created_at_ms: 0,
        started_at_ms: None,
        finished_at_ms: None,
        updated_at_ms: 1,
        trigger_firing_id: None,
    };
    let mut failed = full.clone();
    failed.status = RunStatus::Failed;
    failed.kind = RunKind::Script;
    let mut runs = vec![full, bare, failed];
    for reason in [
        WaitReason::Timer,
        WaitReason::Event,
        WaitReason::BudgetPause,
    ] {
        let mut run = runs[0].clone();
        if let Some(wait) = &mut run.wait {
            wait.reason = reason;
            wait.wake_at = None;
        }
        runs.push(run);
    }
    runs
}
