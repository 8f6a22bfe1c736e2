//! Permission requests of a turn: the session's policy answers at once, or
//! an `ask` request is recorded pending (within the pending limits) until
//! the host answers, the turn ends or the route stops; every end is stored
//! with its reason and the agent is always answered.

use agentos_adapters::{IncomingRequestId, RpcError};
use agentos_protocol::acp::PermissionResponse;
use agentos_protocol::session::{Actor, EventKind, PermissionPolicy};
use agentos_protocol::ErrorCode;
use serde_json::{json, Value};

use super::retention::Pruned;
use super::state::{PendingPermission, Turn};
use super::Route;
use crate::sessions::store::{clock_ms, NewEvent, SessionStore};
use crate::sessions::NotPendingReason;
use crate::sessions::SessionError;

impl Route {
    pub(super) async fn permission_request(
        &mut self,
        turn: &mut Turn,
        id: IncomingRequestId,
        mut params: Value,
    ) -> Result<(), ()> {
        let options: Vec<(String, String)> = params
            .get("options")
            .and_then(Value::as_array)
            .map(|opts| {
                opts.iter()
                    .filter_map(|o| {
                        Some((
                            o.get("optionId")?.as_str()?.to_owned(),
                            o.get("kind")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_owned(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let auto = match self.policy {
            PermissionPolicy::AllowAll => Some(["allow_once", "allow_always"]),
            PermissionPolicy::RejectAll => Some(["reject_once", "reject_always"]),
            PermissionPolicy::Ask => None,
        };
        if let Some(kinds) = auto {
            self.flush(turn).await?;
            let outcome = match options
                .iter()
                .find(|(_, kind)| kinds.contains(&kind.as_str()))
            {
                Some((option_id, _)) => PermissionResponse::selected(option_id),
                None => PermissionResponse::cancelled(),
            };
            let _ = self.conn.respond(&id, Ok(outcome));
            return Ok(());
        }
        if let Err(e) = self
            .shared
            .admit_pending_permission(turn.permissions.len() as u64)
            .await
        {
            self.flush(turn).await?;
            let _ = self.conn.respond(
                &id,
                Err(RpcError {
                    code: -32000,
                    message: e.to_string(),
                    data: Some(json!({"code": e.code().as_str(), "setting": e.setting()})),
                }),
            );
            return Ok(());
        }
        let request_id = uuid::Uuid::new_v4().to_string();
        if let Some(obj) = params.as_object_mut() {
            obj.insert("sessionId".into(), json!(self.session_id));
        }
        let request_json = params.to_string();
        let mut events = std::mem::take(&mut turn.pending);
        turn.pending_bytes = 0;
        let request_sequence = self.counters.latest_sequence + events.len() as u64 + 1;
        events.push(NewEvent {
            kind: EventKind::PermissionRequest,
            correlation_id: Some(request_id.clone()),
            outcome_status: None,
            terminal_reason: None,
            actor: Actor::Agent,
            payload_json: request_json.clone(),
        });
        let extra = SessionStore::pending_permission_statements(
            &self.session_id,
            &request_id,
            &turn.prompt_id,
            &request_json,
            request_sequence,
            clock_ms(),
        );
        match self.commit(events, extra).await {
            Ok(()) => {
                turn.permissions.insert(
                    request_id,
                    PendingPermission {
                        adapter_id: id,
                        option_ids: options.into_iter().map(|(o, _)| o).collect(),
                    },
                );
                Ok(())
            }
            Err(e) => {
                turn.failure = Some((ErrorCode::HistoryCommitFailed, e.to_string()));
                let _ = self.conn.respond(&id, Ok(PermissionResponse::cancelled()));
                self.abort_adapter_turn().await;
                Err(())
            }
        }
    }

    /// Stores the end of one pending permission and answers the adapter.
    async fn resolve_permission(
        &mut self,
        turn: &mut Turn,
        request_id: &str,
        reason: &str,
        outcome: Value,
    ) -> Result<(), SessionError> {
        let Some(pending) = turn.permissions.remove(request_id) else {
            return Ok(());
        };
        let accepted = reason == "accepted";
        let response_json = outcome.to_string();
        let event = NewEvent {
            kind: EventKind::PermissionResponse,
            correlation_id: Some(request_id.to_owned()),
            outcome_status: Some(if accepted { "accepted" } else { "not_pending" }),
            terminal_reason: (!accepted).then(|| reason.to_owned()),
            actor: if accepted {
                Actor::User {
                    account: None,
                    signer: None,
                }
            } else {
                Actor::System
            },
            payload_json: response_json.clone(),
        };
        let (mut extra, pruned) = match self.outcome_retention().await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(session = %self.session_id, error = %e, "outcome retention read failed; keeping old outcomes");
                (Vec::new(), Pruned::default())
            }
        };
        extra.extend(SessionStore::resolve_permission_statements(
            &self.session_id,
            request_id,
            reason,
            accepted.then_some(response_json.as_str()),
            self.counters.latest_sequence + 1,
            clock_ms(),
        ));
        let result = self.commit(vec![event], extra).await;
        if result.is_ok() {
            self.outcome_count = self.outcome_count + 1 - pruned.own;
            self.shared.outcomes_changed(pruned.any).await;
        }
        // The agent is answered whatever the store said: it must not hang.
        let _ = self.conn.respond(&pending.adapter_id, Ok(outcome));
        result
    }

    pub(super) async fn respond_permission(
        &mut self,
        turn: &mut Turn,
        request_id: &str,
        option_id: &str,
    ) -> Result<Option<NotPendingReason>, SessionError> {
        let Some(pending) = turn.permissions.get(request_id) else {
            return self.late_permission_reason(request_id).await.map(Some);
        };
        if !pending.option_ids.iter().any(|o| o == option_id) {
            return Err(SessionError::InvalidPermissionOption(option_id.to_owned()));
        }
        let outcome = PermissionResponse::selected(option_id);
        self.resolve_permission(turn, request_id, "accepted", outcome)
            .await?;
        Ok(None)
    }

    /// Why an answer to a request that is not pending here is refused.
    pub(super) async fn late_permission_reason(
        &self,
        request_id: &str,
    ) -> Result<NotPendingReason, SessionError> {
        self.shared
            .late_permission_reason(&self.session_id, request_id)
            .await
    }

    /// Ends every pending permission of the turn with `reason`.
    pub(super) async fn end_permissions(&mut self, turn: &mut Turn, reason: &str) {
        let ids: Vec<String> = turn.permissions.keys().cloned().collect();
        for id in ids {
            let outcome = PermissionResponse::cancelled();
            if let Err(e) = self.resolve_permission(turn, &id, reason, outcome).await {
                tracing::warn!(session = %self.session_id, error = %e, "could not store a permission's end");
            }
        }
    }
}
