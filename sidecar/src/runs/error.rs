//! `RunError`: the one error enum of the runs domain (the queue, its
//! transitions, journals and waits). Codes are stable snake_case; the signed
//! door renders them as HTTP statuses and the host door as `data.code`.

use agentos_schema::DbError;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunError {
    /// No such run, or the caller may not know it exists.
    #[error("run {0} not found")]
    NotFound(String),
    /// A request that breaks a rule (a scope, a limit value, a spec).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A tree or a run is at one of its bounds; `setting` is the limit.
    #[error("{setting} ({limit}) reached")]
    Limit { setting: &'static str, limit: u64 },
    /// The run's journal would pass its caps.
    #[error("the run's journal is full ({setting})")]
    JournalCap { setting: &'static str },
    #[error("storage failed: {0}")]
    Storage(#[from] DbError),
}

impl RunError {
    pub fn code(&self) -> &'static str {
        match self {
            RunError::NotFound(_) => "run_not_found",
            RunError::InvalidArgument(_) => "invalid_argument",
            RunError::Limit { .. } => "run_limit",
            RunError::JournalCap { .. } => "journal_cap",
            RunError::Storage(DbError::CorruptRow { .. }) => "corrupt_row",
            RunError::Storage(_) => "run_storage_error",
        }
    }

    /// The setting a limit names.
    pub fn setting(&self) -> Option<&'static str> {
        match self {
            RunError::Limit { setting, .. } | RunError::JournalCap { setting } => Some(setting),
            _ => None,
        }
    }
}
