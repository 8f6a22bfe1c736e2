//! Malformed host input against the real binary: every fault is answered
//! with the standard JSON-RPC code, the connection stays usable where the
//! frame boundary is intact, and the sidecar survives what ends a
//! connection (oversize frames, truncated frames, garbage).

mod common;

use std::path::Path;

use agentos_protocol::host::encode_frame;
use common::{Backend, Options, Sidecar, PATIENCE};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// A bare socket connection that speaks frames by hand.
struct Raw(UnixStream);

impl Raw {
    async fn connect(path: &Path) -> Raw {
        Raw(UnixStream::connect(path).await.expect("connect"))
    }

    async fn send(&mut self, payload: &[u8]) {
        self.0
            .write_all(&encode_frame(payload).expect("a small frame"))
            .await
            .expect("write");
    }

    /// The next frame, `None` at end of stream.
    async fn recv(&mut self) -> Option<Value> {
        tokio::time::timeout(PATIENCE, async {
            let mut len = [0u8; 4];
            if self.0.read_exact(&mut len).await.is_err() {
                return None;
            }
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            self.0.read_exact(&mut body).await.ok()?;
            Some(serde_json::from_slice(&body).expect("the sidecar sends JSON"))
        })
        .await
        .expect("an answer or end of stream in time")
    }

    async fn expect_error(&mut self, payload: &[u8], code: i64) -> Value {
        self.send(payload).await;
        let answer = self.recv().await.expect("an answer");
        assert_eq!(answer["jsonrpc"], "2.0");
        assert_eq!(answer["error"]["code"], code, "{answer}");
        answer
    }

    /// Proves the connection still works.
    async fn ping(&mut self) {
        self.send(br#"{"jsonrpc":"2.0","id":"ping","method":"vm/status"}"#)
            .await;
        let answer = self.recv().await.expect("an answer");
        assert_eq!(answer["id"], "ping");
        assert!(answer["result"]["liveAdapters"].is_u64(), "{answer}");
    }

    async fn expect_closed(&mut self) {
        let mut rest = Vec::new();
        // read_to_end only returns once the peer has closed (or reset) the
        // connection; a connection left open runs into the timeout.
        let _ = tokio::time::timeout(PATIENCE, self.0.read_to_end(&mut rest))
            .await
            .expect("the sidecar closes the connection");
    }
}

#[tokio::test]
async fn standard_errors_keep_the_connection_usable() {
    let sc = Sidecar::start(Backend::SqliteFile).await;
    sc.open("s1", "echo").await;
    let mut raw = Raw::connect(&sc.socket).await;
    let a = raw.expect_error(b"{not json", -32700).await;
    assert_eq!(a["id"], Value::Null);
    raw.ping().await;
    raw.expect_error(
        br#"[{"jsonrpc":"2.0","id":1,"method":"vm/status"}]"#,
        -32600,
    )
    .await;
    let a = raw
        .expect_error(br#"{"id":7,"method":"vm/status"}"#, -32600)
        .await;
    assert_eq!(a["id"], 7);
    let a = raw
        .expect_error(br#"{"jsonrpc":"2.0","id":8,"method":"no/such"}"#, -32601)
        .await;
    assert_eq!(a["id"], 8);
    raw.expect_error(
        br#"{"jsonrpc":"2.0","id":9,"method":"sessions/get","params":{"sessionId":5}}"#,
        -32602,
    )
    .await;
    raw.expect_error(
        br#"{"jsonrpc":"2.0","id":10,"method":"sessions/get","params":{"sessionId":"s1","bogus":true}}"#,
        -32602,
    )
    .await;
    raw.expect_error(
        br#"{"jsonrpc":"2.0","id":11,"method":"sessions/prompt","params":{"sessionId":"s1"}}"#,
        -32602,
    )
    .await;
    raw.expect_error(&[0xff, 0xfe, 0x00, 0x01], -32700).await;
    raw.ping().await;
    assert_eq!(sc.live_adapters().await, 0, "nothing reached an adapter");
}

#[tokio::test]
async fn an_oversize_frame_ends_only_its_connection() {
    let mut sc = Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            limits: json!({"host": {"maxFrameBytes": 1024}}),
            ..Default::default()
        },
    )
    .await;
    let mut raw = Raw::connect(&sc.socket).await;
    raw.ping().await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"sessions/get","params":{{"sessionId":"{}"}}}}"#,
        "x".repeat(4096)
    );
    raw.send(big.as_bytes()).await;
    if let Some(answer) = raw.recv().await {
        assert!(answer["error"]["code"].is_i64(), "{answer}");
        assert_eq!(
            answer["error"]["data"]["setting"],
            "limits.host.maxFrameBytes"
        );
    }
    raw.expect_closed().await;
    assert!(sc.is_running());
    let mut fresh = Raw::connect(&sc.socket).await;
    fresh.ping().await;
    sc.ok("vm/status", json!({})).await;
}

#[tokio::test]
async fn truncated_frames_and_garbage_do_not_hurt_the_sidecar() {
    let mut sc = Sidecar::start(Backend::SqliteFile).await;
    {
        let mut raw = Raw::connect(&sc.socket).await;
        // A header promising 100 bytes, then 10, then hang up.
        raw.0.write_all(&100u32.to_be_bytes()).await.expect("write");
        raw.0.write_all(b"{\"jsonrpc\"").await.expect("write");
    }
    {
        let mut raw = Raw::connect(&sc.socket).await;
        // Not even a whole header.
        raw.0.write_all(&[0, 0]).await.expect("write");
    }
    {
        let mut raw = Raw::connect(&sc.socket).await;
        let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
        let _ = raw.0.write_all(&garbage).await;
        // Whatever the sidecar answers, it ends or keeps this connection;
        // it must not go down.
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(500),
            raw.0.read_to_end(&mut sink),
        )
        .await;
    }
    assert!(sc.is_running());
    let mut fresh = Raw::connect(&sc.socket).await;
    fresh.ping().await;
    sc.open("s1", "echo").await;
    sc.prompt("s1", "echo still here").await.expect("prompt");
}

/// A client that floods one connection with requests is slowed down, not
/// dropped: every request still gets its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_flood_on_one_connection_is_answered_in_full() {
    let sc = Sidecar::start(Backend::SqliteFile).await;
    let mut tasks = Vec::new();
    for i in 0..6000u64 {
        let client = sc.client.clone();
        tasks.push(tokio::spawn(async move {
            let method = if i % 2 == 0 {
                "vm/status"
            } else {
                "agents/list"
            };
            client.call(method, json!({})).await.is_ok()
        }));
    }
    let mut answered = 0;
    for task in tasks {
        if tokio::time::timeout(PATIENCE, task)
            .await
            .expect("answered in time")
            .expect("join")
        {
            answered += 1;
        }
    }
    assert_eq!(answered, 6000);
}
