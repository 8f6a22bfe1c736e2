//! What the control plane's hot readers keep in memory: a session's link,
//! an agent, a provider, a provider's sealed key (as stored: sealed; it is
//! opened at each call) and an agent's collaborators, each read by every
//! turn of the builtin agent (and every signed request that checks access)
//! and written only by control-plane actions. Each is answered from memory
//! while the tables it was read from are unwritten (the VM's database
//! handle counts writes per table: `agentos_storage::watch`), so a write
//! answered before a read is always seen by it. Bounded in bytes, per kind.

use std::sync::Arc;

use agentos_storage::watch::{Memo, TableVersions};

use super::store::{
    StoredSecret, AGENTS, COLLABORATORS, PROVIDERS, SECRETS, SECRET_REFS, SESSION_LINKS,
};
use super::types::{AgentRecord, CollaboratorRecord, ProviderRecord, SessionLink};

/// The tables the VM's handle watches for the control plane's readers
/// (these, and the agents' tool documents the Space keeps).
pub const WATCHED: &[&str] = &[
    SESSION_LINKS,
    AGENTS,
    PROVIDERS,
    SECRET_REFS,
    SECRETS,
    COLLABORATORS,
    super::store::TOOL_DOCUMENTS,
];

/// Bytes each kind keeps at most: links are small and many (one per
/// session), agents and providers carry their documents.
const LINK_BYTES: usize = 4 << 20;
const AGENT_BYTES: usize = 8 << 20;
const PROVIDER_BYTES: usize = 2 << 20;
const COLLABORATOR_BYTES: usize = 2 << 20;
const SECRET_BYTES: usize = 1 << 20;

pub(super) struct Kept {
    pub versions: Arc<TableVersions>,
    pub links: Memo<String, Option<SessionLink>>,
    pub agents: Memo<String, Option<AgentRecord>>,
    pub providers: Memo<(String, String), Option<ProviderRecord>>,
    pub collaborators: Memo<String, Vec<CollaboratorRecord>>,
    pub secrets: Memo<(String, String), Option<Arc<StoredSecret>>>,
}

impl Kept {
    pub fn new(versions: Arc<TableVersions>) -> Kept {
        Kept {
            versions: versions.clone(),
            links: Memo::new(versions.clone(), &[SESSION_LINKS], LINK_BYTES, |k, v| {
                k.len() + v.as_ref().map_or(0, link_bytes)
            }),
            agents: Memo::new(versions.clone(), &[AGENTS], AGENT_BYTES, |k, v| {
                k.len() + v.as_ref().map_or(0, agent_bytes)
            }),
            providers: Memo::new(
                versions.clone(),
                &[PROVIDERS, SECRET_REFS],
                PROVIDER_BYTES,
                |(account, name), v| {
                    account.len() + name.len() + v.as_ref().map_or(0, provider_bytes)
                },
            ),
            collaborators: Memo::new(
                versions.clone(),
                &[COLLABORATORS],
                COLLABORATOR_BYTES,
                |k, v| k.len() + v.iter().map(collaborator_bytes).sum::<usize>(),
            ),
            secrets: Memo::new(versions, &[SECRETS], SECRET_BYTES, |(account, name), v| {
                account.len() + name.len() + v.as_deref().map_or(0, secret_bytes)
            }),
        }
    }
}

/// A value's heap bytes and inline size, roughly: what the bound counts.
fn link_bytes(link: &SessionLink) -> usize {
    std::mem::size_of::<SessionLink>()
        + link.session_id.len()
        + link.agent_id.len()
        + link.account_id.len()
        + link.parent_session_id.as_ref().map_or(0, String::len)
        + link.run_id.as_ref().map_or(0, String::len)
}

fn agent_bytes(agent: &AgentRecord) -> usize {
    std::mem::size_of::<AgentRecord>()
        + agent.agent_id.len()
        + agent.account_id.len()
        + agent.definition.len()
        + agent.name.len()
        + agent.adapter.len()
}

fn provider_bytes(provider: &ProviderRecord) -> usize {
    std::mem::size_of::<ProviderRecord>()
        + provider.config.len()
        + provider
            .secret_refs
            .iter()
            .map(|r| r.len() + 24)
            .sum::<usize>()
        + provider.redacted.id.len()
        + provider.redacted.name.len()
        + provider.redacted.provider_type.len()
}

fn secret_bytes(secret: &StoredSecret) -> usize {
    std::mem::size_of::<StoredSecret>()
        + secret.secret_id.len()
        + secret.account_id.len()
        + secret.name.len()
        + secret.key_id.len()
        + secret.ciphertext.len()
        + secret.metadata.as_ref().map_or(0, Vec::len)
}

fn collaborator_bytes(collaborator: &CollaboratorRecord) -> usize {
    std::mem::size_of::<CollaboratorRecord>()
        + collaborator.agent_id.len()
        + collaborator.account_id.len()
}
