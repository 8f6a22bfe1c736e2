//! The MCP layer's errors, with stable snake_case codes. A tool call's
//! failure reaches the model as `code: message`; an action's as the signed
//! API's status (see `http/api/mcp.rs`). No message ever carries a header
//! value.

use agentos_protocol::acp::RpcError;

/// Bytes of a server's error text kept (in results, records and answers).
pub const MAX_ERROR_BYTES: usize = 1024;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum McpError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Limit(String),
    /// The URL leads somewhere an account may not send the sidecar.
    #[error("the address is refused: {0}")]
    Refused(String),
    /// Connecting failed, or the server answered with an HTTP error.
    #[error("{0}")]
    Unreachable(String),
    /// The server answered something that is not MCP.
    #[error("the server broke the protocol: {0}")]
    Protocol(String),
    #[error("no answer within {0} ms")]
    Timeout(u64),
    #[error("the server's process ended")]
    Exited,
    #[error("a message from the server exceeded mcp.maxMessageBytes ({0} bytes)")]
    TooLarge(u64),
    /// The server answered the request with a JSON-RPC error.
    #[error("the server refused the request: {} ({})", .0.message, .0.code)]
    Rpc(RpcError),
    /// A VM-wide budget is spent (the setting is named).
    #[error("too many MCP {0} at once; the sidecar allows {1} (mcp.{2})")]
    Busy(&'static str, u64, &'static str),
    #[error("the call was canceled")]
    Canceled,
    /// A header's secret cannot be opened.
    #[error("{0}")]
    Secret(String),
    #[error("storage failed: {0}")]
    Storage(String),
    /// The server forgot our session (HTTP 404 with a session id): connect
    /// again.
    #[error("the server ended the session")]
    SessionExpired,
}

impl McpError {
    pub fn code(&self) -> &'static str {
        match self {
            McpError::NotFound(_) => "not_found",
            McpError::Invalid(_) => "invalid_argument",
            McpError::Limit(_) => "limit",
            McpError::Refused(_) => "address_refused",
            McpError::Unreachable(_) | McpError::SessionExpired => "mcp_unreachable",
            McpError::Protocol(_) => "mcp_protocol_error",
            McpError::Timeout(_) => "mcp_timeout",
            McpError::Exited => "mcp_server_exited",
            McpError::TooLarge(_) => "mcp_too_large",
            McpError::Rpc(_) => "mcp_tool_error",
            McpError::Busy(..) => "mcp_busy",
            McpError::Canceled => "canceled",
            McpError::Secret(_) => "secret_unavailable",
            McpError::Storage(_) => "storage",
        }
    }

    /// The error with `scrub` applied to what the server may have said.
    /// Its text is also cut to [`MAX_ERROR_BYTES`] (after scrubbing, so no
    /// part of a secret survives the cut).
    pub(crate) fn scrubbed(self, secrets: &[String]) -> McpError {
        let clean = |text: String| {
            let mut text = super::pool::scrub(&text, secrets);
            agentos_protocol::mcp::cut(&mut text, MAX_ERROR_BYTES);
            text
        };
        match self {
            McpError::Unreachable(m) => McpError::Unreachable(clean(m)),
            McpError::Protocol(m) => McpError::Protocol(clean(m)),
            McpError::Rpc(mut e) => {
                e.message = clean(e.message);
                e.data = None;
                McpError::Rpc(e)
            }
            other => other,
        }
    }

    /// Whether the connection that gave this error should be dropped.
    pub(crate) fn breaks_connection(&self) -> bool {
        matches!(
            self,
            McpError::Unreachable(_)
                | McpError::Protocol(_)
                | McpError::Exited
                | McpError::TooLarge(_)
                | McpError::SessionExpired
                | McpError::Timeout(_)
        )
    }
}

impl From<agentos_schema::DbError> for McpError {
    fn from(e: agentos_schema::DbError) -> Self {
        McpError::Storage(e.to_string())
    }
}
