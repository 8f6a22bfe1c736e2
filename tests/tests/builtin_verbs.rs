//! The builtin agent's verbs end to end, run by the model through a scripted
//! provider and by the user through `InvokeSessionTool`: touch-expand and
//! promotion of callables, grants (given, missing, withdrawn), what the
//! model receives of a long result against what the log keeps, `status`
//! titles, the user's own verbs on the shared log (and the agent reading
//! them next turn), and the addresses and verbs this sidecar cannot serve.

#[path = "common/builtin.rs"]
mod builtin;
#[path = "signed_ws/client.rs"]
#[allow(dead_code)]
mod client;
mod common;

use agentos_protocol::agent_ext::MODEL_RESULT_BYTES;
use agentos_tests::provider_server::{Flavor, Reply};
use agentos_tests::seed::{bytes, call, Signer};
use builtin::{answer_text, endless, json_of, kinds, ok, text, tool_calls, world, Sent, World};
use serde_json::{json, Value};

/// The Seed events of the tool results, by call id.
fn result_of<'a>(events: &'a [Value], call_id: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == "tool_result" && e["toolCallId"] == call_id)
        .unwrap_or_else(|| panic!("no result for {call_id} in {events:?}"))
}

/// The text the model was sent as the result of `call_id`.
fn sent_result(w: &World, body: &Value, call_id: &str) -> String {
    Sent::new(w.flavor, body)
        .tool_results()
        .into_iter()
        .find(|(id, _)| id == call_id)
        .unwrap_or_else(|| panic!("no result for {call_id} sent: {body}"))
        .1
}

async fn write_memory(w: &World, path: &str, content: &str) {
    ok(&w
        .act(json!({"_": "WriteAgentMemoryFile", "agentId": w.agent_id,
                    "path": path, "content": content}))
        .await);
}

#[tokio::test]
async fn a_callable_answers_its_contract_first_then_is_offered_directly() {
    let w = world(Flavor::OpenAi).await;
    write_memory(&w, "groceries.md", "eggs\nbuy oat milk\n").await;
    let session = w.session().await;

    // First use in the thread: the contract, not a search.
    w.provider.push(tool_calls(&[(
        "c1",
        "call",
        json!({"tool": "memory_search", "input": {"query": "oat"}}),
    )]));
    w.provider.push(text("got the contract"));
    ok(&w.message(&session, "find the milk").await);
    let events = w.events(&session).await;
    let contract = result_of(&events, "c1")["output"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(contract.contains("contract"), "{contract}");
    assert!(!contract.contains("groceries.md"), "not run: {contract}");
    let requests = w.provider.requests();
    assert!(
        !Sent::new(w.flavor, &requests[1].body)
            .tools()
            .contains(&"memory_search".to_owned()),
        "promotion waits for the next turn"
    );

    // The next turn offers `search` by name, and calling it runs it.
    w.provider.push(tool_calls(&[(
        "c2",
        "memory_search",
        json!({"query": "oat"}),
    )]));
    w.provider.push(text("found it"));
    ok(&w.message(&session, "now search").await);
    let requests = w.provider.requests();
    assert_eq!(
        Sent::new(w.flavor, &requests[2].body).tools(),
        [&builtin::VERBS[..], &["memory_search"]].concat()
    );
    let events = w.events(&session).await;
    let hits = &result_of(&events, "c2")["output"]["hits"];
    assert_eq!(hits[0]["address"], "~/memory/groceries.md", "{hits}");
    assert_eq!(hits[0]["excerpt"], "buy oat milk");
    assert!(sent_result(&w, &w.last_body(), "c2").contains("groceries.md"));
    // `call` of an expanded tool runs it too.
    w.provider.push(tool_calls(&[(
        "c3",
        "call",
        json!({"tool": "memory_search", "input": {"query": "eggs"}}),
    )]));
    w.provider.push(text("eggs too"));
    ok(&w.message(&session, "and eggs?").await);
    let events = w.events(&session).await;
    assert_eq!(
        result_of(&events, "c3")["output"]["hits"][0]["address"],
        "~/memory/groceries.md"
    );
}

#[tokio::test]
async fn grants_gate_the_web_and_a_withdrawn_grant_takes_a_promoted_tool_away() {
    let w = world(Flavor::OpenAi).await;
    write_memory(&w, "n.md", "needle\n").await;
    let session = w.session().await;
    w.provider.push(tool_calls(&[
        ("c1", "read", json!({"address": "https://example.com/"})),
        (
            "c2",
            "call",
            json!({"tool": "web_fetch", "input": {"url": "https://example.com/"}}),
        ),
        ("c3", "read", json!({"address": "~/tools/search"})),
    ]));
    w.provider.push(text("no web"));
    ok(&w.message(&session, "look it up").await);
    let events = w.events(&session).await;
    for id in ["c1", "c2"] {
        let error = result_of(&events, id)["error"].as_str().unwrap_or_default();
        assert!(error.starts_with("not_granted:"), "{id}: {error}");
    }
    let body = w.last_body();
    // OpenAI has no error flag on a tool message: the text says so.
    assert!(
        sent_result(&w, &body, "c1").contains("not_granted:"),
        "{body}"
    );

    // Reading the contract promoted `search`; the next turn offers it.
    w.provider.push(text("ready"));
    ok(&w.message(&session, "ok").await);
    let tools = Sent::new(w.flavor, &w.last_body()).tools();
    assert_eq!(tools.last().map(String::as_str), Some("search"));

    // The owner withdraws every grant.
    ok(&w
        .act(json!({"_": "UpdateAgent", "agentId": w.agent_id,
                    "definition": builtin::definition(Some(json!([])))}))
        .await);
    w.provider
        .push(tool_calls(&[("c4", "search", json!({"query": "needle"}))]));
    w.provider.push(text("refused"));
    ok(&w.message(&session, "search again").await);
    let requests = w.provider.requests();
    let first_of_turn = &requests[requests.len() - 2].body;
    assert!(
        !Sent::new(w.flavor, first_of_turn)
            .tools()
            .contains(&"search".to_owned()),
        "a withdrawn grant is not offered"
    );
    let events = w.events(&session).await;
    let error = result_of(&events, "c4")["error"]
        .as_str()
        .unwrap_or_default();
    assert!(error.starts_with("not_granted:"), "{error}");
    assert!(!error.contains("needle\n"), "{error}");

    // Granted `web_fetch`, a page is read only at a public address over
    // https: a private one (cloud metadata, this machine) is refused before
    // any connection, and plain http is not an address the agent reads.
    ok(&w
        .act(json!({"_": "UpdateAgent", "agentId": w.agent_id,
                    "definition": builtin::definition(Some(json!(["web_fetch"])))}))
        .await);
    w.provider.push(tool_calls(&[
        ("c5", "read", json!({"address": "https://127.0.0.1:9/"})),
        ("c6", "read", json!({"address": "http://127.0.0.1:9/"})),
    ]));
    w.provider.push(text("offline"));
    ok(&w.message(&session, "fetch it").await);
    let events = w.events(&session).await;
    let fetched = result_of(&events, "c5")["error"]
        .as_str()
        .unwrap_or_default();
    assert!(fetched.starts_with("address_refused:"), "{fetched}");
    let plain = result_of(&events, "c6")["error"]
        .as_str()
        .unwrap_or_default();
    assert!(plain.starts_with("invalid_address:"), "{plain}");
}

#[tokio::test]
async fn the_model_gets_8_kib_of_a_result_and_the_log_keeps_it_whole() {
    let w = world(Flavor::Anthropic).await;
    let big: String = (0..20 * 1024 / 32)
        .map(|i| format!("line {i:05} of the big memory fi\n"))
        .collect();
    assert_eq!(big.len(), 20 * 1024);
    write_memory(&w, "big.txt", &big).await;
    let session = w.session().await;
    w.provider.push(tool_calls(&[(
        "c1",
        "read",
        json!({"address": "~/memory/big.txt"}),
    )]));
    w.provider.push(text("read it"));
    ok(&w.message(&session, "read the big file").await);
    let events = w.events(&session).await;
    assert_eq!(result_of(&events, "c1")["output"], big.as_str());
    let check = |body: &Value| {
        let sent = sent_result(&w, body, "c1");
        assert!(sent.len() <= MODEL_RESULT_BYTES, "{}", sent.len());
        assert!(sent.contains("[truncated:"), "{sent}");
        assert!(sent.starts_with("line 00000"), "{sent}");
    };
    check(&w.last_body());
    // Rebuilt from the log on the next turn, it is cut the same way.
    w.provider.push(text("still"));
    ok(&w.message(&session, "more").await);
    check(&w.last_body());
}

#[tokio::test]
async fn status_names_the_session_but_never_over_the_users_title() {
    let w = world(Flavor::Google).await;
    let session = w.session().await;
    w.provider.push(tool_calls(&[(
        "c1",
        "status",
        json!({"title": "Groceries", "description": "planning the shopping"}),
    )]));
    w.provider.push(text("named"));
    ok(&w.message(&session, "plan my shopping").await);
    let info = json_of(w.get_session(&session).await.field("session"));
    assert_eq!(info["title"], "Groceries", "{info}");
    assert_eq!(info["description"], "planning the shopping", "{info}");

    ok(&w
        .act(json!({"_": "UpdateSession", "sessionId": session, "title": "My list"}))
        .await);
    w.provider.push(tool_calls(&[(
        "c2",
        "status",
        json!({"title": "Agent's title", "description": "still shopping"}),
    )]));
    w.provider.push(text("kept"));
    ok(&w.message(&session, "carry on").await);
    let info = json_of(w.get_session(&session).await.field("session"));
    assert_eq!(info["title"], "My list", "{info}");
    assert_eq!(info["description"], "still shopping", "{info}");
    let events = w.events(&session).await;
    let last_result = events
        .iter()
        .rev()
        .find(|e| e["type"] == "tool_result")
        .expect("a result");
    assert!(
        last_result["output"]["title"]
            .as_str()
            .is_some_and(|t| t.starts_with("kept")),
        "{last_result}"
    );
}

/// An accepted collaborator of the world's agent.
async fn collaborator(w: &World, role: &str) -> Signer {
    let who = Signer::new();
    ok(&w
        .act(
            json!({"_": "InviteAgentCollaborator", "agentId": w.agent_id,
                    "accountId": who.id(), "role": role}),
        )
        .await);
    ok(&call(
        &w.target,
        &who,
        json!({"_": "AcceptAgentInvite", "agentId": w.agent_id}),
    )
    .await);
    who
}

#[tokio::test]
async fn the_user_runs_verbs_on_the_shared_log() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    let wrote = w
        .invoke(
            &session,
            "write",
            json!({"address": "~/memory/user.md", "content": "from the user"}),
        )
        .await;
    ok(&wrote);
    assert_eq!(answer_text(&wrote, "sessionId"), session);
    assert_eq!(json_of(wrote.field("output"))["path"], "user.md");
    let read = w
        .invoke(&session, "read", json!({"address": "~/memory/user.md"}))
        .await;
    ok(&read);
    assert_eq!(json_of(read.field("output")), "from the user");
    let result_id = answer_text(&read, "resultEventId");
    let records = w.event_records(&session).await;
    let events: Vec<Value> = records.iter().map(|r| r["event"].clone()).collect();
    assert_eq!(
        kinds(&events),
        [
            "tool_call:write",
            "tool_result:write",
            "tool_call:read",
            "tool_result:read"
        ]
    );
    assert_eq!(records[3]["id"], result_id.as_str());
    assert_eq!(
        records[1]["id"].as_str(),
        Some(answer_text(&wrote, "resultEventId").as_str())
    );
    for event in &events {
        assert_eq!(event["actor"], "user", "{event}");
        assert_eq!(event["meta"]["accountId"], w.owner.id().as_str(), "{event}");
        assert_eq!(
            event["meta"]["signerId"],
            w.owner.key_id().as_str(),
            "{event}"
        );
    }
    // A verb that fails is a logged result, answered in `error`.
    let missing = w
        .invoke(&session, "read", json!({"address": "~/memory/nope.md"}))
        .await;
    ok(&missing);
    assert!(
        answer_text(&missing, "error").starts_with("not_found:"),
        "{:?}",
        missing.body
    );
    // The agent's own verbs are not the user's.
    let status = w.invoke(&session, "status", json!({"title": "x"})).await;
    assert_eq!(status.status, 400, "{:?}", status.body);

    // Who may: a writer collaborator acts as themself; a reader is
    // forbidden; a stranger does not see the session at all.
    let writer = collaborator(&w, "writer").await;
    let by_writer = w
        .invoke_as(&writer, &session, "read", json!({"address": "~/memory/"}))
        .await;
    ok(&by_writer);
    let events = w.events(&session).await;
    assert_eq!(
        events.last().expect("the writer's result")["meta"]["accountId"],
        writer.id().as_str()
    );
    let reader = collaborator(&w, "reader").await;
    let by_reader = w
        .invoke_as(&reader, &session, "read", json!({"address": "~/memory/"}))
        .await;
    assert_eq!(by_reader.status, 403, "{:?}", by_reader.body);
    let stranger = Signer::new();
    let by_stranger = w
        .invoke_as(&stranger, &session, "read", json!({"address": "~/memory/"}))
        .await;
    assert_eq!(by_stranger.status, 404, "{:?}", by_stranger.body);
    let unknown = w
        .invoke("no-such-session", "read", json!({"address": "~/memory/"}))
        .await;
    assert_eq!(unknown.status, 404, "{:?}", unknown.body);
    let before = w.events(&session).await.len();

    // Not while a turn is live.
    let (deltas, gap) = endless(1000);
    w.provider.push(Reply::Slow { deltas, gap });
    let turn = w.message_in_background(&session, "talk slowly");
    w.provider_called(1).await;
    let busy = w
        .invoke(&session, "read", json!({"address": "~/memory/user.md"}))
        .await;
    assert_eq!(busy.status, 409, "{:?}", busy.body);
    ok(&w.stop(&session).await);
    ok(&turn.await.expect("the turn task"));
    let events = w.events(&session).await;
    assert_eq!(
        kinds(&events[before..]),
        ["user:talk slowly"],
        "nothing of the refused call was logged"
    );

    // The agent reads the user's actions on its next turn.
    w.provider.push(text("I see"));
    ok(&w.message(&session, "what did I do?").await);
    let users = Sent::new(w.flavor, &w.last_body()).user_texts();
    let actions = users
        .iter()
        .find(|t| t.contains("<user_action"))
        .unwrap_or_else(|| panic!("no user action sent: {users:?}"));
    assert!(
        actions.contains("<user_action verb=\"write\">"),
        "{actions}"
    );
    assert!(actions.contains("from the user"), "{actions}");
    assert!(
        actions.contains("<user_action_result status=\"error\">"),
        "{actions}"
    );
    assert_eq!(users.last().map(String::as_str), Some("what did I do?"));
}

#[tokio::test]
async fn a_bad_verb_is_refused_before_anything_runs() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    for verb in ["delegate", "READ", ""] {
        let refused = w.invoke(&session, verb, json!({})).await;
        assert_eq!(refused.status, 400, "{verb}: {:?}", refused.body);
    }
    let no_input = call(
        &w.target,
        &w.owner,
        json!({"_": "InvokeSessionTool", "sessionId": session, "verb": "read"}),
    )
    .await;
    assert_eq!(no_input.status, 400, "{:?}", no_input.body);
    // Input a verb cannot read as JSON (bytes) is refused, naming where.
    let not_json = w
        .invoke(&session, "read", json!({"address": bytes("notes")}))
        .await;
    assert_eq!(not_json.status, 400, "{:?}", not_json.body);
    assert_eq!(answer_text(&not_json, "code"), "bad_request");
    assert!(
        answer_text(&not_json, "message").contains("/address: bytes have no JSON form"),
        "{:?}",
        not_json.body
    );
    assert!(w.events(&session).await.is_empty());
}

#[tokio::test]
async fn seed_addresses_and_malformed_run_verbs_answer_readable_errors() {
    // A hypermedia server that is not there.
    let w = builtin::world_sections(
        Flavor::Anthropic,
        json!({"hypermedia": {"serverUrl": "http://127.0.0.1:9"}}),
    )
    .await;
    let session = w.session().await;
    w.provider.push(tool_calls(&[
        ("c1", "read", json!({"address": "hm://z6MkExample/notes"})),
        ("c2", "delegate", json!({"task": "split the work"})),
        ("c3", "plan", json!({"steps": ["one"]})),
        ("c4", "return_result", json!({"value": 1})),
    ]));
    w.provider.push(text("understood"));
    ok(&w.message(&session, "use the network").await);
    let events = w.events(&session).await;
    let body = w.last_body();
    // The run verbs read their input strictly and say what is wrong.
    for (id, code) in [
        ("c1", "hm_unreachable:"),
        ("c2", "invalid_argument: delegate has no field `task`"),
        ("c3", "invalid_argument: steps[0].label"),
        ("c4", "invalid_argument: return_result"),
    ] {
        let error = result_of(&events, id)["error"].as_str().unwrap_or_default();
        assert!(error.starts_with(code), "{id}: {error}");
        assert!(sent_result(&w, &body, id).starts_with(code), "{body}");
    }
    assert_eq!(
        kinds(&events).last().map(String::as_str),
        Some("assistant:understood")
    );
    let by_user = w
        .invoke(
            &session,
            "read",
            json!({"address": "hm://z6MkExample/notes"}),
        )
        .await;
    ok(&by_user);
    assert!(
        answer_text(&by_user, "error").starts_with("hm_unreachable:"),
        "{:?}",
        by_user.body
    );
}

#[tokio::test]
async fn a_retry_after_a_partial_tool_loop_asks_before_it_acts() {
    let w = world(Flavor::Anthropic).await;
    let session = w.session().await;
    w.provider.push(tool_calls(&[(
        "c1",
        "write",
        json!({"address": "~/memory/a.md", "content": "half done"}),
    )]));
    w.provider.push(Reply::Status(
        529,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
            .to_string(),
    ));
    let failed = w.message(&session, "do the thing").await;
    assert_eq!(failed.status, 502, "{:?}", failed.body);
    assert_eq!(
        kinds(&w.events(&session).await),
        [
            "user:do the thing",
            "tool_call:write",
            "tool_result:write",
            "error"
        ]
    );
    w.provider.push(text("done"));
    ok(&w
        .act(json!({"_": "RetrySession", "sessionId": session}))
        .await);
    let body = w.last_body();
    let sent = Sent::new(w.flavor, &body);
    // The API takes a conversation that starts with the user; whatever
    // the retry keeps of the failed attempt comes after the words that
    // asked for it.
    assert_eq!(
        sent.roles().first().map(String::as_str),
        Some("user"),
        "{body}"
    );
    assert_eq!(
        sent.user_texts().first().map(String::as_str),
        Some("do the thing"),
        "{body}"
    );
    assert_eq!(
        sent.user_texts()
            .iter()
            .filter(|t| *t == "do the thing")
            .count(),
        1,
        "{body}"
    );
}

#[tokio::test]
async fn continue_session_hands_the_work_to_a_successor() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    w.provider.push(tool_calls(&[(
        "c1",
        "continue_session",
        json!({"reason": "too long", "title": "Part two", "handoff": "finish the list"}),
    )]));
    // The successor's first turn.
    w.provider.push(text("picking up"));
    ok(&w.message(&session, "keep going").await);
    let events = w.events(&session).await;
    assert_eq!(
        kinds(&events),
        [
            "user:keep going",
            "tool_call:continue_session",
            "tool_result:continue_session"
        ],
        "the turn ends with the handoff"
    );
    let successor = result_of(&events, "c1")["output"]["sessionId"]
        .as_str()
        .expect("the successor's id")
        .to_owned();
    common::eventually("the successor's first turn", || async {
        w.provider.requests().len() >= 2 && w.provider.pending() == 0
    })
    .await;
    let listed = w
        .act(json!({"_": "ListSessions", "agentId": w.agent_id}))
        .await;
    ok(&listed);
    assert!(
        json_of(listed.field("sessions"))
            .as_array()
            .expect("sessions")
            .iter()
            .any(|s| s["id"] == successor.as_str() && s["title"] == "Part two"),
        "{:?}",
        listed.body
    );
    common::eventually("the successor's reply is stored", || async {
        kinds(&w.events(&successor).await)
            .last()
            .is_some_and(|k| k == "assistant:picking up")
    })
    .await;
    let first = &w.provider.requests()[1].body;
    let users = Sent::new(w.flavor, first).user_texts();
    assert_eq!(users.len(), 1, "{first}");
    assert!(users[0].contains(&format!("thread:{session}")), "{users:?}");
    assert!(users[0].contains("finish the list"), "{users:?}");
}

#[tokio::test]
async fn subscribers_see_the_users_verbs_as_they_are_logged() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    let addr = w.sc.ready["http"].as_str().expect("http").to_owned();
    let mut ws = client::Ws::open(&addr).await;
    ws.subscribed(&w.owner, &format!("sessions/{session}"), None)
        .await;
    let wrote = w
        .invoke(
            &session,
            "write",
            json!({"address": "~/memory/live.md", "content": "seen live"}),
        )
        .await;
    ok(&wrote);
    let call = ws.next_where(|e| e["_"] == "append").await;
    assert_eq!(call["event"]["event"]["type"], "tool_call", "{call}");
    assert_eq!(call["event"]["event"]["actor"], "user");
    let result = ws.next_where(|e| e["_"] == "append").await;
    assert_eq!(result["event"]["event"]["type"], "tool_result", "{result}");
    assert_eq!(
        result["event"]["id"],
        answer_text(&wrote, "resultEventId").as_str()
    );
    assert_eq!(
        result["event"]["event"]["meta"]["signerId"],
        w.owner.key_id().as_str()
    );
}

#[tokio::test]
async fn a_step_runs_at_most_32_calls_and_the_log_keeps_ids_unique() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    // Forty calls, every one named `dup` by the provider.
    let calls: Vec<(&str, &str, Value)> = (0..40)
        .map(|_| ("dup", "read", json!({"address": "~/memory/"})))
        .collect();
    w.provider.push(tool_calls(&calls));
    w.provider.push(text("done"));
    ok(&w.message(&session, "look everywhere").await);
    let events = w.events(&session).await;
    let ids: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "tool_call")
        .filter_map(|e| e["id"].as_str())
        .collect();
    assert_eq!(ids.len(), 32, "{ids:?}");
    let unique: std::collections::BTreeSet<&&str> = ids.iter().collect();
    assert_eq!(unique.len(), 32, "{ids:?}");
    // The provider heard back about all forty, the last eight as not run.
    let body = w.last_body();
    let results = Sent::new(Flavor::OpenAi, &body).tool_results();
    assert_eq!(results.len(), 40, "{results:?}");
    let not_run = results
        .iter()
        .filter(|(_, content)| content.contains("not run"))
        .count();
    assert_eq!(not_run, 8, "{results:?}");
}
