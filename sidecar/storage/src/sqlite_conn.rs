//! The SQLite connection layer every file-backed part of the storage floor
//! stands on: opening a connection with the settings every backend's file
//! must have, running one statement with its parameters bound by reference
//! and its rows materialized within a result limit, mapping rusqlite's
//! errors to `DbError`, and the brief wait for a queue's next job that the
//! writer and the reader threads share. The `sqlite_file` writer, its read
//! side and checkpointer, and the reference actor socket server all use it;
//! it uses none of them.

use std::path::Path;
use std::sync::mpsc;

use agentos_schema::{DbError, Rows, SqlValue};
use rusqlite::types::{ToSql, ToSqlOutput, ValueRef};
use rusqlite::Connection;

/// Prepared statements each connection keeps.
pub(crate) const STATEMENT_CACHE: usize = 512;

/// Opens a connection with the settings every backend's file must have.
pub fn open_connection(path: &Path) -> Result<Connection, DbError> {
    // Private whatever the umask: the file is created 0600 first, and
    // SQLite gives the WAL and SHM the database file's mode.
    agentos_base::private::prepare_database_file(path)
        .map_err(|e| DbError::Connect(format!("{}: {e}", path.display())))?;
    let conn =
        Connection::open(path).map_err(|e| DbError::Connect(format!("{}: {e}", path.display())))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    stable_plans(&conn)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(sql_error(0))?;
    // WAL with synchronous=NORMAL: a commit survives a process crash (the WAL
    // is written before COMMIT returns); fsync happens at checkpoints.
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(sql_error(0))?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(sql_error(0))?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(sql_error(0))?;
    let on: i64 = conn
        .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
        .map_err(sql_error(0))?;
    if on != 1 {
        return Err(DbError::ForeignKeysDisabled);
    }
    // The WAL and SHM exist now; an older deployment may have left them wider.
    agentos_base::private::restrict_database_files(path)
        .map_err(|e| DbError::Connect(format!("{}: {e}", path.display())))?;
    Ok(conn)
}

/// Turns on SQLite's query planner stability guarantee. Without it, a
/// statement whose plan may look at a bound value (a `LIMIT ?n`, a range
/// that statistics could sharpen) is marked expired each time that value is
/// bound again, and every run of it parses and plans the SQL anew: the
/// statement cache then saves nothing for it. Every `LIMIT` here is bound,
/// and no table has statistics for the planner to use, so the guarantee
/// costs no plan and saves a prepare on each such query.
pub(crate) fn stable_plans(conn: &Connection) -> Result<(), DbError> {
    use rusqlite::config::DbConfig;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map(drop)
        .map_err(sql_error(0))
}

/// How long a thread serving a queue (the writer, a reader thread) keeps
/// looking for the next job before it sleeps.
/// A caller that awaits each transaction sends the next one a few
/// microseconds after its answer; catching it awake saves a thread wake-up
/// (tens of microseconds on a virtual machine) per transaction. 50 µs
/// catches those as well as 200 µs did (host turns per second, durable
/// events end to end), while after each transaction of a lone session's
/// turn (they come a few hundred microseconds apart) it burns a quarter of
/// what 200 µs did.
pub(crate) const STAY_AWAKE: std::time::Duration = std::time::Duration::from_micros(50);

/// Whether a thread serving a queue stays awake for its next job. Staying
/// awake costs the core it spins on, so it is done only while it pays: a
/// wait that ran out turns it off, and it turns back on when the next job
/// arrives within [`STAY_AWAKE`] of the queue going empty, so a steady
/// stream of awaited transactions is caught awake while a queue fed now and
/// then (one session's turn, an idle VM) sleeps at once and costs nothing.
#[derive(Debug)]
pub(crate) struct Awake {
    spin: bool,
    /// When the queue was last found empty, while the thread sleeps.
    idle_since: Option<std::time::Instant>,
}

impl Default for Awake {
    fn default() -> Self {
        Awake {
            spin: true,
            idle_since: None,
        }
    }
}

impl Awake {
    /// The next job if one is queued or, while staying awake pays, arrives
    /// within [`STAY_AWAKE`], yielding the core meanwhile so the caller can
    /// run. `None` means the caller should block (or the queue closed: its
    /// blocking receive says so); it then reports the job it got with
    /// [`Awake::woke`].
    pub(crate) fn next_soon<T>(&mut self, jobs: &mpsc::Receiver<T>) -> Option<T> {
        let start = std::time::Instant::now();
        loop {
            match jobs.try_recv() {
                Ok(job) => return Some(job),
                Err(mpsc::TryRecvError::Disconnected) => return None,
                Err(mpsc::TryRecvError::Empty) => {}
            }
            if !self.spin || start.elapsed() >= STAY_AWAKE {
                self.spin = false;
                self.idle_since = Some(start);
                return None;
            }
            std::thread::yield_now();
        }
    }

    /// A blocking wait ended with a job: staying awake would have caught it
    /// if it came soon enough.
    pub(crate) fn woke(&mut self) {
        if let Some(since) = self.idle_since.take() {
            self.spin = since.elapsed() < STAY_AWAKE;
        }
    }
}

/// Runs a transaction-control statement (`BEGIN IMMEDIATE`, `COMMIT`, a
/// savepoint) from the connection's statement cache: each transaction runs
/// two to four of them, so they are parsed once, not every time.
pub(crate) fn control(conn: &Connection, sql: &'static str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// Runs one statement, materializing its rows within the result limit.
pub fn run_statement<P: BindValue>(
    conn: &Connection,
    index: u32,
    sql: &str,
    params: &[P],
    max_result_bytes: u64,
) -> Result<Rows, DbError> {
    let mut stmt = conn.prepare_cached(sql).map_err(sql_error(index))?;
    for (i, param) in params.iter().enumerate() {
        stmt.raw_bind_parameter(i + 1, Param(param.value_ref()))
            .map_err(sql_error(index))?;
    }
    let before = conn.total_changes();
    let columns: Vec<String> = stmt
        .column_names()
        .iter()
        .map(|c| (*c).to_owned())
        .collect();
    let width = columns.len();
    let mut out = Vec::new();
    let mut bytes: u64 = 0;
    {
        let mut rows = stmt.raw_query();
        while let Some(row) = rows.next().map_err(sql_error(index))? {
            let mut values = Vec::with_capacity(width);
            for c in 0..width {
                let value = from_value_ref(row.get_ref(c).map_err(sql_error(index))?);
                bytes += value.approx_bytes() as u64;
                values.push(value);
            }
            if bytes > max_result_bytes {
                return Err(DbError::ResultLimit {
                    limit: max_result_bytes,
                });
            }
            out.push(values);
        }
    }
    let changes = conn.total_changes().saturating_sub(before);
    Ok(Rows {
        columns,
        rows: out,
        changes,
        last_insert_rowid: Some(conn.last_insert_rowid()),
    })
}

/// A parameter value SQLite can bind by reference. Implemented for the
/// handle's values and for the actor socket's wire values, so the reference
/// server binds what it decoded without copying texts and blobs first.
pub trait BindValue {
    fn value_ref(&self) -> ValueRef<'_>;
}

impl BindValue for SqlValue {
    fn value_ref(&self) -> ValueRef<'_> {
        match self {
            SqlValue::Null => ValueRef::Null,
            SqlValue::Integer(i) => ValueRef::Integer(*i),
            SqlValue::Real(f) => ValueRef::Real(*f),
            SqlValue::Text(s) => ValueRef::Text(s.as_bytes()),
            SqlValue::Blob(b) => ValueRef::Blob(b),
        }
    }
}

impl BindValue for agentos_protocol::ars::SqlValue {
    fn value_ref(&self) -> ValueRef<'_> {
        use agentos_protocol::ars::SqlValue as Wire;
        match self {
            Wire::SqlNull => ValueRef::Null,
            Wire::SqlInteger(i) => ValueRef::Integer(*i),
            Wire::SqlReal(f) => ValueRef::Real(*f),
            Wire::SqlText(s) => ValueRef::Text(s.as_bytes()),
            Wire::SqlBlob(b) => ValueRef::Blob(b),
        }
    }
}

/// Binds a parameter by reference: large texts and blobs are never copied.
struct Param<'a>(ValueRef<'a>);

impl ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(self.0))
    }
}

pub fn from_value_ref(v: ValueRef<'_>) -> SqlValue {
    match v {
        ValueRef::Null => SqlValue::Null,
        ValueRef::Integer(i) => SqlValue::Integer(i),
        ValueRef::Real(f) => SqlValue::Real(f),
        // Valid UTF-8 (the normal case) takes the fast check; anything else
        // is repaired rather than rejected.
        ValueRef::Text(t) => SqlValue::Text(match std::str::from_utf8(t) {
            Ok(text) => text.to_owned(),
            Err(_) => String::from_utf8_lossy(t).into_owned(),
        }),
        ValueRef::Blob(b) => SqlValue::Blob(b.to_vec()),
    }
}

/// Maps a rusqlite error to `DbError::Sql` with SQLite's extended code.
pub fn sql_error(index: u32) -> impl Fn(rusqlite::Error) -> DbError {
    move |e| {
        let code = match &e {
            rusqlite::Error::SqliteFailure(f, _) => f.extended_code,
            _ => -1,
        };
        let message = match e {
            // As the reference runtime words it.
            rusqlite::Error::MultipleStatement => {
                "sqlite execute only supports a single statement".to_owned()
            }
            other => other.to_string(),
        };
        DbError::Sql {
            code,
            statement_index: index,
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::StatementStatus;

    /// Runs `SELECT … LIMIT ?1` with two limits on `conn` and answers how
    /// many times SQLite prepared it again.
    fn reprepares(conn: &Connection) -> i32 {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS t (x INTEGER); INSERT INTO t VALUES (1), (2), (3);",
        )
        .expect("a table");
        let sql = "SELECT x FROM t ORDER BY x LIMIT ?1";
        for limit in [1, 2] {
            let rows =
                run_statement(conn, 0, sql, &[SqlValue::Integer(limit)], u64::MAX).expect("read");
            assert_eq!(rows.rows.len(), limit as usize);
        }
        conn.prepare_cached(sql)
            .expect("cached")
            .get_status(StatementStatus::RePrepare)
    }

    #[test]
    fn a_bound_limit_does_not_prepare_its_statement_again() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let plain = Connection::open(dir.path().join("plain.db")).expect("opens");
        assert!(
            reprepares(&plain) > 0,
            "without the guarantee SQLite prepares it again when the limit changes"
        );
        let ours = open_connection(&dir.path().join("ours.db")).expect("opens");
        assert_eq!(reprepares(&ours), 0);
    }
}
