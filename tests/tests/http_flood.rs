//! The signed API's connection bound (`http.maxConnections`) under a flood:
//! connections that send nothing cannot keep out a client that sends a
//! request. At the bound a new connection takes the place of an idle one
//! (one that never sent a request head first, then the one idle longest
//! between requests); only connections inside a request make the next one
//! wait.

mod common;

use agentos_tests::http::{request, Target};
use common::{Backend, Options, Sidecar, PATIENCE};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn with_http(http: serde_json::Value) -> (Sidecar, String) {
    let sc = Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            config: json!({ "http": http }),
            ..Options::default()
        },
    )
    .await;
    let addr = sc.ready["http"].as_str().expect("http").to_owned();
    (sc, addr)
}

/// Raises this process's descriptor limit (the sidecar it starts next
/// inherits it) to at least `needed`, within the hard limit.
fn raise_descriptor_limit(needed: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write only the struct we pass.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < needed {
            limit.rlim_cur = needed.min(limit.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
    assert!(
        limit.rlim_cur >= needed,
        "this test needs {needed} descriptors; the hard limit is {}",
        limit.rlim_max
    );
}

/// Whether the server closed `stream` (end of file, or a reset).
async fn closed(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(PATIENCE, stream.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// One request on a kept-alive connection; the answer's status line.
async fn keep_alive_request(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /api/health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    // The health answer is small and JSON: read until its closing brace.
    while !answer.ends_with(b"}") {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
            .await
            .expect("answered in time")
            .expect("read");
        assert!(n > 0, "closed before answering");
        answer.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// 3,000 connections that never send a byte, against the default bound of
/// 1,024 and a header deadline of ten minutes: a client that sends a
/// request is answered at once (before, it waited for the idle ones'
/// deadline), and so is one right after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_flood_does_not_lock_out_a_client() {
    raise_descriptor_limit(8192);
    let (sc, addr) =
        with_http(json!({"listen": "127.0.0.1:0", "headerReadTimeoutMs": 600_000})).await;
    let mut idle = Vec::with_capacity(3000);
    for _ in 0..3000 {
        idle.push(TcpStream::connect(&addr).await.expect("connect"));
        // At the pace the server accepts: faster, the kernel's queues drop
        // connections that then never reach the server at all (and the
        // bound is never reached).
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let t = Target::from_ready(&addr);
    for _ in 0..2 {
        let health = tokio::time::timeout(PATIENCE, request(&t, "GET", "/api/health", &[], b""))
            .await
            .expect("answered while the flood holds the bound")
            .expect("health");
        assert_eq!(health.status, 200);
    }
    // The oldest idle connections gave their places.
    assert!(closed(&mut idle[0]).await, "the oldest idle one is closed");
    drop(idle);
    drop(sc);
}

/// At the bound, one that never sent a request goes before one that
/// already did and idles between requests; a connection inside a request
/// is never closed for another, and the next waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn who_gives_way_at_the_bound() {
    let (sc, addr) = with_http(json!({
        "listen": "127.0.0.1:0", "maxConnections": 2, "bodyReadTimeoutMs": 600_000,
    }))
    .await;
    let t = Target::from_ready(&addr);
    let mut kept = TcpStream::connect(&addr).await.expect("kept");
    assert!(keep_alive_request(&mut kept)
        .await
        .starts_with("HTTP/1.1 200"));
    // Accepted in the order they connect: this one before the next.
    let mut fresh = TcpStream::connect(&addr).await.expect("fresh");
    let served = request(&t, "GET", "/api/health", &[], b"")
        .await
        .expect("health");
    assert_eq!(served.status, 200);
    assert!(
        closed(&mut fresh).await,
        "the connection that sent nothing gave way"
    );
    assert!(
        keep_alive_request(&mut kept)
            .await
            .starts_with("HTTP/1.1 200"),
        "the kept-alive one was kept"
    );
    // Two connections inside a request (a body that has not arrived) hold
    // both places: the next client waits until one of them ends. Each asks
    // to continue, so the server's `100 Continue` says it is reading the
    // body, inside the request, before the next connects.
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(&addr).await.expect("busy");
        stream
            .write_all(
                b"POST /api/message HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\n\
                  content-type: application/cbor\r\ncontent-length: 100\r\n\r\n",
            )
            .await
            .expect("write");
        let mut answer = Vec::new();
        let mut chunk = [0u8; 256];
        while !answer.ends_with(b"\r\n\r\n") {
            let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
                .await
                .expect("told to continue in time")
                .expect("read");
            assert!(n > 0, "closed instead of continuing");
            answer.extend_from_slice(&chunk[..n]);
        }
        assert!(
            answer.starts_with(b"HTTP/1.1 100"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        busy.push(stream);
    }
    let waiting = tokio::spawn({
        let t = t.clone();
        async move { request(&t, "GET", "/api/health", &[], b"").await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    if waiting.is_finished() {
        let got = waiting.await.expect("join");
        panic!("a request took a busy connection's place: {got:?}");
    }
    for stream in &mut busy {
        let mut byte = [0u8; 1];
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), stream.read(&mut byte))
                .await
                .is_err(),
            "a connection inside a request was closed"
        );
    }
    drop(busy.pop());
    let served = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("served once a busy connection ended")
        .expect("join")
        .expect("health");
    assert_eq!(served.status, 200);
    drop(sc);
}

/// Request bodies share one budget (`http.maxBufferedBodyBytes`): while a
/// client holds all of it with a body it never finishes, another request
/// waits and, past half of `http.bodyReadTimeoutMs`, is answered 503
/// `busy`; once the first is done, requests are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_share_one_budget() {
    let (sc, addr) = with_http(json!({
        "listen": "127.0.0.1:0", "maxBodyBytes": 1 << 20,
        "maxBufferedBodyBytes": 2 << 20, "bodyReadTimeoutMs": 1500,
    }))
    .await;
    let t = Target::from_ready(&addr);
    let mut holder = TcpStream::connect(&addr).await.expect("holder");
    holder
        .write_all(
            b"POST /api/message HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\n\
              content-type: application/cbor\r\ncontent-length: 1048576\r\n\r\n",
        )
        .await
        .expect("write");
    // Told to continue: it holds its share of the budget now.
    let mut head = [0u8; 25];
    tokio::time::timeout(PATIENCE, holder.read_exact(&mut head))
        .await
        .expect("in time")
        .expect("read");
    assert!(head.starts_with(b"HTTP/1.1 100"));
    let refused = agentos_tests::seed::post(&t, &[0xa0]).await;
    assert_eq!((refused.status, refused.code()), (503, "busy".into()));
    drop(holder);
    common::eventually("served again", || async {
        agentos_tests::seed::post(&t, &[0xa0]).await.status == 400
    })
    .await;
    drop(sc);
}
