//! One open `/agents/ws` socket: its account (bound by the first verified
//! envelope, never switched), the signer keys that acted on it (so revoking
//! one closes the socket), the keys it holds, its place as a session hub
//! sink, and the reading loop that runs it.
//!
//! The loop reads client frames one at a time and answers each in order.
//! Any frame, a pong included, counts as a sign of life; a socket that sends
//! nothing for `http.ws.idleTimeoutMs` is closed. Closing sends a close
//! frame (through the writer, after what was queued before the decision)
//! and then waits, at most the idle timeout again, for the client's close
//! reply before the connection is dropped.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use agentos_protocol::seed::ws::WsEvent;
use axum::extract::ws::{Message, WebSocket};
use futures_util::StreamExt;
use tokio::time::Instant;

use super::error::WsError;
use super::outbox::{Close, Out, Outbox, CLOSE_IDLE, CLOSE_NORMAL, CLOSE_PROTOCOL, CLOSE_TOO_BIG};
use super::sockets::{Permit, Sockets};
use super::{frames, writer};
use crate::http::HttpState;
use crate::sessions::{Item, Sink, SinkRefusal};

/// What a socket holds under one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Hold {
    Account,
    Agent(String),
    Session {
        agent_id: String,
        sub_id: Arc<str>,
    },
    /// A run tree's feed, forwarded by a task that ends with the hold.
    Run {
        agent_id: Option<String>,
        feed: Arc<Feed>,
    },
}

/// The task forwarding a run tree's events; aborted when the last hold of
/// it goes.
#[derive(Debug)]
pub(super) struct Feed(pub tokio::task::AbortHandle);

impl Drop for Feed {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl PartialEq for Feed {
    fn eq(&self, other: &Feed) -> bool {
        self.0.id() == other.0.id()
    }
}

impl Eq for Feed {}

impl Hold {
    /// The agent whose access this subscription depends on.
    pub(super) fn agent(&self) -> Option<&str> {
        match self {
            Hold::Account => None,
            Hold::Agent(agent_id) | Hold::Session { agent_id, .. } => Some(agent_id),
            Hold::Run { agent_id, .. } => agent_id.as_deref(),
        }
    }
}

#[derive(Default)]
struct State {
    account: Option<String>,
    /// Every key that signed a verified frame here. Each was an unrevoked
    /// signer of `account` when it did, so `limits.control.maxSignersPerAccount`
    /// (plus the account's own key) bounds this set.
    signers: HashSet<String>,
    keys: HashMap<String, Hold>,
}

pub(super) struct Socket {
    pub(super) id: u64,
    pub(super) outbox: Outbox,
    state: Mutex<State>,
    sockets: Weak<Sockets>,
}

impl Socket {
    pub(super) fn new(id: u64, outbox: Outbox, sockets: Weak<Sockets>) -> Socket {
        Socket {
            id,
            outbox,
            state: Mutex::new(State::default()),
            sockets,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The first verified account becomes the socket's; another is
    /// refused. `admit` is asked once, before binding (the per-account cap).
    pub(super) fn bind_account(
        &self,
        account: &str,
        admit: impl FnOnce() -> Result<(), WsError>,
    ) -> Result<(), WsError> {
        let mut state = self.state();
        match &state.account {
            None => {
                admit()?;
                state.account = Some(account.to_owned());
                Ok(())
            }
            Some(bound) if bound == account => Ok(()),
            Some(bound) => Err(WsError::AccountMismatch(bound.clone())),
        }
    }

    /// Remembers that `signer` acted on this socket; true the first time.
    pub(super) fn note_signer(&self, signer: &str) -> bool {
        let mut state = self.state();
        if state.signers.contains(signer) {
            return false;
        }
        state.signers.insert(signer.to_owned())
    }

    /// Whether `signer` acted on this socket for `account`.
    pub(super) fn used_by(&self, account: &str, signer: &str) -> bool {
        let state = self.state();
        state.account.as_deref() == Some(account) && state.signers.contains(signer)
    }

    pub(super) fn account(&self) -> Option<String> {
        self.state().account.clone()
    }

    pub(super) fn holds(&self, key: &str) -> bool {
        self.state().keys.contains_key(key)
    }

    pub(super) fn held(&self) -> usize {
        self.state().keys.len()
    }

    pub(super) fn hold(&self, key: &str, hold: Hold) {
        self.state().keys.insert(key.to_owned(), hold);
    }

    pub(super) fn release(&self, key: &str) -> Option<Hold> {
        self.state().keys.remove(key)
    }

    /// Every key held, with what it holds.
    pub(super) fn keys(&self) -> Vec<(String, Hold)> {
        self.state()
            .keys
            .iter()
            .map(|(k, h)| (k.clone(), h.clone()))
            .collect()
    }

    /// Releases every key that depends on `agent_id`.
    pub(super) fn release_agent(&self, agent_id: &str) -> Vec<(String, Hold)> {
        let mut state = self.state();
        let keys: Vec<String> = state
            .keys
            .iter()
            .filter(|(_, hold)| hold.agent() == Some(agent_id))
            .map(|(key, _)| key.clone())
            .collect();
        keys.into_iter()
            .filter_map(|key| state.keys.remove(&key).map(|hold| (key, hold)))
            .collect()
    }

    /// Releases the key of a session subscription by its hub id.
    fn release_sub(&self, sub_id: &str) -> Option<(String, Hold)> {
        let mut state = self.state();
        let key = state.keys.iter().find_map(|(key, hold)| match hold {
            Hold::Session { sub_id: id, .. } if &**id == sub_id => Some(key.clone()),
            _ => None,
        })?;
        state.keys.remove(&key).map(|hold| (key, hold))
    }
}

impl Sink for Socket {
    fn deliver(&self, subscription_id: &str, item: &Item) -> Result<(), SinkRefusal> {
        self.outbox.push(Out::Item {
            sub_id: Arc::from(subscription_id),
            item: item.clone(),
        })
    }

    fn ended(&self, subscription_id: &str, _session_id: &str, reason: &str, _last: u64) {
        let Some((key, hold)) = self.release_sub(subscription_id) else {
            return;
        };
        if let Some(sockets) = self.sockets.upgrade() {
            sockets.unindex(self.id, &key, hold.agent());
        }
        // Overflow closes the whole socket; anything else is told.
        let frame = (reason != "overflow").then(|| WsError::ended(&key, reason).frame());
        let _ = self.outbox.push(Out::End {
            sub_id: Arc::from(subscription_id),
            frame,
        });
    }
}

/// How long a closing socket waits for its close frame to go out and for
/// the client's reply: the idle timeout, so a client is never cut off
/// sooner than it could be for silence.
fn close_wait(state: &HttpState) -> Duration {
    Duration::from_millis(state.config.ws.idle_timeout_ms)
}

/// Runs one upgraded socket until it closes.
pub(super) async fn run(ws: WebSocket, state: Arc<HttpState>, permit: Permit) {
    let sockets = state.api.sockets.clone();
    let limits = state.config.ws.clone();
    let (outbox, queue) = Outbox::new(limits.max_queued_bytes_per_socket, &sockets.budget);
    let socket = Arc::new(Socket::new(permit.id, outbox, Arc::downgrade(&sockets)));
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
            connected_at: super::now_ms(),
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
    state.api.sessions.hub().drop_sink(&sink);
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
async fn receive(state: &HttpState, socket: &Arc<Socket>, message: Message) {
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
