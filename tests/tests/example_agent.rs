//! The published ACP example agent behind the real binary: the stored
//! history is checked event by event against the reference transcript of
//! its scripted turn (allow, reject and cancel paths). Each turn takes about
//! five seconds because the agent sleeps between steps.

mod common;

use common::{kinds, text_of, Backend, Sidecar};
use serde_json::{json, Value};

const FIRST: &str =
    "I'll help you with that. Let me start by reading some files to understand the current situation.";
const SECOND: &str =
    " Now I understand the project structure. I need to make some changes to improve it.";
const ALLOWED: &str =
    " Perfect! I've successfully updated the configuration. The changes have been applied.";
const REJECTED: &str =
    " I understand you prefer not to make that change. I'll skip the configuration update.";

/// Runs one example turn with the `ask` policy and answers its permission
/// request with `option`; returns the prompt result and the history.
async fn example_turn(backend: Backend, option: &str) -> (Value, Vec<Value>) {
    let mut sc = Sidecar::start(backend).await;
    sc.open_with_policy("ex", "example", "ask").await;
    sc.ok("sessions/subscribe", json!({"sessionId": "ex", "after": 0}))
        .await;
    let client = sc.client.clone();
    let turn = tokio::spawn(async move {
        client
            .call(
                "sessions/prompt",
                json!({"sessionId": "ex", "content": [{"type": "text", "text": "hello"}]}),
            )
            .await
    });
    let (_, note) = sc
        .next_note(|m, p| m == "sessions/event" && p["event"]["type"] == "permission_request")
        .await;
    let request_id = note["event"]["requestId"].clone();
    let r = sc
        .ok(
            "sessions/respondPermission",
            json!({"sessionId": "ex", "requestId": request_id, "optionId": option}),
        )
        .await;
    assert_eq!(r["status"], "accepted");
    let result = tokio::time::timeout(common::PATIENCE, turn)
        .await
        .expect("the turn ends")
        .expect("join")
        .expect("the turn succeeds");
    let history = sc.history("ex").await;
    (result, history)
}

fn check_common_prefix(h: &[Value]) {
    assert_eq!(h[0]["type"], "user_message_chunk");
    assert_eq!(text_of(&h[0]), "hello");
    assert_eq!(h[1]["type"], "agent_message_chunk");
    assert_eq!(text_of(&h[1]), FIRST);
    assert_eq!(h[2]["type"], "tool_call");
    assert_eq!(h[2]["toolCallId"], "call_1");
    assert_eq!(h[2]["title"], "Reading project files");
    assert_eq!(h[2]["kind"], "read");
    assert_eq!(h[2]["status"], "pending");
    assert_eq!(h[2]["locations"], json!([{"path": "/project/README.md"}]));
    assert_eq!(h[2]["rawInput"], json!({"path": "/project/README.md"}));
    assert_eq!(h[3]["type"], "tool_call_update");
    assert_eq!(h[3]["toolCallId"], "call_1");
    assert_eq!(h[3]["status"], "completed");
    assert_eq!(
        h[3]["rawOutput"],
        json!({"content": "# My Project\n\nThis is a sample project..."})
    );
    assert_eq!(h[4]["type"], "agent_message_chunk");
    assert_eq!(text_of(&h[4]), SECOND);
    assert_eq!(h[5]["type"], "tool_call");
    assert_eq!(h[5]["toolCallId"], "call_2");
    assert_eq!(h[5]["kind"], "edit");
    assert_eq!(h[5]["locations"], json!([{"path": "/project/config.json"}]));
    assert_eq!(h[6]["type"], "permission_request");
    assert_eq!(h[6]["toolCall"]["toolCallId"], "call_2");
    let options: Vec<&str> = h[6]["options"]
        .as_array()
        .expect("options")
        .iter()
        .map(|o| o["optionId"].as_str().expect("optionId"))
        .collect();
    assert_eq!(options, ["allow", "reject"]);
    assert_eq!(h[7]["type"], "permission_response");
    assert_eq!(h[7]["requestId"], h[6]["requestId"]);
    assert_eq!(h[7]["status"], "accepted");
    for (i, e) in h.iter().enumerate() {
        assert_eq!(e["sequence"], i as u64 + 1);
        assert_eq!(e["sessionId"], "ex");
    }
}

async fn allow_path_matches_the_transcript(backend: Backend) {
    let (result, h) = example_turn(backend, "allow").await;
    assert_eq!(result["stopReason"], "end_turn");
    assert_eq!(
        kinds(&h),
        [
            "user_message_chunk",
            "agent_message_chunk",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk",
            "tool_call",
            "permission_request",
            "permission_response",
            "tool_call_update",
            "agent_message_chunk"
        ]
    );
    check_common_prefix(&h);
    assert_eq!(h[8]["toolCallId"], "call_2");
    assert_eq!(h[8]["status"], "completed");
    assert_eq!(
        h[8]["rawOutput"],
        json!({"success": true, "message": "Configuration updated"})
    );
    assert_eq!(text_of(&h[9]), ALLOWED);
}

#[tokio::test]
async fn reject_path_matches_the_transcript() {
    let (result, h) = example_turn(Backend::SqliteFile, "reject").await;
    assert_eq!(result["stopReason"], "end_turn");
    assert_eq!(
        kinds(&h),
        [
            "user_message_chunk",
            "agent_message_chunk",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk",
            "tool_call",
            "permission_request",
            "permission_response",
            "agent_message_chunk"
        ],
        "no tool_call_update for call_2 on reject"
    );
    check_common_prefix(&h);
    assert_eq!(text_of(&h[8]), REJECTED);
}

#[tokio::test]
async fn cancel_after_the_first_chunk() {
    let mut sc = Sidecar::start(Backend::SqliteFile).await;
    sc.open_with_policy("ex", "example", "ask").await;
    sc.ok("sessions/subscribe", json!({"sessionId": "ex"}))
        .await;
    let client = sc.client.clone();
    let turn = tokio::spawn(async move {
        client
            .call(
                "sessions/prompt",
                json!({"sessionId": "ex", "content": [{"type": "text", "text": "hello"}]}),
            )
            .await
    });
    let (_, first) = sc
        .next_note(|m, p| {
            m == "sessions/update" && p["update"]["sessionUpdate"] == "agent_message_chunk"
        })
        .await;
    assert_eq!(first["update"]["content"]["text"], FIRST);
    let c = sc.ok("sessions/cancel", json!({"sessionId": "ex"})).await;
    assert_eq!(c["status"], "cancelled");
    let result = tokio::time::timeout(common::PATIENCE, turn)
        .await
        .expect("the turn ends")
        .expect("join")
        .expect("a cancelled turn is a result");
    assert_eq!(result["stopReason"], "cancelled");
    let h = sc.history("ex").await;
    assert_eq!(kinds(&h), ["user_message_chunk"], "{h:?}");
}

both_backends!(allow_path_matches_the_transcript);

/// Under `allow_all` and `reject_all` the sidecar answers the example agent's
/// permission request itself: the turn follows the chosen branch and nothing
/// about the permission is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_policies_choose_by_option_kind() {
    let sc = Sidecar::start(Backend::SqliteFile).await;
    for (session, policy, last_text) in [
        ("allowed", "allow_all", ALLOWED),
        ("rejected", "reject_all", REJECTED),
    ] {
        sc.open_with_policy(session, "example", policy).await;
        let result = sc.prompt(session, "hello").await.expect("turn");
        assert_eq!(result["stopReason"], "end_turn", "{policy}");
        let h = sc.history(session).await;
        let types = kinds(&h);
        assert!(
            !types.iter().any(|t| t.starts_with("permission_")),
            "{policy}: {types:?}"
        );
        assert_eq!(text_of(h.last().expect("events")), last_text, "{policy}");
        let call_2_completed = h.iter().any(|e| {
            e["type"] == "tool_call_update"
                && e["toolCallId"] == "call_2"
                && e["status"] == "completed"
        });
        assert_eq!(
            call_2_completed,
            policy == "allow_all",
            "{policy}: {types:?}"
        );
    }
}
