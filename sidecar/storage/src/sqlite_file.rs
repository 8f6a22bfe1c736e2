//! The `sqlite_file` backend: one rusqlite connection owned by one dedicated
//! thread, fed through a bounded queue, for every write and ordered query;
//! `Database::read` goes to the read connections of `sqlite_read` instead
//! (WAL lets them read while the writer commits).
//!
//! Async callers never touch SQLite on a worker the runtime counts on: they
//! enqueue a job and await a oneshot reply (or, for reads, read inside
//! `block_in_place`), so no tokio worker ever blocks on disk. A full queue
//! is a typed `QueueFull` error rather than unbounded memory. Every
//! transaction is `BEGIN IMMEDIATE … COMMIT`; any failure or
//! expected-change mismatch rolls back everything. The writer counts every
//! job it answers before it answers, which is how a read connection knows
//! whether the snapshot it holds is still the latest.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread;

use agentos_schema::{
    blob_range_of, blob_range_query, Database, DatabaseKind, DbError, Rows, SqlValue, Statement,
};
use async_trait::async_trait;
use rusqlite::Connection;
use tokio::sync::oneshot;

use super::sqlite_checkpoint::{watch_wal, Checkpointer};
use super::sqlite_conn::{control, open_connection, run_statement, sql_error, Awake};
use super::sqlite_read::{BlobRange, ReadSide};
use crate::SqliteLimits;

enum Job {
    Query {
        sql: String,
        params: Vec<SqlValue>,
        reply: oneshot::Sender<Result<Rows, DbError>>,
    },
    Transaction {
        statements: Vec<Statement>,
        reply: oneshot::Sender<Result<Vec<Rows>, DbError>>,
    },
    /// Ends the executor once the jobs queued before it are done; the
    /// connection is dropped before the reply (the last connection to close
    /// checkpoints the WAL and removes it).
    Close { reply: oneshot::Sender<()> },
}

/// The local-file database handle.
pub struct SqliteFileDatabase {
    jobs: SyncSender<Job>,
    /// The read connections (None when none could open: reads then go
    /// through the writer).
    reads: Option<ReadSide>,
    /// The background checkpointer (None when it could not start: the
    /// writer then checkpoints as SQLite does by default).
    checkpointer: Option<Arc<Checkpointer>>,
    capacity: u32,
    path: PathBuf,
    closed: AtomicBool,
}

impl SqliteFileDatabase {
    /// Opens (creating if needed) the file, applies the connection settings and
    /// starts the executor thread and the read side.
    pub fn open(path: &Path, limits: &SqliteLimits) -> Result<SqliteFileDatabase, DbError> {
        let conn = open_connection(path)?;
        let checkpointer = match Checkpointer::start(path) {
            Ok(checkpointer) => {
                watch_wal(&conn);
                Some(Arc::new(checkpointer))
            }
            Err(e) => {
                tracing::warn!(error = %e, "no background checkpointer: the writer checkpoints");
                None
            }
        };
        let capacity = limits.max_queued_jobs.max(1);
        let (jobs, rx) = mpsc::sync_channel::<Job>(capacity as usize);
        let max_result_bytes = limits.max_result_bytes;
        let answered = Arc::new(AtomicU64::new(0));
        let counted = answered.clone();
        let wakes = checkpointer.clone();
        thread::Builder::new()
            .name("agentos-sqlite".into())
            .spawn(move || executor(conn, rx, &counted, wakes.as_deref(), max_result_bytes))
            .map_err(|e| DbError::Connect(format!("cannot start the executor thread: {e}")))?;
        let reads = match ReadSide::start(path, capacity, max_result_bytes, answered) {
            Ok(reads) => Some(reads),
            Err(e) => {
                tracing::warn!(error = %e, "no read connections: reads share the writer's queue");
                None
            }
        };
        Ok(SqliteFileDatabase {
            jobs,
            reads,
            checkpointer,
            capacity,
            path: path.to_owned(),
            closed: AtomicBool::new(false),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn submit(&self, job: Job) -> Result<(), DbError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(DbError::Closed);
        }
        self.jobs.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => DbError::QueueFull {
                limit: "sqliteWorkerQueue".into(),
                capacity: self.capacity,
            },
            TrySendError::Disconnected(_) => DbError::Closed,
        })
    }
}

#[async_trait]
impl Database for SqliteFileDatabase {
    fn kind(&self) -> DatabaseKind {
        DatabaseKind::SqliteFile
    }

    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Rows, DbError> {
        let (reply, rx) = oneshot::channel();
        self.submit(Job::Query {
            sql: sql.to_owned(),
            params,
            reply,
        })?;
        rx.await.map_err(|_| DbError::Closed)?
    }

    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Rows>, DbError> {
        let (reply, rx) = oneshot::channel();
        self.submit(Job::Transaction { statements, reply })?;
        rx.await.map_err(|_| DbError::Closed)?
    }

    /// A read on the read side (`sqlite_read`): on a multi-threaded runtime
    /// on the caller's own thread, on a borrowed connection, otherwise queued
    /// for the reader threads. It sees every transaction answered before it.
    async fn read(&self, sql: &str, params: Vec<SqlValue>) -> Result<Rows, DbError> {
        let Some(reads) = &self.reads else {
            return self.query(sql, params).await;
        };
        if self.closed.load(Ordering::SeqCst) {
            return Err(DbError::Closed);
        }
        reads.query(sql, params).await
    }

    async fn read_blob(
        &self,
        table: &'static str,
        column: &'static str,
        rowid: i64,
        offset: u64,
        len: u64,
    ) -> Result<Option<Vec<u8>>, DbError> {
        let Some(reads) = &self.reads else {
            let (sql, params) = blob_range_query(table, column, rowid, offset, len);
            return Ok(blob_range_of(self.query(&sql, params).await?));
        };
        if self.closed.load(Ordering::SeqCst) {
            return Err(DbError::Closed);
        }
        reads
            .blob(BlobRange {
                table,
                column,
                rowid,
                offset,
                len,
            })
            .await
    }

    async fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        // The readers and the checkpointer first, so the writer's close can
        // checkpoint the WAL whole.
        if let Some(reads) = &self.reads {
            reads.close().await;
        }
        if let Some(checkpointer) = self.checkpointer.clone() {
            let _ = tokio::task::spawn_blocking(move || checkpointer.close()).await;
        }
        let (reply, done) = oneshot::channel();
        let jobs = self.jobs.clone();
        // The queue may be full: wait for room off the async threads.
        let queued =
            tokio::task::spawn_blocking(move || jobs.send(Job::Close { reply }).is_ok()).await;
        if matches!(queued, Ok(true)) {
            let _ = done.await;
        }
    }
}

/// Transactions committed together at most, so one group never holds the
/// first caller in it for long.
const GROUP_COMMIT_MAX: usize = 64;

type TransactionReply = oneshot::Sender<Result<Vec<Rows>, DbError>>;
type TransactionJob = (Vec<Statement>, TransactionReply);

fn executor(
    conn: Connection,
    jobs: mpsc::Receiver<Job>,
    answered: &AtomicU64,
    checkpointer: Option<&Checkpointer>,
    max_result_bytes: u64,
) {
    let closed = execute(conn, &jobs, answered, checkpointer, max_result_bytes);
    if let Some(reply) = closed {
        let _ = reply.send(());
    }
}

/// Runs jobs until the queue closes or a `Close` arrives; returns the
/// close's reply after the connection has been dropped. Each job's work is
/// counted in `answered` before its answers go out, and reported to the
/// checkpointer after.
fn execute(
    mut conn: Connection,
    jobs: &mpsc::Receiver<Job>,
    answered: &AtomicU64,
    checkpointer: Option<&Checkpointer>,
    max_result_bytes: u64,
) -> Option<oneshot::Sender<()>> {
    let mut next: Option<Job> = None;
    let mut awake = Awake::default();
    loop {
        let job = match next.take().or_else(|| awake.next_soon(jobs)) {
            Some(job) => job,
            None => match jobs.recv() {
                Ok(job) => {
                    awake.woke();
                    job
                }
                Err(_) => return None,
            },
        };
        match job {
            Job::Close { reply } => {
                if let Err((_, e)) = conn.close() {
                    tracing::warn!(error = %e, "closing the database file failed");
                }
                return Some(reply);
            }
            Job::Query { sql, params, reply } => {
                let result = run_statement(&conn, 0, &sql, &params, max_result_bytes);
                answered.fetch_add(1, Ordering::SeqCst);
                let _ = reply.send(result);
                if let Some(checkpointer) = checkpointer {
                    checkpointer.after_job(&conn);
                }
            }
            Job::Transaction { statements, reply } => {
                // Group commit: transactions already waiting share one
                // commit.
                let mut group: Vec<TransactionJob> = vec![(statements, reply)];
                while group.len() < GROUP_COMMIT_MAX {
                    match jobs.try_recv() {
                        Ok(Job::Transaction { statements, reply }) => {
                            group.push((statements, reply))
                        }
                        Ok(other) => {
                            next = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let answers = if group.len() == 1 {
                    group
                        .into_iter()
                        .map(|(statements, reply)| {
                            (
                                reply,
                                run_transaction(&mut conn, &statements, max_result_bytes),
                            )
                        })
                        .collect()
                } else {
                    run_group(&mut conn, group, max_result_bytes)
                };
                answered.fetch_add(1, Ordering::SeqCst);
                for (reply, outcome) in answers {
                    let _ = reply.send(outcome);
                }
                if let Some(checkpointer) = checkpointer {
                    checkpointer.after_job(&conn);
                }
            }
        }
    }
}

/// Answers to the members of a group, in their order.
type GroupAnswers = Vec<(TransactionReply, Result<Vec<Rows>, DbError>)>;

/// Runs several transactions under one `BEGIN IMMEDIATE … COMMIT`, one
/// after another. When every member succeeds they commit together; when one
/// fails, the whole group is rolled back and each member is run again alone,
/// in order, in a transaction of its own, so each answer is what running the
/// members one by one would have given (a failure costs the group a second
/// run; a savepoint per member would cost every group a copy of each page it
/// first touches). The answers are returned, for the caller to send once the
/// commit is done.
fn run_group(
    conn: &mut Connection,
    group: Vec<TransactionJob>,
    max_result_bytes: u64,
) -> GroupAnswers {
    if let Err(e) = control(conn, "BEGIN IMMEDIATE") {
        let error = sql_error(0)(e);
        return group
            .into_iter()
            .map(|(_, reply)| (reply, Err(error.clone())))
            .collect();
    }
    let mut results = Vec::with_capacity(group.len());
    for (statements, _) in &group {
        match run_statements(conn, statements, max_result_bytes) {
            Ok(rows) => results.push(rows),
            Err(_) => break,
        }
    }
    if results.len() == group.len() {
        match control(conn, "COMMIT") {
            Ok(()) => {
                return group
                    .into_iter()
                    .zip(results)
                    .map(|((_, reply), rows)| (reply, Ok(rows)))
                    .collect()
            }
            Err(e) => {
                rollback(conn);
                let error = sql_error(0)(e);
                return group
                    .into_iter()
                    .map(|(_, reply)| (reply, Err(error.clone())))
                    .collect();
            }
        }
    }
    // A member failed (or SQLite ended the transaction on an error of its
    // own): nothing of the group stays; each runs again alone.
    rollback(conn);
    drop(results);
    group
        .into_iter()
        .map(|(statements, reply)| {
            let outcome = run_transaction(conn, &statements, max_result_bytes);
            (reply, outcome)
        })
        .collect()
}

/// Runs `statements` in one `BEGIN IMMEDIATE` transaction on `conn`. Shared
/// with the reference actor socket server, which serves the same file shape.
pub fn run_transaction(
    conn: &mut Connection,
    statements: &[Statement],
    max_result_bytes: u64,
) -> Result<Vec<Rows>, DbError> {
    control(conn, "BEGIN IMMEDIATE").map_err(sql_error(0))?;
    let results = match run_statements(conn, statements, max_result_bytes) {
        Ok(results) => results,
        Err(error) => {
            rollback(conn);
            return Err(error);
        }
    };
    if let Err(e) = control(conn, "COMMIT") {
        rollback(conn);
        return Err(sql_error(statements.len() as u32)(e));
    }
    Ok(results)
}

/// Runs the statements of one transaction, checking expected change counts;
/// stops at the first failure (the caller rolls back).
fn run_statements(
    conn: &Connection,
    statements: &[Statement],
    max_result_bytes: u64,
) -> Result<Vec<Rows>, DbError> {
    let mut results = Vec::with_capacity(statements.len());
    for (index, statement) in statements.iter().enumerate() {
        let index = index as u32;
        let rows = run_statement(
            conn,
            index,
            &statement.sql,
            &statement.params,
            max_result_bytes,
        )?;
        match statement.expected_changes {
            Some(expected) if expected != rows.changes => {
                return Err(DbError::ExpectedChanges {
                    statement_index: index,
                    expected,
                    actual: rows.changes,
                })
            }
            _ => results.push(rows),
        }
    }
    Ok(results)
}

fn rollback(conn: &Connection) {
    if !conn.is_autocommit() {
        if let Err(e) = control(conn, "ROLLBACK") {
            tracing::error!(error = %e, "ERR_AGENTOS_SQLITE_ROLLBACK: rollback failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(
        statements: Vec<Statement>,
    ) -> (
        TransactionJob,
        oneshot::Receiver<Result<Vec<Rows>, DbError>>,
    ) {
        let (tx, rx) = oneshot::channel();
        ((statements, tx), rx)
    }

    #[test]
    fn a_group_commits_its_members_and_isolates_a_failure() {
        let dir = tempfile::tempdir().expect("dir");
        let mut conn = open_connection(&dir.path().join("g.sqlite")).expect("open");
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY) STRICT")
            .expect("table");
        let insert = |id: i64| Statement::new("INSERT INTO t (id) VALUES (?1)", vec![id.into()]);
        let (a, a_rx) = member(vec![insert(1)]);
        let (b, b_rx) = member(vec![
            insert(2),
            Statement::new("DELETE FROM t WHERE id = 99", vec![]).expect_changes(1),
        ]);
        let (c, c_rx) = member(vec![insert(3), insert(1)]);
        let (d, d_rx) = member(vec![insert(4)]);
        for (reply, outcome) in run_group(&mut conn, vec![a, b, c, d], u64::MAX) {
            let _ = reply.send(outcome);
        }
        assert!(a_rx.blocking_recv().expect("a").is_ok());
        assert_eq!(
            b_rx.blocking_recv().expect("b").unwrap_err().code(),
            "expected_changes_mismatch"
        );
        assert!(c_rx
            .blocking_recv()
            .expect("c")
            .unwrap_err()
            .is_constraint());
        assert!(d_rx.blocking_recv().expect("d").is_ok());
        let ids: Vec<i64> = conn
            .prepare("SELECT id FROM t ORDER BY id")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(ids, [1, 4], "only the members that succeeded committed");
        assert!(conn.is_autocommit(), "the group transaction is closed");
    }

    #[test]
    fn after_a_failure_each_member_sees_the_members_before_it() {
        let dir = tempfile::tempdir().expect("dir");
        let mut conn = open_connection(&dir.path().join("g.sqlite")).expect("open");
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER) STRICT")
            .expect("table");
        let (a, a_rx) = member(vec![Statement::new(
            "INSERT INTO t (id, n) VALUES (1, 0)",
            vec![],
        )]);
        let (b, b_rx) = member(vec![
            Statement::new("UPDATE t SET n = n + 1 WHERE id = 1", vec![]).expect_changes(1),
            Statement::new("DELETE FROM t WHERE id = 99", vec![]).expect_changes(1),
        ]);
        // Written by a member after the failed one: it sees the first.
        let (c, c_rx) = member(vec![Statement::new(
            "UPDATE t SET n = n + 10 WHERE id = 1 RETURNING n",
            vec![],
        )
        .expect_changes(1)]);
        for (reply, outcome) in run_group(&mut conn, vec![a, b, c], u64::MAX) {
            let _ = reply.send(outcome);
        }
        assert!(a_rx.blocking_recv().expect("a").is_ok());
        assert!(b_rx.blocking_recv().expect("b").is_err());
        let c = c_rx.blocking_recv().expect("c").expect("c committed");
        assert_eq!(
            c[0].rows,
            vec![vec![SqlValue::Integer(10)]],
            "b left nothing"
        );
        let n: i64 = conn
            .query_row("SELECT n FROM t WHERE id = 1", [], |r| r.get(0))
            .expect("row");
        assert_eq!(n, 10);
    }
}
