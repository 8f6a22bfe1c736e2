//! The sidecar on Rivet's real actor runtime, launched with one `actor_uds`
//! descriptor naming the socket a real actor provisioned, and default
//! limits: it starts, serves sessions and a turn, its tables and events are
//! in the actor's own database, and it survives SIGTERM, SIGKILL and
//! restarts on the same socket with its history whole.

mod common;

use common::{text_of, Backend, Options, Sidecar};
use serde_json::{json, Value};

fn count(rows: &[Value]) -> i64 {
    rows.first()
        .and_then(|row| row["n"].as_i64())
        .unwrap_or_else(|| panic!("a count: {rows:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_and_restarts_on_the_real_runtime() {
    let mut sc = Sidecar::start(Backend::Rivet).await;
    assert_eq!(sc.database["type"], "actor_uds");
    sc.open("s", "echo").await;
    let done = sc.prompt("s", "stream 5").await.expect("a turn");
    assert_eq!(done["stopReason"], "end_turn", "{done}");
    let history = sc.history("s").await;
    assert!(history.len() >= 2, "{history:?}");

    // The three schema owners' tables and the session's events are in the
    // actor's own database, as its own code sees it.
    let tables = sc
        .actor_query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .await;
    let names: Vec<&str> = tables.iter().filter_map(|t| t["name"].as_str()).collect();
    for owner in ["agentos_fs_", "agentos_core_", "agentos_actor_"] {
        assert!(
            names.iter().any(|n| n.starts_with(owner)),
            "no {owner}* table in {names:?}"
        );
    }
    let stored = sc
        .actor_query("SELECT COUNT(*) AS n FROM agentos_core_events WHERE session_id = 's'")
        .await;
    assert_eq!(count(&stored) as usize, history.len());

    // SIGTERM: a clean exit, and nothing of ours is left in the runtime's
    // shared socket directory; a new sidecar on the same socket keeps it all.
    let status = sc.terminate().await;
    assert!(status.success(), "{status:?}");
    // (Other tests' actors share that directory: only names that start with
    // this actor's socket are ours, and its sessions directory stays.)
    let socket = std::path::PathBuf::from(sc.database["path"].as_str().expect("a path"));
    let runtime_dir = socket.parent().expect("the socket's directory");
    let socket_name = socket
        .file_name()
        .expect("a socket name")
        .to_string_lossy()
        .into_owned();
    let mut ours: Vec<String> = std::fs::read_dir(runtime_dir)
        .expect("the runtime's socket directory")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&socket_name) && *name != socket_name)
        .collect();
    ours.sort();
    assert_eq!(
        ours,
        vec![format!("{socket_name}.sessions")],
        "in {}",
        runtime_dir.display()
    );
    let sc = sc.restart(Options::default()).await;
    assert_eq!(sc.history("s").await, history);
    sc.prompt("s", "echo after restart")
        .await
        .expect("a turn after the restart");

    // SIGKILL: nothing shut down; the next sidecar finds every committed
    // event, and the actor's database agrees.
    let before_kill = sc.history("s").await;
    let sc = sc.crash(Options::default()).await;
    let after = sc.history("s").await;
    assert_eq!(after, before_kill);
    assert_eq!(text_of(after.last().expect("an event")), "after restart");
    let stored = sc
        .actor_query("SELECT COUNT(*) AS n FROM agentos_core_events WHERE session_id = 's'")
        .await;
    assert_eq!(count(&stored) as usize, after.len());
    sc.prompt("s", "echo after the crash")
        .await
        .expect("a turn after the crash");
}

/// The files the VM writes live in the actor's database too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vfs_lives_in_the_actors_database() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let sc = Sidecar::start(Backend::Rivet).await;
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    sc.ok("fs/mkdir", json!({"path": "/notes"})).await;
    let stat = sc
        .ok(
            "fs/write",
            json!({"path": "/notes/big.bin", "data": b64.encode(&body)}),
        )
        .await;
    assert_eq!(stat["size"], body.len());
    let read = sc
        .ok(
            "fs/read",
            json!({"path": "/notes/big.bin", "offset": 1000, "length": 5000}),
        )
        .await;
    let part = b64
        .decode(read["data"].as_str().expect("data"))
        .expect("base64");
    assert_eq!(part, body[1000..6000]);
    let inodes = sc
        .actor_query("SELECT COUNT(*) AS n FROM agentos_fs_inodes")
        .await;
    assert!(count(&inodes) >= 2, "the root and the file: {inodes:?}");
}

/// A raw Actor Runtime Socket client: hello, then one request at a time.
struct RawSocket {
    stream: tokio::net::UnixStream,
    buf: bytes::BytesMut,
}

impl RawSocket {
    async fn hello(path: &std::path::Path) -> RawSocket {
        use tokio::io::AsyncWriteExt;
        let mut raw = RawSocket {
            stream: tokio::net::UnixStream::connect(path)
                .await
                .expect("connect"),
            buf: bytes::BytesMut::new(),
        };
        let hello = agentos_protocol::ars::client_hello_frame().expect("hello");
        raw.stream.write_all(&hello).await.expect("send the hello");
        let payload = raw.payload().await;
        assert!(matches!(
            agentos_protocol::ars::decode_server_hello(payload).expect("a hello"),
            agentos_protocol::ars::ServerHello::HelloOk(_)
        ));
        raw
    }

    async fn payload(&mut self) -> bytes::Bytes {
        use tokio::io::AsyncReadExt;
        let decoder = agentos_protocol::ars::FrameDecoder::new(u32::MAX);
        loop {
            if let Some(payload) = decoder.decode(&mut self.buf).expect("a frame") {
                return payload;
            }
            let read = tokio::time::timeout(common::PATIENCE, self.stream.read_buf(&mut self.buf))
                .await
                .expect("the server answers")
                .expect("read");
            assert!(read > 0, "the server closed the socket");
        }
    }

    async fn call(
        &mut self,
        request_id: u32,
        payload: agentos_protocol::ars::RequestPayload,
    ) -> agentos_protocol::ars::ResponsePayload {
        use agentos_protocol::ars::{self, ClientFrame, Request, ServerFrame};
        use tokio::io::AsyncWriteExt;
        let frame = ClientFrame::Request(Request {
            request_id,
            lease_key: None,
            payload,
        });
        let bytes = ars::client_frame(&frame, u32::MAX).expect("encode");
        self.stream.write_all(&bytes).await.expect("send");
        match ars::decode_server_frame(self.payload().await).expect("a server frame") {
            ServerFrame::Response(response) => {
                assert_eq!(response.request_id, request_id);
                response.payload
            }
            other => panic!("expected a response, got {other:?}"),
        }
    }
}

/// On Rivet's own server: a lease-less write and a transaction parked
/// behind another connection's lease that expires are answered
/// `LeaseExpired` without running; the handle sends them again and each
/// lands exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_never_ran_behind_an_expired_lease_is_sent_again() {
    use agentos_protocol::ars::{RequestPayload, ResponsePayload, SqliteBegin, SqliteCommit};
    use agentos_schema::{Database, SqlValue, Statement};
    use agentos_sidecar::config::SqliteLimits;
    use agentos_storage::actor_uds;
    use std::sync::Arc;

    let key = uuid::Uuid::new_v4().to_string();
    let socket = common::rivet()
        .provision_async(key.clone())
        .await
        .expect("an actor");
    let db = Arc::new(
        actor_uds::connect(&socket, &SqliteLimits::default())
            .await
            .expect("the handle connects"),
    );
    db.query(
        "CREATE TABLE parked (id INTEGER PRIMARY KEY) STRICT",
        vec![],
    )
    .await
    .expect("create");
    let mut holder = RawSocket::hello(&socket).await;
    let begun = holder
        .call(
            1,
            RequestPayload::SqliteBegin(SqliteBegin {
                lease_key: "held".into(),
                timeout_ms: Some(500),
            }),
        )
        .await;
    assert_eq!(begun, ResponsePayload::SqliteBeginOk);
    let plain = {
        let db = db.clone();
        tokio::spawn(async move { db.query("INSERT INTO parked (id) VALUES (1)", vec![]).await })
    };
    let leased = {
        let db = db.clone();
        tokio::spawn(async move {
            db.transaction(vec![
                Statement::new(
                    "INSERT INTO parked (id) VALUES (?1)",
                    vec![SqlValue::Integer(2)],
                ),
                Statement::new(
                    "INSERT INTO parked (id) VALUES (?1)",
                    vec![SqlValue::Integer(3)],
                ),
            ])
            .await
        })
    };
    plain.await.expect("task").expect("the insert lands");
    leased.await.expect("task").expect("the transaction lands");
    let committed = holder
        .call(
            2,
            RequestPayload::SqliteCommit(SqliteCommit {
                lease_key: "held".into(),
            }),
        )
        .await;
    assert!(
        matches!(committed, ResponsePayload::LeaseExpired(_)),
        "{committed:?}"
    );
    let rows = common::rivet()
        .query_async(key, "SELECT group_concat(id) AS ids FROM parked".into())
        .await
        .expect("the actor's own read");
    assert_eq!(rows[0]["ids"], "1,2,3");
    db.close().await;
}
