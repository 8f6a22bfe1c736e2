//! The change feed: `change` events the signed API's handlers publish
//! after a successful write, and the session states the session service
//! announces, delivered to the sockets holding the matching key.
//!
//! - `account/<id>`: `{reason, agentId?, sessionId?}` for the owner and
//!   every accepted collaborator of the agent concerned (an invitation
//!   goes to the invitee); one naming an agent also reaches the account's
//!   sockets on `agents/<agentId>`, under the `account/<id>` key, as the
//!   reference sends it. The account's sockets also get each of its
//!   agents' `change` (below); its other frames are `account.rs`'s.
//! - `agents/<id>`: the agent as each subscriber may see it (its own
//!   `accessRole`). A change of who may read an agent re-checks every
//!   socket watching it, through `agents/<id>` or one of its sessions: a
//!   socket that lost access loses those subscriptions (`access_revoked`)
//!   and hears nothing more of them.
//! - `sessions/<id>`: the session's new state whenever a turn takes or
//!   releases keep-awake (it starts, or it reached its terminal commit),
//!   and after an update such as a new title. A state is read when its
//!   notice arrives, so one read as a short turn ended may reach a client
//!   after that turn's message; the release's state follows it, and the
//!   last `change` is always the current state.
//!
//! Delivery is a push into each socket's byte-bounded queue: a socket that
//! cannot take it is closed, and no publisher ever waits. A change is
//! rendered once (for an agent, once per access role) and its bytes are
//! shared by every socket it goes to.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use agentos_protocol::seed::response::AgentInfo;
use agentos_protocol::seed::ws::{AccountChange, ChangeValue, WsEvent};
use tokio::sync::broadcast;
use tungstenite::Utf8Bytes;

use super::error::WsError;
use super::feed::FeedMsg;
use super::outbox::{Announced, Out};
use super::socket::{Hold, Socket};
use super::sockets::Sockets;
use crate::control::{authz, AccessRole, AgentRecord, CollaboratorRecord};
use crate::sessions::{Notice, SessionInfo, SessionState};

/// Why an account's view changed, spelled as the reference spells it.
pub mod reason {
    pub const AGENT_CREATED: &str = "agent-created";
    pub const AGENT_UPDATED: &str = "agent-updated";
    pub const AGENT_DELETED: &str = "agent-deleted";
    /// An invitation to the account came or went (it was invited, or its
    /// access was removed).
    pub const AGENT_INVITED: &str = "agent-invites-changed";
    pub const COLLABORATORS_CHANGED: &str = "agent-collaborators-changed";
    pub const AGENT_ACCESS_REMOVED: &str = "agent-invites-changed";
    pub const SESSION_CREATED: &str = "session-created";
    pub const SESSION_UPDATED: &str = "session-updated";
    pub const SESSION_DELETED: &str = "session-deleted";
    /// An event was appended to one of the account's sessions.
    pub const SESSION_EVENT: &str = "session-event";
    pub const MODEL_PROVIDER_CHANGED: &str = "model-provider-changed";
    pub const TRIGGER_CREATED: &str = "trigger-created";
    pub const TRIGGER_UPDATED: &str = "trigger-updated";
    pub const TRIGGER_DELETED: &str = "trigger-deleted";
}

/// The accounts told about an agent: its owner and accepted collaborators.
pub fn audience(agent: &AgentRecord, collaborators: &[CollaboratorRecord]) -> Vec<String> {
    let mut accounts = vec![agent.account_id.clone()];
    accounts.extend(
        collaborators
            .iter()
            .filter(|c| c.status == crate::control::CollaboratorStatus::Accepted)
            .map(|c| c.account_id.clone()),
    );
    accounts
}

impl Sockets {
    /// Tells each of `accounts` (its `account/<id>` subscribers) why its
    /// view changed.
    pub fn account_changed(
        &self,
        accounts: &[String],
        reason: &str,
        agent_id: Option<&str>,
        session_id: Option<&str>,
    ) {
        for account in accounts {
            let key = format!("account/{account}");
            let holders = self.holders(&key);
            let agent_key = agent_id.map(|id| format!("agents/{id}"));
            let agent_holders = agent_key
                .as_ref()
                .map(|key| self.holders(key))
                .unwrap_or_default()
                .into_iter()
                .filter(|s| s.account().as_deref() == Some(account.as_str()));
            let holders: Vec<Arc<Socket>> = holders.into_iter().chain(agent_holders).collect();
            if holders.is_empty() {
                continue;
            }
            let frame: Utf8Bytes = WsEvent::Change {
                key: key.clone(),
                value: Box::new(ChangeValue::Account(AccountChange {
                    reason: reason.to_owned(),
                    agent_id: agent_id.map(str::to_owned),
                    session_id: session_id.map(str::to_owned),
                })),
            }
            .to_json()
            .into();
            let mut told = std::collections::HashSet::new();
            for socket in holders {
                let holds =
                    socket.holds(&key) || agent_key.as_ref().is_some_and(|k| socket.holds(k));
                if holds && told.insert(socket.id) {
                    socket.outbox.frame(frame.clone());
                }
            }
        }
    }

    /// An agent or who may read it changed: every socket watching it is
    /// checked against `agent` and `collaborators`; those still allowed
    /// and subscribed to `agents/<id>` get `render(role)`.
    pub fn agent_changed(
        &self,
        agent: &AgentRecord,
        collaborators: &[CollaboratorRecord],
        render: impl Fn(AccessRole) -> Option<AgentInfo>,
    ) {
        let key = format!("agents/{}", agent.agent_id);
        // One rendering per role, shared by the sockets that read as it.
        let mut rendered: Vec<(AccessRole, Option<Utf8Bytes>)> = Vec::new();
        let mut frame_for = |role: AccessRole| match rendered.iter().find(|(r, _)| *r == role) {
            Some((_, frame)) => frame.clone(),
            None => {
                let frame = render(role).map(|info| {
                    Utf8Bytes::from(
                        WsEvent::Change {
                            key: key.clone(),
                            value: Box::new(ChangeValue::Agent(info)),
                        }
                        .to_json(),
                    )
                });
                rendered.push((role, frame.clone()));
                frame
            }
        };
        let role_of = |account: &str| {
            let collaboration = collaborators
                .iter()
                .find(|c| c.account_id == account)
                .map(|c| (c.role, c.status));
            authz::role_for(account, agent, collaboration)
        };
        for socket in self.watchers(&agent.agent_id) {
            let Some(account) = socket.account() else {
                continue;
            };
            match role_of(&account) {
                None => self.revoke(&socket, &agent.agent_id, |key| {
                    WsError::AccessRevoked(key.to_owned())
                }),
                Some(role) if socket.holds(&key) => {
                    if let Some(frame) = frame_for(role) {
                        socket.outbox.frame(frame);
                    }
                }
                Some(_) => {}
            }
        }
        // Account-wide sockets of its owner and accepted collaborators get
        // it too, as each reads it (`account.rs`).
        for account in audience(agent, collaborators) {
            let Some(role) = role_of(&account) else {
                continue;
            };
            for socket in self.holders(&format!("account/{account}")) {
                if socket.holds(&key) {
                    continue;
                }
                if let Some(frame) = frame_for(role) {
                    socket.outbox.frame(frame);
                }
            }
        }
    }

    /// The agent is gone: its subscribers are told, and its sessions'
    /// subscriptions end as the sessions are deleted.
    pub fn agent_deleted(&self, agent_id: &str) {
        let key = format!("agents/{agent_id}");
        for socket in self.holders(&key) {
            if let Some(hold) = socket.release(&key) {
                self.unindex(socket.id, &key, hold.agent());
                socket
                    .outbox
                    .frame(WsError::AgentDeleted(key.clone()).frame());
            }
        }
    }

    /// Ends every subscription of `socket` that depends on `agent_id`,
    /// telling it `error(key)` after its last frame.
    fn revoke(&self, socket: &Arc<Socket>, agent_id: &str, error: impl Fn(&str) -> WsError) {
        for (key, hold) in socket.release_agent(agent_id) {
            self.unindex(socket.id, &key, hold.agent());
            let frame = error(&key).frame();
            match hold {
                Hold::Session { sub_id, .. } => {
                    self.sessions.hub().unsubscribe(&sub_id);
                    let _ = socket.outbox.push(Out::End {
                        sub_id,
                        frame: Some(frame),
                    });
                }
                Hold::Account | Hold::Agent(_) | Hold::Run { .. } => {
                    socket.outbox.frame(frame);
                }
            }
        }
    }

    /// A session's new state, for its `sessions/<id>` subscribers, and
    /// through the account feed for its agent's and accounts' sockets.
    pub fn session_changed(&self, info: SessionInfo) {
        let key = format!("sessions/{}", info.session_id);
        let state = Announced::new(info);
        for socket in self.holders(&key) {
            if socket.holds(&key) {
                let _ = socket.outbox.push(Out::State(state.clone()));
            }
        }
        self.offer_feed(FeedMsg::State(state));
    }

    /// Starts relaying session states from the session service's notices,
    /// once.
    pub(super) fn relay_session_states(self: &Arc<Self>) {
        if self.relaying.swap(true, Ordering::AcqRel) {
            return;
        }
        let notices = self.sessions.notices();
        let renames = self.sessions.renames();
        tokio::spawn(relay(Arc::downgrade(self), notices, renames));
    }
}

/// A turn takes keep-awake after its accept commit and releases it after
/// its terminal commit: both are the moments a session's state changes. A
/// session the sidecar renamed (a generated title) changed too, and its
/// accounts hear `session-updated`.
async fn relay(
    sockets: Weak<Sockets>,
    mut notices: broadcast::Receiver<Notice>,
    mut renames: broadcast::Receiver<String>,
) {
    loop {
        // A turn's start names its prompt.
        let (session_id, renamed, started) = tokio::select! {
            notice = notices.recv() => match notice {
                Ok(Notice::KeepAwake { session_id, held, prompt_id, .. }) => {
                    (session_id, false, held.then_some(prompt_id))
                }
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(skipped)) => {
                    tracing::warn!(skipped, "websocket session states lagged behind the notices");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            renamed = renames.recv() => match renamed {
                Ok(session_id) => (session_id, true, None),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        let Some(sockets) = sockets.upgrade() else {
            return;
        };
        if sockets.feed.get().is_none()
            && sockets
                .holders(&format!("sessions/{session_id}"))
                .is_empty()
        {
            continue;
        }
        match sockets.sessions.get(&session_id).await {
            Ok(mut info) => {
                // A turn that ended before its state was read still
                // started: its subscribers hear it start, then (with the
                // release) end.
                if let Some(prompt_id) = started.filter(|_| !info.state.is_live()) {
                    info.state = SessionState::Running {
                        prompt_id: Some(prompt_id),
                        started_at_ms: None,
                    };
                }
                sockets.session_changed(info)
            }
            Err(e) => {
                tracing::debug!(session = %session_id, error = %e, "no state to relay")
            }
        }
        if renamed {
            sockets.offer_feed(FeedMsg::Renamed(session_id));
        }
    }
}
