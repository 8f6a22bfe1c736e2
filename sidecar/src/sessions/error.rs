//! The session layer's one error enum. Every variant has a stable snake_case
//! code; limit errors name the setting to raise.

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
    #[error("session {0} already has an active prompt")]
    Busy(String),
    #[error("the prompt with this idempotency key is still in progress")]
    PromptInProgress,
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
        code: &'static str,
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
    Adapter { code: &'static str, message: String },
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
        code: &'static str,
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

    pub fn code(&self) -> &str {
        match self {
            SessionError::NotFound(_) => "session_not_found",
            SessionError::Conflict { .. } => "session_conflict",
            SessionError::AgentNotFound(_) => "agent_not_found",
            SessionError::Busy(_) => "session_busy",
            SessionError::PromptInProgress => "prompt_in_progress",
            SessionError::IdempotencyConflict => "idempotency_conflict",
            SessionError::InvalidIdempotencyKey(_) => "invalid_idempotency_key",
            SessionError::InvalidContentBlock(_) => "invalid_content_block",
            SessionError::InvalidArgument(_) => "invalid_argument",
            SessionError::Limit { code, .. } => code,
            SessionError::InvalidHistoryCursor => "invalid_history_cursor",
            SessionError::HistoryCursorExpired { .. } => "history_cursor_expired",
            SessionError::InvalidPermissionOption(_) => "invalid_permission_option",
            SessionError::RestoreFailed(_) => "session_restore_failed",
            SessionError::Adapter { code, .. } => code,
            SessionError::RouteGone => "adapter_route_ended",
            SessionError::PromptFailed { error } => error
                .get("code")
                .and_then(Value::as_str)
                .unwrap_or("prompt_failed"),
            SessionError::Storage(e) => match e {
                DbError::ResultLimit { .. } => "sqlite_result_limit",
                DbError::Closed => "session_storage_unavailable",
                // Retrying with the same idempotency key tells which.
                DbError::CommitOutcomeUnknown(_) => "commit_outcome_unknown",
                DbError::CorruptRow { .. } => "corrupt_row",
                _ => "session_storage_error",
            },
            SessionError::ShuttingDown => "vm_shutdown",
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
        assert_eq!(e.code(), "adapter_route_ended");
        assert_eq!(
            e.to_string(),
            "adapter failed: the adapter route ended before this request started"
        );
    }
}
