//! `GET /agents/ws`: the signed API's live feed. Server events are JSON
//! text frames (`protocol::seed::ws`); a client sends signed envelopes
//! (binary DAG-CBOR, or text holding a JSON array of byte values) whose
//! action is `Subscribe{key, afterSeq?}` or `Unsubscribe{key}`.
//!
//! Its files form layers, each importing only those below it:
//!
//! 1. `error.rs` the error frames, `outbox.rs` each socket's byte-bounded
//!    queue (the doors' shared outbox) and its close reasons, `feed.rs` the
//!    bounded queue in front of the account-wide feed, `wire.rs` the
//!    server's framing, written with vectored writes, and the read half
//!    tungstenite decodes client frames from;
//! 2. `writer.rs` renders and sends, pings and closes; `socket.rs` one
//!    socket (its account, its keys, its outbox, as a session hub sink);
//! 3. `runs.rs` a run tree's subscription; `sockets.rs` the registry of
//!    open sockets (the `http.ws.maxSockets` cap, the index of keys,
//!    shutdown), which a socket reaches only through `socket::Index`;
//! 4. `changes.rs` the change feed the API's handlers publish to;
//! 5. `account.rs` what `account/<id>` and `agents/<id>` carry besides it
//!    (every frame of the account's agents, each agent's sessions' states);
//! 6. `state.rs` what a socket is served with;
//! 7. `frames.rs` verifies a client frame and subscribes;
//! 8. `connection.rs` runs one socket (the reading loop, idle timeout),
//!    and this file upgrades the request (the RFC 6455 handshake, checked
//!    as a general server does, answered by hand so the connection's
//!    write half is the writer's own).
//!
//! Beside `http::common` (the error shape, the renderers, the envelope
//! check) nothing here imports the rest of the signed door: the API's
//! handlers call into `Sockets`, never the other way. Every bound is an
//! `http.ws.*` setting, or named in its module.

mod account;
mod changes;
mod connection;
mod error;
mod feed;
mod frames;
mod outbox;
mod runs;
mod socket;
mod sockets;
mod state;
mod wire;
mod writer;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderName, Method, StatusCode, Version};
use axum::response::{IntoResponse, Response};

pub use changes::{audience, reason};
pub use error::WsError;
pub use sockets::{Permit, Sockets};
pub use state::WsState;

/// The read buffer of one socket: client frames are small signed
/// envelopes.
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// Why an upgrade request is refused, as the status and text a general
/// WebSocket server answers with.
fn refusal(request: &Request) -> Option<(StatusCode, &'static str)> {
    let headers = request.headers();
    if request.version() > Version::HTTP_11 {
        return Some((
            StatusCode::BAD_REQUEST,
            "a WebSocket upgrade needs HTTP/1.1",
        ));
    }
    if request.method() != Method::GET {
        return Some((
            StatusCode::METHOD_NOT_ALLOWED,
            "Request method must be `GET`",
        ));
    }
    if !has_token(headers, header::CONNECTION, "upgrade") {
        return Some((
            StatusCode::BAD_REQUEST,
            "Connection header did not include 'upgrade'",
        ));
    }
    if !is(headers, header::UPGRADE, "websocket") {
        return Some((
            StatusCode::BAD_REQUEST,
            "`Upgrade` header did not include 'websocket'",
        ));
    }
    if !is(headers, header::SEC_WEBSOCKET_VERSION, "13") {
        return Some((
            StatusCode::BAD_REQUEST,
            "`Sec-WebSocket-Version` header did not include '13'",
        ));
    }
    if !headers.contains_key(header::SEC_WEBSOCKET_KEY) {
        return Some((
            StatusCode::BAD_REQUEST,
            "`Sec-WebSocket-Key` header missing",
        ));
    }
    None
}

/// Whether the header's value is `value`, in any case.
fn is(headers: &HeaderMap, name: HeaderName, value: &str) -> bool {
    headers
        .get(name)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(value.as_bytes()))
}

/// Whether the header's comma-separated list holds `token`, in any case.
fn has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.as_bytes()
            .split(|b| *b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

/// Upgrades a request to a socket, or refuses it: 4xx for a request that
/// is not a WebSocket upgrade, 503 when `http.ws.maxSockets` are open or
/// the server is shutting down.
pub async fn get(state: Arc<WsState>, mut request: Request) -> Response {
    if let Some(refused) = refusal(&request) {
        return refused.into_response();
    }
    let Some(on_upgrade) = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
    else {
        return (
            StatusCode::UPGRADE_REQUIRED,
            "WebSocket request couldn't be upgraded since no upgrade state was present",
        )
            .into_response();
    };
    let accept = request
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .map(|key| tungstenite::handshake::derive_accept_key(key.as_bytes()))
        .and_then(|accept| header::HeaderValue::from_str(&accept).ok());
    let Some(accept) = accept else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let sockets = state.sockets.clone();
    let Some(permit) = sockets.try_open() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no more sockets: http.ws.maxSockets are open, or the server is shutting down",
        )
            .into_response();
    };
    sockets.relay_session_states();
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => connection::run(upgraded, state, permit).await,
            Err(e) => tracing::debug!(error = %e, "a WebSocket upgrade did not complete"),
        }
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("upgrade"),
    );
    headers.insert(
        header::UPGRADE,
        header::HeaderValue::from_static("websocket"),
    );
    headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    response
}
