//! Permission requests through the real binary with the fake agent's
//! `permission` script: the `ask` policy stores a request with a public
//! request id and waits for the host; answers, rejects, bad options, double
//! and unknown answers, cancel while waiting, and the automatic policies.

mod common;

use common::{data_code, kinds, text_of, Backend, Sidecar};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

/// Starts a `permission` turn on `s1` and waits for its request id.
async fn start_permission_turn(
    sc: &mut Sidecar,
) -> (
    JoinHandle<Result<Value, agentos_client::ctl::ClientError>>,
    String,
) {
    sc.open_with_policy("s1", "echo", "ask").await;
    sc.ok("sessions/subscribe", json!({"sessionId": "s1", "after": 0}))
        .await;
    let client = sc.client.clone();
    let turn = tokio::spawn(async move {
        client
            .call(
                "sessions/prompt",
                json!({"sessionId": "s1", "content": [{"type": "text", "text": "permission"}]}),
            )
            .await
    });
    let (_, note) = sc
        .next_note(|m, p| m == "sessions/event" && p["event"]["type"] == "permission_request")
        .await;
    let request_id = note["event"]["requestId"]
        .as_str()
        .expect("requestId")
        .to_owned();
    (turn, request_id)
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.chars().enumerate().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

async fn finish(turn: JoinHandle<Result<Value, agentos_client::ctl::ClientError>>) -> Value {
    tokio::time::timeout(common::PATIENCE, turn)
        .await
        .expect("the turn ends")
        .expect("join")
        .expect("the turn succeeds")
}

fn respond(request_id: &str, option: &str) -> Value {
    json!({"sessionId": "s1", "requestId": request_id, "optionId": option})
}

async fn ask_then_allow(backend: Backend) {
    let mut sc = Sidecar::start(backend).await;
    let (turn, request_id) = start_permission_turn(&mut sc).await;
    assert!(is_uuid(&request_id), "public request id {request_id}");
    let s = sc.ok("sessions/get", json!({"sessionId": "s1"})).await;
    assert_eq!(s["session"]["state"]["status"], "waiting");
    assert!(
        s["session"]["state"]["requests"]
            .to_string()
            .contains(&request_id),
        "waiting state names the request: {}",
        s["session"]["state"]
    );
    let h = sc.history("s1").await;
    assert_eq!(
        kinds(&h),
        ["user_message_chunk", "tool_call", "permission_request"]
    );
    let req = &h[2];
    assert_eq!(req["requestId"], json!(request_id));
    assert_eq!(req["toolCall"]["toolCallId"], "perm_1");
    assert_eq!(req["options"].as_array().expect("options").len(), 3);

    let r = sc
        .ok("sessions/respondPermission", respond(&request_id, "allow"))
        .await;
    assert_eq!(r, json!({"status": "accepted"}));
    let result = finish(turn).await;
    assert_eq!(result["stopReason"], "end_turn");
    assert_eq!(result["message"]["content"][0]["text"], "chose allow");
    let h = sc.history("s1").await;
    assert_eq!(
        kinds(&h),
        [
            "user_message_chunk",
            "tool_call",
            "permission_request",
            "permission_response",
            "tool_call_update",
            "agent_message_chunk"
        ]
    );
    assert_eq!(h[3]["requestId"], json!(request_id));
    assert_eq!(h[3]["status"], "accepted");
    assert_eq!(h[4]["status"], "completed");
    assert_eq!(text_of(&h[5]), "chose allow");
    // The adapter's own session id never reaches the host.
    let acp_session = sc.delivered_prompts()[0]["sessionId"]
        .as_str()
        .expect("adapter session id")
        .to_owned();
    let all = serde_json::to_string(&h).expect("json");
    assert!(!all.contains(&acp_session), "history leaks {acp_session}");

    let again = sc
        .ok("sessions/respondPermission", respond(&request_id, "allow"))
        .await;
    assert_eq!(again["status"], "not_pending");
    assert_eq!(again["reason"], "already_resolved");
    let unknown = sc
        .ok(
            "sessions/respondPermission",
            respond("00000000-0000-4000-8000-000000000000", "allow"),
        )
        .await;
    assert_eq!(unknown["status"], "not_pending");
    assert_eq!(unknown["reason"], "request_not_found");
}

async fn ask_then_reject_after_a_bad_option(backend: Backend) {
    let mut sc = Sidecar::start(backend).await;
    let (turn, request_id) = start_permission_turn(&mut sc).await;
    let e = sc
        .err(
            "sessions/respondPermission",
            respond(&request_id, "maybe-later"),
        )
        .await;
    assert_eq!(data_code(&e), "invalid_permission_option");
    let s = sc.ok("sessions/get", json!({"sessionId": "s1"})).await;
    assert_eq!(s["session"]["state"]["status"], "waiting", "still pending");
    let r = sc
        .ok("sessions/respondPermission", respond(&request_id, "reject"))
        .await;
    assert_eq!(r["status"], "accepted");
    let result = finish(turn).await;
    assert_eq!(result["message"]["content"][0]["text"], "chose reject");
    let h = sc.history("s1").await;
    assert_eq!(h[3]["type"], "permission_response");
    assert_eq!(h[3]["status"], "accepted");
    assert_eq!(h[4]["type"], "tool_call_update");
    assert_eq!(h[4]["status"], "failed");
    assert_eq!(text_of(&h[5]), "chose reject");
}

async fn cancel_while_waiting(backend: Backend) {
    let mut sc = Sidecar::start(backend).await;
    let (turn, request_id) = start_permission_turn(&mut sc).await;
    let c = sc.ok("sessions/cancel", json!({"sessionId": "s1"})).await;
    assert_eq!(c["status"], "cancelled");
    let result = finish(turn).await;
    assert_eq!(result["stopReason"], "cancelled");
    let h = sc.history("s1").await;
    let response = h
        .iter()
        .find(|e| e["type"] == "permission_response")
        .expect("the request's end is stored");
    assert_eq!(response["requestId"], json!(request_id));
    assert_eq!(response["status"], "not_pending");
    assert_eq!(response["reason"], "prompt_cancelled");
    let late = sc
        .ok("sessions/respondPermission", respond(&request_id, "allow"))
        .await;
    assert_eq!(late["status"], "not_pending");
    assert_eq!(late["reason"], "prompt_cancelled");
    let s = sc.ok("sessions/get", json!({"sessionId": "s1"})).await;
    assert_eq!(s["session"]["state"]["status"], "idle");
}

async fn automatic_policies_store_nothing_about_the_permission(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    for (session, policy, chosen) in [
        ("a", "allow_all", "chose allow"),
        ("r", "reject_all", "chose reject"),
    ] {
        sc.open_with_policy(session, "echo", policy).await;
        let r = sc.prompt(session, "permission").await.expect("prompt");
        assert_eq!(r["stopReason"], "end_turn");
        assert_eq!(r["message"]["content"][0]["text"], chosen);
        let h = sc.history(session).await;
        assert_eq!(
            kinds(&h),
            [
                "user_message_chunk",
                "tool_call",
                "tool_call_update",
                "agent_message_chunk"
            ],
            "{policy}"
        );
    }
    let status = sc.ok("vm/status", json!({})).await;
    assert_eq!(status["pendingPermissions"]["used"], 0);
    assert_eq!(status["permissionOutcomes"]["used"], 0);
}

/// An answer that arrives after its session was deleted is told so, not
/// that the session never existed; a session that never existed is still
/// `session_not_found`, and reopening the id starts afresh.
async fn answer_after_delete(backend: Backend) {
    let mut sc = Sidecar::start(backend).await;
    let (turn, request_id) = start_permission_turn(&mut sc).await;
    sc.ok("sessions/delete", json!({"sessionId": "s1"})).await;
    let ended = tokio::time::timeout(common::PATIENCE, turn)
        .await
        .expect("the turn ends")
        .expect("join");
    assert!(ended.is_err(), "the deleted session's turn failed");
    let late = sc
        .ok("sessions/respondPermission", respond(&request_id, "allow"))
        .await;
    assert_eq!(
        late,
        json!({"status": "not_pending", "reason": "session_deleted"})
    );
    let unknown = sc
        .err(
            "sessions/respondPermission",
            json!({"sessionId": "never", "requestId": request_id, "optionId": "allow"}),
        )
        .await;
    assert_eq!(data_code(&unknown), "session_not_found");
    sc.open("s1", "echo").await;
    let fresh = sc
        .ok("sessions/respondPermission", respond(&request_id, "allow"))
        .await;
    assert_eq!(
        fresh,
        json!({"status": "not_pending", "reason": "request_not_found"})
    );
}

both_backends!(
    answer_after_delete,
    ask_then_allow,
    ask_then_reject_after_a_bad_option,
    cancel_while_waiting,
    automatic_policies_store_nothing_about_the_permission,
);
