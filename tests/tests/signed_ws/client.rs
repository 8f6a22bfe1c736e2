//! WebSocket clients for the `/agents/ws` tests: a polite one (it reads,
//! and so answers pings, as a browser does) and a raw one that reads
//! frames off the TCP stream and never answers anything.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use agentos_tests::seed::{now_ms, Signer};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

use crate::common::{Backend, Options, Sidecar, PATIENCE};
use agentos_tests::http::Target;

/// A sidecar with the signed API on a loopback port and `ws` as its
/// `http.ws` settings; its target and address.
pub async fn start_with(backend: Backend, ws: Value) -> (Sidecar, Target, String) {
    let sc = Sidecar::start_with(
        backend,
        Options {
            config: json!({"http": {"listen": "127.0.0.1:0", "ws": ws}}),
            ..Options::default()
        },
    )
    .await;
    let addr = sc.ready["http"].as_str().expect("http").to_owned();
    (sc, Target::from_ready(&addr), addr)
}

/// Signs `action` with a timestamp no envelope signed here had before:
/// Ed25519 signatures are deterministic, so the same action signed twice in
/// one millisecond would be refused as a replay.
pub fn sign(signer: &Signer, action: &Value) -> Vec<u8> {
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = now_ms();
    let before = LAST
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
            Some(now.max(last + 1))
        })
        .unwrap_or(now);
    signer
        .envelope_at(action, now.max(before + 1))
        .encode()
        .expect("encode")
}

pub struct Ws {
    inner: WebSocketStream<TcpStream>,
    /// Pings received so far.
    pub pings: usize,
}

/// A TCP connection, optionally with a small receive buffer (a client
/// that takes little before it stops the sender).
async fn tcp(addr: &str, recv_buffer: Option<u32>) -> TcpStream {
    let addr: std::net::SocketAddr = addr.parse().expect("a socket address");
    let socket = TcpSocket::new_v4().expect("socket");
    if let Some(size) = recv_buffer {
        socket.set_recv_buffer_size(size).expect("SO_RCVBUF");
    }
    socket.connect(addr).await.expect("connect")
}

impl Ws {
    /// Connects; the answer to the upgrade, or the refusal.
    pub async fn try_open(addr: &str, recv_buffer: Option<u32>) -> Result<Ws, tungstenite::Error> {
        let stream = tcp(addr, recv_buffer).await;
        let (inner, _) =
            tokio_tungstenite::client_async(format!("ws://{addr}/agents/ws"), stream).await?;
        Ok(Ws { inner, pings: 0 })
    }

    /// Connects and reads the `connected` frame.
    pub async fn open(addr: &str) -> Ws {
        Self::open_with(addr, None).await
    }

    pub async fn open_with(addr: &str, recv_buffer: Option<u32>) -> Ws {
        let mut ws = Self::try_open(addr, recv_buffer).await.expect("upgrade");
        let first = ws.next().await;
        assert_eq!(first["_"], "connected", "{first}");
        assert!(first["connectedAt"].as_i64().expect("connectedAt") > 0);
        ws
    }

    pub async fn send(&mut self, message: Message) {
        self.inner.send(message).await.expect("send a frame");
    }

    /// Sends raw envelope bytes as a binary frame.
    pub async fn send_bytes(&mut self, bytes: Vec<u8>) {
        self.send(Message::Binary(bytes.into())).await;
    }

    /// Signs `action` and sends it.
    pub async fn send_action(&mut self, signer: &Signer, action: Value) {
        self.send_bytes(sign(signer, &action)).await;
    }

    /// Subscribes and returns the answer (`subscribed` or `error`).
    pub async fn subscribe(&mut self, signer: &Signer, key: &str, after: Option<u64>) -> Value {
        let mut action = json!({"_": "Subscribe", "key": key});
        if let Some(after) = after {
            action["afterSeq"] = json!(after);
        }
        self.send_action(signer, action).await;
        self.next().await
    }

    /// A subscription that must be accepted.
    pub async fn subscribed(&mut self, signer: &Signer, key: &str, after: Option<u64>) {
        let answer = self.subscribe(signer, key, after).await;
        assert_eq!(answer["_"], "subscribed", "{key}: {answer}");
        assert_eq!(answer["key"], key);
        assert_eq!(answer["accountId"], signer.id());
    }

    /// The next event; pings are counted and skipped, a close panics.
    pub async fn next(&mut self) -> Value {
        loop {
            let message = tokio::time::timeout(PATIENCE, self.inner.next())
                .await
                .expect("no frame in time")
                .expect("the socket ended")
                .expect("read a frame");
            match message {
                Message::Text(text) => return serde_json::from_str(&text).expect("JSON event"),
                Message::Ping(_) => self.pings += 1,
                Message::Close(frame) => panic!("closed: {frame:?}"),
                other => panic!("unexpected frame {other:?}"),
            }
        }
    }

    /// The next event matching `pred` (others are dropped).
    pub async fn next_where(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            let event = self.next().await;
            if pred(&event) {
                return event;
            }
        }
    }

    /// Sends a ping with `payload` and reads until a pong comes back
    /// (events are dropped); the pong's payload.
    pub async fn ping(&mut self, payload: &[u8]) -> Vec<u8> {
        self.send(Message::Ping(payload.to_vec().into())).await;
        loop {
            let message = tokio::time::timeout(PATIENCE, self.inner.next())
                .await
                .expect("no pong in time")
                .expect("the socket ended")
                .expect("read a frame");
            match message {
                Message::Pong(payload) => return payload.to_vec(),
                Message::Close(frame) => panic!("closed: {frame:?}"),
                _ => {}
            }
        }
    }

    /// Whether the stream ends (after a close handshake) within the
    /// client's patience.
    pub async fn ended(&mut self) -> bool {
        loop {
            match tokio::time::timeout(PATIENCE, self.inner.next()).await {
                Err(_) => return false,
                Ok(None) | Ok(Some(Err(_))) => return true,
                Ok(Some(Ok(_))) => {}
            }
        }
    }

    /// Reads frames until `n` pings came.
    pub async fn pinged(&mut self, n: usize) {
        while self.pings < n {
            let message = tokio::time::timeout(PATIENCE, self.inner.next())
                .await
                .expect("no frame in time")
                .expect("the socket ended")
                .expect("read a frame");
            match message {
                Message::Ping(_) => self.pings += 1,
                Message::Close(frame) => panic!("closed: {frame:?}"),
                _ => {}
            }
        }
    }

    /// Reads until the server's close frame: its code and reason, and the
    /// events that came before it.
    pub async fn closed(&mut self) -> (u16, String, Vec<String>) {
        let mut events = Vec::new();
        loop {
            let message = tokio::time::timeout(PATIENCE, self.inner.next())
                .await
                .expect("no close in time");
            match message {
                Some(Ok(Message::Close(Some(frame)))) => {
                    return (u16::from(frame.code), frame.reason.to_string(), events)
                }
                Some(Ok(Message::Close(None))) => {
                    return (u16::from(CloseCode::Status), String::new(), events)
                }
                Some(Ok(Message::Text(text))) => events.push(text.to_string()),
                Some(Ok(_)) => {}
                other => panic!("the socket ended without a close frame: {other:?}"),
            }
        }
    }

    /// Waits until everything sent so far was handled: a subscription to
    /// the socket's own account is answered after every frame before it.
    /// Returns the events that came first.
    pub async fn barrier(&mut self, signer: &Signer) -> Vec<Value> {
        let key = format!("account/{}", signer.id());
        self.send_action(signer, json!({"_": "Subscribe", "key": key}))
            .await;
        let mut before = Vec::new();
        loop {
            let event = self.next().await;
            if event["_"] == "subscribed" && event["key"] == key.as_str() {
                return before;
            }
            before.push(event);
        }
    }
}

/// A client that completes the upgrade and then only reads raw frames:
/// it never answers a ping.
pub struct Deaf {
    stream: TcpStream,
}

impl Deaf {
    pub async fn open(addr: &str) -> Deaf {
        Self::open_with(addr, None).await
    }

    /// Opens with a receive buffer of `recv_buffer` bytes, when given.
    pub async fn open_with(addr: &str, recv_buffer: Option<u32>) -> Deaf {
        let mut stream = tcp(addr, recv_buffer).await;
        let request = format!(
            "GET /agents/ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.expect("upgrade");
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            stream.read_exact(&mut byte).await.expect("the answer");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 101"), "{head}");
        // RFC 6455's own example key and answer.
        assert!(
            head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=\r\n"),
            "{head}"
        );
        Deaf { stream }
    }

    /// Writes raw bytes to the connection.
    pub async fn write_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// One server frame: its opcode and payload.
    async fn frame(&mut self) -> (u8, Vec<u8>) {
        let mut head = [0u8; 2];
        self.stream.read_exact(&mut head).await.expect("a frame");
        let len = match head[1] & 0x7f {
            126 => {
                let mut n = [0u8; 2];
                self.stream.read_exact(&mut n).await.expect("length");
                u64::from(u16::from_be_bytes(n))
            }
            127 => {
                let mut n = [0u8; 8];
                self.stream.read_exact(&mut n).await.expect("length");
                u64::from_be_bytes(n)
            }
            n => u64::from(n),
        };
        let mut payload = vec![0u8; usize::try_from(len).expect("a small frame")];
        self.stream
            .read_exact(&mut payload)
            .await
            .expect("the payload");
        (head[0] & 0x0f, payload)
    }

    /// Reads until the close frame: its code and reason, and the pings
    /// before it (none of which was answered).
    pub async fn closed(&mut self) -> (u16, String, usize) {
        let mut pings = 0;
        let read = async {
            loop {
                match self.frame().await {
                    (0x8, payload) => {
                        let code = u16::from_be_bytes([payload[0], payload[1]]);
                        let reason = String::from_utf8_lossy(&payload[2..]).into_owned();
                        return (code, reason, pings);
                    }
                    (0x9, _) => pings += 1,
                    _ => {}
                }
            }
        };
        tokio::time::timeout(PATIENCE + Duration::from_secs(5), read)
            .await
            .expect("no close in time")
    }
}

/// Sends one raw HTTP/1.1 request head to `/agents/ws` and returns the
/// answer's status code.
pub async fn upgrade_status(addr: &str, method: &str, headers: &str) -> u16 {
    let mut stream = tcp(addr, None).await;
    let request = format!(
        "{method} /agents/ws HTTP/1.1\r\nHost: {addr}\r\n{headers}Content-Length: 0\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("request");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n") {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.expect("the answer");
        head.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&head);
    line.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {line}"))
}

/// A client frame: FIN, `opcode`, masked `payload` (at most 125 bytes).
pub fn masked(opcode: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() <= 125);
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x80 | opcode, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}
