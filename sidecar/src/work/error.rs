//! `TurnError`: what a turn's caller hears when the turn could not run or
//! failed, from the queue or from the session service. Codes are each
//! layer's own stable snake_case codes.

use crate::runs::RunError;
use crate::sessions::SessionError;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TurnError {
    /// The queue refused or lost the turn's run.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The session refused or failed the turn.
    #[error(transparent)]
    Session(#[from] SessionError),
}

impl TurnError {
    pub fn code(&self) -> &'static str {
        match self {
            TurnError::Run(e) => e.code(),
            TurnError::Session(e) => e.code().as_str(),
        }
    }
}

impl From<agentos_schema::DbError> for TurnError {
    fn from(e: agentos_schema::DbError) -> Self {
        TurnError::Run(RunError::Storage(e))
    }
}
