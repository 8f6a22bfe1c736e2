//! The builtin model agent end to end: a real sidecar whose `builtin`
//! sessions start `agentos-sidecar agent`, a scripted provider on loopback
//! standing in for OpenAI, Anthropic or Google, and signed actions (or the
//! host socket) driving turns. What the provider was sent (system prompt,
//! tools, transcript, key) and what the log holds afterwards are both
//! checked, as are live deltas, a queued message, model listings, and that
//! no other adapter reaches `_agentos/*`. Failures, stops and restarts are
//! in `builtin_recovery.rs`, the verbs in `builtin_verbs.rs`.

#[path = "common/builtin.rs"]
mod builtin;
#[path = "signed_ws/client.rs"]
#[allow(dead_code)]
mod client;
mod common;

use agentos_tests::provider_server::{Flavor, Reply, INPUT_TOKENS};
use agentos_tests::seed::call;
use builtin::{answer_text, flavor_type, key_header, kinds, ok, world, Sent, KEY, VERBS};
use client::Ws;
use serde_json::json;

#[tokio::test]
async fn a_text_turn_streams_the_reply_and_sends_the_agent_to_the_provider() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    w.provider.push(Reply::Text(vec![
        "Hel".into(),
        "lo".into(),
        " there".into(),
    ]));
    let said = w.message(&session, "hi").await;
    ok(&said);
    assert!(!answer_text(&said, "assistantEventId").is_empty());
    let events = w.events(&session).await;
    assert_eq!(kinds(&events), ["user:hi", "assistant:Hello there"]);
    assert_eq!(events[1]["actor"], "agent");
    let request = w.last_request();
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let body = request.body;
    assert_eq!(body["model"], "scripted-model");
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(system.starts_with("Be brief."), "{system}");
    assert!(system.contains("<space>"), "{system}");
    assert_eq!(Sent::new(Flavor::OpenAi, &body).tools(), VERBS);
    assert_eq!(body["messages"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        body["messages"][1]["content"],
        format!(
            "<message_sender>\n{{\"accountId\":\"{}\"}}\n</message_sender>\n\nhi",
            w.owner.id()
        )
    );
    // A second turn carries the first one back from the log.
    w.provider.push(Reply::Text(vec!["again".into()]));
    ok(&w.message(&session, "more").await);
    let body = w.last_body();
    assert_eq!(
        Sent::new(Flavor::OpenAi, &body).roles(),
        ["system", "user", "assistant", "user"]
    );
    assert_eq!(body["messages"][2]["content"], "Hello there");
}

#[tokio::test]
async fn memory_writes_and_reads_are_visible_tool_calls() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    w.provider.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "write".into(),
        json!({"address": "~/memory/notes.md", "content": "remember the milk"}),
    )]));
    w.provider.push(Reply::Text(vec!["saved".into()]));
    ok(&w.message(&session, "note it").await);
    let events = w.events(&session).await;
    assert_eq!(
        kinds(&events),
        [
            "user:note it",
            "tool_call:write",
            "tool_result:write",
            "assistant:saved"
        ]
    );
    assert_eq!(events[1]["actor"], "agent");
    let read = w
        .act(json!({"_": "ReadAgentMemoryFile", "agentId": w.agent_id, "path": "notes.md"}))
        .await;
    ok(&read);
    assert_eq!(
        builtin::json_of(read.field("file"))["content"],
        "remember the milk"
    );
    // The tool result went back to the provider in its own message.
    let body = w.last_body();
    let results = Sent::new(Flavor::OpenAi, &body).tool_results();
    assert_eq!(results.len(), 1, "{body}");
    assert_eq!(results[0].0, "c1");
}

/// A text turn, then a tool-call turn, in `flavor`'s API.
async fn text_and_tool_turns(flavor: Flavor) {
    let w = world(flavor).await;
    let session = w.session().await;
    w.provider
        .push(Reply::Text(vec!["Hi".into(), " there".into()]));
    ok(&w.message(&session, "hello").await);
    let request = w.last_request();
    let (header, value) = key_header(flavor);
    assert_eq!(request.header(header), Some(value.as_str()), "{flavor:?}");
    if flavor == Flavor::Anthropic {
        assert!(request.header("anthropic-version").is_some());
    }
    for other in ["authorization", "x-api-key", "x-goog-api-key"] {
        if other != header {
            assert_eq!(request.header(other), None, "{flavor:?}: {other}");
        }
    }
    match flavor {
        Flavor::Google => assert!(
            request
                .path
                .starts_with("/v1beta/models/scripted-model:streamGenerateContent"),
            "{}",
            request.path
        ),
        _ => assert_eq!(request.body["model"], "scripted-model"),
    }
    let sent = Sent::new(flavor, &request.body);
    let system = sent.system();
    assert!(system.starts_with("Be brief."), "{system}");
    assert!(system.contains("durable session"), "{system}");
    assert!(
        system.contains("<space>") && system.contains("- search — "),
        "{system}"
    );
    assert_eq!(sent.tools(), VERBS);
    assert_eq!(sent.user_texts(), ["hello"]);

    w.provider.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "write".into(),
        json!({"address": "~/memory/a.md", "content": "alpha"}),
    )]));
    w.provider.push(Reply::Text(vec!["done".into()]));
    ok(&w.message(&session, "save").await);
    let events = w.events(&session).await;
    assert_eq!(
        kinds(&events),
        [
            "user:hello",
            "assistant:Hi there",
            "user:save",
            "tool_call:write",
            "tool_result:write",
            "assistant:done"
        ],
        "{flavor:?}"
    );
    assert_eq!(events[3]["input"]["address"], "~/memory/a.md");
    assert_eq!(events[4]["output"]["path"], "a.md");
    // Provenance as the reference's `SessionEventMeta`: who wrote the
    // user's words; which model wrote a reply, on which provider, at what
    // cost and in how long; how long a tool took.
    assert_eq!(events[0]["meta"]["accountId"], w.owner.id().as_str());
    assert_eq!(events[0]["meta"]["signerId"], w.owner.key_id().as_str());
    for reply in [&events[1], &events[5]] {
        let meta = &reply["meta"];
        assert_eq!(meta["model"], "scripted-model", "{reply}");
        assert_eq!(meta["provider"], flavor_type(flavor), "{reply}");
        assert_eq!(meta["usage"]["input"], INPUT_TOKENS, "{reply}");
        let output = meta["usage"]["output"].as_u64().expect("output tokens");
        assert!(output > 0, "{reply}");
        assert_eq!(meta["usage"]["total"], INPUT_TOKENS + output, "{reply}");
        assert_eq!(meta["usage"]["cacheRead"], 0, "{reply}");
        assert!(meta["durationMs"].is_u64(), "{reply}");
        assert!(reply.get("clientMessageId").is_none(), "{reply}");
    }
    assert!(events[4]["meta"]["durationMs"].is_u64(), "{}", events[4]);
    let body = w.last_body();
    let sent = Sent::new(flavor, &body);
    let results = sent.tool_results();
    assert_eq!(results.len(), 1, "{body}");
    // Google has no call ids: its results name the function.
    let expected_id = if flavor == Flavor::Google {
        "write"
    } else {
        "c1"
    };
    assert_eq!(results[0].0, expected_id, "{body}");
    assert!(results[0].1.contains("a.md"), "{body}");
    let (roles, call) = match flavor {
        Flavor::OpenAi => (
            vec!["system", "user", "assistant", "user", "assistant", "tool"],
            body["messages"][4]["tool_calls"][0].clone(),
        ),
        Flavor::Anthropic => (
            vec!["user", "assistant", "user", "assistant", "user"],
            body["messages"][3]["content"][0].clone(),
        ),
        Flavor::Google => (
            vec!["user", "model", "user", "model", "user"],
            body["contents"][3]["parts"][0].clone(),
        ),
    };
    assert_eq!(sent.roles(), roles, "{body}");
    match flavor {
        Flavor::OpenAi => {
            assert_eq!(call["id"], "c1");
            assert_eq!(call["function"]["name"], "write");
        }
        Flavor::Anthropic => {
            assert_eq!(call["type"], "tool_use");
            assert_eq!(call["id"], "c1");
            assert_eq!(call["input"]["content"], "alpha");
        }
        Flavor::Google => {
            assert_eq!(call["functionCall"]["name"], "write");
            assert_eq!(call["functionCall"]["args"]["content"], "alpha");
        }
    }
    let read = w
        .act(json!({"_": "ReadAgentMemoryFile", "agentId": w.agent_id, "path": "a.md"}))
        .await;
    ok(&read);
}

/// A message sent the way Seed's desktop sends it: the stored user event
/// echoes the part's `clientMessageId`, keeps its rich `blocks` and its
/// text as `rawMarkdown`, and names its sender under `meta`.
#[tokio::test]
async fn a_desktop_message_is_stored_as_the_reference_stores_it() {
    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    w.provider.push(Reply::Text(vec!["Seen.".into()]));
    let blocks = json!([{"type": "Paragraph", "text": "Look at ",
                         "annotations": [{"type": "Embed", "link": "hm://z6Mkdoc"}]}]);
    ok(&w
        .act(json!({"_": "MessageSession", "sessionId": session,
                    "content": [{"type": "text", "text": "Look at this",
                                 "blocks": blocks, "clientMessageId": "cm-1"}],
                    "clientMessageId": "cm-1"}))
        .await);
    // Only the action's id: the one text part echoes it.
    w.provider.push(Reply::Text(vec!["Again.".into()]));
    ok(&w
        .act(json!({"_": "MessageSession", "sessionId": session,
                    "content": [{"type": "text", "text": "and this"}],
                    "clientMessageId": "cm-2"}))
        .await);
    let events = w.events(&session).await;
    assert_eq!(
        kinds(&events),
        [
            "user:Look at this",
            "assistant:Seen.",
            "user:and this",
            "assistant:Again."
        ]
    );
    let user = &events[0];
    assert_eq!(user["clientMessageId"], "cm-1", "{user}");
    assert_eq!(user["rawMarkdown"], "Look at this", "{user}");
    assert_eq!(user["blocks"], blocks, "{user}");
    assert_eq!(user["meta"]["accountId"], w.owner.id().as_str(), "{user}");
    assert_eq!(
        user["meta"]["signerId"],
        w.owner.key_id().as_str(),
        "{user}"
    );
    assert!(
        user.get("account").is_none() && user.get("signer").is_none(),
        "{user}"
    );
    assert_eq!(events[2]["clientMessageId"], "cm-2", "{}", events[2]);
    assert!(events[2].get("blocks").is_none(), "{}", events[2]);
    assert!(events[1].get("clientMessageId").is_none(), "{}", events[1]);
    // The model reads the words, not the blocks.
    let sent = w.provider.requests()[0].body.to_string();
    assert!(!sent.contains("hm://z6Mkdoc"), "{sent}");

    // Blocks that are not plain data (bytes) are refused, naming where,
    // and nothing is appended.
    let refused = w
        .act(json!({"_": "MessageSession", "sessionId": session,
                    "content": [{"type": "text", "text": "x",
                                 "blocks": [{"type": "Image", "data": {"/": {"bytes": "AAAA"}}}]}]}))
        .await;
    assert_eq!(refused.status, 400, "{:?}", refused.body);
    assert_eq!(answer_text(&refused, "code"), "bad_request");
    assert!(answer_text(&refused, "message").contains("/0/data"));
    assert_eq!(w.events(&session).await.len(), events.len());
}

#[tokio::test]
async fn openai_text_and_tool_turns() {
    text_and_tool_turns(Flavor::OpenAi).await;
}

#[tokio::test]
async fn anthropic_text_and_tool_turns() {
    text_and_tool_turns(Flavor::Anthropic).await;
}

#[tokio::test]
async fn google_text_and_tool_turns() {
    text_and_tool_turns(Flavor::Google).await;
}

/// A new session, and a socket subscribed to it.
async fn watched_session(w: &builtin::World) -> (String, Ws) {
    let session = w.session().await;
    let addr = w.sc.ready["http"].as_str().expect("http").to_owned();
    let mut ws = Ws::open(&addr).await;
    ws.subscribed(&w.owner, &format!("sessions/{session}"), None)
        .await;
    (session, ws)
}

/// A busy provider's pause is the turn's activity on the live feed: the
/// agent says it waits, and why, then the answer streams.
#[tokio::test]
async fn a_wait_for_a_busy_provider_shows_as_the_turns_activity() {
    let w = world(Flavor::OpenAi).await;
    let (session, mut ws) = watched_session(&w).await;
    w.provider.push(Reply::RetryAfter(
        429,
        json!({"error": {"message": "slow down", "type": "rate_limit_error"}}).to_string(),
        "1".into(),
    ));
    w.provider.push(Reply::Text(vec!["Here.".into()]));
    let turn = w.message_in_background(&session, "now");
    let waiting = ws
        .next_where(|e| e["patch"]["activity"]["detail"].is_string())
        .await;
    assert_eq!(waiting["_"], "appendPartial");
    assert_eq!(waiting["patch"]["activity"]["phase"], "thinking");
    let detail = waiting["patch"]["activity"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(
        detail.contains("HTTP 429") && detail.contains("1 of 3"),
        "{detail}"
    );
    ok(&turn.await.expect("the turn task"));
    assert_eq!(
        kinds(&w.events(&session).await),
        ["user:now", "assistant:Here."],
        "the wait left nothing in the log"
    );
}

#[tokio::test]
async fn websocket_subscribers_see_deltas_then_the_message_once() {
    let w = world(Flavor::Anthropic).await;
    let (session, mut ws) = watched_session(&w).await;
    assert_eq!(ws.next().await["_"], "change");
    let deltas: Vec<String> = ["Once ", "upon ", "a ", "time"].map(str::to_owned).to_vec();
    w.provider.push(Reply::Slow {
        deltas: deltas.clone(),
        gap: std::time::Duration::from_millis(40),
    });
    let turn = w.message_in_background(&session, "tell me");
    let user = ws.next_where(|e| e["_"] == "append").await;
    assert_eq!(user["event"]["event"]["role"], "user");
    let mut pieces = Vec::new();
    let mut partial_id = None;
    loop {
        let event = ws.next().await;
        match event["_"].as_str() {
            Some("appendPartial") if event["patch"]["done"] == true => {
                assert_eq!(event["partialId"].as_str(), partial_id.as_deref());
                break;
            }
            Some("appendPartial") => {
                let id = event["partialId"].as_str().expect("partialId").to_owned();
                assert_eq!(partial_id.get_or_insert(id.clone()), &id);
                if let Some(delta) = event["patch"]["textDelta"].as_str() {
                    pieces.push(delta.to_owned());
                }
            }
            Some("change") => {}
            _ => panic!("before the message: {event}"),
        }
    }
    assert_eq!(pieces, deltas, "every delta, in order");
    let message = ws.next().await;
    assert_eq!(message["_"], "append", "{message}");
    assert_eq!(message["event"]["event"]["role"], "assistant");
    assert_eq!(message["event"]["event"]["content"], "Once upon a time");
    let idle = ws
        .next_where(|e| {
            e["_"] == "append" || (e["_"] == "change" && e["value"]["status"] == "idle")
        })
        .await;
    assert_eq!(idle["_"], "change", "the message is appended once: {idle}");
    ok(&turn.await.expect("the turn task"));
    let events = w.events(&session).await;
    assert_eq!(
        kinds(&events),
        ["user:tell me", "assistant:Once upon a time"]
    );
}

#[tokio::test]
async fn a_host_socket_prompt_runs_a_builtin_turn() {
    let mut w = world(Flavor::Google).await;
    let session = w.session().await;
    w.sc.ok("sessions/subscribe", json!({"sessionId": session}))
        .await;
    w.provider.push(Reply::Text(vec![
        "from".into(),
        " the".into(),
        " host".into(),
    ]));
    let answer =
        w.sc.prompt(&session, "over the socket")
            .await
            .expect("the prompt");
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    let mut live = String::new();
    while live != "from the host" {
        let (_, note) =
            w.sc.next_note(|m, p| {
                m == "sessions/update" && p["update"]["sessionUpdate"] == "agent_message_chunk"
            })
            .await;
        assert_eq!(note["sessionId"], session.as_str());
        live.push_str(note["update"]["content"]["text"].as_str().unwrap_or(""));
    }
    let events = w.events(&session).await;
    assert_eq!(
        kinds(&events),
        ["user:over the socket", "assistant:from the host"]
    );
    let sent = Sent::new(Flavor::Google, &w.provider.requests()[0].body).user_texts();
    assert_eq!(sent, ["over the socket"]);
}

#[tokio::test]
async fn provider_models_are_listed_through_the_key() {
    for flavor in [Flavor::OpenAi, Flavor::Anthropic, Flavor::Google] {
        let w = world(flavor).await;
        w.provider.push(Reply::Models(vec![
            ("m-one".into(), "Model One".into()),
            ("m-two".into(), "Model Two".into()),
        ]));
        let listed = w
            .act(json!({"_": "ListProviderModels", "provider": "main"}))
            .await;
        ok(&listed);
        let models = builtin::json_of(listed.field("models"));
        let ids: Vec<&str> = models
            .as_array()
            .expect("models")
            .iter()
            .filter_map(|m| m["id"].as_str())
            .collect();
        assert_eq!(ids, ["m-one", "m-two"], "{flavor:?}: {models}");
        let request = w.last_request();
        let (header, value) = key_header(flavor);
        assert_eq!(request.header(header), Some(value.as_str()), "{flavor:?}");
        assert_eq!(request.method, "GET");

        w.provider.push(Reply::Status(
            401,
            json!({"error": {"message": "key revoked by the scripted provider"}}).to_string(),
        ));
        let refused = w
            .act(json!({"_": "ListProviderModels", "provider": "main"}))
            .await;
        assert!(!(200..300).contains(&refused.status), "{:?}", refused.body);
        assert!(
            answer_text(&refused, "message").contains("key revoked by the scripted provider"),
            "{:?}",
            refused.body
        );
        let missing = w
            .act(json!({"_": "ListProviderModels", "provider": "nope"}))
            .await;
        assert_eq!(missing.status, 404, "{:?}", missing.body);
    }
}

#[tokio::test]
async fn other_adapters_cannot_reach_the_agent_extension() {
    let w = world(Flavor::OpenAi).await;
    // A Seed agent on the scripted fake adapter, whose owner's provider
    // has a key: the adapter asks for it and hears "method not found".
    let mut definition = builtin::definition(None);
    definition["adapter"] = json!("echo");
    let created = w
        .act(json!({"_": "CreateAgent", "definition": definition}))
        .await;
    ok(&created);
    let seed_session = call(
        &w.target,
        &w.owner,
        json!({"_": "CreateSession", "agentId": answer_text(&created, "agentId")}),
    )
    .await;
    ok(&seed_session);
    let seed_session = answer_text(&seed_session, "sessionId");
    for method in ["_agentos/provider_key", "_agentos/context", "_agentos/verb"] {
        ok(&w
            .message(&seed_session, &format!("client_request {method}"))
            .await);
        let events = w.events(&seed_session).await;
        let reply = events.last().expect("a reply")["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(reply.starts_with("error -32601"), "{method}: {reply}");
        assert!(!reply.contains(KEY), "{reply}");
    }
    // A host-socket session of the same adapter, too.
    w.sc.open("plain", "echo").await;
    let answer =
        w.sc.prompt("plain", "client_request _agentos/provider_key")
            .await
            .expect("the prompt");
    assert_eq!(answer["stopReason"], "end_turn");
    let history = w.sc.history("plain").await;
    let reply = history
        .iter()
        .rev()
        .find_map(|e| e["content"]["text"].as_str())
        .unwrap_or_default();
    assert!(reply.starts_with("error -32601"), "{reply}");
    assert!(w.provider.requests().is_empty(), "no provider was called");
}

#[tokio::test]
async fn a_turn_on_the_actor_socket_backend() {
    let w = builtin::world_on(Flavor::OpenAi, common::Backend::ActorUds).await;
    let session = w.session().await;
    w.provider.push(Reply::Text(vec!["over ars".into()]));
    ok(&w.message(&session, "hi").await);
    assert_eq!(
        kinds(&w.events(&session).await),
        ["user:hi", "assistant:over ars"]
    );
}

#[tokio::test]
async fn a_queued_message_sees_the_answer_it_waited_for() {
    let mut w = world(Flavor::Anthropic).await;
    let session = w.session().await;
    w.sc.ok("sessions/subscribe", json!({"sessionId": session}))
        .await;
    w.provider.push(Reply::Slow {
        deltas: ["first ", "answer ", "in ", "pieces"]
            .map(str::to_owned)
            .to_vec(),
        gap: std::time::Duration::from_millis(100),
    });
    w.provider.push(Reply::Text(vec!["second answer".into()]));
    let first = w.message_in_background(&session, "first question");
    w.sc.next_note(|m, p| {
        m == "sessions/update" && p["update"]["sessionUpdate"] == "agent_message_chunk"
    })
    .await;
    // Sent while the first turn streams: queued behind it.
    let second = w.message_in_background(&session, "second question");
    ok(&first.await.expect("the first turn"));
    ok(&second.await.expect("the second turn"));
    let requests = w.provider.requests();
    assert_eq!(requests.len(), 2);
    let body = &requests[1].body;
    let sent = Sent::new(Flavor::Anthropic, body);
    assert_eq!(sent.roles(), ["user", "assistant", "user"], "{body}");
    assert_eq!(sent.user_texts(), ["first question", "second question"]);
    assert_eq!(
        body["messages"][1]["content"][0]["text"],
        "first answer in pieces"
    );
    let first_body = &requests[0].body;
    assert_eq!(
        Sent::new(Flavor::Anthropic, first_body).user_texts(),
        ["first question"],
        "a queued message is not part of the turn before it"
    );
}

#[tokio::test]
async fn a_clients_endpoint_on_this_machine_is_never_called() {
    let w = world(Flavor::OpenAi).await;
    // A custom provider whose baseUrl is the (loopback) scripted server:
    // an account must not make the sidecar call what only the machine
    // reaches.
    ok(&w
        .act(json!({"_": "SetModelProvider", "name": "local",
                    "provider": {"type": "custom", "baseUrl": w.provider.base_url(),
                                 "secretRefs": {"apiKey": "key"}}}))
        .await);
    let mut definition = builtin::definition(None);
    definition["modelProvider"] = json!("local");
    let created = w
        .act(json!({"_": "CreateAgent", "definition": definition}))
        .await;
    ok(&created);
    let session = w
        .act(json!({"_": "CreateSession", "agentId": answer_text(&created, "agentId")}))
        .await;
    ok(&session);
    let session = answer_text(&session, "sessionId");
    let failed = w.message(&session, "hi").await;
    assert!(!(200..300).contains(&failed.status), "{:?}", failed.body);
    let events = w.events(&session).await;
    let error = events.last().expect("an error event");
    assert_eq!(error["type"], "error", "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("not a public address")),
        "{error}"
    );
    let listed = w
        .act(json!({"_": "ListProviderModels", "provider": "local"}))
        .await;
    assert_eq!(
        (listed.status, listed.code().as_str()),
        (502, "provider_rejected"),
        "{:?}",
        listed.body
    );
    assert_eq!(w.provider.requests().len(), 0, "the provider was called");
}

/// An idle builtin session holds no process (`builtin.idleAgentMs`): with
/// 0 its agent ends as soon as its turn has, and the next turn starts
/// another that goes on from the log; by default (30 s) it stays for the
/// turns that follow soon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_builtin_session_holds_no_process() {
    let w = builtin::world_configured(Flavor::OpenAi, json!({"idleAgentMs": 0})).await;
    let session = w.session().await;
    w.provider.push(Reply::Text(vec!["First.".into()]));
    ok(&w.message(&session, "one").await);
    common::eventually("the idle agent ends", || async {
        w.sc.live_adapters().await == 0
    })
    .await;
    w.provider.push(Reply::Text(vec!["Second.".into()]));
    ok(&w.message(&session, "two").await);
    let requests = w.provider.requests();
    let last = &requests[requests.len() - 1].body;
    let said = Sent::new(Flavor::OpenAi, last).user_texts();
    assert_eq!(said, vec!["one".to_owned(), "two".to_owned()], "{last}");

    let w = world(Flavor::OpenAi).await;
    let session = w.session().await;
    w.provider.push(Reply::Text(vec!["Kept.".into()]));
    ok(&w.message(&session, "one").await);
    assert_eq!(w.sc.live_adapters().await, 1);
}

/// The processes the sidecar has started that are still alive.
fn children(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the sidecar's threads");
    for task in tasks.flatten() {
        let listed = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.extend(
            listed
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    children
}

/// By default a builtin session's agent is a task of the sidecar: a live
/// one starts no process. With `builtin.agentProcess` it is its own process
/// (`agentos-sidecar agent`), which the same turns reach alike and which
/// ends with its route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builtin_agent_runs_in_the_sidecar_unless_asked_for_a_process() {
    for agent_process in [false, true] {
        let w = builtin::world_configured(
            Flavor::OpenAi,
            json!({"idleAgentMs": 1000, "agentProcess": agent_process}),
        )
        .await;
        let session = w.session().await;
        w.provider.push(Reply::Text(vec!["First.".into()]));
        ok(&w.message(&session, "one").await);
        assert_eq!(w.sc.live_adapters().await, 1);
        let started = children(w.sc.pid());
        if agent_process {
            assert_eq!(started.len(), 1, "one agent process: {started:?}");
            let cmdline =
                std::fs::read(format!("/proc/{}/cmdline", started[0])).unwrap_or_default();
            assert!(
                cmdline.ends_with(b"\0agent\0"),
                "{:?}",
                String::from_utf8_lossy(&cmdline)
            );
        } else {
            assert_eq!(
                started,
                Vec::<u32>::new(),
                "no process for an in-process agent"
            );
        }
        w.provider.push(Reply::Text(vec!["Second.".into()]));
        ok(&w.message(&session, "two").await);
        let requests = w.provider.requests();
        let said = Sent::new(Flavor::OpenAi, &requests[requests.len() - 1].body).user_texts();
        assert_eq!(said, vec!["one".to_owned(), "two".to_owned()]);
        // Idle, the agent ends either way, and its process with it.
        common::eventually("the idle agent ends", || async {
            w.sc.live_adapters().await == 0 && children(w.sc.pid()).is_empty()
        })
        .await;
    }
}

/// The agent holds what its last context said stays of the conversation
/// and is sent only what follows it: every turn of a long session still
/// reaches the provider whole, in order, with its tool calls; and an agent
/// started again (it holds nothing) or a sidecar started again (it keeps
/// nothing) gets the whole conversation again.
#[tokio::test]
async fn every_turn_of_a_long_session_reaches_the_provider_whole() {
    // Agents live between these turns, and end after 1.5 s idle.
    let mut w = builtin::world_configured(Flavor::OpenAi, json!({"idleAgentMs": 1500})).await;
    let session = w.session().await;
    let mut said: Vec<String> = Vec::new();
    let mut roles = vec!["system".to_owned()];
    for turn in 0..8 {
        let words = format!("question {turn}");
        if turn == 3 {
            w.provider.push(builtin::tool_calls(&[(
                "c1",
                "write",
                json!({"address": "~/memory/n.md", "content": "noted"}),
            )]));
            roles.extend(["user", "assistant", "tool", "assistant"].map(str::to_owned));
        } else {
            roles.extend(["user", "assistant"].map(str::to_owned));
        }
        w.provider
            .push(Reply::Text(vec![format!("answer "), format!("{turn}")]));
        ok(&w.message(&session, &words).await);
        said.push(words);
        let body = w.last_body();
        let sent = Sent::new(Flavor::OpenAi, &body);
        assert_eq!(sent.user_texts(), said, "turn {turn}: {body}");
        // The last assistant message is this turn's answer, not yet in
        // the conversation the provider was sent.
        assert_eq!(
            sent.roles(),
            roles[..roles.len() - 1],
            "turn {turn}: {body}"
        );
        let answers: Vec<&str> = body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "assistant" && m["content"].is_string())
            .filter_map(|m| m["content"].as_str())
            .filter(|text| !text.is_empty())
            .collect();
        let expected: Vec<String> = (0..turn).map(|t| format!("answer {t}")).collect();
        assert_eq!(answers, expected, "turn {turn}: {body}");
        if turn == 4 {
            // The agent ends when idle: the next one holds nothing, while
            // the sidecar still keeps the conversation.
            common::eventually("the idle agent ends", || async {
                w.sc.live_adapters().await == 0
            })
            .await;
        }
        if turn == 6 {
            w = w.restart().await;
        }
    }
}
