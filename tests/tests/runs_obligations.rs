//! What a run owes, end to end through the real binary, the builtin agent
//! and a scripted provider: a typed child is offered `return_result` with
//! its spawner's schema, a result that does not match goes back to it with
//! the reasons, a valid one is its parent's delegate result; a turn that
//! ends owing something gets the runtime's continuation prompts (at most
//! three), after which a typed child fails `output_schema` and an unfinished
//! plan is recorded as unmet; a script past its wall budget pauses until a
//! signal resumes it without the budget; and the runs table keeps at most
//! `limits.runs.maxRuns` rows, dropping the oldest finished trees.

#[path = "common/builtin.rs"]
mod builtin;
mod common;

use agentos_tests::provider_server::Flavor;
use builtin::{
    journal, kinds, ok, run, runs_of, text, tool_calls, until_status, world, world_with, Sent,
    World,
};
use common::eventually;
use serde_json::{json, Value};

const CONTINUATION: &str = "[system] This run is not finished.";

fn schema() -> Value {
    json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
}

/// A world whose sidecar runs with `limits` merged into its config.
async fn limited(limits: Value) -> World {
    world_with(Flavor::OpenAi, common::Backend::SqliteFile, limits).await
}

/// The session's latest run.
async fn turn_run(w: &World, session: &str) -> String {
    let runs = runs_of(w, json!({"sessionId": session})).await;
    let last = runs.last().expect("the session has a run");
    last["id"].as_str().expect("id").to_owned()
}

fn result_of<'a>(events: &'a [Value], call_id: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == "tool_result" && e["toolCallId"] == call_id)
        .unwrap_or_else(|| panic!("no result for {call_id} in {events:?}"))
}

/// The runtime's messages in a session's log.
fn system_messages(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "message" && e["actor"] == "system")
        .map(|e| e["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A new session whose turn's first step delegates "Measure it." to a child
/// asked for a typed result (call `d1`).
async fn typed_delegation(w: &World) -> String {
    let session = w.session().await;
    w.provider.push(tool_calls(&[(
        "d1",
        "delegate",
        json!({"brief": "Measure it.", "output": schema()}),
    )]));
    session
}

/// The only child of run `parent`.
async fn only_child(w: &World, parent: &str) -> Value {
    let tree = runs_of(w, json!({"rootRunId": parent})).await;
    assert_eq!(tree.len(), 2, "{tree:?}");
    tree[1].clone()
}

#[tokio::test]
async fn a_typed_child_is_offered_return_result_and_its_checked_result_answers_the_parent() {
    let w = world(Flavor::OpenAi).await;
    let session = typed_delegation(&w).await;
    // The child first answers in words only, then, asked again, sends a
    // result that does not match, then one that does.
    w.provider.push(text("It is three."));
    w.provider.push(tool_calls(&[(
        "r1",
        "return_result",
        json!({"n": "three"}),
    )]));
    w.provider
        .push(tool_calls(&[("r2", "return_result", json!({"n": 3}))]));
    w.provider.push(text("The child measured 3."));
    ok(&w.message(&session, "measure it").await);
    let parent = turn_run(&w, &session).await;
    until_status(&w, &parent, "succeeded").await;
    let child = only_child(&w, &parent).await;
    assert_eq!(child["status"], "succeeded", "{child}");
    assert!(child.get("unmetObligations").is_none(), "{child}");

    // The child was offered return_result with the schema as its
    // parameters; the parent was not.
    let requests = w.provider.requests();
    assert_eq!(requests.len(), 5);
    let offered = |body: &Value| Sent::new(Flavor::OpenAi, body).tools();
    assert!(!offered(&requests[0].body).contains(&"return_result".to_owned()));
    let child_tools = &requests[1].body["tools"];
    let tool = child_tools
        .as_array()
        .and_then(|tools| {
            tools
                .iter()
                .find(|t| t["function"]["name"] == "return_result")
        })
        .unwrap_or_else(|| panic!("return_result is offered: {child_tools}"));
    assert_eq!(tool["function"]["parameters"], schema());
    // The continuation prompt came as the runtime's message.
    let continued = Sent::new(Flavor::OpenAi, &requests[2].body).user_texts();
    assert!(
        continued
            .last()
            .is_some_and(|t| t.starts_with(CONTINUATION)),
        "{continued:?}"
    );
    assert!(continued
        .last()
        .is_some_and(|t| t.contains("return_result")));

    // The child's log: the brief, its words, the runtime's prompt, the
    // refused result with its reason, and the accepted one.
    let child_session = child["sessionId"].as_str().expect("session");
    let events = w.events(child_session).await;
    assert_eq!(
        kinds(&events),
        [
            "user:Measure it.",
            "assistant:It is three.",
            &format!(
                "user:{}",
                system_messages(&events).first().expect("a continuation")
            ),
            "tool_call:return_result",
            "tool_result:return_result",
            "tool_call:return_result",
            "tool_result:return_result",
        ]
    );
    let refused = result_of(&events, "r1");
    let reason = refused["error"]
        .as_str()
        .or(refused["output"].as_str())
        .unwrap_or_default();
    assert!(reason.starts_with("output_schema:"), "{refused}");
    assert!(
        reason.contains("/n"),
        "the reason names the field: {refused}"
    );

    // The parent's delegate call answers with the typed result itself.
    let parent_events = w.events(&session).await;
    let delegated = &result_of(&parent_events, "d1")["output"];
    assert_eq!(delegated["status"], "succeeded");
    assert_eq!(delegated["output"], json!({"n": 3}));
}

#[tokio::test]
async fn a_typed_child_that_never_returns_fails_output_schema_after_three_continuations() {
    let w = world(Flavor::OpenAi).await;
    let session = typed_delegation(&w).await;
    for n in 0..4 {
        w.provider.push(text(&format!("words only, {n}")));
    }
    w.provider.push(text("The child failed."));
    ok(&w.message(&session, "measure it").await);
    let parent = turn_run(&w, &session).await;
    until_status(&w, &parent, "succeeded").await;
    let child = only_child(&w, &parent).await;
    assert_eq!(child["status"], "failed", "{child}");
    assert_eq!(child["error"]["code"], "output_schema", "{child}");
    assert_eq!(w.provider.requests().len(), 6, "one turn and three more");

    let child_session = child["sessionId"].as_str().expect("session");
    let system = system_messages(&w.events(child_session).await);
    assert_eq!(
        system.len(),
        4,
        "three continuations and a notice: {system:?}"
    );
    assert!(system[..3].iter().all(|m| m.starts_with(CONTINUATION)));
    assert!(system[3].contains("failed"), "{system:?}");

    let parent_events = w.events(&session).await;
    let delegated = &result_of(&parent_events, "d1")["output"];
    assert_eq!(delegated["status"], "failed");
    assert_eq!(delegated["error"]["code"], "output_schema");
}

#[tokio::test]
async fn an_unfinished_plan_is_continued_and_what_stays_unfinished_is_recorded() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    w.provider.push(tool_calls(&[(
        "p1",
        "plan",
        json!({"steps": [{"id": "a", "label": "Gather"}, {"id": "b", "label": "Write"}]}),
    )]));
    w.provider.push(text("planned"));
    // Asked to go on, it finishes one step and then only talks.
    w.provider.push(tool_calls(&[(
        "p2",
        "plan",
        json!({"steps": [{"id": "a", "label": "Gather", "status": "done"},
                         {"id": "b", "label": "Write"}]}),
    )]));
    w.provider.push(text("gathered"));
    w.provider.push(text("still writing"));
    w.provider.push(text("nearly"));
    let answered = w.message(&session, "plan it").await;
    ok(&answered);
    let run_id = turn_run(&w, &session).await;
    let done = run(&w, &run_id).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let unmet = &done["unmetObligations"];
    assert_eq!(unmet[0]["kind"], "plan", "{done}");
    assert_eq!(
        unmet[0]["steps"],
        json!([{"id": "b", "label": "Write", "status": "pending"}])
    );
    let requests = w.provider.requests();
    assert_eq!(requests.len(), 6);
    let prompt = Sent::new(Flavor::OpenAi, &requests[2].body).user_texts();
    assert!(
        prompt
            .last()
            .is_some_and(|t| t.contains("\"Gather\"") && t.contains("\"Write\"")),
        "the continuation names the open steps: {prompt:?}"
    );
    let later = Sent::new(Flavor::OpenAi, &requests[4].body).user_texts();
    assert!(
        later
            .last()
            .is_some_and(|t| !t.contains("\"Gather\"") && t.contains("\"Write\"")),
        "{later:?}"
    );
    let system = system_messages(&w.events(&session).await);
    assert_eq!(system.len(), 4, "{system:?}");
    assert!(system[3].contains("unmet"), "{system:?}");
}

#[tokio::test]
async fn a_plan_finished_on_a_continuation_owes_nothing() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    w.provider.push(tool_calls(&[(
        "p1",
        "plan",
        json!({"steps": [{"id": "a", "label": "Gather"}]}),
    )]));
    w.provider.push(text("planned"));
    w.provider.push(tool_calls(&[(
        "p2",
        "plan",
        json!({"steps": [{"id": "a", "label": "Gather", "status": "skipped"}]}),
    )]));
    w.provider.push(text("skipped it"));
    ok(&w.message(&session, "plan it").await);
    let done = run(&w, &turn_run(&w, &session).await).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert!(done.get("unmetObligations").is_none(), "{done}");
    assert!(done["plan"].get("settledAt").is_some(), "{done}");
    assert_eq!(w.provider.requests().len(), 4);
    assert_eq!(system_messages(&w.events(&session).await).len(), 1);
}

#[tokio::test]
async fn a_script_past_its_wall_budget_pauses_until_a_signal_lifts_the_budget() {
    let w = limited(json!({"runs": {"maxScriptWallMs": 1}})).await;
    let session = w.session().await;
    // The sleep outlasts the budget, so the write after it is a new
    // effect past the deadline.
    let script = "export default async function (input, ctx) {\n\
                  await ctx.sleep(50);\n\
                  await ctx.call('write', {address: '~/memory/paused.md', content: 'went on'});\n\
                  return 'resumed';\n\
                  }";
    w.provider
        .push(tool_calls(&[("d1", "delegate", json!({"script": script}))]));
    w.provider.push(text("the script finished"));
    ok(&w.message(&session, "run the script").await);
    let parent = turn_run(&w, &session).await;
    let child = only_child(&w, &parent).await;
    let child_id = child["id"].as_str().expect("id").to_owned();
    let paused = until_status(&w, &child_id, "waiting").await;
    assert_eq!(paused["wait"]["reason"], "budget-pause", "{paused}");
    // The write is the effect it paused before: it was never started.
    let entries = journal(&w, &child_id).await;
    assert!(
        entries.iter().all(|e| e["entry"]["kind"] != "call"),
        "{entries:?}"
    );
    // Any signal resumes it, without the budget.
    let signaled = w
        .act(json!({"_": "SignalRun", "runId": child_id, "signal": "go-on"}))
        .await;
    ok(&signaled);
    assert_eq!(builtin::json_of(&signaled.body)["delivered"], true);
    let done = until_status(&w, &child_id, "succeeded").await;
    assert!(done.get("wait").is_none(), "{done}");
    until_status(&w, &parent, "succeeded").await;
    let events = w.events(&session).await;
    assert_eq!(result_of(&events, "d1")["output"]["output"], "resumed");
    let entries = journal(&w, &child_id).await;
    let calls = entries
        .iter()
        .filter(|e| e["entry"]["kind"] == "call")
        .count();
    assert_eq!(
        calls, 1,
        "the write ran once, after the signal: {entries:?}"
    );
}

#[tokio::test]
async fn the_runs_table_keeps_its_cap_by_dropping_the_oldest_finished_trees() {
    let w = limited(json!({"runs": {"maxRuns": 2}})).await;
    let session = w.session().await;
    for n in 0..4 {
        w.provider.push(text(&format!("answer {n}")));
        ok(&w.message(&session, &format!("question {n}")).await);
    }
    let before = runs_of(&w, json!({"sessionId": session})).await;
    assert_eq!(before.len(), 4, "pruned at most every few seconds");
    // A start prunes at once (its dispatcher's first pass): the two newest
    // turns stay.
    let w = w.restart().await;
    eventually("the oldest runs are pruned", || async {
        runs_of(&w, json!({"sessionId": session})).await.len() == 2
    })
    .await;
    let after = runs_of(&w, json!({"sessionId": session})).await;
    let newest = |runs: &[Value]| -> Vec<String> {
        let mut runs = runs.to_vec();
        runs.sort_by_key(|r| r["createdAt"].as_i64());
        let mut ids: Vec<String> = runs
            .iter()
            .rev()
            .take(2)
            .map(|r| r["id"].as_str().unwrap_or_default().to_owned())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(newest(&after), newest(&before));
    // The log keeps every turn: only the run rows went.
    let events = w.events(&session).await;
    assert_eq!(events.iter().filter(|e| e["type"] == "message").count(), 8);
}
