//! MCP servers as callables, end to end against real servers: the MCP
//! reference server (`@modelcontextprotocol/server-everything`, installed
//! by `scripts/install-peers`) over Streamable HTTP, legacy SSE and stdio,
//! and a scripted server of our own for what the reference cannot show
//! (headers received, a hang, a death mid-call, a forgotten session, an
//! oversized answer). The signed actions, discovery, the `call` verb of
//! the model and of the user, grants, bounds, timeouts, cancellation, the
//! operator's confined command servers, and host sessions handing their
//! `mcpServers` to ACP adapters unchanged.

#[path = "common/builtin.rs"]
mod builtin;
mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentos_tests::mcp_server::McpServer;
use agentos_tests::provider_server::Flavor;
use agentos_tests::seed::bytes;
use builtin::{answer_text, ok, text, tool_calls, world_sections, Sent, World};
use common::{Options, Sidecar, PATIENCE};
use serde_json::{json, Value};

/// The verbs a signed message's turn (a run) offers, in order.
const VERBS: [&str; 7] = [
    "read",
    "write",
    "call",
    "status",
    "continue_session",
    "delegate",
    "plan",
];

fn everything_script() -> Option<PathBuf> {
    let script = common::workspace_root()
        .join(".peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok();
    if script.exists() && node {
        return Some(script);
    }
    assert!(
        std::env::var_os("CI").is_none_or(|v| v.is_empty()),
        "the MCP tests need node and the reference server under CI"
    );
    eprintln!("note: skipping: no node or MCP reference server (scripts/install-peers)");
    None
}

/// The reference server over HTTP, killed with this value.
struct Everything {
    _child: tokio::process::Child,
    url: String,
}

/// Starts the reference server in `mode` (`streamableHttp` or `sse`) on a
/// free port; waits until it accepts connections.
async fn everything(mode: &str) -> Option<Everything> {
    let script = everything_script()?;
    for _ in 0..5 {
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe a port");
            probe.local_addr().expect("port").port()
        };
        let child = tokio::process::Command::new("node")
            .arg(&script)
            .arg(mode)
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start the reference server");
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                let path = if mode == "sse" { "sse" } else { "mcp" };
                return Some(Everything {
                    _child: child,
                    url: format!("http://127.0.0.1:{port}/{path}"),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    panic!("the reference server did not start");
}

/// A world whose accounts may point servers at loopback.
async fn world(mcp: Value) -> World {
    let mut section = json!({"allowPrivateUrls": true});
    for (k, v) in mcp.as_object().into_iter().flatten() {
        section[k] = v.clone();
    }
    world_sections(Flavor::OpenAi, json!({"mcp": section})).await
}

async fn set_server(w: &World, name: &str, config: Value) -> Value {
    let set = w
        .act(json!({"_": "SetMcpServer", "name": name, "config": config}))
        .await;
    ok(&set);
    builtin::json_of(&set.body)["server"].clone()
}

/// Grants the agent these servers.
async fn enable(w: &World, servers: &[&str]) {
    let mut definition = builtin::definition(None);
    definition["mcpServers"] = json!(servers);
    ok(&w
        .act(json!({"_": "UpdateAgent", "agentId": w.agent_id, "definition": definition}))
        .await);
}

fn result_of<'a>(events: &'a [Value], call_id: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == "tool_result" && e["toolCallId"] == call_id)
        .unwrap_or_else(|| panic!("no result for {call_id} in {events:?}"))
}

/// A result's text: its output, or its error (`code: message`).
fn output_text(result: &Value) -> String {
    if let Some(error) = result["error"].as_str() {
        return error.to_owned();
    }
    match &result["output"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Runs one model turn that calls `call{tool, input}` as `id` (twice when
/// `expand`: the first use answers the contract), then says "done".
async fn model_calls(w: &World, session: &str, id: &str, tool: &str, input: Value) -> Value {
    w.provider.push(tool_calls(&[(
        id,
        "call",
        json!({"tool": tool, "input": input}),
    )]));
    w.provider.push(text("done"));
    ok(&w.message(session, "go").await);
    let events = w.events(session).await;
    result_of(&events, id).clone()
}

/// [`model_calls`] for a tool the thread has not used: the first call
/// answers its contract, the second (`id`) runs it.
async fn expanded(w: &World, session: &str, id: &str, tool: &str, input: Value) -> Value {
    model_calls(w, session, &format!("{id}-contract"), tool, input.clone()).await;
    model_calls(w, session, id, tool, input).await
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_reach_the_server_and_secrets_stay_out_of_every_answer_and_file() {
    let scripted = McpServer::start().await;
    scripted.stream_answers();
    let w = world(json!({"maxMessageBytes": 1048576})).await;
    let token = "Bearer mcp-s3cr3t-token-4711";
    ok(&w
        .act(
            json!({"_": "SetSecret", "name": "mcp-scripted-authorization", "value": bytes(token),
                    "metadata": {"kind": "mcp-header"}}),
        )
        .await);
    let server = set_server(
        &w,
        "scripted",
        json!({"url": scripted.url(), "headers": {"x-plain": "visible"},
               "secretRefs": {"Authorization": "mcp-scripted-authorization"}}),
    )
    .await;
    assert_eq!(server["headerNames"], json!(["x-plain"]));
    assert_eq!(server["secretHeaderNames"], json!(["Authorization"]));
    assert_eq!(server["hasSecrets"], true);
    enable(&w, &["scripted"]).await;
    let session = w.session().await;
    let added = expanded(
        &w,
        &session,
        "c2",
        "mcp:scripted/add",
        json!({"a": 1, "b": 2}),
    )
    .await;
    assert_eq!(added["output"]["text"], "sum 3", "{added}");
    assert_eq!(added["output"]["structuredContent"]["sum"], 3.0);
    for request in scripted.requests() {
        assert_eq!(
            request.headers.get("authorization").map(String::as_str),
            Some(token)
        );
        assert_eq!(
            request.headers.get("x-plain").map(String::as_str),
            Some("visible")
        );
    }

    // A result past 256 KiB reaches the log cut, with the reference's notice.
    let big = expanded(
        &w,
        &session,
        "c3",
        "mcp:scripted/big",
        json!({"bytes": 300_000}),
    )
    .await;
    let big = output_text(&big);
    assert!(
        big.ends_with("_[MCP result truncated]_"),
        "{}",
        &big[big.len() - 40..]
    );
    assert!(big.len() <= 256 * 1024, "{}", big.len());
    // One past the message bound is refused whole.
    let huge = model_calls(
        &w,
        &session,
        "c4",
        "mcp:scripted/big",
        json!({"bytes": 2_000_000}),
    )
    .await;
    assert!(output_text(&huge).starts_with("mcp_too_large:"), "{huge}");
    // A JSON-RPC error is the tool's error.
    let failed = expanded(&w, &session, "c5", "mcp:scripted/fail", json!({})).await;
    assert_eq!(output_text(&failed), "mcp_tool_error: scripted failure");

    // A server that echoes the secret is not repeated.
    let echoed = expanded(&w, &session, "c7", "mcp:scripted/whoami", json!({})).await;
    assert_eq!(echoed["output"], "you sent [redacted]", "{echoed}");
    let refused = model_calls(
        &w,
        &session,
        "c8",
        "mcp:scripted/whoami",
        json!({"error": true}),
    )
    .await;
    assert_eq!(output_text(&refused), "mcp_tool_error: refused [redacted]");

    // Nothing anyone can read holds the value.
    for action in [
        json!({"_": "ListMcpServers"}),
        json!({"_": "ListAgentTools", "agentId": w.agent_id}),
        json!({"_": "GetSession", "sessionId": session}),
        json!({"_": "ListSecrets"}),
    ] {
        let answer = w.act(action.clone()).await;
        ok(&answer);
        assert!(
            !builtin::json_of(&answer.body)
                .to_string()
                .contains("s3cr3t"),
            "{action}"
        );
    }
    let mut files = 0;
    for entry in std::fs::read_dir(w.sc.dir.path()).expect("dir") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            files += 1;
            let stored = std::fs::read(&path).unwrap_or_default();
            assert!(
                !stored.windows(11).any(|w| w == b"s3cr3t-toke"),
                "the token is in {} in clear",
                path.display()
            );
        }
    }
    assert!(files >= 2, "the database and the log were read");

    // Deleting the server deletes the secret it owns.
    ok(&w
        .act(json!({"_": "DeleteMcpServer", "name": "scripted"}))
        .await);
    let secrets = w.act(json!({"_": "ListSecrets"})).await;
    assert!(!builtin::json_of(&secrets.body)
        .to_string()
        .contains("mcp-scripted-authorization"));
    // And the agent no longer reaches it (the server left its definition).
    let gone = model_calls(
        &w,
        &session,
        "c6",
        "mcp:scripted/add",
        json!({"a": 1, "b": 1}),
    )
    .await;
    assert!(output_text(&gone).starts_with("not_granted:"), "{gone}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_connection_or_a_forgotten_session_is_opened_again() {
    let scripted = McpServer::start().await;
    let w = world(json!({})).await;
    set_server(&w, "scripted", json!({"url": scripted.url()})).await;
    enable(&w, &["scripted"]).await;
    let session = w.session().await;
    let died = expanded(&w, &session, "c1", "mcp:scripted/die", json!({})).await;
    assert!(output_text(&died).starts_with("mcp_unreachable:"), "{died}");
    let again = expanded(
        &w,
        &session,
        "c3",
        "mcp:scripted/add",
        json!({"a": 1, "b": 1}),
    )
    .await;
    assert_eq!(again["output"]["text"], "sum 2", "{again}");
    let before = scripted
        .requests()
        .iter()
        .filter(|r| r.body["method"] == "initialize")
        .count();
    scripted.forget_sessions();
    let after_restart = model_calls(
        &w,
        &session,
        "c4",
        "mcp:scripted/add",
        json!({"a": 2, "b": 2}),
    )
    .await;
    assert_eq!(after_restart["output"]["text"], "sum 4", "{after_restart}");
    let initializes = scripted
        .requests()
        .iter()
        .filter(|r| r.body["method"] == "initialize")
        .count();
    assert_eq!(initializes, before + 1, "one new session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_rediscovers_once_per_run_and_scripts_journal_their_calls() {
    let scripted = McpServer::start().await;
    let w = world(json!({})).await;
    set_server(&w, "scripted", json!({"url": scripted.url()})).await;
    enable(&w, &["scripted"]).await;
    let lists = || {
        scripted
            .requests()
            .iter()
            .filter(|r| r.body["method"] == "tools/list")
            .count()
    };
    assert_eq!(lists(), 1, "set discovers once");
    let session = w.session().await;
    w.provider.push(tool_calls(&[
        (
            "u1",
            "call",
            json!({"tool": "mcp:scripted/newer", "input": {}}),
        ),
        (
            "u2",
            "call",
            json!({"tool": "mcp:scripted/newer", "input": {}}),
        ),
    ]));
    w.provider.push(tool_calls(&[(
        "u3",
        "call",
        json!({"tool": "mcp:scripted/newer", "input": {}}),
    )]));
    w.provider.push(text("none"));
    ok(&w.message(&session, "find newer").await);
    let events = w.events(&session).await;
    for id in ["u1", "u2", "u3"] {
        assert!(output_text(result_of(&events, id)).starts_with("not_found:"));
    }
    assert_eq!(lists(), 2, "one discovery in the run");

    // A script's call is an effect of its journal like any other.
    let script = "export default async function (input, ctx) {\n\
                  const sum = await ctx.call('mcp:scripted/add', {a: 2, b: 5});\n\
                  return {sum};\n\
                  }";
    w.provider.push(tool_calls(&[(
        "s1",
        "delegate",
        json!({"script": script, "input": {}, "title": "adder"}),
    )]));
    w.provider.push(text("added"));
    ok(&w.message(&session, "add in a script").await);
    let started = Instant::now();
    let result = loop {
        let events = w.events(&session).await;
        let found = events
            .iter()
            .find(|e| e["type"] == "tool_result" && e["toolCallId"] == "s1")
            .map(|e| e["output"].clone());
        match found {
            Some(output) if output["status"] == "succeeded" => break output,
            _ if started.elapsed() > PATIENCE => panic!("no script result: {events:?}"),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    assert!(
        result["output"]["sum"].to_string().contains("sum 7"),
        "{result}"
    );
    let child = result["runId"].as_str().expect("run id").to_owned();
    let journal = w.act(json!({"_": "GetRunJournal", "runId": child})).await;
    ok(&journal);
    let entries = builtin::json_of(&journal.body)["entries"].clone();
    let kinds: Vec<&str> = entries
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["entry"]["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["call", "result"], "{entries}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_call_times_out_and_the_turn_goes_on() {
    let scripted = McpServer::start().await;
    let w = world(json!({"callTimeoutMs": 1500})).await;
    set_server(&w, "scripted", json!({"url": scripted.url()})).await;
    enable(&w, &["scripted"]).await;
    let session = w.session().await;
    let hung = expanded(&w, &session, "c2", "mcp:scripted/hang", json!({})).await;
    assert_eq!(output_text(&hung), "mcp_timeout: no answer within 1500 ms");
    let requests = w.provider.requests();
    let last = &requests[requests.len() - 1].body;
    let sent = Sent::new(w.flavor, last).tool_results();
    assert!(sent
        .iter()
        .any(|(id, text)| id == "c2" && text.contains("mcp_timeout")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_cancels_a_call_in_flight() {
    let scripted = McpServer::start().await;
    let w = world(json!({})).await;
    set_server(&w, "scripted", json!({"url": scripted.url()})).await;
    enable(&w, &["scripted"]).await;
    let session = w.session().await;
    model_calls(&w, &session, "c1", "mcp:scripted/hang", json!({})).await;
    w.provider.push(tool_calls(&[(
        "c2",
        "call",
        json!({"tool": "mcp:scripted/hang", "input": {}}),
    )]));
    w.provider.push(text("never"));
    let turn = w.message_in_background(&session, "hang");
    common::eventually("the call reaches the server", || async {
        scripted
            .requests()
            .iter()
            .any(|r| r.body["params"]["name"] == "hang")
    })
    .await;
    let stopped = Instant::now();
    ok(&w.stop(&session).await);
    let answer = tokio::time::timeout(PATIENCE, turn)
        .await
        .expect("the turn ends")
        .expect("join");
    assert!(
        stopped.elapsed() < Duration::from_secs(30),
        "the stop did not wait for the call"
    );
    let _ = answer;
    let events = w.events(&session).await;
    assert!(
        output_text(result_of(&events, "c2")).starts_with("canceled:"),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_are_bounded_and_a_cancelled_run_lets_its_call_go() {
    let scripted = McpServer::start().await;
    let w = world(json!({"maxCalls": 1})).await;
    set_server(&w, "scripted", json!({"url": scripted.url()})).await;
    enable(&w, &["scripted"]).await;
    // A script child holds the one call slot with a call that never ends;
    // its parent turn waits for it.
    let waiting = w.session().await;
    let script = "export default async function (input, ctx) {\n\
                  return await ctx.call('mcp:scripted/hang', {});\n\
                  }";
    w.provider.push(tool_calls(&[(
        "s1",
        "delegate",
        json!({"script": script, "input": {}, "title": "hanger"}),
    )]));
    ok(&w.message(&waiting, "hang in a script").await);
    common::eventually("the script's call reaches the server", || async {
        scripted
            .requests()
            .iter()
            .any(|r| r.body["params"]["name"] == "hang")
    })
    .await;
    let session = w.session().await;
    let busy = expanded(
        &w,
        &session,
        "c2",
        "mcp:scripted/add",
        json!({"a": 1, "b": 1}),
    )
    .await;
    assert!(output_text(&busy).starts_with("mcp_busy:"), "{busy}");
    assert!(output_text(&busy).contains("mcp.maxCalls"), "{busy}");

    // Cancelling the script's run lets its call go, and the slot with it;
    // its parent hears and ends its turn.
    let runs = w.act(json!({"_": "ListRuns", "sessionId": waiting})).await;
    ok(&runs);
    let runs = builtin::json_of(&runs.body)["runs"].clone();
    let root = runs
        .as_array()
        .and_then(|r| r.first())
        .unwrap_or_else(|| panic!("the waiting turn's run: {runs}"))["rootRunId"]
        .as_str()
        .expect("root")
        .to_owned();
    let tree = w.act(json!({"_": "ListRuns", "rootRunId": root})).await;
    ok(&tree);
    let tree = builtin::json_of(&tree.body)["runs"].clone();
    let child = tree
        .as_array()
        .expect("runs")
        .iter()
        .find(|r| r["kind"] == "workflow")
        .unwrap_or_else(|| panic!("the script run: {tree}"))["id"]
        .as_str()
        .expect("id")
        .to_owned();
    w.provider.push(text("the script was canceled"));
    ok(&w.act(json!({"_": "CancelRun", "runId": child})).await);
    common::eventually("the parent's turn ends", || async {
        builtin::kinds(&w.events(&waiting).await)
            .last()
            .is_some_and(|k| k == "assistant:the script was canceled")
    })
    .await;
    let mut n = 3;
    let started = Instant::now();
    loop {
        let id = format!("c{n}");
        let added = model_calls(
            &w,
            &session,
            &id,
            "mcp:scripted/add",
            json!({"a": 2, "b": 2}),
        )
        .await;
        if added["output"]["text"] == "sum 4" {
            break;
        }
        assert!(output_text(&added).starts_with("mcp_busy:"), "{added}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        n += 1;
    }
}

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
    let w = world(json!({"servers": {
        "everything": {"command": "node", "args": [script, "stdio"]},
        "dying": {"command": "node", "args": [dying]},
    }}))
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
    enable(&w, &["everything", "dying"]).await;
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
