//! One open `/agents/ws` socket: its account (bound by the first verified
//! envelope, never switched), the signer keys that acted on it (so revoking
//! one closes the socket), the keys it holds, its outbox, and its place as
//! a session hub sink. The registry it is indexed in (`sockets.rs`) sits
//! above it and is reached through [`Index`]; the loop that runs a socket
//! is `connection.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::error::WsError;
use super::outbox::{Out, Outbox};
use crate::sessions::{Batch, Item, Sink, SinkRefusal};

/// The registry a socket is indexed in, told when the session hub ends
/// one of the socket's subscriptions.
pub(super) trait Index: Send + Sync {
    fn unindex(&self, socket: u64, key: &str, agent: Option<&str>);
}

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
    index: Weak<dyn Index>,
}

impl Socket {
    pub(super) fn new(id: u64, outbox: Outbox, index: Weak<dyn Index>) -> Socket {
        Socket {
            id,
            outbox,
            state: Mutex::new(State::default()),
            index,
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
    fn deliver(&self, subscription_id: &Arc<str>, item: &Item) -> Result<(), SinkRefusal> {
        self.outbox.push(Out::Item {
            sub_id: subscription_id.clone(),
            item: item.clone(),
        })
    }

    fn deliver_all(&self, subscription_id: &Arc<str>, items: Batch) -> Result<(), SinkRefusal> {
        self.outbox.push_items(subscription_id, items)
    }

    fn ended(&self, subscription_id: &str, _session_id: &str, reason: &str, _last: u64) {
        let Some((key, hold)) = self.release_sub(subscription_id) else {
            return;
        };
        if let Some(index) = self.index.upgrade() {
            index.unindex(self.id, &key, hold.agent());
        }
        // Overflow closes the whole socket; anything else is told.
        let frame = (reason != "overflow").then(|| WsError::ended(&key, reason).frame());
        let _ = self.outbox.push(Out::End {
            sub_id: Arc::from(subscription_id),
            frame,
        });
    }
}
