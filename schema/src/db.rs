//! The `Database` handle: values, statements, result rows and the one error
//! enum every backend maps its failures into.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

/// A value bound to or read from SQLite. Mirrors SQLite's five storage classes.
#[derive(Clone, Debug, PartialEq)]
pub enum SqlValue {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl SqlValue {
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            SqlValue::Integer(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            SqlValue::Text(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_blob(&self) -> Option<&[u8]> {
        match self {
            SqlValue::Blob(v) => Some(v),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, SqlValue::Null)
    }

    /// Bytes this value occupies when materialized; used for result limits.
    pub fn approx_bytes(&self) -> usize {
        match self {
            SqlValue::Null => 1,
            SqlValue::Integer(_) | SqlValue::Real(_) => 8,
            SqlValue::Text(s) => s.len(),
            SqlValue::Blob(b) => b.len(),
        }
    }
}

impl From<i64> for SqlValue {
    fn from(v: i64) -> Self {
        SqlValue::Integer(v)
    }
}
impl From<u32> for SqlValue {
    fn from(v: u32) -> Self {
        SqlValue::Integer(i64::from(v))
    }
}
impl From<i32> for SqlValue {
    fn from(v: i32) -> Self {
        SqlValue::Integer(i64::from(v))
    }
}
impl From<bool> for SqlValue {
    fn from(v: bool) -> Self {
        SqlValue::Integer(i64::from(v))
    }
}
impl From<f64> for SqlValue {
    fn from(v: f64) -> Self {
        SqlValue::Real(v)
    }
}
impl From<String> for SqlValue {
    fn from(v: String) -> Self {
        SqlValue::Text(v)
    }
}
impl From<&str> for SqlValue {
    fn from(v: &str) -> Self {
        SqlValue::Text(v.to_owned())
    }
}
impl From<&String> for SqlValue {
    fn from(v: &String) -> Self {
        SqlValue::Text(v.clone())
    }
}
impl From<Vec<u8>> for SqlValue {
    fn from(v: Vec<u8>) -> Self {
        SqlValue::Blob(v)
    }
}
impl From<&[u8]> for SqlValue {
    fn from(v: &[u8]) -> Self {
        SqlValue::Blob(v.to_vec())
    }
}
impl<T: Into<SqlValue>> From<Option<T>> for SqlValue {
    fn from(v: Option<T>) -> Self {
        v.map_or(SqlValue::Null, Into::into)
    }
}

/// One statement of a transaction: SQL, its positional parameters, and an
/// optional expected change count. A mismatch rolls the whole transaction back.
/// Fixed SQL is borrowed, so the statements a turn writes copy no text.
#[derive(Clone, Debug, PartialEq)]
pub struct Statement {
    pub sql: Cow<'static, str>,
    pub params: Vec<SqlValue>,
    pub expected_changes: Option<u64>,
}

impl Statement {
    pub fn new(sql: impl Into<Cow<'static, str>>, params: Vec<SqlValue>) -> Self {
        Statement {
            sql: sql.into(),
            params,
            expected_changes: None,
        }
    }

    /// Fails the transaction (and rolls it back) unless exactly `n` rows change.
    pub fn expect_changes(mut self, n: u64) -> Self {
        self.expected_changes = Some(n);
        self
    }
}

/// The result of one statement: column names, rows, and the change count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<SqlValue>>,
    pub changes: u64,
    pub last_insert_rowid: Option<i64>,
}

impl Rows {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The first row's first column, if any.
    pub fn scalar(&self) -> Option<&SqlValue> {
        self.rows.first().and_then(|r| r.first())
    }

    pub fn scalar_i64(&self) -> Option<i64> {
        self.scalar().and_then(SqlValue::as_i64)
    }
}

/// Which backend a handle talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatabaseKind {
    SqliteFile,
    ActorUds,
}

impl DatabaseKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DatabaseKind::SqliteFile => "sqlite_file",
            DatabaseKind::ActorUds => "actor_uds",
        }
    }
}

impl fmt::Display for DatabaseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every way a database call can fail, on either backend. `code()` is stable.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DbError {
    /// SQLite rejected a statement. `code` is SQLite's extended result code
    /// (-1 for failures that are not SQLite's own).
    #[error("sqlite error {code} at statement {statement_index}: {message}")]
    Sql {
        code: i32,
        statement_index: u32,
        message: String,
    },
    #[error("statement {statement_index} changed {actual} rows, expected {expected}")]
    ExpectedChanges {
        statement_index: u32,
        expected: u64,
        actual: u64,
    },
    #[error("result exceeds limits.sqlite.maxResultBytes ({limit} bytes)")]
    ResultLimit { limit: u64 },
    #[error("queue full: {limit} (capacity {capacity})")]
    QueueFull { limit: String, capacity: u32 },
    #[error("transaction lease expired after {timeout_ms} ms: {message}")]
    LeaseExpired { timeout_ms: u64, message: String },
    #[error("invalid lease key: {0}")]
    InvalidLeaseKey(String),
    #[error("the database endpoint is closed")]
    EndpointClosed,
    #[error("the response did not fit the socket's frame limit")]
    ResponseTooLarge,
    #[error("the server sent GoAway: {0}")]
    GoAway(String),
    #[error("cannot connect to the database: {0}")]
    Connect(String),
    #[error("the socket announced maxFrameBytes {announced}, above limits.sqlite.maxSocketFrameBytes ({limit})")]
    SocketFrameLimit { announced: u32, limit: u32 },
    #[error("database connection lost: {0}")]
    ConnectionLost(String),
    /// The connection was lost after a commit was sent and before its
    /// answer: the transaction may or may not have committed.
    #[error("database connection lost while committing; the outcome is unknown: {0}")]
    CommitOutcomeUnknown(String),
    #[error("database protocol violation: {0}")]
    Protocol(String),
    #[error("foreign keys could not be enabled")]
    ForeignKeysDisabled,
    /// A row read back does not have the shape its query asked for: the
    /// wrong number of columns (a result's rows disagreeing with its column
    /// count included), a value of the wrong type, a NULL in a column that
    /// has none, or a value outside the column's vocabulary. `table` names
    /// where it came from (`query result` when only the result is known).
    #[error("corrupt row from {table}: {message}")]
    CorruptRow { table: String, message: String },
    #[error("the database handle is closed")]
    Closed,
}

/// SQLite's primary result code for constraint violations.
const SQLITE_CONSTRAINT: i32 = 19;

impl DbError {
    pub fn code(&self) -> &'static str {
        match self {
            DbError::Sql { .. } => "sqlite_error",
            DbError::ExpectedChanges { .. } => "expected_changes_mismatch",
            DbError::ResultLimit { .. } => "sqlite_result_limit",
            DbError::QueueFull { .. } => "sqlite_queue_full",
            DbError::LeaseExpired { .. } => "sqlite_lease_expired",
            DbError::InvalidLeaseKey(_) => "sqlite_invalid_lease_key",
            DbError::EndpointClosed => "sqlite_endpoint_closed",
            DbError::ResponseTooLarge => "sqlite_response_too_large",
            DbError::GoAway(_) => "sqlite_go_away",
            DbError::Connect(_) => "sqlite_connect_failed",
            DbError::SocketFrameLimit { .. } => "sqlite_socket_frame_limit",
            DbError::ConnectionLost(_) => "sqlite_connection_lost",
            DbError::CommitOutcomeUnknown(_) => "sqlite_commit_outcome_unknown",
            DbError::Protocol(_) => "sqlite_protocol_error",
            DbError::ForeignKeysDisabled => "sqlite_foreign_keys_disabled",
            DbError::CorruptRow { .. } => "corrupt_row",
            DbError::Closed => "session_storage_unavailable",
        }
    }

    /// True when SQLite refused a statement because of a constraint
    /// (UNIQUE, PRIMARY KEY, CHECK, NOT NULL, FOREIGN KEY).
    pub fn is_constraint(&self) -> bool {
        matches!(self, DbError::Sql { code, .. } if code & 0xff == SQLITE_CONSTRAINT)
    }

    /// The statement index this error is attributed to, when there is one.
    pub fn statement_index(&self) -> Option<u32> {
        match self {
            DbError::Sql {
                statement_index, ..
            }
            | DbError::ExpectedChanges {
                statement_index, ..
            } => Some(*statement_index),
            _ => None,
        }
    }
}

/// The one database handle of a VM. Both backends implement it; every store
/// receives the same `Arc<dyn Database>`.
#[async_trait]
pub trait Database: Send + Sync + 'static {
    fn kind(&self) -> DatabaseKind;

    /// Runs one statement outside any explicit transaction.
    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Rows, DbError>;

    /// Runs one read-only statement, off the writer's path where the
    /// backend can (`sqlite_file` keeps a small pool of read connections).
    /// It sees every transaction that committed before it was called, but
    /// is not ordered behind transactions submitted and not yet answered:
    /// a caller that needs that order uses [`Database::query`].
    async fn read(&self, sql: &str, params: Vec<SqlValue>) -> Result<Rows, DbError> {
        self.query(sql, params).await
    }

    /// Bytes `[offset, offset + len)` of the BLOB in `table.column` of the
    /// row `rowid` (fewer at the value's end), on the read path; None when
    /// the row does not exist. The names are the caller's own literals,
    /// never input. A backend that can read a range without loading the
    /// whole value (the local file's incremental blob I/O) does; the default
    /// is a `substr`.
    async fn read_blob(
        &self,
        table: &'static str,
        column: &'static str,
        rowid: i64,
        offset: u64,
        len: u64,
    ) -> Result<Option<Vec<u8>>, DbError> {
        let (sql, params) = blob_range_query(table, column, rowid, offset, len);
        Ok(blob_range_of(self.read(&sql, params).await?))
    }

    /// Runs the statements atomically (`BEGIN IMMEDIATE … COMMIT`, or a lease on
    /// the actor socket). Any error or expected-change mismatch rolls back all of
    /// them. Returns one `Rows` per statement, in order.
    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Rows>, DbError>;

    /// Finishes the work already submitted, then releases the database (the
    /// file's connection, or the actor socket). Later calls fail with
    /// `DbError::Closed`. Closing twice is harmless.
    async fn close(&self);
}

pub type SharedDatabase = Arc<dyn Database>;

/// The `substr` that reads bytes `[offset, offset + len)` of the BLOB in
/// `table.column` of row `rowid`, and its parameters.
pub fn blob_range_query(
    table: &str,
    column: &str,
    rowid: i64,
    offset: u64,
    len: u64,
) -> (String, Vec<SqlValue>) {
    let at = i64::try_from(offset).unwrap_or(i64::MAX).saturating_add(1);
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    (
        format!("SELECT substr({column}, ?2, ?3) FROM {table} WHERE rowid = ?1"),
        vec![
            SqlValue::Integer(rowid),
            SqlValue::Integer(at),
            SqlValue::Integer(len),
        ],
    )
}

/// What [`blob_range_query`] answered: None without a row, the bytes (none
/// for a NULL) otherwise.
pub fn blob_range_of(rows: Rows) -> Option<Vec<u8>> {
    rows.rows
        .into_iter()
        .next()
        .map(|row| match row.into_iter().next() {
            Some(SqlValue::Blob(bytes)) => bytes,
            Some(SqlValue::Text(text)) => text.into_bytes(),
            _ => Vec::new(),
        })
}
