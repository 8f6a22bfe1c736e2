//! Starting a route: spawn the adapter, `initialize`, then the restore
//! ladder (`session/resume`, else `session/load`, either one's replay
//! discarded since our history already holds it; an unknown-session answer
//! from either, -32002 or -32603 with `data.details == "NotFoundError"`,
//! falls through to `session/new` plus a bounded continuation of the stored
//! history, prepended once to the next prompt), replay of stored config
//! choices, and the route's companion tasks.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use agentos_adapters::{
    AdapterConnection, AdapterError, AdapterEvent, AdapterEvents, AdapterOptions, RpcError,
};
use agentos_protocol::acp::{self, methods};
use serde_json::Value;
use tokio::sync::mpsc;

use super::commit::{commit_loop, publish_loop, Pipeline, MAX_BATCH_EVENTS};
use super::{adapter_error, Route, RouteHandle};
use crate::sessions::store::{HistoryCounters, SessionRow};
use crate::sessions::{SessionError, Shared};

/// Session updates considered for a continuation.
const CONTINUATION_EVENTS: u64 = 200;
const RESTORE_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) const CONTINUATION_HEADER: &str = "[agentos continuation] This session is being \
continued: its agent process was restarted and could not restore the conversation natively. \
The lines below are the most recent updates of this session's durable history, oldest first, \
one JSON object per line. Treat them as context only. Do not repeat any action, tool call or \
file change they describe.";

/// Builds the continuation text from session updates, newest first, within
/// `max_bytes`; `None` when there is nothing to continue from.
pub fn build_continuation(updates_newest_first: &[String], max_bytes: u64) -> Option<String> {
    let mut used = CONTINUATION_HEADER.len() as u64 + 1;
    let mut taken = Vec::new();
    for line in updates_newest_first {
        let cost = line.len() as u64 + 1;
        if used + cost > max_bytes {
            break;
        }
        used += cost;
        taken.push(line.as_str());
    }
    if taken.is_empty() {
        return None;
    }
    taken.reverse();
    let mut text = String::with_capacity(used as usize);
    text.push_str(CONTINUATION_HEADER);
    for line in taken {
        text.push('\n');
        text.push_str(line);
    }
    Some(text)
}

/// Each way of the in-memory pipe to an in-process builtin agent: what a
/// pipe to a child holds.
const IN_PROCESS_PIPE_BYTES: usize = 64 * 1024;

/// How a route's agent starts.
enum Start {
    /// A process, confined by its command.
    Child(agentos_adapters::AdapterCommand),
    /// The builtin agent as a task of this process, calling providers
    /// through the client all of them share.
    InProcess(crate::sessions::InProcess),
}

impl Route {
    /// Spawns the adapter, negotiates, restores or creates the adapter
    /// session, and starts the route task.
    pub(crate) async fn start(
        shared: Arc<Shared>,
        row: SessionRow,
        generation: u64,
    ) -> Result<RouteHandle, SessionError> {
        let builtin = row.agent == crate::config::BUILTIN_AGENT;
        let (spec, in_process) = match shared.agents.get(&row.agent) {
            Some(spec) => (spec, None),
            None if builtin => match shared.builtin.get() {
                Some(agent) => (&agent.spec, agent.in_process.clone()),
                None => return Err(SessionError::BuiltinAgentUnavailable),
            },
            None => return Err(SessionError::AgentNotFound(row.agent.clone())),
        };
        let start = match in_process {
            Some(agent) => Start::InProcess(agent),
            None => {
                let mut env: BTreeMap<String, String> = spec.env.clone();
                env.extend(row.env.clone());
                let command = shared
                    .launcher
                    .command(&row.session_id, spec, env)
                    .map_err(|e| adapter_error(&AdapterError::Spawn(e)))?;
                Start::Child(command)
            }
        };
        let options = AdapterOptions {
            max_read_line_bytes: shared.limits.max_read_line_bytes as usize,
            // Room for one full group commit to accumulate while the previous
            // one is being written.
            event_buffer: MAX_BATCH_EVENTS,
            stdout_buffer_bytes: usize::try_from(shared.limits.stdout_buffer_byte_limit)
                .unwrap_or(usize::MAX),
            max_queued_stdin_bytes: usize::try_from(shared.limits.max_queued_stdin_bytes)
                .unwrap_or(usize::MAX),
            process: shared.adapters.clone(),
            ..AdapterOptions::default()
        };
        if let Some(fs) = &shared.fs {
            let mut roots = vec![row.cwd.clone()];
            roots.extend(row.additional_directories.iter().cloned());
            fs.prepare_roots(&roots).await;
        }
        let (conn, mut events) = match start {
            Start::Child(command) => AdapterConnection::spawn(&command, options)
                .await
                .map_err(|e| adapter_error(&e))?,
            Start::InProcess(agent) => AdapterConnection::in_process(
                |input, output| {
                    agentos_adapters::builtin::agent::serve_with(
                        input,
                        output,
                        agent.options,
                        agent.provider,
                    )
                },
                IN_PROCESS_PIPE_BYTES,
                options,
            ),
        };
        let result = Self::negotiate(&shared, &row, &conn, &mut events).await;
        let (acp_session_id, preamble, prompt_caps) = match result {
            Ok(v) => v,
            Err(e) => {
                conn.shutdown().await;
                return Err(e);
            }
        };
        let policy = row.permission_policy;
        let mut roots = vec![row.cwd.clone()];
        roots.extend(row.additional_directories.iter().cloned());
        shared
            .hub
            .set_published(&row.session_id, row.latest_sequence);
        let (tx, rx) = mpsc::channel(64);
        let (publisher, publications) = mpsc::unbounded_channel();
        let (pipeline, finished) = Pipeline::new();
        tokio::spawn(publish_loop(
            shared.hub.clone(),
            row.session_id.clone(),
            publications,
            finished.clone(),
        ));
        let (committer, work) = mpsc::unbounded_channel();
        tokio::spawn(commit_loop(shared.store.clone(), work, publisher, finished));
        let stderr_rate = super::TokenBucket::new(shared.limits.max_stderr_bytes_per_second);
        let route = Route {
            shared,
            builtin,
            input_floor: None,
            session_id: row.session_id.clone(),
            acp_session_id,
            policy,
            roots,
            prompt_caps,
            conn,
            events,
            counters: HistoryCounters::from(&row),
            preamble,
            generation,
            exited: false,
            committer,
            pipeline,
            in_flight: VecDeque::new(),
            turn_run: None,
            adopted: None,
            resume: false,
            prompt_count: row.prompt_count,
            outcome_count: row.outcome_count,
            lost_commit: None,
            stderr_rate,
            stderr_dropped: 0,
        };
        tokio::spawn(route.run(rx));
        Ok(RouteHandle {
            commands: tx,
            generation,
        })
    }

    /// `initialize`, then the restore ladder. Returns the adapter's session
    /// id, the continuation to prepend to the next prompt, if any, and what
    /// its prompts may carry.
    async fn negotiate(
        shared: &Arc<Shared>,
        row: &SessionRow,
        conn: &AdapterConnection,
        events: &mut AdapterEvents,
    ) -> Result<(String, Option<String>, acp::PromptCapabilities), SessionError> {
        let fs = shared.fs.is_some();
        let init = conn
            .initialize(
                acp::to_params(&acp::ClientInfo {
                    name: "agentos-sidecar",
                    version: env!("CARGO_PKG_VERSION"),
                }),
                acp::to_params(&acp::ClientCapabilities {
                    fs: acp::FsCapabilities {
                        read_text_file: fs,
                        write_text_file: fs,
                    },
                    terminal: false,
                }),
            )
            .await
            .map_err(|e| SessionError::RestoreFailed(format!("initialize: {e}")))?;
        let setup = |session_id| {
            acp::to_params(&acp::SessionSetup {
                session_id,
                cwd: &row.cwd,
                mcp_servers: &row.mcp_servers,
                additional_directories: &row.additional_directories,
            })
        };
        let mut preamble = row.pending_preamble.clone();
        let mut agent_config: Option<Value> = None;
        let mut native: Option<String> = None;
        if let Some(old) = &row.acp_session_id {
            let method = if init.supports_resume() {
                Some(methods::SESSION_RESUME)
            } else if init.supports_load() {
                Some(methods::SESSION_LOAD)
            } else {
                None
            };
            if let Some(method) = method {
                let params = setup(Some(old.as_str()));
                // Whatever either rung replays, our history already holds.
                match request_during_restore(conn, events, method, params, true).await {
                    Ok(result) => {
                        agent_config = result.get("configOptions").cloned();
                        native = Some(old.clone());
                    }
                    Err(e) if e.is_unknown_session() => {
                        tracing::info!(session = %row.session_id, %method, "adapter does not know the session; continuing from history");
                    }
                    Err(e) => {
                        return Err(SessionError::RestoreFailed(format!("{method}: {e}")));
                    }
                }
            }
        }
        let acp_session_id = match native {
            Some(id) => id,
            None => {
                let result =
                    request_during_restore(conn, events, methods::SESSION_NEW, setup(None), false)
                        .await
                        .map_err(|e| SessionError::RestoreFailed(format!("session/new: {e}")))?;
                let id = result
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| {
                        SessionError::RestoreFailed("session/new returned no sessionId".into())
                    })?
                    .to_owned();
                agent_config = result.get("configOptions").cloned();
                if row.acp_session_id.is_some() {
                    let updates = shared
                        .store
                        .recent_updates(&row.session_id, CONTINUATION_EVENTS)
                        .await?;
                    let max = shared.limits.max_fallback_continuation_bytes;
                    preamble = build_continuation(&updates, max);
                    if let Some(text) = &preamble {
                        shared.warn_near_limit(
                            "limits.acp.maxFallbackContinuationBytes",
                            text.len() as u64,
                            max,
                        );
                    }
                }
                id
            }
        };
        // Replay stored config choices the fresh agent does not already hold.
        let mut config_now = agent_config.clone();
        for option in &row.config_options {
            let (Some(id), Some(value)) = (
                option.get("id").and_then(Value::as_str),
                option.get("currentValue"),
            ) else {
                continue;
            };
            let current = agent_config
                .as_ref()
                .and_then(Value::as_array)
                .and_then(|opts| {
                    opts.iter()
                        .find(|o| o.get("id").and_then(Value::as_str) == Some(id))
                })
                .and_then(|o| o.get("currentValue"));
            if current == Some(value) {
                continue;
            }
            let params = acp::to_params(&acp::SetConfigOptionParams {
                session_id: &acp_session_id,
                config_id: id,
                value,
            });
            match request_during_restore(
                conn,
                events,
                methods::SESSION_SET_CONFIG_OPTION,
                params,
                false,
            )
            .await
            {
                Ok(result) => config_now = result.get("configOptions").cloned().or(config_now),
                Err(e) => {
                    return Err(SessionError::RestoreFailed(format!(
                        "replaying config option {id}: {e}"
                    )))
                }
            }
        }
        shared
            .store
            .update_negotiated(
                &row.session_id,
                &acp_session_id,
                &init.agent_capabilities,
                init.agent_info.as_ref(),
                config_now.as_ref().filter(|v| v.is_array()),
                preamble.as_deref(),
            )
            .await?;
        let caps = acp::PromptCapabilities::of(&init.agent_capabilities);
        Ok((acp_session_id, preamble, caps))
    }
}

/// Sends a request during route start, draining adapter events meanwhile.
/// With `discard`, replayed `session/update`s are dropped (a `session/load`
/// or `session/resume` replays what our history already holds); otherwise they stay queued for
/// the route to store.
async fn request_during_restore(
    conn: &AdapterConnection,
    events: &mut AdapterEvents,
    method: &str,
    params: Value,
    discard: bool,
) -> Result<Value, AdapterError> {
    if !discard {
        return conn.request_timeout(method, params, RESTORE_TIMEOUT).await;
    }
    let answer = conn.request_timeout(method, params, RESTORE_TIMEOUT);
    tokio::pin!(answer);
    let result = loop {
        tokio::select! {
            biased;
            event = events.recv() => match event {
                Some(AdapterEvent::Request { id, method, .. }) => {
                    let _ = conn.respond(&id, Err(RpcError::method_not_found(&method)));
                }
                Some(_) => {}
                None => break (&mut answer).await,
            },
            result = &mut answer => break result,
        }
    };
    while let Ok(event) = events.try_recv() {
        if let AdapterEvent::Request { id, method, .. } = event {
            let _ = conn.respond(&id, Err(RpcError::method_not_found(&method)));
        }
    }
    result
}
