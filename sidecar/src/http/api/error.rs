//! The signed API's one error shape: an HTTP status, a stable snake_case
//! code and a message, rendered as `{_:"Error", message, code}`. Every
//! lower layer's typed error maps here; internal failures keep their code
//! but never their details.

use agentos_protocol::seed::{encode_response, ErrorResponse, SeedError};
use agentos_protocol::ErrorCode;

use crate::control::ControlError;
use crate::sessions::SessionError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: String,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code: code.to_owned(),
            message: message.into(),
        }
    }

    pub fn bad_request(code: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(400, code, message)
    }

    pub fn unauthorized(code: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(401, code, message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(403, "forbidden", message)
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
        // A principal that is not an Ed25519 one, or a `ts` that is missing
        // or not an integer, is the envelope's shape (400), like a missing
        // key; 401 is kept for what fails verification.
        let status = match e {
            SeedError::BadCbor { .. }
            | SeedError::TooDeep { .. }
            | SeedError::BadEnvelope { .. }
            | SeedError::BadPrincipal { .. }
            | SeedError::BadTimestamp { .. }
            | SeedError::BadAction { .. } => 400,
            SeedError::TooLarge { .. } => 413,
            SeedError::BadSignature | SeedError::BadCapability { .. } => 401,
            SeedError::Encode { .. } => 500,
        };
        ApiError::new(status, e.code(), e.to_string())
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
            _ => 500,
        };
        if status == 500 {
            tracing::error!(code = e.code(), error = %e, "a control-plane action failed");
            return ApiError::new(500, e.code(), "Internal server error");
        }
        ApiError::new(status, e.code(), e.to_string())
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        let code = e.code();
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
            | ErrorCode::BuiltinAgentUnavailable
            | ErrorCode::NothingToRetry
            | ErrorCode::AgentNotFound => 409,
            _ => 500,
        };
        let message = match &e {
            SessionError::PromptFailed { error } => error
                .get("message")
                .and_then(|m| m.as_str())
                .unwrap_or("the turn failed")
                .to_owned(),
            other => other.to_string(),
        };
        let code = match &e {
            // A failed turn answers the code it failed with.
            SessionError::PromptFailed { error } => error
                .get("code")
                .and_then(|c| c.as_str())
                .unwrap_or(code.as_str())
                .to_owned(),
            _ => code.as_str().to_owned(),
        };
        ApiError {
            status,
            code,
            message,
        }
    }
}
