//! Obligations: what a turn's run still owes when its turn ends without
//! parking. A typed child owes its result (`return_result`, checked
//! against the spawner's schema); a run that wrote its session's plan owes
//! the plan's unfinished steps while none of its children is live. An open
//! obligation gets a continuation prompt from the runtime, up to
//! [`MAX_CONTINUATIONS`]; after that a typed child fails `output_schema`
//! and an unfinished plan ends the run succeeded with its unmet
//! obligations recorded. Either way the session's log says so.
//!
//! The session's route asks [`judge`] before its terminal commit and
//! commits what the verdict says with it, so a continuation (the system
//! message and the run's requeue) is one transaction with the turn's end.

use agentos_schema::DbError;
use serde_json::{json, Value};

use super::store::RunStore;

/// Continuation prompts one run gets before its obligations are recorded
/// as unmet.
pub const MAX_CONTINUATIONS: u64 = 3;

/// What a run's end owes, as the route commits it.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Nothing is owed: the run ends as its turn did.
    Met,
    /// Ask again: `text` is the system's continuation prompt and `input`
    /// the run's next input but for where the prompt lands in the log
    /// (`inputAt`, which the route knows).
    Continue { text: String, input: Value },
    /// A typed child that never delivered its result fails with `error`.
    Fail { error: Value, notice: String },
    /// The plan's steps stay unfinished: the run succeeds with `unmet`
    /// recorded.
    Unmet { unmet: Value, notice: String },
}

/// The open obligations of run `run_id` at the end of a turn that did not
/// park, given its session's plan.
pub async fn judge(
    store: &RunStore,
    run_id: &str,
    plan: Option<&Value>,
) -> Result<Verdict, DbError> {
    let Some(run) = store.get(run_id).await? else {
        return Ok(Verdict::Met);
    };
    let typed = run.input.get("output").is_some_and(Value::is_object);
    let result_owed = typed && run.result.is_none();
    let owned_plan = plan.filter(|p| p["ownerRunId"] == json!(run_id));
    let open_steps: Vec<Value> = owned_plan
        .and_then(|p| p["steps"].as_array())
        .map(|steps| {
            steps
                .iter()
                .filter(|s| matches!(s["status"].as_str(), Some("pending" | "running")))
                .map(|s| json!({"id": s["id"], "label": s["label"], "status": s["status"]}))
                .collect()
        })
        .unwrap_or_default();
    let steps_owed = !open_steps.is_empty() && store.live_children(run_id).await? == 0;
    if !result_owed && !steps_owed {
        return Ok(Verdict::Met);
    }
    let mut unmet = Vec::new();
    let mut owed = Vec::new();
    if result_owed {
        unmet.push(json!({"kind": "result"}));
        owed.push(
            "your result: call return_result with a value that matches the requested output \
             schema"
                .to_owned(),
        );
    }
    if steps_owed {
        let labels: Vec<String> = open_steps
            .iter()
            .map(|s| format!("{:?}", s["label"].as_str().unwrap_or_default()))
            .collect();
        unmet.push(json!({"kind": "plan", "steps": open_steps}));
        owed.push(format!(
            "the unfinished steps of your plan ({}): do them, or mark each done, failed or \
             skipped with plan",
            labels.join(", ")
        ));
    }
    let continuations = run.input["continuations"].as_u64().unwrap_or(0);
    if continuations < MAX_CONTINUATIONS {
        let mut input = run.input.clone();
        let text = format!(
            "[system] This run is not finished. Still owed:\n- {}\nContinue.",
            owed.join("\n- ")
        );
        if let Some(map) = input.as_object_mut() {
            map.remove("retry");
            map.insert("continuations".into(), json!(continuations + 1));
            map.insert("content".into(), json!([{"type": "text", "text": text}]));
        }
        return Ok(Verdict::Continue { text, input });
    }
    let unmet = Value::Array(unmet);
    if result_owed {
        return Ok(Verdict::Fail {
            error: json!({
                "code": "output_schema",
                "message": format!(
                    "the run ended without a result matching its output schema after \
                     {MAX_CONTINUATIONS} continuations"
                ),
                "unmetObligations": unmet,
            }),
            notice: "[system] The run failed: it ended without delivering its typed result.".into(),
        });
    }
    Ok(Verdict::Unmet {
        unmet,
        notice: format!(
            "[system] The run ended with obligations unmet: {}.",
            owed.join("; ")
        ),
    })
}
