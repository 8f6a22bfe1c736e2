//! Drives the published ACP SDK example agent (an independent third-party
//! peer, installed by scripts/install-peers) through the adapter client and
//! checks the exact sequence of updates of its allow path.

use std::path::Path;

use agentos_adapters::{AdapterCommand, AdapterConnection, AdapterEvent, AdapterOptions};
use agentos_protocol::acp::methods;
use serde_json::{json, Value};

const EXAMPLE_AGENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../.peers/node_modules/@agentclientprotocol/sdk/dist/examples/agent.js"
);

fn example_agent() -> AdapterCommand {
    assert!(
        Path::new(EXAMPLE_AGENT).exists(),
        "the ACP example agent is not installed at {EXAMPLE_AGENT}; run scripts/install-peers first"
    );
    AdapterCommand {
        program: "node".to_owned(),
        args: vec![EXAMPLE_AGENT.to_owned()],
        ..AdapterCommand::default()
    }
}

#[tokio::test]
async fn allow_path_matches_the_reference_transcript() {
    let (conn, mut events) = AdapterConnection::spawn(&example_agent(), AdapterOptions::default())
        .await
        .expect("node starts the example agent");
    let init = conn
        .initialize(
            json!({"name": "adapter-tests", "version": "0.0.1"}),
            json!({"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true}),
        )
        .await
        .expect(methods::INITIALIZE);
    assert_eq!(init.protocol_version, 1);
    assert!(!init.supports_load());
    assert!(!init.supports_resume());
    assert_eq!(init.agent_info, None);

    let session = conn
        .request(
            methods::SESSION_NEW,
            json!({"cwd": "/tmp", "mcpServers": []}),
        )
        .await
        .expect(methods::SESSION_NEW)["sessionId"]
        .as_str()
        .expect("session id")
        .to_owned();

    let prompt = conn.request(
        methods::SESSION_PROMPT,
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "hello"}]}),
    );
    tokio::pin!(prompt);
    let mut updates: Vec<Value> = Vec::new();
    let mut permission_requests = 0;
    let result = loop {
        tokio::select! {
            result = &mut prompt => break result,
            event = events.recv() => match event {
                Some(AdapterEvent::SessionUpdate(update)) => {
                    assert_eq!(update.session_id, session.as_str());
                    updates.push(update.update());
                }
                Some(AdapterEvent::Request { id, method, params }) => {
                    assert_eq!(method, methods::SESSION_REQUEST_PERMISSION);
                    permission_requests += 1;
                    let allow = params["options"]
                        .as_array()
                        .and_then(|options| options.iter().find(|o| o["kind"] == "allow_once"))
                        .expect("an allow_once option");
                    assert_eq!(allow["optionId"], "allow");
                    assert_eq!(params["toolCall"]["toolCallId"], "call_2");
                    conn.respond(
                        &id,
                        Ok(json!({"outcome": {"outcome": "selected", "optionId": allow["optionId"]}})),
                    )
                    .expect("respond");
                }
                Some(AdapterEvent::Stderr(line)) => panic!("unexpected stderr: {line}"),
                Some(other) => panic!("unexpected event {other:?}"),
                None => panic!("example agent went away mid-turn"),
            },
        }
    };
    while let Ok(event) = events.try_recv() {
        if let AdapterEvent::SessionUpdate(update) = event {
            updates.push(update.update());
        }
    }
    assert_eq!(
        result.expect("prompt answered"),
        json!({"stopReason": "end_turn"})
    );
    assert_eq!(permission_requests, 1);

    let expected = vec![
        json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"I'll help you with that. Let me start by reading some files to understand the current situation."}}),
        json!({"sessionUpdate":"tool_call","toolCallId":"call_1","title":"Reading project files","kind":"read","status":"pending","locations":[{"path":"/project/README.md"}],"rawInput":{"path":"/project/README.md"}}),
        json!({"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"completed","content":[{"type":"content","content":{"type":"text","text":"# My Project\n\nThis is a sample project..."}}],"rawOutput":{"content":"# My Project\n\nThis is a sample project..."}}),
        json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":" Now I understand the project structure. I need to make some changes to improve it."}}),
        json!({"sessionUpdate":"tool_call","toolCallId":"call_2","title":"Modifying critical configuration file","kind":"edit","status":"pending","locations":[{"path":"/project/config.json"}],"rawInput":{"path":"/project/config.json","content":"{\"database\": {\"host\": \"new-host\"}}"}}),
        json!({"sessionUpdate":"tool_call_update","toolCallId":"call_2","status":"completed","rawOutput":{"success":true,"message":"Configuration updated"}}),
        json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":" Perfect! I've successfully updated the configuration. The changes have been applied."}}),
    ];
    assert_eq!(updates, expected);

    // Closing stdin ends the example agent cleanly.
    conn.shutdown().await;
    let mut last = None;
    while let Some(event) = events.recv().await {
        last = Some(event);
    }
    assert_eq!(
        last,
        Some(AdapterEvent::Exited {
            code: Some(0),
            signal: None
        })
    );
}

#[tokio::test]
async fn unknown_session_and_unsupported_methods_are_typed() {
    let (conn, _events) = AdapterConnection::spawn(&example_agent(), AdapterOptions::default())
        .await
        .expect("node starts the example agent");
    conn.initialize(Value::Null, json!({}))
        .await
        .expect(methods::INITIALIZE);
    let unknown = conn
        .request(
            methods::SESSION_PROMPT,
            json!({"sessionId": "nope", "prompt": [{"type": "text", "text": "hi"}]}),
        )
        .await
        .unwrap_err();
    assert!(unknown.is_unknown_session(), "{unknown:?}");
    let load = conn
        .request(
            methods::SESSION_LOAD,
            json!({"sessionId": "nope", "cwd": "/tmp", "mcpServers": []}),
        )
        .await
        .unwrap_err();
    assert_eq!(load.code().as_str(), "adapter_rpc_error");
    assert!(!load.is_unknown_session());
    conn.shutdown().await;
}
