//! The records responses and events are made of: agents, sessions, session
//! events, collaborators, invites, redacted providers and secrets, signers.
//!
//! Field names are the reference service's. Absent optional fields are left
//! out when written; unknown fields are ignored when read, so a client
//! keeps working against a server that adds some.

use ipld_core::ipld::Ipld;
use serde::{Deserialize, Serialize};

use crate::seed::action::AgentDefinition;
use crate::seed::vocab::{
    AccessRole, AgentStatus, AuthMode, AuthStatus, CollaboratorRole, CollaboratorStatus,
    SessionStatus,
};
use crate::seed::Role;

/// An agent as the requesting account sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInfo {
    pub id: String,
    /// The owner's account id (`z6Mk…`).
    pub account: String,
    pub definition: AgentDefinition,
    pub state_dir: String,
    pub status: AgentStatus,
    pub created_at: i64,
    pub updated_at: i64,
    /// The requesting account's role on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_role: Option<AccessRole>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_read: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_chat: Option<bool>,
}

/// A session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub id: String,
    /// The owner's account id.
    pub account: String,
    pub agent_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub status: SessionStatus,
    pub created_at: i64,
    pub updated_at: i64,
    /// Set on sessions another session spawned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    /// The run this session is the transcript of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_session_count: Option<u64>,
    /// `{provider, model, reasoningLevel?}` when the session overrides the
    /// agent's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_override: Option<Ipld>,
    /// The agent's own short account of what the session is doing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The agent's plan snapshot `{title?, steps, …}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Ipld>,
    /// `{triggerId, triggerName, firingId, activityKey, activitySummary,
    /// source, firedAt}` of the firing that started the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by_trigger: Option<Box<Ipld>>,
}

/// One durable event of a session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionEvent {
    pub id: String,
    pub session_id: String,
    pub seq: u64,
    /// The payload, a map: `{type: "message", role, content, …}`,
    /// `{type: "tool_call", …}`, `{type: "tool_result", …}`, `{type:
    /// "error", message}`, or another shape.
    pub event: Ipld,
    pub created_at: i64,
}

/// An owner, accepted collaborator or pending invitation on an agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCollaboratorInfo {
    pub account_id: String,
    pub role: AccessRole,
    pub status: CollaboratorStatus,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A pending invitation as its recipient sees it, before the agent's
/// contents are disclosed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInviteInfo {
    pub agent_id: String,
    pub agent_name: String,
    pub owner_account_id: String,
    pub role: CollaboratorRole,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A model provider without its secrets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RedactedModelProvider {
    pub id: String,
    pub name: String,
    #[serde(rename = "type")]
    pub provider_type: String,
    pub has_secrets: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_mode: Option<AuthMode>,
    /// For a subscription provider only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_status: Option<AuthStatus>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A secret without its value. `has_value` is always true on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RedactedSecret {
    pub id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Ipld>,
    pub has_value: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A hypermedia account key the server holds for an account (never the
/// key itself): its secret's name, the account it signs as, and what the
/// account says of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SigningIdentity {
    pub id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// `ipfs://<cid>` of its profile icon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<bool>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A model a provider offers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderModelInfo {
    pub id: String,
    pub name: String,
}

/// A key authorized to sign for an account.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignerInfo {
    /// The signer's principal string (`z6Mk…`).
    pub signer_id: String,
    pub role: Role,
    /// The CID of the Capability blob that proved the delegation, when one
    /// did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
    pub created_at: i64,
}
