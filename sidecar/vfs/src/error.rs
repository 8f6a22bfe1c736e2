//! `FsError`: the VFS layer's one error enum. Codes are errno names so that
//! every front door (ACP, host protocol, CLI) can report them unchanged; each
//! message names the path involved, and limit errors name the setting to raise.

use agentos_protocol::ErrorCode;
use agentos_schema::DbError;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FsError {
    #[error("ENOENT: no such file or directory: {path}")]
    NotFound { path: String },
    #[error("EEXIST: file exists: {path}")]
    Exists { path: String },
    #[error("ENOTDIR: not a directory: {path}")]
    NotDir { path: String },
    #[error("EISDIR: is a directory: {path}")]
    IsDir { path: String },
    #[error("ENOTEMPTY: directory not empty: {path}")]
    NotEmpty { path: String },
    #[error("EINVAL: invalid argument: {path}: {reason}")]
    Invalid { path: String, reason: String },
    #[error("ELOOP: too many levels of symbolic links: {path}")]
    Loop { path: String },
    #[error("ENAMETOOLONG: file name too long: {path}")]
    NameTooLong { path: String },
    #[error("EXDEV: cross-root link or rename: {path}")]
    CrossDevice { path: String },
    #[error("EROFS: read-only file system: {path}")]
    ReadOnly { path: String },
    #[error("EACCES: outside the roots this view may touch: {path}")]
    Access { path: String },
    #[error("EPERM: operation not permitted: {path}: {reason}")]
    NotPermitted { path: String, reason: String },
    #[error("EFBIG: {path}: size {size} exceeds {setting} ({limit})")]
    FileTooBig {
        path: String,
        size: u64,
        limit: u64,
        setting: &'static str,
    },
    #[error("ENOSPC: {path}: {setting} ({limit}) would be exceeded")]
    NoSpace {
        path: String,
        limit: u64,
        setting: &'static str,
    },
    #[error("EAGAIN: {path} changed concurrently; retry")]
    Conflict { path: String },
    #[error("EIO: {path}: {message}")]
    Corrupt { path: String, message: String },
    #[error("EIO: host file system: {path}: {message}")]
    Host { path: String, message: String },
    #[error("EIO: database: {0}")]
    Db(DbError),
}

impl FsError {
    /// The stable code: the errno name.
    pub fn code(&self) -> ErrorCode {
        match self {
            FsError::NotFound { .. } => ErrorCode::Enoent,
            FsError::Exists { .. } => ErrorCode::Eexist,
            FsError::NotDir { .. } => ErrorCode::Enotdir,
            FsError::IsDir { .. } => ErrorCode::Eisdir,
            FsError::NotEmpty { .. } => ErrorCode::Enotempty,
            FsError::Invalid { .. } => ErrorCode::Einval,
            FsError::Loop { .. } => ErrorCode::Eloop,
            FsError::NameTooLong { .. } => ErrorCode::Enametoolong,
            FsError::CrossDevice { .. } => ErrorCode::Exdev,
            FsError::ReadOnly { .. } => ErrorCode::Erofs,
            FsError::Access { .. } => ErrorCode::Eacces,
            FsError::NotPermitted { .. } => ErrorCode::Eperm,
            FsError::FileTooBig { .. } => ErrorCode::Efbig,
            FsError::NoSpace { .. } => ErrorCode::Enospc,
            FsError::Conflict { .. } => ErrorCode::Eagain,
            FsError::Corrupt { .. } | FsError::Host { .. } | FsError::Db(_) => ErrorCode::Eio,
        }
    }

    /// The limit setting to raise, for limit errors.
    pub fn setting(&self) -> Option<&'static str> {
        match self {
            FsError::FileTooBig { setting, .. } | FsError::NoSpace { setting, .. } => Some(setting),
            _ => None,
        }
    }

    /// The code of the underlying database error, when there is one.
    pub fn db_code(&self) -> Option<&'static str> {
        match self {
            FsError::Db(e) => Some(e.code()),
            _ => None,
        }
    }

    pub(crate) fn invalid(path: &str, reason: impl Into<String>) -> FsError {
        FsError::Invalid {
            path: path.to_owned(),
            reason: reason.into(),
        }
    }

    pub(crate) fn corrupt(path: &str, message: impl Into<String>) -> FsError {
        FsError::Corrupt {
            path: path.to_owned(),
            message: message.into(),
        }
    }
}

impl From<DbError> for FsError {
    fn from(e: DbError) -> Self {
        FsError::Db(e)
    }
}
