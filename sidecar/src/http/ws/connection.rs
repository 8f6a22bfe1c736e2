//! The loop that runs one upgraded `/agents/ws` connection, from its
//! `connected` frame to its close: it registers the socket, starts its
//! writer (`writer.rs`), reads client frames one at a time and answers
//! each in order (`frames.rs`).
//!
//! Any frame, a pong included, counts as a sign of life; a socket that sends
//! nothing for `http.ws.idleTimeoutMs` is closed. Closing sends a close
//! frame (through the writer, after what was queued before the decision)
//! and then waits, at most the idle timeout again, for the client's close
//! reply before the connection is dropped.

use std::sync::Arc;
use std::time::Duration;

use agentos_base::clock::unix_ms;
use agentos_protocol::seed::ws::WsEvent;
use axum::extract::ws::{Message, WebSocket};
use futures_util::StreamExt;
use tokio::time::Instant;

use super::error::WsError;
use super::outbox::{Close, Outbox, CLOSE_IDLE, CLOSE_NORMAL, CLOSE_PROTOCOL, CLOSE_TOO_BIG};
use super::socket::{Index, Socket};
use super::sockets::Permit;
use super::state::WsState;
use super::{frames, writer};
use crate::sessions::Sink;

/// How long a closing socket waits for its close frame to go out and for
/// the client's reply: the idle timeout, so a client is never cut off
/// sooner than it could be for silence.
fn close_wait(state: &WsState) -> Duration {
    Duration::from_millis(state.sockets.limits.idle_timeout_ms)
}

/// Runs one upgraded socket until it closes.
pub(super) async fn run(ws: WebSocket, state: Arc<WsState>, permit: Permit) {
    let sockets = state.sockets.clone();
    let limits = sockets.limits.clone();
    let (outbox, queue) = Outbox::new(limits.max_queued_bytes_per_socket, &sockets.budget);
    let index: Arc<dyn Index> = sockets.clone();
    let socket = Arc::new(Socket::new(permit.id, outbox, Arc::downgrade(&index)));
    sockets.register(socket.clone());
    let (sink, mut stream) = ws.split();
    let idle = Duration::from_millis(limits.idle_timeout_ms);
    let wait = close_wait(&state);
    let mut writer = tokio::spawn(writer::run(
        sink,
        queue,
        Duration::from_millis(limits.ping_interval_ms),
        wait,
    ));
    socket.outbox.frame(
        WsEvent::Connected {
            connected_at: unix_ms(),
        }
        .to_json(),
    );
    let mut closing = socket.outbox.closing();
    let mut heard = Instant::now();
    let mut close_by: Option<Instant> = None;
    let mut reading = true;
    let mut writing = true;
    loop {
        if close_by.is_none() && closing.borrow_and_update().is_some() {
            close_by = Some(Instant::now() + wait);
        }
        if !reading && !writing {
            break;
        }
        let deadline = close_by.unwrap_or(heard + idle);
        tokio::select! {
            _ = closing.changed(), if close_by.is_none() => {}
            _ = tokio::time::sleep_until(deadline) => {
                if close_by.is_some() {
                    break;
                }
                socket.outbox.close(CLOSE_IDLE);
            }
            // The writer ends once the close frame went out (or could
            // not); reading goes on for the client's reply.
            _ = &mut writer, if writing => writing = false,
            next = stream.next(), if reading => match next {
                None => {
                    reading = false;
                    socket.outbox.close(CLOSE_NORMAL);
                }
                Some(Err(e)) => {
                    // The stream cannot be read past a broken frame.
                    reading = false;
                    socket.outbox.close(read_error_close(&e));
                }
                Some(Ok(message)) => {
                    heard = Instant::now();
                    if close_by.is_none() {
                        receive(&state, &socket, message).await;
                    }
                }
            },
        }
    }
    socket.outbox.close(CLOSE_NORMAL);
    if writing {
        writer.abort();
        let _ = writer.await;
    }
    let sink: Arc<dyn Sink> = socket.clone();
    state.sessions.hub().drop_sink(&sink);
    sockets.unregister(&socket);
    drop(permit);
}

/// The close a read error calls for.
fn read_error_close(e: &axum::Error) -> Close {
    let tungstenite =
        std::error::Error::source(e).and_then(|source| source.downcast_ref::<tungstenite::Error>());
    match tungstenite {
        Some(tungstenite::Error::Capacity(_)) => CLOSE_TOO_BIG,
        Some(tungstenite::Error::Protocol(_)) | Some(tungstenite::Error::Utf8(_)) => CLOSE_PROTOCOL,
        _ => CLOSE_NORMAL,
    }
}

/// Handles one client message; refusals become error frames.
async fn receive(state: &WsState, socket: &Arc<Socket>, message: Message) {
    let bytes = match message {
        Message::Binary(bytes) => bytes.to_vec(),
        Message::Text(text) => match serde_json::from_str::<Vec<u8>>(&text) {
            Ok(bytes) => bytes,
            Err(_) => {
                socket.outbox.frame(WsError::BadFrame.frame());
                return;
            }
        },
        // Signs of life only; tungstenite answers pings itself, and a
        // close is answered by the stream ending.
        Message::Ping(_) | Message::Pong(_) | Message::Close(_) => return,
    };
    if let Err(e) = frames::handle(state, socket, &bytes).await {
        socket.outbox.frame(e.frame());
    }
}
