//! Host `triggers/*` methods → the triggers service: `list`, `get`,
//! `create`, `update` and `delete` with the signed door's rules and words,
//! and `tick`, one look of the schedule monitor now or as of a given
//! instant. The host socket is trusted, so no account is checked: a
//! trigger belongs to its agent's owner, and writes are announced to the
//! agent's accounts as the signed door's are.

use agentos_protocol::host::{
    methods, CreateTriggerParams, DeleteTriggerResult, ErrorObject, GetTriggerResult,
    ListTriggersParams, ListTriggersResult, TickTriggersParams, TickTriggersResult,
    TriggerIdParams, TriggerResult, UpdateTriggerParams,
};
use agentos_protocol::ErrorCode;
use serde_json::{json, value::RawValue, Map, Value};

use super::codec::{params, reply};
use super::render::control_error_object;
use super::HostServices;
use crate::http::ws::{audience, reason};
use crate::triggers::{TriggerError, Triggers};

fn trigger_error_object(e: &TriggerError) -> ErrorObject {
    let mut extra = Map::new();
    let code = match e {
        TriggerError::Invalid(message) => return ErrorObject::invalid_params(message.clone()),
        TriggerError::NotFound(_) => ErrorCode::ControlNotFound,
        TriggerError::Limit { setting, limit } => {
            extra.insert("setting".into(), json!(setting));
            extra.insert("limit".into(), json!(limit));
            ErrorCode::ControlLimit
        }
        TriggerError::Control(inner) => return control_error_object(inner),
        TriggerError::Storage(_) => ErrorCode::ControlStorageError,
    };
    ErrorObject::application(code, e.to_string(), extra)
}

fn failed(e: TriggerError) -> ErrorObject {
    trigger_error_object(&e)
}

/// Tells the agent's accounts (and their `agents/<id>` subscribers) why.
async fn announce(services: &HostServices, agent_id: &str, why: &str) {
    if services.sockets.is_quiet() {
        return;
    }
    let control = &services.control;
    let read = async {
        let agent = control.get_agent(agent_id).await?;
        let collaborators = control.list_collaborators(agent_id).await?;
        Ok::<_, crate::control::ControlError>(agent.map(|a| audience(&a, &collaborators)))
    };
    match read.await {
        Ok(Some(accounts)) => {
            services
                .sockets
                .account_changed(&accounts, why, Some(agent_id), None)
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(agent = %agent_id, error = %e, "cannot announce a trigger change"),
    }
}

pub(super) async fn dispatch(
    services: &HostServices,
    method: &str,
    raw: Value,
) -> Result<Box<RawValue>, ErrorObject> {
    let triggers = &services.triggers;
    match method {
        methods::TRIGGERS_LIST => {
            let p: ListTriggersParams = params(raw)?;
            if services
                .control
                .get_agent(&p.agent_id)
                .await
                .map_err(|e| control_error_object(&e))?
                .is_none()
            {
                return Err(failed(TriggerError::NotFound("Agent")));
            }
            let rows = triggers.list(&p.agent_id).await.map_err(failed)?;
            reply(&ListTriggersResult {
                triggers: rows.iter().map(Triggers::info).collect(),
            })
        }
        methods::TRIGGERS_GET => {
            let p: TriggerIdParams = params(raw)?;
            let row = triggers.get(&p.trigger_id).await.map_err(failed)?;
            let session_ids = triggers.sessions_of(&p.trigger_id).await.map_err(failed)?;
            reply(&GetTriggerResult {
                trigger: Triggers::info(&row),
                session_ids,
            })
        }
        methods::TRIGGERS_CREATE => {
            let p: CreateTriggerParams = params(raw)?;
            let agent = services
                .control
                .get_agent(&p.agent_id)
                .await
                .map_err(|e| control_error_object(&e))?
                .ok_or_else(|| failed(TriggerError::NotFound("Agent")))?;
            let row = triggers
                .create(&agent.account_id, &p.agent_id, &p.trigger)
                .await
                .map_err(failed)?;
            announce(services, &p.agent_id, reason::TRIGGER_CREATED).await;
            reply(&TriggerResult {
                trigger: Triggers::info(&row),
            })
        }
        methods::TRIGGERS_UPDATE => {
            let p: UpdateTriggerParams = params(raw)?;
            let row = triggers
                .update(&p.trigger_id, &p.patch)
                .await
                .map_err(failed)?;
            announce(services, &row.agent_id, reason::TRIGGER_UPDATED).await;
            reply(&TriggerResult {
                trigger: Triggers::info(&row),
            })
        }
        methods::TRIGGERS_DELETE => {
            let p: TriggerIdParams = params(raw)?;
            let row = triggers.get(&p.trigger_id).await.map_err(failed)?;
            triggers.delete(&p.trigger_id).await.map_err(failed)?;
            announce(services, &row.agent_id, reason::TRIGGER_DELETED).await;
            reply(&DeleteTriggerResult {
                trigger_id: p.trigger_id,
            })
        }
        methods::TRIGGERS_TICK => {
            let p: TickTriggersParams = params(raw)?;
            let at = p.at.unwrap_or_else(agentos_base::clock::unix_ms);
            let report = triggers.tick_at(at).await.map_err(failed)?;
            reply(&TickTriggersResult {
                at,
                checked: report.checked,
                matched: report.matched,
                fired: report.fired,
                skipped: report.skipped,
                errors: report.errors,
            })
        }
        other => Err(ErrorObject::method_not_found(other)),
    }
}
