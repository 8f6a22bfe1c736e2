//! A client frame's action: the envelope verified exactly as over HTTP
//! (signature, window, replay cache, signer), the socket's account bound
//! or checked, then `Subscribe` or `Unsubscribe`.
//!
//! Keys: `account/<id>` must be the socket's own account; `agents/<id>`,
//! `sessions/<id>` and `runs/<rootRunId>` need read access, and a key the
//! account cannot read is answered exactly like one that does not exist.
//! A run tree's subscription is fed by its own task (`runs.rs`). A session subscription
//! sends `subscribed`, a `change` with the session, every retained event
//! after `afterSeq` (all of them when absent) and then live events, through
//! the session hub's replay-then-live, which has no gap and no duplicate.

use std::sync::Arc;

use agentos_protocol::seed::ws::{ChangeValue, WsEvent};
use agentos_protocol::seed::Action;
use tokio::sync::oneshot;

use super::error::WsError;
use super::outbox::{Out, CLOSE_REVOKED};
use super::socket::{Feed, Hold, Socket};
use super::state::WsState;
use crate::control::{authz, AccessRole, ControlError};
use crate::http::common::{render, ApiError};
use crate::sessions::{SessionError, Sink};

/// Longest key accepted.
const MAX_KEY_BYTES: usize = 512;

/// What a key names.
#[derive(Debug, PartialEq, Eq)]
enum Key<'a> {
    Account(&'a str),
    Agent(&'a str),
    Session(&'a str),
    Run(&'a str),
}

fn parse_key(key: &str) -> Result<Key<'_>, WsError> {
    let bad = || WsError::BadKey(key.chars().take(64).collect());
    if key.len() > MAX_KEY_BYTES {
        return Err(bad());
    }
    let (kind, id) = key.split_once('/').ok_or_else(bad)?;
    if id.is_empty() || id.contains('/') {
        return Err(bad());
    }
    match kind {
        "account" => Ok(Key::Account(id)),
        "agents" => Ok(Key::Agent(id)),
        "sessions" => Ok(Key::Session(id)),
        "runs" => Ok(Key::Run(id)),
        _ => Err(bad()),
    }
}

/// Handles the signed envelope in `bytes`.
pub(super) async fn handle(
    state: &WsState,
    socket: &Arc<Socket>,
    bytes: &[u8],
) -> Result<(), WsError> {
    let (envelope, caller) = state.verifier.open(bytes).await?;
    state.sockets.bind(socket, &caller.account)?;
    if socket.note_signer(&caller.signer) && !caller.is_account_key() {
        // A revocation that committed after `open` verified this signer
        // scanned the sockets before the signer was noted here and closed
        // nothing: ask again now that any later revocation will find it.
        let still = state
            .control
            .signer_role(&caller.account, &caller.signer)
            .await
            .map_err(ApiError::from)?;
        if still.is_none() {
            socket.outbox.close(CLOSE_REVOKED);
            return Ok(());
        }
    }
    let action = envelope.typed_action().map_err(ApiError::from)?;
    match action {
        Action::Subscribe { key, after_seq } => {
            subscribe(state, socket, &caller.account, &key, after_seq).await
        }
        Action::Unsubscribe { key } => {
            unsubscribe(state, socket, &key);
            Ok(())
        }
        other => Err(WsError::UnsupportedAction(format!(
            "{} is not sent on /agents/ws (POST it to /api/message)",
            other.name()
        ))),
    }
}

/// Read access or `not_found`, whichever way it was refused.
fn unseen(key: &str) -> impl Fn(ControlError) -> WsError + '_ {
    move |e| match e {
        ControlError::NotFound(_) | ControlError::Forbidden(_) => WsError::NotFound(key.to_owned()),
        other => WsError::Api(other.into()),
    }
}

async fn subscribe(
    state: &WsState,
    socket: &Arc<Socket>,
    account: &str,
    key: &str,
    after_seq: Option<u64>,
) -> Result<(), WsError> {
    let parsed = parse_key(key)?;
    let max = state.sockets.limits.max_subscriptions_per_socket;
    let again = socket.holds(key);
    if !again && socket.held() >= max as usize {
        return Err(WsError::SubscriptionsLimit(max));
    }
    let control = &state.control;
    let subscribed = WsEvent::Subscribed {
        key: key.to_owned(),
        account_id: account.to_owned(),
    }
    .to_json();
    match parsed {
        Key::Account(id) => {
            if id != account {
                return Err(WsError::ForeignAccount(key.to_owned()));
            }
            replace(state, socket, key, Hold::Account);
            state
                .sockets
                .start_feed(control.clone(), state.runs.clone());
            socket.outbox.frame(subscribed);
        }
        Key::Agent(agent_id) => {
            authz::require_read(control, account, agent_id)
                .await
                .map_err(unseen(key))?;
            replace(state, socket, key, Hold::Agent(agent_id.to_owned()));
            state
                .sockets
                .start_feed(control.clone(), state.runs.clone());
            let recheck = authz::require_read(control, account, agent_id).await;
            recheck.map_err(|e| withdraw(state, socket, key, e))?;
            socket.outbox.frame(subscribed);
        }
        Key::Run(root_id) => {
            let runs = &state.runs;
            let missing = |_| WsError::NotFound(key.to_owned());
            let root = runs.get(root_id).await.map_err(missing)?;
            let check = || {
                authz::require_run(
                    control,
                    account,
                    &root.run_id,
                    root.agent_id.as_deref(),
                    root.account_id.as_deref(),
                    AccessRole::Reader,
                )
            };
            check().await.map_err(unseen(key))?;
            // The feed listens before it replays, so nothing falls between.
            let events = runs.subscribe();
            let (start, started) = oneshot::channel();
            let feed = tokio::spawn(super::runs::forward(
                runs.clone(),
                Arc::downgrade(socket),
                key.to_owned(),
                root.root_run_id.clone(),
                after_seq,
                events,
                started,
            ));
            replace(
                state,
                socket,
                key,
                Hold::Run {
                    agent_id: root.agent_id.clone(),
                    feed: Arc::new(Feed(feed.abort_handle())),
                },
            );
            check().await.map_err(|e| withdraw(state, socket, key, e))?;
            if socket.outbox.frame(subscribed) {
                let _ = start.send(());
            }
        }
        Key::Session(session_id) => {
            let (link, _) =
                authz::require_session(control, account, session_id, AccessRole::Reader)
                    .await
                    .map_err(unseen(key))?;
            let sessions = &state.sessions;
            let not_found = |e: SessionError| match e {
                SessionError::NotFound(_) => WsError::NotFound(key.to_owned()),
                other => WsError::Api(other.into()),
            };
            let mut info = sessions.get(session_id).await.map_err(not_found)?;
            let sink: Arc<dyn Sink> = socket.clone();
            // A retained history starts later than the cursor after
            // pruning: the replay starts at what is retained, as GetSession.
            let (sub_id, after, start) = loop {
                let after = after_seq
                    .unwrap_or(0)
                    .max(info.oldest_retained_sequence.saturating_sub(1));
                let (start, started) = oneshot::channel();
                match sessions
                    .subscribe(session_id, Some(after), sink.clone(), started, u64::MAX)
                    .await
                {
                    Ok(sub_id) => break (Arc::<str>::from(sub_id), after, start),
                    // Pruned meanwhile: start at what is retained now.
                    Err(SessionError::HistoryCursorExpired { earliest })
                        if earliest > info.oldest_retained_sequence =>
                    {
                        info.oldest_retained_sequence = earliest;
                    }
                    Err(e) => return Err(not_found(e)),
                }
            };
            replace(
                state,
                socket,
                key,
                Hold::Session {
                    agent_id: link.agent_id.clone(),
                    sub_id: sub_id.clone(),
                },
            );
            // On refusal `start` is dropped unsent: the hub subscription
            // ends before it delivers anything.
            let recheck =
                authz::require_session(control, account, session_id, AccessRole::Reader).await;
            recheck.map_err(|e| withdraw(state, socket, key, e))?;
            let change = WsEvent::Change {
                key: key.to_owned(),
                value: Box::new(ChangeValue::Session(render::session(&info, &link))),
            }
            .to_json();
            let queued = socket.outbox.frame(subscribed)
                && socket.outbox.frame(change)
                && socket
                    .outbox
                    .push(Out::Open {
                        sub_id,
                        key: key.to_owned(),
                        link,
                        after,
                    })
                    .is_ok();
            if queued {
                let _ = start.send(());
            }
            // Otherwise the socket is closing: dropping `start` ends the
            // hub subscription before it delivers anything.
        }
    }
    Ok(())
}

/// Drops a subscription whose access was refused on the check made after
/// it was indexed, without a frame (the client was never told it was
/// subscribed), and answers the refusal.
fn withdraw(state: &WsState, socket: &Arc<Socket>, key: &str, e: ControlError) -> WsError {
    if let Some(hold) = socket.release(key) {
        state.sockets.unindex(socket.id, key, hold.agent());
        if let Hold::Session { sub_id, .. } = &hold {
            state.sessions.hub().unsubscribe(sub_id);
        }
    }
    unseen(key)(e)
}

/// Holds `key` (ending what it held before, for a repeated subscribe) and
/// indexes it for the change feed.
///
/// The caller checks access twice, before and after this: a removal of
/// access commits, then announces itself to the sockets indexed under the
/// agent (`Sockets::agent_changed`). Were access checked only before
/// indexing, a removal committed between the check and the index would be
/// announced to no one and the subscription would outlive it. Checked again
/// after indexing, either that check sees the committed removal, or the
/// removal commits later and its announcement finds this socket indexed.
fn replace(state: &WsState, socket: &Arc<Socket>, key: &str, hold: Hold) {
    let agent = hold.agent().map(str::to_owned);
    if let Some(old) = socket.release(key) {
        end(state, socket, key, &old, None);
    }
    socket.hold(key, hold);
    state.sockets.index(socket.id, key, agent.as_deref());
}

/// Ends what `hold` held; `frame` is sent after the last of it.
pub(super) fn end(
    state: &WsState,
    socket: &Arc<Socket>,
    key: &str,
    hold: &Hold,
    frame: Option<String>,
) {
    state.sockets.unindex(socket.id, key, hold.agent());
    match hold {
        Hold::Session { sub_id, .. } => {
            state.sessions.hub().unsubscribe(sub_id);
            let _ = socket.outbox.push(Out::End {
                sub_id: sub_id.clone(),
                frame,
            });
        }
        Hold::Account | Hold::Agent(_) | Hold::Run { .. } => {
            if let Some(frame) = frame {
                socket.outbox.frame(frame);
            }
        }
    }
}

fn unsubscribe(state: &WsState, socket: &Arc<Socket>, key: &str) {
    let frame = WsEvent::Unsubscribed {
        key: key.to_owned(),
    }
    .to_json();
    match socket.release(key) {
        Some(hold) => end(state, socket, key, &hold, Some(frame)),
        // Unsubscribing from what is not held is already done.
        None => {
            socket.outbox.frame(frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_an_account_an_agent_or_a_session() {
        assert_eq!(parse_key("account/z6Mk"), Ok(Key::Account("z6Mk")));
        assert_eq!(parse_key("agents/a1"), Ok(Key::Agent("a1")));
        assert_eq!(parse_key("sessions/s1"), Ok(Key::Session("s1")));
        assert_eq!(parse_key("runs/r1"), Ok(Key::Run("r1")));
        for bad in ["", "account", "account/", "sessions/a/b", "users/x", "/x"] {
            assert_eq!(parse_key(bad).unwrap_err().code(), "bad_key", "{bad}");
        }
        let long = format!("agents/{}", "x".repeat(MAX_KEY_BYTES));
        assert_eq!(parse_key(&long).unwrap_err().code(), "bad_key");
    }
}
