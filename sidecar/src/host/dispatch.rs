//! Host methods → service calls: decode params (a mismatch is -32602),
//! call the service, and map its typed error to a JSON-RPC error whose
//! `data.code` is the stable snake_case code.

use std::sync::Arc;

use agentos_protocol::host::{
    codes, methods, Actor, ErrorObject, FsMkdirParams, FsPathParams, FsReadParams, FsReaddirParams,
    FsRemoveParams, FsRenameParams, FsWriteParams, HistoryParams, InitializeParams,
    ListSessionsParams, OpenSessionParams, PromptParams, RespondPermissionParams, SessionIdParams,
    SetConfigOptionParams, SubscribeParams, UnsubscribeParams, PROTOCOL_VERSION,
};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::ConnectionSink;
use crate::sessions::{SessionError, Sink};
use crate::vfs::FsError;
use crate::vm::Vm;

fn to_json(value: &impl Serialize) -> Result<Value, ErrorObject> {
    serde_json::to_value(value).map_err(|e| ErrorObject::new(codes::INTERNAL_ERROR, e.to_string()))
}

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

/// The JSON-RPC error for a file-system error: `data.code` is the errno name.
pub fn fs_error_object(e: &FsError) -> ErrorObject {
    let mut extra = Map::new();
    if let Some(setting) = e.setting() {
        extra.insert("setting".into(), json!(setting));
    }
    ErrorObject::application(e.code(), e.to_string(), extra)
}

fn fs(e: FsError) -> ErrorObject {
    fs_error_object(&e)
}

/// Bytes of file data one `fs/read` returns at most; base64 keeps the answer
/// well inside the frame limit.
const MAX_READ_CHUNK: u64 = 16 << 20;

async fn fs_dispatch(vm: &Arc<Vm>, method: &str, raw: Value) -> Result<Value, ErrorObject> {
    let vfs = &vm.vfs;
    match method {
        methods::FS_STAT => {
            let p: FsPathParams = params(raw)?;
            let stat = vfs.lstat(&p.path).await.map_err(fs)?;
            to_json(&stat)
        }
        methods::FS_READ => {
            let p: FsReadParams = params(raw)?;
            let offset = p.offset.unwrap_or(0);
            let length = p.length.unwrap_or(MAX_READ_CHUNK).min(MAX_READ_CHUNK);
            let stat = vfs.stat(&p.path).await.map_err(fs)?;
            let data = vfs.read(&p.path, offset, length).await.map_err(fs)?;
            let eof = offset.saturating_add(data.len() as u64) >= stat.size;
            Ok(json!({
                "data": BASE64.encode(&data),
                "encoding": "base64",
                "size": stat.size,
                "eof": eof,
            }))
        }
        methods::FS_WRITE => {
            let p: FsWriteParams = params(raw)?;
            let data = BASE64
                .decode(p.data.as_bytes())
                .map_err(|e| ErrorObject::invalid_params(format!("data is not base64: {e}")))?;
            let stat = match p.offset {
                None => vfs.write_file(&p.path, &data).await,
                Some(offset) => vfs.write(&p.path, offset, &data).await,
            }
            .map_err(fs)?;
            to_json(&stat)
        }
        methods::FS_READDIR => {
            let p: FsReaddirParams = params(raw)?;
            let page = vfs
                .readdir(&p.path, p.cursor.as_deref(), p.limit.unwrap_or(1000))
                .await
                .map_err(fs)?;
            to_json(&page)
        }
        methods::FS_MKDIR => {
            let p: FsMkdirParams = params(raw)?;
            let mode = p.mode.unwrap_or(0o755);
            let stat = if p.parents {
                vfs.mkdir_p(&p.path, mode).await
            } else {
                vfs.mkdir(&p.path, mode).await
            }
            .map_err(fs)?;
            to_json(&stat)
        }
        methods::FS_RENAME => {
            let p: FsRenameParams = params(raw)?;
            vfs.rename(&p.from, &p.to).await.map_err(fs)?;
            Ok(json!({}))
        }
        methods::FS_REMOVE => {
            let p: FsRemoveParams = params(raw)?;
            vfs.remove(&p.path, p.recursive).await.map_err(fs)?;
            Ok(json!({}))
        }
        other => Err(ErrorObject::method_not_found(other)),
    }
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
        m if m.starts_with("fs/") => fs_dispatch(vm, m, raw).await,
        other => {
            let _ = codes::METHOD_NOT_FOUND;
            Err(ErrorObject::method_not_found(other))
        }
    }
}
