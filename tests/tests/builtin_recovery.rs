//! The builtin model agent when things go wrong, end to end: provider
//! failures (a rejected key, rate limits, server errors, broken streams, a
//! key echoed back), a missing provider or key, a stop mid-stream or on a
//! stalled provider, and restarts (between turns, and in the middle of
//! one), each followed by a turn that works.

#[path = "common/builtin.rs"]
mod builtin;
mod common;

use agentos_tests::provider_server::{Flavor, Reply};
use builtin::{answer_text, kinds, ok, world, Sent, World, KEY};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The raw `_agentos/error` update the host socket's history holds.
async fn stored_error(w: &World, session: &str) -> Value {
    let history = w.sc.history(session).await;
    history
        .iter()
        .rev()
        .find(|e| e.to_string().contains("_agentos/error"))
        .cloned()
        .unwrap_or_else(|| panic!("no stored error update in {history:?}"))
}

#[tokio::test]
async fn a_rejected_key_fails_the_turn_and_a_retry_succeeds() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    w.provider.push(Reply::Status(
        401,
        json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
            .to_string(),
    ));
    let failed = w.message(&session, "hi").await;
    assert!(!(200..300).contains(&failed.status), "{:?}", failed.body);
    assert!(
        answer_text(&failed, "message").contains("Incorrect API key provided"),
        "{:?}",
        failed.body
    );
    let events = w.events(&session).await;
    assert_eq!(kinds(&events), ["user:hi", "error"]);
    let message = events[1]["message"].as_str().unwrap_or_default();
    assert!(message.contains("Incorrect API key provided"), "{message}");
    assert_eq!(events[1]["code"], "provider_auth");
    let stored = stored_error(&w, &session).await;
    assert!(
        stored.to_string().contains("\"retryable\":false"),
        "{stored}"
    );

    // A provider that echoes the key back: neither the answer nor the log
    // repeats it.
    w.provider.push(Reply::Status(
        401,
        json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}}).to_string(),
    ));
    let echoed = w.message(&session, "hi").await;
    assert!(!(200..300).contains(&echoed.status));
    assert!(
        !format!("{:?}", echoed.body).contains(KEY),
        "{:?}",
        echoed.body
    );
    let events = w.events(&session).await;
    let last = events.last().expect("the error");
    assert_eq!(last["type"], "error");
    assert!(!last.to_string().contains(KEY), "{last}");
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.contains("<redacted>")),
        "{last}"
    );

    w.provider.push(Reply::Text(vec!["recovered".into()]));
    let retried = w
        .act(json!({"_": "RetrySession", "sessionId": session}))
        .await;
    ok(&retried);
    assert!(!answer_text(&retried, "assistantEventId").is_empty());
    let events = w.events(&session).await;
    assert_eq!(
        kinds(&events).last().map(String::as_str),
        Some("assistant:recovered")
    );
    // The retried prompt reaches the model once (after the first one, which
    // failed unanswered), and the failures not at all.
    let body = w.last_body();
    assert_eq!(Sent::new(Flavor::OpenAi, &body).user_texts(), ["hi", "hi"]);
    assert_eq!(
        Sent::new(Flavor::OpenAi, &body).roles(),
        ["system", "user", "user"],
        "{body}"
    );
    assert!(!body.to_string().contains("Incorrect API key"), "{body}");
}

#[tokio::test]
async fn a_busy_provider_is_tried_again_after_the_pause_it_asks_for() {
    let w = world(Flavor::Anthropic).await;
    let session = w.session().await;
    let busy = |status: u16| {
        let kind = if status == 429 {
            "rate_limit_error"
        } else {
            "overloaded_error"
        };
        json!({"type": "error", "error": {"type": kind, "message": format!("scripted {status}")}})
            .to_string()
    };
    // A 429 that asks for a second: the call is made again after it, and
    // the turn answers as if nothing happened.
    w.provider
        .push(Reply::RetryAfter(429, busy(429), "1".into()));
    w.provider.push(Reply::Text(vec!["after the wait".into()]));
    let started = Instant::now();
    ok(&w.message(&session, "try 429").await);
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(w.provider.requests().len(), 2);
    assert_eq!(
        kinds(&w.events(&session).await),
        ["user:try 429", "assistant:after the wait"]
    );

    // A provider that stays overloaded: the first call and three more
    // (`builtin.providerRetries`), then the turn fails, retryable, in the
    // provider's words.
    for _ in 0..4 {
        w.provider
            .push(Reply::RetryAfter(503, busy(503), "0".into()));
    }
    let failed = w.message(&session, "try 503").await;
    assert!(!(200..300).contains(&failed.status), "{:?}", failed.body);
    assert!(
        answer_text(&failed, "message").contains("scripted 503"),
        "{:?}",
        failed.body
    );
    assert_eq!(w.provider.requests().len(), 6);
    assert_eq!(w.provider.pending(), 0);
    let events = w.events(&session).await;
    let last = events.last().expect("events");
    assert_eq!(last["type"], "error", "{last}");
    assert_eq!(last["code"], "provider_server_error");
    let stored = stored_error(&w, &session).await;
    assert!(
        stored.to_string().contains("\"retryable\":true"),
        "{stored}"
    );

    // The failed prompt's own error, as the host socket answers it, keeps
    // the agent's code and class.
    for _ in 0..4 {
        w.provider
            .push(Reply::RetryAfter(503, busy(503), "0".into()));
    }
    let error =
        w.sc.err(
            "sessions/prompt",
            json!({"sessionId": session, "content": [{"type": "text", "text": "host try"}]}),
        )
        .await;
    let data = error.data.unwrap_or_default();
    assert_eq!(data["agentCode"], "provider_server_error", "{data}");
    assert_eq!(data["retryable"], true, "{data}");
    assert_eq!(w.provider.requests().len(), 10);

    // A pause longer than the agent waits out fails the turn at once.
    w.provider
        .push(Reply::RetryAfter(429, busy(429), "3600".into()));
    let failed = w.message(&session, "try later").await;
    assert!(!(200..300).contains(&failed.status), "{:?}", failed.body);
    assert_eq!(w.provider.requests().len(), 11);
    let events = w.events(&session).await;
    assert_eq!(
        events.last().expect("events")["code"],
        "provider_rate_limited"
    );

    // A stream that breaks after it began is not made again (its text
    // went out), and a connection closed without an answer is no busy
    // provider: both fail the turn, retryable. The cut message is not
    // stored as an answer, and no later turn sends it to the model.
    for reply in [Reply::StreamError, Reply::Disconnect] {
        w.provider.push(reply.clone());
        let before = w.provider.requests().len();
        let failed = w.message(&session, "break").await;
        assert!(
            !(200..300).contains(&failed.status),
            "{reply:?}: {:?}",
            failed.body
        );
        assert_eq!(w.provider.requests().len(), before + 1, "{reply:?}");
        let stored = stored_error(&w, &session).await;
        let text = stored.to_string();
        assert!(text.contains("\"retryable\":true"), "{reply:?}: {stored}");
    }
    let events = w.events(&session).await;
    assert!(
        !kinds(&events).iter().any(|k| k.contains("partial")),
        "{:?}",
        kinds(&events)
    );
    // The session still works.
    w.provider.push(Reply::Text(vec!["fine".into()]));
    ok(&w.message(&session, "now?").await);
    let body = w.last_body();
    assert!(!body.to_string().contains("partial"), "{body}");
}

#[tokio::test]
async fn stopping_cuts_a_long_stream_and_the_session_goes_on() {
    let mut w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    let turn = w.endless_turn(&session, "go on forever").await;
    let stopped = w.stop(&session).await;
    ok(&stopped);
    assert_eq!(builtin::json_of(&stopped.body)["stopped"], true);
    ok(&turn.await.expect("the turn task"));
    let info = w.get_session(&session).await;
    assert_eq!(builtin::json_of(info.field("session"))["status"], "idle");
    // A cancelled turn keeps no partial text.
    assert_eq!(kinds(&w.events(&session).await), ["user:go on forever"]);
    w.provider.push(Reply::Text(vec!["still here".into()]));
    ok(&w.message(&session, "hello?").await);
    let events = w.events(&session).await;
    assert_eq!(
        kinds(&events).last().map(String::as_str),
        Some("assistant:still here")
    );
}

#[tokio::test]
async fn a_stalled_provider_is_cut_by_a_stop() {
    let w = world(Flavor::Google).await;
    let session = w.session().await;
    w.provider.push(Reply::Hang);
    let turn = w.message_in_background(&session, "wait");
    w.provider_called(1).await;
    let stopped = w.stop(&session).await;
    ok(&stopped);
    assert_eq!(builtin::json_of(&stopped.body)["stopped"], true);
    let answered = turn.await.expect("the turn task");
    assert!(answered.status < 500, "{:?}", answered.body);
    w.provider.push(Reply::Text(vec!["back".into()]));
    ok(&w.message(&session, "again").await);
    assert_eq!(
        kinds(&w.events(&session).await).last().map(String::as_str),
        Some("assistant:back")
    );
}

#[tokio::test]
async fn a_restarted_sidecar_continues_from_the_log() {
    let w = world(Flavor::Anthropic).await;
    let session = w.session().await;
    w.provider.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "write".into(),
        json!({"address": "~/memory/plan.md", "content": "step one"}),
    )]));
    w.provider.push(Reply::Text(vec!["first answer".into()]));
    ok(&w.message(&session, "one").await);
    let w = w.restart().await;
    w.provider.push(Reply::Text(vec!["second answer".into()]));
    ok(&w.message(&session, "two").await);
    let body = w.last_body();
    let sent = Sent::new(Flavor::Anthropic, &body);
    assert_eq!(sent.user_texts(), ["one", "two"], "{body}");
    assert_eq!(sent.tool_results().len(), 1, "{body}");
    assert_eq!(sent.tool_results()[0].0, "c1");
    assert!(body.to_string().contains("first answer"), "{body}");
    assert!(
        !body.to_string().contains("[agentos continuation]"),
        "no continuation preamble: {body}"
    );
    assert_eq!(
        kinds(&w.events(&session).await),
        [
            "user:one",
            "tool_call:write",
            "tool_result:write",
            "assistant:first answer",
            "user:two",
            "assistant:second answer"
        ]
    );
}

#[tokio::test]
async fn a_cancelled_turn_names_no_assistant_event() {
    let mut w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    let turn = w.endless_turn(&session, "go on forever").await;
    ok(&w.stop(&session).await);
    let answered = turn.await.expect("the turn task");
    ok(&answered);
    assert_eq!(answer_text(&answered, "assistantEventId"), "");
}

#[tokio::test]
async fn a_missing_provider_or_key_fails_the_turn_with_a_logged_error() {
    let w = world(Flavor::OpenAi).await;
    // The agent names a provider the account does not have.
    let mut definition = builtin::definition(None);
    definition["modelProvider"] = json!("nowhere");
    let created = w
        .act(json!({"_": "CreateAgent", "definition": definition}))
        .await;
    ok(&created);
    let orphan = w
        .act(json!({"_": "CreateSession", "agentId": answer_text(&created, "agentId")}))
        .await;
    ok(&orphan);
    let orphan = answer_text(&orphan, "sessionId");
    let failed = w.message(&orphan, "hi").await;
    assert!(!(200..300).contains(&failed.status), "{:?}", failed.body);
    assert!(
        answer_text(&failed, "message").contains("nowhere"),
        "{:?}",
        failed.body
    );
    let events = w.events(&orphan).await;
    assert_eq!(kinds(&events), ["user:hi", "error"], "{events:?}");
    assert!(events[1]["message"]
        .as_str()
        .is_some_and(|m| m.contains("nowhere")));

    // The provider's key secret is gone.
    let session = w.session().await;
    ok(&w.act(json!({"_": "DeleteSecret", "name": "key"})).await);
    let failed = w.message(&session, "hi").await;
    assert!(!(200..300).contains(&failed.status), "{:?}", failed.body);
    let events = w.events(&session).await;
    assert_eq!(kinds(&events), ["user:hi", "error"], "{events:?}");
    assert!(w.provider.requests().is_empty());
}

#[tokio::test]
async fn a_turn_cut_by_a_restart_can_be_retried() {
    let mut w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    let turn = w.endless_turn(&session, "interrupted question").await;
    let w = w.restart().await;
    let cut = turn.await.expect("the turn task");
    assert!(!(200..300).contains(&cut.status), "{:?}", cut.raw.status);
    w.provider.push(Reply::Text(vec!["answered now".into()]));
    let retried = w
        .act(json!({"_": "RetrySession", "sessionId": session}))
        .await;
    ok(&retried);
    let body = w.last_body();
    assert_eq!(
        Sent::new(Flavor::OpenAi, &body).user_texts(),
        ["interrupted question"],
        "{body}"
    );
    assert_eq!(
        kinds(&w.events(&session).await),
        ["user:interrupted question", "assistant:answered now"]
    );
}
