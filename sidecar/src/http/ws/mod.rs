//! `GET /agents/ws`: the signed API's live feed. Server events are JSON
//! text frames (`protocol::seed::ws`); a client sends signed envelopes
//! (binary DAG-CBOR, or text holding a JSON array of byte values) whose
//! action is `Subscribe{key, afterSeq?}` or `Unsubscribe{key}`.
//!
//! `socket.rs` runs one socket (its account, its keys, the reading loop,
//! idle timeout); `frames.rs` verifies a client frame and subscribes;
//! `writer.rs` renders and sends, pings and closes; `outbox.rs` is the
//! byte-bounded queue between them; `sockets.rs` the registry of open
//! sockets (the `http.ws.maxSockets` cap, the index of keys, shutdown);
//! `changes.rs` the change feed the API's handlers publish to;
//! `account.rs` what `account/<id>` and `agents/<id>` carry besides it
//! (every frame of the account's agents, each agent's sessions' states);
//! `error.rs` the error frames. Every bound is an `http.ws.*` setting, or
//! named in its module.

mod account;
mod changes;
mod error;
mod frames;
mod outbox;
mod runs;
mod socket;
mod sockets;
mod writer;

use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

pub use changes::{audience, reason};
pub use error::WsError;
pub use sockets::{Permit, Sockets};

/// The read and write buffer of one socket.
const SOCKET_BUFFER_BYTES: usize = 8 * 1024;

use super::HttpState;

pub(crate) use agentos_base::clock::unix_ms as now_ms;

/// Upgrades a request to a socket, or refuses it with 503 when
/// `http.ws.maxSockets` are open or the server is shutting down.
pub(super) async fn get(
    State(state): State<Arc<HttpState>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let sockets = state.api.sockets.clone();
    let Some(permit) = sockets.try_open() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no more sockets: http.ws.maxSockets are open, or the server is shutting down",
        )
            .into_response();
    };
    sockets.relay_session_states();
    let max_frame = usize::try_from(state.config.ws.max_frame_bytes).unwrap_or(usize::MAX);
    // Client frames are small signed envelopes and our frames go out one
    // at a time from the outbox (which holds the bytes that wait), so small
    // socket buffers serve; tungstenite's defaults (128 KiB each way) would
    // cost a quarter of a megabyte per socket.
    upgrade
        .read_buffer_size(SOCKET_BUFFER_BYTES)
        .write_buffer_size(SOCKET_BUFFER_BYTES)
        .max_frame_size(max_frame)
        .max_message_size(max_frame)
        .on_upgrade(move |ws| socket::run(ws, state, permit))
}
