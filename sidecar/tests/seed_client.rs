//! The Seed client against small real servers written here: an axum app
//! that records what `POST /api/message` received and answers fixed
//! DAG-CBOR, an axum WebSocket that checks the signed `Subscribe` and sends
//! events, and a host socket that forwards `http/request` through the
//! sidecar's own proxy. What the client sends is checked with the wire
//! layer's decoder and signature check, as the real server does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentos_client::seed::cli::{self, CallOptions, SubscribeOptions, Target};
use agentos_client::seed::{Identity, SeedClient, Transport};
use agentos_protocol::host::{
    decode_message, response_frame, FrameDecoder, HttpRequestParams, Inbound,
};
use agentos_protocol::seed::{cbor, Action, Envelope, Ipld, Principal};
use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, Mutex};

/// A guard against a hang, not a timing assertion: every step here is
/// local and answers at once.
const GUARD: Duration = Duration::from_secs(60);

/// What the HTTP server saw of one request.
#[derive(Debug)]
struct Seen {
    path: String,
    host: Option<String>,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// What the server answers: status, content type, body.
#[derive(Clone)]
struct Answer {
    status: StatusCode,
    content_type: &'static str,
    body: Vec<u8>,
}

struct AppState {
    seen: mpsc::UnboundedSender<Seen>,
    answer: Answer,
}

async fn message(
    State(state): State<Arc<AppState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let _ = state.seen.send(Seen {
        path: uri.path().to_string(),
        host: header("host"),
        content_type: header("content-type"),
        body: body.to_vec(),
    });
    let answer = state.answer.clone();
    (
        answer.status,
        [("content-type", answer.content_type)],
        answer.body,
    )
        .into_response()
}

fn app(answer: Answer) -> (Router, mpsc::UnboundedReceiver<Seen>) {
    let (seen, received) = mpsc::unbounded_channel();
    let router = Router::new()
        .route("/api/message", post(message))
        .with_state(Arc::new(AppState { seen, answer }));
    (router, received)
}

fn cbor_map(entries: &[(&str, Ipld)]) -> Ipld {
    Ipld::Map(
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    )
}

fn cbor_answer(status: StatusCode, body: &Ipld) -> Answer {
    Answer {
        status,
        content_type: "application/cbor",
        body: cbor::to_canonical(body).unwrap(),
    }
}

async fn serve_tcp(router: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

async fn serve_unix(router: Router, path: &Path) {
    let listener = UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
}

/// Decodes and verifies what a client sent, as the server does.
fn verified(bytes: &[u8]) -> Envelope {
    let envelope = Envelope::decode(bytes, 1 << 20).expect("a well-formed envelope");
    envelope.verify_signature().expect("a valid signature");
    envelope
}

#[tokio::test]
async fn call_posts_a_signed_cbor_envelope_and_decodes_the_answer() {
    let reply_body = cbor_map(&[
        ("_", Ipld::String("GetAgentResponse".into())),
        ("blob", Ipld::Bytes(vec![0, 1, 2])),
        ("count", Ipld::Integer(7)),
    ]);
    let (router, mut seen) = app(cbor_answer(StatusCode::OK, &reply_body));
    let addr = serve_tcp(router).await;

    let identity = Identity::generate();
    let signer = identity.principal();
    let account = Identity::generate().principal();
    let client = SeedClient::new(
        Transport::from_url(&format!("http://{addr}")).unwrap(),
        identity,
        Some(account),
    );
    let reply = tokio::time::timeout(
        GUARD,
        client.call_json("GetAgent", &json!({"agentId": "a1"})),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(reply.status, 200);
    assert!(reply.is_success());
    assert_eq!(reply.body, reply_body);
    assert_eq!(reply.kind(), Some("GetAgentResponse"));

    let request = seen.recv().await.unwrap();
    assert_eq!(request.path, "/api/message");
    assert_eq!(request.host.as_deref(), Some(addr.as_str()));
    assert_eq!(request.content_type.as_deref(), Some("application/cbor"));
    let envelope = verified(&request.body);
    assert_eq!(envelope.signer, signer);
    assert_eq!(envelope.account, account);
    assert_eq!(envelope.action_name(), "GetAgent");
    assert_eq!(
        envelope.typed_action().unwrap(),
        Action::GetAgent {
            agent_id: "a1".into()
        }
    );
    assert!(envelope.ts_ms().is_ok());
    // The body is canonical: the server's re-encoding is byte-identical.
    assert_eq!(envelope.encode().unwrap(), request.body);
}

#[tokio::test]
async fn a_typed_action_over_a_unix_socket_defaults_to_the_own_account() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("http.sock");
    let error = cbor_map(&[
        ("_", Ipld::String("Error".into())),
        ("message", Ipld::String("agent not found".into())),
        ("code", Ipld::String("not_found".into())),
    ]);
    let (router, mut seen) = app(cbor_answer(StatusCode::NOT_FOUND, &error));
    serve_unix(router, &socket).await;

    let identity = Identity::generate();
    let own = identity.principal();
    let client = SeedClient::new(
        Transport::from_url(&format!("unix:{}", socket.display())).unwrap(),
        identity,
        None,
    );
    let action = Action::DeleteAgent {
        agent_id: "gone".into(),
    };
    let reply = tokio::time::timeout(GUARD, client.call_action(&action))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply.status, 404);
    assert!(!reply.is_success());
    assert_eq!(reply.error(), Some((Some("not_found"), "agent not found")));

    let request = seen.recv().await.unwrap();
    assert_eq!(request.host.as_deref(), Some("localhost"));
    let envelope = verified(&request.body);
    assert_eq!(envelope.account, own);
    assert_eq!(envelope.signer, own);
    assert_eq!(envelope.typed_action().unwrap(), action);
}

#[tokio::test]
async fn answers_that_are_not_the_api_are_typed_errors() {
    let cases = [
        (
            Answer {
                status: StatusCode::OK,
                content_type: "text/plain",
                body: b"hello".to_vec(),
            },
            "bad_response",
        ),
        (
            Answer {
                status: StatusCode::OK,
                content_type: "application/cbor",
                body: vec![0xbf, 0xff], // an indefinite-length map
            },
            "bad_response",
        ),
        (
            cbor_answer(StatusCode::OK, &Ipld::Bytes(vec![7; 4096])),
            "response_too_large",
        ),
    ];
    for (answer, code) in cases {
        let (router, _seen) = app(answer);
        let addr = serve_tcp(router).await;
        let client = SeedClient::new(Transport::Http { addr }, Identity::generate(), None)
            .with_max_response_bytes(1024);
        let error = tokio::time::timeout(GUARD, client.call_json("ListAgents", &json!({})))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(error.code(), code, "{error}");
    }

    let dir = tempfile::tempdir().unwrap();
    let nowhere = SeedClient::new(
        Transport::HttpUnix {
            path: dir.path().join("absent.sock"),
        },
        Identity::generate(),
        None,
    );
    let error = nowhere
        .call_json("ListAgents", &serde_json::Value::Null)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "io");
    let error = nowhere.subscribe("account/x", None).await.unwrap_err();
    assert_eq!(error.code(), "io");

    let host = SeedClient::new(
        Transport::HostSocket {
            path: dir.path().join("host.sock"),
        },
        Identity::generate(),
        None,
    );
    let error = host.subscribe("account/x", None).await.unwrap_err();
    assert_eq!(error.code(), "unsupported_transport");
}

/// A host socket that answers each `http/request` through the sidecar's
/// proxy into `router`, as a sidecar without a listener does.
async fn serve_host_socket(router: Router, path: &Path) {
    let listener = UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let router = router.clone();
            tokio::spawn(async move {
                let mut decoder = FrameDecoder::new(1 << 24);
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    decoder.push(&buf[..n]);
                    while let Ok(Some(frame)) = decoder.next_frame() {
                        let Inbound::Request { id, method, params } = decode_message(&frame) else {
                            continue;
                        };
                        assert_eq!(method, "http/request");
                        let params: HttpRequestParams = serde_json::from_value(params).unwrap();
                        let result =
                            agentos_sidecar::http::proxy::forward(router.clone(), params, 1 << 20)
                                .await
                                .unwrap();
                        let raw = serde_json::value::to_raw_value(&result).unwrap();
                        let frame = response_frame(&id, Ok(&raw)).unwrap();
                        if stream.write_all(&frame).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
}

fn key_file(dir: &Path) -> (PathBuf, Principal) {
    let path = dir.join("me.key");
    let created = cli::keys_new(&path).unwrap();
    let principal: Principal = created["principal"].as_str().unwrap().parse().unwrap();
    assert_eq!(created["path"], path.display().to_string());
    (path, principal)
}

#[tokio::test]
async fn the_call_command_through_the_host_socket_prints_dag_json() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("host.sock");
    let reply_body = cbor_map(&[
        ("_", Ipld::String("SetSecretResponse".into())),
        ("raw", Ipld::Bytes(vec![1, 2, 3, 255])),
    ]);
    let (router, mut seen) = app(cbor_answer(StatusCode::OK, &reply_body));
    serve_host_socket(router, &socket).await;
    let (key, principal) = key_file(dir.path());
    let account = Identity::generate().principal();

    let options = CallOptions {
        action: "SetSecret".into(),
        key_file: key,
        target: Target::Socket(socket),
        account: Some(account.to_string()),
        json: Some(r#"{"name": "k", "value": {"/": {"bytes": "aGk"}}}"#.into()),
    };
    let (output, success) = tokio::time::timeout(GUARD, cli::call(&options))
        .await
        .unwrap()
        .unwrap();
    assert!(success);
    assert_eq!(
        output,
        json!({
            "status": 200,
            "response": {"_": "SetSecretResponse", "raw": {"/": {"bytes": "AQID/w"}}},
        })
    );
    let request = seen.recv().await.unwrap();
    assert_eq!(request.content_type.as_deref(), Some("application/cbor"));
    let envelope = verified(&request.body);
    assert_eq!(envelope.signer, principal);
    assert_eq!(envelope.account, account);
    assert_eq!(
        envelope.typed_action().unwrap(),
        Action::SetSecret {
            name: "k".into(),
            value: b"hi".to_vec(),
            metadata: None,
        }
    );

    // Bad input from the command line is typed, before anything is sent.
    for (json, account, code) in [
        (Some("{not json"), None, "invalid_json"),
        (Some("[1]"), None, "invalid_json"),
        (Some(r#"{"ts": 5}"#), None, "invalid_json"),
        (None, Some("z-not-a-principal"), "invalid_argument"),
    ] {
        let options = CallOptions {
            json: json.map(str::to_owned),
            account: account.map(str::to_owned),
            ..options.clone()
        };
        let error = cli::call(&options).await.unwrap_err();
        assert_eq!(error.code(), code);
        assert_eq!(cli::error_json(&error)["error"]["code"], code);
    }
}

/// What the WebSocket server received, for the test to check.
#[derive(Debug)]
enum WsSeen {
    Subscribe(Vec<u8>),
    Unsubscribe(Vec<u8>),
    /// The pong that answered our ping.
    Pong(Vec<u8>),
    /// A frame that should not have come.
    Unexpected(String),
}

async fn ws_route(
    State(report): State<mpsc::UnboundedSender<WsSeen>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    upgrade.on_upgrade(move |socket| ws_session(socket, report))
}

/// Plays the server's part: connected; on the signed Subscribe, subscribed,
/// a ping and an append; then waits for both the Unsubscribe and the pong,
/// answers unsubscribed and closes. A Subscribe to `forbidden/…` is
/// answered with an error event instead.
async fn ws_session(mut socket: WebSocket, report: mpsc::UnboundedSender<WsSeen>) {
    let text = |value: serde_json::Value| Message::Text(value.to_string().into());
    if socket
        .send(text(json!({"_": "connected", "connectedAt": 1})))
        .await
        .is_err()
    {
        return;
    }
    let mut unsubscribed = None;
    let mut pong = false;
    while let Some(Ok(message)) = socket.recv().await {
        match message {
            Message::Binary(bytes) => {
                let Ok(envelope) = Envelope::decode(&bytes, 1 << 20) else {
                    let _ = report.send(WsSeen::Unexpected("undecodable".into()));
                    return;
                };
                match envelope.typed_action() {
                    Ok(Action::Subscribe { key, after_seq }) => {
                        let _ = report.send(WsSeen::Subscribe(bytes.to_vec()));
                        if key.starts_with("forbidden/") {
                            let _ = socket
                                .send(text(
                                    json!({"_": "error", "message": "no", "code": "forbidden"}),
                                ))
                                .await;
                            continue;
                        }
                        let seq = after_seq.unwrap_or(0) + 1;
                        let events = [
                            text(json!({
                                "_": "subscribed",
                                "key": key,
                                "accountId": envelope.account.to_string(),
                            })),
                            Message::Ping(Bytes::from_static(b"hi")),
                            text(json!({
                                "_": "append",
                                "key": key,
                                "event": {"id": "e", "sessionId": "s1", "seq": seq,
                                          "event": {"type": "message"}, "createdAt": 2},
                            })),
                        ];
                        for event in events {
                            if socket.send(event).await.is_err() {
                                return;
                            }
                        }
                    }
                    Ok(Action::Unsubscribe { key }) => {
                        let _ = report.send(WsSeen::Unsubscribe(bytes.to_vec()));
                        unsubscribed = Some(key);
                    }
                    other => {
                        let _ = report.send(WsSeen::Unexpected(format!("{other:?}")));
                        return;
                    }
                }
            }
            Message::Pong(payload) => {
                let _ = report.send(WsSeen::Pong(payload.to_vec()));
                pong = true;
            }
            other => {
                let _ = report.send(WsSeen::Unexpected(format!("{other:?}")));
                return;
            }
        }
        if let (Some(key), true) = (&unsubscribed, pong) {
            let _ = socket
                .send(text(json!({"_": "unsubscribed", "key": key})))
                .await;
            let _ = socket.send(Message::Close(None)).await;
            return;
        }
    }
}

fn ws_app() -> (Router, Arc<Mutex<mpsc::UnboundedReceiver<WsSeen>>>) {
    let (report, seen) = mpsc::unbounded_channel();
    let router = Router::new()
        .route("/agents/ws", get(ws_route))
        .with_state(report);
    (router, Arc::new(Mutex::new(seen)))
}

async fn next_seen(seen: &Mutex<mpsc::UnboundedReceiver<WsSeen>>) -> WsSeen {
    seen.lock().await.recv().await.unwrap()
}

#[tokio::test]
async fn subscribe_sends_a_signed_binary_frame_and_reads_events() {
    tokio::time::timeout(GUARD, async {
        let (router, seen) = ws_app();
        let addr = serve_tcp(router).await;
        let identity = Identity::generate();
        let own = identity.principal();
        let client = SeedClient::new(Transport::Http { addr }, identity, None);

        let mut subscription = client.subscribe("sessions/s1", Some(3)).await.unwrap();
        let connected = subscription.next_event().await.unwrap().unwrap();
        assert_eq!(connected, json!({"_": "connected", "connectedAt": 1}));
        let subscribed = subscription.next_event().await.unwrap().unwrap();
        assert_eq!(
            subscribed,
            json!({"_": "subscribed", "key": "sessions/s1", "accountId": own.to_string()})
        );
        // The ping is answered by the WebSocket layer and not shown.
        let append = subscription.next_event().await.unwrap().unwrap();
        assert_eq!(append["_"], "append");
        assert_eq!(append["event"]["seq"], 4);

        let WsSeen::Subscribe(bytes) = next_seen(&seen).await else {
            panic!("the first frame is not the Subscribe");
        };
        let envelope = verified(&bytes);
        assert_eq!(envelope.signer, own);
        assert_eq!(envelope.account, own);
        assert_eq!(
            envelope.typed_action().unwrap(),
            Action::Subscribe {
                key: "sessions/s1".into(),
                after_seq: Some(3)
            }
        );

        subscription.unsubscribe("sessions/s1").await.unwrap();
        let unsubscribed = subscription.next_event().await.unwrap().unwrap();
        assert_eq!(
            unsubscribed,
            json!({"_": "unsubscribed", "key": "sessions/s1"})
        );
        assert_eq!(subscription.next_event().await.unwrap(), None);

        let mut rest = Vec::new();
        while let Ok(item) = seen.lock().await.try_recv() {
            rest.push(item);
        }
        assert!(
            rest.iter()
                .any(|item| matches!(item, WsSeen::Pong(p) if p == b"hi")),
            "{rest:?}"
        );
        let unsubscribe = rest
            .iter()
            .find_map(|item| match item {
                WsSeen::Unsubscribe(bytes) => Some(verified(bytes)),
                _ => None,
            })
            .expect("an Unsubscribe frame");
        assert_eq!(
            unsubscribe.typed_action().unwrap(),
            Action::Unsubscribe {
                key: "sessions/s1".into()
            }
        );
        for item in &rest {
            if let WsSeen::Unexpected(what) = item {
                panic!("the server got an unexpected frame: {what}");
            }
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_subscribe_command_prints_json_lines_over_a_unix_socket() {
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("http.sock");
        let (router, _seen) = ws_app();
        serve_unix(router, &socket).await;
        let (key, principal) = key_file(dir.path());

        let options = SubscribeOptions {
            key: format!("account/{principal}"),
            key_file: key,
            url: format!("unix:{}", socket.display()),
            account: None,
            after_seq: None,
            count: Some(3),
        };
        let mut out = Vec::new();
        cli::subscribe(&options, &mut out).await.unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let names: Vec<&str> = lines.iter().map(|l| l["_"].as_str().unwrap()).collect();
        assert_eq!(names, ["connected", "subscribed", "append"]);
        assert_eq!(lines[1]["accountId"], principal.to_string());

        // A refused subscription prints the error event and fails with it.
        let refused = SubscribeOptions {
            key: "forbidden/x".into(),
            count: None,
            ..options
        };
        let mut out = Vec::new();
        let error = cli::subscribe(&refused, &mut out).await.unwrap_err();
        assert_eq!(error.code(), "server_error");
        assert!(error.to_string().contains("forbidden"), "{error}");
        let printed = String::from_utf8(out).unwrap();
        assert_eq!(printed.lines().count(), 2, "{printed}");
        assert!(printed.lines().last().unwrap().contains("\"error\""));
    })
    .await
    .unwrap();
}
