//! What a builtin session's turn is made from, once read: the agent, its
//! definition and its provider (`Resolved`, which `host.rs` reads and the
//! verbs' scope is drawn from), and the JSON-RPC error the sidecar answers
//! when some of it is missing (`UNSERVABLE`).

use agentos_adapters::RpcError;
use agentos_protocol::seed::{AgentDefinition, ModelProviderConfig};
use serde_json::json;

use crate::control::AgentRecord;

/// The JSON-RPC error code of a request the sidecar cannot serve for this
/// session (not a Seed session, a missing provider, …); `data.code` says
/// which.
pub const UNSERVABLE: i64 = -32000;

/// An error for a request this session cannot be served, `code` saying
/// why (its `data.code`); never worth retrying as it is.
pub(super) fn unservable(code: &str, message: impl Into<String>) -> RpcError {
    RpcError::new(UNSERVABLE, message).with_data(json!({ "code": code, "retryable": false }))
}

/// Everything a builtin session's turn is made from.
pub struct Resolved {
    pub agent: AgentRecord,
    pub definition: AgentDefinition,
    pub provider_name: String,
    /// `None` when the account has no provider of that name (the verbs
    /// still run; a model call cannot).
    pub provider: Option<ModelProviderConfig>,
}

impl Resolved {
    pub fn provider(&self) -> Result<&ModelProviderConfig, RpcError> {
        self.provider.as_ref().ok_or_else(|| {
            unservable(
                "provider_not_found",
                format!(
                    "the agent's model provider {:?} does not exist",
                    self.provider_name
                ),
            )
        })
    }
}
