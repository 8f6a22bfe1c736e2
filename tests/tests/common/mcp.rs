//! The MCP tests' shared helpers: the MCP reference server
//! (`@modelcontextprotocol/server-everything` from `.peers/`) started on a
//! free port, a builtin world whose accounts may point servers at loopback,
//! and turns in which the model calls a tool through `call`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentos_tests::provider_server::Flavor;
use serde_json::{json, Value};

use crate::builtin::{self, ok, text, tool_calls, world_sections, World};

pub fn everything_script() -> Option<PathBuf> {
    let script = crate::common::workspace_root()
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
pub struct Everything {
    _child: tokio::process::Child,
    pub url: String,
}

/// Starts the reference server in `mode` (`streamableHttp` or `sse`) on a
/// free port; waits until it accepts connections.
pub async fn everything(mode: &str) -> Option<Everything> {
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
pub async fn world(mcp: Value) -> World {
    let mut section = json!({"allowPrivateUrls": true});
    for (k, v) in mcp.as_object().into_iter().flatten() {
        section[k] = v.clone();
    }
    world_sections(Flavor::OpenAi, json!({"mcp": section})).await
}

pub async fn set_server(w: &World, name: &str, config: Value) -> Value {
    let set = w
        .act(json!({"_": "SetMcpServer", "name": name, "config": config}))
        .await;
    ok(&set);
    builtin::json_of(&set.body)["server"].clone()
}

/// Grants the agent these servers.
pub async fn enable(w: &World, servers: &[&str]) {
    let mut definition = builtin::definition(None);
    definition["mcpServers"] = json!(servers);
    ok(&w
        .act(json!({"_": "UpdateAgent", "agentId": w.agent_id, "definition": definition}))
        .await);
}

pub fn result_of<'a>(events: &'a [Value], call_id: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == "tool_result" && e["toolCallId"] == call_id)
        .unwrap_or_else(|| panic!("no result for {call_id} in {events:?}"))
}

/// A result's text: its output, or its error (`code: message`).
pub fn output_text(result: &Value) -> String {
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
pub async fn model_calls(w: &World, session: &str, id: &str, tool: &str, input: Value) -> Value {
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
pub async fn expanded(w: &World, session: &str, id: &str, tool: &str, input: Value) -> Value {
    model_calls(w, session, &format!("{id}-contract"), tool, input.clone()).await;
    model_calls(w, session, id, tool, input).await
}
