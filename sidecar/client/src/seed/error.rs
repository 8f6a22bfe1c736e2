//! The one error enum of the Seed client: everything that can stop a signed
//! call or a subscription before the server's own answer is in hand. A
//! server that answers with `{_: "Error", …}` is not an error here: that is
//! a [`super::Reply`] with its status.

use agentos_protocol::seed::SeedError;

/// Why a client operation failed, each with a stable code.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connecting, reading or writing failed.
    #[error("{0}")]
    Io(String),
    /// The HTTP exchange itself failed (a malformed response, a connection
    /// closed mid-answer).
    #[error("HTTP: {0}")]
    Http(String),
    /// The server answered something that is not what the API sends.
    #[error("bad response: {0}")]
    BadResponse(String),
    /// The response is larger than the client accepts.
    #[error("the response exceeds {limit} bytes")]
    ResponseTooLarge { limit: usize },
    /// The key file is missing, unsafe, malformed or does not match itself.
    #[error("key file: {0}")]
    KeyFile(String),
    /// JSON given by the user cannot become an action.
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    /// A command-line argument is malformed (an account that is not a
    /// principal).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A `--url` this client cannot reach.
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    /// The action cannot be signed (a value DAG-CBOR cannot carry).
    #[error("cannot sign: {0}")]
    Sign(SeedError),
    /// The host socket refused the forwarded request; `code` is its own.
    #[error("host socket: {message} [{code}]")]
    Host { code: String, message: String },
    /// The server reported an error on the WebSocket (a refused
    /// subscription); `code` is the server's, when it gave one.
    #[error("the server reported: {message}{}", code.as_deref().map(|c| format!(" [{c}]")).unwrap_or_default())]
    Server {
        code: Option<String>,
        message: String,
    },
    /// The transport cannot do this (a WebSocket through the host socket).
    #[error("{0}")]
    Unsupported(String),
    /// The WebSocket handshake or connection failed.
    #[error("WebSocket: {0}")]
    WebSocket(String),
    /// A WebSocket frame from the server is not a JSON event.
    #[error("bad event: {0}")]
    BadEvent(String),
}

impl ClientError {
    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::Io(_) => "io",
            ClientError::Http(_) => "http",
            ClientError::BadResponse(_) => "bad_response",
            ClientError::ResponseTooLarge { .. } => "response_too_large",
            ClientError::KeyFile(_) => "key_file",
            ClientError::InvalidJson(_) => "invalid_json",
            ClientError::InvalidArgument(_) => "invalid_argument",
            ClientError::InvalidUrl(_) => "invalid_url",
            ClientError::Sign(_) => "sign_failed",
            ClientError::Host { .. } => "host_socket",
            ClientError::Server { .. } => "server_error",
            ClientError::Unsupported(_) => "unsupported_transport",
            ClientError::WebSocket(_) => "websocket",
            ClientError::BadEvent(_) => "bad_event",
        }
    }

    pub(crate) fn io(context: impl std::fmt::Display, error: std::io::Error) -> ClientError {
        ClientError::Io(format!("{context}: {error}"))
    }
}
