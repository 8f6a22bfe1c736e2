//! Test support: the same store tests run on both backends.
//!
//! [`all_backends`] yields a fresh database per backend: a SQLite file in a
//! temp dir, and the same kind of file served by an in-process reference
//! Actor Runtime Socket server and reached through the actor_uds client. The
//! guards (temp dir, server) live as long as the [`TestDb`].
//! [`CountingDatabase`] wraps any handle and records what it was asked to do,
//! so tests can pin statement counts and SQL shapes. [`OddRows`] answers
//! every query with a row of the wrong shape.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agentos_schema::{Database, DatabaseKind, DbError, Rows, SharedDatabase, SqlValue, Statement};
use async_trait::async_trait;

use super::actor_uds;
use super::ars_server::{self, ArsServerHandle, ArsServerOptions};
use super::sqlite_file::SqliteFileDatabase;
use crate::SqliteLimits;

/// One backend under test. Keep it alive for as long as `db` is used.
pub struct TestDb {
    pub name: &'static str,
    pub db: SharedDatabase,
    /// The SQLite file behind the handle (served by the server for actor_uds).
    pub file: PathBuf,
    server: Option<ArsServerHandle>,
    _dir: tempfile::TempDir,
}

impl TestDb {
    /// The reference server's socket, for actor_uds.
    pub fn socket_path(&self) -> Option<PathBuf> {
        self.server.as_ref().map(|s| s.socket_path().to_owned())
    }

    /// Stops the server (if any), closing its connections.
    pub async fn shutdown(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown().await;
        }
    }
}

fn temp_dir() -> tempfile::TempDir {
    // Unix socket paths are short (108 bytes); keep the dir near the root.
    match tempfile::Builder::new().prefix("agentos-test").tempdir() {
        Ok(dir) => dir,
        Err(e) => panic!("cannot create a temp dir: {e}"),
    }
}

/// A fresh `sqlite_file` database.
pub async fn sqlite_file() -> TestDb {
    let dir = temp_dir();
    let file = dir.path().join("vm.sqlite");
    let db = match SqliteFileDatabase::open(&file, &SqliteLimits::default()) {
        Ok(db) => db,
        Err(e) => panic!("cannot open the sqlite_file test database: {e}"),
    };
    TestDb {
        name: "sqlite_file",
        db: Arc::new(db),
        file,
        server: None,
        _dir: dir,
    }
}

/// A fresh `actor_uds` database behind an in-process reference server.
pub async fn actor_uds() -> TestDb {
    actor_uds_with(ArsServerOptions::default(), SqliteLimits::default()).await
}

/// Like [`actor_uds`], with chosen server options and client limits.
pub async fn actor_uds_with(options: ArsServerOptions, limits: SqliteLimits) -> TestDb {
    let dir = temp_dir();
    let file = dir.path().join("vm.sqlite");
    let socket = dir.path().join("ars").join("db.sock");
    let server = match ars_server::bind(&file, &socket, options).await {
        Ok(server) => server,
        Err(e) => panic!("cannot start the reference server: {e}"),
    };
    let db = match actor_uds::connect(&socket, &limits).await {
        Ok(db) => db,
        Err(e) => panic!("cannot connect to the reference server: {e}"),
    };
    TestDb {
        name: "actor_uds",
        db: Arc::new(db),
        file,
        server: Some(server),
        _dir: dir,
    }
}

/// One fresh database per backend.
pub async fn all_backends() -> Vec<TestDb> {
    vec![sqlite_file().await, actor_uds().await]
}

/// What a [`CountingDatabase`] has been asked to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub queries: u64,
    pub transactions: u64,
    /// Statements inside transactions.
    pub statements: u64,
    /// Every SQL text, in order, queries and transaction statements alike.
    pub sql: Vec<String>,
}

impl Counts {
    /// True when any recorded SQL contains `needle` (case-insensitive).
    pub fn any_sql_contains(&self, needle: &str) -> bool {
        let needle = needle.to_ascii_lowercase();
        self.sql
            .iter()
            .any(|s| s.to_ascii_lowercase().contains(&needle))
    }
}

/// A handle that forwards to another and counts what passes through.
pub struct CountingDatabase {
    inner: SharedDatabase,
    counts: Mutex<Counts>,
}

impl CountingDatabase {
    pub fn new(inner: SharedDatabase) -> Arc<CountingDatabase> {
        Arc::new(CountingDatabase {
            inner,
            counts: Mutex::new(Counts::default()),
        })
    }

    pub fn counts(&self) -> Counts {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Returns the counts so far and starts again from zero.
    pub fn take(&self) -> Counts {
        self.counts
            .lock()
            .map(|mut c| std::mem::take(&mut *c))
            .unwrap_or_default()
    }
}

#[async_trait]
impl Database for CountingDatabase {
    fn kind(&self) -> DatabaseKind {
        self.inner.kind()
    }

    async fn close(&self) {
        self.inner.close().await
    }

    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Rows, DbError> {
        if let Ok(mut c) = self.counts.lock() {
            c.queries += 1;
            c.sql.push(sql.to_owned());
        }
        self.inner.query(sql, params).await
    }

    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Rows>, DbError> {
        if let Ok(mut c) = self.counts.lock() {
            c.transactions += 1;
            c.statements += statements.len() as u64;
            c.sql.extend(statements.iter().map(|s| s.sql.to_string()));
        }
        self.inner.transaction(statements).await
    }
}

/// A handle that forwards to another and fails one chosen transaction with
/// an I/O error, for tests of what a failed commit leaves behind.
pub struct FaultyDatabase {
    inner: SharedDatabase,
    /// Transactions still to pass before the one that fails; `None` when no
    /// failure is armed.
    countdown: Mutex<Option<u64>>,
}

impl FaultyDatabase {
    pub fn new(inner: SharedDatabase) -> Arc<FaultyDatabase> {
        Arc::new(FaultyDatabase {
            inner,
            countdown: Mutex::new(None),
        })
    }

    /// The `n`th transaction from now (1 = the next one) fails; the others
    /// pass.
    pub fn fail_nth_transaction(&self, n: u64) {
        if let Ok(mut c) = self.countdown.lock() {
            *c = Some(n.saturating_sub(1));
        }
    }

    /// Whether the armed failure has happened.
    pub fn fired(&self) -> bool {
        self.countdown.lock().map(|c| c.is_none()).unwrap_or(false)
    }

    fn fail_this_one(&self) -> bool {
        let Ok(mut c) = self.countdown.lock() else {
            return false;
        };
        match *c {
            Some(0) => {
                *c = None;
                true
            }
            Some(n) => {
                *c = Some(n - 1);
                false
            }
            None => false,
        }
    }
}

#[async_trait]
impl Database for FaultyDatabase {
    fn kind(&self) -> DatabaseKind {
        self.inner.kind()
    }

    async fn close(&self) {
        self.inner.close().await
    }

    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Rows, DbError> {
        self.inner.query(sql, params).await
    }

    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Rows>, DbError> {
        if self.fail_this_one() {
            return Err(DbError::Sql {
                code: 10,
                statement_index: 0,
                message: "disk I/O error (injected)".into(),
            });
        }
        self.inner.transaction(statements).await
    }
}

/// Formatted log lines collected in memory, so tests can count warnings:
/// install it with `tracing::subscriber::set_default` on a `fmt` subscriber
/// built `with_writer(captured.clone())`.
#[derive(Clone, Default)]
pub struct CapturedLog(Arc<std::sync::Mutex<Vec<u8>>>);

impl CapturedLog {
    /// Lines that contain every one of `needles`.
    pub fn count(&self, needles: &[&str]) -> usize {
        let bytes = match self.0.lock() {
            Ok(bytes) => bytes.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| needles.iter().all(|n| line.contains(n)))
            .count()
    }
}

impl std::io::Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.0.lock() {
            Ok(mut bytes) => bytes.extend_from_slice(buf),
            Err(poisoned) => poisoned.into_inner().extend_from_slice(buf),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CapturedLog {
    type Writer = CapturedLog;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// A database whose every answer is one row of one integer, as a
/// misbehaving socket server might send: stores must answer `corrupt_row`.
pub struct OddRows;

#[async_trait]
impl Database for OddRows {
    fn kind(&self) -> DatabaseKind {
        DatabaseKind::ActorUds
    }

    async fn query(&self, _sql: &str, _params: Vec<SqlValue>) -> Result<Rows, DbError> {
        Ok(Rows {
            rows: vec![vec![SqlValue::Integer(1)]],
            ..Rows::default()
        })
    }

    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Rows>, DbError> {
        let mut results = Vec::new();
        for _ in statements {
            results.push(self.query("", Vec::new()).await?);
        }
        Ok(results)
    }

    async fn close(&self) {}
}
