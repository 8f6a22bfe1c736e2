//! Sessions named after their first turn, end to end through the real
//! binary and a scripted provider: a builtin agent's session is named by one
//! tool-less call to its own model (title and description), once, with a
//! session change and an account change `session-updated` on the live feed;
//! a title the user set is never replaced; a registry adapter's session is
//! named after the user's first words.

#[path = "common/builtin.rs"]
mod builtin;
#[path = "signed_ws/client.rs"]
#[allow(dead_code)]
mod client;
mod common;

use agentos_tests::provider_server::{Flavor, Reply};
use builtin::{json_of, ok, world_titled, World};
use client::Ws;
use common::eventually;
use serde_json::{json, Value};

async fn session_info(w: &World, session: &str) -> Value {
    json_of(w.get_session(session).await.field("session"))
}

/// The requests that asked for a title (their system prompt says so).
fn title_requests(w: &World) -> Vec<Value> {
    w.provider
        .requests()
        .into_iter()
        .map(|r| r.body)
        .filter(|body| {
            body["messages"][0]["content"]
                .as_str()
                .is_some_and(|s| s.starts_with("You name conversations"))
        })
        .collect()
}

#[tokio::test]
async fn a_builtin_session_is_named_by_its_model_once_and_the_feed_says_so() {
    let w = world_titled(Flavor::OpenAi).await;
    let session = w.session().await;
    let addr = w.sc.ready["http"].as_str().expect("http").to_owned();
    let mut ws = Ws::open(&addr).await;
    let account = format!("account/{}", w.owner.id());
    ws.subscribed(&w.owner, &account, None).await;
    // The title call races the turn: every call gets the same two lines.
    w.provider.set_default(Reply::Text(vec![
        "Title: Lisbon trip plan\n".into(),
        "Planning dates and hotels for a week in Lisbon.".into(),
    ]));
    ok(&w.message(&session, "Plan a week in Lisbon for me").await);
    eventually("the session is named", || async {
        session_info(&w, &session).await["title"] == "Lisbon trip plan"
    })
    .await;
    let info = session_info(&w, &session).await;
    assert_eq!(
        info["description"],
        "Planning dates and hotels for a week in Lisbon"
    );
    let asked = title_requests(&w);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].get("tools").is_none(), "no tools: {}", asked[0]);
    assert!(
        asked[0]["messages"][1]["content"]
            .as_str()
            .is_some_and(|c| c.contains("User: Plan a week in Lisbon for me")),
        "{}",
        asked[0]
    );
    // The feed: the session's new state and the account's reason.
    let renamed = ws
        .next_where(|e| e["value"]["reason"] == "session-updated")
        .await;
    assert_eq!(renamed["key"], account.as_str());
    assert_eq!(renamed["value"]["sessionId"], session.as_str());

    // Named, it is not asked again.
    ok(&w.message(&session, "And a day in Sintra").await);
    assert_eq!(title_requests(&w).len(), 1);

    // A title the user gave is theirs: no call, and it stays.
    let mine = w.session().await;
    ok(&w
        .act(json!({"_": "UpdateSession", "sessionId": mine, "title": "My own name"}))
        .await);
    ok(&w.message(&mine, "Plan a week in Porto").await);
    let _ = ws.barrier(&w.owner).await;
    assert_eq!(title_requests(&w).len(), 1);
    assert_eq!(session_info(&w, &mine).await["title"], "My own name");
}

#[tokio::test]
async fn a_registry_adapters_session_is_named_after_the_users_first_words() {
    let w = world_titled(Flavor::OpenAi).await;
    let created = w
        .act(json!({"_": "CreateAgent", "definition": {
            "name": "Echo", "systemPrompt": "", "adapter": "echo"}}))
        .await;
    ok(&created);
    let session = w
        .act(json!({"_": "CreateSession", "agentId": created.text("agentId")}))
        .await;
    ok(&session);
    let session = session.text("sessionId");
    ok(&w
        .message(
            &session,
            "please summarise the attached quarterly report for the board today\nthanks",
        )
        .await);
    eventually("the session is named", || async {
        session_info(&w, &session).await["title"]
            == "please summarise the attached quarterly report for the"
    })
    .await;
    assert!(title_requests(&w).is_empty());
}
