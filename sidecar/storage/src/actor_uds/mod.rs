//! The actor_uds backend: an Actor Runtime Socket v1 client.
//!
//! One connection at a time, with a reader task and a writer task; requests
//! are pipelined under fresh request ids and matched to their responses in
//! whatever order those arrive. A caller writes its frames to the socket
//! itself when nothing is queued before them and the socket takes them
//! whole (no task hop); otherwise they queue for the writer task, which
//! keeps the order. In-flight requests are bounded by
//! `limits.sqlite.maxInFlightRequests` (callers wait for a slot) and encoded
//! bytes waiting for the socket by `maxQueuedRequestBytes` (the excess is a
//! typed `QueueFull` error, never unbounded memory).
//!
//! A server may run pipelined requests in any order (Rivet's runs each on a
//! task of its own), so only independent lease-less queries are pipelined.
//! A transaction is one lease with a fresh UUID key, pinned to the
//! connection that began it: Begin and its first statement go out in one
//! write (a server registers a Begin's lease in arrival order, and the
//! statement waits for it), every later statement and the commit only once
//! the one before is answered. It reserves its two slots before it begins,
//! so lease-less reads the server parks behind it can never starve it, its
//! rollback included. A request the server answers `LeaseExpired` without
//! having run it (it waited behind someone else's lease that expired: a
//! lease-less query, or a Begin) is sent again, a bounded number of times; a
//! statement of our own expired lease is not. After
//! `maxLeasesPerConnection` leases the next call opens a fresh connection,
//! since a server may remember every lease key a connection used until it
//! closes (Rivet's does). There is no pool, mux or
//! writer scheduler: the socket's owner owns isolation. A dead connection
//! fails its pending requests with `ConnectionLost`; the next call connects
//! again.

mod connection;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use agentos_protocol::ars::{
    RequestPayload, ResponsePayload, SqliteBegin, SqliteCommit, SqliteQuery, SqliteQueryOk,
    SqliteRollback,
};
use agentos_schema::{Database, DatabaseKind, DbError, Rows, SqlValue, Statement};
use async_trait::async_trait;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::ars_values::{from_wire, to_wire};
use crate::SqliteLimits;
use connection::{Connection, Reply};

/// Connect plus hello must finish within this.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The actor socket database handle.
pub struct ActorUdsDatabase {
    path: PathBuf,
    limits: SqliteLimits,
    current: tokio::sync::Mutex<Option<Arc<Connection>>>,
    closed: std::sync::atomic::AtomicBool,
}

/// Connects, says hello, and turns foreign keys on (verifying they are on).
pub async fn connect(path: &Path, limits: &SqliteLimits) -> Result<ActorUdsDatabase, DbError> {
    let connection = Connection::open(path, limits).await?;
    let db = ActorUdsDatabase {
        path: path.to_owned(),
        limits: limits.clone(),
        current: tokio::sync::Mutex::new(Some(connection.clone())),
        closed: std::sync::atomic::AtomicBool::new(false),
    };
    db.query("PRAGMA foreign_keys = ON", vec![]).await?;
    let on = db.query("PRAGMA foreign_keys", vec![]).await?;
    if on.scalar_i64() != Some(1) {
        return Err(DbError::ForeignKeysDisabled);
    }
    Ok(db)
}

impl ActorUdsDatabase {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The live connection, or a new one when the last has died.
    async fn connection(&self) -> Result<Arc<Connection>, DbError> {
        let mut current = self.current.lock().await;
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(DbError::Closed);
        }
        if let Some(conn) = current.as_ref() {
            let leases = conn.leases_begun.load(Ordering::Relaxed);
            if conn.is_alive() && leases < self.limits.max_leases_per_connection {
                return Ok(conn.clone());
            }
        }
        // Dead, or it has begun its share of leases: a fresh one. A retired
        // connection closes once the calls still holding it are done.
        *current = None;
        let conn = Connection::open(&self.path, &self.limits).await?;
        // A fresh server connection starts with the server's own settings.
        conn.call(
            &conn.slots,
            None,
            query_payload("PRAGMA foreign_keys = ON", vec![]),
        )
        .await
        .and_then(|r| expect_query(r, 0))?;
        *current = Some(conn.clone());
        Ok(conn)
    }

    fn rows_of(&self, ok: SqliteQueryOk) -> Result<Rows, DbError> {
        decode_rows(ok, self.limits.max_result_bytes)
    }

    /// One try at a transaction. The server runs every request on a task of
    /// its own, so requests pipelined on one connection may run in any
    /// order; only a Begin's lease is registered in the order frames arrive.
    /// So Begin and the first statement go out in one write (the statement
    /// waits on the server for the lease it names), and every later
    /// statement, and the commit, only once the one before is answered.
    async fn transaction_once(&self, statements: &[Statement]) -> Result<Vec<Rows>, Attempt> {
        let conn = self.connection().await.map_err(Attempt::Failed)?;
        // The lease's own in-flight slots, taken before it begins: requests
        // parked on the server behind it (lease-less reads, other Begins)
        // can then never hold every slot it needs to finish, its rollback
        // included.
        let width = LEASE_SLOTS.min(conn.max_in_flight);
        let reserved = conn
            .slots
            .clone()
            .acquire_many_owned(width)
            .await
            .map_err(|_| Attempt::Failed(conn.death()))?;
        let slots = Arc::new(Semaphore::new(width as usize));
        conn.leases_begun.fetch_add(1, Ordering::Relaxed);
        let key = uuid::Uuid::new_v4().to_string();
        let mut lease = Lease {
            conn: conn.clone(),
            key: key.clone(),
            open: true,
            slots: slots.clone(),
            reserved: Some(reserved),
        };
        let begin = RequestPayload::SqliteBegin(SqliteBegin {
            lease_key: key.clone(),
            timeout_ms: None,
        });
        let mut first = vec![(None, begin)];
        let mut statements = statements.iter().peekable();
        if width > 1 {
            if let Some(statement) = statements.peek() {
                first.push((Some(key.clone()), statement_payload(statement)));
            }
        }
        let sent_with_begin = first.len() > 1;
        let mut replies = match conn.send_all(&slots, first).await {
            Ok(replies) => replies.into_iter(),
            Err(error) => {
                lease.open = false;
                return Err(Attempt::Failed(error));
            }
        };
        let begin = replies.next();
        let mut with_begin = replies.next();
        let begun = match begin {
            Some(reply) => receive(reply).await,
            None => Err(conn.death()),
        };
        match begun {
            Ok(ResponsePayload::SqliteBeginOk) => {}
            // It waited behind a lease that expired and never began; what was
            // sent with it named a lease that never existed.
            Ok(ResponsePayload::LeaseExpired(e)) => {
                lease.open = false;
                return Err(Attempt::NotRun(error_of(
                    ResponsePayload::LeaseExpired(e),
                    0,
                )));
            }
            Ok(other) => {
                lease.open = false;
                return Err(Attempt::Failed(error_of(other, 0)));
            }
            Err(e) => {
                lease.open = false;
                return Err(Attempt::Failed(e));
            }
        }
        debug_assert_eq!(with_begin.is_some(), sent_with_begin);
        let mut results = Vec::with_capacity(statements.len());
        for (index, statement) in statements.enumerate() {
            let index = index as u32;
            let reply = match with_begin.take() {
                Some(reply) => Ok(reply),
                None => {
                    conn.send(&slots, Some(key.clone()), statement_payload(statement))
                        .await
                }
            };
            let outcome = match reply {
                Ok(reply) => receive(reply).await,
                Err(e) => Err(e),
            }
            .and_then(|r| expect_query(r, index))
            .and_then(|ok| self.rows_of(ok))
            .and_then(|rows| match statement.expected_changes {
                Some(expected) if expected != rows.changes => Err(DbError::ExpectedChanges {
                    statement_index: index,
                    expected,
                    actual: rows.changes,
                }),
                _ => Ok(rows),
            });
            match outcome {
                Ok(rows) => results.push(rows),
                Err(error) => {
                    lease.rollback().await;
                    return Err(Attempt::Failed(error));
                }
            }
        }
        let sent = conn
            .send(
                &slots,
                None,
                RequestPayload::SqliteCommit(SqliteCommit {
                    lease_key: key.clone(),
                }),
            )
            .await;
        let commit = match sent {
            // Once the commit may have reached the server, anything but an
            // answer to it (a lost connection, a GoAway) leaves its outcome
            // unknown.
            Ok(reply) => receive(reply)
                .await
                .map_err(|e| DbError::CommitOutcomeUnknown(e.to_string())),
            Err(e) => Err(e),
        };
        match commit {
            Ok(ResponsePayload::SqliteCommitOk) => {
                lease.open = false;
                Ok(results)
            }
            Ok(other) => {
                lease.rollback().await;
                Err(Attempt::Failed(error_of(other, results.len() as u32)))
            }
            Err(e) => {
                lease.rollback().await;
                Err(Attempt::Failed(e))
            }
        }
    }
}

/// How a transaction's try ended, when it did not commit.
enum Attempt {
    /// The server says nothing of it ran (its Begin waited behind a lease
    /// that expired): it may be sent again.
    NotRun(DbError),
    Failed(DbError),
}

/// How often a request the server says never ran is sent again. One retry
/// is the usual case: the lease it waited behind is gone by then.
const NOT_RUN_RETRIES: u32 = 8;

/// Before sending again what never ran: a server may still be rolling the
/// expired lease back, and refuses what arrives meanwhile too (Rivet's
/// does), so each try waits a millisecond longer than the one before.
async fn not_run_pause(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(u64::from(attempt))).await;
}

/// In-flight slots one lease uses at most: its Begin and first statement.
const LEASE_SLOTS: u32 = 2;

/// A query result as the handle's rows. Every row must have exactly as many
/// values as the result has columns (checked once, here, for the whole
/// result), else `CorruptRow`; the decoded values must fit
/// `max_result_bytes`, else `ResultLimit`.
fn decode_rows(ok: SqliteQueryOk, max_result_bytes: u64) -> Result<Rows, DbError> {
    let width = ok.columns.len();
    if let Some((index, row)) = ok.rows.iter().enumerate().find(|(_, r)| r.len() != width) {
        return Err(DbError::CorruptRow {
            table: "query result".into(),
            message: format!(
                "row {index} has {} values, the result has {width} columns",
                row.len()
            ),
        });
    }
    let mut bytes: u64 = 0;
    let rows: Vec<Vec<SqlValue>> = ok
        .rows
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|v| {
                    let v = from_wire(v);
                    bytes += v.approx_bytes() as u64;
                    v
                })
                .collect()
        })
        .collect();
    if bytes > max_result_bytes {
        return Err(DbError::ResultLimit {
            limit: max_result_bytes,
        });
    }
    Ok(Rows {
        columns: ok.columns,
        rows,
        changes: u64::try_from(ok.changes).unwrap_or(0),
        last_insert_rowid: ok.last_insert_row_id,
    })
}

#[async_trait]
impl Database for ActorUdsDatabase {
    fn kind(&self) -> DatabaseKind {
        DatabaseKind::ActorUds
    }

    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Rows, DbError> {
        let mut attempt = 0;
        loop {
            let conn = self.connection().await?;
            let response = conn
                .call(&conn.slots, None, query_payload(sql, params.clone()))
                .await?;
            match response {
                // Parked behind a lease that expired: the server says it did
                // not run, so it is sent again.
                ResponsePayload::LeaseExpired(_) if attempt < NOT_RUN_RETRIES => {
                    attempt += 1;
                    not_run_pause(attempt).await;
                }
                other => return self.rows_of(expect_query(other, 0)?),
            }
        }
    }

    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Rows>, DbError> {
        let mut attempt = 0;
        loop {
            match self.transaction_once(&statements).await {
                Ok(rows) => return Ok(rows),
                Err(Attempt::NotRun(_)) if attempt < NOT_RUN_RETRIES => {
                    attempt += 1;
                    not_run_pause(attempt).await;
                }
                Err(Attempt::NotRun(error) | Attempt::Failed(error)) => return Err(error),
            }
        }
    }

    async fn close(&self) {
        let mut current = self.current.lock().await;
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        // Dropping the last handle ends the reader and writer tasks and
        // closes the socket; calls already holding it finish first.
        current.take();
    }
}

/// An open lease. Dropped while still open (the caller's future was
/// cancelled), it sends a rollback in the background rather than holding the
/// server's writer until the deadline.
struct Lease {
    conn: Arc<Connection>,
    key: String,
    open: bool,
    /// The lease's own slots, backed by `reserved` of the connection's.
    slots: Arc<Semaphore>,
    reserved: Option<OwnedSemaphorePermit>,
}

impl Lease {
    async fn rollback(&mut self) {
        self.open = false;
        let result = self
            .conn
            .call(&self.slots, None, rollback_payload(&self.key))
            .await;
        match result {
            Ok(ResponsePayload::SqliteRollbackOk) => {}
            // The server already ended the lease (a failed commit, a deadline):
            // nothing is left to roll back.
            Ok(ResponsePayload::InvalidLeaseKey(_) | ResponsePayload::LeaseExpired(_)) => {}
            Ok(other) => tracing::error!(
                error = %error_of(other, 0),
                "ERR_AGENTOS_SQLITE_ROLLBACK: rollback failed"
            ),
            Err(e) => tracing::error!(error = %e, "ERR_AGENTOS_SQLITE_ROLLBACK: rollback failed"),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let conn = self.conn.clone();
        let key = std::mem::take(&mut self.key);
        let slots = self.slots.clone();
        // The rollback goes out on the lease's own slots, which stay
        // reserved until it is answered.
        let reserved = self.reserved.take();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = conn.call(&slots, None, rollback_payload(&key)).await;
                drop(reserved);
            });
        }
    }
}

fn rollback_payload(key: &str) -> RequestPayload {
    RequestPayload::SqliteRollback(SqliteRollback {
        lease_key: key.to_owned(),
    })
}

fn query_payload(sql: &str, params: Vec<SqlValue>) -> RequestPayload {
    RequestPayload::SqliteQuery(SqliteQuery {
        sql: sql.to_owned(),
        params: params.into_iter().map(to_wire).collect(),
    })
}

/// A statement of a transaction as a request. The statement is kept (and
/// copied here) so that a transaction the server never ran can be sent again.
fn statement_payload(statement: &Statement) -> RequestPayload {
    query_payload(&statement.sql, statement.params.clone())
}

async fn receive(reply: Reply) -> Result<ResponsePayload, DbError> {
    reply
        .await
        .map_err(|_| DbError::ConnectionLost("the connection closed".into()))?
}

fn expect_query(response: ResponsePayload, index: u32) -> Result<SqliteQueryOk, DbError> {
    match response {
        ResponsePayload::SqliteQueryOk(ok) => Ok(ok),
        other => Err(error_of(other, index)),
    }
}

/// Maps a non-success response to the handle's error.
pub fn error_of(response: ResponsePayload, statement_index: u32) -> DbError {
    match response {
        ResponsePayload::SqlError(e) => DbError::Sql {
            code: e.code,
            statement_index,
            message: e.message,
        },
        ResponsePayload::EndpointClosed => DbError::EndpointClosed,
        ResponsePayload::QueueFull(q) => DbError::QueueFull {
            limit: q.limit,
            capacity: q.capacity,
        },
        ResponsePayload::InvalidLeaseKey(e) => DbError::InvalidLeaseKey(e.message),
        ResponsePayload::LeaseExpired(e) => DbError::LeaseExpired {
            timeout_ms: e.timeout_ms,
            message: e.message,
        },
        ResponsePayload::ResponseTooLarge => DbError::ResponseTooLarge,
        other => DbError::Protocol(format!("unexpected response {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentos_protocol::ars;

    fn result(columns: &[&str], rows: Vec<Vec<ars::SqlValue>>) -> SqliteQueryOk {
        SqliteQueryOk {
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows,
            changes: 0,
            last_insert_row_id: None,
        }
    }

    #[test]
    fn rows_as_wide_as_the_columns_decode() {
        let ok = result(
            &["a", "b"],
            vec![
                vec![ars::SqlValue::SqlInteger(1), ars::SqlValue::SqlNull],
                vec![
                    ars::SqlValue::SqlText("x".into()),
                    ars::SqlValue::SqlBlob(vec![1]),
                ],
            ],
        );
        let rows = decode_rows(ok, u64::MAX).expect("decoded");
        assert_eq!(rows.columns, vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(rows.rows.len(), 2);
        assert_eq!(rows.rows[1][0], SqlValue::Text("x".into()));
        let empty = decode_rows(result(&[], vec![]), u64::MAX).expect("no columns, no rows");
        assert!(empty.rows.is_empty());
    }

    #[test]
    fn a_row_of_the_wrong_width_is_a_corrupt_row() {
        let short = result(
            &["a", "b"],
            vec![
                vec![ars::SqlValue::SqlInteger(1), ars::SqlValue::SqlNull],
                vec![ars::SqlValue::SqlInteger(2)],
            ],
        );
        let err = decode_rows(short, u64::MAX).expect_err("short row");
        assert_eq!(err.code(), "corrupt_row");
        assert_eq!(
            err.to_string(),
            "corrupt row from query result: row 1 has 1 values, the result has 2 columns"
        );
        let long = result(
            &["a"],
            vec![vec![ars::SqlValue::SqlNull, ars::SqlValue::SqlNull]],
        );
        assert!(matches!(
            decode_rows(long, u64::MAX),
            Err(DbError::CorruptRow { .. })
        ));
        let rows_without_columns = result(&[], vec![vec![ars::SqlValue::SqlNull]]);
        assert!(matches!(
            decode_rows(rows_without_columns, u64::MAX),
            Err(DbError::CorruptRow { .. })
        ));
    }

    #[test]
    fn the_result_limit_still_applies() {
        let ok = result(&["t"], vec![vec![ars::SqlValue::SqlText("x".repeat(64))]]);
        assert!(matches!(
            decode_rows(ok, 8),
            Err(DbError::ResultLimit { limit: 8 })
        ));
    }
}
