//! `TriggerError`: what a trigger action's caller hears. Codes are stable
//! snake_case; a refused part carries the reference's words (the client
//! shows them), and the front doors render these in their own wire form.

use agentos_schema::DbError;

use crate::control::ControlError;

use super::validate::Invalid;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TriggerError {
    /// A part of the request is refused; the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// `Agent trigger` or `Agent`: gone, or not the caller's to know of.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// A bounded collection is full; `setting` is the limit to raise.
    #[error("{setting} ({limit}) reached")]
    Limit { setting: &'static str, limit: u64 },
    #[error("storage failed: {0}")]
    Storage(#[from] DbError),
    /// The control plane could not read the trigger's agent.
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl TriggerError {
    pub fn code(&self) -> &'static str {
        match self {
            TriggerError::Invalid(_) => "invalid_argument",
            TriggerError::NotFound(_) => "not_found",
            TriggerError::Limit { .. } => "limit_exceeded",
            TriggerError::Storage(e) => e.code(),
            TriggerError::Control(e) => e.code(),
        }
    }
}

impl From<Invalid> for TriggerError {
    fn from(e: Invalid) -> Self {
        TriggerError::Invalid(e.0)
    }
}
