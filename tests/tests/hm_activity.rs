//! Hypermedia activity triggers end to end: the monitor polls a scripted
//! Seed server's feed (`ListEvents`, as the account sees it, in observed
//! order, page by page up to a seen event or `activityMaxPages`) and fires
//! the account's `document-comment`, `user-mention` and `site-update`
//! triggers on the events they match: a new thread whose first words hold
//! the prompt and the `<trigger_context>` with the event. An event seen
//! again, a mention seen both as a comment and as its citation, and a
//! restart or a SIGKILL fire nothing twice; a first poll fires nothing
//! from before the triggers, even when the one before it failed.

#[path = "common/builtin.rs"]
mod builtin;
#[path = "signed_ws/client.rs"]
#[allow(dead_code)]
mod client;
mod common;

use agentos_tests::hm_server::{Fault, HmServer};
use agentos_tests::provider_server::{Flavor, Reply};
use builtin::{json_of, ok, world_sections, World};
use common::eventually;
use serde_json::{json, Value};

fn config(server: &HmServer) -> Value {
    json!({"hypermedia": {"serverUrl": server.url(), "activityPollIntervalMs": 100,
                          "readTimeoutMs": 2000}})
}

fn feed_query(account: &str) -> String {
    format!("pageSize=50&currentAccount={account}&order=observed")
}

/// A resolved comment event on `hm://z6MkDoc/spec` mentioning `mentions`.
fn comment(cid: &str, at_ms: i64, mentions: &[String]) -> Value {
    let annotations: Vec<Value> = mentions
        .iter()
        .map(|m| json!({"type": "Embed", "starts": [0], "ends": [1], "link": m}))
        .collect();
    json!({"id": cid, "type": "comment", "feedEventId": format!("blob-{cid}"),
           "eventAtMs": at_ms,
           "author": {"id": {"id": "hm://z6MkBob", "uid": "z6MkBob", "path": []},
                      "metadata": {"name": "Bob"}},
           "comment": {"id": format!("z6MkBob/z{cid}"), "author": "z6MkBob",
                       "targetAccount": "z6MkDoc", "targetPath": "/spec",
                       "content": [{"block": {"type": "Paragraph", "id": "c1",
                                              "text": "\u{fffc} please look",
                                              "annotations": annotations},
                                    "children": []}]},
           "commentId": {"id": format!("hm://z6MkBob/z{cid}")},
           "target": {"id": {"id": "hm://z6MkDoc/spec", "uid": "z6MkDoc", "path": ["spec"]},
                      "metadata": {"name": "Spec"}}})
}

/// The citation a mention in comment `cid` also shows up as.
fn citation(cid: &str, at_ms: i64, account: &str) -> Value {
    json!({"id": format!("{cid}-m"), "type": "citation", "citationType": "c",
           "feedEventId": format!("mention-{cid}--hm://{account}/:profile"),
           "eventAtMs": at_ms,
           "source": {"id": {"id": format!("hm://z6MkBob/z{cid}")}},
           "target": {"id": {"id": format!("hm://{account}/:profile"), "uid": account,
                             "path": [":profile"]}}})
}

fn feed(events: &[Value]) -> Value {
    json!({"events": events, "nextPageToken": ""})
}

async fn trigger(w: &World, name: &str, source: Value) -> Value {
    let made = w
        .act(
            json!({"_": "CreateAgentTrigger", "agentId": w.agent_id, "trigger": {
            "name": name, "source": source, "prompt": format!("{name}: answer it")}}),
        )
        .await;
    ok(&made);
    json_of(&made.body)["trigger"].clone()
}

async fn firings(w: &World) -> Vec<Value> {
    w.sc.stored(
        "SELECT trigger_id, activity_key, session_id, status FROM agentos_core_trigger_firings \
         ORDER BY created_at_ms, activity_key",
    )
    .await
}

async fn watermark(w: &World) -> Vec<Value> {
    w.sc.stored(
        "SELECT account_id, seen_keys_json, last_error FROM agentos_core_activity_watermarks",
    )
    .await
}

/// A world polling `server`, whose model answers every turn; and its
/// owner's account.
async fn answering_world(server: &HmServer) -> (World, String) {
    let w = world_sections(Flavor::Anthropic, config(server)).await;
    w.provider
        .set_default(Reply::Text(vec!["On it.".to_owned()]));
    let me = w.owner.account.to_string();
    (w, me)
}

/// Waits for the account's first poll that went through.
async fn first_poll(w: &World) {
    eventually("the first poll", || async {
        !watermark(w).await.is_empty()
    })
    .await;
}

/// A `document-comment` trigger on `hm://z6MkDoc/spec`.
async fn spec_comments(w: &World) -> Value {
    trigger(
        w,
        "Spec comments",
        json!({"type": "document-comment", "resource": "hm://z6MkDoc/spec"}),
    )
    .await
}

#[tokio::test]
async fn comments_and_mentions_fire_their_triggers_once_across_restarts() {
    let server = HmServer::start().await;
    let (w, me) = answering_world(&server).await;
    let query = feed_query(&me);
    // Before the triggers: an old comment, already in the feed.
    server.answer(
        "ListEvents",
        &query,
        feed(&[comment("bafyold", 1_000, &[])]),
    );
    let on_spec = spec_comments(&w).await;
    let mentions = trigger(
        &w,
        "Mentions",
        json!({"type": "user-mention", "mentionedAccounts": [me]}),
    )
    .await;
    // The first poll sees the feed and fires nothing from before.
    first_poll(&w).await;
    assert!(firings(&w).await.is_empty());
    let seen = &watermark(&w).await[0];
    assert_eq!(seen["seen_keys_json"], r#"["blob-bafyold"]"#);

    // A new comment mentioning the owner, and then its citation twin.
    let now = on_spec["createdAt"].as_i64().unwrap_or_default() + 1_000;
    let new = comment("bafynew", now, &[format!("hm://{me}")]);
    server.answer(
        "ListEvents",
        &query,
        feed(&[new.clone(), comment("bafyold", 1_000, &[])]),
    );
    eventually("both triggers fired", || async {
        firings(&w).await.len() == 2
    })
    .await;
    server.answer(
        "ListEvents",
        &query,
        feed(&[
            citation("bafynew", now + 1, &me),
            new.clone(),
            comment("bafyold", 1_000, &[]),
        ]),
    );
    eventually("the citation seen", || async {
        watermark(&w).await[0]["seen_keys_json"]
            .as_str()
            .is_some_and(|keys| keys.starts_with(r#"["mention-bafynew"#))
    })
    .await;
    let rows = firings(&w).await;
    assert_eq!(rows.len(), 2, "one firing per trigger: {rows:?}");
    for row in &rows {
        assert_eq!(row["activity_key"], "blob-bafynew");
    }
    let ids: Vec<&Value> = rows.iter().map(|r| &r["trigger_id"]).collect();
    assert!(ids.contains(&&on_spec["id"]) && ids.contains(&&mentions["id"]));

    // The thread's first words: the prompt, then the event as context.
    w.provider_called(2).await;
    let words: Vec<String> = w
        .provider
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(
        words.iter().any(|w| w.contains("Spec comments: answer it")
            && w.contains("<trigger_context>")
            && w.contains("bafynew")
            && w.contains("blob-bafynew")),
        "{words:?}"
    );
    let session = rows[0]["session_id"]
        .as_str()
        .expect("a session")
        .to_owned();
    let got = w.get_session(&session).await;
    let started = &json_of(&got.body)["session"]["startedByTrigger"];
    assert_eq!(started["activityKey"], "blob-bafynew");
    assert_eq!(started["activitySummary"], "comment on Spec");

    // A restart (and a SIGKILL) reads the feed from where it was: nothing
    // fires again; a later comment does.
    let w = w.restart().await;
    let w = w.crash().await;
    eventually("a poll after the restarts", || async {
        watermark(&w).await[0]["last_error"].is_null()
    })
    .await;
    let later = comment("bafylater", now + 10, &[]);
    server.answer(
        "ListEvents",
        &query,
        feed(&[later, citation("bafynew", now + 1, &me), new]),
    );
    eventually("the later comment fired", || async {
        firings(&w).await.len() == 3
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let rows = firings(&w).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[2]["activity_key"], "blob-bafylater");
    assert_eq!(rows[2]["trigger_id"], on_spec["id"]);
}

#[tokio::test]
async fn a_script_waiting_for_activity_hears_the_matching_event() {
    let server = HmServer::start().await;
    let w = world_sections(Flavor::OpenAi, config(&server)).await;
    let me = w.owner.account.to_string();
    let query = feed_query(&me);
    server.answer("ListEvents", &query, feed(&[]));
    // The account's feed is polled while it has a hypermedia trigger.
    trigger(
        &w,
        "Elsewhere",
        json!({"type": "document-comment", "resource": "hm://z6MkOther/doc"}),
    )
    .await;
    let waits = "export default async function (input, ctx) {\n\
                 const e = await ctx.waitForEvent({eventType: 'comment'}, {label: 'a comment'});\n\
                 return {source: e.source, signal: e.signal, id: e.payload.id};\n\
                 }";
    let session = w.session().await;
    w.provider.push(Reply::ToolCalls(vec![(
        "w1".to_owned(),
        "delegate".to_owned(),
        json!({"script": waits, "title": "comment gate"}),
    )]));
    w.provider.push(Reply::Text(vec!["heard".to_owned()]));
    ok(&w.message(&session, "wait for a comment").await);
    let listed = w.sc.ok("runs/list", json!({ "sessionId": session })).await;
    let parent = listed["runs"][0]["id"].as_str().expect("run").to_owned();
    let deadline = tokio::time::Instant::now() + common::PATIENCE;
    let child = loop {
        let tree = w.sc.ok("runs/list", json!({ "rootRunId": parent })).await;
        if let Some(run) = tree["runs"].as_array().and_then(|r| r.get(1)) {
            if run["status"] == "waiting" {
                break run["id"].as_str().unwrap_or_default().to_owned();
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no waiting child");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    first_poll(&w).await;
    server.answer(
        "ListEvents",
        &query,
        feed(&[comment("bafyheard", agentos_tests::seed::now_ms(), &[])]),
    );
    builtin::until_status(&w, &child, "succeeded").await;
    let done = w.sc.ok("runs/get", json!({"runId": child})).await;
    assert_eq!(
        done["run"]["output"],
        json!({"source": "activity", "signal": "activity", "id": "bafyheard"})
    );
    // The trigger on another document did not fire.
    assert!(firings(&w).await.is_empty());
}

#[tokio::test]
async fn a_failed_first_poll_leaves_the_next_one_cold() {
    let server = HmServer::start().await;
    let (w, me) = answering_world(&server).await;
    // A page with no events is as failed as a server error.
    server.answer("ListEvents", &feed_query(&me), json!({"nextPageToken": ""}));
    spec_comments(&w).await;
    eventually("a malformed first page", || async {
        watermark(&w).await.first().is_some_and(|row| {
            row["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("expected {events: [...]}"))
        })
    })
    .await;
    server.fault("ListEvents", Fault::Status(500, "feed down".into()));
    eventually("a failed first poll", || async {
        watermark(&w).await.first().is_some_and(|row| {
            row["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("feed down"))
        })
    })
    .await;
    // The feed comes back holding comments from before the trigger: the
    // poll that now goes through is the first, and fires none of them.
    server.heal("ListEvents");
    server.answer(
        "ListEvents",
        &feed_query(&me),
        feed(&[
            comment("bafyolder", 2_000, &[]),
            comment("bafyold", 1_000, &[]),
        ]),
    );
    eventually("a poll that went through", || async {
        watermark(&w).await[0]["last_error"].is_null()
    })
    .await;
    assert_eq!(
        watermark(&w).await[0]["seen_keys_json"],
        r#"["blob-bafyolder","blob-bafyold"]"#
    );
    // A poll later still, so anything fired would be on record.
    let polls = server.seen().len();
    eventually("another poll", || async { server.seen().len() > polls + 1 }).await;
    assert!(firings(&w).await.is_empty(), "{:?}", firings(&w).await);
}

#[tokio::test]
async fn the_feed_is_read_page_by_page_up_to_a_seen_event_or_the_page_bound() {
    let server = HmServer::start().await;
    let w = world_sections(
        Flavor::Anthropic,
        json!({"hypermedia": {"serverUrl": server.url(), "activityPollIntervalMs": 100,
                              "activityPageSize": 2, "activityMaxPages": 3,
                              "readTimeoutMs": 2000}}),
    )
    .await;
    w.provider
        .set_default(Reply::Text(vec!["On it.".to_owned()]));
    let me = w.owner.account.to_string();
    let page = |token: Option<&str>| match token {
        Some(token) => format!("pageSize=2&pageToken={token}&currentAccount={me}&order=observed"),
        None => format!("pageSize=2&currentAccount={me}&order=observed"),
    };
    let paged = |events: &[Value], next: &str| json!({"events": events, "nextPageToken": next});
    let old = |k: u32| comment(&format!("bafyold{k}"), 1_000 + i64::from(k), &[]);
    // Later pages are answered before the first, so that no poll meets a
    // page not yet there.
    server.answer("ListEvents", &page(Some("a2")), paged(&[old(0)], ""));
    server.answer("ListEvents", &page(None), paged(&[old(2), old(1)], "a2"));
    spec_comments(&w).await;
    first_poll(&w).await;
    // A page of keys is kept, newest first; nothing old fired.
    assert_eq!(
        watermark(&w).await[0]["seen_keys_json"],
        r#"["blob-bafyold2","blob-bafyold1"]"#
    );
    assert!(firings(&w).await.is_empty());

    // Three new comments over two pages; the second holds a seen event,
    // so the third page is never asked for.
    let at = 10_000_000_000_000;
    let new = |k: u32| comment(&format!("bafynew{k}"), at + i64::from(k), &[]);
    server.answer(
        "ListEvents",
        &page(Some("b3")),
        paged(&[old(1), old(0)], "b4"),
    );
    server.answer(
        "ListEvents",
        &page(Some("b2")),
        paged(&[new(1), old(2)], "b3"),
    );
    server.answer("ListEvents", &page(None), paged(&[new(3), new(2)], "b2"));
    eventually("three firings", || async { firings(&w).await.len() == 3 }).await;
    let seen = server.seen();
    assert!(seen.iter().any(|s| s.contains("pageToken=b2")));
    assert!(!seen.iter().any(|s| s.contains("pageToken=b3")), "{seen:?}");

    // Six more than three pages hold: the three pages are read, their six
    // events fire, and the fourth page is never asked for.
    let flood = |k: u32| comment(&format!("bafyflood{k}"), at + 100 + i64::from(k), &[]);
    server.answer(
        "ListEvents",
        &page(Some("c4")),
        paged(&[new(3), new(2)], "c5"),
    );
    server.answer(
        "ListEvents",
        &page(Some("c3")),
        paged(&[flood(2), flood(1)], "c4"),
    );
    server.answer(
        "ListEvents",
        &page(Some("c2")),
        paged(&[flood(4), flood(3)], "c3"),
    );
    server.answer(
        "ListEvents",
        &page(None),
        paged(&[flood(6), flood(5)], "c2"),
    );
    eventually("nine firings", || async { firings(&w).await.len() == 9 }).await;
    let polls = server.seen().len();
    eventually("another poll", || async { server.seen().len() > polls + 3 }).await;
    let seen = server.seen();
    assert!(seen.iter().any(|s| s.contains("pageToken=c3")));
    assert!(!seen.iter().any(|s| s.contains("pageToken=c4")), "{seen:?}");
    let keys: Vec<String> = firings(&w)
        .await
        .iter()
        .filter_map(|row| row["activity_key"].as_str().map(str::to_owned))
        .collect();
    for k in 1..=6 {
        assert!(keys.contains(&format!("blob-bafyflood{k}")), "{keys:?}");
    }
    assert!(!keys.iter().any(|k| k.contains("bafyold")), "{keys:?}");
}

#[tokio::test]
async fn site_updates_fire_by_prefix_and_a_mention_seen_first_as_a_citation_fires_once() {
    let server = HmServer::start().await;
    let (w, me) = answering_world(&server).await;
    let query = feed_query(&me);
    server.answer("ListEvents", &query, feed(&[]));
    let site = trigger(
        &w,
        "Site changes",
        json!({"type": "site-update", "resourcePrefix": "hm://z6MkSite",
               "eventTypes": ["change"]}),
    )
    .await;
    let mentions = trigger(
        &w,
        "Mentions",
        json!({"type": "user-mention", "mentionedAccounts": [me]}),
    )
    .await;
    first_poll(&w).await;
    let at = site["createdAt"].as_i64().unwrap_or_default() + 1_000;
    let update = |cid: &str, doc: &str| {
        json!({"id": cid, "type": "doc-update", "feedEventId": format!("blob-{cid}"),
               "eventAtMs": at, "docId": {"id": doc},
               "author": {"id": {"id": "hm://z6MkBob", "uid": "z6MkBob", "path": []}}})
    };
    // A change under the prefix fires; one elsewhere does not; a mention
    // seen first as its citation fires the mention trigger once.
    server.answer(
        "ListEvents",
        &query,
        feed(&[
            citation("bafycite", at + 2, &me),
            update("bafyother", "hm://z6MkOther/post"),
            update("bafypost", "hm://z6MkSite/blog/post"),
        ]),
    );
    eventually("two firings", || async { firings(&w).await.len() == 2 }).await;
    // Its comment, seen later, is the same mention: nothing more fires.
    let mention = comment("bafycite", at + 1, &[format!("hm://{me}")]);
    server.answer(
        "ListEvents",
        &query,
        feed(&[
            mention,
            citation("bafycite", at + 2, &me),
            update("bafyother", "hm://z6MkOther/post"),
            update("bafypost", "hm://z6MkSite/blog/post"),
        ]),
    );
    eventually("the comment seen", || async {
        watermark(&w).await[0]["seen_keys_json"]
            .as_str()
            .is_some_and(|keys| keys.starts_with(r#"["blob-bafycite""#))
    })
    .await;
    let rows = firings(&w).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    let fired: Vec<(&Value, &Value)> = rows
        .iter()
        .map(|row| (&row["trigger_id"], &row["activity_key"]))
        .collect();
    assert!(
        fired.contains(&(&site["id"], &json!("blob-bafypost"))),
        "{fired:?}"
    );
    assert!(
        fired.contains(&(&mentions["id"], &json!("blob-bafycite"))),
        "{fired:?}"
    );
}

#[tokio::test]
async fn a_sigkill_in_the_middle_of_a_poll_neither_loses_nor_repeats_a_firing() {
    let server = HmServer::start().await;
    let (w, me) = answering_world(&server).await;
    let query = feed_query(&me);
    server.answer("ListEvents", &query, feed(&[]));
    let on_spec = spec_comments(&w).await;
    first_poll(&w).await;
    // Forty new comments in one page, newest first; the sidecar is killed
    // as soon as the first has fired, wherever the others are.
    const COMMENTS: i64 = 40;
    let at = on_spec["createdAt"].as_i64().unwrap_or_default() + 1_000;
    let events: Vec<Value> = (0..COMMENTS)
        .rev()
        .map(|k| comment(&format!("bafyk{k}"), at + k, &[]))
        .collect();
    server.answer("ListEvents", &query, feed(&events));
    eventually("the firings begin", || async {
        !firings(&w).await.is_empty()
    })
    .await;
    let w = w.crash().await;
    eventually("every comment fired", || async {
        firings(&w).await.len() >= COMMENTS as usize
    })
    .await;
    let polls = server.seen().len();
    eventually("more polls", || async { server.seen().len() > polls + 2 }).await;
    let rows = firings(&w).await;
    assert_eq!(rows.len(), COMMENTS as usize, "{rows:?}");
    let keys: std::collections::BTreeSet<&str> = rows
        .iter()
        .filter_map(|row| row["activity_key"].as_str())
        .collect();
    assert_eq!(keys.len(), COMMENTS as usize, "no comment fired twice");
    eventually("every firing has its thread", || async {
        firings(&w)
            .await
            .iter()
            .all(|row| row["session_id"].is_string())
    })
    .await;
}
