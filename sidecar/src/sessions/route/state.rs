//! What a route knows of the turn it is running: the prompt, the agent's
//! updates not yet committed, the chunk buffer, the reply being assembled,
//! the permission requests waiting for an answer, and a failure decided on
//! the route's side. The turn engine (`turn.rs`), the commit pipeline
//! (`commit.rs`) and permissions (`permissions.rs`) all work on it.

use std::collections::HashMap;

use agentos_adapters::IncomingRequestId;
use agentos_protocol::ErrorCode;
use serde_json::Value;

use crate::sessions::coalesce::ChunkBuffer;
use crate::sessions::store::NewEvent;

/// State of the turn in flight.
pub(super) struct Turn {
    pub(super) prompt_id: String,
    /// The running prompt's idempotency key: a concurrent send of the same
    /// key is `prompt_in_progress`, not `session_busy`.
    pub(super) idempotency_key: Option<String>,
    pub(super) buffer: ChunkBuffer,
    pub(super) pending: Vec<NewEvent>,
    pub(super) pending_bytes: u64,
    pub(super) message: Vec<Value>,
    pub(super) message_id: Option<String>,
    pub(super) permissions: HashMap<String, PendingPermission>,
    pub(super) cancel_requested: bool,
    /// Set when the turn must end in failure whatever the agent answers.
    pub(super) failure: Option<(ErrorCode, String)>,
    /// The setting a `resource_limit` failure names (`data.setting`).
    pub(super) failure_setting: Option<&'static str>,
}

/// A permission request the agent is waiting on.
pub(super) struct PendingPermission {
    pub(super) adapter_id: IncomingRequestId,
    pub(super) option_ids: Vec<String>,
}
