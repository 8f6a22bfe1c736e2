//! The signed API's one error shape: an HTTP status, a stable snake_case
//! code and a message, rendered as `{_:"Error", message, code}`. Every
//! lower layer's typed error maps here; internal failures keep their code
//! but never their details.

use agentos_protocol::seed::ApiCode;
use agentos_protocol::seed::{encode_response, ErrorResponse, SeedError};
use agentos_protocol::ErrorCode;

use crate::control::ControlError;
use crate::runs::RunError;
use crate::sessions::SessionError;
use crate::space::SpaceError;
use crate::work::TurnError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: String,
    pub message: String,
}

impl ApiError {
    /// One of the door's own refusals.
    pub fn new(status: u16, code: ApiCode, message: impl Into<String>) -> ApiError {
        ApiError::passed_on(status, code.as_str(), message)
    }

    /// A lower layer's code, passed on as it is.
    fn passed_on(status: u16, code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code: code.to_owned(),
            message: message.into(),
        }
    }

    pub fn bad_request(code: ApiCode, message: impl Into<String>) -> ApiError {
        ApiError::new(400, code, message)
    }

    pub fn unauthorized(code: ApiCode, message: impl Into<String>) -> ApiError {
        ApiError::new(401, code, message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(403, ApiCode::Forbidden, message)
    }

    /// A 404 with these words (`not_found`).
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(404, ApiCode::NotFound, message)
    }

    /// A 409 with these words (`conflict`, as the control plane's).
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::passed_on(409, "conflict", message)
    }

    /// The DAG-CBOR body.
    pub fn body(&self) -> Vec<u8> {
        encode_response(&ErrorResponse {
            message: self.message.clone(),
            code: self.code.clone(),
        })
    }
}

impl From<SeedError> for ApiError {
    fn from(e: SeedError) -> Self {
        // A `ts` that is missing or not an integer, or a principal in an
        // action that is not an Ed25519 one, is the request's shape (400),
        // like a missing key; 401 is for what fails verification, the
        // envelope's own signer or account among it (the reference checks
        // that principal while it verifies).
        let status = match e {
            SeedError::BadCbor { .. }
            | SeedError::TooDeep { .. }
            | SeedError::BadEnvelope { .. }
            | SeedError::BadPrincipal { .. }
            | SeedError::BadTimestamp { .. }
            | SeedError::BadAction { .. } => 400,
            SeedError::TooLarge { .. } => 413,
            SeedError::BadSignature
            | SeedError::UnverifiablePrincipal { .. }
            | SeedError::BadCapability { .. } => 401,
            SeedError::Encode { .. } => 500,
        };
        ApiError::passed_on(status, e.code(), e.to_string())
    }
}

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> Self {
        let status = match &e {
            ControlError::NotFound(_) => 404,
            ControlError::Forbidden(_) => 403,
            ControlError::Conflict(_) | ControlError::Limit { .. } => 409,
            ControlError::InvalidArgument(_) => 400,
            ControlError::SecretTooLarge { .. } => 413,
            // The server's own configuration, not the request: said
            // plainly, with the setting that opens it.
            ControlError::VaultLocked => 503,
            _ => 500,
        };
        if status == 500 {
            tracing::error!(code = e.code(), error = %e, "a control-plane action failed");
            return ApiError::passed_on(500, e.code(), "Internal server error");
        }
        ApiError::passed_on(status, e.code(), e.to_string())
    }
}

impl From<crate::triggers::TriggerError> for ApiError {
    fn from(e: crate::triggers::TriggerError) -> Self {
        use crate::triggers::TriggerError;
        let status = match &e {
            TriggerError::Invalid(_) => 400,
            TriggerError::NotFound(_) => 404,
            TriggerError::Limit { .. } => 409,
            TriggerError::Control(inner) => return ApiError::from(inner.clone()),
            TriggerError::Storage(_) => 500,
        };
        if status == 500 {
            tracing::error!(code = e.code(), error = %e, "a trigger action failed");
            return ApiError::passed_on(500, e.code(), "Internal server error");
        }
        ApiError::passed_on(status, e.code(), e.to_string())
    }
}

impl From<crate::mcp::McpError> for ApiError {
    fn from(e: crate::mcp::McpError) -> Self {
        use crate::mcp::McpError;
        let status = match &e {
            McpError::NotFound(_) => 404,
            McpError::Invalid(_) | McpError::Refused(_) | McpError::Secret(_) => 400,
            McpError::Limit(_) => 409,
            McpError::Busy(..) => 429,
            McpError::Storage(_) => {
                tracing::error!(code = e.code(), error = %e, "an MCP action failed");
                return ApiError::passed_on(500, e.code(), "Internal server error");
            }
            _ => 502,
        };
        ApiError::passed_on(status, e.code(), e.to_string())
    }
}

impl From<crate::space::AttachmentError> for ApiError {
    fn from(e: crate::space::AttachmentError) -> Self {
        use crate::space::AttachmentError;
        let status = match &e {
            AttachmentError::Invalid(_) => 400,
            AttachmentError::NotFound(_) => 404,
            AttachmentError::TooLarge(_) => 413,
            AttachmentError::Conflict(_) => 409,
            AttachmentError::TooMany(_) => 429,
            AttachmentError::Storage(_) => {
                tracing::error!(code = e.code(), error = %e, "an attachment action failed");
                return ApiError::passed_on(500, e.code(), "Internal server error");
            }
        };
        ApiError::passed_on(status, e.code(), e.to_string())
    }
}

impl From<SpaceError> for ApiError {
    fn from(e: SpaceError) -> Self {
        let status = match &e {
            SpaceError::NotFound(_) => 404,
            SpaceError::InvalidArgument(_)
            | SpaceError::InvalidPath { .. }
            | SpaceError::MemoryPath(_) => 400,
            SpaceError::Conflict(_) | SpaceError::Limit { .. } => 409,
            SpaceError::TooLarge { .. } => 413,
            SpaceError::CorruptRow { .. } | SpaceError::Storage(_) => 500,
        };
        if status == 500 {
            tracing::error!(code = e.code(), error = %e, "a Space action failed");
            return ApiError::passed_on(500, e.code(), "Internal server error");
        }
        ApiError::passed_on(status, e.code(), e.to_string())
    }
}

impl From<TurnError> for ApiError {
    fn from(e: TurnError) -> Self {
        match e {
            TurnError::Run(e) => e.into(),
            TurnError::Session(e) => e.into(),
        }
    }
}

impl From<RunError> for ApiError {
    fn from(e: RunError) -> Self {
        let status = match &e {
            RunError::NotFound(_) => 404,
            RunError::InvalidArgument(_) => 400,
            RunError::Limit { .. } | RunError::JournalCap { .. } => 409,
            RunError::Storage(_) => 500,
        };
        if status == 500 {
            tracing::error!(code = e.code(), error = %e, "a run action failed");
            return ApiError::passed_on(500, e.code(), "Internal server error");
        }
        ApiError::passed_on(status, e.code(), e.to_string())
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        let code = e.code();
        // A failed turn answers the code it failed with, and the agent's own
        // words about it.
        if let SessionError::PromptFailed { error } = &e {
            let code = error
                .get("code")
                .and_then(|c| c.as_str())
                .unwrap_or(code.as_str());
            let message = error
                .get("message")
                .and_then(|m| m.as_str())
                .unwrap_or("the turn failed");
            return ApiError::passed_on(502, code, message);
        }
        let status = match code {
            ErrorCode::SessionNotFound => 404,
            ErrorCode::InvalidArgument
            | ErrorCode::InvalidContentBlock
            | ErrorCode::InvalidIdempotencyKey
            | ErrorCode::InvalidHistoryCursor => 400,
            ErrorCode::AcpPromptBytesLimit | ErrorCode::AcpPromptBlocksLimit => 413,
            ErrorCode::SessionBusy
            | ErrorCode::PromptInProgress
            | ErrorCode::IdempotencyConflict
            | ErrorCode::SessionConflict
            | ErrorCode::SessionDeleted
            | ErrorCode::BuiltinAgentUnavailable
            | ErrorCode::NothingToRetry
            | ErrorCode::HistoryCursorExpired
            | ErrorCode::AgentNotFound => 409,
            ErrorCode::VmShutdown => 503,
            // A bounded collection is full: the message names the setting.
            _ if e.setting().is_some() => 409,
            // The agent failed the turn (spawn, I/O, protocol, exit).
            ErrorCode::AdapterSpawnFailed
            | ErrorCode::AdapterIo
            | ErrorCode::AdapterRpcError
            | ErrorCode::AdapterTimeout
            | ErrorCode::AdapterExited
            | ErrorCode::AdapterLineTooLong
            | ErrorCode::AdapterInvalidJson
            | ErrorCode::AdapterClosed
            | ErrorCode::AcpProtocolError
            | ErrorCode::AdapterRouteEnded
            | ErrorCode::SessionRestoreFailed
            | ErrorCode::PromptDeliveryUncertain
            | ErrorCode::PromptInterrupted
            | ErrorCode::InvalidStopReason
            | ErrorCode::ResourceLimit => {
                // Details name commands and paths of the VM: logged, not sent.
                tracing::warn!(code = code.as_str(), error = %e, "a turn failed");
                return ApiError::passed_on(502, code.as_str(), "the agent failed the turn");
            }
            _ => 500,
        };
        if status == 500 {
            tracing::error!(code = code.as_str(), error = %e, "a session action failed");
            return ApiError::passed_on(500, code.as_str(), "Internal server error");
        }
        ApiError::passed_on(status, code.as_str(), e.to_string())
    }
}
