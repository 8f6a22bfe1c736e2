//! The three ways to reach an MCP server, behind one [`Transport`]:
//! Streamable HTTP (each message a POST whose answer is JSON or an event
//! stream, the session in `Mcp-Session-Id`), the legacy HTTP+SSE transport
//! (one GET stream carrying every answer, POSTs to the endpoint it names,
//! which must stay on the same origin), and stdio (an operator's command,
//! newline-delimited JSON-RPC through the adapter layer's confined child
//! process).
//!
//! Every read is bounded by `mcp.maxMessageBytes`; deadlines are the
//! caller's. Requests the server sends us are answered: `ping` with an
//! empty result, anything else (roots, sampling, elicitation: capabilities
//! we never offered) with "method not found". Redirects are not followed,
//! so headers carrying secrets go only where the account pointed them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agentos_adapters::builtin::provider::sse::{SseError, SseEvent, SseParser};
use agentos_adapters::{
    AdapterCommand, AdapterConnection, AdapterError, AdapterEvent, AdapterOptions,
};
use agentos_protocol::acp::RpcError;
use agentos_protocol::mcp::{self, headers, methods, Incoming};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::error::McpError;

/// How long a session's `DELETE` may take when a connection closes.
const CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Bytes of an HTTP error's body read for its message.
const QUOTED_BODY_BYTES: usize = 64 * 1024;

#[async_trait::async_trait]
pub(super) trait Transport: Send + Sync {
    /// Sends a request and waits for its answer; the caller bounds the wait.
    async fn request(&self, method: &str, params: Value) -> Result<Value, McpError>;
    async fn notify(&self, method: &str, params: Value) -> Result<(), McpError>;
    async fn close(&self);
    fn is_alive(&self) -> bool;
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A transport failure with its causes, without the URL (whose query may
/// carry a token).
fn unreachable(e: reqwest::Error) -> McpError {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    McpError::Unreachable(text)
}

/// The answer to a request of the server's.
fn serve(id: &Value, method: &str) -> Value {
    if method == methods::PING {
        json!({"jsonrpc": "2.0", "id": id, "result": {}})
    } else {
        mcp::error_response(id, &RpcError::method_not_found(method))
    }
}

/// Reads a whole body, at most `max` bytes.
async fn body(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, McpError> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
        if bytes.len() + chunk.len() > max {
            return Err(McpError::TooLarge(max as u64));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// A non-2xx answer as an error, quoting its body (at most 64 KiB read);
/// the connection layer scrubs secrets from it, then cuts it
/// (`McpError::scrubbed`), so a secret is never cut in half.
async fn status_error(response: reqwest::Response) -> McpError {
    let status = response.status().as_u16();
    let quoted = body(response, QUOTED_BODY_BYTES)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    if quoted.is_empty() {
        McpError::Unreachable(format!("HTTP {status}"))
    } else {
        McpError::Unreachable(format!("HTTP {status}: {quoted}"))
    }
}

/// The events a chunk of an event stream completes (the provider layer's
/// bounded parser: a line or event past `mcp.maxMessageBytes` is refused).
fn events(parser: &mut SseParser, chunk: &[u8]) -> Result<Vec<SseEvent>, McpError> {
    let mut out = Vec::new();
    parser.push(chunk, &mut out).map_err(|e| match e {
        SseError::TooLarge { limit } => McpError::TooLarge(limit as u64),
        SseError::InvalidUtf8 => McpError::Protocol(e.to_string()),
    })?;
    Ok(out)
}

fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// Whether a message, or a batch holding it, answers request `id`; the
/// server's own requests in it are collected.
fn find_answer(
    message: &Value,
    id: u64,
    requests: &mut Vec<(Value, String)>,
) -> Option<Result<Value, McpError>> {
    let messages: Vec<&Value> = match message {
        Value::Array(batch) => batch.iter().collect(),
        single => vec![single],
    };
    let mut answer = None;
    for message in messages {
        match mcp::classify(message) {
            Some(Incoming::Response {
                id: Some(got),
                result,
            }) if got == id => {
                answer = Some(result.map_err(McpError::Rpc));
            }
            Some(Incoming::Request { id, method }) => requests.push((id, method)),
            _ => {}
        }
    }
    answer
}

/// The `notifications/cancelled` of one request, sent if the request is
/// abandoned before its answer (the caller timed out or was cancelled).
struct CancelOnDrop(Option<reqwest::RequestBuilder>);

impl CancelOnDrop {
    fn notice(id: u64) -> Value {
        mcp::notification(
            methods::CANCELLED,
            &json!({"requestId": id, "reason": "the caller gave up on the request"}),
        )
    }

    /// The answer came: nothing to send.
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(post) = self.0.take() else { return };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = post.timeout(CLOSE_TIMEOUT).send().await;
            });
        }
    }
}

/// Streamable HTTP.
pub(super) struct StreamableHttp {
    client: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    session: Mutex<Option<String>>,
    version: Mutex<Option<String>>,
    next_id: AtomicU64,
    max_message: usize,
    alive: AtomicBool,
}

impl StreamableHttp {
    pub(super) fn new(
        client: reqwest::Client,
        url: reqwest::Url,
        headers: HeaderMap,
        max_message: usize,
    ) -> StreamableHttp {
        StreamableHttp {
            client,
            url,
            headers,
            session: Mutex::new(None),
            version: Mutex::new(None),
            next_id: AtomicU64::new(0),
            max_message,
            alive: AtomicBool::new(true),
        }
    }

    fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        let mut request = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(session) = lock(&self.session).clone() {
            request = request.header(headers::SESSION_ID, session);
        }
        if let Some(version) = lock(&self.version).clone() {
            request = request.header(headers::PROTOCOL_VERSION, version);
        }
        request
    }

    /// Sends one message and checks the status; a 404 on a session is the
    /// session's end.
    async fn send(&self, message: &Value) -> Result<reqwest::Response, McpError> {
        let response = self.post(message).send().await.map_err(unreachable)?;
        if response.status() == reqwest::StatusCode::NOT_FOUND && lock(&self.session).is_some() {
            self.alive.store(false, Ordering::Release);
            return Err(McpError::SessionExpired);
        }
        if !response.status().is_success() {
            return Err(status_error(response).await);
        }
        Ok(response)
    }

    async fn answer_requests(&self, requests: Vec<(Value, String)>) {
        for (id, method) in requests {
            if let Ok(response) = self.send(&serve(&id, &method)).await {
                let _ = body(response, self.max_message).await;
            }
        }
    }

    /// Reads an event stream until the answer to `id`.
    async fn read_stream(
        &self,
        mut response: reqwest::Response,
        id: u64,
    ) -> Result<Value, McpError> {
        let mut reader = SseParser::new(self.max_message);
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            let events = events(&mut reader, &chunk)?;
            for event in events {
                if event.event != "message" {
                    continue;
                }
                let Ok(message) = serde_json::from_str::<Value>(&event.data) else {
                    continue;
                };
                let mut requests = Vec::new();
                let answer = find_answer(&message, id, &mut requests);
                self.answer_requests(requests).await;
                if let Some(answer) = answer {
                    return answer;
                }
            }
        }
        Err(McpError::Protocol(
            "the event stream ended without an answer".into(),
        ))
    }

    /// One request and its answer.
    async fn exchange(&self, id: u64, method: &str, params: Value) -> Result<Value, McpError> {
        let response = self.send(&mcp::request(id, method, &params)).await?;
        if method == methods::INITIALIZE {
            let session = response
                .headers()
                .get(headers::SESSION_ID)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            *lock(&self.session) = session;
        }
        let answer = if is_event_stream(&response) {
            self.read_stream(response, id).await
        } else {
            let bytes = body(response, self.max_message).await?;
            let message: Value = serde_json::from_slice(&bytes)
                .map_err(|e| McpError::Protocol(format!("the answer is not JSON: {e}")))?;
            let mut requests = Vec::new();
            let answer = find_answer(&message, id, &mut requests);
            self.answer_requests(requests).await;
            answer.unwrap_or_else(|| {
                Err(McpError::Protocol(
                    "the answer does not answer the request".into(),
                ))
            })
        };
        if method == methods::INITIALIZE {
            if let Ok(result) = &answer {
                *lock(&self.version) = result
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
        }
        answer
    }
}

#[async_trait::async_trait]
impl Transport for StreamableHttp {
    async fn request(&self, method: &str, params: Value) -> Result<Value, McpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // `initialize` is never cancelled (the protocol forbids it).
        let mut cancel = CancelOnDrop(
            (method != methods::INITIALIZE).then(|| self.post(&CancelOnDrop::notice(id))),
        );
        let answer = self.exchange(id, method, params).await;
        cancel.disarm();
        answer
    }

    async fn notify(&self, method: &str, params: Value) -> Result<(), McpError> {
        let response = self.send(&mcp::notification(method, &params)).await?;
        let _ = body(response, self.max_message).await;
        Ok(())
    }

    async fn close(&self) {
        self.alive.store(false, Ordering::Release);
        let Some(session) = lock(&self.session).take() else {
            return;
        };
        let _ = self
            .client
            .delete(self.url.clone())
            .headers(self.headers.clone())
            .header(headers::SESSION_ID, session)
            .timeout(CLOSE_TIMEOUT)
            .send()
            .await;
    }

    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, McpError>>>>>;

/// The legacy HTTP+SSE transport.
pub(super) struct LegacySse {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    headers: HeaderMap,
    waiters: Waiters,
    next_id: AtomicU64,
    alive: Arc<AtomicBool>,
    reader: tokio::task::JoinHandle<()>,
}

impl LegacySse {
    /// Opens the stream and waits for the endpoint it names (the caller
    /// bounds the wait).
    pub(super) async fn connect(
        client: reqwest::Client,
        url: reqwest::Url,
        headers: HeaderMap,
        max_message: usize,
    ) -> Result<LegacySse, McpError> {
        let mut response = client
            .get(url.clone())
            .headers(headers.clone())
            .header(ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(unreachable)?;
        if !response.status().is_success() {
            return Err(status_error(response).await);
        }
        if !is_event_stream(&response) {
            return Err(McpError::Protocol(
                "the server did not open an event stream".into(),
            ));
        }
        let mut reader = SseParser::new(max_message);
        let mut early = Vec::new();
        let endpoint = 'found: loop {
            let Some(chunk) = response.chunk().await.map_err(unreachable)? else {
                return Err(McpError::Protocol(
                    "the event stream ended before naming its endpoint".into(),
                ));
            };
            let events = events(&mut reader, &chunk)?;
            let mut events = events.into_iter();
            while let Some(event) = events.next() {
                if event.event == "endpoint" {
                    early.extend(events);
                    break 'found event.data;
                }
            }
        };
        let endpoint = url
            .join(endpoint.trim())
            .map_err(|e| McpError::Protocol(format!("the endpoint is not a URL: {e}")))?;
        if endpoint.origin() != url.origin() {
            return Err(McpError::Protocol(
                "the endpoint is on another origin than the server".into(),
            ));
        }
        let waiters: Waiters = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let (requests_tx, mut requests_rx) = tokio::sync::mpsc::channel::<(Value, String)>(16);
        let reader_task = {
            let waiters = waiters.clone();
            let alive = alive.clone();
            let client = client.clone();
            let endpoint = endpoint.clone();
            let headers = headers.clone();
            // The server's requests are answered beside the reading.
            tokio::spawn(async move {
                while let Some((id, method)) = requests_rx.recv().await {
                    let _ = client
                        .post(endpoint.clone())
                        .headers(headers.clone())
                        .header(CONTENT_TYPE, "application/json")
                        .body(serve(&id, &method).to_string())
                        .send()
                        .await;
                }
            });
            tokio::spawn(async move {
                let deliver = |event: SseEvent| {
                    if event.event != "message" {
                        return;
                    }
                    let Ok(message) = serde_json::from_str::<Value>(&event.data) else {
                        return;
                    };
                    match mcp::classify(&message) {
                        Some(Incoming::Response {
                            id: Some(id),
                            result,
                        }) => {
                            if let Some(waiter) = lock(&waiters).remove(&id) {
                                let _ = waiter.send(result.map_err(McpError::Rpc));
                            }
                        }
                        Some(Incoming::Request { id, method }) => {
                            let _ = requests_tx.try_send((id, method));
                        }
                        _ => {}
                    }
                };
                for event in early {
                    deliver(event);
                }
                let end = loop {
                    match response.chunk().await {
                        Ok(Some(chunk)) => match events(&mut reader, &chunk) {
                            Ok(events) => events.into_iter().for_each(&deliver),
                            Err(e) => break e,
                        },
                        Ok(None) => break McpError::Unreachable("the event stream closed".into()),
                        Err(e) => break unreachable(e),
                    }
                };
                alive.store(false, Ordering::Release);
                for (_, waiter) in lock(&waiters).drain() {
                    let _ = waiter.send(Err(end.clone()));
                }
            })
        };
        Ok(LegacySse {
            client,
            endpoint,
            headers,
            waiters,
            next_id: AtomicU64::new(0),
            alive,
            reader: reader_task,
        })
    }

    async fn post(&self, message: &Value) -> Result<(), McpError> {
        let response = self
            .client
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(message.to_string())
            .send()
            .await
            .map_err(unreachable)?;
        if !response.status().is_success() {
            return Err(status_error(response).await);
        }
        Ok(())
    }
}

/// Removes a waiter whose caller gave up.
struct WaiterGuard<'a> {
    waiters: &'a Waiters,
    id: u64,
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        lock(self.waiters).remove(&self.id);
    }
}

#[async_trait::async_trait]
impl Transport for LegacySse {
    async fn request(&self, method: &str, params: Value) -> Result<Value, McpError> {
        if !self.is_alive() {
            return Err(McpError::Unreachable("the event stream closed".into()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.waiters).insert(id, tx);
        let _guard = WaiterGuard {
            waiters: &self.waiters,
            id,
        };
        // The reader may have ended between the check and the insert (its
        // last act fails the waiters it finds).
        if !self.is_alive() {
            return Err(McpError::Unreachable("the event stream closed".into()));
        }
        let mut cancel = CancelOnDrop((method != methods::INITIALIZE).then(|| {
            self.client
                .post(self.endpoint.clone())
                .headers(self.headers.clone())
                .header(CONTENT_TYPE, "application/json")
                .body(CancelOnDrop::notice(id).to_string())
        }));
        let sent = self.post(&mcp::request(id, method, &params)).await;
        let answer = match sent {
            Ok(()) => rx
                .await
                .unwrap_or_else(|_| Err(McpError::Unreachable("the event stream closed".into()))),
            Err(e) => Err(e),
        };
        cancel.disarm();
        answer
    }

    async fn notify(&self, method: &str, params: Value) -> Result<(), McpError> {
        self.post(&mcp::notification(method, &params)).await
    }

    async fn close(&self) {
        self.alive.store(false, Ordering::Release);
        self.reader.abort();
        for (_, waiter) in lock(&self.waiters).drain() {
            let _ = waiter.send(Err(McpError::Unreachable("the connection closed".into())));
        }
    }

    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}

impl Drop for LegacySse {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// An operator's command server over stdio. Dropped without a close
/// (a call abandoned while it opened), it still ends its process.
pub(super) struct Stdio {
    conn: AdapterConnection,
}

impl Drop for Stdio {
    fn drop(&mut self) {
        if !self.conn.is_alive() {
            return;
        }
        let conn = self.conn.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { conn.shutdown().await });
        }
    }
}

impl Stdio {
    pub(super) async fn spawn(
        command: &AdapterCommand,
        max_message: usize,
    ) -> Result<Stdio, McpError> {
        let options = AdapterOptions {
            max_read_line_bytes: max_message,
            stdout_buffer_bytes: max_message,
            ..AdapterOptions::default()
        };
        let (conn, mut events) = AdapterConnection::spawn(command, options)
            .await
            .map_err(|e| McpError::Unreachable(e.to_string()))?;
        let answers = conn.clone();
        let program = command.program.clone();
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                match event {
                    AdapterEvent::Request { id, method, .. } => {
                        let answer = if method == methods::PING {
                            Ok(json!({}))
                        } else {
                            Err(RpcError::method_not_found(&method))
                        };
                        let _ = answers.respond(&id, answer);
                    }
                    AdapterEvent::Stderr(line) => {
                        tracing::debug!(server = %program, %line, "MCP server stderr");
                    }
                    AdapterEvent::Exited { .. } => break,
                    _ => {}
                }
            }
        });
        Ok(Stdio { conn })
    }
}

fn adapter_error(e: AdapterError) -> McpError {
    match e {
        AdapterError::Rpc(error) => McpError::Rpc(error),
        AdapterError::Exited | AdapterError::Closed => McpError::Exited,
        AdapterError::LineTooLong { limit } | AdapterError::StdoutBudget { limit } => {
            McpError::TooLarge(limit as u64)
        }
        other => McpError::Protocol(other.to_string()),
    }
}

#[async_trait::async_trait]
impl Transport for Stdio {
    async fn request(&self, method: &str, params: Value) -> Result<Value, McpError> {
        // `initialize` is never cancelled (the protocol forbids it).
        let answer = if method == methods::INITIALIZE {
            self.conn.request(method, params).await
        } else {
            self.conn
                .request_or_cancel(method, params, methods::CANCELLED)
                .await
        };
        answer.map_err(adapter_error)
    }

    async fn notify(&self, method: &str, params: Value) -> Result<(), McpError> {
        self.conn.notify(method, params).map_err(adapter_error)
    }

    async fn close(&self) {
        self.conn.shutdown().await;
    }

    fn is_alive(&self) -> bool {
        self.conn.is_alive()
    }
}

/// The header map of a server's configured and secret headers; a name or
/// value HTTP cannot carry is an error naming the header only.
pub(super) fn header_map(pairs: &[(String, String)]) -> Result<HeaderMap, McpError> {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| McpError::Invalid(format!("MCP header name {name:?} is invalid")))?;
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| McpError::Invalid(format!("MCP header {name:?} has an invalid value")))?;
        value.set_sensitive(true);
        map.insert(header, value);
    }
    Ok(map)
}
