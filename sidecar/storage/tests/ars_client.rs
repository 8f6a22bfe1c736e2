//! The actor socket client (`actor_uds`) against a scripted server: answers
//! out of order, unknown commit outcomes, every error response mapped to a
//! typed error, and its own limits.

mod ars_support;

use ars_support::*;

/// Answers by SQL text: `hold …` is answered only after the next request,
/// other texts name the response to give.
async fn scripted_server(listener: UnixListener, holding: Arc<AtomicUsize>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let holding = holding.clone();
        tokio::spawn(async move {
            let mut raw = Raw {
                stream,
                buf: BytesMut::new(),
            };
            let Some(hello) = raw.payload().await else {
                return;
            };
            let reply = match ars::decode_client_hello(hello) {
                Ok(_) => ServerHello::HelloOk(ars::HelloOk {
                    max_frame_bytes: 1 << 20,
                }),
                Err(_) => ServerHello::HelloRejectUnsupportedVersion,
            };
            let frame = ars::server_hello_frame(&reply).expect("hello");
            if raw.stream.write_all(&frame).await.is_err() {
                return;
            }
            let mut held: Vec<(u32, ResponsePayload)> = Vec::new();
            let mut die_on_commit = false;
            while let Some(payload) = raw.payload().await {
                let Ok(ClientFrame::Request(request)) = ars::decode_client_frame(payload) else {
                    return;
                };
                let sql = match &request.payload {
                    RequestPayload::SqliteQuery(q) => q.sql.clone(),
                    RequestPayload::SqliteBegin(_) => "begin".into(),
                    RequestPayload::SqliteCommit(_) => "commit".into(),
                    RequestPayload::SqliteRollback(_) => "rollback".into(),
                    RequestPayload::SqliteExec(_) => "exec".into(),
                };
                let ok = |v: i64| {
                    ResponsePayload::SqliteQueryOk(SqliteQueryOk {
                        columns: vec!["v".into()],
                        rows: vec![vec![SqlValue::SqlInteger(v)]],
                        changes: 0,
                        last_insert_row_id: None,
                    })
                };
                let response = match sql.as_str() {
                    "PRAGMA foreign_keys" | "PRAGMA foreign_keys = ON" => ok(1),
                    "begin" => ResponsePayload::SqliteBeginOk,
                    // The commit arrives; the server dies before answering.
                    "commit" if die_on_commit => return,
                    "commit" => ResponsePayload::SqliteCommitOk,
                    "die_on_commit" => {
                        die_on_commit = true;
                        ok(0)
                    }
                    "rollback" => ResponsePayload::SqliteRollbackOk,
                    "sql_error" => ResponsePayload::SqlError(SqlError {
                        code: 2067,
                        statement_index: 0,
                        message: "UNIQUE constraint failed".into(),
                    }),
                    "endpoint_closed" => ResponsePayload::EndpointClosed,
                    "queue_full" => ResponsePayload::QueueFull(QueueFull {
                        limit: "sqliteWorkerQueue".into(),
                        capacity: 9,
                    }),
                    "invalid_lease" => ResponsePayload::InvalidLeaseKey(InvalidLeaseKey {
                        message: "no".into(),
                    }),
                    "lease_expired" => ResponsePayload::LeaseExpired(LeaseExpired {
                        timeout_ms: 5,
                        message: "late".into(),
                    }),
                    "too_large" => ResponsePayload::ResponseTooLarge,
                    "wide" => ResponsePayload::SqliteQueryOk(SqliteQueryOk {
                        columns: vec!["v".into()],
                        rows: vec![vec![SqlValue::SqlText("x".repeat(100))]],
                        changes: 0,
                        last_insert_row_id: None,
                    }),
                    "go_away" => {
                        let frame = ServerFrame::GoAway(GoAway {
                            reason: GoAwayReason::MalformedFrame,
                        });
                        let _ = raw
                            .stream
                            .write_all(&ars::server_frame(&frame, 1 << 20).expect("enc"))
                            .await;
                        return;
                    }
                    "close" => return,
                    other => match other.strip_prefix("hold ") {
                        Some(n) => {
                            held.push((request.request_id, ok(n.parse().unwrap_or(-1))));
                            holding.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                        None => ok(other.parse().unwrap_or(-1)),
                    },
                };
                let mut out = Vec::new();
                for (id, payload) in
                    std::iter::once((request.request_id, response)).chain(held.drain(..))
                {
                    let frame = ServerFrame::Response(Response {
                        request_id: id,
                        payload,
                    });
                    out.extend(ars::server_frame(&frame, 1 << 20).expect("encode"));
                }
                if raw.stream.write_all(&out).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// A scripted server, its socket path, and how many `hold` requests it has
/// received (so a test can wait until one is held before going on).
async fn scripted() -> (
    tempfile::TempDir,
    PathBuf,
    tokio::task::JoinHandle<()>,
    Arc<AtomicUsize>,
) {
    let dir = tempfile::Builder::new()
        .prefix("ars-fake")
        .tempdir()
        .expect("tempdir");
    let path = dir.path().join("fake.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let holding = Arc::new(AtomicUsize::new(0));
    let task = tokio::spawn(scripted_server(listener, holding.clone()));
    (dir, path, task, holding)
}

#[tokio::test]
async fn client_matches_out_of_order_responses() {
    let (_dir, path, task, holding) = scripted().await;
    let db = std::sync::Arc::new(
        actor_uds::connect(&path, &SqliteLimits::default())
            .await
            .expect("connect"),
    );
    let held = {
        let db = db.clone();
        tokio::spawn(async move { db.query("hold 11", vec![]).await })
    };
    until("the first query is held", || {
        holding.load(Ordering::SeqCst) == 1
    })
    .await;
    let quick = db.query("22", vec![]).await.expect("quick");
    assert_eq!(quick.scalar_i64(), Some(22));
    let held = held.await.expect("join").expect("held");
    assert_eq!(held.scalar_i64(), Some(11));
    task.abort();
}

#[tokio::test]
async fn a_commit_left_unanswered_has_an_unknown_outcome() {
    let (_dir, path, task, _) = scripted().await;
    let db = actor_uds::connect(&path, &SqliteLimits::default())
        .await
        .expect("connect");
    // Lost before the commit was sent: certainly not committed.
    let err = db
        .transaction(vec![Statement::new("close", vec![])])
        .await
        .expect_err("lost mid-transaction");
    assert_eq!(err.code(), "sqlite_connection_lost", "{err:?}");
    // Lost after the commit was sent: it may have committed.
    let err = db
        .transaction(vec![Statement::new("die_on_commit", vec![])])
        .await
        .expect_err("lost during the commit");
    assert!(matches!(err, DbError::CommitOutcomeUnknown(_)), "{err:?}");
    assert_eq!(err.code(), "sqlite_commit_outcome_unknown");
    task.abort();
}

#[tokio::test]
async fn client_maps_every_error_response() {
    let (_dir, path, task, _) = scripted().await;
    let db = actor_uds::connect(&path, &SqliteLimits::default())
        .await
        .expect("connect");
    let cases: Vec<(&str, DbError)> = vec![
        (
            "sql_error",
            DbError::Sql {
                code: 2067,
                statement_index: 0,
                message: "UNIQUE constraint failed".into(),
            },
        ),
        ("endpoint_closed", DbError::EndpointClosed),
        (
            "queue_full",
            DbError::QueueFull {
                limit: "sqliteWorkerQueue".into(),
                capacity: 9,
            },
        ),
        ("invalid_lease", DbError::InvalidLeaseKey("no".into())),
        (
            "lease_expired",
            DbError::LeaseExpired {
                timeout_ms: 5,
                message: "late".into(),
            },
        ),
        ("too_large", DbError::ResponseTooLarge),
    ];
    for (sql, expected) in cases {
        assert_eq!(db.query(sql, vec![]).await.expect_err(sql), expected);
    }
    assert!(db
        .query("sql_error", vec![])
        .await
        .expect_err("c")
        .is_constraint());
    // Inside a transaction the statement index is the client's own.
    let err = db
        .transaction(vec![
            Statement::new("1", vec![]),
            Statement::new("sql_error", vec![]),
        ])
        .await
        .expect_err("tx");
    assert_eq!(err.statement_index(), Some(1));
    let err = db.query("go_away", vec![]).await.expect_err("go away");
    assert_eq!(err, DbError::GoAway("MalformedFrame".into()));
    // The next call reconnects.
    assert_eq!(
        db.query("3", vec![]).await.expect("reconnect").scalar_i64(),
        Some(3)
    );
    let err = db.query("close", vec![]).await.expect_err("closed");
    assert!(matches!(err, DbError::ConnectionLost(_)), "{err:?}");
    task.abort();
}

/// A server that announces frames larger than the client's cap is refused
/// at connect, before any response could be buffered.
#[tokio::test]
async fn an_announced_frame_limit_above_the_cap_is_refused() {
    let (_dir, path, task, _) = scripted().await;
    let limits = SqliteLimits {
        max_socket_frame_bytes: 1024,
        ..Default::default()
    };
    let err = match actor_uds::connect(&path, &limits).await {
        Ok(_) => panic!("a 1 MiB announcement passed a 1 KiB cap"),
        Err(err) => err,
    };
    assert_eq!(
        err,
        DbError::SocketFrameLimit {
            announced: 1 << 20,
            limit: 1024
        }
    );
    assert_eq!(err.code(), "sqlite_socket_frame_limit");
    // Within the cap the same server is fine.
    let limits = SqliteLimits {
        max_socket_frame_bytes: 1 << 20,
        ..Default::default()
    };
    actor_uds::connect(&path, &limits)
        .await
        .expect("within the cap");
    task.abort();
}

#[tokio::test]
async fn client_limits_are_typed() {
    let (_dir, path, task, _) = scripted().await;
    let limits = SqliteLimits {
        max_queued_request_bytes: 64,
        ..Default::default()
    };
    let db = actor_uds::connect(&path, &limits).await.expect("connect");
    let err = db
        .query(&"9".repeat(200), vec![])
        .await
        .expect_err("queued bytes");
    assert_eq!(err.code(), "sqlite_queue_full");
    let limits = SqliteLimits {
        max_result_bytes: 16,
        ..Default::default()
    };
    let db = actor_uds::connect(&path, &limits).await.expect("connect");
    assert_eq!(
        db.query("5", vec![])
            .await
            .expect("within the limit")
            .scalar_i64(),
        Some(5)
    );
    assert_eq!(
        db.query("wide", vec![]).await.expect_err("over the limit"),
        DbError::ResultLimit { limit: 16 }
    );
    let err = db
        .transaction(vec![Statement::new("wide", vec![])])
        .await
        .expect_err("over the limit in a transaction");
    assert_eq!(err, DbError::ResultLimit { limit: 16 });
    task.abort();
}

#[tokio::test]
async fn client_rejects_a_server_that_refuses_v1() {
    let dir = tempfile::Builder::new()
        .prefix("ars-rej")
        .tempdir()
        .expect("tempdir");
    let path = dir.path().join("r.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let task = tokio::spawn(async move {
        if let Ok((mut stream, _)) = listener.accept().await {
            let mut hello = [0u8; 6];
            let _ = stream.read_exact(&mut hello).await;
            let _ = stream.write_all(&[0, 0, 0, 3, 1, 0, 1]).await;
        }
    });
    let err = actor_uds::connect(&path, &SqliteLimits::default())
        .await
        .err()
        .expect("rejected");
    assert_eq!(err.code(), "sqlite_connect_failed");
    task.abort();
}
