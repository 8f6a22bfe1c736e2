//! MCP servers as callables, end to end against the MCP reference server
//! (`@modelcontextprotocol/server-everything`, installed by
//! `scripts/install-peers`) over Streamable HTTP, legacy SSE and stdio:
//! the signed actions and discovery, the `call` verb of the model and of
//! the user, grants, a private URL refused, the operator's confined command
//! servers (and one that dies mid-call), and host sessions handing their
//! `mcpServers` to ACP adapters unchanged. `mcp_scripted.rs` has what
//! only a scripted server can show.

#[path = "common/builtin.rs"]
mod builtin;
mod common;
#[path = "common/mcp.rs"]
mod mcp;

use agentos_tests::provider_server::Flavor;
use builtin::{answer_text, ok, text, tool_calls, world_sections, Sent, VERBS};
use common::{Options, Sidecar};
use mcp::{
    enable, everything, everything_script, expanded, model_calls, output_text, result_of,
    set_server, world,
};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounts_configure_servers_and_discovery_runs_when_they_are_set() {
    let Some(reference) = everything("streamableHttp").await else {
        return;
    };
    let w = world(json!({})).await;
    let server = set_server(&w, "everything", json!({"url": reference.url})).await;
    assert_eq!(server["name"], "everything");
    assert_eq!(server["transport"], "http");
    assert_eq!(server["hasSecrets"], false);
    assert!(server.get("error").is_none(), "{server}");
    assert!(server["toolCount"].as_u64().unwrap_or(0) >= 5, "{server}");

    let tools = w
        .act(json!({"_": "ListMcpServerTools", "name": "everything"}))
        .await;
    ok(&tools);
    let tools = builtin::json_of(&tools.body);
    let sum = tools["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "get-sum")
        .cloned()
        .expect("get-sum is listed");
    assert_eq!(sum["qualifiedName"], "mcp:everything/get-sum");
    assert_eq!(sum["inputSchema"]["type"], "object");

    // A server nobody answers at is kept, with why.
    let dead = set_server(
        &w,
        "dead",
        json!({"url": "http://127.0.0.1:9/mcp", "transport": "http"}),
    )
    .await;
    assert!(
        dead["error"].as_str().unwrap_or_default().len() > 3,
        "{dead}"
    );
    let listed = w.act(json!({"_": "ListMcpServers"})).await;
    ok(&listed);
    let names: Vec<Value> = builtin::json_of(&listed.body)["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert!(names.contains(&json!("everything")) && names.contains(&json!("dead")));
    let unreachable = w
        .act(json!({"_": "ListMcpServerTools", "name": "dead"}))
        .await;
    assert_eq!(unreachable.status, 502);
    assert!(answer_text(&unreachable, "message")
        .starts_with("Could not list tools from MCP server \"dead\""));
    let refreshed = w
        .act(json!({"_": "RefreshMcpServer", "name": "everything"}))
        .await;
    ok(&refreshed);

    // Bad input: typed refusals, nothing saved.
    for (action, status) in [
        (
            json!({"_": "SetMcpServer", "name": "Bad Name", "config": {"url": reference.url}}),
            400,
        ),
        (
            json!({"_": "SetMcpServer", "name": "x", "config": {"url": "ftp://h/"}}),
            400,
        ),
        (
            json!({"_": "SetMcpServer", "name": "x", "config": {"url": 7}}),
            400,
        ),
        (
            json!({"_": "SetMcpServer", "name": "x", "config": {"url": "https://h/", "transport": "ws"}}),
            400,
        ),
        (
            json!({"_": "SetMcpServer", "name": "x", "config": {"url": "https://h/", "extra": 1}}),
            400,
        ),
        (json!({"_": "RefreshMcpServer", "name": "nobody"}), 404),
        (json!({"_": "ListMcpServerTools", "name": "nobody"}), 404),
        (json!({"_": "DeleteMcpServer", "name": "nobody"}), 404),
    ] {
        let answer = w.act(action.clone()).await;
        assert_eq!(answer.status, status, "{action}: {:?}", answer.body);
    }
    ok(&w.act(json!({"_": "DeleteMcpServer", "name": "dead"})).await);
    let listed = w.act(json!({"_": "ListMcpServers"})).await;
    assert_eq!(
        builtin::json_of(&listed.body)["servers"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_url_is_refused_unless_the_operator_allows_it() {
    let w = world_sections(Flavor::OpenAi, json!({})).await;
    for url in [
        "http://127.0.0.1:3001/mcp",
        "http://[::1]/mcp",
        "http://10.1.2.3/mcp",
        "http://localhost:1/mcp",
    ] {
        let answer = w
            .act(json!({"_": "SetMcpServer", "name": "local", "config": {"url": url}}))
            .await;
        if url.contains("localhost") {
            // A name is checked where it resolves: saved, and discovery
            // says why it cannot be reached.
            ok(&answer);
            let server = builtin::json_of(&answer.body)["server"].clone();
            assert!(
                server["error"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("no public address"),
                "{server}"
            );
        } else {
            assert_eq!(answer.status, 400, "{url}");
            assert_eq!(answer_text(&answer, "code"), "address_refused", "{url}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_calls_a_tool_through_call_and_the_payload_carries_only_the_verbs() {
    let Some(reference) = everything("streamableHttp").await else {
        return;
    };
    let w = world(json!({})).await;
    set_server(&w, "everything", json!({"url": reference.url})).await;
    enable(&w, &["everything"]).await;

    // The agent's tools list the server's, with the server's state.
    let listed = w
        .act(json!({"_": "ListAgentTools", "agentId": w.agent_id}))
        .await;
    ok(&listed);
    let listed = builtin::json_of(&listed.body);
    let sum = listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "mcp:everything/get-sum")
        .cloned()
        .expect("the MCP tool is listed");
    assert_eq!(sum["kind"], "mcp");
    assert_eq!(sum["granted"], true);
    assert_eq!(listed["mcpServers"][0]["name"], "everything");

    let session = w.session().await;
    w.provider.push(tool_calls(&[(
        "c1",
        "call",
        json!({"tool": "mcp:everything/get-sum", "input": {"a": 2, "b": 3}}),
    )]));
    w.provider.push(tool_calls(&[(
        "c2",
        "call",
        json!({"tool": "mcp:everything/get-sum", "input": {"a": 2, "b": 3}}),
    )]));
    w.provider.push(text("five"));
    ok(&w.message(&session, "add 2 and 3").await);
    let requests = w.provider.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(
            Sent::new(w.flavor, &request.body).tools(),
            VERBS,
            "only the verbs"
        );
    }
    let system = Sent::new(w.flavor, &requests[0].body).system();
    assert!(system.contains("mcp:everything/get-sum"), "{system}");
    let events = w.events(&session).await;
    let contract = output_text(result_of(&events, "c1"));
    assert!(contract.contains("# mcp:everything/get-sum"), "{contract}");
    assert!(contract.contains("first use in this thread"), "{contract}");
    let sum = output_text(result_of(&events, "c2"));
    assert!(sum.contains('5'), "{sum}");
    assert!(result_of(&events, "c2").get("error").is_none());
    let call = events
        .iter()
        .find(|e| e["type"] == "tool_call" && e["id"] == "c2")
        .expect("the call is logged");
    assert_eq!(call["name"], "call", "{call}");
    assert_eq!(call["actor"], "agent", "{call}");
    assert_eq!(result_of(&events, "c2")["actor"], "agent");

    // The next turn offers it by its provider name, and calling it runs it.
    w.provider.push(tool_calls(&[(
        "c3",
        "mcp__everything__get-sum",
        json!({"a": 20, "b": 22}),
    )]));
    w.provider.push(text("42"));
    ok(&w.message(&session, "again").await);
    let requests = w.provider.requests();
    assert!(Sent::new(w.flavor, &requests[3].body)
        .tools()
        .contains(&"mcp__everything__get-sum".to_owned()));
    let events = w.events(&session).await;
    assert!(output_text(result_of(&events, "c3")).contains("42"));

    // A tool error is a result the model reads.
    let failed = model_calls(
        &w,
        &session,
        "c4",
        "mcp:everything/get-sum",
        json!({"a": "two", "b": 3}),
    )
    .await;
    assert!(
        output_text(&failed).starts_with("mcp_tool_error:"),
        "{failed}"
    );

    // The user holds the same verb.
    let invoked = w
        .invoke(
            &session,
            "call",
            json!({"tool": "mcp:everything/echo", "input": {"message": "hi"}}),
        )
        .await;
    ok(&invoked);
    let invoked = w
        .invoke(
            &session,
            "call",
            json!({"tool": "mcp:everything/echo", "input": {"message": "hi"}}),
        )
        .await;
    ok(&invoked);
    assert!(
        builtin::json_of(&invoked.body)
            .to_string()
            .contains("Echo: hi"),
        "{:?}",
        invoked.body
    );

    // `~/tools/` lists the server's tools, and each reads as its contract.
    let listing = w
        .invoke(&session, "read", json!({"address": "~/tools/"}))
        .await;
    ok(&listing);
    assert!(
        builtin::json_of(&listing.body)
            .to_string()
            .contains("mcp:everything/get-sum"),
        "{:?}",
        listing.body
    );
    let contract = w
        .invoke(
            &session,
            "read",
            json!({"address": "~/tools/mcp:everything/echo"}),
        )
        .await;
    ok(&contract);
    assert!(
        builtin::json_of(&contract.body)
            .to_string()
            .contains("# mcp:everything/echo"),
        "{:?}",
        contract.body
    );

    // Grants: a server the agent does not name, a tool the server lacks.
    let refused = model_calls(&w, &session, "c5", "mcp:other/tool", json!({})).await;
    assert!(
        output_text(&refused).starts_with("not_granted:"),
        "{refused}"
    );
    let missing = model_calls(&w, &session, "c6", "mcp:everything/nope", json!({})).await;
    assert!(output_text(&missing).starts_with("not_found:"), "{missing}");
    assert!(
        output_text(&missing).contains("mcp:everything/echo"),
        "{missing}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_sse_transport_and_the_fallback_reach_the_reference_server() {
    let Some(reference) = everything("sse").await else {
        return;
    };
    let w = world(json!({})).await;
    // Named, and found by falling back from Streamable HTTP.
    for (name, config) in [
        ("named", json!({"url": reference.url, "transport": "sse"})),
        ("fallback", json!({"url": reference.url})),
    ] {
        let server = set_server(&w, name, config).await;
        assert!(server.get("error").is_none(), "{name}: {server}");
        assert!(server["toolCount"].as_u64().unwrap_or(0) >= 5, "{server}");
    }
    enable(&w, &["named"]).await;
    let session = w.session().await;
    let echoed = expanded(
        &w,
        &session,
        "c2",
        "mcp:named/echo",
        json!({"message": "over sse"}),
    )
    .await;
    assert_eq!(output_text(&echoed), "Echo: over sse");
}

/// A stdio MCP server that never answers `slow`, and writes each
/// `notifications/cancelled` it receives to the file its argument names.
const SLOW_SERVER: &str = r#"
const fs = require('fs');
const log = process.argv[2];
const rl = require('readline').createInterface({input: process.stdin});
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
rl.on('line', (line) => {
  const m = JSON.parse(line);
  if (m.method === 'initialize') send({jsonrpc: '2.0', id: m.id, result: {protocolVersion: '2025-06-18', capabilities: {tools: {}}, serverInfo: {name: 'slow', version: '1'}}});
  else if (m.method === 'tools/list') send({jsonrpc: '2.0', id: m.id, result: {tools: [{name: 'slow', inputSchema: {type: 'object'}}]}});
  else if (m.method === 'notifications/cancelled') fs.appendFileSync(log, JSON.stringify(m.params) + '\n');
});
"#;

/// A stdio MCP server that answers `initialize` and `tools/list`, and
/// exits in the middle of any call.
const DYING_SERVER: &str = r#"
const rl = require('readline').createInterface({input: process.stdin});
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
rl.on('line', (line) => {
  const m = JSON.parse(line);
  if (m.method === 'initialize') send({jsonrpc: '2.0', id: m.id, result: {protocolVersion: '2025-06-18', capabilities: {tools: {}}, serverInfo: {name: 'dying', version: '1'}}});
  else if (m.method === 'tools/list') send({jsonrpc: '2.0', id: m.id, result: {tools: [{name: 'boom', inputSchema: {type: 'object'}}]}});
  else if (m.method === 'tools/call') process.exit(3);
});
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_command_servers_run_confined_and_only_from_the_config() {
    let Some(script) = everything_script() else {
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let dying = dir.path().join("dying.js");
    std::fs::write(&dying, DYING_SERVER).expect("write the dying server");
    let slow = dir.path().join("slow.js");
    std::fs::write(&slow, SLOW_SERVER).expect("write the slow server");
    let cancelled = dir.path().join("cancelled.log");
    std::fs::write(&cancelled, "").expect("the log");
    let w = world(json!({"servers": {
        "everything": {"command": "node", "args": [script, "stdio"]},
        "dying": {"command": "node", "args": [dying]},
        "slow": {"command": "node", "args": [slow, cancelled],
                 "sandbox": {"writePaths": [cancelled]}},
    }, "callTimeoutMs": 1500}))
    .await;
    let listed = w.act(json!({"_": "ListMcpServers"})).await;
    ok(&listed);
    let servers = builtin::json_of(&listed.body)["servers"].clone();
    let everything = servers
        .as_array()
        .expect("servers")
        .iter()
        .find(|s| s["name"] == "everything")
        .cloned()
        .expect("the operator's server is listed");
    assert_eq!(everything["transport"], "stdio");
    assert_eq!(everything["operator"], true);
    // A signed client can neither replace nor delete it, nor start a command.
    let replaced = w
        .act(json!({"_": "SetMcpServer", "name": "everything", "config": {"url": "https://x.example/"}}))
        .await;
    assert_eq!(replaced.status, 400);
    assert_eq!(
        w.act(json!({"_": "DeleteMcpServer", "name": "everything"}))
            .await
            .status,
        400
    );
    let command = w
        .act(json!({"_": "SetMcpServer", "name": "mine", "config": {"url": "https://x.example/", "command": "sh"}}))
        .await;
    assert_eq!(command.status, 400);

    ok(&w
        .act(json!({"_": "RefreshMcpServer", "name": "everything"}))
        .await);
    enable(&w, &["everything", "dying", "slow"]).await;
    let session = w.session().await;
    let env = expanded(&w, &session, "c2", "mcp:everything/get-env", json!({})).await;
    let env = output_text(&env);
    assert!(env.contains("PATH"), "{env}");
    // The sidecar's own environment (cargo's, inherited from this test)
    // stays out.
    if std::env::var_os("CARGO_MANIFEST_DIR").is_some() {
        assert!(!env.contains("CARGO_MANIFEST_DIR"), "{env}");
    }
    let summed = expanded(
        &w,
        &session,
        "c3",
        "mcp:everything/get-sum",
        json!({"a": 1, "b": 41}),
    )
    .await;
    assert!(output_text(&summed).contains("42"), "{summed}");

    // A server that dies mid-call: typed, and the next call starts it again.
    let died = expanded(&w, &session, "c5", "mcp:dying/boom", json!({})).await;
    assert_eq!(
        output_text(&died),
        "mcp_server_exited: the server's process ended"
    );
    let again = model_calls(&w, &session, "c6", "mcp:dying/boom", json!({})).await;
    assert_eq!(
        output_text(&again),
        "mcp_server_exited: the server's process ended"
    );
    // A call given up (here, its timeout) is cancelled at the server.
    let slow = expanded(&w, &session, "c7", "mcp:slow/slow", json!({})).await;
    assert!(output_text(&slow).starts_with("mcp_timeout:"), "{slow}");
    common::eventually("the server hears the call was cancelled", || async {
        std::fs::read_to_string(&cancelled).is_ok_and(|log| log.contains("requestId"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_sessions_hand_their_mcp_servers_to_adapters_unchanged() {
    let dir = tempfile::tempdir().expect("dir");
    let log = dir.path().join("setup.log");
    std::fs::write(&log, "").expect("log");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).expect("state");
    let fake = common::binary("agentos-fake-agent").display().to_string();
    let agents = json!({
        "resumes": {
            "command": fake, "args": ["--resume", "--state-dir", state],
            "env": {"AGENTOS_FAKE_AGENT_SETUP_LOG": log},
            "sandbox": {"writePaths": [log, state]}},
        "loads": {
            "command": fake, "args": ["--load-session", "--state-dir", state],
            "env": {"AGENTOS_FAKE_AGENT_SETUP_LOG": log},
            "sandbox": {"writePaths": [log, state]}},
    });
    let servers = json!([
        {"name": "files", "command": "/usr/bin/mcp-files", "args": ["--root", "/w"],
         "env": [{"name": "A", "value": "b"}]},
        {"type": "http", "name": "remote", "url": "https://mcp.example/mcp",
         "headers": [{"name": "Authorization", "value": "Bearer x"}]},
    ]);
    let sc = Sidecar::start_with(
        common::Backend::SqliteFile,
        Options {
            agents: agents.clone(),
            ..Options::default()
        },
    )
    .await;
    for (session, agent) in [("m1", "resumes"), ("m2", "loads")] {
        sc.ok(
            "sessions/open",
            json!({"sessionId": session, "agent": agent, "mcpServers": servers}),
        )
        .await;
        sc.prompt(session, "echo one").await.expect("a turn");
    }
    let sc = sc
        .restart(Options {
            agents: agents.clone(),
            ..Options::default()
        })
        .await;
    for session in ["m1", "m2"] {
        sc.prompt(session, "echo two")
            .await
            .expect("a turn after the restart");
    }
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let mut methods: Vec<&str> = lines.iter().filter_map(|l| l["setup"].as_str()).collect();
    methods.sort_unstable();
    assert_eq!(
        methods,
        [
            "session/load",
            "session/new",
            "session/new",
            "session/resume"
        ]
    );
    for line in &lines {
        assert_eq!(line["params"]["mcpServers"], servers, "{line}");
    }

    // The ACP SDK's example agent takes them too.
    if everything_script().is_none() {
        return;
    }
    sc.ok(
        "sessions/open",
        json!({"sessionId": "ex", "agent": "example", "permissionPolicy": "allow_all",
               "mcpServers": servers}),
    )
    .await;
    let turn = sc
        .prompt("ex", "hello")
        .await
        .expect("the example agent's turn");
    assert_eq!(turn["stopReason"], "end_turn", "{turn}");
}
