//! Agents and their collaborators: `ListAgents`, `CreateAgent`, `GetAgent`,
//! `UpdateAgent`, `DeleteAgent` (with the agent's sessions and Space), and
//! the invitation actions. Readers see all
//! of an agent, writers may also change it, only its owner manages access
//! or deletes it; an agent the caller cannot read is `not_found`.

use agentos_protocol::seed::ApiCode;
use std::collections::BTreeMap;

use agentos_protocol::seed::response::{
    AcceptAgentInviteResponse, CreateAgentResponse, DeclineAgentInviteResponse,
    DeleteAgentResponse, GetAgentResponse, InviteAgentCollaboratorResponse,
    ListAgentCollaboratorsResponse, ListAgentInvitesResponse, ListAgentsResponse,
    RemoveAgentCollaboratorResponse, SetAgentPublicReadResponse,
};
use agentos_protocol::seed::{cbor, encode_response, Action, AgentDefinition, Ipld};

use super::{ok, render, ApiError, Caller, SignedApi};
use crate::config::BUILTIN_AGENT;
use crate::control::{authz, AccessRole, CollaboratorStatus, Idempotent, NewAgent, SessionScope};
use crate::http::ws::reason;

/// MCP servers one definition may name (the reference's tool count).
const MAX_MCP_SERVERS: usize = 32;

impl SignedApi {
    /// The stored form of a definition; its adapter must be `builtin` or an
    /// id of the VM's registry (a signed client never names a command).
    /// The builtin agent needs `modelProvider` and `model`, as the
    /// reference requires them; a registry adapter runs its own model and
    /// needs neither.
    /// The reference's default trigger of a new agent that signs as a
    /// hypermedia account (its `signingKey`, else its first `signingKeys`,
    /// naming one of the owner's identities): "Mentions of <name>", a
    /// user-mention trigger on that account. Best effort, as there: a
    /// trigger that cannot be made leaves the agent as it is.
    async fn mention_trigger(&self, owner: &str, agent_id: &str, definition: &AgentDefinition) {
        let Some(key) = definition
            .signing_key
            .clone()
            .or_else(|| definition.signing_keys.as_ref()?.first().cloned())
        else {
            return;
        };
        let account = match self.control.list_secrets(owner).await {
            Ok(secrets) => secrets
                .iter()
                .filter(|secret| secret.name == key)
                .find_map(crate::control::identities::identity)
                .and_then(|identity| identity.account_id),
            Err(e) => {
                tracing::warn!(agent = %agent_id, error = %e, "the mention trigger's identity could not be read");
                return;
            }
        };
        let Some(account) = account else { return };
        let trigger = serde_json::json!({
            "name": format!("Mentions of {}", definition.name),
            "enabled": true,
            "source": {"type": "user-mention", "mentionedAccounts": [account]},
            "prompt": "Respond to the mention, performing the action requested.",
        });
        match self.triggers.create(owner, agent_id, &trigger).await {
            Ok(row) => {
                self.announce_trigger(&row.agent_id, reason::TRIGGER_CREATED)
                    .await;
            }
            Err(e) => {
                tracing::warn!(agent = %agent_id, error = %e, "the default mention trigger was not made");
            }
        }
    }

    pub(super) fn new_agent(&self, definition: &AgentDefinition) -> Result<NewAgent, ApiError> {
        let adapter = definition
            .adapter
            .clone()
            .unwrap_or_else(|| BUILTIN_AGENT.to_owned());
        if adapter == BUILTIN_AGENT {
            for (field, value) in [
                ("modelProvider", &definition.model_provider),
                ("model", &definition.model),
            ] {
                if value.is_empty() {
                    return Err(ApiError::bad_request(
                        ApiCode::BadRequest,
                        format!("definition.{field} is required for the builtin agent"),
                    ));
                }
            }
        }
        if let Some(servers) = &definition.mcp_servers {
            // The reference's bounds: as many as tools, each a bounded name.
            if servers.len() > MAX_MCP_SERVERS {
                return Err(ApiError::bad_request(
                    ApiCode::InvalidArgument,
                    "Too many MCP servers",
                ));
            }
            if let Some(bad) = servers
                .iter()
                .find(|s| s.trim().is_empty() || s.len() > 256)
            {
                return Err(ApiError::bad_request(
                    ApiCode::InvalidArgument,
                    format!("MCP server name {bad:?} must be 1 to 256 bytes"),
                ));
            }
        }
        if adapter != BUILTIN_AGENT && !self.adapters.contains(&adapter) {
            return Err(ApiError::bad_request(
                ApiCode::UnknownAdapter,
                format!(
                    "definition.adapter {adapter:?} is neither \"builtin\" nor an agent of this VM"
                ),
            ));
        }
        Ok(NewAgent {
            definition: cbor::to_canonical(definition)?,
            name: definition.name.clone(),
            adapter,
        })
    }

    async fn get_agent_response(
        &self,
        caller: &Caller,
        access: &crate::control::AgentAccess,
    ) -> Result<Vec<u8>, ApiError> {
        let agent = render::agent(&access.agent, Some(access.access_role))?;
        let agent_id = &access.agent.agent_id;
        let response = if caller.protocol >= 2 {
            GetAgentResponse {
                agent,
                sessions: None,
                session_count: Some(self.control.session_count(agent_id).await?),
            }
        } else {
            let page = self
                .control
                .list_sessions_page(&SessionScope::Agent(agent_id.clone()), None, 200)
                .await?;
            GetAgentResponse {
                agent,
                sessions: Some(self.render_sessions(&page.sessions).await?),
                session_count: None,
            }
        };
        ok(&response)
    }

    pub(super) async fn agents(
        &self,
        caller: &Caller,
        action: Action,
    ) -> Result<Vec<u8>, ApiError> {
        let account = caller.account.as_str();
        let control = &self.control;
        match action {
            Action::ListAgents => {
                let agents = control.list_agents_for(account).await?;
                let agents = agents
                    .iter()
                    .map(|a| render::agent(&a.agent, Some(a.access_role)))
                    .collect::<Result<Vec<_>, _>>()?;
                ok(&ListAgentsResponse { agents })
            }
            Action::CreateAgent {
                definition,
                client_request_id,
            } => {
                let new = self.new_agent(&definition)?;
                let render = |record: &crate::control::AgentRecord| {
                    encode_response(&CreateAgentResponse {
                        agent_id: record.agent_id.clone(),
                    })
                };
                // Told once, when the agent is new (not on a replay).
                let mut created = None;
                let response = match client_request_id {
                    Some(id) => {
                        let fields = Ipld::Map(BTreeMap::from([(
                            "definition".to_owned(),
                            cbor::from_slice::<Ipld>(&new.definition, usize::MAX)?,
                        )]));
                        let key = Self::idempotency_key(caller, "CreateAgent", &id, fields)?;
                        let outcome = control
                            .create_agent_idempotent(account, new, key, |record| {
                                created = Some(record.agent_id.clone());
                                render(record)
                            })
                            .await?;
                        if matches!(outcome, Idempotent::Replayed(_)) {
                            created = None;
                        }
                        outcome.into_response()
                    }
                    None => {
                        let record = control.create_agent(account, new).await?;
                        created = Some(record.agent_id.clone());
                        render(&record)
                    }
                };
                if let Some(agent_id) = created {
                    self.mention_trigger(account, &agent_id, &definition).await;
                    self.announce_agent(&agent_id, reason::AGENT_CREATED, &[])
                        .await;
                }
                Ok(response)
            }
            Action::GetAgent { agent_id } => {
                let access = authz::require_read(control, account, &agent_id).await?;
                self.get_agent_response(caller, &access).await
            }
            Action::UpdateAgent {
                agent_id,
                definition,
            } => {
                let access = authz::require_write(control, account, &agent_id).await?;
                if access.access_role == AccessRole::Writer {
                    let before = render::definition(&access.agent.definition)?;
                    if before.signing_keys != definition.signing_keys
                        || before.signing_key != definition.signing_key
                    {
                        return Err(ApiError::forbidden(
                            "a writer may not change an agent's signing keys",
                        ));
                    }
                    // The grants (`tools`) say what the agent may reach on
                    // its owner's behalf, and the adapter what runs it: the
                    // owner's to change. Grants compare by what they grant.
                    let grants = |tools: &Option<Vec<String>>| -> Vec<String> {
                        crate::space::registry::builtins()
                            .into_iter()
                            .map(|doc| doc.name)
                            .filter(|name| crate::space::registry::granted(tools.as_deref(), name))
                            .collect()
                    };
                    if grants(&before.tools) != grants(&definition.tools) {
                        return Err(ApiError::forbidden(
                            "a writer may not change an agent's grants (tools)",
                        ));
                    }
                    // MCP servers are the owner's, reached with the owner's
                    // secrets: enabling one is a grant too.
                    let servers = |s: &Option<Vec<String>>| -> std::collections::BTreeSet<String> {
                        s.iter().flatten().cloned().collect()
                    };
                    if servers(&before.mcp_servers) != servers(&definition.mcp_servers) {
                        return Err(ApiError::forbidden(
                            "a writer may not change an agent's MCP servers",
                        ));
                    }
                    if before.adapter.as_deref().unwrap_or(BUILTIN_AGENT)
                        != definition.adapter.as_deref().unwrap_or(BUILTIN_AGENT)
                    {
                        return Err(ApiError::forbidden(
                            "a writer may not change which adapter runs an agent",
                        ));
                    }
                }
                let new = self.new_agent(&definition)?;
                let agent = control.update_agent(&agent_id, new).await?;
                let access = crate::control::AgentAccess {
                    agent,
                    access_role: access.access_role,
                };
                self.announce_agent(&agent_id, reason::AGENT_UPDATED, &[])
                    .await;
                self.get_agent_response(caller, &access).await
            }
            Action::DeleteAgent { agent_id } => {
                authz::require_owner(control, account, &agent_id).await?;
                let audience = self.audience_of(&agent_id).await;
                let sessions = control.delete_agent(&agent_id).await?;
                self.sockets.agent_deleted(&agent_id);
                self.sockets.audiences_changed();
                // Nothing of it stays reachable: live turns stop with their
                // sessions, every one of them even when one fails, and its
                // memory goes (its tool documents went with its row).
                let mut failed: Option<ApiError> = None;
                // Its runs end first (canceled, the history kept), so no
                // queued turn starts on a session about to go.
                if let Err(e) = self.turns.runs().cancel_agent(&agent_id).await {
                    failed = Some(e.into());
                }
                for session_id in sessions {
                    match self.sessions.delete(&session_id).await {
                        Ok(()) | Err(crate::sessions::SessionError::NotFound(_)) => {}
                        Err(e) => failed = failed.or(Some(e.into())),
                    }
                    let now = agentos_base::clock::unix_ms();
                    if let Err(e) = self.space.uploads.delete_session(&session_id, now).await {
                        failed = failed.or(Some(e.into()));
                    }
                    if let Err(e) = self.space.attachments.delete_session(&session_id).await {
                        failed = failed.or(Some(e.into()));
                    }
                }
                let now = agentos_base::clock::unix_ms();
                if let Err(e) = self.space.uploads.delete_agent(&agent_id, now).await {
                    failed = failed.or(Some(e.into()));
                }
                if let Err(e) = self.space.memory.delete_agent(&agent_id).await {
                    failed = failed.or(Some(e.into()));
                }
                if let Err(e) = self.triggers.delete_agent(&agent_id).await {
                    failed = failed.or(Some(e.into()));
                }
                self.sockets.account_changed(
                    &audience,
                    reason::AGENT_DELETED,
                    Some(&agent_id),
                    None,
                );
                match failed {
                    Some(e) => Err(e),
                    None => ok(&DeleteAgentResponse { agent_id }),
                }
            }
            Action::ListAgentInvites => {
                let invites = control.list_invites_for(account).await?;
                ok(&ListAgentInvitesResponse {
                    invites: invites.iter().map(render::invite).collect(),
                })
            }
            Action::ListAgentCollaborators { agent_id } => {
                let access = authz::require_read(control, account, &agent_id).await?;
                let collaborators = control.list_collaborators(&agent_id).await?;
                // Who was invited and has not answered is the owner's
                // business: others see accepted collaborators only.
                let is_owner = access.access_role == AccessRole::Owner;
                ok(&ListAgentCollaboratorsResponse {
                    agent_id,
                    public_read: access.agent.public_read,
                    public_chat: None,
                    // The owner first, as the reference lists it.
                    collaborators: std::iter::once(render::owner_collaborator(&access.agent))
                        .chain(
                            collaborators
                                .iter()
                                .filter(|c| is_owner || c.status == CollaboratorStatus::Accepted)
                                .map(render::collaborator),
                        )
                        .collect(),
                })
            }
            Action::InviteAgentCollaborator {
                agent_id,
                account_id,
                role,
            } => {
                authz::require_owner(control, account, &agent_id).await?;
                if account_id == account {
                    return Err(ApiError::bad_request(
                        ApiCode::InvalidArgument,
                        "the owner cannot invite itself",
                    ));
                }
                let role = render::stored_collaborator_role(role);
                let record = control.invite(&agent_id, &account_id, role).await?;
                self.announce_agent(&agent_id, reason::COLLABORATORS_CHANGED, &[])
                    .await;
                self.sockets.account_changed(
                    std::slice::from_ref(&account_id),
                    reason::AGENT_INVITED,
                    Some(&agent_id),
                    None,
                );
                ok(&InviteAgentCollaboratorResponse {
                    collaborator: render::collaborator(&record),
                })
            }
            Action::RemoveAgentCollaborator {
                agent_id,
                account_id,
            } => {
                authz::require_owner(control, account, &agent_id).await?;
                control.remove_collaborator(&agent_id, &account_id).await?;
                self.announce_agent(&agent_id, reason::COLLABORATORS_CHANGED, &[])
                    .await;
                self.sockets.account_changed(
                    std::slice::from_ref(&account_id),
                    reason::AGENT_ACCESS_REMOVED,
                    Some(&agent_id),
                    None,
                );
                ok(&RemoveAgentCollaboratorResponse {
                    agent_id,
                    account_id,
                })
            }
            Action::SetAgentPublicRead {
                agent_id,
                public_read,
            } => {
                authz::require_owner(control, account, &agent_id).await?;
                let agent = control.set_public_read(&agent_id, public_read).await?;
                self.announce_agent(&agent_id, reason::AGENT_UPDATED, &[])
                    .await;
                ok(&SetAgentPublicReadResponse {
                    agent: render::agent(&agent, Some(AccessRole::Owner))?,
                })
            }
            Action::AcceptAgentInvite { agent_id } => {
                let agent = control.accept_invite(&agent_id, account).await?;
                self.announce_agent(&agent_id, reason::COLLABORATORS_CHANGED, &[])
                    .await;
                let access = authz::access(control, account, &agent.agent_id).await?;
                ok(&AcceptAgentInviteResponse {
                    agent: render::agent(&agent, access.map(|a| a.access_role))?,
                })
            }
            Action::DeclineAgentInvite { agent_id } => {
                control.decline_invite(&agent_id, account).await?;
                self.announce_agent(&agent_id, reason::COLLABORATORS_CHANGED, &[])
                    .await;
                ok(&DeclineAgentInviteResponse { agent_id })
            }
            other => Err(ApiError::bad_request(
                ApiCode::UnsupportedAction,
                format!(
                    "the action {} is not supported by this server",
                    other.name()
                ),
            )),
        }
    }
}
