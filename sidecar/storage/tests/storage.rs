//! Storage and migration behaviour, asserted on both backends: the local
//! SQLite file and the actor socket through the reference server.

use agentos_schema::{
    migrate, Database, DbError, Migration, MigrationError, Owner, SqlValue, Statement,
};
use agentos_storage::testing::{all_backends, CountingDatabase};

const TABLE: &str =
    "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body TEXT NOT NULL) STRICT";

async fn count(db: &dyn agentos_schema::Database, table: &str) -> i64 {
    db.query(&format!("SELECT COUNT(*) FROM {table}"), vec![])
        .await
        .expect("count")
        .scalar_i64()
        .expect("integer")
}

/// The same through the read path.
async fn read_count(db: &dyn agentos_schema::Database, table: &str) -> i64 {
    db.read(&format!("SELECT COUNT(*) FROM {table}"), vec![])
        .await
        .expect("read")
        .scalar_i64()
        .expect("integer")
}

#[tokio::test]
async fn commit_and_rollback() {
    for b in all_backends().await {
        let db = b.db.as_ref();
        db.query(TABLE, vec![]).await.expect("create");
        let results = db
            .transaction(vec![
                Statement::new(
                    "INSERT INTO t (id, body) VALUES (?1, ?2)",
                    vec![1.into(), "a".into()],
                ),
                Statement::new(
                    "INSERT INTO t (id, body) VALUES (?1, ?2)",
                    vec![2.into(), "b".into()],
                ),
                Statement::new("SELECT body FROM t ORDER BY id", vec![]),
            ])
            .await
            .expect("commit");
        assert_eq!(results.len(), 3, "{}", b.name);
        assert_eq!(results[0].changes, 1, "{}", b.name);
        assert_eq!(results[2].rows.len(), 2, "{}", b.name);
        // A failing statement rolls back the ones before it.
        let err = db
            .transaction(vec![
                Statement::new("INSERT INTO t (id, body) VALUES (3, 'c')", vec![]),
                Statement::new("INSERT INTO t (id, body) VALUES (1, 'dup')", vec![]),
            ])
            .await
            .expect_err("duplicate key");
        assert!(err.is_constraint(), "{}: {err:?}", b.name);
        assert_eq!(err.statement_index(), Some(1), "{}", b.name);
        assert_eq!(count(db, "t").await, 2, "{}", b.name);
        // The handle is still usable afterwards.
        db.transaction(vec![Statement::new(
            "INSERT INTO t (id, body) VALUES (3, 'c')",
            vec![],
        )])
        .await
        .expect("later transaction");
        assert_eq!(count(db, "t").await, 3, "{}", b.name);
        b.shutdown().await;
    }
}

#[tokio::test]
async fn expected_change_mismatch_rolls_back_everything() {
    for b in all_backends().await {
        let db = b.db.as_ref();
        db.query(TABLE, vec![]).await.expect("create");
        db.query("INSERT INTO t (id, body) VALUES (1, 'a')", vec![])
            .await
            .expect("seed");
        let err = db
            .transaction(vec![
                Statement::new("INSERT INTO t (id, body) VALUES (2, 'b')", vec![])
                    .expect_changes(1),
                Statement::new("UPDATE t SET body = 'x' WHERE id = 1", vec![]),
                Statement::new("UPDATE t SET body = 'y' WHERE id = 99", vec![]).expect_changes(1),
                Statement::new("INSERT INTO t (id, body) VALUES (4, 'd')", vec![]),
            ])
            .await
            .expect_err("mismatch");
        assert_eq!(
            err,
            DbError::ExpectedChanges {
                statement_index: 2,
                expected: 1,
                actual: 0
            },
            "{}",
            b.name
        );
        let rows = db
            .query("SELECT id, body FROM t", vec![])
            .await
            .expect("read");
        assert_eq!(
            rows.rows,
            vec![vec![SqlValue::Integer(1), SqlValue::Text("a".into())]],
            "{}",
            b.name
        );
        b.shutdown().await;
    }
}

#[tokio::test]
async fn strict_rejects_a_wrong_type() {
    for b in all_backends().await {
        let db = b.db.as_ref();
        db.query("CREATE TABLE n (v INTEGER NOT NULL) STRICT", vec![])
            .await
            .expect("create");
        let err = db
            .query(
                "INSERT INTO n (v) VALUES (?1)",
                vec![SqlValue::Text("not a number".into())],
            )
            .await
            .expect_err("strict");
        assert!(err.is_constraint(), "{}: {err:?}", b.name);
        assert_eq!(count(db, "n").await, 0, "{}", b.name);
        b.shutdown().await;
    }
}

#[tokio::test]
async fn values_round_trip() {
    for b in all_backends().await {
        let db = b.db.as_ref();
        let values = vec![
            SqlValue::Null,
            SqlValue::Integer(i64::MIN),
            SqlValue::Real(-2.5),
            SqlValue::Text("héllo".into()),
            SqlValue::Blob(vec![0, 255, 7]),
        ];
        let rows = db
            .query("SELECT ?1, ?2, ?3, ?4, ?5", values.clone())
            .await
            .expect("select");
        assert_eq!(rows.rows, vec![values], "{}", b.name);
        b.shutdown().await;
    }
}

const V1: Migration = Migration {
    version: 1,
    statements: &["CREATE TABLE agentos_core_items (id INTEGER PRIMARY KEY) STRICT"],
};
const V2: Migration = Migration {
    version: 2,
    statements: &["CREATE INDEX agentos_core_items_id ON agentos_core_items (id)"],
};

async fn schema_names(db: &dyn agentos_schema::Database) -> Vec<String> {
    db.query("SELECT name FROM sqlite_master ORDER BY name", vec![])
        .await
        .expect("schema")
        .rows
        .into_iter()
        .filter_map(|r| {
            r.into_iter()
                .next()
                .and_then(|v| v.as_str().map(str::to_owned))
        })
        .collect()
}

#[tokio::test]
async fn future_version_fails_closed_and_changes_nothing() {
    for b in all_backends().await {
        let db = b.db.as_ref();
        migrate(db, Owner::Core, &[V1]).await.expect("v1");
        db.query(
            "UPDATE agentos_core_schema_version SET schema_version = 5",
            vec![],
        )
        .await
        .expect("bump");
        let before = schema_names(db).await;
        let err = migrate(db, Owner::Core, &[V1, V2])
            .await
            .expect_err("future");
        assert_eq!(
            err,
            MigrationError::FutureSchema {
                owner: "core",
                stored: 5,
                supported: 2
            },
            "{}",
            b.name
        );
        assert_eq!(schema_names(db).await, before, "{}", b.name);
        let stored = db
            .query(
                "SELECT schema_version FROM agentos_core_schema_version",
                vec![],
            )
            .await
            .expect("version");
        assert_eq!(stored.scalar_i64(), Some(5), "{}", b.name);
        b.shutdown().await;
    }
}

#[tokio::test]
async fn ladder_gap_is_rejected() {
    for b in all_backends().await {
        let db = b.db.as_ref();
        let err = migrate(db, Owner::Core, &[V2]).await.expect_err("gap");
        assert_eq!(err.code(), "invalid_migration_ladder", "{}", b.name);
        assert!(schema_names(db).await.is_empty(), "{}", b.name);
        b.shutdown().await;
    }
}

#[tokio::test]
async fn failing_migration_leaves_schema_and_version_untouched() {
    const BROKEN: Migration = Migration {
        version: 2,
        statements: &[
            "CREATE TABLE agentos_core_more (id INTEGER PRIMARY KEY) STRICT",
            "CREATE INDEX agentos_core_bad ON agentos_core_missing (id)",
        ],
    };
    for b in all_backends().await {
        let db = b.db.as_ref();
        migrate(db, Owner::Core, &[V1]).await.expect("v1");
        let before = schema_names(db).await;
        let err = migrate(db, Owner::Core, &[V1, BROKEN])
            .await
            .expect_err("broken");
        assert_eq!(err.code(), "migration_failed", "{}", b.name);
        assert_eq!(schema_names(db).await, before, "{}", b.name);
        let stored = agentos_schema_stored(db).await;
        assert_eq!(stored, 1, "{}", b.name);
        b.shutdown().await;
    }
}

async fn agentos_schema_stored(db: &dyn agentos_schema::Database) -> i64 {
    db.query(
        "SELECT schema_version FROM agentos_core_schema_version",
        vec![],
    )
    .await
    .expect("version")
    .scalar_i64()
    .expect("integer")
}

#[tokio::test]
async fn owners_advance_independently() {
    const FS1: Migration = Migration {
        version: 1,
        statements: &["CREATE TABLE agentos_fs_things (id INTEGER PRIMARY KEY) STRICT"],
    };
    for b in all_backends().await {
        let db = b.db.as_ref();
        let core = migrate(db, Owner::Core, &[V1, V2]).await.expect("core");
        assert_eq!((core.from, core.to), (0, 2), "{}", b.name);
        let fs = migrate(db, Owner::Filesystem, &[FS1]).await.expect("fs");
        assert_eq!((fs.from, fs.to), (0, 1), "{}", b.name);
        // Re-running is a no-op for each, and neither sees the other's version.
        let again = migrate(db, Owner::Core, &[V1, V2])
            .await
            .expect("core again");
        assert_eq!((again.from, again.to), (2, 2), "{}", b.name);
        let actor = migrate(db, Owner::Actor, &[]).await.expect("actor");
        assert_eq!((actor.from, actor.to), (0, 0), "{}", b.name);
        let fs_version = db
            .query(
                "SELECT schema_version FROM agentos_fs_schema_version",
                vec![],
            )
            .await
            .expect("fs version");
        assert_eq!(fs_version.scalar_i64(), Some(1), "{}", b.name);
        b.shutdown().await;
    }
}

#[tokio::test]
async fn shipped_ladders_migrate_on_both_backends() {
    for b in all_backends().await {
        let outcomes = agentos_schema::migrate_all(b.db.as_ref())
            .await
            .expect("migrate_all");
        assert_eq!(outcomes.len(), 3, "{}", b.name);
        b.shutdown().await;
    }
}

/// Start-up's search for accepted prompts reads the index of active
/// prompts, the index by state being gone (core migration 14).
#[tokio::test]
async fn accepted_prompts_are_found_through_the_active_prompt_index() {
    let test = agentos_storage::testing::sqlite_file().await;
    let db = test.db.as_ref();
    agentos_schema::migrate_all(db).await.expect("migrate_all");
    let plan = db
        .query(
            "EXPLAIN QUERY PLAN SELECT session_id FROM agentos_core_prompts \
             WHERE state = 'accepted'",
            vec![],
        )
        .await
        .expect("plan");
    let details: Vec<String> = plan
        .rows
        .iter()
        .filter_map(|row| match row.last() {
            Some(SqlValue::Text(detail)) => Some(detail.clone()),
            _ => None,
        })
        .collect();
    assert!(
        details
            .iter()
            .any(|d| d.contains("COVERING INDEX agentos_core_prompts_one_active")),
        "{details:?}"
    );
    let gone = db
        .query(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'agentos_core_prompts_by_state'",
            vec![],
        )
        .await
        .expect("schema");
    assert_eq!(gone.rows[0], vec![SqlValue::Integer(0)]);
    db.close().await;
}

#[tokio::test]
async fn counting_database_records_calls() {
    for b in all_backends().await {
        let counting = CountingDatabase::new(b.db.clone());
        counting.query(TABLE, vec![]).await.expect("create");
        counting
            .transaction(vec![
                Statement::new("INSERT INTO t (id, body) VALUES (1, 'a')", vec![]),
                Statement::new("SELECT COUNT(*) FROM t", vec![]),
            ])
            .await
            .expect("tx");
        let counts = counting.take();
        assert_eq!(
            (counts.queries, counts.transactions, counts.statements),
            (1, 1, 2),
            "{}",
            b.name
        );
        assert!(counts.any_sql_contains("count("), "{}", b.name);
        assert_eq!(counting.counts().sql.len(), 0, "{}", b.name);
        b.shutdown().await;
    }
}

#[tokio::test]
async fn concurrent_transactions_serialize_correctly() {
    for b in all_backends().await {
        b.db.query(TABLE, vec![]).await.expect("create");
        let mut tasks = Vec::new();
        for worker in 0..8i64 {
            let db = b.db.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..20i64 {
                    let id = worker * 1000 + i;
                    db.transaction(vec![
                        Statement::new(
                            "INSERT INTO t (id, body) VALUES (?1, 'x')",
                            vec![id.into()],
                        ),
                        Statement::new("SELECT COUNT(*) FROM t", vec![]),
                    ])
                    .await
                    .expect("tx");
                }
            }));
        }
        for task in tasks {
            task.await.expect("join");
        }
        assert_eq!(count(b.db.as_ref(), "t").await, 160, "{}", b.name);
        b.shutdown().await;
    }
}

/// Many transactions in flight at once (the local-file backend commits them
/// in groups): a failing one rolls back alone, every other one commits, and
/// each caller gets its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_failures_roll_back_only_themselves() {
    for b in all_backends().await {
        b.db.query(TABLE, vec![]).await.expect("create");
        let mut tasks = Vec::new();
        for id in 0..200i64 {
            let db = b.db.clone();
            tasks.push(tokio::spawn(async move {
                let mut statements = vec![Statement::new(
                    "INSERT INTO t (id, body) VALUES (?1, 'x')",
                    vec![id.into()],
                )];
                match id % 3 {
                    // A compare-and-set that cannot hold.
                    1 => statements.push(
                        Statement::new("UPDATE t SET body = 'y' WHERE id = -1", vec![])
                            .expect_changes(1),
                    ),
                    // A SQLite error (STRICT type mismatch).
                    2 => statements.push(Statement::new(
                        "INSERT INTO t (id, body) VALUES ('not an integer', 'z')",
                        vec![],
                    )),
                    _ => {}
                }
                (id, db.transaction(statements).await)
            }));
        }
        let mut committed = 0;
        for task in tasks {
            let (id, result) = task.await.expect("join");
            match id % 3 {
                0 => {
                    result.unwrap_or_else(|e| panic!("{}: {id} failed: {e}", b.name));
                    committed += 1;
                }
                1 => assert_eq!(result.unwrap_err().code(), "expected_changes_mismatch"),
                _ => assert_eq!(result.unwrap_err().code(), "sqlite_error"),
            }
        }
        assert_eq!(count(b.db.as_ref(), "t").await, committed, "{}", b.name);
        let odd =
            b.db.query("SELECT count(*) FROM t WHERE id % 3 <> 0", vec![])
                .await
                .expect("count");
        assert_eq!(
            odd.scalar_i64(),
            Some(0),
            "{}: a failed member leaked",
            b.name
        );
        b.shutdown().await;
    }
}

/// `limits.sqlite.maxResultBytes` bounds what one statement may materialize,
/// on both backends; in a transaction the overflow rolls everything back.
#[tokio::test]
async fn oversize_results_are_refused_and_roll_back() {
    let limits = agentos_storage::SqliteLimits {
        max_result_bytes: 4096,
        ..Default::default()
    };
    let dir = tempfile::tempdir().expect("dir");
    let file = agentos_storage::sqlite_file::SqliteFileDatabase::open(
        &dir.path().join("limited.sqlite"),
        &limits,
    )
    .expect("open");
    let uds = agentos_storage::testing::actor_uds_with(Default::default(), limits.clone()).await;
    let backends: Vec<(&str, &dyn agentos_schema::Database)> =
        vec![("sqlite_file", &file), ("actor_uds", uds.db.as_ref())];
    for (name, db) in backends {
        db.query(TABLE, vec![]).await.expect("create");
        db.query(
            "INSERT INTO t (id, body) VALUES (1, ?1)",
            vec![SqlValue::Text("x".repeat(10_000))],
        )
        .await
        .expect("a big row goes in");
        let err = db
            .query("SELECT body FROM t", vec![])
            .await
            .expect_err("too big to read back");
        assert_eq!(err.code(), "sqlite_result_limit", "{name}");
        let err = db
            .transaction(vec![
                Statement::new("INSERT INTO t (id, body) VALUES (2, 'small')", vec![]),
                Statement::new("SELECT body FROM t", vec![]),
            ])
            .await
            .expect_err("over the limit inside a transaction");
        assert_eq!(err.code(), "sqlite_result_limit", "{name}");
        assert_eq!(
            count(db, "t").await,
            1,
            "{name}: the insert was rolled back"
        );
        let small = db
            .query("SELECT length(body) FROM t", vec![])
            .await
            .expect("small results pass");
        assert_eq!(small.scalar_i64(), Some(10_000));
    }
    uds.shutdown().await;
}

/// Core migration 2 rebuilds the event log: rows survive byte for byte and
/// every rule still holds.
#[tokio::test]
async fn event_log_rebuild_keeps_rows_and_rules() {
    use agentos_schema::ladders::core::MIGRATIONS;
    const INSERT: &str = "INSERT INTO agentos_core_events (session_id, sequence, occurred_at_ms, \
        acp_protocol_version, event_kind, correlation_id, payload_json, payload_bytes, \
        outcome_status, terminal_reason, actor_kind, actor_account, actor_signer) \
        VALUES (?1, ?2, 5, 1, ?3, ?4, ?5, length(CAST(?5 AS BLOB)), ?6, ?7, ?8, ?9, NULL)";
    let row = |seq: i64,
               kind: &str,
               corr: Option<&str>,
               outcome: Option<&str>,
               reason: Option<&str>,
               actor: &str,
               account: Option<&str>| {
        Statement::new(
            INSERT,
            vec![
                "s".into(),
                seq.into(),
                kind.into(),
                corr.map_or(SqlValue::Null, SqlValue::from),
                r#"{"k":"é"}"#.into(),
                outcome.map_or(SqlValue::Null, SqlValue::from),
                reason.map_or(SqlValue::Null, SqlValue::from),
                actor.into(),
                account.map_or(SqlValue::Null, SqlValue::from),
            ],
        )
    };
    const ALL: &str = "SELECT session_id, sequence, occurred_at_ms, acp_protocol_version, \
        event_kind, correlation_id, payload_json, payload_bytes, outcome_status, \
        terminal_reason, actor_kind, actor_account, actor_signer \
        FROM agentos_core_events ORDER BY sequence";
    for b in all_backends().await {
        let db = b.db.as_ref();
        migrate(db, Owner::Core, &MIGRATIONS[..1])
            .await
            .expect("v1");
        db.transaction(vec![
            row(1, "session_update", None, None, None, "user", Some("acct")),
            row(
                2,
                "permission_request",
                Some("r"),
                None,
                None,
                "agent",
                None,
            ),
            row(
                3,
                "permission_response",
                Some("r"),
                Some("accepted"),
                None,
                "user",
                None,
            ),
            row(
                4,
                "permission_response",
                Some("r"),
                Some("not_pending"),
                Some("vm_shutdown"),
                "system",
                None,
            ),
        ])
        .await
        .expect("v1 rows");
        let before = db.query(ALL, vec![]).await.expect("rows").rows;
        migrate(db, Owner::Core, &MIGRATIONS[..2])
            .await
            .expect("v2");
        assert_eq!(agentos_schema_stored(db).await, 2, "{}", b.name);
        let after = db.query(ALL, vec![]).await.expect("rows").rows;
        assert_eq!(after, before, "{}: rows copied as they were", b.name);
        let leftover = db
            .query(
                "SELECT COUNT(*) FROM sqlite_schema WHERE name = 'agentos_core_events_v2'",
                vec![],
            )
            .await
            .expect("schema");
        assert_eq!(leftover.scalar_i64(), Some(0), "{}", b.name);
        for (bad, what) in [
            (
                row(5, "session_updat", None, None, None, "agent", None),
                "kind",
            ),
            (
                row(5, "session_update", None, None, None, "robot", None),
                "actor",
            ),
            (
                row(
                    5,
                    "permission_response",
                    Some("r"),
                    Some("maybe"),
                    None,
                    "agent",
                    None,
                ),
                "outcome",
            ),
            (
                row(
                    5,
                    "permission_response",
                    Some("r"),
                    Some("not_pending"),
                    Some("bored"),
                    "agent",
                    None,
                ),
                "reason",
            ),
            (
                row(5, "session_update", Some("r"), None, None, "agent", None),
                "correlation",
            ),
            (
                row(5, "session_update", None, None, None, "agent", Some("acct")),
                "account",
            ),
            (
                row(1, "session_update", None, None, None, "agent", None),
                "duplicate",
            ),
        ] {
            let err = db.transaction(vec![bad]).await.expect_err(what);
            assert!(err.is_constraint(), "{}: {what}: {err:?}", b.name);
        }
        db.transaction(vec![row(
            5,
            "session_update",
            None,
            None,
            None,
            "agent",
            None,
        )])
        .await
        .expect("a good row still goes in");
        b.shutdown().await;
    }
}

/// The read path (read connections beside the writer on the local file): a
/// read sees every transaction answered before it and never half of one,
/// while writes go on; a write sent down it is refused and changes nothing.
/// On a multi-threaded runtime the reads run on the caller's thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_see_whole_committed_transactions_while_writes_go_on() {
    reads_see_whole_transactions().await;
}

/// The same through the reader threads (a single-threaded runtime).
#[tokio::test]
async fn reads_through_the_reader_threads_see_whole_committed_transactions() {
    reads_see_whole_transactions().await;
}

async fn reads_see_whole_transactions() {
    for b in all_backends().await {
        for table in ["a", "b"] {
            b.db.query(
                &format!("CREATE TABLE {table} (id INTEGER PRIMARY KEY) STRICT"),
                vec![],
            )
            .await
            .expect("create");
        }
        let writer = {
            let db = b.db.clone();
            tokio::spawn(async move {
                for id in 0..200i64 {
                    db.transaction(vec![
                        Statement::new("INSERT INTO a (id) VALUES (?1)", vec![id.into()]),
                        Statement::new("INSERT INTO b (id) VALUES (?1)", vec![id.into()]),
                    ])
                    .await
                    .expect("tx");
                    // Answered: the next read sees it.
                    let seen = read_count(db.as_ref(), "a").await;
                    assert!(seen > id, "a read after a commit sees it");
                }
            })
        };
        let mut readers = Vec::new();
        for _ in 0..2 {
            let db = b.db.clone();
            readers.push(tokio::spawn(async move {
                for _ in 0..200 {
                    let rows = db
                        .read(
                            "SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM b)",
                            vec![],
                        )
                        .await
                        .expect("read");
                    let row = &rows.rows[0];
                    assert_eq!(row[0], row[1], "never half a transaction");
                }
            }));
        }
        writer.await.expect("writer");
        for reader in readers {
            reader.await.expect("reader");
        }
        let refused = b.db.read("INSERT INTO a (id) VALUES (-1)", vec![]).await;
        if b.name == "sqlite_file" {
            assert!(matches!(refused, Err(DbError::Sql { .. })), "{refused:?}");
        }
        // Only the local file has a read path of its own; the socket's
        // reads are queries.
        let a = count(b.db.as_ref(), "a").await;
        assert_eq!(a, 200 + i64::from(b.name != "sqlite_file"), "{}", b.name);
        b.shutdown().await;
    }
}

/// A read connection keeps its snapshot open between reads, but lets it go
/// once reads stop: a checkpoint that must wait for every reader to leave the
/// WAL (`TRUNCATE`) then empties it. On a multi-threaded runtime that is the
/// pooled connections' sweeper; on a single-threaded one, the reader threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_read_snapshot_is_let_go() {
    idle_snapshots_are_let_go().await;
}

#[tokio::test]
async fn an_idle_read_snapshot_is_let_go_by_the_reader_threads() {
    idle_snapshots_are_let_go().await;
}

async fn idle_snapshots_are_let_go() {
    let dir = tempfile::tempdir().expect("dir");
    let db = agentos_storage::sqlite_file::SqliteFileDatabase::open(
        &dir.path().join("snapshots.sqlite"),
        &Default::default(),
    )
    .expect("open");
    db.query("CREATE TABLE t (id INTEGER PRIMARY KEY) STRICT", vec![])
        .await
        .expect("create");
    for id in 0..20i64 {
        db.transaction(vec![Statement::new(
            "INSERT INTO t (id) VALUES (?1)",
            vec![id.into()],
        )])
        .await
        .expect("insert");
    }
    for _ in 0..50 {
        assert_eq!(read_count(&db, "t").await, 20);
    }
    db.transaction(vec![Statement::new(
        "INSERT INTO t (id) VALUES (20)",
        vec![],
    )])
    .await
    .expect("insert after the reads");
    // The background checkpointer may hold the checkpoint lock at that
    // moment (busy at once, without waiting): try again. A reader in the
    // WAL makes every try wait out the busy timeout and fail.
    let mut checkpoint = Vec::new();
    for _ in 0..10 {
        checkpoint = db
            .query("PRAGMA wal_checkpoint(TRUNCATE)", vec![])
            .await
            .expect("checkpoint")
            .rows
            .remove(0);
        if checkpoint[0] == SqlValue::Integer(0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(
        checkpoint,
        vec![
            SqlValue::Integer(0),
            SqlValue::Integer(0),
            SqlValue::Integer(0)
        ],
        "not busy: no reader still holds the WAL, which is now empty"
    );
    assert_eq!(
        read_count(&db, "t").await,
        21,
        "the next read sees the write after the old snapshot"
    );
    db.close().await;
}

/// A local file database with a table `t` of BLOB rows.
async fn blob_table(path: &std::path::Path) -> agentos_storage::sqlite_file::SqliteFileDatabase {
    let db = agentos_storage::sqlite_file::SqliteFileDatabase::open(path, &Default::default())
        .expect("open");
    db.query(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB NOT NULL) STRICT",
        vec![],
    )
    .await
    .expect("create");
    db
}

/// Commits row `id` of `t`, `len` bytes.
async fn insert_blob(db: &dyn agentos_schema::Database, id: i64, len: usize) {
    db.transaction(vec![Statement::new(
        "INSERT INTO t (id, body) VALUES (?1, ?2)",
        vec![id.into(), SqlValue::Blob(vec![id as u8; len])],
    )])
    .await
    .expect("insert");
}

/// `t` holds `rows` rows of `len` bytes.
async fn assert_blobs(db: &dyn agentos_schema::Database, rows: i64, len: usize) {
    let n = db
        .read("SELECT count(*), sum(length(body)) FROM t", vec![])
        .await
        .expect("read");
    assert_eq!(
        n.rows[0],
        vec![
            SqlValue::Integer(rows),
            SqlValue::Integer(rows * len as i64)
        ]
    );
}

/// Committed frames reach the database file without the writer copying
/// them: the background checkpointer does it soon after the commits, long
/// before the WAL would reach the writer's own (fallback) checkpoint; and
/// again after the log has restarted. The thread copies once 1,000 pages
/// wait, so up to that many of the last commits may stay in the log, by
/// design (and without the thread the file would hold none of them).
#[tokio::test]
async fn commits_are_checkpointed_in_the_background() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("checkpoint.sqlite");
    let db = blob_table(&path).await;
    const MIB: usize = 1 << 20;
    let size = || std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    for round in 1..=2i64 {
        for id in (round - 1) * 8..round * 8 {
            insert_blob(&db, id, MIB).await;
        }
        // All but what may wait below the thread's mark (1,000 pages of
        // 4 KiB).
        let want = round as u64 * 8 * MIB as u64 - 1_000 * 4096;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while size() < want && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(
            size() >= want,
            "round {round}: the database file holds the commits but the last \
             thousand pages at most ({} bytes)",
            size()
        );
    }
    assert_blobs(&db, 16, MIB).await;
    db.close().await;
}

/// A writer that never stops still has its log restarted: the thread
/// copies what was committed during its pass, the writer the last few
/// pages, and the log is written again from its start. So it stays near the
/// thread's mark (1,000 pages) instead of growing to the writer's fallback
/// (16,384), every page of it a new block of the file.
#[tokio::test]
async fn a_log_written_without_pause_still_restarts() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("restart.sqlite");
    let wal = dir.path().join("restart.sqlite-wal");
    let db = blob_table(&path).await;
    // About four pages a commit, a commit each millisecond or so: 6,000
    // pages, with no moment the log is idle.
    const ROWS: i64 = 1_500;
    let frame = 4096 + 24;
    let mut largest = 0;
    for id in 0..ROWS {
        insert_blob(&db, id, 12 * 1024).await;
        largest = largest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    assert!(
        largest < 3_000 * frame,
        "the log grew to {} pages without restarting",
        largest / frame
    );
    assert_blobs(&db, ROWS, 12 * 1024).await;
    db.close().await;
}

/// The reader threads' queue is bounded: with both reader connections busy
/// and its one slot taken, a further read is refused with `queue_full`, and
/// the accepted ones still answer. (A single-threaded runtime, whose reads
/// always go through that queue.)
#[tokio::test]
async fn the_read_queue_is_bounded() {
    let dir = tempfile::tempdir().expect("dir");
    let limits = agentos_storage::SqliteLimits {
        max_queued_jobs: 1,
        ..Default::default()
    };
    let db = agentos_storage::sqlite_file::SqliteFileDatabase::open(
        &dir.path().join("reads.sqlite"),
        &limits,
    )
    .expect("open");
    let slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) \
                SELECT count(*) FROM c";
    let reads = (0..4).map(|_| db.read(slow, vec![]));
    let answers = futures_util::future::join_all(reads).await;
    let refused = answers
        .iter()
        .filter(|a| matches!(a, Err(DbError::QueueFull { .. })))
        .count();
    let answered = answers.iter().filter(|a| a.is_ok()).count();
    assert!(refused >= 1, "{answers:?}");
    assert_eq!(refused + answered, 4, "{answers:?}");
    assert!(answered >= 1);
    db.close().await;
}

/// A byte range of one BLOB on the read path: the bytes asked for, fewer at
/// the value's end, nothing past it, None for a missing row; on both
/// backends and both of the local file's read paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_range_reads_only_what_was_asked() {
    blob_ranges().await;
}

#[tokio::test]
async fn a_blob_range_reads_only_what_was_asked_through_the_reader_threads() {
    blob_ranges().await;
}

async fn blob_ranges() {
    for b in all_backends().await {
        b.db.query(
            "CREATE TABLE blobs (id INTEGER PRIMARY KEY, content BLOB)",
            vec![],
        )
        .await
        .expect("create");
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        b.db.transaction(vec![
            Statement::new(
                "INSERT INTO blobs (id, content) VALUES (1, ?1)",
                vec![SqlValue::Blob(bytes.clone())],
            ),
            Statement::new("INSERT INTO blobs (id, content) VALUES (2, NULL)", vec![]),
        ])
        .await
        .expect("insert");
        let range = |offset: u64, len: u64| {
            let db = b.db.clone();
            async move {
                db.read_blob("blobs", "content", 1, offset, len)
                    .await
                    .expect("read")
            }
        };
        assert_eq!(
            range(70_000, 4096).await,
            Some(bytes[70_000..74_096].to_vec()),
            "{}",
            b.name
        );
        assert_eq!(range(99_000, 4096).await, Some(bytes[99_000..].to_vec()));
        assert_eq!(range(100_000, 10).await, Some(Vec::new()));
        assert_eq!(range(0, 0).await, Some(Vec::new()));
        assert_eq!(
            b.db.read_blob("blobs", "content", 3, 0, 10)
                .await
                .expect("read"),
            None,
            "no such row"
        );
        assert_eq!(
            b.db.read_blob("blobs", "content", 2, 0, 10)
                .await
                .expect("read"),
            Some(Vec::new()),
            "a NULL reads as nothing"
        );
        b.shutdown().await;
    }
}
