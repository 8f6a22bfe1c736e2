//! Scripted LLM provider servers: a real HTTP/1.1 server on loopback that
//! speaks the OpenAI chat completions, Anthropic messages or Google
//! generateContent API, answering each call with the next reply a test
//! queued, framed byte for byte as that provider frames its event stream.
//! Like Gemini 3, the Google flavor signs the first call of an answer
//! (`thoughtSignature`, and the last part of an answer without calls) and
//! refuses, 400 `INVALID_ARGUMENT`, a request that sends a call it signed
//! without that signature. It records every request so tests can assert
//! what a client sent, and
//! the instant each delta was handed to the connection so a benchmark can
//! measure streaming latency. Replies cost no more than building their
//! frames, so a default reply can serve thousands of calls per second.
//! `wire.rs` renders replies in each provider's format.

mod wire;

pub use wire::{google_call_signature, GOOGLE_TEXT_SIGNATURE};

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// Which API the server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    OpenAi,
    Anthropic,
    Google,
}

/// One scripted answer, served to one call (a model call or a model list).
#[derive(Clone, Debug)]
pub enum Reply {
    /// Each string is one text delta.
    Text(Vec<String>),
    /// Reasoning deltas, then text deltas.
    Reasoning {
        reasoning: Vec<String>,
        text: Vec<String>,
    },
    /// `(id, name, arguments)`: each call's arguments are split into
    /// several fragments where the API streams them in pieces (OpenAI and
    /// Anthropic; Google sends a call whole and gives no id).
    ToolCalls(Vec<(String, String, Value)>),
    /// This status with this body (as JSON).
    Status(u16, String),
    /// This status with this body and a `retry-after` header of this
    /// value (seconds or an HTTP date), as a busy provider answers.
    RetryAfter(u16, String, String),
    /// Text deltas with `gap` between two of them.
    Slow { deltas: Vec<String>, gap: Duration },
    /// The headers of a stream, then nothing, forever.
    Hang,
    /// A stream that fails after one delta: an Anthropic `error` event
    /// (`overloaded_error`), a Google `error` chunk (503), or an OpenAI
    /// stream that ends without a finish or `[DONE]`.
    StreamError,
    /// One text delta of this many bytes, in one event.
    Oversized(usize),
    /// The connection closed without an answer.
    Disconnect,
    /// The model list: `(id, display name)`.
    Models(Vec<(String, String)>),
}

/// What every scripted stream reports as input tokens. Output tokens are
/// the number of text and reasoning deltas plus the number of tool calls.
pub const INPUT_TOKENS: u64 = 17;

/// A request the server received. Header names are lower-case; `body` is
/// `Null` when the body was empty or not JSON.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    /// The path with its query.
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// The largest request body the server reads.
const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

#[derive(Default)]
struct Shared {
    queue: VecDeque<Reply>,
    default: Option<Reply>,
    recording: bool,
    requests: Vec<RecordedRequest>,
    last_sent_at: Arc<Mutex<Vec<Instant>>>,
    /// Google: `(name, args, signature)` of every call signed so far.
    signed_calls: Vec<(String, Value, String)>,
}

/// A running server; dropping it stops it and closes its connections.
pub struct ScriptedProvider {
    flavor: Flavor,
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedProvider {
    fn drop(&mut self) {
        // The accept task owns the connection tasks: aborting it aborts
        // them all.
        self.accept.abort();
    }
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A test that panicked while holding the lock has failed already; the
    // data is still what it recorded.
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

impl ScriptedProvider {
    /// Binds 127.0.0.1 on a free port and starts serving.
    pub async fn start(flavor: Flavor) -> ScriptedProvider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port for the scripted provider");
        let addr = listener
            .local_addr()
            .expect("the scripted provider's address");
        let shared = Arc::new(Mutex::new(Shared {
            recording: true,
            ..Shared::default()
        }));
        let accept = tokio::spawn(accept_loop(listener, flavor, shared.clone()));
        ScriptedProvider {
            flavor,
            addr,
            shared,
            accept,
        }
    }

    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The base URL a provider record would carry: `/v1` for OpenAI, the
    /// root for Anthropic, `/v1beta` for Google, as their public APIs.
    pub fn base_url(&self) -> String {
        let root = format!("http://{}", self.addr);
        match self.flavor {
            Flavor::OpenAi => format!("{root}/v1"),
            Flavor::Anthropic => root,
            Flavor::Google => format!("{root}/v1beta"),
        }
    }

    /// Queues a reply for the next call.
    pub fn push(&self, reply: Reply) {
        lock(&self.shared).queue.push_back(reply);
    }

    /// The reply served whenever the queue is empty (none: answer 500).
    pub fn set_default(&self, reply: Reply) {
        lock(&self.shared).default = Some(reply);
    }

    /// Whether requests are kept for `requests()` (on by default; a
    /// benchmark of many calls turns it off to keep memory flat).
    pub fn set_recording(&self, on: bool) {
        lock(&self.shared).recording = on;
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared).requests.clone()
    }

    /// Replies still queued.
    pub fn pending(&self) -> usize {
        lock(&self.shared).queue.len()
    }

    /// For the reply that started last, the instant each of its deltas was
    /// handed to the connection to be written.
    pub fn delta_sent_at(&self) -> Vec<Instant> {
        let last = lock(&self.shared).last_sent_at.clone();
        let sent = last.lock().unwrap_or_else(|e| e.into_inner()).clone();
        sent
    }
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    flavor: Flavor,
    shared: Arc<Mutex<Shared>>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors or the like: the next accept may work.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        while connections.try_join_next().is_some() {}
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let shared = shared.clone();
                async move { serve(flavor, &shared, request).await }
            });
            // A connection ends with an error when a reply disconnects on
            // purpose or the client goes away; neither concerns the server.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The error that makes hyper close a connection without answering.
#[derive(Debug)]
struct Disconnect;

impl std::fmt::Display for Disconnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "scripted disconnect")
    }
}

impl std::error::Error for Disconnect {}

async fn serve(
    flavor: Flavor,
    shared: &Mutex<Shared>,
    request: Request<Incoming>,
) -> Result<Response<ScriptBody>, Disconnect> {
    let method = request.method().as_str().to_owned();
    let path = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    let headers: BTreeMap<String, String> = request
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = http_body_util::Limited::new(request.into_body(), MAX_REQUEST_BYTES)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);

    if !wire::is_route(flavor, &method, &path) {
        return Ok(json_response(
            404,
            wire::error_body(&format!(
                "scripted {flavor:?} provider: no route for {method} {path}"
            )),
        ));
    }
    if flavor == Flavor::Google && method == "POST" {
        let refusal = wire::google_missing_signature(&body, &lock(shared).signed_calls);
        if let Some(message) = refusal {
            return Ok(json_response(
                400,
                wire::google_error_body(400, "INVALID_ARGUMENT", &message),
            ));
        }
    }
    let reply = {
        let mut shared = lock(shared);
        if shared.recording {
            shared.requests.push(RecordedRequest {
                method: method.clone(),
                path: path.clone(),
                headers,
                body: body.clone(),
            });
        }
        shared.queue.pop_front().or_else(|| shared.default.clone())
    };
    let Some(reply) = reply else {
        return Ok(json_response(
            500,
            wire::error_body(&format!(
                "scripted {flavor:?} provider: no reply queued for {method} {path}"
            )),
        ));
    };
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("scripted-model");
    match reply {
        Reply::Disconnect => Err(Disconnect),
        Reply::Status(status, body) => Ok(json_response(status, body)),
        Reply::RetryAfter(status, body, after) => {
            let mut response = json_response(status, body);
            if let Ok(value) = hyper::header::HeaderValue::from_str(&after) {
                response
                    .headers_mut()
                    .insert(hyper::header::RETRY_AFTER, value);
            }
            Ok(response)
        }
        Reply::Models(models) => Ok(json_response(200, wire::models_body(flavor, &models))),
        other => {
            let script = wire::Script::from_reply(&other);
            if flavor == Flavor::Google {
                lock(shared)
                    .signed_calls
                    .extend(wire::google_signed_calls(&script));
            }
            let frames = wire::render(flavor, model, &script);
            let sent_at = Arc::new(Mutex::new(Vec::with_capacity(frames.len())));
            lock(shared).last_sent_at = sent_at.clone();
            let body = ScriptBody {
                frames: frames.into(),
                sleep: None,
                hang: script.hang,
                sent_at,
            };
            let mut response = Response::new(body);
            let headers = response.headers_mut();
            headers.insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/event-stream"),
            );
            headers.insert(
                hyper::header::CACHE_CONTROL,
                hyper::header::HeaderValue::from_static("no-cache"),
            );
            Ok(response)
        }
    }
}

fn json_response(status: u16, body: String) -> Response<ScriptBody> {
    let mut response = Response::new(ScriptBody {
        frames: VecDeque::from([wire::Chunk {
            bytes: Bytes::from(body),
            delta: false,
            gap_before: Duration::ZERO,
        }]),
        sleep: None,
        hang: false,
        sent_at: Arc::default(),
    });
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A response body that hands its chunks over one by one, sleeping where
/// the script pauses, and never ends when the script hangs.
struct ScriptBody {
    frames: VecDeque<wire::Chunk>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    hang: bool,
    sent_at: Arc<Mutex<Vec<Instant>>>,
}

impl Body for ScriptBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        loop {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
                if let Some(next) = self.frames.front_mut() {
                    next.gap_before = Duration::ZERO;
                }
            }
            let Some(next) = self.frames.front() else {
                // Hanging: no waker is kept, so nothing ever wakes this.
                return if self.hang {
                    Poll::Pending
                } else {
                    Poll::Ready(None)
                };
            };
            if !next.gap_before.is_zero() {
                let gap = next.gap_before;
                self.sleep = Some(Box::pin(tokio::time::sleep(gap)));
                continue;
            }
            let Some(chunk) = self.frames.pop_front() else {
                continue;
            };
            if chunk.delta {
                self.sent_at
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Instant::now());
            }
            return Poll::Ready(Some(Ok(Frame::data(chunk.bytes))));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty() && !self.hang && self.sleep.is_none()
    }
}
