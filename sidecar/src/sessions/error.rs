//! The session layer's one error enum. Every variant has a stable snake_case
//! code; limit errors name the setting to raise.

use agentos_protocol::ErrorCode;
use agentos_schema::DbError;
use serde_json::Value;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SessionError {
    #[error("session {0} not found")]
    NotFound(String),
    #[error("session {session_id} exists with different {field}")]
    Conflict {
        session_id: String,
        field: &'static str,
    },
    #[error("agent {0} is not in the agent registry")]
    AgentNotFound(String),
    #[error("the builtin model agent is not available in this sidecar yet")]
    BuiltinAgentUnavailable,
    #[error("nothing to retry: {0}")]
    NothingToRetry(String),
    #[error("session {0} already has an active prompt")]
    Busy(String),
    #[error("the idempotency key was used with different content")]
    IdempotencyConflict,
    #[error("invalid idempotency key: {0}")]
    InvalidIdempotencyKey(String),
    #[error("invalid content block: {0}")]
    InvalidContentBlock(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("{code}: {used} exceeds {setting} ({limit})")]
    Limit {
        code: ErrorCode,
        setting: &'static str,
        used: u64,
        limit: u64,
    },
    #[error("before and after are mutually exclusive")]
    InvalidHistoryCursor,
    #[error("history before sequence {earliest} has been pruned")]
    HistoryCursorExpired { earliest: u64 },
    #[error("option {0} was not offered")]
    InvalidPermissionOption(String),
    #[error("restoring the adapter failed: {0}")]
    RestoreFailed(String),
    #[error("adapter failed: {message}")]
    Adapter { code: ErrorCode, message: String },
    /// A command reached a session's route as it ended and was never
    /// started there; the service retries it on a new route.
    #[error("adapter failed: the adapter route ended before this request started")]
    RouteGone,
    /// A prompt ended in failure; `error` is its stored error object (with
    /// its own `code`), returned again for the same idempotency key.
    #[error("prompt failed: {}", .error.get("message").and_then(Value::as_str).unwrap_or("failed"))]
    PromptFailed { error: Value },
    #[error("storage failed: {0}")]
    Storage(DbError),
    #[error("the sidecar is shutting down")]
    ShuttingDown,
}

impl SessionError {
    /// `Ok` while `used` is within `limit`; otherwise the limit error that
    /// names `setting`.
    pub fn at_most(
        code: ErrorCode,
        setting: &'static str,
        used: u64,
        limit: u64,
    ) -> Result<(), SessionError> {
        if used > limit {
            return Err(SessionError::Limit {
                code,
                setting,
                used,
                limit,
            });
        }
        Ok(())
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            SessionError::NotFound(_) => ErrorCode::SessionNotFound,
            SessionError::Conflict { .. } => ErrorCode::SessionConflict,
            SessionError::AgentNotFound(_) => ErrorCode::AgentNotFound,
            SessionError::BuiltinAgentUnavailable => ErrorCode::BuiltinAgentUnavailable,
            SessionError::NothingToRetry(_) => ErrorCode::NothingToRetry,
            SessionError::Busy(_) => ErrorCode::SessionBusy,
            SessionError::IdempotencyConflict => ErrorCode::IdempotencyConflict,
            SessionError::InvalidIdempotencyKey(_) => ErrorCode::InvalidIdempotencyKey,
            SessionError::InvalidContentBlock(_) => ErrorCode::InvalidContentBlock,
            SessionError::InvalidArgument(_) => ErrorCode::InvalidArgument,
            SessionError::Limit { code, .. } => *code,
            SessionError::InvalidHistoryCursor => ErrorCode::InvalidHistoryCursor,
            SessionError::HistoryCursorExpired { .. } => ErrorCode::HistoryCursorExpired,
            SessionError::InvalidPermissionOption(_) => ErrorCode::InvalidPermissionOption,
            SessionError::RestoreFailed(_) => ErrorCode::SessionRestoreFailed,
            SessionError::Adapter { code, .. } => *code,
            SessionError::RouteGone => ErrorCode::AdapterRouteEnded,
            // A stored error's code was written from this list; one that is
            // not (an older or foreign writer) reads as the generic failure.
            SessionError::PromptFailed { error } => error
                .get("code")
                .and_then(Value::as_str)
                .and_then(ErrorCode::parse)
                .unwrap_or(ErrorCode::PromptFailed),
            SessionError::Storage(e) => match e {
                DbError::ResultLimit { .. } => ErrorCode::SqliteResultLimit,
                DbError::Closed => ErrorCode::SessionStorageUnavailable,
                // Retrying with the same idempotency key tells which.
                DbError::CommitOutcomeUnknown(_) => ErrorCode::CommitOutcomeUnknown,
                DbError::CorruptRow { .. } => ErrorCode::CorruptRow,
                _ => ErrorCode::SessionStorageError,
            },
            SessionError::ShuttingDown => ErrorCode::VmShutdown,
        }
    }

    /// The setting a caller should raise, for limit errors.
    pub fn setting(&self) -> Option<&'static str> {
        match self {
            SessionError::Limit { setting, .. } => Some(setting),
            SessionError::Storage(DbError::ResultLimit { .. }) => {
                Some("limits.sqlite.maxResultBytes")
            }
            _ => None,
        }
    }
}

impl From<DbError> for SessionError {
    fn from(e: DbError) -> Self {
        SessionError::Storage(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The retry is typed, the wire is what a gone route always answered.
    #[test]
    fn a_gone_route_keeps_its_wire_code_and_message() {
        let e = SessionError::RouteGone;
        assert_eq!(e.code().as_str(), "adapter_route_ended");
        assert_eq!(
            e.to_string(),
            "adapter failed: the adapter route ended before this request started"
        );
    }
}
