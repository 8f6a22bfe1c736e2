//! Runs end to end through the real binary, the builtin agent and a
//! scripted provider: a turn that delegates parks (MessageSession answers
//! at once with no assistant event), its model child works in its own
//! session from the brief alone, the child's result becomes the delegate
//! call's result in the parent's log, and the parent resumes as the same
//! run; a script child journals its effects and returns its value; a
//! script waiting on an event is answered once by SignalRun; CancelRun
//! covers the tree and a canceled child still answers its parent's call;
//! the tree's bounds; detached children; and the run actions' shapes and
//! access (another account hears 404).

#[path = "common/builtin.rs"]
mod builtin;
#[path = "signed_ws/client.rs"]
#[allow(dead_code)]
mod client;
mod common;

use agentos_tests::provider_server::Flavor;
use agentos_tests::seed::{call, Signer};
use builtin::{
    json_of, kinds, ok, run, runs_of, text, tool_calls, until_status, world, Sent, World,
};
use client::Ws;
use common::eventually;
use serde_json::{json, Value};

/// The session's only run (its first turn).
async fn turn_run(w: &World, session: &str) -> Value {
    let runs = runs_of(w, json!({"sessionId": session})).await;
    runs.last().cloned().expect("the session has a run")
}

fn result_of<'a>(events: &'a [Value], call_id: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == "tool_result" && e["toolCallId"] == call_id)
        .unwrap_or_else(|| panic!("no result for {call_id} in {events:?}"))
}

#[tokio::test]
async fn a_delegating_turn_parks_its_child_works_from_the_brief_and_the_parent_resumes() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    w.provider.push(tool_calls(&[(
        "d1",
        "delegate",
        json!({"brief": "Count to three.", "title": "Counter"}),
    )]));
    w.provider.push(text("one two three"));
    w.provider.push(text("The child counted: one two three."));
    let answered = w.message(&session, "please delegate the counting").await;
    ok(&answered);
    assert_eq!(
        answered.text("assistantEventId"),
        "",
        "the turn parked on its child"
    );
    let parent = turn_run(&w, &session).await;
    let parent_id = parent["id"].as_str().expect("id").to_owned();
    let done = until_status(&w, &parent_id, "succeeded").await;
    assert_eq!(done["childRunCount"], 1);
    assert_eq!(done["kind"], "agent");
    // The tokens of both of the parent's turns, and its child's rolled up.
    let usage = &done["usage"];
    assert!(usage["input"].as_u64().is_some_and(|n| n > 0), "{done}");
    assert_eq!(usage["children"]["runs"], 1, "{done}");
    assert!(usage["children"]["input"].as_u64().is_some_and(|n| n > 0));
    assert_eq!(
        usage["total"].as_u64(),
        Some(usage["input"].as_u64().unwrap_or(0) + usage["output"].as_u64().unwrap_or(0))
    );

    // The tree, oldest first: the parent, then the child.
    let tree = runs_of(&w, json!({"rootRunId": parent_id})).await;
    assert_eq!(tree.len(), 2, "{tree:?}");
    assert_eq!(tree[0]["id"], json!(parent_id));
    let child = &tree[1];
    assert_eq!(child["parentRunId"], json!(parent_id));
    assert_eq!(child["parentToolCallId"], "d1");
    assert_eq!(child["rootRunId"], json!(parent_id));
    assert_eq!(
        (child["depth"].clone(), child["origin"].clone()),
        (json!(1), json!("agent"))
    );
    assert_eq!(child["status"], "succeeded");
    let child_session = child["sessionId"].as_str().expect("a session").to_owned();

    // The child's session: the brief exactly as its first message, linked
    // back, and none of the parent's conversation.
    let child_events = w.events(&child_session).await;
    assert_eq!(
        kinds(&child_events),
        ["user:Count to three.", "assistant:one two three"]
    );
    let got = json_of(&w.get_session(&child_session).await.body);
    assert_eq!(got["session"]["parentSessionId"], json!(session));
    assert_eq!(got["session"]["runId"], child["id"]);
    let requests = w.provider.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        Sent::new(Flavor::OpenAi, &requests[1].body).user_texts(),
        ["Count to three."]
    );

    // The parent's log: the call, the child's result as the call's
    // result, and the resumed reply; the resumed request sent the user's
    // words once and the child's result.
    let events = w.events(&session).await;
    assert_eq!(
        kinds(&events),
        [
            "user:please delegate the counting",
            "tool_call:delegate",
            "tool_result:delegate",
            "assistant:The child counted: one two three."
        ]
    );
    let result = &result_of(&events, "d1")["output"];
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["runId"], child["id"]);
    assert_eq!(result["sessionId"], json!(child_session));
    assert_eq!(result["output"]["text"], "one two three");
    let resumed = &requests[2].body;
    assert_eq!(
        Sent::new(Flavor::OpenAi, resumed).user_texts(),
        ["please delegate the counting"]
    );
    let sent = Sent::new(Flavor::OpenAi, resumed).tool_results();
    assert_eq!(sent.len(), 1);
    assert!(sent[0].1.contains("one two three"), "{sent:?}");
}

/// Gemini wants the signature it put on a call back with the call; a turn
/// resumed after its child is rebuilt from the log, which keeps it.
#[tokio::test]
async fn a_resumed_gemini_turn_sends_its_calls_signature_back() {
    let w = world(Flavor::Google).await;
    let session = w.session().await;
    w.provider.push(tool_calls(&[(
        "d1",
        "delegate",
        json!({"brief": "Count to two.", "title": "Counter"}),
    )]));
    w.provider.push(text("one two"));
    w.provider.push(text("Counted."));
    ok(&w.message(&session, "delegate it").await);
    let parent = turn_run(&w, &session).await;
    let parent_id = parent["id"].as_str().expect("id").to_owned();
    until_status(&w, &parent_id, "succeeded").await;
    let requests = w.provider.requests();
    assert_eq!(requests.len(), 3, "the resumed call was not refused");
    let resumed = &requests[2].body;
    let call = resumed["contents"]
        .as_array()
        .expect("contents")
        .iter()
        .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
        .find(|p| p.get("functionCall").is_some())
        .expect("the delegate call went back");
    assert_eq!(
        call["thoughtSignature"],
        json!(agentos_tests::provider_server::google_call_signature("d1"))
    );
    assert_eq!(
        kinds(&w.events(&session).await).last().map(String::as_str),
        Some("assistant:Counted.")
    );
}

#[tokio::test]
async fn a_script_child_journals_its_effects_and_returns_its_value() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    let script = "export default async function (input, ctx) {\n\
                  await ctx.call('write', {address: '~/memory/greeting.md', content: 'hi ' + input.name});\n\
                  const back = await ctx.call('read', {address: '~/memory/greeting.md'});\n\
                  const at = await ctx.now();\n\
                  return {wrote: true, back, late: at > 0};\n\
                  }";
    w.provider.push(tool_calls(&[(
        "s1",
        "delegate",
        json!({"script": script, "input": {"name": "Ada"}, "title": "greeter"}),
    )]));
    w.provider.push(text("the script wrote it"));
    ok(&w.message(&session, "run the greeter").await);
    let parent = turn_run(&w, &session).await;
    let parent_id = parent["id"].as_str().expect("id").to_owned();
    until_status(&w, &parent_id, "succeeded").await;
    let events = w.events(&session).await;
    let result = &result_of(&events, "s1")["output"];
    assert_eq!(result["status"], "succeeded", "{result}");
    assert_eq!(result["sessionId"], Value::Null);
    assert_eq!(result["output"]["wrote"], true);
    assert_eq!(result["output"]["late"], true);
    assert!(
        result["output"]["back"].to_string().contains("hi Ada"),
        "{result}"
    );
    let child_id = result["runId"].as_str().expect("run id").to_owned();
    let child = run(&w, &child_id).await;
    assert_eq!(child["kind"], "workflow");
    assert!(child["sourceText"]
        .as_str()
        .is_some_and(|s| s.contains("ctx.call")));
    let journal = w
        .act(json!({"_": "GetRunJournal", "runId": child_id}))
        .await;
    ok(&journal);
    let entries = json_of(&journal.body)["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let kinds: Vec<&str> = entries
        .iter()
        .map(|e| e["entry"]["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        kinds,
        ["call", "result", "call", "result", "now"],
        "{entries:?}"
    );
    assert_eq!(entries[0]["seq"], 1);
    assert_eq!(entries[0]["runId"], json!(child_id));
    let after = w
        .act(json!({"_": "GetRunJournal", "runId": child_id, "afterSeq": 3}))
        .await;
    assert_eq!(
        json_of(&after.body)["entries"].as_array().map(Vec::len),
        Some(2)
    );
    let memory = w
        .act(json!({"_": "ReadAgentMemoryFile", "agentId": w.agent_id, "path": "greeting.md"}))
        .await;
    ok(&memory);
    assert_eq!(json_of(&memory.body)["file"]["content"], "hi Ada");
}

#[tokio::test]
async fn a_waiting_script_is_answered_once_by_its_signal_and_canceling_covers_the_tree() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    let waits = "export default async function (input, ctx) {\n\
                 const e = await ctx.waitForEvent({signal: 'approve'}, {label: 'approval'});\n\
                 return e.payload;\n\
                 }";
    w.provider
        .push(tool_calls(&[("w1", "delegate", json!({"script": waits}))]));
    w.provider.push(text("approved"));
    ok(&w.message(&session, "wait for approval").await);
    let parent_id = turn_run(&w, &session).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let parked = until_status(&w, &parent_id, "waiting").await;
    assert_eq!(parked["wait"]["reason"], "children");
    assert_eq!(parked["wait"]["pendingChildren"], 1);
    let tree = runs_of(&w, json!({"rootRunId": parent_id})).await;
    let child_id = tree[1]["id"].as_str().expect("child").to_owned();
    let waiting = until_status(&w, &child_id, "waiting").await;
    assert_eq!(waiting["wait"]["reason"], "event");
    assert_eq!(waiting["wait"]["label"], "approval");
    assert_eq!(waiting["wait"]["answerWith"], "approve");

    // Another account hears nothing of these runs.
    let stranger = Signer::new();
    let hidden = call(
        &w.target,
        &stranger,
        json!({"_": "GetRun", "runId": child_id}),
    )
    .await;
    assert_eq!(hidden.status, 404);
    let hidden = call(
        &w.target,
        &stranger,
        json!({"_": "SignalRun", "runId": child_id, "signal": "approve"}),
    )
    .await;
    assert_eq!(hidden.status, 404);

    let wrong = w
        .act(json!({"_": "SignalRun", "runId": child_id, "signal": "reject"}))
        .await;
    ok(&wrong);
    assert_eq!(json_of(&wrong.body)["delivered"], false);
    let signal = json!({"_": "SignalRun", "runId": child_id, "signal": "approve",
                        "payload": {"by": "reviewer"}});
    let (a, b) = tokio::join!(w.act(signal.clone()), w.act(signal));
    let delivered: Vec<bool> = [a, b]
        .iter()
        .map(|x| json_of(&x.body)["delivered"] == true)
        .collect();
    assert_eq!(
        delivered.iter().filter(|d| **d).count(),
        1,
        "exactly once: {delivered:?}"
    );
    until_status(&w, &parent_id, "succeeded").await;
    let events = w.events(&session).await;
    assert_eq!(
        result_of(&events, "w1")["output"]["output"]["by"],
        "reviewer"
    );

    // A second tree, canceled while its child waits.
    let second = w.session().await;
    w.provider
        .push(tool_calls(&[("w2", "delegate", json!({"script": waits}))]));
    ok(&w.message(&second, "wait again").await);
    let root = turn_run(&w, &second).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    until_status(&w, &root, "waiting").await;
    // The parent parks as soon as its child is queued; the child is live
    // (claimed, then running its script) until its own wait, and a live
    // run ends canceled only once whoever works it stops. Cancel while the
    // child waits, as this tree is meant to.
    let tree = runs_of(&w, json!({"rootRunId": root})).await;
    let child = tree[1]["id"].as_str().expect("child").to_owned();
    until_status(&w, &child, "waiting").await;
    let canceled = w.act(json!({"_": "CancelRun", "runId": root})).await;
    ok(&canceled);
    assert_eq!(json_of(&canceled.body)["canceled"], true);
    assert_eq!(json_of(&canceled.body)["runId"], json!(root));
    let tree = runs_of(&w, json!({"rootRunId": root})).await;
    assert!(tree.iter().all(|r| r["status"] == "canceled"), "{tree:?}");
    let again = w.act(json!({"_": "CancelRun", "runId": root})).await;
    assert_eq!(json_of(&again.body)["canceled"], false);
    // The canceled child still answered its parent's call.
    let events = w.events(&second).await;
    let mut answered = false;
    for _ in 0..200 {
        let events = w.events(&second).await;
        if events
            .iter()
            .any(|e| e["type"] == "tool_result" && e["toolCallId"] == "w2")
        {
            answered = true;
            assert_eq!(
                result_of(&events, "w2")["output"]["status"],
                "canceled",
                "{events:?}"
            );
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(answered, "{events:?}");
}

#[tokio::test]
async fn the_tree_is_bounded_and_a_detached_child_answers_at_once() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    let quick = "export default async function () { return 1; }";
    let calls: Vec<(String, Value)> = (0..11)
        .map(|i| (format!("q{i}"), json!({"script": quick})))
        .collect();
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, input)| (id.as_str(), "delegate", input.clone()))
        .collect();
    w.provider.push(tool_calls(&calls));
    w.provider.push(text("ten ran"));
    ok(&w.message(&session, "fan out").await);
    let parent_id = turn_run(&w, &session).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let done = until_status(&w, &parent_id, "succeeded").await;
    assert_eq!(done["childRunCount"], 10);
    let events = w.events(&session).await;
    let refused = result_of(&events, "q10");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("children_limit")),
        "{refused}"
    );
    assert_eq!(result_of(&events, "q9")["output"]["output"], 1);

    // A detached model child: the call answers at once and the turn goes on.
    let other = w.session().await;
    w.provider.push(tool_calls(&[(
        "x1",
        "delegate",
        json!({"brief": "Work alone.", "await": false}),
    )]));
    w.provider.push(text("started it"));
    w.provider.push(text("worked alone"));
    let answered = w.message(&other, "start something").await;
    ok(&answered);
    assert_ne!(
        answered.text("assistantEventId"),
        "",
        "the turn did not park"
    );
    let events = w.events(&other).await;
    let started = &result_of(&events, "x1")["output"];
    assert_eq!(started["status"], "detached");
    let child = started["runId"].as_str().expect("run").to_owned();
    until_status(&w, &child, "succeeded").await;
    // Its tokens still roll up into the run that started it.
    let starter = turn_run(&w, &other).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    eventually("the detached child's usage rolls up", || async {
        let usage = &run(&w, &starter).await["usage"]["children"];
        usage["runs"] == 1 && usage["input"].as_u64().is_some_and(|n| n > 0)
    })
    .await;

    // The scopes of ListRuns.
    let none = w.act(json!({"_": "ListRuns"})).await;
    assert_eq!(none.status, 400);
    let two = w
        .act(json!({"_": "ListRuns", "sessionId": other, "agentId": w.agent_id}))
        .await;
    assert_eq!(two.status, 400);
    let by_agent = runs_of(&w, json!({"agentId": w.agent_id})).await;
    assert!(by_agent.len() >= 13, "{}", by_agent.len());
    let failed = runs_of(&w, json!({"agentId": w.agent_id, "status": "failed"})).await;
    assert!(failed.is_empty());
    let bad = w
        .act(json!({"_": "ListRuns", "agentId": w.agent_id, "status": "lost"}))
        .await;
    assert_eq!(bad.status, 400);
    eventually(
        "the detached child's session is listed under the agent",
        || async {
            runs_of(
                &w,
                json!({"sessionId": started["sessionId"].as_str().unwrap_or_default()}),
            )
            .await
            .len()
                == 1
        },
    )
    .await;
}

#[tokio::test]
async fn a_run_tree_subscription_replays_the_tree_then_streams_it() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    let waits = "export default async function (input, ctx) {\n\
                 await ctx.now();\n\
                 const e = await ctx.waitForEvent({signal: 'go'});\n\
                 ctx.progress(0.5, 'half');\n\
                 return e.payload;\n\
                 }";
    w.provider
        .push(tool_calls(&[("g1", "delegate", json!({"script": waits}))]));
    w.provider.push(text("went"));
    ok(&w.message(&session, "wait for go").await);
    let root = turn_run(&w, &session).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let tree = runs_of(&w, json!({"rootRunId": root})).await;
    let child = tree[1]["id"].as_str().expect("child").to_owned();
    until_status(&w, &child, "waiting").await;

    let addr = w.sc.ready["http"].as_str().expect("http").to_owned();
    let mut ws = Ws::open(&addr).await;
    let key = format!("runs/{root}");
    // Another account's subscription is refused like a run that does not exist.
    let stranger = Signer::new();
    let refused = ws.subscribe(&stranger, &key, None).await;
    assert_eq!(refused["_"], "error", "{refused}");
    let mut ws = Ws::open(&addr).await;
    ws.subscribed(&w.owner, &key, None).await;
    // The tree as it stands, oldest first, then the journal so far.
    let first = ws.next().await;
    assert_eq!(
        (first["_"].clone(), first["value"]["id"].clone()),
        (json!("change"), json!(root))
    );
    let second = ws.next().await;
    assert_eq!(second["value"]["id"], json!(child));
    assert_eq!(second["value"]["status"], "waiting");
    let now = ws.next().await;
    assert_eq!(
        (
            now["_"].clone(),
            now["runId"].clone(),
            now["seq"].clone(),
            now["entry"]["kind"].clone()
        ),
        (json!("append"), json!(child), json!(1), json!("now"))
    );
    let wait = ws.next().await;
    assert_eq!(
        (wait["seq"].clone(), wait["entry"]["kind"].clone()),
        (json!(2), json!("wait"))
    );

    // A signal with no name, or a payload past 64 KiB, is refused and
    // changes nothing: the real one's entry below is still seq 3.
    let big = "x".repeat(64 * 1024);
    for bad in [
        json!({"_": "SignalRun", "runId": child, "signal": ""}),
        json!({"_": "SignalRun", "runId": child, "signal": "go", "payload": big}),
    ] {
        let refused = w.act(bad).await;
        assert_eq!(refused.status, 400, "{:?}", refused.body);
        assert_eq!(refused.code(), "invalid_argument");
    }
    assert_eq!(run(&w, &child).await["status"], "waiting");

    // Live: the signal's entry, the child's transitions, its progress, the
    // parent resuming and ending.
    let signaled = tokio::time::timeout(
        common::PATIENCE,
        w.act(json!({"_": "SignalRun", "runId": child, "signal": "go", "payload": 7})),
    )
    .await
    .expect("SignalRun answered");
    ok(&signaled);
    assert_eq!(json_of(&signaled.body)["delivered"], true);
    let event = ws
        .next_where(|e| e["_"] == "append" && e["entry"]["kind"] == "event")
        .await;
    assert_eq!(event["entry"]["payload"], 7);
    assert_eq!(event["seq"], 3);
    let progress = ws.next_where(|e| e["_"] == "appendPartial").await;
    assert_eq!(progress["runId"], json!(child));
    assert_eq!(progress["patch"]["progress"]["label"], "half");
    ws.next_where(|e| {
        e["_"] == "change"
            && e["value"]["id"] == json!(child)
            && e["value"]["status"] == "succeeded"
    })
    .await;
    ws.next_where(|e| {
        e["_"] == "change" && e["value"]["id"] == json!(root) && e["value"]["status"] == "succeeded"
    })
    .await;

    // A resubscription after seq 2 replays the tree and only what followed.
    let mut again = Ws::open(&addr).await;
    again.subscribed(&w.owner, &key, Some(2)).await;
    assert_eq!(again.next().await["_"], "change");
    assert_eq!(again.next().await["_"], "change");
    let next = again.next().await;
    assert_eq!(
        (next["_"].clone(), next["seq"].clone()),
        (json!("append"), json!(3)),
        "{next}"
    );
}

#[tokio::test]
async fn a_plan_step_settles_when_its_children_succeed() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    w.provider.push(tool_calls(&[
        (
            "p1",
            "plan",
            json!({"title": "Work", "steps": [
                {"id": "count", "label": "Count"},
                {"id": "report", "label": "Report", "status": "skipped"}]}),
        ),
        (
            "d1",
            "delegate",
            json!({"brief": "Count.", "planStepId": "count"}),
        ),
    ]));
    w.provider.push(text("1 2 3"));
    w.provider.push(text("reported"));
    ok(&w.message(&session, "plan and count").await);
    let parent = turn_run(&w, &session).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let done = until_status(&w, &parent, "succeeded").await;
    let steps = &done["plan"]["steps"];
    assert_eq!(steps[0]["status"], "done", "{done}");
    assert_eq!(steps[0]["resolvedBy"], "runtime");
    assert_eq!(steps[1]["status"], "skipped");
    // Every step ended: the plan is settled, and the run owes nothing.
    assert!(done["plan"].get("settledAt").is_some(), "{done}");
    assert!(done.get("unmetObligations").is_none(), "{done}");
    let tree = runs_of(&w, json!({"rootRunId": parent})).await;
    assert_eq!(tree[1]["planStepId"], "count");
    let got = json_of(&w.get_session(&session).await.body);
    assert_eq!(got["session"]["plan"]["title"], "Work");
    assert_eq!(got["session"]["plan"]["steps"][0]["resolvedBy"], "runtime");
}
