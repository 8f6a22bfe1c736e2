//! `GET /agents/ws`: the signed API's live feed. Server events are JSON
//! text frames (`protocol::seed::ws`); a client sends signed envelopes
//! (binary DAG-CBOR, or text holding a JSON array of byte values) whose
//! action is `Subscribe{key, afterSeq?}` or `Unsubscribe{key}`.
//!
//! Its files form layers, each importing only those below it:
//!
//! 1. `error.rs` the error frames, `outbox.rs` each socket's byte-bounded
//!    queue (the doors' shared outbox) and its close reasons, `feed.rs` the
//!    bounded queue in front of the account-wide feed;
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
//!    and this file upgrades the request.
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
mod writer;

use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

pub use changes::{audience, reason};
pub use error::WsError;
pub use sockets::{Permit, Sockets};
pub use state::WsState;

/// The read buffer of one socket: client frames are small signed
/// envelopes.
const READ_BUFFER_BYTES: usize = 8 * 1024;
/// What a socket's writer gathers before one write: a burst's frames go
/// out a few dozen per system call, not a few.
const WRITE_BUFFER_BYTES: usize = 32 * 1024;

/// Upgrades a request to a socket, or refuses it with 503 when
/// `http.ws.maxSockets` are open or the server is shutting down.
pub async fn get(
    state: Arc<WsState>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
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
    let max_frame = usize::try_from(sockets.limits.max_frame_bytes).unwrap_or(usize::MAX);
    // The outbox holds the bytes that wait, so the socket's own buffers
    // stay small; tungstenite's defaults (128 KiB each way) would cost a
    // quarter of a megabyte per socket.
    upgrade
        .read_buffer_size(READ_BUFFER_BYTES)
        .write_buffer_size(WRITE_BUFFER_BYTES)
        .max_frame_size(max_frame)
        .max_message_size(max_frame)
        .on_upgrade(move |ws| connection::run(ws, state, permit))
}
