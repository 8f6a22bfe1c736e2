//! The builtin model agent's view of LLM providers: one request shape, one
//! stream of deltas and one error type, whatever API answers. Each provider
//! family has its own file that maps the request onto its wire format and
//! reads its event stream back (`openai.rs` for OpenAI and every
//! OpenAI-compatible server, `anthropic.rs`, `google.rs`); `transport.rs`
//! owns the HTTP client and the bounds every read is held to; `sse.rs` cuts
//! the bytes into events. Calls always stream, so the agent can forward
//! text as it is generated and a stalled provider is noticed by silence.

mod anthropic;
mod codex;
mod google;
mod openai;
pub mod sse;
mod transport;

use std::time::Duration;

pub use agentos_protocol::agent_ext::ImagePart;

pub use openai::Rendered;
use transport::Transport;

/// The API family a provider speaks, read from the Seed provider record's
/// `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    OpenAi,
    Anthropic,
    Google,
    /// Any other `type` (`custom`, `ollama`, `openrouter`, …): the
    /// OpenAI chat completions API at the record's base URL.
    OpenAiCompatible,
    /// A ChatGPT subscription (an `openai` provider signed in with
    /// ChatGPT): the Codex backend's Responses API.
    OpenAiCodex,
}

impl ProviderKind {
    pub fn from_type(t: &str) -> ProviderKind {
        match t {
            "openai" => ProviderKind::OpenAi,
            "anthropic" => ProviderKind::Anthropic,
            "google" => ProviderKind::Google,
            "openai-codex" => ProviderKind::OpenAiCodex,
            _ => ProviderKind::OpenAiCompatible,
        }
    }

    /// Whether the family writes each message of a conversation as a value
    /// of its own, so that the leading ones may be written once
    /// ([`Rendered`]): chat completions do; Anthropic and Google fold a
    /// run of messages into one turn, and Codex a message into several
    /// items, so they write the whole conversation at each call.
    pub fn writes_messages_alone(&self) -> bool {
        matches!(self, ProviderKind::OpenAi | ProviderKind::OpenAiCompatible)
    }

    /// The public API's address, for records that name none. A compatible
    /// server has no default: its record must carry a base URL.
    pub fn default_base_url(&self) -> Option<&'static str> {
        match self {
            ProviderKind::OpenAi => Some("https://api.openai.com/v1"),
            ProviderKind::Anthropic => Some("https://api.anthropic.com"),
            ProviderKind::Google => Some("https://generativelanguage.googleapis.com/v1beta"),
            ProviderKind::OpenAiCodex => Some("https://chatgpt.com/backend-api"),
            ProviderKind::OpenAiCompatible => None,
        }
    }
}

/// Where and as whom to call.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub kind: ProviderKind,
    pub base_url: String,
    pub api_key: Option<String>,
    /// The base URL was chosen by a client (a custom provider's `baseUrl`),
    /// not by the operator: it must lead to a public address.
    pub public_only: bool,
    /// The ChatGPT account a subscription's calls are for.
    pub account_id: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    // The key never reaches a log line through a `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("public_only", &self.public_only)
            .field("account_id", &self.account_id.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema with an object at the root.
    pub parameters: serde_json::Value,
}

/// A call the model made. `arguments` is the JSON the model wrote; when the
/// model wrote text that does not parse, it is that text as a JSON string,
/// so the agent can tell the model rather than fail the turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
    /// The provider's opaque signature of the reasoning behind the call
    /// (Gemini's `thoughtSignature`), sent back with the call verbatim.
    pub signature: Option<String>,
}

/// One entry of the conversation sent to the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    User {
        text: String,
    },
    Assistant {
        text: String,
        tool_calls: Vec<ToolCall>,
        /// The signature the provider put on the answer's text (Gemini's
        /// `thoughtSignature` on a text part), sent back with the text.
        signature: Option<String>,
    },
    ToolResult {
        call_id: String,
        name: String,
        content: String,
        is_error: bool,
        /// Images shown with the result, in the turn that read them (the
        /// log keeps only `content`). Each family places them its own way.
        images: Vec<ImagePart>,
    },
}

/// One model call.
#[derive(Clone, Debug, Default)]
pub struct ModelRequest {
    pub model: String,
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub max_tokens: u32,
    /// What the provider may key its prompt cache on (the session): sent
    /// where the API takes one.
    pub cache_key: Option<String>,
    /// The chat completions form of the leading messages, written once
    /// and resent as written (see [`Rendered`]); the other families write
    /// every message at each call.
    pub rendered: Rendered,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Why the model stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopKind {
    EndTurn,
    ToolUse,
    MaxTokens,
    Refusal,
}

/// What a stream hands over as it arrives. A `ToolCall` comes whole, once
/// its arguments are complete; `Usage` comes once, near the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEvent {
    TextDelta(String),
    ReasoningDelta(String),
    ToolCall(ToolCall),
    Usage(Usage),
    /// A signature on the answer's text rather than on a call (Gemini puts
    /// it on the last part, often an empty one); the last one counts.
    TextSignature(String),
}

/// A model a provider offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    pub id: String,
    pub name: String,
}

/// Whether trying again later may succeed (`Retryable`: the network, a rate
/// limit, an overloaded or failing provider) or the call is wrong as it is
/// configured (`Configuration`: the key, the model, the request, a provider
/// that does not speak the protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    Retryable,
    Configuration,
}

/// A failed provider call. `code` is one of the stable codes below;
/// `message` is for people and carries the provider's own words when it
/// gave any, never the API key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderError {
    pub class: ErrorClass,
    pub status: Option<u16>,
    pub code: &'static str,
    pub message: String,
    /// How long the provider asked to be left alone (`retry-after-ms` or
    /// `retry-after`, in seconds or as a date), when it said.
    pub retry_after: Option<Duration>,
    /// The error answer's body, when it was JSON (a family may word the
    /// error from its fields); dropped before the error leaves a call.
    pub body: Option<serde_json::Value>,
}

pub const PROVIDER_NETWORK: &str = "provider_network";
pub const PROVIDER_RATE_LIMITED: &str = "provider_rate_limited";
pub const PROVIDER_SERVER_ERROR: &str = "provider_server_error";
pub const PROVIDER_AUTH: &str = "provider_auth";
pub const PROVIDER_BAD_REQUEST: &str = "provider_bad_request";
pub const PROVIDER_NOT_FOUND: &str = "provider_not_found";
pub const PROVIDER_PROTOCOL: &str = "provider_protocol";
pub const PROVIDER_TIMEOUT: &str = "provider_timeout";
pub const PROVIDER_RESPONSE_TOO_LARGE: &str = "provider_response_too_large";

impl ProviderError {
    fn new(class: ErrorClass, code: &'static str, message: impl Into<String>) -> ProviderError {
        ProviderError {
            class,
            status: None,
            code,
            message: message.into(),
            retry_after: None,
            body: None,
        }
    }

    pub fn is_retryable(&self) -> bool {
        self.class == ErrorClass::Retryable
    }

    pub(crate) fn network(message: impl Into<String>) -> ProviderError {
        ProviderError::new(ErrorClass::Retryable, PROVIDER_NETWORK, message)
    }

    pub(crate) fn timeout(message: impl Into<String>) -> ProviderError {
        ProviderError::new(ErrorClass::Retryable, PROVIDER_TIMEOUT, message)
    }

    /// The provider answered something this client cannot read: retrying
    /// the same call against the same server would read the same thing.
    pub(crate) fn protocol(message: impl Into<String>) -> ProviderError {
        ProviderError::new(ErrorClass::Configuration, PROVIDER_PROTOCOL, message)
    }

    pub(crate) fn too_large(message: impl Into<String>) -> ProviderError {
        ProviderError::new(
            ErrorClass::Configuration,
            PROVIDER_RESPONSE_TOO_LARGE,
            message,
        )
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ProviderError {
        ProviderError::new(ErrorClass::Configuration, PROVIDER_BAD_REQUEST, message)
    }

    /// An HTTP error status, with the provider's message when its body has
    /// one.
    pub(crate) fn from_status(status: u16, body: &[u8]) -> ProviderError {
        let (class, code) = match status {
            429 => (ErrorClass::Retryable, PROVIDER_RATE_LIMITED),
            // 408 is the server giving up waiting for the request: the
            // network's fault, not the request's.
            408 => (ErrorClass::Retryable, PROVIDER_TIMEOUT),
            500..=599 => (ErrorClass::Retryable, PROVIDER_SERVER_ERROR),
            401 | 403 => (ErrorClass::Configuration, PROVIDER_AUTH),
            404 => (ErrorClass::Configuration, PROVIDER_NOT_FOUND),
            400..=499 => (ErrorClass::Configuration, PROVIDER_BAD_REQUEST),
            // A redirect is not followed (the key would go along to
            // wherever it points) and anything else is not an answer.
            _ => (ErrorClass::Configuration, PROVIDER_PROTOCOL),
        };
        let detail = error_detail(body);
        let message = match detail {
            Some(detail) => format!("the provider answered HTTP {status}: {detail}"),
            None => format!("the provider answered HTTP {status}"),
        };
        ProviderError {
            class,
            status: Some(status),
            code,
            message,
            retry_after: None,
            body: serde_json::from_slice(body).ok(),
        }
    }

    /// An error the provider reported inside a stream that had already
    /// begun, classified by the HTTP status it names when it names one.
    pub(crate) fn in_stream(status: Option<u16>, message: &str) -> ProviderError {
        match status {
            Some(status) if (400..=599).contains(&status) => {
                let mut error = ProviderError::from_status(status, &[]);
                // The answer's HTTP status was a success; the number only
                // classifies.
                error.status = None;
                error.message = format!("the provider failed mid-stream ({status}): {message}");
                error
            }
            // Nothing says the request was at fault, and a stream that
            // started means the request was accepted.
            _ => ProviderError::new(
                ErrorClass::Retryable,
                PROVIDER_SERVER_ERROR,
                format!("the provider failed mid-stream: {message}"),
            ),
        }
    }

    /// Whether the provider said it is rate limited or overloaded: a 429, a
    /// 503 or 529, or Anthropic's `overloaded_error` in a stream. Such a
    /// call is worth repeating after a pause.
    pub fn is_busy(&self) -> bool {
        self.code == PROVIDER_RATE_LIMITED
            || (self.class == ErrorClass::Retryable
                && (matches!(self.status, Some(503 | 529))
                    || self.message.to_ascii_lowercase().contains("overloaded")))
    }

    /// Removes the key from the message, whatever put it there (some
    /// providers echo part of a rejected key, some servers the whole).
    fn redact(mut self, api_key: Option<&str>) -> ProviderError {
        // The body served the family's wording inside the call; it may
        // echo the key, and goes no further.
        self.body = None;
        if let Some(key) = api_key.filter(|key| key.len() >= 4) {
            if self.message.contains(key) {
                self.message = self.message.replace(key, "<redacted>");
            }
        }
        self
    }
}

/// The pause a response's headers ask for: `retry-after-ms` (OpenAI's) or
/// `retry-after` in seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    // A value no `Duration` holds (negative, not finite, too large) says
    // nothing usable.
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let value = text("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ProviderError {}

/// The longest provider message an error carries.
const MAX_DETAIL_CHARS: usize = 1024;

/// The provider's own words from an error body: `{error:{message}}` (all
/// three APIs), `{error:"…"}` or `{message:"…"}` (some compatible servers),
/// else the body itself when it is short text.
fn error_detail(body: &[u8]) -> Option<String> {
    if body.is_empty() {
        return None;
    }
    let text = match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(value) => {
            let found = value
                .pointer("/error/message")
                .or_else(|| value.get("error").filter(|e| e.is_string()))
                .or_else(|| value.get("message"))
                .and_then(|m| m.as_str());
            match found {
                Some(message) => message.to_owned(),
                None => String::from_utf8_lossy(body).into_owned(),
            }
        }
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    Some(truncate_chars(text, MAX_DETAIL_CHARS))
}

fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// Limits of one `Provider`.
#[derive(Clone, Debug)]
pub struct ProviderOptions {
    pub connect_timeout: Duration,
    /// How long a call may receive nothing (before the answer's headers or
    /// between two reads of its body) before it fails `provider_timeout`.
    pub idle_timeout: Duration,
    /// The largest single stream event (and line).
    pub max_event_bytes: usize,
    /// The largest whole answer read at once (model lists).
    pub max_response_bytes: usize,
    /// The most body bytes one streamed answer may send.
    pub max_stream_bytes: usize,
    /// How long one call may take in all, however steadily it sends.
    pub call_deadline: Duration,
}

impl Default for ProviderOptions {
    fn default() -> ProviderOptions {
        ProviderOptions {
            connect_timeout: Duration::from_secs(10),
            // Reasoning models may think for minutes before their first
            // token, and some APIs send nothing meanwhile.
            idle_timeout: Duration::from_secs(300),
            max_event_bytes: 1024 * 1024,
            max_response_bytes: 4 * 1024 * 1024,
            max_stream_bytes: 16 * 1024 * 1024,
            call_deadline: Duration::from_secs(15 * 60),
        }
    }
}

/// Calls providers. Cheap to share: holds one pooled HTTP client.
#[derive(Clone, Debug)]
pub struct Provider {
    transport: Transport,
}

impl Provider {
    /// Ends a call that runs past `call_deadline` (a provider that keeps a
    /// stream alive with comments, or trickles forever).
    async fn within_deadline<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, ProviderError>>,
    ) -> Result<T, ProviderError> {
        let deadline = self.transport.options().call_deadline;
        tokio::time::timeout(deadline, call)
            .await
            .unwrap_or_else(|_| {
                Err(ProviderError::timeout(format!(
                    "the call took longer than {deadline:?}"
                )))
            })
    }

    pub fn new(options: ProviderOptions) -> Result<Provider, ProviderError> {
        Ok(Provider {
            transport: Transport::new(options)?,
        })
    }

    /// Streams one model call; `on_event` sees every delta as it arrives.
    /// Returns the stop kind.
    pub async fn stream(
        &self,
        endpoint: &Endpoint,
        request: &ModelRequest,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<StopKind, ProviderError> {
        let call = async {
            match endpoint.kind {
                ProviderKind::OpenAi | ProviderKind::OpenAiCompatible => {
                    openai::stream(&self.transport, endpoint, request, on_event).await
                }
                ProviderKind::Anthropic => {
                    anthropic::stream(&self.transport, endpoint, request, on_event).await
                }
                ProviderKind::Google => {
                    google::stream(&self.transport, endpoint, request, on_event).await
                }
                ProviderKind::OpenAiCodex => {
                    codex::stream(&self.transport, endpoint, request, on_event).await
                }
            }
        };
        let result = self.within_deadline(call).await;
        result.map_err(|e| e.redact(endpoint.api_key.as_deref()))
    }

    /// The models the provider offers, as it lists them.
    pub async fn list_models(&self, endpoint: &Endpoint) -> Result<Vec<ModelInfo>, ProviderError> {
        let call = async {
            match endpoint.kind {
                ProviderKind::OpenAi | ProviderKind::OpenAiCompatible => {
                    openai::list_models(&self.transport, endpoint).await
                }
                ProviderKind::Anthropic => anthropic::list_models(&self.transport, endpoint).await,
                ProviderKind::Google => google::list_models(&self.transport, endpoint).await,
                // A subscription's models are a fixed list the sidecar keeps.
                ProviderKind::OpenAiCodex => Err(ProviderError::bad_request(
                    "a ChatGPT subscription lists no models",
                )),
            }
        };
        let result = self.within_deadline(call).await;
        result.map_err(|e| e.redact(endpoint.api_key.as_deref()))
    }
}

/// A JSON value read from a stream event, or `provider_protocol`.
fn parse_event(data: &str) -> Result<serde_json::Value, ProviderError> {
    serde_json::from_str(data)
        .map_err(|e| ProviderError::protocol(format!("a stream event is not valid JSON ({e})")))
}

/// A tool call's arguments from the text the model wrote: an empty text is
/// no arguments, text that is not JSON is kept as a string (see `ToolCall`).
fn parse_arguments(text: &str) -> serde_json::Value {
    if text.trim().is_empty() {
        return serde_json::Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_owned()))
}

fn u64_at(value: &serde_json::Value, pointer: &str) -> u64 {
    value.pointer(pointer).and_then(|v| v.as_u64()).unwrap_or(0)
}

/// A conversation in which one of two tool results showed an image, then
/// the user spoke again: what each family's image test renders.
#[cfg(test)]
pub(super) fn image_conversation(model: &str) -> ModelRequest {
    let call = |id: &str| ToolCall {
        id: id.into(),
        name: "read".into(),
        arguments: serde_json::json!({"address": "attachment:x"}),
        signature: None,
    };
    let result = |id: &str, images: Vec<ImagePart>| Message::ToolResult {
        call_id: id.into(),
        name: "read".into(),
        content: format!("result {id}"),
        is_error: false,
        images,
    };
    ModelRequest {
        model: model.into(),
        system: String::new(),
        messages: vec![
            Message::User {
                text: "look".into(),
            },
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![call("a"), call("b")],
                signature: None,
            },
            result(
                "a",
                vec![ImagePart {
                    mime_type: "image/png".into(),
                    data: "iVBORw0K".into(),
                }],
            ),
            result("b", vec![]),
            Message::User {
                text: "and?".into(),
            },
        ],
        tools: vec![],
        max_tokens: 10,
        cache_key: None,
        rendered: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_ms_seconds_and_dates_and_ignores_what_no_pause_holds() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = reqwest::header::HeaderMap::new();
            for (name, value) in pairs {
                map.insert(
                    *name,
                    reqwest::header::HeaderValue::from_str(value).expect("a header value"),
                );
            }
            map
        };
        let after = |pairs: &[(&'static str, &str)]| retry_after(&headers(pairs));
        assert_eq!(
            after(&[("retry-after-ms", "1500")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            after(&[("retry-after", " 2 ")]),
            Some(Duration::from_secs(2))
        );
        // Milliseconds win over seconds, as the header that says more.
        assert_eq!(
            after(&[("retry-after-ms", "10"), ("retry-after", "9")]),
            Some(Duration::from_millis(10))
        );
        // A date in the past is no pause.
        assert_eq!(
            after(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]),
            Some(Duration::ZERO)
        );
        for hostile in ["-1", "1e30", "NaN", "inf", "soon", ""] {
            assert_eq!(after(&[("retry-after", hostile)]), None, "{hostile}");
            assert_eq!(after(&[("retry-after-ms", hostile)]), None, "{hostile}");
        }
        assert_eq!(after(&[]), None);
    }

    #[test]
    fn only_a_rate_limit_or_an_overloaded_provider_is_busy() {
        let busy = |e: ProviderError| e.is_busy();
        assert!(busy(ProviderError::from_status(429, b"")));
        assert!(busy(ProviderError::from_status(503, b"")));
        assert!(busy(ProviderError::from_status(529, b"")));
        assert!(busy(ProviderError::in_stream(Some(529), "Overloaded")));
        assert!(busy(ProviderError::in_stream(None, "overloaded_error")));
        assert!(!busy(ProviderError::from_status(500, b"")));
        assert!(!busy(ProviderError::from_status(
            400,
            br#"{"error":{"message":"the context is overloaded"}}"#
        )));
        assert!(!busy(ProviderError::network("connection reset")));
    }

    #[test]
    fn kinds_from_seed_types() {
        assert_eq!(ProviderKind::from_type("openai"), ProviderKind::OpenAi);
        assert_eq!(
            ProviderKind::from_type("anthropic"),
            ProviderKind::Anthropic
        );
        assert_eq!(ProviderKind::from_type("google"), ProviderKind::Google);
        for other in ["custom", "ollama", "openrouter", "", "OpenAI"] {
            assert_eq!(
                ProviderKind::from_type(other),
                ProviderKind::OpenAiCompatible
            );
        }
        assert_eq!(ProviderKind::OpenAiCompatible.default_base_url(), None);
        assert_eq!(
            ProviderKind::Anthropic.default_base_url(),
            Some("https://api.anthropic.com")
        );
    }

    #[test]
    fn statuses_are_classified() {
        let cases = [
            (401, ErrorClass::Configuration, PROVIDER_AUTH),
            (403, ErrorClass::Configuration, PROVIDER_AUTH),
            (404, ErrorClass::Configuration, PROVIDER_NOT_FOUND),
            (400, ErrorClass::Configuration, PROVIDER_BAD_REQUEST),
            (422, ErrorClass::Configuration, PROVIDER_BAD_REQUEST),
            (429, ErrorClass::Retryable, PROVIDER_RATE_LIMITED),
            (500, ErrorClass::Retryable, PROVIDER_SERVER_ERROR),
            (503, ErrorClass::Retryable, PROVIDER_SERVER_ERROR),
            (529, ErrorClass::Retryable, PROVIDER_SERVER_ERROR),
            (302, ErrorClass::Configuration, PROVIDER_PROTOCOL),
        ];
        for (status, class, code) in cases {
            let error = ProviderError::from_status(status, b"");
            assert_eq!(
                (error.class, error.code, error.status),
                (class, code, Some(status))
            );
        }
    }

    #[test]
    fn the_providers_message_is_carried() {
        let body =
            br#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#;
        let error = ProviderError::from_status(401, body);
        assert!(
            error.message.contains("Incorrect API key provided"),
            "{error}"
        );
        let error = ProviderError::from_status(400, br#"{"error":"model is required"}"#);
        assert!(error.message.contains("model is required"), "{error}");
        let error = ProviderError::from_status(502, b"Bad Gateway\n");
        assert!(error.message.ends_with("Bad Gateway"), "{error}");
        let long = "x".repeat(10_000);
        let error = ProviderError::from_status(500, long.as_bytes());
        assert!(
            error.message.len() < 2 * MAX_DETAIL_CHARS,
            "{}",
            error.message.len()
        );
    }

    #[test]
    fn the_key_is_redacted_from_messages() {
        let error =
            ProviderError::from_status(401, br#"{"error":{"message":"bad key sk-secret-123"}}"#)
                .redact(Some("sk-secret-123"));
        assert!(!error.message.contains("sk-secret-123"), "{error}");
        assert!(error.message.contains("<redacted>"), "{error}");
    }

    #[test]
    fn endpoint_debug_hides_the_key() {
        let endpoint = Endpoint {
            kind: ProviderKind::OpenAi,
            base_url: "http://x".into(),
            api_key: Some("sk-secret".into()),
            public_only: false,
            account_id: None,
        };
        assert!(!format!("{endpoint:?}").contains("sk-secret"));
    }

    #[test]
    fn calls_can_move_between_threads() {
        fn assert_send<T: Send>(_: &T) {}
        let provider = Provider::new(ProviderOptions::default()).unwrap();
        let endpoint = Endpoint {
            kind: ProviderKind::Google,
            base_url: "http://127.0.0.1:1".into(),
            api_key: None,
            public_only: false,
            account_id: None,
        };
        let request = ModelRequest {
            model: "m".into(),
            system: String::new(),
            messages: Vec::new(),
            tools: Vec::new(),
            max_tokens: 1,
            cache_key: None,
            rendered: Default::default(),
        };
        let mut sink = |_e: StreamEvent| {};
        assert_send(&provider.stream(&endpoint, &request, &mut sink));
        assert_send(&provider.list_models(&endpoint));
    }

    #[test]
    fn arguments_that_do_not_parse_are_kept_as_text() {
        assert_eq!(parse_arguments(""), serde_json::json!({}));
        assert_eq!(parse_arguments(r#"{"a":1}"#), serde_json::json!({"a":1}));
        assert_eq!(parse_arguments("{\"a\":"), serde_json::json!("{\"a\":"));
    }
}
