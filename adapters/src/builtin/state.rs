//! The builtin agent's shared state, which its request loop (`agent.rs`)
//! and its turns (`turn.rs`) both hold: how it runs (`AgentOptions`), the
//! one `Agent` of a client connection (its peer, provider and sessions),
//! each session's state, and the cancellation signal of a running prompt.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use agentos_base::budget::ByteBudget;

use tokio::sync::watch;

use super::held::{Held, HELD_BYTES};
use super::local::LocalConfig;
use super::peer::Peer;
use super::provider::{Message, Provider, ProviderOptions};

/// How the agent runs.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// The provider to use when the client is not the sidecar (it does not
    /// answer `_agentos/context`); without it such a client's prompts fail
    /// with a message saying so.
    pub local: Option<LocalConfig>,
    pub provider: ProviderOptions,
    /// Model calls in one turn, at most; then the turn ends with
    /// `max_turn_requests`.
    pub max_steps: u32,
    /// What the conversations every agent sharing these options holds
    /// between turns take together, at most (`held.rs`); each new
    /// `AgentOptions` has a budget of its own, so agents in one process
    /// share one by sharing their options.
    pub held: Arc<ByteBudget>,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            local: None,
            provider: ProviderOptions::default(),
            max_steps: 32,
            held: ByteBudget::new(HELD_BYTES),
        }
    }
}

/// A cancellation signal for one running prompt.
#[derive(Clone)]
pub(super) struct Cancel(watch::Sender<bool>);

impl Cancel {
    pub(super) fn new() -> Self {
        Cancel(watch::channel(false).0)
    }

    pub(super) fn cancel(&self) {
        self.0.send_replace(true);
    }

    pub(super) fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }

    pub(super) async fn cancelled(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|cancelled| *cancelled).await;
    }
}

#[derive(Default)]
pub(super) struct SessionState {
    pub(super) cwd: Option<PathBuf>,
    /// The running prompt's signal.
    pub(super) running: Option<Cancel>,
    /// The conversation, kept here only when the client is not the sidecar
    /// (the sidecar's log is the conversation otherwise).
    pub(super) local_transcript: Vec<Message>,
    /// The part of the sidecar's transcript that its last context said
    /// stays (`held.rs`): the next context sends only what follows it.
    pub(super) held: Option<Held>,
}

pub(super) struct Agent {
    pub(super) peer: Peer,
    pub(super) options: AgentOptions,
    pub(super) provider: Provider,
    /// Whether the client serves `fs/read_text_file` / `fs/write_text_file`.
    pub(super) client_fs: Mutex<(bool, bool)>,
    pub(super) sessions: Mutex<HashMap<String, SessionState>>,
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain maps and flags: consistent whatever panicked holding them.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
