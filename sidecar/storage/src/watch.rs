//! Write generations of chosen tables: a handle over the VM's one database
//! that counts, for each watched table, the write statements naming it as
//! their target, so that a service may keep what it read from those tables
//! in memory and tell, without a read, whether it may have changed since.
//!
//! Every table's rows change only through a statement that names it as its
//! target: the schema has no triggers and no foreign-key actions, so the
//! target named at a write statement's head (`INSERT [OR …] INTO t`,
//! `REPLACE INTO t`, `UPDATE [OR …] t`, `DELETE FROM t`) is the only table
//! it writes. A statement this cannot read so (a `WITH` ahead of the write,
//! DDL, a quoted or qualified name) counts as a write to every watched
//! table, so a miss costs a read again and never a stale answer. Statements
//! that cannot write (`SELECT`, `VALUES`, transaction control) are passed
//! through without a look past their first word.
//!
//! A generation moves before a write to its table is handed on and again
//! after the write has finished (committed or not), so something read and
//! kept under a generation that is still current was read after every
//! write answered so far. The rare write to a watched table runs to its end
//! in a task of its own: a caller that stops waiting for it cannot leave
//! the write to commit after the last count.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agentos_schema::{Database, DatabaseKind, DbError, Rows, SharedDatabase, SqlValue, Statement};
use async_trait::async_trait;

/// The most tables one handle watches (one bit each in a write's mask).
pub const MAX_WATCHED: usize = 64;

/// The write generations of the watched tables.
pub struct TableVersions {
    tables: Vec<&'static str>,
    counts: Vec<AtomicU64>,
}

impl TableVersions {
    /// The sum of the generations of `tables` (each one watched): one
    /// number that moves whenever any of them is written, since each only
    /// grows. A table not watched is a caller's mistake; it adds nothing,
    /// and debug builds stop on it.
    pub fn stamp(&self, tables: &[&str]) -> u64 {
        tables
            .iter()
            .map(|name| match self.tables.iter().position(|t| t == name) {
                Some(i) => self.counts[i].load(Ordering::SeqCst),
                None => {
                    debug_assert!(false, "{name} is not watched");
                    0
                }
            })
            .fold(0u64, u64::wrapping_add)
    }

    fn bump(&self, mask: u64) {
        for (i, count) in self.counts.iter().enumerate() {
            if mask & (1 << i) != 0 {
                count.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// The watched tables `sql` may write, one bit each.
    fn mask(&self, sql: &str) -> u64 {
        match target(sql) {
            Target::Reads => 0,
            Target::Table(name) => self
                .tables
                .iter()
                .position(|t| *t == name)
                .map_or(0, |i| 1 << i),
            Target::Unknown => self.all(),
        }
    }

    fn all(&self) -> u64 {
        if self.tables.len() == MAX_WATCHED {
            u64::MAX
        } else {
            (1u64 << self.tables.len()) - 1
        }
    }
}

/// What one statement writes, read off its head.
#[derive(Debug, PartialEq, Eq)]
enum Target<'a> {
    /// Nothing: a query, or transaction control.
    Reads,
    /// This table alone.
    Table(&'a str),
    /// Anything (not a head this reads): counted as every table.
    Unknown,
}

fn target(sql: &str) -> Target<'_> {
    let mut words = Words(sql);
    let Some(first) = words.next() else {
        return Target::Unknown;
    };
    let is = |word: &str, keyword: &str| word.eq_ignore_ascii_case(keyword);
    if [
        "SELECT",
        "VALUES",
        "BEGIN",
        "COMMIT",
        "END",
        "SAVEPOINT",
        "RELEASE",
        "ROLLBACK",
    ]
    .iter()
    .any(|k| is(first, k))
    {
        return Target::Reads;
    }
    if is(first, "INSERT") || is(first, "REPLACE") || is(first, "UPDATE") {
        let mut next = words.clone();
        // `OR <conflict>` may follow the verb.
        if next.next().is_some_and(|w| is(w, "OR")) {
            words.next();
            words.next();
        }
        if is(first, "UPDATE") {
            return table(&mut words);
        }
        return match words.next() {
            Some(w) if is(w, "INTO") => table(&mut words),
            _ => Target::Unknown,
        };
    }
    if is(first, "DELETE") {
        return match words.next() {
            Some(w) if is(w, "FROM") => table(&mut words),
            _ => Target::Unknown,
        };
    }
    Target::Unknown
}

/// The next word as a plain table name, or `Unknown`.
fn table<'a>(words: &mut Words<'a>) -> Target<'a> {
    match words.next() {
        Some(name) if name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => {
            Target::Table(name)
        }
        _ => Target::Unknown,
    }
}

/// The words of a statement's head: runs of anything but whitespace and
/// `(`, which ends a table name as a space does (`INSERT INTO t(a, b)`).
#[derive(Clone)]
struct Words<'a>(&'a str);

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = self.0.trim_start();
        let end = rest
            .find(|c: char| c.is_whitespace() || c == '(')
            .unwrap_or(rest.len());
        if end == 0 {
            return None;
        }
        self.0 = &rest[end..];
        Some(&rest[..end])
    }
}

/// The database handle that counts writes to the watched tables; every
/// call goes on to the handle it wraps.
pub struct Watched {
    inner: SharedDatabase,
    versions: Arc<TableVersions>,
}

impl Watched {
    /// Watches `tables` (at most [`MAX_WATCHED`], a mistake otherwise).
    pub fn new(inner: SharedDatabase, tables: &[&'static str]) -> Result<Watched, DbError> {
        if tables.len() > MAX_WATCHED {
            return Err(DbError::Protocol(format!(
                "{} tables watched, at most {MAX_WATCHED}",
                tables.len()
            )));
        }
        Ok(Watched {
            inner,
            versions: Arc::new(TableVersions {
                tables: tables.to_vec(),
                counts: tables.iter().map(|_| AtomicU64::new(0)).collect(),
            }),
        })
    }

    pub fn versions(&self) -> Arc<TableVersions> {
        self.versions.clone()
    }

    /// Runs a write to watched tables to its end whatever its caller does,
    /// counting it before and after.
    async fn counted<T, F>(&self, mask: u64, write: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, DbError>> + Send + 'static,
    {
        self.versions.bump(mask);
        let versions = self.versions.clone();
        let task = tokio::spawn(async move {
            let outcome = write.await;
            versions.bump(mask);
            outcome
        });
        task.await.unwrap_or_else(|e| {
            // The task panicked (or the runtime is shutting down): its
            // write may have committed or not.
            self.versions.bump(mask);
            Err(DbError::CommitOutcomeUnknown(e.to_string()))
        })
    }
}

#[async_trait]
impl Database for Watched {
    fn kind(&self) -> DatabaseKind {
        self.inner.kind()
    }

    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Rows, DbError> {
        let mask = self.versions.mask(sql);
        if mask == 0 {
            return self.inner.query(sql, params).await;
        }
        let (inner, sql) = (self.inner.clone(), sql.to_owned());
        self.counted(mask, async move { inner.query(&sql, params).await })
            .await
    }

    async fn read(&self, sql: &str, params: Vec<SqlValue>) -> Result<Rows, DbError> {
        self.inner.read(sql, params).await
    }

    async fn read_blob(
        &self,
        table: &'static str,
        column: &'static str,
        rowid: i64,
        offset: u64,
        len: u64,
    ) -> Result<Option<Vec<u8>>, DbError> {
        self.inner
            .read_blob(table, column, rowid, offset, len)
            .await
    }

    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Rows>, DbError> {
        let mask = statements
            .iter()
            .fold(0, |mask, s| mask | self.versions.mask(&s.sql));
        if mask == 0 {
            return self.inner.transaction(statements).await;
        }
        let inner = self.inner.clone();
        self.counted(mask, async move { inner.transaction(statements).await })
            .await
    }

    async fn close(&self) {
        self.inner.close().await
    }
}

/// Values read from watched tables, each kept with the stamp of those
/// tables taken before it was read, and answered again while the stamp is
/// unchanged. Bounded in bytes (as `weigh` counts a value, plus its key and
/// a fixed overhead): a value that would pass the bound first drops every
/// entry a write has made stale, then, if that is not enough, all of them.
pub struct Memo<K, V> {
    versions: Arc<TableVersions>,
    tables: &'static [&'static str],
    weigh: fn(&K, &V) -> usize,
    max_bytes: usize,
    kept: Mutex<Kept<K, V>>,
}

struct Kept<K, V> {
    entries: HashMap<K, (u64, V, usize)>,
    bytes: usize,
}

/// What one entry costs beyond what `weigh` counts: the map's slot, the
/// stamp and the allocations' headers.
const ENTRY_OVERHEAD: usize = 64;

impl<K: Hash + Eq + Clone, V: Clone> Memo<K, V> {
    pub fn new(
        versions: Arc<TableVersions>,
        tables: &'static [&'static str],
        max_bytes: usize,
        weigh: fn(&K, &V) -> usize,
    ) -> Memo<K, V> {
        Memo {
            versions,
            tables,
            weigh,
            max_bytes,
            kept: Mutex::new(Kept {
                entries: HashMap::new(),
                bytes: 0,
            }),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept<K, V>> {
        // The map stays consistent whatever panicked while holding it.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value kept for `key` if nothing it was read from was written
    /// since; otherwise `read`'s, kept for next time.
    pub async fn get_or_read<E, F, Fut>(&self, key: &K, read: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<V, E>>,
    {
        // Taken before the read: a write that lands during it moves the
        // stamp, and what the read saw is not answered again.
        let stamp = self.versions.stamp(self.tables);
        if let Some((kept_at, value, _)) = self.kept().entries.get(key) {
            if *kept_at == stamp {
                return Ok(value.clone());
            }
        }
        let value = read().await?;
        self.keep(key.clone(), stamp, value.clone());
        Ok(value)
    }

    fn keep(&self, key: K, stamp: u64, value: V) {
        let cost = (self.weigh)(&key, &value).saturating_add(ENTRY_OVERHEAD);
        if cost > self.max_bytes {
            return;
        }
        let current = self.versions.stamp(self.tables);
        let mut kept = self.kept();
        if let Some((_, _, old)) = kept.entries.remove(&key) {
            kept.bytes -= old;
        }
        if kept.bytes + cost > self.max_bytes {
            kept.entries.retain(|_, (at, _, _)| *at == current);
            kept.bytes = kept.entries.values().map(|(_, _, cost)| cost).sum();
        }
        if kept.bytes + cost > self.max_bytes {
            kept.entries.clear();
            kept.bytes = 0;
        }
        kept.bytes += cost;
        kept.entries.insert(key, (stamp, value, cost));
    }

    /// Bytes kept now, as the bound counts them.
    pub fn bytes(&self) -> usize {
        self.kept().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_names_its_target_at_its_head() {
        let cases = [
            ("SELECT * FROM t", Target::Reads),
            ("  select 1", Target::Reads),
            ("VALUES (1)", Target::Reads),
            ("BEGIN IMMEDIATE", Target::Reads),
            ("RELEASE agentos_group_member", Target::Reads),
            ("INSERT INTO t (a) VALUES (1)", Target::Table("t")),
            ("INSERT INTO t(a) VALUES (1)", Target::Table("t")),
            (
                "insert or ignore into t_2 (a) values (1)",
                Target::Table("t_2"),
            ),
            ("REPLACE INTO t VALUES (1)", Target::Table("t")),
            ("\n  UPDATE t AS s SET a = 1", Target::Table("t")),
            ("UPDATE OR ROLLBACK t SET a = 1", Target::Table("t")),
            ("DELETE FROM t WHERE a = 1", Target::Table("t")),
            (
                "WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x",
                Target::Unknown,
            ),
            ("INSERT INTO main.t VALUES (1)", Target::Unknown),
            ("INSERT INTO \"t\" VALUES (1)", Target::Unknown),
            ("DELETE t", Target::Unknown),
            ("CREATE TABLE t (a)", Target::Unknown),
            ("DROP TABLE t", Target::Unknown),
            ("", Target::Unknown),
        ];
        for (sql, expected) in cases {
            assert_eq!(target(sql), expected, "{sql:?}");
        }
    }

    fn watched(tables: &[&'static str]) -> (Watched, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = crate::sqlite_file::SqliteFileDatabase::open(
            &dir.path().join("watch.db"),
            &crate::SqliteLimits::default(),
        )
        .expect("the database opens");
        (
            Watched::new(Arc::new(db), tables).expect("few enough tables"),
            dir,
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_move_their_tables_generations_and_reads_move_none() {
        let (db, _dir) = watched(&["a", "b"]);
        let versions = db.versions();
        db.transaction(vec![
            Statement::new("CREATE TABLE a (x INTEGER) STRICT", vec![]),
            Statement::new("CREATE TABLE b (x INTEGER) STRICT", vec![]),
            Statement::new("CREATE TABLE c (x INTEGER) STRICT", vec![]),
        ])
        .await
        .expect("created");
        let (a, b) = (versions.stamp(&["a"]), versions.stamp(&["b"]));
        assert!(a > 0 && b > 0, "DDL counts as a write to every table");

        db.query("INSERT INTO c (x) VALUES (1)", vec![])
            .await
            .expect("inserted");
        db.query("SELECT x FROM a", vec![]).await.expect("read");
        db.read("SELECT x FROM b", vec![]).await.expect("read");
        assert_eq!(versions.stamp(&["a"]), a, "a table not written");
        assert_eq!(versions.stamp(&["b"]), b);

        db.query("INSERT INTO a (x) VALUES (1)", vec![])
            .await
            .expect("inserted");
        assert!(versions.stamp(&["a"]) > a);
        assert_eq!(versions.stamp(&["b"]), b);
        let a = versions.stamp(&["a"]);

        db.transaction(vec![
            Statement::new("SELECT x FROM a", vec![]),
            Statement::new("UPDATE b SET x = 2", vec![]),
        ])
        .await
        .expect("updated");
        assert_eq!(versions.stamp(&["a"]), a);
        assert!(versions.stamp(&["b"]) > b);

        // A write that fails still counts: it may have been the one that
        // changed something before it failed.
        let both = versions.stamp(&["a", "b"]);
        let failed = db
            .transaction(vec![
                Statement::new("DELETE FROM a", vec![]),
                Statement::new("UPDATE b SET x = 3", vec![]).expect_changes(5),
            ])
            .await;
        assert!(matches!(failed, Err(DbError::ExpectedChanges { .. })));
        assert!(versions.stamp(&["a", "b"]) > both);
        let rows = db
            .query("SELECT count(*) FROM a", vec![])
            .await
            .expect("read");
        assert_eq!(rows.rows[0][0], SqlValue::Integer(1), "rolled back");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_its_caller_stopped_waiting_for_is_still_counted_after_it_ends() {
        let (db, _dir) = watched(&["a"]);
        let db = Arc::new(db);
        db.query("CREATE TABLE a (x INTEGER) STRICT", vec![])
            .await
            .expect("created");
        let versions = db.versions();
        let before = versions.stamp(&["a"]);
        let write = {
            let db = db.clone();
            tokio::spawn(async move {
                db.transaction(vec![Statement::new("INSERT INTO a (x) VALUES (1)", vec![])])
                    .await
            })
        };
        write.abort();
        let _ = write.await;
        // Whether the abort came before the write was handed on or after,
        // once the row is there both counts have been made.
        let mut waited = 0;
        loop {
            let rows = db
                .read("SELECT count(*) FROM a", vec![])
                .await
                .expect("read");
            let committed = rows.rows[0][0] == SqlValue::Integer(1);
            let counted = versions.stamp(&["a"]);
            if committed {
                // The count after the commit may trail it by the task's
                // last step: wait for it, boundedly.
                if counted >= before + 2 {
                    break;
                }
            } else if counted == before {
                // Aborted before it was handed on: nothing was written.
                break;
            }
            waited += 1;
            assert!(waited < 1000, "the write was never counted after it ended");
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    fn versions(tables: &[&'static str]) -> Arc<TableVersions> {
        Arc::new(TableVersions {
            tables: tables.to_vec(),
            counts: tables.iter().map(|_| AtomicU64::new(0)).collect(),
        })
    }

    #[allow(clippy::ptr_arg)] // the memo's keys and values are `String`s
    fn weigh(key: &String, value: &String) -> usize {
        key.len() + value.len()
    }

    /// Reads through `memo`, counting the reads that really ran.
    async fn read(memo: &Memo<String, String>, key: &str, value: &str, reads: &mut u32) -> String {
        memo.get_or_read(&key.to_owned(), || async {
            *reads += 1;
            Ok::<_, ()>(value.to_owned())
        })
        .await
        .expect("read")
    }

    #[tokio::test]
    async fn a_kept_value_is_answered_until_its_tables_are_written() {
        let versions = versions(&["a", "b", "c"]);
        let memo = Memo::new(versions.clone(), &["a", "b"], 1 << 20, weigh);
        let mut reads = 0;
        assert_eq!(read(&memo, "k", "one", &mut reads).await, "one");
        assert_eq!(read(&memo, "k", "two", &mut reads).await, "one");
        assert_eq!(reads, 1, "answered from memory");

        versions.bump(0b100);
        assert_eq!(read(&memo, "k", "two", &mut reads).await, "one");
        assert_eq!(reads, 1, "a table it was not read from");

        versions.bump(0b010);
        assert_eq!(read(&memo, "k", "two", &mut reads).await, "two");
        assert_eq!(reads, 2, "read again after its table was written");

        // A failed read keeps nothing.
        let failed = memo
            .get_or_read(&"e".to_owned(), || async { Err::<String, _>("down") })
            .await;
        assert_eq!(failed, Err("down"));
        assert_eq!(read(&memo, "e", "up", &mut reads).await, "up");
    }

    #[tokio::test]
    async fn what_is_kept_stays_within_its_bytes() {
        let versions = versions(&["a"]);
        let entry = ENTRY_OVERHEAD + 2 + 100;
        let memo = Memo::new(versions.clone(), &["a"], entry * 4, weigh);
        let mut reads = 0;
        let value = "v".repeat(100);
        for i in 0..4 {
            read(&memo, &format!("k{i}"), &value, &mut reads).await;
        }
        assert_eq!(memo.bytes(), entry * 4);
        // Full: a fifth entry drops the stale ones first (none are), then all.
        read(&memo, "k4", &value, &mut reads).await;
        assert_eq!(memo.bytes(), entry);
        for i in 0..3 {
            read(&memo, &format!("k{i}"), &value, &mut reads).await;
        }
        // Stale after a write: those go first, and the fresh one stays.
        versions.bump(1);
        read(&memo, "k4", &value, &mut reads).await;
        assert_eq!(memo.bytes(), entry * 4, "re-read under the new stamp");
        let before = reads;
        read(&memo, "k5", &value, &mut reads).await;
        assert!(memo.bytes() <= entry * 4);
        read(&memo, "k4", &value, &mut reads).await;
        assert_eq!(reads, before + 1, "the fresh entry outlived the stale ones");
        // A value larger than the whole bound is answered, never kept.
        let huge = "h".repeat(entry * 4);
        read(&memo, "big", &huge, &mut reads).await;
        read(&memo, "big", &huge, &mut reads).await;
        assert_eq!(reads, before + 3);
        assert!(memo.bytes() <= entry * 4);
    }

    #[test]
    fn too_many_tables_are_refused() {
        let names: Vec<&'static str> = (0..=MAX_WATCHED)
            .map(|i| &*Box::leak(format!("t{i}").into_boxed_str()))
            .collect();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = crate::sqlite_file::SqliteFileDatabase::open(
            &dir.path().join("watch.db"),
            &crate::SqliteLimits::default(),
        )
        .expect("the database opens");
        assert!(Watched::new(Arc::new(db), &names).is_err());
    }
}
