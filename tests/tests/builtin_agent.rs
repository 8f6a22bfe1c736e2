//! The builtin model agent end to end: a real sidecar whose `builtin`
//! sessions start `agentos-sidecar agent`, a scripted provider on loopback
//! standing in for OpenAI, Anthropic or Google, and signed actions driving
//! turns. What the provider was sent (system prompt, tools, transcript, key)
//! and what the log holds afterwards are both checked.

mod common;

use agentos_protocol::seed::Ipld;
use agentos_tests::http::Target;
use agentos_tests::provider_server::{Flavor, Reply, ScriptedProvider};
use agentos_tests::seed::{call, field, Answer, Signer};
use common::{Backend, Options, Sidecar};
use serde_json::{json, Value};

pub struct World {
    pub _sc: Sidecar,
    pub target: Target,
    pub provider: ScriptedProvider,
    pub owner: Signer,
    pub agent_id: String,
}

fn flavor_type(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::OpenAi => "openai",
        Flavor::Anthropic => "anthropic",
        Flavor::Google => "google",
    }
}

/// A sidecar whose `flavor` provider is the scripted server, an account
/// with a key and a provider, and a builtin agent using it.
async fn world(flavor: Flavor, backend: Backend) -> World {
    let provider = ScriptedProvider::start(flavor).await;
    let kind = flavor_type(flavor);
    let sc = Sidecar::start_with(
        backend,
        Options {
            config: json!({
                "http": {"listen": "127.0.0.1:0"},
                "builtin": {"providerEndpoints": {kind: provider.base_url()}},
            }),
            ..Options::default()
        },
    )
    .await;
    let target = Target::from_ready(sc.ready["http"].as_str().expect("http"));
    let owner = Signer::new();
    let ok = |a: &Answer| assert_eq!(a.status, 200, "{:?}", a.body);
    ok(&call(
        &target,
        &owner,
        json!({"_": "SetSecret", "name": "key", "value": {"/": {"bytes": "sk-scripted"}}}),
    )
    .await);
    ok(&call(
        &target,
        &owner,
        json!({"_": "SetModelProvider", "name": "main",
               "provider": {"type": kind, "secretRefs": {"apiKey": "key"}}}),
    )
    .await);
    let created = call(
        &target,
        &owner,
        json!({"_": "CreateAgent", "definition": {
            "name": "Scribe", "systemPrompt": "Be brief.",
            "modelProvider": "main", "model": "scripted-model"}}),
    )
    .await;
    ok(&created);
    World {
        agent_id: created.text("agentId"),
        _sc: sc,
        target,
        provider,
        owner,
    }
}

impl World {
    async fn session(&self) -> String {
        let created = call(
            &self.target,
            &self.owner,
            json!({"_": "CreateSession", "agentId": self.agent_id}),
        )
        .await;
        assert_eq!(created.status, 200, "{:?}", created.body);
        created.text("sessionId")
    }

    async fn message(&self, session: &str, text: &str) -> Answer {
        call(
            &self.target,
            &self.owner,
            json!({"_": "MessageSession", "sessionId": session,
                   "content": [{"type": "text", "text": text}]}),
        )
        .await
    }

    /// The session's events as JSON-ish maps: (type, the event).
    async fn events(&self, session: &str) -> Vec<Ipld> {
        let got = call(
            &self.target,
            &self.owner,
            json!({"_": "GetSession", "sessionId": session}),
        )
        .await;
        assert_eq!(got.status, 200, "{:?}", got.body);
        match got.field("events") {
            Ipld::List(events) => events.iter().map(|e| field(e, "event").clone()).collect(),
            other => panic!("events: {other:?}"),
        }
    }
}

fn text_of(event: &Ipld, name: &str) -> String {
    match field(event, name) {
        Ipld::String(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

fn kinds(events: &[Ipld]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let kind = text_of(e, "type");
            if kind == "message" {
                format!("{}:{}", text_of(e, "role"), text_of(e, "content"))
            } else if kind == "tool_call" || kind == "tool_result" {
                format!("{kind}:{}", text_of(e, "name"))
            } else {
                kind
            }
        })
        .collect()
}

fn last_body(provider: &ScriptedProvider) -> Value {
    provider
        .requests()
        .last()
        .map(|r| r.body.clone())
        .expect("the provider was called")
}

#[tokio::test]
async fn a_text_turn_streams_the_reply_and_sends_the_agent_to_the_provider() {
    let w = world(Flavor::OpenAi, Backend::SqliteFile).await;
    let session = w.session().await;
    w.provider.push(Reply::Text(vec![
        "Hel".into(),
        "lo".into(),
        " there".into(),
    ]));
    let said = w.message(&session, "hi").await;
    assert_eq!(said.status, 200, "{:?}", said.body);
    assert!(!said.text("assistantEventId").is_empty());
    let events = w.events(&session).await;
    assert_eq!(kinds(&events), ["user:hi", "assistant:Hello there"]);
    assert_eq!(text_of(&events[1], "actor"), "agent");
    let request = w.provider.requests().pop().expect("one call");
    assert_eq!(request.header("authorization"), Some("Bearer sk-scripted"));
    let body = request.body;
    assert_eq!(body["model"], "scripted-model");
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(system.starts_with("Be brief."), "{system}");
    assert!(system.contains("<space>"), "{system}");
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        tools,
        ["read", "write", "call", "status", "continue_session"]
    );
    assert_eq!(body["messages"].as_array().map(Vec::len), Some(2));
    assert_eq!(body["messages"][1]["content"], "hi");
    // A second turn carries the first one back from the log.
    w.provider.push(Reply::Text(vec!["again".into()]));
    assert_eq!(w.message(&session, "more").await.status, 200);
    let body = last_body(&w.provider);
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["role"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(body["messages"][2]["content"], "Hello there");
}

#[tokio::test]
async fn memory_writes_and_reads_are_visible_tool_calls() {
    let w = world(Flavor::OpenAi, Backend::SqliteFile).await;
    let session = w.session().await;
    w.provider.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "write".into(),
        json!({"address": "~/memory/notes.md", "content": "remember the milk"}),
    )]));
    w.provider.push(Reply::Text(vec!["saved".into()]));
    let said = w.message(&session, "note it").await;
    assert_eq!(said.status, 200, "{:?}", said.body);
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
    assert_eq!(text_of(&events[1], "actor"), "agent");
    let read = call(
        &w.target,
        &w.owner,
        json!({"_": "ReadAgentMemoryFile", "agentId": w.agent_id, "path": "notes.md"}),
    )
    .await;
    assert_eq!(read.status, 200, "{:?}", read.body);
    assert_eq!(
        field(read.field("file"), "content"),
        &Ipld::String("remember the milk".into())
    );
    // The tool result went back to the provider in its own message.
    let body = last_body(&w.provider);
    let tool = body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
        .cloned()
        .expect("a tool message");
    assert_eq!(tool["tool_call_id"], "c1");
}
