//! MCP servers as callables against a scripted server of our own
//! (`agentos_tests::mcp_server`), for what the reference server cannot
//! show: the headers it received (a secret among them, and one it echoes
//! back), a death mid-call, a session it forgot, an answer past the
//! bounds, a call that hangs (the timeout, a stop, a cancelled run and the
//! VM-wide bound on calls in flight), and one discovery per run.

#[path = "common/builtin.rs"]
mod builtin;
mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::time::{Duration, Instant};

use agentos_tests::mcp_server::McpServer;
use agentos_tests::seed::bytes;
use builtin::{ok, text, tool_calls, Sent};
use common::PATIENCE;
use mcp::{enable, expanded, model_calls, output_text, result_of, set_server, world};
use serde_json::json;

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
    let bare = model_calls(
        &w,
        &session,
        "c9",
        "mcp:scripted/whoami",
        json!({"bare": true}),
    )
    .await;
    assert_eq!(bare["output"], "you sent [redacted]", "{bare}");

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
    // The server hears that the call was given up.
    let hang_id = scripted
        .requests()
        .iter()
        .find(|r| r.body["params"]["name"] == "hang")
        .map(|r| r.body["id"].clone())
        .expect("the hanging call");
    common::eventually("the server hears the call was cancelled", || async {
        scripted.requests().iter().any(|r| {
            r.body["method"] == "notifications/cancelled"
                && r.body["params"]["requestId"] == hang_id
        })
    })
    .await;
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
    // A listing takes a call's slot too: refused, not piled up.
    for action in [
        json!({"_": "RefreshMcpServer", "name": "scripted"}),
        json!({"_": "ListMcpServerTools", "name": "scripted"}),
    ] {
        let refused = w.act(action.clone()).await;
        assert_eq!(refused.status, 429, "{action}: {:?}", refused.body);
    }
    let saved = set_server(&w, "other", json!({"url": scripted.url()})).await;
    assert!(
        saved["error"]
            .as_str()
            .unwrap_or_default()
            .contains("mcp.maxCalls"),
        "{saved}"
    );

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_listing_too_much_is_kept_within_bounds() {
    let scripted = McpServer::start().await;
    let w = world(json!({"maxMessageBytes": 4194304})).await;
    // 600 tools: 512 kept.
    scripted.more_tools(600, 10);
    let many = set_server(&w, "many", json!({"url": scripted.url()})).await;
    assert_eq!(many["toolCount"], 512, "{many}");
    // A 3 MiB listing of long descriptions: the kept JSON stays within
    // 1 MiB.
    scripted.more_tools(100, 30 * 1024);
    let long = set_server(&w, "long", json!({"url": scripted.url()})).await;
    let kept = long["toolCount"].as_u64().expect("a count");
    assert!((30..=40).contains(&kept), "{long}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_abandoned_while_it_opens_gives_its_room_back() {
    let scripted = McpServer::start().await;
    let w = world(json!({"maxConnections": 1, "connectTimeoutMs": 300})).await;
    set_server(&w, "scripted", json!({"url": scripted.url()})).await;
    scripted.forget_sessions();
    scripted.hang_initialize(true);
    // Each look gives up while the connection opens.
    for _ in 0..4 {
        let refreshed = w
            .act(json!({"_": "RefreshMcpServer", "name": "scripted"}))
            .await;
        ok(&refreshed);
        let server = builtin::json_of(&refreshed.body)["server"].clone();
        assert!(
            server["error"]
                .as_str()
                .unwrap_or_default()
                .contains("300 ms"),
            "{server}"
        );
    }
    // The one connection's room is still there.
    scripted.hang_initialize(false);
    let refreshed = w
        .act(json!({"_": "RefreshMcpServer", "name": "scripted"}))
        .await;
    ok(&refreshed);
    let server = builtin::json_of(&refreshed.body)["server"].clone();
    assert!(server.get("error").is_none(), "{server}");
    assert_eq!(server["toolCount"], 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegated_child_reaches_only_the_mcp_tools_its_brief_names() {
    let scripted = McpServer::start().await;
    let w = world(json!({})).await;
    set_server(&w, "scripted", json!({"url": scripted.url()})).await;
    enable(&w, &["scripted"]).await;
    let session = w.session().await;
    w.provider.push(tool_calls(&[(
        "d1",
        "delegate",
        json!({"brief": "add one and one", "tools": ["mcp:scripted/add"]}),
    )]));
    // The child: a tool it was not given, then its own (contract, call).
    w.provider.push(tool_calls(&[
        (
            "w1",
            "call",
            json!({"tool": "mcp:scripted/whoami", "input": {}}),
        ),
        (
            "a1",
            "call",
            json!({"tool": "mcp:scripted/add", "input": {"a": 1, "b": 1}}),
        ),
        (
            "a2",
            "call",
            json!({"tool": "mcp:scripted/add", "input": {"a": 1, "b": 1}}),
        ),
    ]));
    w.provider.push(text("two"));
    w.provider.push(text("the child says two"));
    ok(&w.message(&session, "delegate it").await);
    let started = Instant::now();
    let child = loop {
        let events = w.events(&session).await;
        if builtin::kinds(&events).last().map(String::as_str)
            == Some("assistant:the child says two")
        {
            break result_of(&events, "d1")["output"]["sessionId"]
                .as_str()
                .expect("the child's session")
                .to_owned();
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the parent never resumed: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let events = w.events(&child).await;
    assert!(
        output_text(result_of(&events, "w1")).starts_with("not_granted:"),
        "{events:?}"
    );
    assert_eq!(
        result_of(&events, "a2")["output"]["text"],
        "sum 2",
        "{events:?}"
    );
}
