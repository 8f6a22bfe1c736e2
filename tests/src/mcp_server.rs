//! A scripted MCP server over Streamable HTTP on loopback, for what the
//! reference server cannot show: it records every request's headers (so a
//! test sees the secret header arrive, and where it went), answers JSON or
//! an event stream, and has tools that misbehave on purpose:
//! - `add {a, b}`: the sum, as text and structured content;
//! - `big {bytes}`: a text of that many bytes;
//! - `hang`: never answers (the request stays open);
//! - `die`: closes the connection without answering;
//! - `fail`: a JSON-RPC error;
//! - `whoami`: the `Authorization` header it was sent (or its credential
//!   alone, `bare`), as text (a server that echoes a secret), and again in
//!   a JSON-RPC error when asked.
//!
//! Sessions are real: `initialize` issues an `Mcp-Session-Id`, a request
//! naming an unknown one is 404, and [`McpServer::forget_sessions`] makes
//! every session unknown (as a restarted server would).

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::{json, Value};

/// One request the server received: method, path and lower-case headers.
#[derive(Clone, Debug)]
pub struct McpRequest {
    pub method: String,
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

#[derive(Default)]
struct State {
    requests: Vec<McpRequest>,
    sessions: HashSet<String>,
    /// Answer `tools/call` as an event stream instead of JSON.
    stream: bool,
    /// More tools listed: how many, and each description's bytes.
    extra_tools: (usize, usize),
    /// `initialize` never answers.
    hang_initialize: bool,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct McpServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Debug)]
struct Die;

impl std::fmt::Display for Die {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "scripted death")
    }
}

impl std::error::Error for Die {}

fn tools(extra: (usize, usize)) -> Value {
    let mut tools = base_tools();
    if let Value::Array(list) = &mut tools {
        for i in 0..extra.0 {
            list.push(
                json!({"name": format!("t{i}"), "description": "d".repeat(extra.1),
                             "inputSchema": {"type": "object"}}),
            );
        }
    }
    tools
}

fn base_tools() -> Value {
    json!([
        {"name": "add", "description": "Adds two numbers.\nReturns their sum.",
         "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                         "required": ["a", "b"]}},
        {"name": "big", "description": "A long text.",
         "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}}},
        {"name": "hang", "description": "Never answers.", "inputSchema": {"type": "object"}},
        {"name": "die", "description": "Closes the connection.", "inputSchema": {"type": "object"}},
        {"name": "fail", "description": "A JSON-RPC error.", "inputSchema": {"type": "object"}},
        {"name": "whoami", "description": "Echoes the Authorization header.",
         "inputSchema": {"type": "object", "properties": {"error": {"type": "boolean"},
                                                        "bare": {"type": "boolean"}}}},
    ])
}

fn reply(status: u16, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

impl McpServer {
    pub async fn start() -> McpServer {
        let state: Arc<Mutex<State>> = Arc::default();
        let shared = state.clone();
        let (addr, task) = crate::loopback::serve("the MCP server", move |request| {
            let state = shared.clone();
            async move { serve(&state, request).await }
        })
        .await;
        McpServer { addr, state, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn requests(&self) -> Vec<McpRequest> {
        lock(&self.state).requests.clone()
    }

    /// Answers tool calls as event streams from now on.
    pub fn stream_answers(&self) {
        lock(&self.state).stream = true;
    }

    /// Lists `count` more tools, each described in `description_bytes`.
    pub fn more_tools(&self, count: usize, description_bytes: usize) {
        lock(&self.state).extra_tools = (count, description_bytes);
    }

    /// `initialize` hangs from now on (`false`: answers again).
    pub fn hang_initialize(&self, hang: bool) {
        lock(&self.state).hang_initialize = hang;
    }

    /// Every session becomes unknown (404), as after a server restart.
    pub fn forget_sessions(&self) {
        lock(&self.state).sessions.clear();
    }
}

async fn serve(
    state: &Mutex<State>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Die> {
    let method = request.method().to_string();
    let headers: BTreeMap<String, String> = request
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    lock(state).requests.push(McpRequest {
        method: method.clone(),
        headers: headers.clone(),
        body: body.clone(),
    });
    if method == "DELETE" {
        if let Some(session) = headers.get("mcp-session-id") {
            lock(state).sessions.remove(session);
        }
        return Ok(reply(200, "text/plain", String::new()));
    }
    if method != "POST" {
        return Ok(reply(405, "text/plain", "POST only".into()));
    }
    let rpc_method = body["method"].as_str().unwrap_or_default().to_owned();
    let id = body.get("id").cloned();
    if rpc_method == "initialize" {
        if lock(state).hang_initialize {
            std::future::pending::<()>().await;
        }
        let session = uuid::Uuid::new_v4().to_string();
        lock(state).sessions.insert(session.clone());
        let mut response = reply(
            200,
            "application/json",
            json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "scripted", "version": "1"}}})
            .to_string(),
        );
        if let Ok(value) = hyper::header::HeaderValue::from_str(&session) {
            response.headers_mut().insert("mcp-session-id", value);
        }
        return Ok(response);
    }
    let known = headers
        .get("mcp-session-id")
        .is_some_and(|s| lock(state).sessions.contains(s));
    if !known {
        return Ok(reply(
            404,
            "application/json",
            r#"{"error":"unknown session"}"#.into(),
        ));
    }
    let Some(id) = id else {
        return Ok(reply(202, "text/plain", String::new()));
    };
    let result = match rpc_method.as_str() {
        "tools/list" => json!({"tools": tools(lock(state).extra_tools)}),
        "tools/call" => {
            let args = &body["params"]["arguments"];
            match body["params"]["name"].as_str().unwrap_or_default() {
                "add" => {
                    let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
                    json!({"content": [{"type": "text", "text": format!("sum {sum}")}],
                           "structuredContent": {"sum": sum}})
                }
                "big" => {
                    let n = args["bytes"].as_u64().unwrap_or(0) as usize;
                    json!({"content": [{"type": "text", "text": "x".repeat(n)}]})
                }
                "hang" => {
                    std::future::pending::<()>().await;
                    Value::Null
                }
                "die" => return Err(Die),
                "whoami" => {
                    let mut sent = headers.get("authorization").cloned().unwrap_or_default();
                    if args["bare"] == Value::Bool(true) {
                        // The credential alone, without its scheme.
                        sent = sent
                            .split_once(' ')
                            .map(|(_, c)| c.to_owned())
                            .unwrap_or(sent);
                    }
                    if args["error"] == Value::Bool(true) {
                        return Ok(reply(
                            200,
                            "application/json",
                            json!({"jsonrpc": "2.0", "id": id,
                                   "error": {"code": -32000, "message": format!("refused {sent}")}})
                            .to_string(),
                        ));
                    }
                    json!({"content": [{"type": "text", "text": format!("you sent {sent}")}],
                           "structuredContent": {"sent": sent}})
                }
                "fail" => {
                    return Ok(reply(
                        200,
                        "application/json",
                        json!({"jsonrpc": "2.0", "id": id,
                               "error": {"code": -32000, "message": "scripted failure"}})
                        .to_string(),
                    ))
                }
                other => json!({"content": [{"type": "text", "text": format!("no tool {other}")}],
                                "isError": true}),
            }
        }
        other => {
            return Ok(reply(
                200,
                "application/json",
                json!({"jsonrpc": "2.0", "id": id,
                       "error": {"code": -32601, "message": format!("no method {other}")}})
                .to_string(),
            ))
        }
    };
    let message = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
    if lock(state).stream && rpc_method == "tools/call" {
        // A log notification first, then the answer, as a server streams.
        let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                          "params": {"level": "info", "data": "working"}});
        return Ok(reply(
            200,
            "text/event-stream",
            format!("event: message\ndata: {note}\n\nid: 1\ndata: {message}\n\n"),
        ));
    }
    Ok(reply(200, "application/json", message))
}
