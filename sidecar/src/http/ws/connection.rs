//! The loop that runs one upgraded `/agents/ws` connection, from its
//! `connected` frame to its close: it registers the socket, starts its
//! writer (`writer.rs`), reads client frames one at a time and answers
//! each in order (`frames.rs`).
//!
//! Any frame, a pong included, counts as a sign of life; a ping is
//! answered with a pong through the outbox, after what is queued before
//! it. A socket that sends nothing for `http.ws.idleTimeoutMs` is closed. Closing sends a close
//! frame (through the writer, after what was queued before the decision)
//! and then waits, at most the idle timeout again, for the client's close
//! reply before the connection is dropped. A close the client starts is
//! answered the same way, and the connection is dropped once the answer
//! is out.

use std::sync::Arc;
use std::time::Duration;

use agentos_base::clock::unix_ms;
use agentos_protocol::seed::ws::WsEvent;
use futures_util::StreamExt;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::Message;

use super::error::WsError;
use super::outbox::{Close, Out, Outbox, CLOSE_IDLE, CLOSE_NORMAL, CLOSE_PROTOCOL, CLOSE_TOO_BIG};
use super::socket::{Index, Socket};
use super::sockets::Permit;
use super::state::WsState;
use super::wire::{ReadOnly, Wire};
use super::{frames, writer, READ_BUFFER_BYTES};
use crate::sessions::Sink;

/// How long a closing socket waits for its close frame to go out and for
/// the client's reply: the idle timeout, so a client is never cut off
/// sooner than it could be for silence.
fn close_wait(state: &WsState) -> Duration {
    Duration::from_millis(state.sockets.limits.idle_timeout_ms)
}

/// Runs one upgraded socket until it closes.
pub(super) async fn run(upgraded: hyper::upgrade::Upgraded, state: Arc<WsState>, permit: Permit) {
    let sockets = state.sockets.clone();
    let limits = sockets.limits.clone();
    let (read, write) = tokio::io::split(TokioIo::new(upgraded));
    let max_frame = usize::try_from(limits.max_frame_bytes).unwrap_or(usize::MAX);
    // The outbox holds the bytes that wait and the writer writes from the
    // rendered frames, so tungstenite only reads: a small read buffer,
    // and no write buffer of its own.
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .write_buffer_size(0)
        .max_frame_size(Some(max_frame))
        .max_message_size(Some(max_frame));
    let mut stream =
        WebSocketStream::from_raw_socket(ReadOnly(read), Role::Server, Some(config)).await;
    let (outbox, queue) = Outbox::new(limits.max_queued_bytes_per_socket, &sockets.budget);
    let index: Arc<dyn Index> = sockets.clone();
    let socket = Arc::new(Socket::new(permit.id, outbox, Arc::downgrade(&index)));
    sockets.register(socket.clone());
    let idle = Duration::from_millis(limits.idle_timeout_ms);
    let wait = close_wait(&state);
    let mut writer = tokio::spawn(writer::run(
        Wire::new(write),
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
                // The client's close, or its reply to ours: nothing follows
                // it. Ours goes out after what was queued (tungstenite's own
                // reply goes nowhere), then the connection is dropped.
                Some(Ok(Message::Close(_))) => {
                    reading = false;
                    socket.outbox.close(CLOSE_NORMAL);
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
fn read_error_close(e: &tungstenite::Error) -> Close {
    match e {
        tungstenite::Error::Capacity(_) => CLOSE_TOO_BIG,
        tungstenite::Error::Protocol(_) | tungstenite::Error::Utf8(_) => CLOSE_PROTOCOL,
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
        // Answered in order with what the socket already queued.
        Message::Ping(payload) => {
            let _ = socket.outbox.push(Out::Pong(payload));
            return;
        }
        // Signs of life only (a close is handled by the reading loop).
        Message::Pong(_) | Message::Close(_) | Message::Frame(_) => return,
    };
    if let Err(e) = frames::handle(state, socket, &bytes).await {
        socket.outbox.frame(e.frame());
    }
}
