//! Host methods → service calls: decode params (a mismatch is -32602), call
//! the service, and render its typed answer (`render.rs`) or map its typed
//! error to a JSON-RPC error whose `data.code` is the stable code.

use std::sync::Arc;

use agentos_protocol::host::{
    self as wire, codes, methods, Actor, ErrorObject, HistoryParams, InitializeParams,
    ListSessionsParams, OpenSessionParams, PromptParams, RespondPermissionParams, SessionIdParams,
    SetConfigOptionParams, SubscribeParams, UnsubscribeParams, PROTOCOL_VERSION,
};
use agentos_protocol::ErrorCode;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::codec::{params, reply};
use super::{render, HostServices};
use crate::http::proxy::ProxyError;
use crate::sessions::{LimitUse, OpenSession, SessionConfig, SessionError, Sink};
use crate::work::{TurnError, TurnOwner, TurnRequest, WhenBusy};

fn session(e: SessionError) -> ErrorObject {
    render::error_object(&e)
}

fn turn(e: TurnError) -> ErrorObject {
    match e {
        TurnError::Session(e) => render::error_object(&e),
        TurnError::Run(e) => render::run_error_object(&e),
    }
}

fn config(config: SessionConfig) -> Result<Box<RawValue>, ErrorObject> {
    reply(&wire::SessionConfig {
        revision: config.revision,
        options: config.options,
    })
}

/// Runs one method. `after_reply` receives a signal to fire once the answer
/// has been queued (subscriptions start delivering only then).
pub(super) async fn dispatch(
    services: &Arc<HostServices>,
    sink: &Arc<dyn Sink>,
    method: &str,
    raw: Value,
    after_reply: &mut Option<oneshot::Sender<()>>,
) -> Result<Box<RawValue>, ErrorObject> {
    let sessions = &services.sessions;
    match method {
        methods::INITIALIZE => {
            let p: InitializeParams = params(raw)?;
            if p.protocol_version != PROTOCOL_VERSION {
                let mut extra = Map::new();
                extra.insert("supported".into(), json!([PROTOCOL_VERSION]));
                return Err(ErrorObject::application(
                    ErrorCode::UnsupportedProtocolVersion,
                    format!("protocol version {} is not supported", p.protocol_version),
                    extra,
                ));
            }
            reply(&wire::InitializeResult {
                protocol_version: PROTOCOL_VERSION,
                sidecar: wire::SidecarInfo {
                    name: "agentos-sidecar".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                },
                database: wire::DatabaseInfo {
                    kind: services.database_kind.as_str().into(),
                },
                limits: &services.limits,
            })
        }
        methods::SESSIONS_OPEN => {
            let p: OpenSessionParams = params(raw)?;
            let info = sessions.open(open_session(p)).await.map_err(session)?;
            reply(&render::session_info(&info))
        }
        methods::SESSIONS_GET => {
            let p: SessionIdParams = params(raw)?;
            let info = sessions.get(&p.session_id).await.map_err(session)?;
            reply(&wire::GetSessionResult {
                session: render::session_info(&info),
            })
        }
        methods::SESSIONS_LIST => {
            let p: ListSessionsParams = params(raw)?;
            let page = sessions
                .list(p.cursor.as_deref(), p.limit)
                .await
                .map_err(session)?;
            reply(&render::session_page(&page))
        }
        methods::SESSIONS_DELETE => {
            let p: SessionIdParams = params(raw)?;
            sessions.delete(&p.session_id).await.map_err(session)?;
            if let Err(e) = services.triggers.session_deleted(&p.session_id).await {
                // The session is gone; a firing naming it is only shown.
                tracing::warn!(session = %p.session_id, error = %e, "a deleted session's firings still name it");
            }
            // Its files go too (a session id no attachment can have is
            // simply not one of theirs).
            let now = agentos_base::clock::unix_ms();
            let uploads = services.uploads.delete_session(&p.session_id, now).await;
            let attachments = services.attachments.delete_session(&p.session_id).await;
            for e in [attachments.err(), uploads.err()].into_iter().flatten() {
                if !matches!(e, crate::space::AttachmentError::Invalid(_)) {
                    tracing::warn!(session = %p.session_id, error = %e, "a deleted session's files were not all removed");
                }
            }
            reply(&wire::DeleteSessionResult { deleted: true })
        }
        methods::SESSIONS_UNLOAD => {
            let p: SessionIdParams = params(raw)?;
            sessions.unload(&p.session_id).await.map_err(session)?;
            reply(&wire::UnloadSessionResult { unloaded: true })
        }
        methods::SESSIONS_PROMPT => {
            let p: PromptParams = params(raw)?;
            let actor = Actor::User {
                account: None,
                signer: None,
            };
            // The one turn entry, refusing words while the session is busy.
            let request = TurnRequest {
                content: p.content,
                key: p.idempotency_key,
                actor,
                owner: TurnOwner::default(),
                when_busy: WhenBusy::Refuse,
            };
            let turns = &services.turns;
            let answer = turns.submit(&p.session_id, request).await.map_err(turn)?;
            let outcome = turns.outcome(answer).await.map_err(turn)?;
            reply(&render::prompt_result(outcome))
        }
        methods::SESSIONS_CANCEL => {
            let p: SessionIdParams = params(raw)?;
            let status = sessions.cancel(&p.session_id).await.map_err(session)?;
            reply(&wire::CancelResult { status })
        }
        methods::SESSIONS_RESPOND_PERMISSION => {
            let p: RespondPermissionParams = params(raw)?;
            let answer = sessions
                .respond_permission(&p.session_id, &p.request_id, &p.option_id)
                .await
                .map_err(session)?;
            reply(&render::permission_answer(answer))
        }
        methods::SESSIONS_HISTORY => {
            let p: HistoryParams = params(raw)?;
            let page = sessions
                .history(&p.session_id, p.before, p.after, p.limit)
                .await
                .map_err(session)?;
            let events = page
                .events
                .iter()
                .map(|e| RawValue::from_string(e.public_json()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ErrorObject::new(codes::INTERNAL_ERROR, e.to_string()))?;
            reply(&wire::HistoryResult {
                events,
                has_more_before: page.has_more_before,
                has_more_after: page.has_more_after,
            })
        }
        methods::SESSIONS_SUBSCRIBE => {
            let p: SubscribeParams = params(raw)?;
            let sink = sink.clone();
            let (start, started) = oneshot::channel();
            *after_reply = Some(start);
            let max = services.limits.host.max_subscriptions_per_connection;
            let id = sessions
                .subscribe(&p.session_id, p.after, sink, started, max)
                .await
                .map_err(session)?;
            reply(&wire::SubscribeResult {
                subscription_id: id,
            })
        }
        methods::SESSIONS_UNSUBSCRIBE => {
            let p: UnsubscribeParams = params(raw)?;
            reply(&wire::UnsubscribeResult {
                unsubscribed: sessions.unsubscribe(&p.subscription_id),
            })
        }
        methods::SESSIONS_GET_CONFIG => {
            let p: SessionIdParams = params(raw)?;
            config(sessions.get_config(&p.session_id).await.map_err(session)?)
        }
        methods::SESSIONS_SET_CONFIG_OPTION => {
            let p: SetConfigOptionParams = params(raw)?;
            config(
                sessions
                    .set_config_option(&p.session_id, &p.config_id, p.value)
                    .await
                    .map_err(session)?,
            )
        }
        methods::SESSIONS_CAPABILITIES => {
            let p: SessionIdParams = params(raw)?;
            let capabilities = sessions
                .capabilities(&p.session_id)
                .await
                .map_err(session)?;
            reply(&wire::CapabilitiesResult { capabilities })
        }
        methods::SESSIONS_AGENT_INFO => {
            let p: SessionIdParams = params(raw)?;
            let info = sessions.agent_info(&p.session_id).await.map_err(session)?;
            reply(&wire::AgentInfoResult { agent_info: info })
        }
        methods::AGENTS_LIST => {
            let agents = sessions
                .agents()
                .iter()
                .map(|(id, spec)| wire::AgentEntry {
                    id: id.clone(),
                    command: spec.command.clone(),
                    args: spec.args.clone(),
                    env_names: spec.env.keys().cloned().collect(),
                })
                .collect();
            reply(&wire::AgentsList { agents })
        }
        methods::HTTP_REQUEST => {
            let p: wire::HttpRequestParams = params(raw)?;
            // The answer is base64 inside a frame: three quarters of the
            // frame bound, less room for the envelope.
            let max =
                (services.limits.host.max_frame_bytes as usize / 4 * 3).saturating_sub(64 * 1024);
            let answer = crate::http::proxy::forward(services.http.clone(), p, max)
                .await
                .map_err(|e| match e {
                    // Our answer would not fit a frame: not the host's
                    // mistake, and the setting to raise is the frame bound.
                    ProxyError::TooLarge(_) => {
                        let mut extra = Map::new();
                        extra.insert("setting".into(), json!("limits.host.maxFrameBytes"));
                        ErrorObject::application(ErrorCode::FrameTooLarge, e.to_string(), extra)
                    }
                    ProxyError::Invalid(_) => ErrorObject::invalid_params(e.to_string()),
                })?;
            reply(&answer)
        }
        methods::SIGNERS_AUTHORIZE => {
            super::signers::authorize(&services.control, params(raw)?).await
        }
        methods::SIGNERS_REVOKE => {
            super::signers::revoke(&services.control, &services.sockets, params(raw)?).await
        }
        methods::SIGNERS_LIST => super::signers::list(&services.control, params(raw)?).await,
        methods::VM_STATUS => {
            let status = sessions.status().await.map_err(session)?;
            // The file system's use is shown when it can be read; status
            // never fails for it.
            let fs_usage = services.vfs.usage().await.ok();
            let others: Vec<LimitUse> = services
                .limits
                .other_entries()
                .into_iter()
                .map(|(setting, limit)| LimitUse {
                    setting,
                    limit,
                    used: match setting {
                        "limits.fs.maxTotalBytes" => fs_usage.map(|u| u.total_bytes),
                        "limits.fs.maxInodes" => fs_usage.map(|u| u.inode_count),
                        "limits.host.maxQueuedBytes" => Some(status.memory.host_queued_bytes),
                        _ => None,
                    },
                })
                .collect();
            reply(&render::vm_status(
                &status,
                &others,
                services.database_kind.as_str(),
                services.started.elapsed().as_millis() as u64,
                services.launcher.info(),
                services.control.secrets_key_id().await.is_none(),
            ))
        }
        // Boxed: each request in flight holds a future sized for the
        // largest branch, and these are not the turns' path.
        m if m.starts_with("fs/") => Box::pin(super::fs::dispatch(&services.vfs, m, raw)).await,
        m if m.starts_with("runs/") => {
            Box::pin(super::runs::dispatch(&services.runs, m, raw)).await
        }
        m if m.starts_with("triggers/") => {
            Box::pin(super::triggers::dispatch(services, m, raw)).await
        }
        other => Err(ErrorObject::method_not_found(other)),
    }
}

/// `sessions/open`'s params as the session service's request.
fn open_session(p: OpenSessionParams) -> OpenSession {
    OpenSession {
        session_id: p.session_id,
        agent: p.agent,
        cwd: p.cwd,
        additional_directories: p.additional_directories,
        env: p.env,
        mcp_servers: p.mcp_servers,
        permission_policy: p.permission_policy,
        title: p.title,
        metadata: p.metadata,
    }
}
