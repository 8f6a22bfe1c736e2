//! `SpaceError`: the one error enum of an agent's Space (its tool documents
//! and its memory files). Codes are stable snake_case; a full collection
//! names the setting to raise. The signed door renders these as HTTP
//! statuses (`http/api/error.rs`); nothing here knows HTTP.

use agentos_schema::DbError;

use agentos_vfs::FsError;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SpaceError {
    /// No such tool, memory file or agent.
    #[error("{0} not found")]
    NotFound(String),
    /// A tool document or a request that breaks a rule (name, sizes,
    /// schemas, a builtin that cannot be deleted).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A path the file system refused (a link out of bounds, a name too
    /// long for it).
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: String },
    /// A memory path that breaks the reference's rules, in its words
    /// (`Memory path cannot contain ".."`).
    #[error("{0}")]
    MemoryPath(String),
    /// The thing exists in another shape: a tool name taken by another
    /// document, a file where a directory is needed or the reverse.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A bounded collection is full; `setting` is the limit to raise.
    #[error("{setting} ({limit}) reached")]
    Limit { setting: &'static str, limit: u64 },
    /// More than the caller's bound for one answer (a file to read, a
    /// listing).
    #[error("{what}: {size} exceeds the limit of {limit}")]
    TooLarge { what: String, size: u64, limit: u64 },
    #[error("corrupt row from {table}: {message}")]
    CorruptRow { table: String, message: String },
    /// The database or the file system failed.
    #[error("storage failed: {0}")]
    Storage(String),
}

impl SpaceError {
    pub fn code(&self) -> &'static str {
        match self {
            SpaceError::NotFound(_) => "not_found",
            SpaceError::InvalidArgument(_) => "invalid_argument",
            SpaceError::InvalidPath { .. } | SpaceError::MemoryPath(_) => "invalid_path",
            SpaceError::Conflict(_) => "conflict",
            SpaceError::Limit { .. } => "limit",
            SpaceError::TooLarge { .. } => "too_large",
            SpaceError::CorruptRow { .. } => "corrupt_row",
            SpaceError::Storage(_) => "storage",
        }
    }

    /// The setting a limit error names.
    pub fn setting(&self) -> Option<&'static str> {
        match self {
            SpaceError::Limit { setting, .. } => Some(setting),
            _ => None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> SpaceError {
        SpaceError::InvalidArgument(message.into())
    }
}

impl From<DbError> for SpaceError {
    fn from(e: DbError) -> Self {
        match e {
            DbError::CorruptRow { table, message } => SpaceError::CorruptRow { table, message },
            other => SpaceError::Storage(other.to_string()),
        }
    }
}

/// A memory operation's file-system failure, with paths as the VFS spells
/// them (the caller rewrites them relative to the memory root).
impl From<FsError> for SpaceError {
    fn from(e: FsError) -> Self {
        match e {
            FsError::NotFound { path } => SpaceError::NotFound(path),
            FsError::Exists { path } => SpaceError::Conflict(format!("{path} exists")),
            FsError::NotDir { path } => {
                SpaceError::Conflict(format!("{path} is a file, not a directory"))
            }
            FsError::IsDir { path } => SpaceError::Conflict(format!("{path} is a directory")),
            FsError::NotEmpty { path } => SpaceError::Conflict(format!("{path} is not empty")),
            FsError::Conflict { path } => {
                SpaceError::Conflict(format!("{path} changed concurrently; try again"))
            }
            FsError::Invalid { path, reason } => SpaceError::InvalidPath { path, reason },
            FsError::NameTooLong { path } => SpaceError::InvalidPath {
                path,
                reason: "a name or the path is too long".into(),
            },
            FsError::Loop { path } => SpaceError::InvalidPath {
                path,
                reason: "too many symbolic links".into(),
            },
            FsError::Access { path } | FsError::ReadOnly { path } => SpaceError::InvalidPath {
                path,
                reason: "it leads outside the agent's memory".into(),
            },
            FsError::NotPermitted { path, reason } => SpaceError::InvalidPath { path, reason },
            FsError::FileTooBig { setting, limit, .. }
            | FsError::NoSpace { setting, limit, .. } => SpaceError::Limit { setting, limit },
            FsError::CrossDevice { path } => SpaceError::InvalidPath {
                path,
                reason: "it crosses file systems".into(),
            },
            FsError::Corrupt { .. } | FsError::Host { .. } | FsError::Db(_) => {
                SpaceError::Storage(e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_and_lower_errors_keep_their_meaning() {
        let corrupt = SpaceError::from(DbError::CorruptRow {
            table: "t".into(),
            message: "m".into(),
        });
        assert_eq!(corrupt.code(), "corrupt_row");
        assert_eq!(SpaceError::from(DbError::Closed).code(), "storage");
        let full = SpaceError::from(FsError::NoSpace {
            path: "/x".into(),
            limit: 9,
            setting: "limits.fs.maxTotalBytes",
        });
        assert_eq!(full.code(), "limit");
        assert_eq!(full.setting(), Some("limits.fs.maxTotalBytes"));
        let missing = SpaceError::from(FsError::NotFound { path: "a".into() });
        assert_eq!(missing.code(), "not_found");
        let outside = SpaceError::from(FsError::Access {
            path: "/etc".into(),
        });
        assert_eq!(outside.code(), "invalid_path");
        assert_eq!(
            SpaceError::from(FsError::IsDir { path: "d".into() }).code(),
            "conflict"
        );
    }
}
