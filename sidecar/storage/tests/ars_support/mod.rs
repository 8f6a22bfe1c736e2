//! Shared scaffolding of the Actor Runtime Socket tests: a reference server
//! on a temporary socket, a raw client that speaks frames by hand, request
//! builders and a polling helper with a deadline.
#![allow(dead_code, unused_imports)]

pub use std::path::{Path, PathBuf};
pub use std::sync::atomic::{AtomicUsize, Ordering};
pub use std::sync::Arc;
pub use std::time::Duration;

pub use agentos_protocol::ars::{
    self, ClientFrame, FrameDecoder, GoAway, GoAwayReason, InvalidLeaseKey, LeaseExpired,
    QueueFull, Request, RequestPayload, Response, ResponsePayload, ServerFrame, ServerHello,
    SqlError, SqlValue, SqliteBegin, SqliteCommit, SqliteQuery, SqliteQueryOk,
};
pub use agentos_schema::{Database, DbError, Statement};
pub use agentos_storage::actor_uds;
pub use agentos_storage::ars_server::{self, ArsServerHandle, ArsServerOptions};
pub use agentos_storage::SqliteLimits;
pub use bytes::BytesMut;
pub use tokio::io::{AsyncReadExt, AsyncWriteExt};
pub use tokio::net::{UnixListener, UnixStream};

pub struct Server {
    pub dir: tempfile::TempDir,
    pub handle: ArsServerHandle,
}

impl Server {
    pub async fn start(options: ArsServerOptions) -> Server {
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

    pub fn path(&self) -> PathBuf {
        self.handle.socket_path().to_owned()
    }
}

/// A raw client speaking frames by hand.
pub struct Raw {
    pub stream: UnixStream,
    pub buf: BytesMut,
}

impl Raw {
    pub async fn connect(path: &Path) -> Raw {
        let stream = UnixStream::connect(path).await.expect("connect");
        Raw {
            stream,
            buf: BytesMut::new(),
        }
    }

    pub async fn hello(path: &Path) -> Raw {
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

    pub async fn payload(&mut self) -> Option<bytes::Bytes> {
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

    pub async fn frame(&mut self) -> Option<ServerFrame> {
        let p = self.payload().await?;
        Some(ars::decode_server_frame(p).expect("server frame"))
    }

    pub async fn response(&mut self) -> (u32, ResponsePayload) {
        match self.frame().await {
            Some(ServerFrame::Response(Response {
                request_id,
                payload,
            })) => (request_id, payload),
            other => panic!("expected a response, got {other:?}"),
        }
    }

    pub async fn send(
        &mut self,
        request_id: u32,
        lease_key: Option<&str>,
        payload: RequestPayload,
    ) {
        let frame = ClientFrame::Request(Request {
            request_id,
            lease_key: lease_key.map(str::to_owned),
            payload,
        });
        let bytes = ars::client_frame(&frame, u32::MAX).expect("encode");
        self.stream.write_all(&bytes).await.expect("send");
    }

    pub async fn expect_closed(&mut self) {
        let next = self.payload().await;
        assert!(next.is_none(), "expected the server to close, got {next:?}");
    }
}

pub fn begin(key: &str) -> RequestPayload {
    RequestPayload::SqliteBegin(SqliteBegin {
        lease_key: key.into(),
        timeout_ms: None,
    })
}
pub fn begin_with_timeout(key: &str, timeout_ms: u64) -> RequestPayload {
    RequestPayload::SqliteBegin(SqliteBegin {
        lease_key: key.into(),
        timeout_ms: Some(timeout_ms),
    })
}
pub fn commit(key: &str) -> RequestPayload {
    RequestPayload::SqliteCommit(SqliteCommit {
        lease_key: key.into(),
    })
}
pub fn query(sql: &str) -> RequestPayload {
    RequestPayload::SqliteQuery(SqliteQuery {
        sql: sql.into(),
        params: vec![],
    })
}

pub fn scalar(payload: &ResponsePayload) -> Option<i64> {
    match payload {
        ResponsePayload::SqliteQueryOk(ok) => match ok.rows.first()?.first()? {
            SqlValue::SqlInteger(v) => Some(*v),
            _ => None,
        },
        _ => None,
    }
}

/// Generous bound for anything that should happen; only to avoid hangs.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `ready` until it holds; fails the test after `PATIENCE`.
pub async fn until(what: &str, ready: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

pub const CREATE: &str = "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY) STRICT";
