//! The service methods for agents, their collaborators and their session
//! links. Authorization is not checked here: the front doors ask
//! `authz` first, then call these.

use agentos_schema::DbError;

use super::error::ControlError;
use super::idempotency::check_key;
use super::store::{insert_agent_statements, inserted_agent, now_ms, Guarded, LinkRefusal};
use super::types::*;
use super::{limit, validate, Control};

/// Most sessions one listing page holds.
pub const MAX_SESSION_PAGE: u32 = 200;

impl Control {
    fn check_new_agent(&self, new: &NewAgent) -> Result<(), ControlError> {
        let max = self.inner.limits.max_agent_definition_bytes;
        if new.definition.is_empty() {
            return Err(ControlError::invalid("definition is empty"));
        }
        if new.definition.len() as u64 > max {
            return Err(limit(setting::MAX_DEFINITION_BYTES, max));
        }
        validate::label("name", &new.name, validate::MAX_AGENT_NAME_BYTES)?;
        validate::name("adapter", &new.adapter, validate::MAX_NAME_BYTES)
    }

    fn new_record(owner: &str, new: NewAgent) -> AgentRecord {
        let now = now_ms();
        AgentRecord {
            agent_id: uuid::Uuid::new_v4().to_string(),
            account_id: owner.to_owned(),
            definition: new.definition,
            name: new.name,
            adapter: new.adapter,
            status: AgentStatus::Idle,
            public_read: false,
            created_at_ms: now,
            updated_at_ms: now,
        }
    }

    fn agents_full(&self) -> ControlError {
        limit(
            setting::MAX_AGENTS,
            self.inner.limits.max_agents_per_account,
        )
    }

    /// Creates an agent owned by `owner`, within `maxAgentsPerAccount`.
    pub async fn create_agent(
        &self,
        owner: &str,
        new: NewAgent,
    ) -> Result<AgentRecord, ControlError> {
        self.check_new_agent(&new)?;
        self.ensure_account(owner).await?;
        let max = self.inner.limits.max_agents_per_account;
        match self
            .store()
            .insert_agent(&Self::new_record(owner, new), max)
            .await?
        {
            Guarded::Done { value, count } => {
                self.observe(setting::MAX_AGENTS, owner, count, max);
                Ok(value)
            }
            Guarded::Refused => Err(self.agents_full()),
        }
    }

    /// `create_agent` once per client request id: the agent and the
    /// idempotency record commit in one transaction. `render` makes the
    /// response bytes from the new agent (they are what a retry replays).
    pub async fn create_agent_idempotent(
        &self,
        owner: &str,
        new: NewAgent,
        key: IdempotencyKey,
        render: impl FnOnce(&AgentRecord) -> Vec<u8>,
    ) -> Result<Idempotent, ControlError> {
        check_key(&key)?;
        if key.account_id != owner {
            return Err(ControlError::invalid(
                "the idempotency key belongs to another account",
            ));
        }
        self.check_new_agent(&new)?;
        self.ensure_account(owner).await?;
        let _turn = self.enter_idempotent(&key).await;
        if let Some(replayed) = self.replay(&key).await? {
            return Ok(replayed);
        }
        let record = Self::new_record(owner, new);
        let response = render(&record);
        validate::bytes(
            "response",
            &response,
            0,
            validate::MAX_RECORDED_RESPONSE_BYTES,
        )?;
        let max = self.inner.limits.max_agents_per_account;
        let mut statements = insert_agent_statements(&record, max);
        let record_at = statements.len() as u32;
        statements.extend(self.idempotency_statements(&key, &response));
        match self.store().db().transaction(statements).await {
            Ok(mut results) => {
                let (_, count) = inserted_agent(&mut results)?;
                self.observe(setting::MAX_AGENTS, owner, count, max);
                Ok(Idempotent::Fresh(response))
            }
            Err(DbError::ExpectedChanges {
                statement_index: 0, ..
            }) => Err(self.agents_full()),
            // Recorded meanwhile by another writer; the agent rolled back.
            Err(e) if e.is_constraint() && e.statement_index() == Some(record_at) => {
                match self.replay(&key).await? {
                    Some(replayed) => Ok(replayed),
                    None => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    pub async fn get_agent(&self, agent_id: &str) -> Result<Option<AgentRecord>, ControlError> {
        let read = || async { Ok(self.store().get_agent(agent_id).await?) };
        match &self.inner.kept {
            Some(kept) => kept.agents.get_or_read(&agent_id.to_owned(), read).await,
            None => read().await,
        }
    }

    /// The agent and the role `account` has on it (see `authz::access`).
    pub(super) async fn agent_with_access(
        &self,
        agent_id: &str,
        account: &str,
    ) -> Result<Option<(AgentRecord, Option<(CollaboratorRole, CollaboratorStatus)>)>, ControlError>
    {
        Ok(self.store().agent_with_access(agent_id, account).await?)
    }

    /// Agents the account owns, then those it collaborates on (accepted),
    /// each with the account's role.
    pub async fn list_agents_for(&self, account: &str) -> Result<Vec<AgentAccess>, ControlError> {
        Ok(self.store().list_agents_for(account).await?)
    }

    fn agent_not_found(agent_id: &str) -> ControlError {
        ControlError::NotFound(format!("agent {agent_id}"))
    }

    /// Replaces the agent's definition (and the name and adapter taken
    /// from it).
    pub async fn update_agent(
        &self,
        agent_id: &str,
        update: NewAgent,
    ) -> Result<AgentRecord, ControlError> {
        self.check_new_agent(&update)?;
        self.store()
            .update_agent(agent_id, &update.definition, &update.name, &update.adapter)
            .await?
            .ok_or_else(|| Self::agent_not_found(agent_id))
    }

    pub async fn set_agent_status(
        &self,
        agent_id: &str,
        status: AgentStatus,
    ) -> Result<AgentRecord, ControlError> {
        self.store()
            .set_agent_status(agent_id, status)
            .await?
            .ok_or_else(|| Self::agent_not_found(agent_id))
    }

    /// With `public_read`, every signed account reads the agent.
    pub async fn set_public_read(
        &self,
        agent_id: &str,
        public_read: bool,
    ) -> Result<AgentRecord, ControlError> {
        self.store()
            .set_public_read(agent_id, public_read)
            .await?
            .ok_or_else(|| Self::agent_not_found(agent_id))
    }

    /// Deletes the agent with its collaborators and session links, in one
    /// transaction. Answers the linked session ids: the caller deletes
    /// those sessions through the sessions service.
    pub async fn delete_agent(&self, agent_id: &str) -> Result<Vec<String>, ControlError> {
        self.store()
            .delete_agent(agent_id)
            .await?
            .ok_or_else(|| Self::agent_not_found(agent_id))
    }

    // ---- collaborators -------------------------------------------------

    /// Invites `account` to the agent with `role` (or changes the role of
    /// an existing collaborator). Bounded per agent and per invitee.
    pub async fn invite(
        &self,
        agent_id: &str,
        account: &str,
        role: CollaboratorRole,
    ) -> Result<CollaboratorRecord, ControlError> {
        validate::principal("accountId", account)?;
        let limits = &self.inner.limits;
        let (per_agent, per_account) = (
            limits.max_collaborators_per_agent,
            limits.max_collaborations_per_account,
        );
        let write = self
            .store()
            .invite(agent_id, account, role, per_agent, per_account)
            .await?;
        match write {
            Guarded::Done { value, count } => {
                self.observe(setting::MAX_COLLABORATORS, agent_id, count, per_agent);
                Ok(value)
            }
            Guarded::Refused => {
                let agent = self
                    .store()
                    .get_agent(agent_id)
                    .await?
                    .ok_or_else(|| Self::agent_not_found(agent_id))?;
                if agent.account_id == account {
                    return Err(ControlError::invalid(
                        "the owner cannot be invited to their own agent",
                    ));
                }
                let (of_agent, _) = self.store().collaborator_counts(agent_id, account).await?;
                Err(if of_agent >= per_agent {
                    limit(setting::MAX_COLLABORATORS, per_agent)
                } else {
                    limit(setting::MAX_COLLABORATIONS, per_account)
                })
            }
        }
    }

    fn no_invite(agent_id: &str, account: &str) -> ControlError {
        ControlError::NotFound(format!("invitation of {account} to agent {agent_id}"))
    }

    /// Accepts the account's invitation; answers the agent it now reaches.
    pub async fn accept_invite(
        &self,
        agent_id: &str,
        account: &str,
    ) -> Result<AgentRecord, ControlError> {
        if !self.store().accept_invite(agent_id, account).await? {
            return Err(Self::no_invite(agent_id, account));
        }
        self.store()
            .get_agent(agent_id)
            .await?
            .ok_or_else(|| Self::agent_not_found(agent_id))
    }

    /// Declines (deletes) a pending invitation.
    pub async fn decline_invite(&self, agent_id: &str, account: &str) -> Result<(), ControlError> {
        if self
            .store()
            .delete_collaborator(agent_id, account, true)
            .await?
        {
            Ok(())
        } else {
            Err(Self::no_invite(agent_id, account))
        }
    }

    /// Removes a collaborator, pending or accepted.
    pub async fn remove_collaborator(
        &self,
        agent_id: &str,
        account: &str,
    ) -> Result<(), ControlError> {
        if self
            .store()
            .delete_collaborator(agent_id, account, false)
            .await?
        {
            Ok(())
        } else {
            Err(ControlError::NotFound(format!(
                "collaborator {account} of agent {agent_id}"
            )))
        }
    }

    pub async fn list_collaborators(
        &self,
        agent_id: &str,
    ) -> Result<Vec<CollaboratorRecord>, ControlError> {
        let read = || async { Ok(self.store().list_collaborators(agent_id).await?) };
        match &self.inner.kept {
            Some(kept) => {
                kept.collaborators
                    .get_or_read(&agent_id.to_owned(), read)
                    .await
            }
            None => read().await,
        }
    }

    /// The account's pending invitations.
    pub async fn list_invites_for(&self, account: &str) -> Result<Vec<Invite>, ControlError> {
        Ok(self.store().list_invites_for(account).await?)
    }

    // ---- session links -------------------------------------------------

    /// Records that the (existing) session serves the agent. Linking a
    /// session to the agent it already serves is harmless; to another
    /// agent it is a `conflict`.
    pub async fn link_session(
        &self,
        session_id: &str,
        agent_id: &str,
    ) -> Result<SessionLink, ControlError> {
        self.link_session_with(session_id, agent_id, Vec::new())
            .await
    }

    /// `link_session` for a delegated child's session, which names the
    /// session (if any) and the run it works for.
    pub async fn link_child_session(
        &self,
        session_id: &str,
        agent_id: &str,
        parent_session_id: Option<&str>,
        run_id: &str,
    ) -> Result<SessionLink, ControlError> {
        let child =
            crate::control::store::child_link_statement(session_id, parent_session_id, run_id);
        self.link_session_with(session_id, agent_id, vec![child])
            .await
    }

    /// `link_session` for a session made under a client request id: the
    /// link and the idempotency record of `response` commit in one
    /// transaction, so a retry finds both or neither (and then makes a
    /// session again; one made but never linked is no Seed session). The
    /// caller holds the key's turn ([`Control::one_at_a_time`]) and has
    /// checked [`Control::stored_answer`].
    pub async fn link_session_recorded(
        &self,
        session_id: &str,
        agent_id: &str,
        key: &IdempotencyKey,
        response: &[u8],
    ) -> Result<SessionLink, ControlError> {
        check_key(key)?;
        validate::bytes(
            "response",
            response,
            0,
            validate::MAX_RECORDED_RESPONSE_BYTES,
        )?;
        let record = self.idempotency_statements(key, response);
        self.link_session_with(session_id, agent_id, record).await
    }

    async fn link_session_with(
        &self,
        session_id: &str,
        agent_id: &str,
        with: Vec<agentos_schema::Statement>,
    ) -> Result<SessionLink, ControlError> {
        let recorded = !with.is_empty();
        match self
            .store()
            .link_session(session_id, agent_id, with)
            .await?
        {
            Ok(link) => Ok(link),
            Err(LinkRefusal::NoAgent) => Err(Self::agent_not_found(agent_id)),
            Err(LinkRefusal::NoSession) => {
                Err(ControlError::NotFound(format!("session {session_id}")))
            }
            Err(LinkRefusal::AlreadyLinked) => {
                match self.store().session_agent(session_id).await? {
                    // Without its record: the record must not be lost.
                    Some(_) if recorded => Err(ControlError::Conflict(format!(
                        "session {session_id} is linked already"
                    ))),
                    Some(link) if link.agent_id == agent_id => Ok(link),
                    _ => Err(ControlError::Conflict(format!(
                        "session {session_id} serves another agent"
                    ))),
                }
            }
        }
    }

    /// Forgets the session's link (when the session is deleted); `false`
    /// when it had none.
    pub async fn unlink_session(&self, session_id: &str) -> Result<bool, ControlError> {
        Ok(self.store().unlink_session(session_id).await?)
    }

    /// The agent a live session serves, if it serves one.
    pub async fn session_agent(
        &self,
        session_id: &str,
    ) -> Result<Option<SessionLink>, ControlError> {
        let read = || async { Ok(self.store().session_agent(session_id).await?) };
        match &self.inner.kept {
            Some(kept) => kept.links.get_or_read(&session_id.to_owned(), read).await,
            None => read().await,
        }
    }

    /// How many live sessions the agent has.
    pub async fn session_count(&self, agent_id: &str) -> Result<u64, ControlError> {
        Ok(self.store().session_count_of(agent_id).await?)
    }

    /// One page of sessions, newest first on `(updated_at_ms, session_id)`;
    /// `limit` is clamped to 1..=200.
    pub async fn list_sessions_page(
        &self,
        scope: &SessionScope,
        cursor: Option<&SessionCursor>,
        limit: u32,
    ) -> Result<SessionPage, ControlError> {
        let limit = u64::from(limit.clamp(1, MAX_SESSION_PAGE));
        let mut sessions = self
            .store()
            .list_sessions_page(scope, cursor, limit + 1)
            .await?;
        let more = sessions.len() as u64 > limit;
        sessions.truncate(limit as usize);
        let next_cursor = if more {
            sessions.last().map(|last| SessionCursor {
                updated_before: last.updated_at_ms,
                id_before: last.session_id.clone(),
            })
        } else {
            None
        };
        Ok(SessionPage {
            sessions,
            next_cursor,
        })
    }
}
