//! The control plane's one error enum. Codes are stable snake_case; a full
//! collection names the setting to raise. The front doors render these in
//! their own wire form (the signed door as an HTTP status and message), so
//! nothing here knows HTTP or CBOR.

use agentos_schema::DbError;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ControlError {
    /// The thing does not exist, or the caller may not know that it does:
    /// an agent the caller cannot read answers this, never `Forbidden`.
    #[error("{0} not found")]
    NotFound(String),
    /// The caller can see the thing but its access is too low.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A duplicate, or an idempotency key reused with a different request.
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A bounded collection is full; `setting` is the limit to raise.
    #[error("{setting} ({limit}) reached")]
    Limit { setting: &'static str, limit: u64 },
    #[error("secret value of {size} bytes exceeds {limit} bytes")]
    SecretTooLarge { size: usize, limit: usize },
    /// The secrets key cannot be loaded, or is not the key a stored value
    /// was sealed with. Never carries key bytes.
    #[error("secrets key: {0}")]
    SecretKey(String),
    /// A stored ciphertext does not open under its key for its row (moved
    /// to another row, or damaged).
    #[error("secret {0} cannot be decrypted: it was not sealed for this row")]
    SecretUnreadable(String),
    /// The VM started without a secrets key, so nothing can be sealed or
    /// opened; everything that needs no secret still works.
    #[error("the secrets vault is locked: this VM was started without a secrets key; name one with secrets.keyFile (or AGENTOS_SECRETS_KEY) and restart")]
    VaultLocked,
    #[error("corrupt row from {table}: {message}")]
    CorruptRow { table: String, message: String },
    #[error("storage failed: {0}")]
    Storage(DbError),
}

impl ControlError {
    pub fn code(&self) -> &'static str {
        match self {
            ControlError::NotFound(_) => "not_found",
            ControlError::Forbidden(_) => "forbidden",
            ControlError::Conflict(_) => "conflict",
            ControlError::InvalidArgument(_) => "invalid_argument",
            ControlError::Limit { .. } => "limit",
            ControlError::SecretTooLarge { .. } => "secret_too_large",
            ControlError::SecretKey(_) => "secret_key",
            ControlError::SecretUnreadable(_) => "secret_unreadable",
            ControlError::VaultLocked => "vault_locked",
            ControlError::CorruptRow { .. } => "corrupt_row",
            ControlError::Storage(_) => "storage",
        }
    }

    /// The setting a limit error names.
    pub fn setting(&self) -> Option<&'static str> {
        match self {
            ControlError::Limit { setting, .. } => Some(setting),
            ControlError::VaultLocked => Some("secrets.keyFile"),
            _ => None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> ControlError {
        ControlError::InvalidArgument(message.into())
    }
}

impl From<DbError> for ControlError {
    fn from(e: DbError) -> Self {
        match e {
            DbError::CorruptRow { table, message } => ControlError::CorruptRow { table, message },
            other => ControlError::Storage(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_and_corrupt_rows_keep_their_code() {
        let corrupt = ControlError::from(DbError::CorruptRow {
            table: "t".into(),
            message: "m".into(),
        });
        assert_eq!(corrupt.code(), "corrupt_row");
        assert_eq!(ControlError::from(DbError::Closed).code(), "storage");
        let limit = ControlError::Limit {
            setting: "limits.control.maxAgentsPerAccount",
            limit: 3,
        };
        assert_eq!(limit.code(), "limit");
        assert_eq!(limit.setting(), Some("limits.control.maxAgentsPerAccount"));
        assert!(limit.to_string().contains("maxAgentsPerAccount"));
    }
}
