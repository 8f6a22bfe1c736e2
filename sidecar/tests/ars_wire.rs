//! Actor Runtime Socket v1 on the wire: raw-socket tests against the
//! reference server, and client tests against a small scripted server.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentos_protocol::ars::{
    self, ClientFrame, FrameDecoder, GoAway, GoAwayReason, InvalidLeaseKey, LeaseExpired,
    QueueFull, Request, RequestPayload, Response, ResponsePayload, ServerFrame, ServerHello,
    SqlError, SqlValue, SqliteBegin, SqliteCommit, SqliteQuery, SqliteQueryOk,
};
use agentos_schema::{Database, DbError, Statement};
use agentos_sidecar::config::SqliteLimits;
use agentos_sidecar::db::actor_uds;
use agentos_sidecar::db::ars_server::{self, ArsServerHandle, ArsServerOptions};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

struct Server {
    dir: tempfile::TempDir,
    handle: ArsServerHandle,
}

impl Server {
    async fn start(options: ArsServerOptions) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("ars-wire")
            .tempdir()
            .expect("tempdir");
        let handle = ars_server::bind(
            &dir.path().join("db.sqlite"),
            &dir.path().join("sock").join("s.sock"),
            options,
        )
        .await
        .expect("bind");
        Server { dir, handle }
    }

    fn path(&self) -> PathBuf {
        self.handle.socket_path().to_owned()
    }
}

/// A raw client speaking frames by hand.
struct Raw {
    stream: UnixStream,
    buf: BytesMut,
}

impl Raw {
    async fn connect(path: &Path) -> Raw {
        let stream = UnixStream::connect(path).await.expect("connect");
        Raw {
            stream,
            buf: BytesMut::new(),
        }
    }

    async fn hello(path: &Path) -> Raw {
        let mut raw = Raw::connect(path).await;
        raw.stream
            .write_all(&[0, 0, 0, 2, 1, 0])
            .await
            .expect("hello");
        let payload = raw.payload().await.expect("hello reply");
        assert!(matches!(
            ars::decode_server_hello(payload).expect("decode"),
            ServerHello::HelloOk(_)
        ));
        raw
    }

    async fn payload(&mut self) -> Option<bytes::Bytes> {
        let decoder = FrameDecoder::new(u32::MAX);
        loop {
            if let Some(p) = decoder.decode(&mut self.buf).expect("frame") {
                return Some(p);
            }
            let n =
                tokio::time::timeout(Duration::from_secs(10), self.stream.read_buf(&mut self.buf))
                    .await
                    .expect("server answered")
                    .unwrap_or(0);
            if n == 0 {
                return None;
            }
        }
    }

    async fn frame(&mut self) -> Option<ServerFrame> {
        let p = self.payload().await?;
        Some(ars::decode_server_frame(p).expect("server frame"))
    }

    async fn response(&mut self) -> (u32, ResponsePayload) {
        match self.frame().await {
            Some(ServerFrame::Response(Response {
                request_id,
                payload,
            })) => (request_id, payload),
            other => panic!("expected a response, got {other:?}"),
        }
    }

    async fn send(&mut self, request_id: u32, lease_key: Option<&str>, payload: RequestPayload) {
        let frame = ClientFrame::Request(Request {
            request_id,
            lease_key: lease_key.map(str::to_owned),
            payload,
        });
        let bytes = ars::client_frame(&frame, u32::MAX).expect("encode");
        self.stream.write_all(&bytes).await.expect("send");
    }

    async fn expect_closed(&mut self) {
        let next = self.payload().await;
        assert!(next.is_none(), "expected the server to close, got {next:?}");
    }
}

fn begin(key: &str) -> RequestPayload {
    RequestPayload::SqliteBegin(SqliteBegin {
        lease_key: key.into(),
        timeout_ms: None,
    })
}
fn commit(key: &str) -> RequestPayload {
    RequestPayload::SqliteCommit(SqliteCommit {
        lease_key: key.into(),
    })
}
fn query(sql: &str) -> RequestPayload {
    RequestPayload::SqliteQuery(SqliteQuery {
        sql: sql.into(),
        params: vec![],
    })
}

fn scalar(payload: &ResponsePayload) -> Option<i64> {
    match payload {
        ResponsePayload::SqliteQueryOk(ok) => match ok.rows.first()?.first()? {
            SqlValue::SqlInteger(v) => Some(*v),
            _ => None,
        },
        _ => None,
    }
}

/// Generous bound for anything that should happen; only to avoid hangs.
const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `ready` until it holds; fails the test after `PATIENCE`.
async fn until(what: &str, ready: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

const CREATE: &str = "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY) STRICT";

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
    // Lease-less work waits while the lease holds the writer.
    raw.send(2, None, query("SELECT 2")).await;
    raw.send(3, Some("k1"), query("SELECT 3")).await;
    raw.send(4, None, commit("k1")).await;
    let mut order = Vec::new();
    for _ in 0..4 {
        let (id, payload) = raw.response().await;
        if id == 2 || id == 3 {
            assert_eq!(scalar(&payload), Some(i64::from(id)));
        }
        order.push(id);
    }
    assert_eq!(order, vec![1, 3, 4, 2]);
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
    // A finished lease's key is forgotten: it may begin a new lease.
    raw.send(8, None, begin("k")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteBeginOk);
    raw.send(108, None, commit("k")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteCommitOk);

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
async fn closing_mid_transaction_rolls_back() {
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
    b.send(1, None, begin("k2")).await;
    drop(a);
    // B's Begin can only be granted once A's lease has been rolled back.
    assert_eq!(b.response().await.1, ResponsePayload::SqliteBeginOk);
    b.send(2, Some("k2"), query("SELECT COUNT(*) FROM t")).await;
    assert_eq!(scalar(&b.response().await.1), Some(0));
    b.send(3, None, commit("k2")).await;
    assert_eq!(b.response().await.1, ResponsePayload::SqliteCommitOk);
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

fn begin_with_timeout(key: &str, timeout_ms: u64) -> RequestPayload {
    RequestPayload::SqliteBegin(SqliteBegin {
        lease_key: key.into(),
        timeout_ms: Some(timeout_ms),
    })
}

fn rollback(key: &str) -> RequestPayload {
    RequestPayload::SqliteRollback(ars::SqliteRollback {
        lease_key: key.into(),
    })
}

/// A long-lived connection reusing one key: each ended lease (commit,
/// rollback, expiry) is forgotten, so the table does not grow per
/// transaction and the key can begin again.
#[tokio::test]
async fn ended_lease_keys_are_forgotten() {
    let options = ArsServerOptions {
        lease_timeout: Duration::from_millis(100),
        ..Default::default()
    };
    let server = Server::start(options).await;
    let mut raw = Raw::hello(&server.path()).await;
    raw.send(1, None, query(CREATE)).await;
    raw.response().await;
    let mut id = 2;
    for round in 0..50 {
        raw.send(id, None, begin_with_timeout("k", 60_000)).await;
        assert_eq!(raw.response().await.1, ResponsePayload::SqliteBeginOk);
        let end = if round % 2 == 0 {
            commit("k")
        } else {
            rollback("k")
        };
        raw.send(id + 1, None, end).await;
        assert!(matches!(
            raw.response().await.1,
            ResponsePayload::SqliteCommitOk | ResponsePayload::SqliteRollbackOk
        ));
        id += 2;
    }
    // Expiry: the holder is told, then the key is forgotten too.
    raw.send(id, None, begin("k")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteBeginOk);
    // Another connection's Begin is granted only after the expiry.
    let mut other = Raw::hello(&server.path()).await;
    other.send(1, None, begin("o")).await;
    assert_eq!(other.response().await.1, ResponsePayload::SqliteBeginOk);
    other.send(2, None, commit("o")).await;
    assert_eq!(other.response().await.1, ResponsePayload::SqliteCommitOk);
    raw.send(id + 1, None, commit("k")).await;
    assert!(matches!(
        raw.response().await.1,
        ResponsePayload::LeaseExpired(_)
    ));
    raw.send(id + 2, None, begin("k")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteBeginOk);
    raw.send(id + 3, None, commit("k")).await;
    assert_eq!(raw.response().await.1, ResponsePayload::SqliteCommitOk);
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
    let mut other = Raw::hello(&server.path()).await;
    other.send(1, None, begin("next")).await;
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
