//! What a route knows of the turn it is running: the prompt, the agent's
//! updates not yet committed, the chunk buffer, the reply being assembled,
//! the permission requests waiting for an answer, and a failure decided on
//! the route's side. The turn engine (`turn.rs`), the commit pipeline
//! (`commit.rs`) and permissions (`permissions.rs`) all work on it.

use std::collections::HashMap;

use agentos_adapters::IncomingRequestId;
use agentos_protocol::ErrorCode;

use crate::sessions::coalesce::ChunkBuffer;
use crate::sessions::store::NewEvent;

/// State of the turn in flight.
pub(super) struct Turn {
    pub(super) prompt_id: String,
    /// The run this turn is (the queue's claim, or the one its accept
    /// inserted); its end commits with the turn's.
    pub(super) run_id: Option<String>,
    /// The queue's claim, which says whether a failure is retried.
    pub(super) run: Option<crate::runs::RunLink>,
    /// A turn that started at once: its caller hears how it went.
    pub(super) progress: Option<std::sync::Arc<crate::sessions::TurnProgress>>,
    /// Its run is one no feed shows (`NewRun::quiet`): its end is read
    /// back as a status only.
    pub(super) quiet: bool,
    /// The agent asked for a verb during this turn (only then can a turn
    /// that started at once, a new root run, owe anything: a plan).
    pub(super) verbs: bool,
    /// A verb of this turn delegated to children the run waits for.
    pub(super) parked: bool,
    pub(super) buffer: ChunkBuffer,
    pub(super) pending: Vec<NewEvent>,
    pub(super) pending_bytes: u64,
    /// The agent's reply so far, its text chunks merged as they arrive.
    pub(super) message: ChunkBuffer,
    pub(super) message_id: Option<String>,
    pub(super) permissions: HashMap<String, PendingPermission>,
    pub(super) cancel_requested: bool,
    /// Set when the turn must end in failure whatever the agent answers.
    pub(super) failure: Option<(ErrorCode, String)>,
    /// The setting to raise when `failure` is a hard limit (`data.setting`).
    pub(super) failure_setting: Option<&'static str>,
    /// Bytes of every `session/update` of this turn, against
    /// `limits.acp.maxTurnOutputBytes`.
    pub(super) output_bytes: u64,
}

impl Turn {
    /// Fails the turn on a hard limit, naming the setting to raise.
    pub(super) fn fail_limit(&mut self, code: ErrorCode, setting: &'static str, message: String) {
        self.failure = Some((code, message));
        self.failure_setting = Some(setting);
    }
}

/// A permission request the agent is waiting on.
pub(super) struct PendingPermission {
    pub(super) adapter_id: IncomingRequestId,
    pub(super) option_ids: Vec<String>,
}
