//! Runs across a SIGKILL of the sidecar: a script killed mid-run is
//! recovered from its lease and reruns from its journal without repeating
//! a completed effect, and the parent turn waiting on it resumes exactly
//! once; a turn killed mid-stream fails `prompt_delivery_uncertain` and is
//! not resent, while the message queued behind it is not lost and runs
//! after the restart.

#[path = "common/builtin.rs"]
mod builtin;
mod common;

use std::time::Duration;

use agentos_tests::provider_server::Flavor;
use builtin::{journal, json_of, kinds, ok, runs_of, text, tool_calls, until_status, world, World};
use serde_json::json;

async fn memory(w: &World, path: &str) -> String {
    let got = w
        .act(json!({"_": "ReadAgentMemoryFile", "agentId": w.agent_id, "path": path}))
        .await;
    ok(&got);
    json_of(&got.body)["file"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_script_killed_mid_run_replays_its_journal_and_its_parent_resumes_once() {
    let mut w = world(Flavor::OpenAi).await;
    ok(&w
        .act(json!({"_": "WriteAgentMemoryFile", "agentId": w.agent_id,
                    "path": "count.md", "content": "0"}))
        .await);
    let session = w.session().await;
    // Read the counter, write it plus one, then sleep in the VM: the kill
    // lands in the sleep, after both effects were journaled. A rerun that
    // repeated them would count to 2.
    let script = "export default async function (input, ctx) {\n\
                  const read = await ctx.call('read', {address: '~/memory/count.md'});\n\
                  const n = Number(String(read.content ?? read).trim()) + 1;\n\
                  await ctx.call('write', {address: '~/memory/count.md', content: String(n)});\n\
                  await ctx.sleep(2000);\n\
                  return {counted: n};\n\
                  }";
    w.provider
        .push(tool_calls(&[("k1", "delegate", json!({"script": script}))]));
    w.provider.push(text("counted"));
    ok(&w.message(&session, "count once").await);
    let parent = runs_of(&w, json!({"sessionId": session})).await[0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let child = runs_of(&w, json!({"rootRunId": parent})).await[1]["id"]
        .as_str()
        .expect("child")
        .to_owned();
    let deadline = tokio::time::Instant::now() + common::PATIENCE;
    while !journal(&w, &child)
        .await
        .iter()
        .any(|e| e["entry"]["kind"] == "timer")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the script never slept"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(memory(&w, "count.md").await, "1");
    w = w.crash().await;

    let done = until_status(&w, &child, "succeeded").await;
    assert!(done["finishedAt"].is_number());
    let parent_done = until_status(&w, &parent, "succeeded").await;
    assert_eq!(parent_done["childRunCount"], 1);
    assert_eq!(memory(&w, "count.md").await, "1", "no effect ran twice");
    let entries = journal(&w, &child).await;
    let calls: Vec<String> = entries
        .iter()
        .filter(|e| e["entry"]["kind"] == "call")
        .map(|e| e["entry"]["tool"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(calls, ["read", "write"], "{entries:?}");
    let kinds_of: Vec<&str> = entries
        .iter()
        .map(|e| e["entry"]["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        kinds_of.iter().filter(|k| **k == "timer").count(),
        1,
        "{kinds_of:?}"
    );
    assert_eq!(kinds_of.last(), Some(&"fired"), "{kinds_of:?}");

    // The parent heard the child once and resumed once.
    let events = w.events(&session).await;
    assert_eq!(
        kinds(&events),
        [
            "user:count once",
            "tool_call:delegate",
            "tool_result:delegate",
            "assistant:counted"
        ]
    );
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("the child's result");
    assert_eq!(result["output"]["output"]["counted"], 1);
    assert_eq!(w.provider.requests().len(), 2, "one turn and one resume");
}

#[tokio::test]
async fn a_turn_killed_mid_stream_is_not_resent_and_the_queued_message_still_runs() {
    let mut w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    let first = w.endless_turn(&session, "the long question").await;
    // A second writer's message queues behind the live turn.
    let second = w.message_in_background(&session, "the queued question");
    let deadline = tokio::time::Instant::now() + common::PATIENCE;
    while runs_of(&w, json!({"sessionId": session, "status": "queued"}))
        .await
        .is_empty()
    {
        assert!(tokio::time::Instant::now() < deadline, "never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = w.provider.requests().len();
    w.provider.push(text("the queued answer"));
    w = w.crash().await;
    let _ = first.await;
    let _ = second.await;

    let runs = runs_of(&w, json!({"sessionId": session})).await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    // Newest first: the queued message's run, then the cut turn's.
    let (queued, cut) = (&runs[0], &runs[1]);
    let cut = until_status(&w, cut["id"].as_str().expect("id"), "failed").await;
    assert_eq!(cut["error"]["code"], "prompt_delivery_uncertain", "{cut}");
    until_status(&w, queued["id"].as_str().expect("id"), "succeeded").await;
    assert_eq!(
        w.provider.requests().len(),
        before + 1,
        "the cut turn was not resent; the queued one ran once"
    );
    let events = w.events(&session).await;
    let said = kinds(&events);
    assert_eq!(
        said.iter()
            .filter(|k| k.as_str() == "user:the long question")
            .count(),
        1
    );
    assert_eq!(
        said.last().map(String::as_str),
        Some("assistant:the queued answer")
    );
}
