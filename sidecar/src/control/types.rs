//! The control plane's domain values: what its services take and answer.
//! Principals are their `z…` base58btc text, opaque client documents
//! (agent definitions, provider configs, secret metadata) are CBOR bytes
//! the caller encoded, and times are Unix milliseconds. Each front door
//! renders these in its own wire form.

pub use crate::config::ControlLimits;

/// The settings that name each bound, for errors and warnings.
pub mod setting {
    pub const MAX_ACCOUNTS: &str = "limits.control.maxAccounts";
    pub const MAX_AGENTS: &str = "limits.control.maxAgentsPerAccount";
    pub const MAX_PROVIDERS: &str = "limits.control.maxProvidersPerAccount";
    pub const MAX_SECRETS: &str = "limits.control.maxSecretsPerAccount";
    pub const MAX_COLLABORATORS: &str = "limits.control.maxCollaboratorsPerAgent";
    pub const MAX_COLLABORATIONS: &str = "limits.control.maxCollaborationsPerAccount";
    pub const MAX_SIGNERS: &str = "limits.control.maxSignersPerAccount";
    pub const MAX_IDEMPOTENCY: &str = "limits.control.maxIdempotencyRecords";
    pub const MAX_DEFINITION_BYTES: &str = "limits.control.maxAgentDefinitionBytes";
}

macro_rules! vocabulary {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Option<$name> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }
    };
}

vocabulary! {
    /// What a signer may do for its account. The account's own key is
    /// always `Owner` and has no row.
    SignerRole { Owner = "owner", Agent = "agent", Writer = "writer" }
}

vocabulary! {
    /// What an account may do to an agent, lowest first.
    AccessRole { Reader = "reader", Writer = "writer", Owner = "owner" }
}

vocabulary! {
    /// The role an owner grants a collaborator.
    CollaboratorRole { Reader = "reader", Writer = "writer" }
}

vocabulary! {
    CollaboratorStatus { Pending = "pending", Accepted = "accepted" }
}

vocabulary! {
    AgentStatus { Idle = "idle", Running = "running", Stopped = "stopped", Error = "error" }
}

vocabulary! {
    /// How a provider authenticates; absent means `api-key`.
    AuthMode { ApiKey = "api-key", Subscription = "subscription" }
}

impl From<CollaboratorRole> for AccessRole {
    fn from(role: CollaboratorRole) -> Self {
        match role {
            CollaboratorRole::Reader => AccessRole::Reader,
            CollaboratorRole::Writer => AccessRole::Writer,
        }
    }
}

/// A stored signer of an account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignerRecord {
    pub account_id: String,
    pub signer: String,
    /// `None` only for a signer revoked before it was ever stored.
    pub role: Option<SignerRole>,
    pub capability_cid: Option<String>,
    pub capability_blob: Option<Vec<u8>>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

/// A verified delegation to remember: the account's capability naming the
/// signer, by CID and bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delegation {
    pub role: SignerRole,
    pub capability_cid: String,
    pub capability_blob: Vec<u8>,
}

/// What a new agent is made of. `definition` is the caller's canonical
/// CBOR; `name` is copied out of it for listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewAgent {
    pub definition: Vec<u8>,
    pub name: String,
    /// `builtin`, or an id of the VM's agent registry.
    pub adapter: String,
}

/// A stored agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentRecord {
    pub agent_id: String,
    /// The owner's account.
    pub account_id: String,
    pub definition: Vec<u8>,
    pub name: String,
    pub adapter: String,
    pub status: AgentStatus,
    pub public_read: bool,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// An agent together with the role the asking account has on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentAccess {
    pub agent: AgentRecord,
    pub access_role: AccessRole,
}

/// One collaborator of an agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollaboratorRecord {
    pub agent_id: String,
    pub account_id: String,
    pub role: CollaboratorRole,
    pub status: CollaboratorStatus,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub accepted_at_ms: Option<i64>,
}

/// A pending invitation as its invitee sees it: enough to decide, not the
/// agent's definition (which the invitee may not read yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invite {
    pub agent_id: String,
    pub agent_name: String,
    /// The inviting owner.
    pub owner_account_id: String,
    pub role: CollaboratorRole,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// A provider to store. `config` is opaque CBOR; the caller lists the
/// secret names it refers to (its `secretRefs` values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewProvider {
    pub name: String,
    pub provider_type: String,
    pub config: Vec<u8>,
    pub auth_mode: Option<AuthMode>,
    pub secret_refs: Vec<String>,
}

/// A provider as every response shows it: no config, no secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedactedProvider {
    pub id: String,
    pub name: String,
    pub provider_type: String,
    pub has_secrets: bool,
    pub auth_mode: Option<AuthMode>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// A provider with its config, for in-process use (a model call).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderRecord {
    pub redacted: RedactedProvider,
    pub config: Vec<u8>,
    pub secret_refs: Vec<String>,
}

/// What `delete_provider` removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeletedProvider {
    pub name: String,
    /// Secrets it referred to that no other provider of the account uses.
    pub deleted_secrets: Vec<String>,
}

/// A secret as every response shows it (`hasValue` is always true).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedactedSecret {
    pub id: String,
    pub name: String,
    pub metadata: Option<Vec<u8>>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// Which Seed agent a session serves, and that agent's owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionLink {
    pub session_id: String,
    pub agent_id: String,
    pub account_id: String,
    pub created_at_ms: i64,
    /// For a delegated child's session: the session and run it works for.
    pub parent_session_id: Option<String>,
    pub run_id: Option<String>,
}

/// Which sessions a listing covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionScope {
    /// Sessions of one agent.
    Agent(String),
    /// Sessions of every agent the account owns or collaborates on
    /// (accepted).
    Account(String),
}

/// Keyset position: the page continues strictly after this
/// `(updated_at_ms, session_id)`, both descending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionCursor {
    pub updated_before: i64,
    pub id_before: String,
}

/// One listed session: its link and the session row's times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionListRow {
    pub session_id: String,
    pub agent_id: String,
    pub account_id: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub parent_session_id: Option<String>,
    pub run_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionPage {
    pub sessions: Vec<SessionListRow>,
    /// Present when more sessions follow.
    pub next_cursor: Option<SessionCursor>,
}

/// Identifies one idempotent action: the acting account, the action name,
/// the client's request id, and the hash of the request's fields (the
/// caller decides which; the timestamp is never among them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyKey {
    pub account_id: String,
    pub action: String,
    pub client_id: String,
    pub request_hash: Vec<u8>,
}

/// An idempotent action's response bytes, and whether they were replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Idempotent {
    Fresh(Vec<u8>),
    Replayed(Vec<u8>),
}

impl Idempotent {
    pub fn response(&self) -> &[u8] {
        match self {
            Idempotent::Fresh(bytes) | Idempotent::Replayed(bytes) => bytes,
        }
    }

    pub fn into_response(self) -> Vec<u8> {
        match self {
            Idempotent::Fresh(bytes) | Idempotent::Replayed(bytes) => bytes,
        }
    }

    pub fn is_replayed(&self) -> bool {
        matches!(self, Idempotent::Replayed(_))
    }
}
