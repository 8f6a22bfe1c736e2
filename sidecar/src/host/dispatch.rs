//! Host methods → service calls: decode params (a mismatch is -32602),
//! call the service, and map its typed error to a JSON-RPC error whose
//! `data.code` is the stable snake_case code.

use std::sync::Arc;

use agentos_protocol::host::{
    codes, methods, Actor, ErrorObject, HistoryParams, InitializeParams, ListSessionsParams,
    OpenSessionParams, PromptParams, RespondPermissionParams, SessionIdParams,
    SetConfigOptionParams, SubscribeParams, UnsubscribeParams, PROTOCOL_VERSION,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::ConnectionSink;
use crate::sessions::{SessionError, Sink};
use crate::vm::Vm;

fn params<T: DeserializeOwned>(value: Value) -> Result<T, ErrorObject> {
    let value = if value.is_null() { json!({}) } else { value };
    serde_json::from_value(value).map_err(|e| ErrorObject::invalid_params(e.to_string()))
}

/// The JSON-RPC error for a session-layer error.
pub fn error_object(e: &SessionError) -> ErrorObject {
    let mut extra = Map::new();
    if let Some(setting) = e.setting() {
        extra.insert("setting".into(), json!(setting));
    }
    match e {
        SessionError::HistoryCursorExpired { earliest } => {
            extra.insert("earliestAvailableSequence".into(), json!(earliest));
        }
        SessionError::Limit { used, limit, .. } => {
            extra.insert("used".into(), json!(used));
            extra.insert("limit".into(), json!(limit));
        }
        SessionError::PromptFailed { error } => {
            if let Some(obj) = error.as_object() {
                for (k, v) in obj {
                    if k != "code" {
                        extra.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        SessionError::InvalidArgument(_) => {
            return ErrorObject::invalid_params(e.to_string());
        }
        _ => {}
    }
    ErrorObject::application(e.code(), e.to_string(), extra)
}

fn session(e: SessionError) -> ErrorObject {
    error_object(&e)
}

/// Runs one method. `after_reply` receives a signal to fire once the answer
/// has been queued (subscriptions start delivering only then).
pub(crate) async fn dispatch(
    vm: &Arc<Vm>,
    sink: &Arc<ConnectionSink>,
    method: &str,
    raw: Value,
    after_reply: &mut Option<oneshot::Sender<()>>,
) -> Result<Value, ErrorObject> {
    let sessions = &vm.sessions;
    match method {
        methods::INITIALIZE => {
            let p: InitializeParams = params(raw)?;
            if p.protocol_version != PROTOCOL_VERSION {
                let mut extra = Map::new();
                extra.insert("supported".into(), json!([PROTOCOL_VERSION]));
                return Err(ErrorObject::application(
                    "unsupported_protocol_version",
                    format!("protocol version {} is not supported", p.protocol_version),
                    extra,
                ));
            }
            Ok(json!({
                "protocolVersion": PROTOCOL_VERSION,
                "sidecar": {"name": "agentos-sidecar", "version": env!("CARGO_PKG_VERSION")},
                "database": {"type": vm.database_kind.as_str()},
                "limits": vm.config.limits,
            }))
        }
        methods::SESSIONS_OPEN => {
            let p: OpenSessionParams = params(raw)?;
            sessions.open(p).await.map_err(session)
        }
        methods::SESSIONS_GET => {
            let p: SessionIdParams = params(raw)?;
            sessions
                .get(&p.session_id)
                .await
                .map(|info| json!({ "session": info }))
                .map_err(session)
        }
        methods::SESSIONS_LIST => {
            let p: ListSessionsParams = params(raw)?;
            sessions.list(p).await.map_err(session)
        }
        methods::SESSIONS_DELETE => {
            let p: SessionIdParams = params(raw)?;
            sessions
                .delete(&p.session_id)
                .await
                .map(|()| json!({"deleted": true}))
                .map_err(session)
        }
        methods::SESSIONS_UNLOAD => {
            let p: SessionIdParams = params(raw)?;
            sessions
                .unload(&p.session_id)
                .await
                .map(|()| json!({"unloaded": true}))
                .map_err(session)
        }
        methods::SESSIONS_PROMPT => {
            let p: PromptParams = params(raw)?;
            let actor = Actor::User {
                account: None,
                signer: None,
            };
            sessions
                .prompt(&p.session_id, p.content, p.idempotency_key, actor)
                .await
                .map_err(session)
        }
        methods::SESSIONS_CANCEL => {
            let p: SessionIdParams = params(raw)?;
            sessions
                .cancel(&p.session_id)
                .await
                .map(|status| json!({ "status": status }))
                .map_err(session)
        }
        methods::SESSIONS_RESPOND_PERMISSION => {
            let p: RespondPermissionParams = params(raw)?;
            let outcome = sessions
                .respond_permission(&p.session_id, &p.request_id, &p.option_id)
                .await
                .map_err(session)?;
            Ok(match outcome.reason {
                None => json!({"status": "accepted"}),
                Some(reason) => json!({"status": "not_pending", "reason": reason}),
            })
        }
        methods::SESSIONS_HISTORY => {
            let p: HistoryParams = params(raw)?;
            let page = sessions
                .history(&p.session_id, p.before, p.after, p.limit)
                .await
                .map_err(session)?;
            Ok(json!({
                "events": page.events.iter().map(|e| e.to_public()).collect::<Vec<_>>(),
                "hasMoreBefore": page.has_more_before,
                "hasMoreAfter": page.has_more_after,
            }))
        }
        methods::SESSIONS_SUBSCRIBE => {
            let p: SubscribeParams = params(raw)?;
            let sink: Arc<dyn Sink> = sink.clone();
            let (start, started) = oneshot::channel();
            *after_reply = Some(start);
            sessions
                .subscribe(&p.session_id, p.after, sink, started)
                .await
                .map(|id| json!({ "subscriptionId": id }))
                .map_err(session)
        }
        methods::SESSIONS_UNSUBSCRIBE => {
            let p: UnsubscribeParams = params(raw)?;
            Ok(json!({ "unsubscribed": sessions.unsubscribe(&p.subscription_id) }))
        }
        methods::SESSIONS_GET_CONFIG => {
            let p: SessionIdParams = params(raw)?;
            sessions.get_config(&p.session_id).await.map_err(session)
        }
        methods::SESSIONS_SET_CONFIG_OPTION => {
            let p: SetConfigOptionParams = params(raw)?;
            sessions
                .set_config_option(&p.session_id, &p.config_id, p.value)
                .await
                .map_err(session)
        }
        methods::SESSIONS_CAPABILITIES => {
            let p: SessionIdParams = params(raw)?;
            sessions.capabilities(&p.session_id).await.map_err(session)
        }
        methods::SESSIONS_AGENT_INFO => {
            let p: SessionIdParams = params(raw)?;
            sessions.agent_info(&p.session_id).await.map_err(session)
        }
        methods::AGENTS_LIST => {
            let agents: Vec<Value> = sessions
                .agents()
                .iter()
                .map(|(id, spec)| {
                    json!({"id": id, "command": spec.command, "args": spec.args, "env": spec.env})
                })
                .collect();
            Ok(json!({ "agents": agents }))
        }
        methods::VM_STATUS => {
            let mut status = sessions.status().await.map_err(session)?;
            status["database"] = json!({"type": vm.database_kind.as_str()});
            status["uptimeMs"] = json!(vm.started.elapsed().as_millis() as u64);
            Ok(status)
        }
        other => {
            let _ = codes::METHOD_NOT_FOUND;
            Err(ErrorObject::method_not_found(other))
        }
    }
}
