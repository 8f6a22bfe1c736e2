//! Actor Runtime Socket v1 on the wire: raw-socket tests against the
//! reference server (the client's own tests are in `ars_client.rs`).

mod ars_support;

use ars_support::*;

#[tokio::test]
async fn hello_bytes_are_exact() {
    let server = Server::start(ArsServerOptions::default()).await;
    let mut raw = Raw::connect(&server.path()).await;
    raw.stream
        .write_all(&[0, 0, 0, 2, 1, 0])
        .await
        .expect("hello");
    let mut reply = [0u8; 11];
    raw.stream.read_exact(&mut reply).await.expect("reply");
    let max = ars::DEFAULT_MAX_FRAME_BYTES.to_le_bytes();
    assert_eq!(reply, [0, 0, 0, 7, 1, 0, 0, max[0], max[1], max[2], max[3]]);
    server.handle.shutdown().await;
}

#[tokio::test]
async fn socket_and_directory_modes() {
    use std::os::unix::fs::PermissionsExt;
    let server = Server::start(ArsServerOptions::default()).await;
    let socket = std::fs::metadata(server.path())
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(socket & 0o777, 0o600);
    let dir = std::fs::metadata(server.dir.path().join("sock"))
        .expect("dir")
        .permissions()
        .mode();
    assert_eq!(dir & 0o777, 0o700);
    server.handle.shutdown().await;
}

#[tokio::test]
async fn unsupported_version_is_rejected() {
    let server = Server::start(ArsServerOptions::default()).await;
    let mut raw = Raw::connect(&server.path()).await;
    raw.stream
        .write_all(&[0, 0, 0, 2, 2, 0])
        .await
        .expect("hello");
    let mut reply = Vec::new();
    raw.stream.read_to_end(&mut reply).await.expect("reply");
    assert_eq!(reply, vec![0, 0, 0, 3, 1, 0, 1]);
    server.handle.shutdown().await;
}

#[tokio::test]
async fn responses_come_back_out_of_order() {
    let server = Server::start(ArsServerOptions::default()).await;
    let mut raw = Raw::hello(&server.path()).await;
    raw.send(1, None, begin("k1")).await;
    assert_eq!(raw.response().await, (1, ResponsePayload::SqliteBeginOk));
    // Lease-less work waits while the lease holds the writer.
    raw.send(2, None, query("SELECT 2")).await;
    raw.send(3, Some("k1"), query("SELECT 3")).await;
    let (id, payload) = raw.response().await;
    assert_eq!((id, scalar(&payload)), (3, Some(3)));
    raw.send(4, None, commit("k1")).await;
    assert_eq!(raw.response().await, (4, ResponsePayload::SqliteCommitOk));
    let (id, payload) = raw.response().await;
    assert_eq!((id, scalar(&payload)), (2, Some(2)));
    server.handle.shutdown().await;
}

#[tokio::test]
async fn lease_rules() {
    let server = Server::start(ArsServerOptions::default()).await;
    let mut raw = Raw::hello(&server.path()).await;
    let invalid = |p: &ResponsePayload| matches!(p, ResponsePayload::InvalidLeaseKey(_));

    raw.send(1, Some("k"), begin("k")).await;
    assert!(
        invalid(&raw.response().await.1),
        "Begin with Request.leaseKey"
    );
    raw.send(2, None, begin("")).await;
    assert!(invalid(&raw.response().await.1), "empty key");
    raw.send(3, Some("never"), query("SELECT 1")).await;
    assert!(invalid(&raw.response().await.1), "unknown lease");

    raw.send(4, None, begin("k")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteBeginOk);
    raw.send(5, Some("k"), commit("k")).await;
    assert!(
        invalid(&raw.response().await.1),
        "Commit with Request.leaseKey"
    );
    raw.send(6, None, commit("k")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteCommitOk);
    raw.send(7, Some("k"), query("SELECT 1")).await;
    assert!(invalid(&raw.response().await.1), "finished lease");
    // A finished lease's key stays used: beginning it again is refused, and
    // the connection goes on serving.
    raw.send(8, None, begin("k")).await;
    match raw.response().await.1 {
        ResponsePayload::InvalidLeaseKey(e) => assert!(e.message.contains("already used")),
        other => panic!("a reused key began: {other:?}"),
    }
    raw.send(108, None, query("SELECT 1")).await;
    assert_eq!(scalar(&raw.response().await.1), Some(1));
    raw.send(208, None, commit("k")).await;
    assert!(invalid(&raw.response().await.1), "commit of an ended lease");

    // Leases are per connection: another connection cannot use this key.
    let mut other = Raw::hello(&server.path()).await;
    raw.send(9, None, begin("shared")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteBeginOk);
    other.send(1, Some("shared"), query("SELECT 1")).await;
    assert!(invalid(&other.response().await.1), "foreign connection");
    raw.send(10, None, commit("shared")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteCommitOk);
    server.handle.shutdown().await;
}

#[tokio::test]
async fn lease_expiry_rolls_back() {
    let options = ArsServerOptions {
        lease_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let server = Server::start(options).await;
    let mut raw = Raw::hello(&server.path()).await;
    raw.send(1, None, query(CREATE)).await;
    raw.response().await;
    raw.send(2, None, begin("k")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteBeginOk);
    raw.send(3, Some("k"), query("INSERT INTO t (id) VALUES (1)"))
        .await;
    assert!(matches!(
        raw.response().await.1,
        ResponsePayload::SqliteQueryOk(_)
    ));
    tokio::time::sleep(Duration::from_millis(600)).await;
    raw.send(4, Some("k"), query("INSERT INTO t (id) VALUES (2)"))
        .await;
    assert!(matches!(
        raw.response().await.1,
        ResponsePayload::LeaseExpired(LeaseExpired {
            timeout_ms: 200,
            ..
        })
    ));
    raw.send(5, None, commit("k")).await;
    assert!(matches!(
        raw.response().await.1,
        ResponsePayload::LeaseExpired(_)
    ));
    raw.send(6, None, query("SELECT COUNT(*) FROM t")).await;
    assert_eq!(scalar(&raw.response().await.1), Some(0));
    server.handle.shutdown().await;
}

#[tokio::test]
async fn bounded_queues_answer_queue_full() {
    let options = ArsServerOptions {
        coordinator_queue_capacity: 1,
        worker_queue_capacity: 3,
        ..Default::default()
    };
    let server = Server::start(options).await;
    let mut a = Raw::hello(&server.path()).await;
    let mut b = Raw::hello(&server.path()).await;
    let mut c = Raw::hello(&server.path()).await;
    a.send(1, None, begin("a")).await;
    assert_eq!(a.response().await.1, ResponsePayload::SqliteBeginOk);
    b.send(1, None, begin("b")).await; // waits for the writer
    until("b's Begin waits for the writer", || {
        server.handle.waiting_begins() == 1
    })
    .await;
    c.send(1, None, begin("c")).await;
    assert_eq!(
        c.response().await.1,
        ResponsePayload::QueueFull(QueueFull {
            limit: "transactionCoordinatorQueue".into(),
            capacity: 1
        })
    );
    // b's Begin holds one worker slot; two deferred reads fill the rest.
    c.send(2, None, query("SELECT 1")).await;
    c.send(3, None, query("SELECT 1")).await;
    c.send(4, None, query("SELECT 1")).await;
    assert_eq!(
        c.response().await,
        (
            4,
            ResponsePayload::QueueFull(QueueFull {
                limit: "sqliteWorkerQueue".into(),
                capacity: 3
            })
        )
    );
    // The worker queue is shared: while it is full, even the lease holder waits.
    a.send(2, None, commit("a")).await;
    assert!(matches!(
        a.response().await.1,
        ResponsePayload::QueueFull(_)
    ));
    // Closing c drops its queued reads, which frees the queue.
    drop(c);
    let deadline = std::time::Instant::now() + PATIENCE;
    let mut id = 3;
    loop {
        a.send(id, None, commit("a")).await;
        match a.response().await.1 {
            ResponsePayload::SqliteCommitOk => break,
            ResponsePayload::QueueFull(_) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the worker queue never drained"
                );
                id += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => panic!("commit: {other:?}"),
        }
    }
    assert_eq!(b.response().await.1, ResponsePayload::SqliteBeginOk);
    server.handle.shutdown().await;
}

#[tokio::test]
async fn oversize_frame_gets_go_away() {
    let options = ArsServerOptions {
        max_frame_bytes: 1024,
        ..Default::default()
    };
    let server = Server::start(options).await;
    let mut raw = Raw::hello(&server.path()).await;
    raw.stream
        .write_all(&[0, 0, 0x10, 0])
        .await
        .expect("header");
    assert_eq!(
        raw.frame().await,
        Some(ServerFrame::GoAway(GoAway {
            reason: GoAwayReason::FrameTooLarge
        }))
    );
    raw.expect_closed().await;
    server.handle.shutdown().await;
}

#[tokio::test]
async fn oversize_response_is_response_too_large() {
    let options = ArsServerOptions {
        max_frame_bytes: 1024,
        ..Default::default()
    };
    let server = Server::start(options).await;
    let mut raw = Raw::hello(&server.path()).await;
    raw.send(1, None, query("SELECT zeroblob(4096)")).await;
    assert_eq!(raw.response().await, (1, ResponsePayload::ResponseTooLarge));
    raw.send(2, None, query("SELECT 2")).await;
    assert_eq!(scalar(&raw.response().await.1), Some(2));
    server.handle.shutdown().await;
}

#[tokio::test]
async fn garbage_gets_go_away_and_others_keep_working() {
    let server = Server::start(ArsServerOptions::default()).await;
    let mut good = Raw::hello(&server.path()).await;
    good.send(1, None, query(CREATE)).await;
    good.response().await;
    good.send(2, None, query("INSERT INTO t (id) VALUES (7)"))
        .await;
    good.response().await;

    let malformed = GoAway {
        reason: GoAwayReason::MalformedFrame,
    };
    for garbage in [
        vec![0, 0, 0, 3, 1, 0, 9],                // unknown union tag
        vec![0, 0, 0, 2, 2, 0],                   // a different version after hello
        vec![0, 0, 0, 1, 0xff],                   // no version header
        vec![0, 0, 0, 8, 1, 0, 0, 1, 0, 0, 0, 2], // truncated request
    ] {
        let mut bad = Raw::hello(&server.path()).await;
        bad.stream.write_all(&garbage).await.expect("garbage");
        assert_eq!(
            bad.frame().await,
            Some(ServerFrame::GoAway(malformed)),
            "{garbage:?}"
        );
        bad.expect_closed().await;
    }
    // A hello that is not a hello just closes.
    for garbage in [vec![0, 0, 0, 1, 0xff], vec![0, 0, 0, 3, 1, 0, 0xbe]] {
        let mut raw = Raw::connect(&server.path()).await;
        raw.stream.write_all(&garbage).await.expect("garbage hello");
        raw.expect_closed().await;
    }

    good.send(3, None, query("SELECT COUNT(*) FROM t")).await;
    assert_eq!(scalar(&good.response().await.1), Some(1));
    server.handle.shutdown().await;
}

#[tokio::test]
async fn duplicate_in_flight_request_id_gets_go_away() {
    let server = Server::start(ArsServerOptions::default()).await;
    let mut holder = Raw::hello(&server.path()).await;
    holder.send(1, None, begin("h")).await;
    assert_eq!(holder.response().await.1, ResponsePayload::SqliteBeginOk);
    let mut raw = Raw::hello(&server.path()).await;
    raw.send(5, None, query("SELECT 1")).await; // deferred behind the lease
    raw.send(5, None, query("SELECT 1")).await;
    assert_eq!(
        raw.frame().await,
        Some(ServerFrame::GoAway(GoAway {
            reason: GoAwayReason::MalformedFrame
        }))
    );
    raw.expect_closed().await;
    holder.send(2, None, commit("h")).await;
    assert_eq!(holder.response().await.1, ResponsePayload::SqliteCommitOk);
    server.handle.shutdown().await;
}

#[tokio::test]
async fn client_rolls_back_when_the_server_connection_dies() {
    let server = Server::start(ArsServerOptions::default()).await;
    let db = actor_uds::connect(&server.path(), &SqliteLimits::default())
        .await
        .expect("connect");
    db.query(CREATE, vec![]).await.expect("create");
    db.transaction(vec![Statement::new(
        "INSERT INTO t (id) VALUES (1)",
        vec![],
    )])
    .await
    .expect("tx");
    let path = server.path();
    let dir = server.dir;
    server.handle.shutdown().await;
    let err = db.query("SELECT 1", vec![]).await.expect_err("server gone");
    assert!(
        matches!(err, DbError::ConnectionLost(_) | DbError::Connect(_)),
        "{err:?}"
    );
    // A new server on the same file: the client reconnects on the next call.
    let handle = ars_server::bind(
        &dir.path().join("db.sqlite"),
        &path,
        ArsServerOptions::default(),
    )
    .await
    .expect("rebind");
    let rows = db
        .query("SELECT COUNT(*) FROM t", vec![])
        .await
        .expect("reconnected");
    assert_eq!(rows.scalar_i64(), Some(1));
    handle.shutdown().await;
}

// ---------------------------------------------------------------------------
// The client against a scripted server.

fn rollback(key: &str) -> RequestPayload {
    RequestPayload::SqliteRollback(ars::SqliteRollback {
        lease_key: key.into(),
    })
}

/// Every key a connection used is refused again, whichever way its lease
/// ended (commit, rollback, expiry), and the refusal leaves the connection
/// usable. A Begin that never began (queued behind a lease that expired)
/// frees its key, so it may be sent again.
#[tokio::test]
async fn used_lease_keys_are_refused() {
    let options = ArsServerOptions {
        lease_timeout: Duration::from_millis(100),
        ..Default::default()
    };
    let server = Server::start(options).await;
    let mut raw = Raw::hello(&server.path()).await;
    raw.send(1, None, query(CREATE)).await;
    raw.response().await;
    let refused = |p: &ResponsePayload| matches!(p, ResponsePayload::InvalidLeaseKey(e) if e.message.contains("already used"));
    for (n, end) in [commit("c"), rollback("r")].into_iter().enumerate() {
        let key = if n == 0 { "c" } else { "r" };
        raw.send(10, None, begin_with_timeout(key, 60_000)).await;
        assert_eq!(raw.response().await.1, ResponsePayload::SqliteBeginOk);
        raw.send(11, None, end).await;
        assert!(matches!(
            raw.response().await.1,
            ResponsePayload::SqliteCommitOk | ResponsePayload::SqliteRollbackOk
        ));
        raw.send(12, None, begin(key)).await;
        assert!(refused(&raw.response().await.1), "{key} began twice");
    }
    // Expiry: the holder is told, and the key stays used.
    raw.send(20, None, begin("e")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteBeginOk);
    // Another connection's Begin queued behind it is told the lease
    // expired and never began; its key is free, so sent again it is granted.
    let mut other = Raw::hello(&server.path()).await;
    other.send(1, None, begin("o")).await;
    assert!(matches!(
        other.response().await.1,
        ResponsePayload::LeaseExpired(LeaseExpired {
            timeout_ms: 100,
            ..
        })
    ));
    other.send(3, None, begin("o")).await;
    assert_eq!(other.response().await.1, ResponsePayload::SqliteBeginOk);
    other.send(2, None, commit("o")).await;
    assert_eq!(other.response().await.1, ResponsePayload::SqliteCommitOk);
    raw.send(21, None, commit("e")).await;
    assert!(matches!(
        raw.response().await.1,
        ResponsePayload::LeaseExpired(_)
    ));
    raw.send(22, None, begin("e")).await;
    assert!(
        refused(&raw.response().await.1),
        "an expired key began again"
    );
    // The connection is still usable: a fresh key begins and commits.
    raw.send(23, None, begin("fresh")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteBeginOk);
    raw.send(24, Some("fresh"), query("INSERT INTO t VALUES (1)"))
        .await;
    assert!(matches!(
        raw.response().await.1,
        ResponsePayload::SqliteQueryOk(_)
    ));
    raw.send(25, None, commit("fresh")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteCommitOk);
    server.handle.shutdown().await;
}

/// The table of used keys is bounded: a connection may begin
/// `max_leases_per_connection` leases, then is told (naming the setting)
/// to open a new one, and keeps serving lease-less requests. Keys of any
/// length cost the same.
#[tokio::test]
async fn a_connection_may_begin_only_so_many_leases() {
    let options = ArsServerOptions {
        max_leases_per_connection: 3,
        ..Default::default()
    };
    let server = Server::start(options).await;
    let mut raw = Raw::hello(&server.path()).await;
    let long = "x".repeat(64 * 1024);
    for (n, key) in ["a", "b", long.as_str()].into_iter().enumerate() {
        let id = 2 * n as u32;
        raw.send(id, None, begin(key)).await;
        assert_eq!(raw.response().await.1, ResponsePayload::SqliteBeginOk);
        raw.send(id + 1, None, commit(key)).await;
        assert_eq!(raw.response().await.1, ResponsePayload::SqliteCommitOk);
    }
    raw.send(10, None, begin("d")).await;
    match raw.response().await.1 {
        ResponsePayload::InvalidLeaseKey(e) => {
            assert!(
                e.message.contains("maxLeasesPerConnection"),
                "{}",
                e.message
            )
        }
        other => panic!("a fourth lease began: {other:?}"),
    }
    raw.send(11, None, query("SELECT 7")).await;
    assert_eq!(scalar(&raw.response().await.1), Some(7));
    // A new connection has its own allowance.
    let mut fresh = Raw::hello(&server.path()).await;
    fresh.send(1, None, begin("d")).await;
    assert_eq!(fresh.response().await.1, ResponsePayload::SqliteBeginOk);
    fresh.send(2, None, commit("d")).await;
    assert_eq!(fresh.response().await.1, ResponsePayload::SqliteCommitOk);
    server.handle.shutdown().await;
}

/// A Begin asking for `u64::MAX` ms gets the server's maximum: the writer is
/// free for others once that passes, while the holder is still connected.
#[tokio::test]
async fn a_huge_lease_timeout_is_capped() {
    let options = ArsServerOptions {
        max_lease_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let server = Server::start(options).await;
    let mut hog = Raw::hello(&server.path()).await;
    hog.send(1, None, query(CREATE)).await;
    hog.response().await;
    hog.send(2, None, query("INSERT INTO t (id) VALUES (1)"))
        .await;
    hog.response().await;
    hog.send(3, None, begin_with_timeout("hog", u64::MAX)).await;
    assert_eq!(hog.response().await.1, ResponsePayload::SqliteBeginOk);
    // Queued behind the hog's lease until it expires, the Begin is told so
    // (it never began); sent again, it is granted.
    let mut other = Raw::hello(&server.path()).await;
    other.send(1, None, begin("next")).await;
    assert!(matches!(
        other.response().await.1,
        ResponsePayload::LeaseExpired(LeaseExpired {
            timeout_ms: 200,
            ..
        })
    ));
    other.send(4, None, begin("next")).await;
    assert_eq!(other.response().await.1, ResponsePayload::SqliteBeginOk);
    other
        .send(2, Some("next"), query("SELECT COUNT(*) FROM t"))
        .await;
    assert_eq!(
        scalar(&other.response().await.1),
        Some(1),
        "committed row kept"
    );
    other.send(3, None, commit("next")).await;
    assert_eq!(other.response().await.1, ResponsePayload::SqliteCommitOk);
    hog.send(4, None, commit("hog")).await;
    assert!(matches!(
        hog.response().await.1,
        ResponsePayload::LeaseExpired(LeaseExpired {
            timeout_ms: 200,
            ..
        })
    ));
    server.handle.shutdown().await;
}

/// Connections over the cap are closed as they arrive; the served ones are
/// unaffected, and a freed slot is usable again.
#[tokio::test]
async fn connections_are_capped() {
    let options = ArsServerOptions {
        max_connections: 2,
        ..Default::default()
    };
    let server = Server::start(options).await;
    let a = Raw::hello(&server.path()).await;
    let mut b = Raw::hello(&server.path()).await;
    let mut c = Raw::connect(&server.path()).await;
    let _ = c.stream.write_all(&[0, 0, 0, 2, 1, 0]).await;
    c.expect_closed().await;
    b.send(1, None, query("SELECT 1")).await;
    assert!(matches!(
        b.response().await.1,
        ResponsePayload::SqliteQueryOk(_)
    ));
    drop(a);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut d = Raw::connect(&server.path()).await;
        let _ = d.stream.write_all(&[0, 0, 0, 2, 1, 0]).await;
        if d.payload().await.is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot was never freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.handle.shutdown().await;
}

/// A client that pipelines requests for large results and never reads is
/// closed once its unread responses pass the outbox bound; the server and
/// its committed data are fine.
#[tokio::test]
async fn a_client_that_stops_reading_is_closed() {
    let options = ArsServerOptions {
        max_outbox_bytes: 4 * 1024 * 1024,
        ..Default::default()
    };
    let server = Server::start(options).await;
    let mut setup = Raw::hello(&server.path()).await;
    setup.send(1, None, query(CREATE)).await;
    setup.response().await;
    setup
        .send(2, None, query("INSERT INTO t (id) VALUES (7)"))
        .await;
    setup.response().await;
    let mut greedy = Raw::hello(&server.path()).await;
    for id in 1..=64 {
        greedy
            .send(id, None, query("SELECT randomblob(1000000)"))
            .await;
    }
    // Reading now: whatever was written before the close, then the end.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut answered = 0;
    while greedy.payload().await.is_some() {
        answered += 1;
        assert!(tokio::time::Instant::now() < deadline, "never closed");
    }
    assert!(answered < 64, "all {answered} responses were buffered");
    setup.send(3, None, query("SELECT COUNT(*) FROM t")).await;
    assert_eq!(scalar(&setup.response().await.1), Some(1));
    server.handle.shutdown().await;
}

/// Clients that stop reading share one bound (`max_outbox_bytes_total`):
/// two of them, each well within its own outbox, cannot make the server
/// hold more than that together; the one with the most unread is closed,
/// and the server goes on serving others.
#[tokio::test]
async fn unread_responses_of_all_clients_share_one_bound() {
    let options = ArsServerOptions {
        max_outbox_bytes: 256 * 1024 * 1024,
        max_outbox_bytes_total: 6 * 1024 * 1024,
        ..Default::default()
    };
    let server = Server::start(options).await;
    let mut greedy = Vec::new();
    for _ in 0..2 {
        let mut raw = Raw::hello(&server.path()).await;
        for id in 1..=32 {
            raw.send(id, None, query("SELECT randomblob(1000000)"))
                .await;
        }
        greedy.push(raw);
    }
    // Reading now: a closed client gets what was written before its close,
    // then the end; one left open gets all 32. Together far fewer than the
    // 64 asked for, and at least one was closed.
    let mut answered = 0;
    let mut closed = 0;
    for raw in &mut greedy {
        let mut mine = 0;
        while mine < 32 && raw.payload().await.is_some() {
            mine += 1;
        }
        closed += usize::from(mine < 32);
        answered += mine;
    }
    assert!(closed >= 1, "no client was closed");
    assert!(answered < 40, "{answered} responses were held");
    let mut other = Raw::hello(&server.path()).await;
    other.send(1, None, query("SELECT 5")).await;
    assert_eq!(scalar(&other.response().await.1), Some(5));
    server.handle.shutdown().await;
}

/// A large request frame takes from one inbound budget
/// (`max_inbound_bytes`) before more of it is read: while one client
/// holds the budget with a frame it never finishes, another's large frame
/// waits, small requests are served, and once the first client leaves the
/// waiting frame is answered.
#[tokio::test]
async fn large_request_frames_share_one_inbound_budget() {
    use tokio::io::AsyncWriteExt;
    let options = ArsServerOptions {
        max_inbound_bytes: 1024 * 1024,
        ..Default::default()
    };
    let server = Server::start(options).await;
    // A frame header announcing 1 MiB, and nothing after it.
    let mut holder = Raw::hello(&server.path()).await;
    holder
        .stream
        .write_all(&(1024u32 * 1024).to_be_bytes())
        .await
        .expect("a header");
    let mut waiting = Raw::hello(&server.path()).await;
    let long = format!("SELECT length('{}')", "x".repeat(200_000));
    waiting.send(1, None, query(&long)).await;
    let mut small = Raw::hello(&server.path()).await;
    small.send(1, None, query("SELECT 3")).await;
    assert_eq!(scalar(&small.response().await.1), Some(3));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), waiting.response())
            .await
            .is_err(),
        "a large frame was read while the budget was taken"
    );
    drop(holder);
    let (_, answer) = tokio::time::timeout(Duration::from_secs(30), waiting.response())
        .await
        .expect("answered once the budget was free");
    assert_eq!(scalar(&answer), Some(200_000));
    server.handle.shutdown().await;
}
