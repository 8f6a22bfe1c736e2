//! A session's live adapter route: one task that owns the adapter connection
//! and is the session's single writer.
//!
//! Everything that appends to a session's history happens on this task, in
//! order: accepting a prompt, the agent's updates (group-committed: whatever
//! has arrived while the previous transaction ran goes into the next one),
//! permission requests and their answers, cancels and the terminal commit.
//! Each commit is followed by a read-back, and only those rows are published.
//! Starting a route is the restore ladder: `session/resume`, else
//! `session/load` (its replay is discarded), else `session/new` plus a
//! bounded continuation prepended once to the next prompt.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use agentos_adapters::{
    AdapterCommand, AdapterConnection, AdapterError, AdapterEvent, AdapterOptions,
    IncomingRequestId, RpcError, SessionUpdate,
};
use agentos_protocol::host::{Actor, EventKind, PermissionPolicy};
use agentos_schema::{DbError, Rows, Statement};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::coalesce::{is_chunk, ChunkBuffer};
use super::store::{clock_ms, HistoryCounters, NewEvent, Retained, SessionRow, SessionStore};
use super::{Notice, SessionError, Shared};

/// Updates committed in one transaction at most.
const MAX_BATCH_EVENTS: usize = 4096;
/// Payload bytes committed in one transaction at most.
const MAX_BATCH_BYTES: u64 = 16 << 20;
/// Agent update batches handed to the committing task and not yet
/// confirmed, at most: one committing, one full batch waiting behind it.
const MAX_IN_FLIGHT: usize = 2;
/// Session updates considered for a continuation.
const CONTINUATION_EVENTS: u64 = 200;
const RESTORE_TIMEOUT: Duration = Duration::from_secs(30);

const VALID_STOP_REASONS: &[&str] = &[
    "end_turn",
    "max_tokens",
    "max_turn_requests",
    "refusal",
    "cancelled",
];

pub(crate) const CONTINUATION_HEADER: &str = "[agentos continuation] This session is being \
continued: its agent process was restarted and could not restore the conversation natively. \
The lines below are the most recent updates of this session's durable history, oldest first, \
one JSON object per line. Treat them as context only. Do not repeat any action, tool call or \
file change they describe.";

/// An accepted-to-be prompt, validated by the service.
pub(crate) struct PromptRequest {
    pub prompt_id: String,
    pub content: Vec<Value>,
    pub idempotency_key: Option<String>,
    pub input_hash: Vec<u8>,
    pub actor: Actor,
}

/// A prompt's terminal result as returned to the host.
pub(crate) type PromptReply = Result<Value, SessionError>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StopReason {
    Unload,
    Delete,
    VmShutdown,
}

pub(crate) enum Command {
    Prompt {
        request: PromptRequest,
        reply: oneshot::Sender<PromptReply>,
    },
    Cancel {
        reply: oneshot::Sender<&'static str>,
    },
    RespondPermission {
        request_id: String,
        option_id: String,
        reply: oneshot::Sender<Result<Option<&'static str>, SessionError>>,
    },
    SetConfigOption {
        config_id: String,
        value: Value,
        reply: oneshot::Sender<Result<Value, SessionError>>,
    },
    Stop {
        reason: StopReason,
        reply: oneshot::Sender<()>,
    },
}

/// The service's handle on a running route.
#[derive(Clone)]
pub(crate) struct RouteHandle {
    pub commands: mpsc::Sender<Command>,
    pub generation: u64,
}

impl RouteHandle {
    pub fn is_alive(&self) -> bool {
        !self.commands.is_closed()
    }
}

/// A collection's use and limits, per session and per VM.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    session_used: u64,
    session_limit: u64,
    vm_used: u64,
    vm_limit: u64,
}

/// Which bound retention could not satisfy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Session,
    Vm,
}

/// What a retention step removed.
#[derive(Clone, Copy, Debug, Default)]
struct Pruned {
    /// Records of this route's own session.
    own: u64,
    /// Whether anything was removed at all.
    any: bool,
}

/// A `session/update` sorted for the turn engine.
enum Incoming {
    /// A message or thought chunk: live only, buffered.
    Chunk(Value),
    /// Anything else, stored as the agent wrote it.
    Durable(String),
}

struct PendingPermission {
    adapter_id: IncomingRequestId,
    option_ids: Vec<String>,
}

/// State of the turn in flight.
struct Turn {
    prompt_id: String,
    /// The running prompt's idempotency key: a concurrent send of the same
    /// key is `prompt_in_progress`, not `session_busy`.
    idempotency_key: Option<String>,
    buffer: ChunkBuffer,
    pending: Vec<NewEvent>,
    pending_bytes: u64,
    message: Vec<Value>,
    message_id: Option<String>,
    permissions: HashMap<String, PendingPermission>,
    cancel_requested: bool,
    /// Set when the turn must end in failure whatever the agent answers.
    failure: Option<(String, String)>,
}

enum TurnEnd {
    /// The agent answered `session/prompt`.
    Answered(Result<Value, AdapterError>),
    /// The route stops (unload, delete, shutdown) mid-turn.
    Stopped(StopReason, oneshot::Sender<()>),
    /// The turn failed on our side (protocol fault, storage).
    Failed,
}

pub(crate) struct Route {
    shared: Arc<Shared>,
    session_id: String,
    acp_session_id: String,
    policy: PermissionPolicy,
    roots: Vec<String>,
    conn: AdapterConnection,
    events: mpsc::Receiver<AdapterEvent>,
    counters: HistoryCounters,
    preamble: Option<String>,
    generation: u64,
    exited: bool,
    /// Ordered hand-off to the committing task (which hands committed rows
    /// on to the publishing task): building the next batch overlaps with
    /// committing this one, and rendering and delivering overlaps with both.
    committer: mpsc::UnboundedSender<Work>,
    /// Commits handed off and not yet confirmed, oldest first. `counters`
    /// already includes them.
    in_flight: VecDeque<InFlight>,
    /// Retained prompt records and permission outcomes of this session; the
    /// route is their only writer.
    prompt_count: u64,
    outcome_count: u64,
}

/// The answer to a command that reached a route as it ended; the service
/// retries it on a new route.
pub(crate) fn route_gone() -> SessionError {
    SessionError::Adapter {
        code: ROUTE_GONE,
        message: "the adapter route ended before this request started".into(),
    }
}

pub(crate) const ROUTE_GONE: &str = "adapter_route_ended";

fn adapter_error(e: &AdapterError) -> SessionError {
    SessionError::Adapter {
        code: e.code(),
        message: e.to_string(),
    }
}

fn error_json(code: &str, message: &str) -> Value {
    if code == "prompt_delivery_uncertain" {
        return json!({"code": code, "message": message, "retryable": true});
    }
    json!({"code": code, "message": message})
}

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

impl Route {
    /// Spawns the adapter, negotiates, restores or creates the adapter
    /// session, and starts the route task.
    pub(crate) async fn start(
        shared: Arc<Shared>,
        row: SessionRow,
        generation: u64,
    ) -> Result<RouteHandle, SessionError> {
        let spec = shared
            .agents
            .get(&row.agent)
            .ok_or_else(|| SessionError::AgentNotFound(row.agent.clone()))?;
        let mut env: BTreeMap<String, String> = spec.env.clone();
        env.extend(row.env.clone());
        let command = AdapterCommand {
            program: spec.command.clone(),
            args: spec.args.clone(),
            env,
            cwd: None,
        };
        let options = AdapterOptions {
            max_read_line_bytes: shared.limits.max_read_line_bytes as usize,
            // Room for one full group commit to accumulate while the previous
            // one is being written.
            event_buffer: MAX_BATCH_EVENTS,
            ..AdapterOptions::default()
        };
        if let Some(fs) = &shared.fs {
            let mut roots = vec![row.cwd.clone()];
            roots.extend(row.additional_directories.iter().cloned());
            fs.prepare_roots(&roots).await;
        }
        let (conn, mut events) = AdapterConnection::spawn(&command, options)
            .await
            .map_err(|e| adapter_error(&e))?;
        let result = Self::negotiate(&shared, &row, &conn, &mut events).await;
        let (acp_session_id, preamble) = match result {
            Ok(v) => v,
            Err(e) => {
                conn.shutdown().await;
                return Err(e);
            }
        };
        let policy =
            PermissionPolicy::parse(&row.permission_policy).unwrap_or(PermissionPolicy::Ask);
        let mut roots = vec![row.cwd.clone()];
        roots.extend(row.additional_directories.iter().cloned());
        shared
            .hub
            .set_published(&row.session_id, row.latest_sequence);
        let (tx, rx) = mpsc::channel(64);
        let (publisher, publications) = mpsc::unbounded_channel();
        tokio::spawn(publish_loop(
            shared.hub.clone(),
            row.session_id.clone(),
            publications,
        ));
        let (committer, work) = mpsc::unbounded_channel();
        tokio::spawn(commit_loop(shared.store.clone(), work, publisher));
        let route = Route {
            shared,
            session_id: row.session_id.clone(),
            acp_session_id,
            policy,
            roots,
            conn,
            events,
            counters: HistoryCounters::from(&row),
            preamble,
            generation,
            exited: false,
            committer,
            in_flight: VecDeque::new(),
            prompt_count: row.prompt_count,
            outcome_count: row.outcome_count,
        };
        tokio::spawn(route.run(rx));
        Ok(RouteHandle {
            commands: tx,
            generation,
        })
    }

    /// `initialize`, then the restore ladder. Returns the adapter's session id
    /// and the continuation to prepend to the next prompt, if any.
    async fn negotiate(
        shared: &Arc<Shared>,
        row: &SessionRow,
        conn: &AdapterConnection,
        events: &mut mpsc::Receiver<AdapterEvent>,
    ) -> Result<(String, Option<String>), SessionError> {
        let fs = shared.fs.is_some();
        let init = conn
            .initialize(
                json!({"name": "agentos-sidecar", "version": env!("CARGO_PKG_VERSION")}),
                json!({"fs": {"readTextFile": fs, "writeTextFile": fs}, "terminal": false}),
            )
            .await
            .map_err(|e| SessionError::RestoreFailed(format!("initialize: {e}")))?;
        let mut base = json!({
            "cwd": row.cwd,
            "mcpServers": row.mcp_servers,
        });
        if !row.additional_directories.is_empty() {
            base["additionalDirectories"] = json!(row.additional_directories);
        }
        let mut preamble = row.pending_preamble.clone();
        let mut agent_config: Option<Value> = None;
        let mut native: Option<String> = None;
        if let Some(old) = &row.acp_session_id {
            let method = if init.supports_resume() {
                Some("session/resume")
            } else if init.supports_load() {
                Some("session/load")
            } else {
                None
            };
            if let Some(method) = method {
                let mut params = base.clone();
                params["sessionId"] = json!(old);
                let discard = method == "session/load";
                match request_during_restore(conn, events, method, params, discard).await {
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
                let result = request_during_restore(conn, events, "session/new", base, false)
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
            let params = json!({"sessionId": acp_session_id, "configId": id, "value": value});
            match request_during_restore(conn, events, "session/set_config_option", params, false)
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
        Ok((acp_session_id, preamble))
    }

    async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        loop {
            tokio::select! {
                biased;
                event = self.events.recv(), if !self.exited => match event {
                    Some(event) => {
                        if let Err(e) = self.idle_event(event).await {
                            tracing::warn!(session = %self.session_id, error = %e, "adapter event outside a turn failed");
                        }
                    }
                    None => self.exited = true,
                },
                command = commands.recv() => match command {
                    None => break,
                    Some(Command::Prompt { request, reply }) => {
                        if self.exited {
                            // Never started here: the service retries it on
                            // a new route.
                            let _ = reply.send(Err(route_gone()));
                            break;
                        }
                        match self.turn(request, reply, &mut commands).await {
                            Some((_, done)) => {
                                let _ = done.send(());
                                break;
                            }
                            None if self.exited => break,
                            None => {}
                        }
                    }
                    Some(Command::Cancel { reply }) => {
                        let _ = reply.send("no_active_prompt");
                    }
                    Some(Command::RespondPermission { request_id, reply, .. }) => {
                        let _ = reply.send(self.late_permission_reason(&request_id).await.map(Some));
                    }
                    Some(Command::SetConfigOption { config_id, value, reply }) => {
                        let _ = reply.send(self.set_config_option(config_id, value).await);
                    }
                    Some(Command::Stop { reply, .. }) => {
                        self.conn.shutdown().await;
                        let _ = reply.send(());
                        break;
                    }
                },
            }
            if self.exited {
                break;
            }
        }
        self.shared.route_ended(&self.session_id, self.generation);
        // Whatever was queued behind the end was never started: say so, so
        // the service can retry on a new route.
        commands.close();
        while let Ok(command) = commands.try_recv() {
            match command {
                Command::Prompt { reply, .. } => {
                    let _ = reply.send(Err(route_gone()));
                }
                Command::SetConfigOption { reply, .. } => {
                    let _ = reply.send(Err(route_gone()));
                }
                Command::Cancel { reply } => {
                    let _ = reply.send("no_active_prompt");
                }
                Command::RespondPermission {
                    request_id, reply, ..
                } => {
                    let _ = reply.send(self.late_permission_reason(&request_id).await.map(Some));
                }
                Command::Stop { reply, .. } => {
                    let _ = reply.send(());
                }
            }
        }
        self.conn.shutdown().await;
    }

    /// Handles an adapter event between turns: updates are stored (chunks are
    /// only published live), permission requests are declined.
    async fn idle_event(&mut self, event: AdapterEvent) -> Result<(), SessionError> {
        match event {
            AdapterEvent::SessionUpdate(update) => match self.classify(update) {
                Some(Incoming::Chunk(update)) => self.publish_live(update),
                Some(Incoming::Durable(payload_json)) => {
                    let event = NewEvent::raw_update(Actor::Agent, payload_json);
                    self.commit(vec![event], vec![]).await?;
                }
                None => {}
            },
            AdapterEvent::Notification { method, .. } if method == "session/update" => {
                tracing::warn!(session = %self.session_id, "dropping a malformed session/update");
            }
            AdapterEvent::Notification { .. } => {}
            AdapterEvent::Request { id, method, params } => {
                let answer = if method == "session/request_permission" {
                    Ok(json!({"outcome": {"outcome": "cancelled"}}))
                } else {
                    self.serve_request(&method, params).await
                };
                let _ = self.conn.respond(&id, answer);
            }
            AdapterEvent::Stderr(line) => self.stderr(line),
            AdapterEvent::ProtocolError(e) => {
                tracing::warn!(session = %self.session_id, error = %e, "adapter protocol fault outside a turn");
            }
            AdapterEvent::Exited { code, signal } => self.on_exit(code, signal),
        }
        Ok(())
    }

    fn stderr(&self, line: String) {
        tracing::debug!(session = %self.session_id, "adapter stderr: {line}");
        let _ = self.shared.notices.send(Notice::AgentStderr {
            session_id: self.session_id.clone(),
            line,
        });
    }

    fn on_exit(&mut self, code: Option<i32>, signal: Option<i32>) {
        self.exited = true;
        let _ = self.shared.notices.send(Notice::AgentExited {
            session_id: self.session_id.clone(),
            code,
            signal,
        });
    }

    /// Sorts a `session/update` of this route's adapter session: chunks are
    /// parsed for the live buffer, everything else stays as the agent's text.
    fn classify(&self, update: SessionUpdate) -> Option<Incoming> {
        if update.session_id != self.acp_session_id {
            tracing::warn!(session = %self.session_id, "dropping a session/update for another adapter session");
            return None;
        }
        if matches!(
            update.kind.as_str(),
            "agent_message_chunk" | "agent_thought_chunk"
        ) {
            let value = update.update();
            return is_chunk(&value).then_some(Incoming::Chunk(value));
        }
        Some(Incoming::Durable(update.update_json))
    }

    /// Answers an agent→client request other than a permission request.
    async fn serve_request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        match (method, &self.shared.fs) {
            ("fs/read_text_file", Some(fs)) => {
                let path = params
                    .get("path")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let line = params.get("line").and_then(Value::as_u64);
                let limit = params.get("limit").and_then(Value::as_u64);
                fs.read_text_file(&self.roots, path, line, limit)
                    .await
                    .map(|content| json!({ "content": content }))
            }
            ("fs/write_text_file", Some(fs)) => {
                let path = params
                    .get("path")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let Some(content) = params.get("content").and_then(Value::as_str) else {
                    return Err(RpcError::invalid_params("content must be a string"));
                };
                fs.write_text_file(&self.roots, path, content)
                    .await
                    .map(|()| json!({}))
            }
            _ => Err(RpcError::method_not_found(method)),
        }
    }

    /// Appends events (plus `extra` statements) in one transaction, reads the
    /// rows back and publishes them; returns once that is committed.
    async fn commit(
        &mut self,
        events: Vec<NewEvent>,
        extra: Vec<Statement>,
    ) -> Result<(), SessionError> {
        self.settle().await?;
        self.submit(events, extra).await?;
        self.settle().await
    }

    /// Hands a transaction appending `events` (plus `extra` statements) to
    /// the committing task without waiting for it. The counters move on at
    /// once; [`Route::settle`] puts them back if it fails. A batch that needs
    /// pruning waits for everything before it, since retention reads the
    /// committed history.
    async fn submit(
        &mut self,
        events: Vec<NewEvent>,
        extra: Vec<Statement>,
    ) -> Result<(), SessionError> {
        if events.is_empty() && extra.is_empty() {
            return Ok(());
        }
        let limits = &self.shared.limits;
        let incoming = events.len() as u64;
        let incoming_bytes: u64 = events.iter().map(NewEvent::bytes).sum();
        let (max_events, max_bytes) = (
            limits.max_session_history_events,
            limits.max_session_history_bytes,
        );
        SessionError::at_most(
            "acp_history_events_limit",
            "limits.acp.maxSessionHistoryEvents",
            incoming,
            max_events,
        )?;
        SessionError::at_most(
            "acp_history_bytes_limit",
            "limits.acp.maxSessionHistoryBytes",
            incoming_bytes,
            max_bytes,
        )?;
        let excess = self
            .counters
            .excess(incoming, incoming_bytes, max_events, max_bytes);
        if excess != (0, 0) {
            self.settle().await?;
        }
        let prune = self
            .shared
            .store
            .plan_prune(
                &self.session_id,
                &self.counters,
                incoming,
                incoming_bytes,
                max_events,
                max_bytes,
            )
            .await?;
        let now = clock_ms();
        let (mut statements, next) =
            SessionStore::append_statements(&self.session_id, &self.counters, prune, events, now);
        statements.extend(extra);
        statements.push(SessionStore::read_back_statement(
            &self.session_id,
            self.counters.latest_sequence,
        ));
        let (reply, confirmed) = oneshot::channel();
        self.committer
            .send(Work::Commit { statements, reply })
            .map_err(|_| SessionError::Storage(DbError::Closed))?;
        self.in_flight.push_back(InFlight {
            confirmed,
            before: self.counters,
            after: next,
        });
        self.counters = next;
        Ok(())
    }

    /// Waits for the oldest handed-off commit.
    async fn confirm_oldest(&mut self) -> Result<(), SessionError> {
        let Some(mut first) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let result = (&mut first.confirmed).await;
        self.confirmed(first, result).await
    }

    /// Takes the answer for the oldest handed-off commit. On failure the
    /// counters go back to before it and every later one is awaited too:
    /// each of them expected the failed one's counters, so none can have
    /// committed.
    async fn confirmed(
        &mut self,
        first: InFlight,
        answer: Result<Result<(), DbError>, oneshot::error::RecvError>,
    ) -> Result<(), SessionError> {
        let result = match answer {
            Ok(result) => result.map_err(SessionError::from),
            Err(_) => Err(SessionError::Storage(DbError::Closed)),
        };
        match result {
            Ok(()) => {
                self.shared
                    .warn_history(&self.session_id, &first.before, &first.after);
                Ok(())
            }
            Err(e) => {
                while let Some(later) = self.in_flight.pop_front() {
                    let _ = later.confirmed.await;
                }
                self.counters = first.before;
                Err(e)
            }
        }
    }

    /// Waits until every handed-off commit is confirmed.
    async fn settle(&mut self) -> Result<(), SessionError> {
        while !self.in_flight.is_empty() {
            self.confirm_oldest().await?;
        }
        Ok(())
    }

    /// Publishes a live update, in order with the durable events before it.
    fn publish_live(&self, update: Value) {
        let _ = self
            .committer
            .send(Work::Ephemeral(self.counters.latest_sequence, update));
    }

    /// Waits until everything committed so far has been published.
    async fn published(&self) {
        let (done, wait) = oneshot::channel();
        if self.committer.send(Work::Barrier(done)).is_ok() {
            let _ = wait.await;
        }
    }

    // -- the turn ------------------------------------------------------------

    /// Runs one prompt to its terminal commit. Returns a stop request that
    /// arrived mid-turn, so the caller can end the route.
    async fn turn(
        &mut self,
        request: PromptRequest,
        reply: oneshot::Sender<PromptReply>,
        commands: &mut mpsc::Receiver<Command>,
    ) -> Option<(StopReason, oneshot::Sender<()>)> {
        let now = clock_ms();
        let first_input = self.counters.latest_sequence + 1;
        let user_events: Vec<NewEvent> = {
            let message_id = uuid::Uuid::new_v4().to_string();
            request
                .content
                .iter()
                .map(|block| {
                    NewEvent::update(
                        request.actor.clone(),
                        &json!({"sessionUpdate": "user_message_chunk", "content": block, "messageId": message_id}),
                    )
                })
                .collect()
        };
        let (mut accept, pruned) = match self.prompt_retention().await {
            Ok(v) => v,
            Err(e) => {
                let _ = reply.send(Err(e));
                return None;
            }
        };
        accept.extend(SessionStore::accept_prompt_statements(
            &self.session_id,
            &request.prompt_id,
            request.idempotency_key.as_deref(),
            &request.input_hash,
            first_input,
            now,
        ));
        if self.preamble.is_some() {
            accept.push(Statement::new(
                "UPDATE agentos_core_sessions SET pending_preamble = NULL WHERE session_id = ?1",
                vec![self.session_id.as_str().into()],
            ));
        }
        if let Err(e) = self.commit(user_events, accept).await {
            let e = match e {
                SessionError::Storage(DbError::ExpectedChanges { .. }) => {
                    SessionError::Busy(self.session_id.clone())
                }
                SessionError::Storage(ref db) if db.is_constraint() => {
                    if request.idempotency_key.is_some() {
                        SessionError::PromptInProgress
                    } else {
                        SessionError::Busy(self.session_id.clone())
                    }
                }
                other => other,
            };
            let _ = reply.send(Err(e));
            return None;
        }
        self.prompt_count = self.prompt_count + 1 - pruned.own;
        self.shared.prompts_changed(pruned.any).await;
        let mut blocks = Vec::with_capacity(request.content.len() + 1);
        if let Some(preamble) = self.preamble.take() {
            blocks.push(json!({"type": "text", "text": preamble}));
        }
        blocks.extend(request.content);
        let shared = self.shared.clone();
        let _awake = shared
            .keep_awake
            .hold(&shared.notices, &self.session_id, &request.prompt_id);
        let mut turn = Turn {
            prompt_id: request.prompt_id.clone(),
            idempotency_key: request.idempotency_key.clone(),
            buffer: ChunkBuffer::default(),
            pending: Vec::new(),
            pending_bytes: 0,
            message: Vec::new(),
            message_id: None,
            permissions: HashMap::new(),
            cancel_requested: false,
            failure: None,
        };
        let conn = self.conn.clone();
        let params = json!({"sessionId": self.acp_session_id, "prompt": blocks});
        let answer = conn.request("session/prompt", params);
        tokio::pin!(answer);
        let end = loop {
            tokio::select! {
                biased;
                // A commit ended: the database is free for what accumulated.
                answer = oldest_answer(&mut self.in_flight), if !self.in_flight.is_empty() => {
                    if self.on_confirmed(&mut turn, answer).await.is_err() {
                        break TurnEnd::Failed;
                    }
                }
                event = self.events.recv(), if !self.exited => {
                    let Some(first) = event else {
                        self.exited = true;
                        continue;
                    };
                    let mut batch = vec![first];
                    while batch.len() < MAX_BATCH_EVENTS {
                        match self.events.try_recv() {
                            Ok(e) => batch.push(e),
                            Err(_) => break,
                        }
                    }
                    if self.turn_events(&mut turn, batch).await.is_err() {
                        break TurnEnd::Failed;
                    }
                }
                command = commands.recv() => {
                    // A command sees the agent's updates that arrived before
                    // it committed, and settled counters. A failure here is
                    // already the turn's (see `commit_failed`).
                    let _ = self.flush(&mut turn).await;
                    match command {
                        None => break TurnEnd::Stopped(StopReason::VmShutdown, oneshot::channel().0),
                        Some(Command::Prompt { request, reply }) => {
                            // The same key: the caller replays the stored
                            // prompt (in progress, or a conflict on other input).
                            let same_key = request.idempotency_key.is_some()
                                && request.idempotency_key == turn.idempotency_key;
                            let _ = reply.send(Err(if same_key {
                                SessionError::PromptInProgress
                            } else {
                                SessionError::Busy(self.session_id.clone())
                            }));
                        }
                        Some(Command::Cancel { reply }) => {
                            let status = self.cancel(&mut turn).await;
                            let _ = reply.send(status);
                        }
                        Some(Command::RespondPermission { request_id, option_id, reply }) => {
                            let result = self.respond_permission(&mut turn, &request_id, &option_id).await;
                            let _ = reply.send(result);
                        }
                        Some(Command::SetConfigOption { reply, .. }) => {
                            let _ = reply.send(Err(SessionError::Busy(self.session_id.clone())));
                        }
                        Some(Command::Stop { reason, reply }) => break TurnEnd::Stopped(reason, reply),
                    }
                }
                result = &mut answer => {
                    // Everything the agent sent before its answer is already
                    // queued: handle it first, in order.
                    let mut batch = Vec::new();
                    while let Ok(e) = self.events.try_recv() {
                        batch.push(e);
                    }
                    if !batch.is_empty() && self.turn_events(&mut turn, batch).await.is_err() {
                        break TurnEnd::Failed;
                    }
                    break TurnEnd::Answered(result);
                }
            }
        };
        let (outcome, stop) = self.finish(&mut turn, end).await;
        let _ = reply.send(outcome);
        stop
    }

    /// Processes a batch of adapter events during a turn, committing durable
    /// ones together.
    async fn turn_events(&mut self, turn: &mut Turn, batch: Vec<AdapterEvent>) -> Result<(), ()> {
        for event in batch {
            match event {
                AdapterEvent::SessionUpdate(update) => {
                    let Some(incoming) = self.classify(update) else {
                        continue;
                    };
                    if let Incoming::Chunk(update) = incoming {
                        if !turn.buffer.continues(&update) {
                            let flushed = turn.buffer.take();
                            self.queue(turn, flushed);
                        }
                        self.flush(turn).await?;
                        if update.get("sessionUpdate").and_then(Value::as_str)
                            == Some("agent_message_chunk")
                        {
                            if turn.message_id.is_none() {
                                turn.message_id = update
                                    .get("messageId")
                                    .and_then(Value::as_str)
                                    .map(str::to_owned);
                            }
                            if let Some(content) = update.get("content") {
                                turn.message.push(json!({"sessionUpdate": "agent_message_chunk", "content": content}));
                            }
                        }
                        self.publish_live(update.clone());
                        turn.buffer.push(update);
                        let limit = self.shared.limits.max_completed_message_bytes;
                        if turn.buffer.bytes() as u64 > limit {
                            turn.failure = Some((
                                "resource_limit".into(),
                                format!("a message exceeded limits.acp.maxCompletedMessageBytes ({limit})"),
                            ));
                            self.abort_adapter_turn().await;
                            return Err(());
                        }
                    } else if let Incoming::Durable(payload_json) = incoming {
                        let flushed = turn.buffer.take();
                        self.queue(turn, flushed);
                        self.queue_raw(turn, payload_json);
                        if turn.pending.len() >= MAX_BATCH_EVENTS
                            || turn.pending_bytes >= MAX_BATCH_BYTES
                        {
                            self.flush_when_free(turn).await?;
                        }
                    }
                }
                AdapterEvent::Notification { .. } => {}
                AdapterEvent::Request { id, method, params } => {
                    if method == "session/request_permission" {
                        let flushed = turn.buffer.take();
                        self.queue(turn, flushed);
                        self.permission_request(turn, id, params).await?;
                    } else {
                        self.flush(turn).await?;
                        let answer = self.serve_request(&method, params).await;
                        let _ = self.conn.respond(&id, answer);
                    }
                }
                AdapterEvent::Stderr(line) => self.stderr(line),
                AdapterEvent::ProtocolError(e) => {
                    turn.failure = Some(("acp_protocol_error".into(), e.to_string()));
                    self.abort_adapter_turn().await;
                    return Err(());
                }
                AdapterEvent::Exited { code, signal } => self.on_exit(code, signal),
            }
        }
        self.flush_when_free(turn).await
    }

    fn queue_raw(&self, turn: &mut Turn, payload_json: String) {
        let event = NewEvent::raw_update(Actor::Agent, payload_json);
        turn.pending_bytes += event.bytes();
        turn.pending.push(event);
    }

    fn queue(&self, turn: &mut Turn, updates: Vec<Value>) {
        for update in updates {
            let event = NewEvent::update(Actor::Agent, &update);
            turn.pending_bytes += event.bytes();
            turn.pending.push(event);
        }
    }

    /// Commits the queued updates and waits for every commit in flight.
    async fn flush(&mut self, turn: &mut Turn) -> Result<(), ()> {
        let result = match self.submit_pending(turn).await {
            Ok(()) => self.settle().await,
            Err(e) => Err(e),
        };
        self.commit_failed(turn, result).await
    }

    /// Group commit for the agent's updates, pipelined: while one
    /// transaction commits, the next batch accumulates; it is handed over
    /// when the database is free (see the turn loop) or when it is full, in
    /// which case it waits behind the one committing (at most
    /// `MAX_IN_FLIGHT` in all).
    async fn flush_when_free(&mut self, turn: &mut Turn) -> Result<(), ()> {
        let full = turn.pending.len() >= MAX_BATCH_EVENTS || turn.pending_bytes >= MAX_BATCH_BYTES;
        if !self.in_flight.is_empty() && !full {
            return Ok(());
        }
        let mut result = Ok(());
        while result.is_ok() && self.in_flight.len() >= MAX_IN_FLIGHT {
            result = self.confirm_oldest().await;
        }
        if result.is_ok() {
            result = self.submit_pending(turn).await;
        }
        self.commit_failed(turn, result).await
    }

    /// The oldest handed-off commit was answered: take the answer, then give
    /// the free database what has accumulated.
    async fn on_confirmed(
        &mut self,
        turn: &mut Turn,
        answer: Result<Result<(), DbError>, oneshot::error::RecvError>,
    ) -> Result<(), ()> {
        let Some(first) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let result = self.confirmed(first, answer).await;
        self.commit_failed(turn, result).await?;
        self.flush_when_free(turn).await
    }

    async fn submit_pending(&mut self, turn: &mut Turn) -> Result<(), SessionError> {
        if turn.pending.is_empty() {
            return Ok(());
        }
        let events = std::mem::take(&mut turn.pending);
        turn.pending_bytes = 0;
        self.submit(events, vec![]).await
    }

    /// A failed history commit fails the turn and stops the adapter.
    async fn commit_failed(
        &mut self,
        turn: &mut Turn,
        result: Result<(), SessionError>,
    ) -> Result<(), ()> {
        match result {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = self.settle().await;
                turn.failure = Some(("history_commit_failed".into(), e.to_string()));
                self.abort_adapter_turn().await;
                Err(())
            }
        }
    }

    /// The adapter can no longer be trusted for this turn: stop it. The next
    /// prompt restores the session.
    async fn abort_adapter_turn(&mut self) {
        let _ = self
            .conn
            .notify("session/cancel", json!({"sessionId": self.acp_session_id}));
        self.conn.shutdown().await;
    }

    async fn permission_request(
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
                Some((option_id, _)) => {
                    json!({"outcome": {"outcome": "selected", "optionId": option_id}})
                }
                None => json!({"outcome": {"outcome": "cancelled"}}),
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
                    data: Some(json!({"code": e.code(), "setting": e.setting()})),
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
                turn.failure = Some(("history_commit_failed".into(), e.to_string()));
                let _ = self
                    .conn
                    .respond(&id, Ok(json!({"outcome": {"outcome": "cancelled"}})));
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

    async fn respond_permission(
        &mut self,
        turn: &mut Turn,
        request_id: &str,
        option_id: &str,
    ) -> Result<Option<&'static str>, SessionError> {
        let Some(pending) = turn.permissions.get(request_id) else {
            return self.late_permission_reason(request_id).await.map(Some);
        };
        if !pending.option_ids.iter().any(|o| o == option_id) {
            return Err(SessionError::InvalidPermissionOption(option_id.to_owned()));
        }
        let outcome = json!({"outcome": {"outcome": "selected", "optionId": option_id}});
        self.resolve_permission(turn, request_id, "accepted", outcome)
            .await?;
        Ok(None)
    }

    /// Why an answer to a request that is not pending here is refused.
    async fn late_permission_reason(&self, request_id: &str) -> Result<&'static str, SessionError> {
        self.shared
            .late_permission_reason(&self.session_id, request_id)
            .await
    }

    /// Picks the oldest terminal prompt records to drop so one more prompt
    /// fits both bounds; a bound that cannot be met is a hard error.
    async fn prompt_retention(&self) -> Result<(Vec<Statement>, Pruned), SessionError> {
        let limits = &self.shared.limits;
        let vm_now = self.shared.vm_prompts();
        let bounds = Bounds {
            session_used: self.prompt_count,
            session_limit: limits.max_prompts_per_session,
            vm_used: vm_now,
            vm_limit: limits.max_prompts_per_vm,
        };
        self.shared.warn_near_limit(
            "limits.acp.maxPromptsPerSession",
            bounds.session_used + 1,
            bounds.session_limit,
        );
        self.shared
            .warn_near_limit("limits.acp.maxPromptsPerVm", vm_now + 1, bounds.vm_limit);
        let (victims, short) = self.victims(Retained::Prompts, bounds).await?;
        match short {
            Some(Side::Session) => Err(SessionError::Limit {
                code: "acp_prompts_per_session_limit",
                setting: "limits.acp.maxPromptsPerSession",
                used: bounds.session_used,
                limit: bounds.session_limit,
            }),
            Some(Side::Vm) => Err(SessionError::Limit {
                code: "acp_prompts_per_vm_limit",
                setting: "limits.acp.maxPromptsPerVm",
                used: bounds.vm_used,
                limit: bounds.vm_limit,
            }),
            None => Ok(self.pruning(Retained::Prompts, victims)),
        }
    }

    /// Picks the oldest permission outcomes to drop so one more fits.
    async fn outcome_retention(&self) -> Result<(Vec<Statement>, Pruned), SessionError> {
        let limits = &self.shared.limits;
        let bounds = Bounds {
            session_used: self.outcome_count,
            session_limit: limits.max_permission_outcomes_per_session,
            vm_used: self.shared.vm_outcomes(),
            vm_limit: limits.max_permission_outcomes_per_vm,
        };
        let (victims, _) = self.victims(Retained::Outcomes, bounds).await?;
        Ok(self.pruning(Retained::Outcomes, victims))
    }

    /// The oldest records that must go for one more to fit both bounds, and
    /// which bound could not be met, if any.
    async fn victims(
        &self,
        what: Retained,
        bounds: Bounds,
    ) -> Result<(Vec<(String, String)>, Option<Side>), SessionError> {
        let store = &self.shared.store;
        let session_excess = (bounds.session_used + 1).saturating_sub(bounds.session_limit);
        let vm_excess = (bounds.vm_used + 1).saturating_sub(bounds.vm_limit);
        let mut victims = Vec::new();
        if session_excess > 0 {
            victims = store
                .oldest(what, Some(&self.session_id), session_excess)
                .await?;
            if (victims.len() as u64) < session_excess {
                return Ok((victims, Some(Side::Session)));
            }
        }
        if vm_excess > victims.len() as u64 {
            let more = store
                .oldest(what, None, vm_excess + victims.len() as u64)
                .await?;
            for victim in more {
                if victims.len() as u64 >= vm_excess {
                    break;
                }
                if !victims.contains(&victim) {
                    victims.push(victim);
                }
            }
            if (victims.len() as u64) < vm_excess {
                return Ok((victims, Some(Side::Vm)));
            }
        }
        Ok((victims, None))
    }

    fn pruning(&self, what: Retained, victims: Vec<(String, String)>) -> (Vec<Statement>, Pruned) {
        if victims.is_empty() {
            return (Vec::new(), Pruned::default());
        }
        let own = victims
            .iter()
            .filter(|(s, _)| *s == self.session_id)
            .count() as u64;
        (
            SessionStore::delete_statements(what, &victims),
            Pruned { own, any: true },
        )
    }

    async fn cancel(&mut self, turn: &mut Turn) -> &'static str {
        turn.cancel_requested = true;
        let _ = self
            .conn
            .notify("session/cancel", json!({"sessionId": self.acp_session_id}));
        self.end_permissions(turn, "prompt_cancelled").await;
        "cancelled"
    }

    /// Ends every pending permission of the turn with `reason`.
    async fn end_permissions(&mut self, turn: &mut Turn, reason: &str) {
        let ids: Vec<String> = turn.permissions.keys().cloned().collect();
        for id in ids {
            let outcome = json!({"outcome": {"outcome": "cancelled"}});
            if let Err(e) = self.resolve_permission(turn, &id, reason, outcome).await {
                tracing::warn!(session = %self.session_id, error = %e, "could not store a permission's end");
            }
        }
    }

    /// The terminal commit: prompt state, session state, the final buffer on
    /// success, and the reply to the host.
    async fn finish(
        &mut self,
        turn: &mut Turn,
        end: TurnEnd,
    ) -> (PromptReply, Option<(StopReason, oneshot::Sender<()>)>) {
        let mut stop = None;
        let outcome: Result<Value, (String, String)> = match end {
            TurnEnd::Answered(Ok(result)) => match turn.failure.take() {
                Some(f) => Err(f),
                None => {
                    let stop_reason = result
                        .get("stopReason")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if VALID_STOP_REASONS.contains(&stop_reason) {
                        Ok(json!(stop_reason))
                    } else {
                        Err((
                            "invalid_stop_reason".into(),
                            format!("the agent answered with stopReason {stop_reason:?}"),
                        ))
                    }
                }
            },
            TurnEnd::Answered(Err(e)) => Err(match (turn.failure.take(), &e) {
                (Some(f), _) => f,
                (None, AdapterError::Exited | AdapterError::Closed) => (
                    "adapter_exited".into(),
                    "the adapter exited during the turn".into(),
                ),
                (None, AdapterError::Rpc(rpc)) => (
                    "prompt_failed".into(),
                    format!(
                        "the agent answered with error {}: {}",
                        rpc.code, rpc.message
                    ),
                ),
                (None, other) => (other.code().to_owned(), other.to_string()),
            }),
            TurnEnd::Failed => Err(turn
                .failure
                .take()
                .unwrap_or_else(|| ("prompt_failed".into(), "the turn failed".into()))),
            TurnEnd::Stopped(reason, reply) => {
                stop = Some((reason, reply));
                Err(match reason {
                    StopReason::Delete => {
                        ("session_deleted".into(), "the session was deleted".into())
                    }
                    StopReason::Unload => (
                        "prompt_interrupted".into(),
                        "the session was unloaded during the turn".into(),
                    ),
                    // As after a crash: the agent may have acted on it, and
                    // only the host may decide to send it again.
                    StopReason::VmShutdown => (
                        "prompt_delivery_uncertain".into(),
                        "the sidecar shut down during the turn; the prompt was not resent".into(),
                    ),
                })
            }
        };
        let route_lost = self.exited || !self.conn.is_alive() || stop.is_some();
        let permission_reason = match (&stop, route_lost) {
            (Some((StopReason::Delete, _)), _) => "session_deleted",
            (Some((StopReason::VmShutdown, _)), _) => "vm_shutdown",
            (_, true) => "adapter_exited",
            _ => "prompt_cancelled",
        };
        if matches!(stop, Some((StopReason::Delete, _))) {
            // The rows are about to go; answer the agent and stop.
            turn.permissions.clear();
            return (
                Err(SessionError::PromptFailed {
                    error: error_json("session_deleted", "the session was deleted"),
                }),
                stop,
            );
        }
        self.end_permissions(turn, permission_reason).await;
        let now = clock_ms();
        let mut events = std::mem::take(&mut turn.pending);
        let message = json!({
            "id": turn.message_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            "role": "agent",
            "content": super::coalesce::coalesce(std::mem::take(&mut turn.message))
                .into_iter()
                .filter_map(|u| u.get("content").cloned())
                .collect::<Vec<_>>(),
        });
        let (state, result, error, session_error) = match &outcome {
            Ok(stop_reason) if stop_reason == "cancelled" => {
                turn.buffer.discard();
                let result = json!({"stopReason": stop_reason, "message": message});
                ("cancelled", Some(result), None, None)
            }
            Ok(stop_reason) => {
                let flushed = turn.buffer.take();
                for update in flushed {
                    events.push(NewEvent::update(Actor::Agent, &update));
                }
                let result = json!({"stopReason": stop_reason, "message": message});
                ("completed", Some(result), None, None)
            }
            Err((code, message)) => {
                turn.buffer.discard();
                let error = error_json(code, message);
                let session_error = route_lost.then(|| error.clone());
                ("failed", None, Some(error), session_error)
            }
        };
        let last_output = self.counters.latest_sequence + events.len() as u64;
        let extra = SessionStore::finish_prompt_statements(
            &self.session_id,
            &turn.prompt_id,
            state,
            result.as_ref(),
            error.as_ref(),
            session_error.as_ref(),
            last_output,
            now,
        );
        if let Err(e) = self.commit(events, extra).await {
            // This route's view of the session can no longer be trusted: it
            // ends, and the next start settles the turn from what is stored.
            tracing::error!(session = %self.session_id, error = %e, "terminal commit failed; the route ends and the next start settles the turn");
            self.conn.shutdown().await;
            self.exited = true;
            self.shared.route_ended(&self.session_id, self.generation);
            return (Err(e), stop);
        }
        // The host hears the answer only after the terminal events are out.
        self.published().await;
        if route_lost {
            self.conn.shutdown().await;
            self.exited = true;
            // Leave the map before the host hears the answer, so its next
            // prompt starts a new route instead of queueing on this one.
            self.shared.route_ended(&self.session_id, self.generation);
        }
        let reply = match (result, error) {
            (Some(mut result), _) => {
                if let Some(obj) = result.as_object_mut() {
                    obj.insert("sessionId".into(), json!(self.session_id));
                    obj.insert("promptId".into(), json!(turn.prompt_id));
                }
                Ok(result)
            }
            (None, Some(error)) => Err(SessionError::PromptFailed { error }),
            (None, None) => Err(SessionError::PromptFailed {
                error: error_json("prompt_failed", "the turn failed"),
            }),
        };
        (reply, stop)
    }

    async fn set_config_option(
        &mut self,
        config_id: String,
        value: Value,
    ) -> Result<Value, SessionError> {
        let params =
            json!({"sessionId": self.acp_session_id, "configId": config_id, "value": value});
        let conn = self.conn.clone();
        let answer = conn.request("session/set_config_option", params);
        tokio::pin!(answer);
        // Keep draining the adapter while it answers.
        let result = loop {
            tokio::select! {
                biased;
                event = self.events.recv(), if !self.exited => match event {
                    Some(event) => { let _ = self.idle_event(event).await; }
                    None => self.exited = true,
                },
                result = &mut answer => break result,
            }
        };
        let result = result.map_err(|e| adapter_error(&e))?;
        let options = result
            .get("configOptions")
            .filter(|v| v.is_array())
            .cloned()
            .ok_or_else(|| SessionError::Adapter {
                code: "acp_protocol_error",
                message: "session/set_config_option returned no configOptions".into(),
            })?;
        let revision = self
            .shared
            .store
            .set_config_options(&self.session_id, &options)
            .await?;
        Ok(json!({"revision": revision, "options": options}))
    }
}

/// A commit handed to the committing task and not yet confirmed.
struct InFlight {
    confirmed: oneshot::Receiver<Result<(), DbError>>,
    before: HistoryCounters,
    after: HistoryCounters,
}

/// The answer for the oldest handed-off commit, left in place: the caller
/// removes the entry once it has the answer.
async fn oldest_answer(
    in_flight: &mut VecDeque<InFlight>,
) -> Result<Result<(), DbError>, oneshot::error::RecvError> {
    match in_flight.front_mut() {
        Some(first) => (&mut first.confirmed).await,
        None => std::future::pending().await,
    }
}

/// What the route hands its committing task, in order.
enum Work {
    /// A transaction ending in a read-back; the rows read back are
    /// published, then the route is told.
    Commit {
        statements: Vec<Statement>,
        reply: oneshot::Sender<Result<(), DbError>>,
    },
    Ephemeral(u64, Value),
    Barrier(oneshot::Sender<()>),
}

/// Runs a route's transactions one after the other and hands each one's
/// rows, read back after its commit, to the publishing task. Live updates
/// and barriers pass through in order. Ends when the route does.
async fn commit_loop(
    store: SessionStore,
    mut work: mpsc::UnboundedReceiver<Work>,
    publisher: mpsc::UnboundedSender<Publish>,
) {
    while let Some(item) = work.recv().await {
        match item {
            Work::Commit { statements, reply } => {
                // The rows read back go to the publishing task undecoded, so
                // the next transaction is handed over at once.
                let result = match store.db().transaction(statements).await {
                    Ok(mut results) => {
                        if let Some(rows) = results.pop().filter(|rows| !rows.is_empty()) {
                            let _ = publisher.send(Publish::Durable(rows));
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
                let _ = reply.send(result);
            }
            Work::Ephemeral(after, update) => {
                let _ = publisher.send(Publish::Ephemeral(after, update));
            }
            Work::Barrier(done) => {
                let _ = publisher.send(Publish::Barrier(done));
            }
        }
    }
}

/// What the committing task hands the publishing task, in commit order.
enum Publish {
    /// Rows read back after a commit, in the event columns' order.
    Durable(Rows),
    Ephemeral(u64, Value),
    Barrier(oneshot::Sender<()>),
}

/// Publishes a route's committed rows and live updates in order. Ends when
/// the route does.
async fn publish_loop(
    hub: Arc<super::Hub>,
    session_id: String,
    mut publications: mpsc::UnboundedReceiver<Publish>,
) {
    while let Some(publication) = publications.recv().await {
        match publication {
            Publish::Durable(rows) => hub.publish(&session_id, SessionStore::decode_events(rows)),
            Publish::Ephemeral(after, update) => hub.publish_ephemeral(&session_id, after, update),
            Publish::Barrier(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// Sends a request during route start, draining adapter events meanwhile.
/// With `discard`, replayed `session/update`s are dropped (a `session/load`
/// replays what our history already holds); otherwise they stay queued for
/// the route to store.
async fn request_during_restore(
    conn: &AdapterConnection,
    events: &mut mpsc::Receiver<AdapterEvent>,
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
