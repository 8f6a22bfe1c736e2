//! The signed API's transport: the listener (loopback TCP or a private Unix
//! socket), the health routes, 404 for everything else, CORS preflight, a
//! port already in use, and the host socket's `http/request` proxy, which
//! answers exactly as the listener does.

mod common;

use std::os::unix::fs::PermissionsExt;

use agentos_tests::http::{request, Target};
use base64::Engine;
use common::{Backend, Options, Sidecar, PATIENCE};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

async fn with_http(listen: Value) -> Sidecar {
    Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            config: json!({"http": {"listen": listen}}),
            ..Options::default()
        },
    )
    .await
}

fn target(sc: &Sidecar) -> Target {
    Target::from_ready(
        sc.ready["http"]
            .as_str()
            .expect("the ready line names http"),
    )
}

#[tokio::test]
async fn health_answers_json_and_everything_else_is_404() {
    let sc = with_http(json!("127.0.0.1:0")).await;
    let t = target(&sc);
    for path in ["/api/health", "/agents/api/health"] {
        let r = request(&t, "GET", path, &[], b"").await.expect("health");
        assert_eq!(r.status, 200, "{path}");
        let body: Value = serde_json::from_slice(&r.body).expect("JSON");
        assert_eq!(body["status"], "ok");
        assert!(body["uptime"].as_f64().is_some());
        assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(body["protocol"], 2);
        // The reference's boolean: no provider sign-in by OAuth here. How
        // subscriptions are authorized goes under a name of our own.
        assert_eq!(body["subscriptionAuth"], false);
        assert_eq!(body["socketAuth"], "signed");
    }
    for (method, path) in [
        ("GET", "/"),
        ("GET", "/api/version/../health"),
        ("GET", "/api/messages"),
        ("POST", "/api/health/x"),
        ("GET", "/agents/api"),
    ] {
        let r = request(&t, method, path, &[], b"").await.expect("answer");
        assert_eq!(r.status, 404, "{method} {path}");
    }
}

#[tokio::test]
async fn cors_preflight_is_open() {
    let sc = with_http(json!("127.0.0.1:0")).await;
    let r = request(
        &target(&sc),
        "OPTIONS",
        "/api/message",
        &[
            ("origin", "https://app.example"),
            ("access-control-request-method", "POST"),
            ("access-control-request-headers", "content-type"),
        ],
        b"",
    )
    .await
    .expect("preflight");
    assert!(r.status == 200 || r.status == 204, "{}", r.status);
    assert_eq!(r.headers["access-control-allow-origin"], "*");
    let r = request(
        &target(&sc),
        "GET",
        "/api/health",
        &[("origin", "https://app.example")],
        b"",
    )
    .await
    .expect("health");
    assert_eq!(r.headers["access-control-allow-origin"], "*");
}

#[tokio::test]
async fn a_unix_listener_is_private_and_serves() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("api").join("http.sock");
    let sc = with_http(json!(format!("unix:{}", path.display()))).await;
    let mode = std::fs::metadata(&path)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let r = request(&target(&sc), "GET", "/api/health", &[], b"")
        .await
        .expect("health");
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn a_port_in_use_is_a_clear_error_naming_the_setting() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = json!({
        "database": {"type": "sqlite_file", "path": dir.path().join("vm.sqlite")},
        "socket": dir.path().join("h.sock"),
        "http": {"listen": format!("127.0.0.1:{port}")},
    });
    let out = common::serve_until_exit(&config).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("http_bind_failed"), "{stderr}");
    assert!(stderr.contains("http.listen"), "{stderr}");
    assert!(stderr.contains(&port.to_string()), "{stderr}");
    assert!(out.stdout.is_empty(), "no ready line");
}

#[tokio::test]
async fn the_host_proxy_answers_as_the_listener_does() {
    // No listener at all: the API is reached only through the host socket.
    let sc = Sidecar::start(Backend::SqliteFile).await;
    assert!(sc.ready["http"].is_null());
    let answer = sc
        .call(
            "http/request",
            json!({"method": "GET", "path": "/agents/api/health", "headers": {}}),
        )
        .await
        .expect("http/request");
    assert_eq!(answer["status"], 200);
    let body = base64::engine::general_purpose::STANDARD
        .decode(answer["bodyBase64"].as_str().expect("body"))
        .expect("base64");
    let health: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(health["status"], "ok");
    let answer = sc
        .call("http/request", json!({"method": "GET", "path": "/nope"}))
        .await
        .expect("http/request");
    assert_eq!(answer["status"], 404);
    for bad in [
        json!({"method": "GET", "path": "relative"}),
        json!({"method": "G E T", "path": "/api/health"}),
        json!({"method": "POST", "path": "/api/message", "bodyBase64": "!!"}),
        json!({"method": "GET", "path": "/api/health", "headers": {"bad name": "x"}}),
    ] {
        let e = sc
            .call("http/request", bad.clone())
            .await
            .expect_err("refused");
        assert_eq!(e.code(), "rpc_-32602", "{bad}");
    }
}

#[tokio::test]
async fn a_peer_that_sends_no_headers_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sc = Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            config: json!({"http": {"listen": "127.0.0.1:0", "headerReadTimeoutMs": 300}}),
            ..Options::default()
        },
    )
    .await;
    let addr = sc.ready["http"].as_str().expect("http").to_owned();
    for partial in [&b""[..], b"GET /api/health HTTP/1.1\r\nhost: x\r\n"] {
        let mut stream = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        stream.write_all(partial).await.expect("write");
        let mut rest = Vec::new();
        // The server closes it (a 408 may come first); it never hangs.
        tokio::time::timeout(PATIENCE, stream.read_to_end(&mut rest))
            .await
            .expect("closed in time")
            .ok();
    }
    // A kept-alive connection that goes quiet is closed the same way.
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    stream
        .write_all(b"GET /api/health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let mut all = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut all))
        .await
        .expect("closed in time")
        .ok();
    assert!(
        all.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&all)
    );
}

#[tokio::test]
async fn a_body_that_stalls_is_answered_408() {
    use tokio::io::AsyncReadExt;
    let sc = Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            config: json!({"http": {"listen": "127.0.0.1:0", "bodyReadTimeoutMs": 300}}),
            ..Options::default()
        },
    )
    .await;
    let addr = sc.ready["http"].as_str().expect("http").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    // 10 of the 100 bytes announced, then nothing; the stream stays open.
    stream
        .write_all(
            b"POST /api/message HTTP/1.1\r\nhost: x\r\n\
              content-type: application/cbor\r\ncontent-length: 100\r\n\r\n0123456789",
        )
        .await
        .expect("write");
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, async {
        let mut chunk = [0u8; 1024];
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .expect("answered or closed in time");
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // The server is still serving.
    let health = request(&target(&sc), "GET", "/api/health", &[], b"")
        .await
        .expect("health");
    assert_eq!(health.status, 200);
}
