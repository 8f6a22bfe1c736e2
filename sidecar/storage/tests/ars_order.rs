//! What the reference server shares with Rivet's real one and a client must
//! live with: pipelined requests run in no promised order (here newest
//! first), what waits behind a lease that expires is answered
//! `LeaseExpired` without running, and SQL errors carry SQLite's extended
//! code and the failing statement's index. And the `actor_uds` client on
//! top of it: transactions of dependent statements, retries of what never
//! ran, no retry inside its own expired lease.

mod ars_support;

use ars_support::*;

/// Frames for `requests`, as one write.
fn frames(requests: &[(u32, Option<&str>, RequestPayload)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (id, lease, payload) in requests {
        let frame = ClientFrame::Request(Request {
            request_id: *id,
            lease_key: lease.map(str::to_owned),
            payload: payload.clone(),
        });
        out.extend(ars::client_frame(&frame, u32::MAX).expect("encode"));
    }
    out
}

fn exec(script: &str) -> RequestPayload {
    RequestPayload::SqliteExec(ars::SqliteExec {
        script: script.into(),
    })
}

/// Responses by request id, `n` of them, in the order they came.
async fn responses(raw: &mut Raw, n: usize) -> Vec<(u32, ResponsePayload)> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(raw.response().await);
    }
    out
}

fn sql_error(payload: &ResponsePayload) -> (i32, u32, String) {
    match payload {
        ResponsePayload::SqlError(e) => (e.code, e.statement_index, e.message.clone()),
        other => panic!("expected an SQL error, got {other:?}"),
    }
}

#[tokio::test]
async fn pipelined_requests_run_newest_first() {
    let server = Server::start(ArsServerOptions::default()).await;
    let mut raw = Raw::hello(&server.path()).await;
    let batch = frames(&[
        (1, None, query("SELECT 1")),
        (2, None, query("SELECT 2")),
        (3, None, query("SELECT 3")),
    ]);
    raw.stream.write_all(&batch).await.expect("send");
    let order: Vec<u32> = responses(&mut raw, 3)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(order, vec![3, 2, 1]);

    // Inside a lease too: a client that pipelines dependent statements sees
    // the later one run first.
    let batch = frames(&[
        (4, None, begin("k")),
        (5, Some("k"), query("CREATE TABLE made (x INTEGER) STRICT")),
        (6, Some("k"), query("INSERT INTO made (x) VALUES (1)")),
    ]);
    raw.stream.write_all(&batch).await.expect("send");
    let got = responses(&mut raw, 3).await;
    let insert = got.iter().find(|(id, _)| *id == 6).expect("the insert");
    let (code, _, message) = sql_error(&insert.1);
    assert_eq!(code, 1, "SQLITE_ERROR");
    assert!(message.contains("no such table: made"), "{message}");
    raw.send(7, None, commit("k")).await;
    raw.response().await;
    server.handle.shutdown().await;
}

/// A statement sent behind its Begin in the same write waits for the lease
/// whatever runs first: this is the shape the client relies on.
#[tokio::test]
async fn begin_and_its_first_statement_in_one_write() {
    let server = Server::start(ArsServerOptions::default()).await;
    let mut raw = Raw::hello(&server.path()).await;
    raw.stream
        .write_all(&frames(&[
            (1, None, begin("k")),
            (2, Some("k"), query("SELECT 42")),
        ]))
        .await
        .expect("send");
    let got = responses(&mut raw, 2).await;
    assert_eq!(got[0], (1, ResponsePayload::SqliteBeginOk));
    assert_eq!(got[1].0, 2);
    assert_eq!(scalar(&got[1].1), Some(42));
    raw.send(3, None, commit("k")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteCommitOk);
    server.handle.shutdown().await;
}

/// A's lease expires by its deadline: B's lease-less insert, B's Begin and
/// the statement sent with it waited behind it, and none of them ran.
#[tokio::test]
async fn what_waits_behind_an_expired_lease_is_told_and_never_runs() {
    let server = Server::start(ArsServerOptions::default()).await;
    let mut a = Raw::hello(&server.path()).await;
    a.send(1, None, query(CREATE)).await;
    a.response().await;
    a.send(2, None, begin_with_timeout("a", 300)).await;
    assert_eq!(a.response().await.1, ResponsePayload::SqliteBeginOk);

    let mut b = Raw::hello(&server.path()).await;
    b.send(1, None, query("INSERT INTO t (id) VALUES (1)"))
        .await;
    b.stream
        .write_all(&frames(&[
            (2, None, begin("b")),
            (3, Some("b"), query("INSERT INTO t (id) VALUES (2)")),
        ]))
        .await
        .expect("send");
    let mut got = responses(&mut b, 3).await;
    got.sort_by_key(|(id, _)| *id);
    let expired_300 = |p: &ResponsePayload| {
        matches!(
            p,
            ResponsePayload::LeaseExpired(LeaseExpired {
                timeout_ms: 300,
                ..
            })
        )
    };
    assert!(expired_300(&got[0].1), "lease-less: {:?}", got[0].1);
    assert!(expired_300(&got[1].1), "waiting Begin: {:?}", got[1].1);
    assert!(
        matches!(got[2].1, ResponsePayload::InvalidLeaseKey(_)),
        "a statement of a lease that never began: {:?}",
        got[2].1
    );
    // Nothing ran, and the Begin's key is free again: sent again, all of it
    // runs.
    b.send(4, None, query("SELECT COUNT(*) FROM t")).await;
    assert_eq!(scalar(&b.response().await.1), Some(0));
    b.stream
        .write_all(&frames(&[
            (5, None, begin("b")),
            (6, Some("b"), query("INSERT INTO t (id) VALUES (2)")),
        ]))
        .await
        .expect("send");
    let got = responses(&mut b, 2).await;
    assert_eq!(got[0].1, ResponsePayload::SqliteBeginOk);
    b.send(7, None, commit("b")).await;
    assert_eq!(b.response().await.1, ResponsePayload::SqliteCommitOk);
    // A hears its own lease expired.
    a.send(3, None, commit("a")).await;
    assert!(expired_300(&a.response().await.1));
    server.handle.shutdown().await;
}

/// A connection that closes with its lease open expires that lease: what
/// other connections queued behind it is told so and may send it again.
#[tokio::test]
async fn a_closed_connection_expires_its_lease_for_those_waiting() {
    let server = Server::start(ArsServerOptions::default()).await;
    let mut a = Raw::hello(&server.path()).await;
    a.send(1, None, query(CREATE)).await;
    a.response().await;
    a.send(2, None, begin("k")).await;
    assert_eq!(a.response().await.1, ResponsePayload::SqliteBeginOk);
    a.send(3, Some("k"), query("INSERT INTO t (id) VALUES (1)"))
        .await;
    a.response().await;
    let mut b = Raw::hello(&server.path()).await;
    b.stream
        .write_all(&frames(&[
            (1, None, begin("k2")),
            (2, None, query("SELECT COUNT(*) FROM t")),
        ]))
        .await
        .expect("send");
    // Both are queued behind A's lease before A goes (one write runs newest
    // first, so the query is taken before the Begin the gauge counts).
    until("B waits behind A's lease", || {
        server.handle.waiting_begins() == 1
    })
    .await;
    drop(a);
    let mut got = responses(&mut b, 2).await;
    got.sort_by_key(|(id, _)| *id);
    for (id, payload) in &got {
        assert!(
            matches!(
                payload,
                ResponsePayload::LeaseExpired(LeaseExpired {
                    timeout_ms: 60_000,
                    ..
                })
            ),
            "request {id}: {payload:?}"
        );
    }
    b.send(3, None, begin("k3")).await;
    assert_eq!(b.response().await.1, ResponsePayload::SqliteBeginOk);
    b.send(4, Some("k3"), query("SELECT COUNT(*) FROM t")).await;
    assert_eq!(
        scalar(&b.response().await.1),
        Some(0),
        "A's insert rolled back"
    );
    b.send(5, None, commit("k3")).await;
    assert_eq!(b.response().await.1, ResponsePayload::SqliteCommitOk);
    server.handle.shutdown().await;
}

#[tokio::test]
async fn sql_errors_carry_the_extended_code_and_the_statement_index() {
    let server = Server::start(ArsServerOptions::default()).await;
    let mut raw = Raw::hello(&server.path()).await;
    raw.send(1, None, query(CREATE)).await;
    raw.response().await;
    raw.send(2, None, query("INSERT INTO t (id) VALUES (1)"))
        .await;
    raw.response().await;
    raw.send(3, None, query("INSERT INTO t (id) VALUES (1)"))
        .await;
    let (code, index, message) = sql_error(&raw.response().await.1);
    assert_eq!((code, index), (1555, 0), "SQLITE_CONSTRAINT_PRIMARYKEY");
    assert!(message.contains("UNIQUE constraint failed"), "{message}");

    // An exec script counts its non-empty statements; empty ones and
    // comments do not move the index.
    raw.send(
        4,
        None,
        exec("CREATE TABLE u (x INTEGER); ; -- nothing\n INSERT INTO t (id) VALUES (2); INSERT INTO nowhere VALUES (1); INSERT INTO t (id) VALUES (3)"),
    )
    .await;
    let (code, index, message) = sql_error(&raw.response().await.1);
    assert_eq!((code, index), (1, 2));
    assert!(message.contains("no such table: nowhere"), "{message}");
    raw.send(5, None, query("SELECT COUNT(*) FROM t")).await;
    assert_eq!(
        scalar(&raw.response().await.1),
        Some(2),
        "an exec runs up to its failing statement, as SQLite does"
    );

    // One query is one statement.
    raw.send(6, None, query("SELECT 1; SELECT 2")).await;
    let (code, index, message) = sql_error(&raw.response().await.1);
    assert_eq!((code, index), (-1, 0));
    assert_eq!(message, "sqlite execute only supports a single statement");
    raw.send(7, None, exec("")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteExecOk);
    server.handle.shutdown().await;
}

async fn client(server: &Server, limits: &SqliteLimits) -> actor_uds::ActorUdsDatabase {
    actor_uds::connect(&server.path(), limits)
        .await
        .expect("connect")
}

/// Statements that depend on each other, in many transactions at once, on
/// a server that runs pipelined requests newest first: every transaction
/// sees its own statements in the order it gave them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependent_statements_keep_their_order_on_a_reordering_server() {
    dependent_statements_in_order(SqliteLimits::default()).await;
}

/// With one request in flight a Begin goes alone, and lease-less reads
/// queued behind a transaction never hold the slot it needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_in_flight_still_orders_and_never_deadlocks() {
    dependent_statements_in_order(SqliteLimits {
        max_in_flight_requests: 1,
        ..Default::default()
    })
    .await;
}

async fn dependent_statements_in_order(limits: SqliteLimits) {
    let server = Server::start(ArsServerOptions::default()).await;
    let db = Arc::new(client(&server, &limits).await);
    let mut tasks = Vec::new();
    for n in 0..16 {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let table = format!("t{n}");
            let rows = db
                .transaction(vec![
                    Statement::new(format!("CREATE TABLE {table} (x INTEGER) STRICT"), vec![]),
                    Statement::new(format!("INSERT INTO {table} (x) VALUES (1)"), vec![]),
                    Statement::new(format!("UPDATE {table} SET x = x + 1"), vec![]),
                    Statement::new(format!("SELECT x FROM {table}"), vec![]),
                ])
                .await
                .expect("the transaction commits");
            // Lease-less reads pipelined beside the transactions.
            let count = db
                .query(&format!("SELECT COUNT(*) FROM {table}"), vec![])
                .await
                .expect("a read");
            (rows[3].scalar_i64(), count.scalar_i64())
        }));
    }
    for task in tasks {
        assert_eq!(task.await.expect("task"), (Some(2), Some(1)));
    }
    db.close().await;
    server.handle.shutdown().await;
}

/// A lease-less query and a transaction parked behind someone else's lease
/// that expires are answered `LeaseExpired` without running; the client
/// sends them again and each lands exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_never_ran_is_sent_again() {
    let server = Server::start(ArsServerOptions::default()).await;
    let db = Arc::new(client(&server, &SqliteLimits::default()).await);
    db.query(CREATE, vec![]).await.expect("create");
    let mut holder = Raw::hello(&server.path()).await;
    holder.send(1, None, begin_with_timeout("held", 300)).await;
    assert_eq!(holder.response().await.1, ResponsePayload::SqliteBeginOk);

    let plain = {
        let db = db.clone();
        tokio::spawn(async move { db.query("INSERT INTO t (id) VALUES (1)", vec![]).await })
    };
    let leased = {
        let db = db.clone();
        tokio::spawn(async move {
            db.transaction(vec![
                Statement::new("INSERT INTO t (id) VALUES (2)", vec![]),
                Statement::new("INSERT INTO t (id) VALUES (3)", vec![]),
            ])
            .await
        })
    };
    plain.await.expect("task").expect("the query lands");
    leased.await.expect("task").expect("the transaction lands");
    let ids = db
        .query("SELECT group_concat(id) FROM t ORDER BY id", vec![])
        .await
        .expect("read");
    assert_eq!(
        ids.rows[0][0],
        agentos_schema::SqlValue::Text("1,2,3".into())
    );
    holder.send(2, None, commit("held")).await;
    assert!(matches!(
        holder.response().await.1,
        ResponsePayload::LeaseExpired(_)
    ));
    db.close().await;
    server.handle.shutdown().await;
}

/// Inside its own lease that expired, a transaction fails with a typed
/// error and is not sent again: what ran of it was rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_of_our_own_expired_lease_is_not_retried() {
    let options = ArsServerOptions {
        lease_timeout: Duration::from_millis(50),
        ..Default::default()
    };
    let server = Server::start(options).await;
    let db = client(&server, &SqliteLimits::default()).await;
    db.query(CREATE, vec![]).await.expect("create");
    let slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c \
                WHERE x < 3000000) SELECT COUNT(*) FROM c";
    let err = db
        .transaction(vec![
            Statement::new("INSERT INTO t (id) VALUES (1)", vec![]),
            Statement::new(slow, vec![]),
            Statement::new("INSERT INTO t (id) VALUES (2)", vec![]),
        ])
        .await
        .expect_err("the lease expired under it");
    assert_eq!(err.code(), "sqlite_lease_expired", "{err}");
    let count = db
        .query("SELECT COUNT(*) FROM t", vec![])
        .await
        .expect("read");
    assert_eq!(count.scalar_i64(), Some(0));
    db.close().await;
    server.handle.shutdown().await;
}

/// After `maxLeasesPerConnection` leases the client moves to a fresh
/// connection (a server remembers every key a connection used until it
/// closes), and the retired one closes. The server here allows no more
/// leases per connection than the client takes, so a client that kept
/// one connection would be refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_retired_after_its_share_of_leases() {
    let server = Server::start(ArsServerOptions {
        max_leases_per_connection: 3,
        ..Default::default()
    })
    .await;
    // A proxy in front of the server counts the client's connections.
    let proxy = server.dir.path().join("proxy.sock");
    let listener = UnixListener::bind(&proxy).expect("bind the proxy");
    let (opened, live) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let upstream = server.path();
    {
        let (opened, live) = (opened.clone(), live.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                opened.fetch_add(1, Ordering::SeqCst);
                live.fetch_add(1, Ordering::SeqCst);
                let mut server = UnixStream::connect(&upstream).await.expect("upstream");
                let live = live.clone();
                tokio::spawn(async move {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    live.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
    }
    let limits = SqliteLimits {
        max_leases_per_connection: 3,
        ..Default::default()
    };
    let db = actor_uds::connect(&proxy, &limits).await.expect("connect");
    db.query(CREATE, vec![]).await.expect("create");
    for id in 0..7 {
        db.transaction(vec![Statement::new(
            "INSERT INTO t (id) VALUES (?1)",
            vec![agentos_schema::SqlValue::Integer(id)],
        )])
        .await
        .expect("a transaction");
        // Lease-less queries do not count.
        db.query("SELECT 1", vec![]).await.expect("a query");
    }
    assert_eq!(opened.load(Ordering::SeqCst), 3, "leases 1-3, 4-6, 7");
    until("the retired connections close", || {
        live.load(Ordering::SeqCst) == 1
    })
    .await;
    let count = db
        .query("SELECT COUNT(*) FROM t", vec![])
        .await
        .expect("read");
    assert_eq!(count.scalar_i64(), Some(7));
    db.close().await;
    server.handle.shutdown().await;
}
