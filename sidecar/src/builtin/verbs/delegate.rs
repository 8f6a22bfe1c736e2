//! The run verbs: `delegate` starts a child of the turn's run (a model child
//! in its own session, or a script child); an awaited child parks the turn
//! (its result becomes this call's result in the log when it ends, and the
//! turn resumes), a detached one answers at once. `plan` replaces the
//! session's plan, kept on the session and on the run that wrote it and
//! shown to clients, with no log event. `return_result` is a typed child's
//! result, checked against its spawner's schema. Authored tools (lambdas)
//! run as script runs of the turn's run, awaited by the call.

use agentos_protocol::agent_ext::VerbResult;
use serde_json::{json, Value};

use super::{failure, success, VerbScope, Verbs};
use crate::runs::{NewRun, Origin, ParentLink, Queue, RunKind, RunStatus};
use crate::work::delegate::settle_plan;
use crate::work::ChildSpec;
use agentos_base::clock::unix_ms;

const MAX_STEPS: usize = 50;
const MAX_LABEL_BYTES: usize = 512;
const STEP_STATUSES: [&str; 5] = ["pending", "running", "done", "failed", "skipped"];

pub(super) async fn delegate(verbs: &Verbs, scope: &VerbScope, input: &Value) -> VerbResult {
    let Some(delegation) = verbs.delegation.get() else {
        return failure("runs_unavailable", "this sidecar starts no children");
    };
    let Some(run_id) = &scope.run_id else {
        return failure(
            "invalid_argument",
            "delegate works inside a run, which this call is not part of",
        );
    };
    let spec = match ChildSpec::parse(input) {
        Ok(spec) => spec,
        Err(refused) => return failure(refused.code, refused.message),
    };
    let parent = match delegation.runs().get(run_id).await {
        Ok(parent) => parent,
        Err(e) => return failure(e.code(), e),
    };
    let call_id = scope
        .tool_call_id
        .clone()
        .unwrap_or_else(|| format!("call_{}", uuid::Uuid::new_v4().simple()));
    match delegation.start(&parent, &call_id, spec).await {
        Err(refused) => failure(refused.code, refused.message),
        Ok(started) if started.awaits => VerbResult {
            output: json!({
                "status": "running",
                "runId": started.run_id,
                "sessionId": started.session_id,
            }),
            is_error: false,
            ends_turn: false,
            parked: true,
            images: Vec::new(),
        },
        Ok(started) => success(json!({
            "status": "detached",
            "runId": started.run_id,
            "sessionId": started.session_id,
        })),
    }
}

/// The output schema a typed child was asked for (its run's
/// `input.output`), when the scope's run is one. Only a delegated child's
/// session (its link names the run it works for) can be; any other's run
/// is not read.
pub(super) async fn output_schema(verbs: &Verbs, scope: &VerbScope) -> Option<Value> {
    let run_id = scope.run_id.as_ref()?;
    let link = verbs.control.session_agent(&scope.session_id).await;
    if matches!(link, Ok(Some(ref link)) if link.run_id.is_none()) {
        return None;
    }
    let run = verbs.delegation.get()?.runs().get(run_id).await.ok()?;
    run.input.get("output").filter(|s| s.is_object()).cloned()
}

/// `return_result`: a typed child delivers its result, checked against the
/// schema its spawner gave; the errors go back to the child, a valid
/// result is kept on its run (a later one replaces it) and ends the turn.
pub(super) async fn return_result(verbs: &Verbs, scope: &VerbScope, input: &Value) -> VerbResult {
    let (Some(run_id), Some(delegation)) = (&scope.run_id, verbs.delegation.get()) else {
        return failure(
            "invalid_argument",
            "return_result is offered only to a child asked for a typed result",
        );
    };
    let Some(schema) = output_schema(verbs, scope).await else {
        return failure(
            "invalid_argument",
            "return_result is offered only to a child asked for a typed result",
        );
    };
    let errors = crate::space::schema::validate(&schema, input);
    if !errors.is_empty() {
        return failure(
            "output_schema",
            format!(
                "the result does not match the requested output schema: {}",
                errors.join("; ")
            ),
        );
    }
    match delegation
        .runs()
        .store()
        .set_result(run_id, input, unix_ms())
        .await
    {
        Ok(true) => VerbResult {
            output: json!({"accepted": true}),
            is_error: false,
            ends_turn: true,
            parked: false,
            images: Vec::new(),
        },
        Ok(false) => failure("run_not_live", "this run is no longer live"),
        Err(e) => failure("storage", e),
    }
}

/// Reads `{title?, steps: [{id?, label, status?}]}` into the stored plan,
/// keeping a step the runtime settled as such while it stays done.
fn read_plan(input: &Value, before: Option<&Value>, owner: Option<&str>) -> Result<Value, String> {
    let steps = input["steps"]
        .as_array()
        .ok_or("`steps` must be an array of {id?, label, status?}")?;
    if steps.len() > MAX_STEPS {
        return Err(format!("a plan holds at most {MAX_STEPS} steps"));
    }
    let mut out = Vec::with_capacity(steps.len());
    for (i, step) in steps.iter().enumerate() {
        let label = step["label"]
            .as_str()
            .filter(|l| !l.is_empty() && l.len() <= MAX_LABEL_BYTES)
            .ok_or(format!(
                "steps[{i}].label must be 1..={MAX_LABEL_BYTES} bytes"
            ))?;
        let id = match &step["id"] {
            Value::String(id) if !id.is_empty() && id.len() <= 64 => id.clone(),
            Value::Null => format!("step-{}", i + 1),
            _ => return Err(format!("steps[{i}].id must be 1..=64 bytes")),
        };
        let status = match &step["status"] {
            Value::Null => "pending",
            Value::String(s) if STEP_STATUSES.contains(&s.as_str()) => s.as_str(),
            _ => {
                return Err(format!(
                    "steps[{i}].status must be one of {STEP_STATUSES:?}"
                ))
            }
        };
        let mut entry = json!({"id": id, "label": label, "status": status});
        let runtime_done = before
            .and_then(|b| b["steps"].as_array())
            .and_then(|prior| prior.iter().find(|p| p["id"] == json!(id)))
            .is_some_and(|p| p["resolvedBy"] == "runtime");
        if runtime_done && status == "done" {
            entry["resolvedBy"] = json!("runtime");
        }
        out.push(entry);
    }
    let mut plan = json!({"steps": out});
    if let Some(title) = input["title"].as_str() {
        plan["title"] = json!(title);
    }
    if let Some(owner) = owner {
        plan["ownerRunId"] = json!(owner);
    }
    settle_plan(&mut plan, unix_ms());
    Ok(plan)
}

pub(super) async fn plan(verbs: &Verbs, scope: &VerbScope, input: &Value) -> VerbResult {
    let before = match verbs.store.plan(&scope.session_id).await {
        Ok(before) => before,
        Err(e) => return failure("storage", e),
    };
    let plan = match read_plan(input, before.as_ref(), scope.run_id.as_deref()) {
        Ok(plan) => plan,
        Err(message) => return failure("invalid_argument", message),
    };
    if let Err(e) = verbs.store.set_plan(&scope.session_id, &plan).await {
        return failure("storage", e);
    }
    if let (Some(run_id), Some(delegation)) = (&scope.run_id, verbs.delegation.get()) {
        if let Err(e) = delegation
            .runs()
            .store()
            .set_plan(run_id, &plan, unix_ms())
            .await
        {
            return failure("storage", e);
        }
    }
    success(plan)
}

/// Runs an authored tool's source as a script run of the scope's run and
/// waits for it; its return value is the call's result.
pub(super) async fn run_lambda(
    verbs: &Verbs,
    scope: &VerbScope,
    name: &str,
    source: Option<&str>,
    runtime: Option<&str>,
    input: Value,
) -> VerbResult {
    if runtime == Some("python") {
        return failure(
            "runtime_unavailable",
            format!(
                "{name} is a python tool; this sidecar runs JavaScript tools in its script engine"
            ),
        );
    }
    let Some(source) = source else {
        return failure("invalid_argument", format!("{name} has no source"));
    };
    let Some(delegation) = verbs.delegation.get() else {
        return failure("runtime_unavailable", "this sidecar runs no scripts");
    };
    let runs = delegation.runs();
    let mut run = NewRun::root(RunKind::Script, Origin::Agent, Queue::Interactive, input);
    if let Some(parent_id) = &scope.run_id {
        if let Ok(parent) = runs.get(parent_id).await {
            run.parent = Some(ParentLink {
                run_id: parent.run_id.clone(),
                root_run_id: parent.root_run_id.clone(),
                tool_call_id: scope.tool_call_id.clone(),
                depth: parent.depth + 1,
                // The call waits for it itself.
                awaits: false,
            });
        }
    }
    run.account_id = Some(scope.account_id.clone());
    run.agent_id = Some(scope.agent_id.clone());
    run.title = Some(format!("tool {name}"));
    run.source_text = Some(source.to_owned());
    // No wall budget: the call that waits for it is what bounds it, and a
    // pause would hold the turn with nobody to resume it.
    run.budget = Some(json!({}));
    let run_id = run.run_id.clone();
    if let Err(e) = runs.submit(&run).await {
        return failure(e.code(), e);
    }
    match runs.wait_for(&run_id, |r| r.status.is_terminal()).await {
        Ok(done) if done.status == RunStatus::Succeeded => {
            success(done.output.unwrap_or(Value::Null))
        }
        Ok(done) if done.status == RunStatus::Canceled => {
            failure("canceled", "the tool's run was canceled")
        }
        Ok(done) => {
            let error = done.error.unwrap_or(Value::Null);
            failure(
                error["code"].as_str().unwrap_or("run_failed"),
                error["message"].as_str().unwrap_or("the tool failed"),
            )
        }
        Err(e) => failure(e.code(), e),
    }
}
