//! Seed triggers: `ListAgentTriggers`, `GetAgentTrigger`,
//! `CreateAgentTrigger` (idempotent by `clientRequestId`),
//! `UpdateAgentTrigger` and `DeleteAgentTrigger`. A reader of the agent
//! lists and gets, a writer also creates, edits and deletes; a stranger
//! hears that the agent (or the trigger) does not exist. Triggers belong to
//! the agent owner's account whoever writes them, and every write tells the
//! agent's accounts and subscribers.

use std::collections::BTreeMap;

use agentos_protocol::seed::response::{
    CreateAgentTriggerResponse, DeleteAgentTriggerResponse, GetAgentTriggerResponse,
    ListAgentTriggersResponse, UpdateAgentTriggerResponse,
};
use agentos_protocol::seed::{
    encode_response, ipld_to_json, json_to_ipld_clipped, Action, ApiCode, Ipld, JsonForm,
};
use serde_json::Value;

use super::{ok, ApiError, Caller, SignedApi};
use crate::control::{authz, AgentAccess, ControlError, SessionListRow};
use crate::http::ws::reason;
use crate::triggers::{TriggerError, Triggers};

/// A trigger or patch as plain JSON for the checks (bytes and links are
/// not plain data, and are refused with the field named).
fn plain(value: &Ipld, what: &str) -> Result<Value, ApiError> {
    ipld_to_json(value, JsonForm::Plain).map_err(|e| {
        ApiError::bad_request(
            ApiCode::BadRequest,
            format!("{what} must be plain data ({e})"),
        )
    })
}

impl SignedApi {
    /// The agent a trigger id names, with the caller's access: a trigger
    /// the caller may not see is not found, whatever the reason.
    async fn trigger_access(
        &self,
        account: &str,
        trigger_id: &str,
        write: bool,
    ) -> Result<(crate::triggers::store::TriggerRow, AgentAccess), ApiError> {
        let row = self.triggers.get(trigger_id).await?;
        let granted = if write {
            authz::require_write(&self.control, account, &row.agent_id).await
        } else {
            authz::require_read(&self.control, account, &row.agent_id).await
        };
        match granted {
            Ok(access) => Ok((row, access)),
            Err(ControlError::NotFound(_)) => Err(TriggerError::NotFound("Agent trigger").into()),
            Err(e) => Err(e.into()),
        }
    }

    /// The agent of a list or create, as `Agent not found` to a stranger.
    async fn agent_for_triggers(
        &self,
        account: &str,
        agent_id: &str,
        write: bool,
    ) -> Result<AgentAccess, ApiError> {
        let granted = if write {
            authz::require_write(&self.control, account, agent_id).await
        } else {
            authz::require_read(&self.control, account, agent_id).await
        };
        match granted {
            Ok(access) => Ok(access),
            Err(ControlError::NotFound(_)) => Err(TriggerError::NotFound("Agent").into()),
            Err(e) => Err(e.into()),
        }
    }

    /// The agent's accounts, and its subscribers among them, hear why.
    pub(super) async fn announce_trigger(&self, agent_id: &str, why: &str) {
        let accounts = self.audience_of(agent_id).await;
        self.sockets
            .account_changed(&accounts, why, Some(agent_id), None);
    }

    fn trigger_ipld(row: &crate::triggers::store::TriggerRow) -> Ipld {
        json_to_ipld_clipped(&Triggers::info(row))
    }

    pub(super) async fn trigger_action(
        &self,
        caller: &Caller,
        action: Action,
    ) -> Result<Vec<u8>, ApiError> {
        let account = caller.account.as_str();
        match action {
            Action::ListAgentTriggers { agent_id } => {
                self.agent_for_triggers(account, &agent_id, false).await?;
                let triggers = self
                    .triggers
                    .list(&agent_id)
                    .await?
                    .iter()
                    .map(Self::trigger_ipld)
                    .collect();
                ok(&ListAgentTriggersResponse { triggers })
            }
            Action::GetAgentTrigger { trigger_id } => {
                let (row, access) = self.trigger_access(account, &trigger_id, false).await?;
                let rows: Vec<SessionListRow> = self
                    .triggers
                    .sessions_of(&trigger_id)
                    .await?
                    .into_iter()
                    .map(|session_id| SessionListRow {
                        session_id,
                        agent_id: row.agent_id.clone(),
                        account_id: access.agent.account_id.clone(),
                        created_at_ms: 0,
                        updated_at_ms: 0,
                        parent_session_id: None,
                        run_id: None,
                    })
                    .collect();
                let sessions = self.render_sessions(&rows).await?;
                ok(&GetAgentTriggerResponse {
                    trigger: Self::trigger_ipld(&row),
                    sessions,
                })
            }
            Action::CreateAgentTrigger {
                agent_id,
                trigger,
                client_request_id,
            } => {
                let access = self.agent_for_triggers(account, &agent_id, true).await?;
                let owner = access.agent.account_id.clone();
                let raw = plain(&trigger, "trigger")?;
                let answer = |row: &crate::triggers::store::TriggerRow| {
                    encode_response(&CreateAgentTriggerResponse {
                        trigger: Self::trigger_ipld(row),
                    })
                };
                let (body, fresh) = match client_request_id {
                    None => (
                        answer(&self.triggers.create(&owner, &agent_id, &raw).await?),
                        true,
                    ),
                    Some(id) => {
                        let fields = BTreeMap::from([
                            ("agentId".to_owned(), Ipld::String(agent_id.clone())),
                            ("trigger".to_owned(), trigger.clone()),
                        ]);
                        let mut key = Self::idempotency_key(
                            caller,
                            "CreateAgentTrigger",
                            &id,
                            Ipld::Map(fields),
                        )?;
                        // Recorded under the owner's account, as the
                        // trigger is, and in the trigger's own transaction:
                        // a retry finds both or neither.
                        key.account_id = owner.clone();
                        let _turn = self
                            .control
                            .one_at_a_time(&key.account_id, &key.action, &key.client_id)
                            .await?;
                        match self.control.stored_answer(&key).await? {
                            Some(stored) => (stored, false),
                            None => {
                                let row = Triggers::prepare(&owner, &agent_id, &raw)?;
                                let body = answer(&row);
                                let record = self.control.idempotency_statements(&key, &body);
                                self.triggers.insert(&row, record).await?;
                                (body, true)
                            }
                        }
                    }
                };
                if fresh {
                    self.announce_trigger(&agent_id, reason::TRIGGER_CREATED)
                        .await;
                }
                Ok(body)
            }
            Action::UpdateAgentTrigger { trigger_id, patch } => {
                let (row, _) = self.trigger_access(account, &trigger_id, true).await?;
                let raw = plain(&patch, "patch")?;
                let updated = self.triggers.update(&trigger_id, &raw).await?;
                self.announce_trigger(&row.agent_id, reason::TRIGGER_UPDATED)
                    .await;
                ok(&UpdateAgentTriggerResponse {
                    trigger: Self::trigger_ipld(&updated),
                })
            }
            Action::DeleteAgentTrigger { trigger_id } => {
                let (row, _) = self.trigger_access(account, &trigger_id, true).await?;
                self.triggers.delete(&trigger_id).await?;
                self.announce_trigger(&row.agent_id, reason::TRIGGER_DELETED)
                    .await;
                ok(&DeleteAgentTriggerResponse { trigger_id })
            }
            other => Err(ApiError::bad_request(
                ApiCode::UnsupportedAction,
                format!("{} is not a trigger action", other.name()),
            )),
        }
    }
}
