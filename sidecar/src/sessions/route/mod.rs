//! A session's live adapter route: one task that owns the adapter connection
//! and is the session's single writer.
//!
//! Everything that appends to a session's history happens on this task, in
//! order: accepting a prompt, the agent's updates (group-committed: whatever
//! has arrived while the previous transaction ran goes into the next one),
//! permission requests and their answers, cancels and the terminal commit.
//! Each commit is followed by a read-back, and only those rows are published.
//! Starting a route is the restore ladder: `session/resume`, else
//! `session/load` (either one's replay is discarded), else `session/new` plus a
//! bounded continuation prepended once to the next prompt.
//!
//! The route's rules live by responsibility: `restore.rs` starts a route
//! (spawn, `initialize`, the restore ladder, config replay); `turn.rs` runs
//! one prompt from its accept commit to its terminal commit; `commit.rs` is
//! the commit pipeline (group commits handed to the committing task, the
//! read-back published in commit order); `permissions.rs` records, answers
//! and ends permission requests; `retention.rs` bounds prompt records and
//! permission outcomes; `fs.rs` serves the agent's ACP `fs/*` requests;
//! `attachments.rs` gives a registry adapter a message's attachments.
//! This file holds the commands, the route's state and its idle loop.

mod attachments;
pub(super) use attachments::MAX_EMBEDDED_BYTES_PER_VM;
mod commit;
mod fs;
mod permissions;
mod restore;
mod retention;
mod state;
mod turn;

pub use restore::build_continuation;

use std::collections::VecDeque;
use std::sync::Arc;

use agentos_adapters::{
    AdapterConnection, AdapterError, AdapterEvent, AdapterEvents, SessionUpdate,
};
use agentos_protocol::acp::{self, methods};
use agentos_protocol::session::{Actor, PermissionPolicy};
use agentos_protocol::ErrorCode;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::coalesce::is_chunk;
use super::store::{clock_ms, HistoryCounters, NewEvent};
use super::{
    CancelStatus, NotPendingReason, Notice, PromptOutcome, SessionConfig, SessionError, Shared,
    StartRun,
};
use crate::runs::store::RunStore;
use crate::runs::{NewRun, RunLink, RunStatus};
use commit::{InFlight, Work};
pub(crate) use turn::user_events;

/// An accepted-to-be prompt, validated by the service.
pub(crate) struct PromptRequest {
    pub prompt_id: String,
    pub content: Vec<Value>,
    pub input_hash: Vec<u8>,
    pub actor: Actor,
    /// `content` is already in the log from this sequence on (a retry, or a
    /// message appended when it queued): it is sent to the agent without
    /// being appended again.
    pub input_at: Option<u64>,
    /// A retry of a failed prompt: what the agent did after `input_at` was
    /// the failed attempt, not the conversation.
    pub retry: bool,
    /// The run this turn works, and how its accept records it.
    pub run: TurnRun,
    /// The turn resumes its run after the children it waited for
    /// answered: the agent continues from the log, with no new words.
    pub resume: bool,
}

/// The run a turn works, as its accept records it.
#[derive(Clone)]
pub(crate) enum TurnRun {
    /// None: the session service used on its own (tests, embedding).
    None,
    /// A run the queue claimed: the accept moves it to `running`.
    Claimed(RunLink),
    /// A turn that starts at once: the accept inserts its run `running`,
    /// unless the session has turns queued or the cap is reached (then the
    /// accept fails as `session_busy`).
    Start(Arc<StartRun>),
}

/// The setting that bounds the messages queued for one session's turns
/// (each is bounded by `limits.acp.maxPromptBytes`).
pub(crate) const QUEUED_PROMPTS_SETTING: &str = "limits.acp.maxQueuedPromptsPerSession";

/// A prompt's terminal result as returned to the host.
pub(crate) type PromptReply = Result<PromptOutcome, SessionError>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StopReason {
    Unload,
    Delete,
    VmShutdown,
}

pub(crate) enum Command {
    /// Boxed: every route's command queue holds blocks of 32 commands from
    /// its start, and a prompt is four times the size of any other command.
    Prompt {
        request: Box<PromptRequest>,
        reply: oneshot::Sender<PromptReply>,
    },
    Cancel {
        reply: oneshot::Sender<CancelStatus>,
    },
    RespondPermission {
        request_id: String,
        option_id: String,
        reply: oneshot::Sender<Result<Option<NotPendingReason>, SessionError>>,
    },
    SetConfigOption {
        config_id: String,
        value: Value,
        reply: oneshot::Sender<Result<SessionConfig, SessionError>>,
    },
    Stop {
        reason: StopReason,
        reply: oneshot::Sender<()>,
    },
    /// Appends a user's own events (a verb on the shared log): refused with
    /// `session_busy` while a turn is live unless `during_turn` (the result
    /// of a call logged before the turn began, which must not be lost).
    /// Answers the last sequence.
    Append {
        events: Vec<NewEvent>,
        /// Statements that commit with the events or not at all.
        extra: Vec<agentos_schema::Statement>,
        during_turn: bool,
        reply: oneshot::Sender<Result<u64, SessionError>>,
    },
    /// Appends a message's words and queues its turn as a run, in one
    /// transaction, whether or not a turn is live (at most
    /// `limits.acp.maxQueuedPromptsPerSession` queued). Answers the
    /// sequence of the first word, which the run's input records.
    Enqueue {
        events: Vec<NewEvent>,
        run: Box<NewRun>,
        reply: oneshot::Sender<Result<u64, SessionError>>,
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

/// A `session/update` sorted for the turn engine.
enum Incoming {
    /// A message or thought chunk: live only, buffered.
    Chunk(Value),
    /// What the agent is doing (`_agentos/activity`): live only, never
    /// buffered or stored.
    Live(Value),
    /// Anything else, stored as the agent wrote it.
    Durable(String),
    /// The builtin agent's report of its failure (`_agentos/error`),
    /// stored; the message it cut is not.
    Failure(String),
}

pub(crate) struct Route {
    shared: Arc<Shared>,
    /// The adapter is the builtin model agent, whose `_agentos/*` requests
    /// this route answers.
    builtin: bool,
    /// The running prompt's first input sequence and whether it is a
    /// retry (see `TurnScope`).
    input_floor: Option<(u64, bool)>,
    /// The running turn's run, and whether the turn resumes it after its
    /// children answered (see `TurnScope`).
    turn_run: Option<String>,
    /// The run of a turn that started at once, from its accept until the
    /// route settled it (see [`crate::sessions::StartRun`]).
    adopted: Option<(crate::runs::Runs, String)>,
    resume: bool,
    session_id: String,
    acp_session_id: String,
    policy: PermissionPolicy,
    roots: Vec<String>,
    /// What the adapter's prompts may carry besides text and links: a
    /// registry adapter is given a message's attachments as it can take
    /// them (`attachments.rs`).
    prompt_caps: agentos_protocol::acp::PromptCapabilities,
    conn: AdapterConnection,
    events: AdapterEvents,
    counters: HistoryCounters,
    preamble: Option<String>,
    generation: u64,
    exited: bool,
    /// Ordered hand-off to the committing task (which hands committed rows
    /// on to the publishing task): building the next batch overlaps with
    /// committing this one, and rendering and delivering overlaps with both.
    committer: mpsc::UnboundedSender<Work>,
    /// What the committing and publishing tasks have still to finish.
    pipeline: commit::Pipeline,
    /// Commits handed off and not yet confirmed, oldest first. `counters`
    /// already includes them.
    in_flight: VecDeque<InFlight>,
    /// Retained prompt records and permission outcomes of this session; the
    /// route is their only writer.
    prompt_count: u64,
    outcome_count: u64,
    /// A commit whose outcome is unknown (the actor socket dropped while it
    /// committed). The route's counters can no longer be trusted, so it ends
    /// at once, writing nothing more; the session's next start settles it as
    /// a restart would (`Sessions::ensure_route`).
    lost_commit: Option<SessionError>,
    /// Stderr forwarded as notices, by rate; bytes dropped in the current
    /// run of drops.
    stderr_rate: TokenBucket,
    stderr_dropped: u64,
}

/// A byte rate with a burst of one second's worth.
pub(super) struct TokenBucket {
    rate: u64,
    tokens: f64,
    last: std::time::Instant,
}

impl TokenBucket {
    pub(super) fn new(rate: u64) -> TokenBucket {
        TokenBucket {
            rate,
            tokens: rate as f64,
            last: std::time::Instant::now(),
        }
    }

    /// Takes `cost` if the bucket holds it.
    fn admit(&mut self, cost: u64) -> bool {
        let now = std::time::Instant::now();
        let refill = now.duration_since(self.last).as_secs_f64() * self.rate as f64;
        self.tokens = (self.tokens + refill).min(self.rate as f64);
        self.last = now;
        if self.tokens >= cost as f64 {
            self.tokens -= cost as f64;
            true
        } else {
            false
        }
    }
}

fn adapter_error(e: &AdapterError) -> SessionError {
    SessionError::Adapter {
        code: e.code(),
        message: e.to_string(),
    }
}

/// The error object stored with a failed prompt (and answered again for its
/// idempotency key). Only an uncertain delivery is marked retryable: the
/// host decides whether to send it again.
fn error_json(code: ErrorCode, message: &str) -> Value {
    if code == ErrorCode::PromptDeliveryUncertain {
        return json!({"code": code, "message": message, "retryable": true});
    }
    json!({"code": code, "message": message})
}

/// Waits `idle`, or for ever when there is none.
async fn idle_for(idle: Option<std::time::Duration>) {
    match idle {
        Some(idle) => tokio::time::sleep(idle).await,
        None => std::future::pending().await,
    }
}

impl Route {
    async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        // A builtin session's process ends after it has served a command
        // and then waited this long for the next (a registry adapter's
        // never: it may not restore).
        let idle = self
            .shared
            .builtin
            .get()
            .filter(|_| self.builtin)
            .map(|agent| agent.idle);
        let mut served = false;
        loop {
            tokio::select! {
                biased;
                event = self.events.recv(), if !self.exited => match event {
                    Some(event) => {
                        if let Err(e) = self.idle_event(event).await {
                            tracing::warn!(session = %self.session_id, error = %e, "adapter event outside a turn failed");
                        }
                        if self.lost_commit.is_some() {
                            self.end_after_lost_commit().await;
                        }
                    }
                    None => self.exited = true,
                },
                command = commands.recv() => { served = true; match command {
                    None => break,
                    Some(Command::Prompt { request, reply }) => {
                        if self.exited {
                            // Never started here: the service retries it on
                            // a new route.
                            let _ = reply.send(Err(SessionError::RouteGone));
                            break;
                        }
                        // Boxed: a turn's state lives only while the turn
                        // does, not in every idle session's task (inline,
                        // it would more than triple the task's size).
                        let ended = Box::pin(self.turn(*request, reply, &mut commands)).await;
                        // A started turn that ended without its terminal
                        // commit (its route lost a commit, or stopped).
                        if let Some((runs, run_id)) = self.adopted.take() {
                            if let Err(e) = runs.settle_adopted(&run_id, None).await {
                                tracing::warn!(run = %run_id, error = %e, "a started turn's run could not be settled");
                            }
                        }
                        self.input_floor = None;
                        self.turn_run = None;
                        self.resume = false;
                        if let Some((_, done)) = ended {
                            let _ = done.send(());
                            break;
                        }
                        if self.exited {
                            break;
                        }
                    }
                    Some(Command::Cancel { reply }) => {
                        let _ = reply.send(CancelStatus::NoActivePrompt);
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
                    Some(Command::Append { events, extra, reply, .. }) => {
                        let result = self.commit(events, extra).await;
                        let _ = reply.send(result.map(|()| self.counters.latest_sequence));
                        if self.lost_commit.is_some() {
                            self.end_after_lost_commit().await;
                            break;
                        }
                    }
                    Some(Command::Enqueue { events, run, reply }) => {
                        let _ = reply.send(self.enqueue(events, *run).await);
                        if self.lost_commit.is_some() {
                            self.end_after_lost_commit().await;
                            break;
                        }
                    }
                }},
                () = idle_for(idle), if served && !self.exited => {
                    tracing::debug!(session = %self.session_id, "an idle builtin session's agent ends");
                    self.conn.shutdown().await;
                    break;
                }
            }
            if self.exited {
                break;
            }
        }
        self.shared.route_ended(&self.session_id, self.generation);
        commands.close();
        while let Ok(command) = commands.try_recv() {
            match command {
                Command::Prompt { reply, .. } => {
                    let _ = reply.send(Err(SessionError::RouteGone));
                }
                Command::SetConfigOption { reply, .. } => {
                    let _ = reply.send(Err(SessionError::RouteGone));
                }
                Command::Cancel { reply } => {
                    let _ = reply.send(CancelStatus::NoActivePrompt);
                }
                Command::RespondPermission {
                    request_id, reply, ..
                } => {
                    let _ = reply.send(self.late_permission_reason(&request_id).await.map(Some));
                }
                Command::Stop { reply, .. } => {
                    let _ = reply.send(());
                }
                Command::Append { reply, .. } | Command::Enqueue { reply, .. } => {
                    let _ = reply.send(Err(SessionError::RouteGone));
                }
            }
        }
        self.conn.shutdown().await;
    }

    /// Appends a message's words and inserts its queued run (its input
    /// naming where the words start) in one transaction, within the
    /// session's bound of queued turns.
    async fn enqueue(
        &mut self,
        events: Vec<NewEvent>,
        mut run: NewRun,
    ) -> Result<u64, SessionError> {
        let first = self.counters.latest_sequence + 1;
        if let Value::Object(input) = &mut run.input {
            input.insert("inputAt".into(), json!(first));
        }
        // Every enqueue of this session passes here, so the count cannot
        // be raced upwards between the check and the insert.
        let limit = self.shared.limits.max_queued_prompts_per_session;
        let runs = RunStore::new(self.shared.store.db().clone());
        let queued = runs.queued_turns(&self.session_id).await?;
        if queued >= limit {
            return Err(SessionError::Limit {
                code: ErrorCode::SessionBusy,
                setting: QUEUED_PROMPTS_SETTING,
                used: queued,
                limit,
            });
        }
        let statements = RunStore::insert_statements(&run, RunStatus::Queued, None, clock_ms());
        self.commit(events, statements).await?;
        Ok(first)
    }

    /// Ends the route after a commit with an unknown outcome: the adapter
    /// stops and the route leaves the map, so the next request starts a new
    /// route, which settles the session from what is stored.
    async fn end_after_lost_commit(&mut self) {
        tracing::error!(session = %self.session_id, "a commit's outcome is unknown; the route ends and the next start settles the session");
        self.conn.shutdown().await;
        self.exited = true;
        self.shared.route_ended(&self.session_id, self.generation);
    }

    /// Handles an adapter event between turns: updates are stored (chunks are
    /// only published live), permission requests are declined.
    async fn idle_event(&mut self, event: AdapterEvent) -> Result<(), SessionError> {
        match event {
            AdapterEvent::SessionUpdate(update) => match self.classify(update) {
                Some(Incoming::Chunk(update) | Incoming::Live(update)) => self.publish_live(update),
                Some(Incoming::Durable(payload_json) | Incoming::Failure(payload_json)) => {
                    let event = NewEvent::raw_update(Actor::Agent, payload_json);
                    self.commit(vec![event], vec![]).await?;
                }
                None => {}
            },
            AdapterEvent::Notification { method, .. } if method == methods::SESSION_UPDATE => {
                tracing::warn!(session = %self.session_id, "dropping a malformed session/update");
            }
            AdapterEvent::Notification { .. } => {}
            AdapterEvent::Request { id, method, params } => {
                if !self.stdin_room().await {
                    tracing::warn!(
                        session = %self.session_id,
                        "stopping an adapter that stopped reading its stdin \
                         (limits.acp.maxQueuedStdinBytes, limits.acp.stalledStdinTimeoutMs)"
                    );
                    self.conn.shutdown().await;
                    return Ok(());
                }
                let answer = if method == methods::SESSION_REQUEST_PERMISSION {
                    Ok(acp::PermissionResponse::cancelled())
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

    /// Waits (up to `limits.acp.stalledStdinTimeoutMs`) until the adapter's
    /// stdin queue is within `limits.acp.maxQueuedStdinBytes`; `false` when
    /// the agent is not reading it.
    async fn stdin_room(&self) -> bool {
        let timeout = std::time::Duration::from_millis(self.shared.limits.stalled_stdin_timeout_ms);
        self.conn.stdin_room(timeout).await
    }

    /// Which stdin bound `stdin_room` waited on in vain, and what to say:
    /// this adapter's own, or (its queue within its own) the VM's.
    fn stdin_shortfall(&self) -> (&'static str, String) {
        let own = self.shared.limits.max_queued_stdin_bytes;
        if self.conn.stdin_queued_bytes() as u64 > own {
            (
                "limits.acp.maxQueuedStdinBytes",
                format!(
                    "the agent stopped reading its stdin with more than \
                     limits.acp.maxQueuedStdinBytes ({own}) queued for it"
                ),
            )
        } else {
            let vm = self.shared.limits.max_queued_stdin_bytes_per_vm;
            (
                "limits.acp.maxQueuedStdinBytesPerVm",
                format!(
                    "the agents' stdin queues together stayed over \
                     limits.acp.maxQueuedStdinBytesPerVm ({vm})"
                ),
            )
        }
    }

    /// Forwards a stderr line as a notice within the adapter's rate
    /// (`limits.acp.maxStderrBytesPerSecond`); the rest is counted, and
    /// logged once per run of drops.
    fn stderr(&mut self, line: String) {
        tracing::debug!(session = %self.session_id, "adapter stderr: {line}");
        let cost = line.len() as u64 + 1;
        if !self.stderr_rate.admit(cost) {
            self.shared.counters.agent_stderr_dropped(cost);
            if self.stderr_dropped == 0 {
                tracing::warn!(
                    session = %self.session_id,
                    "dropping adapter stderr over limits.acp.maxStderrBytesPerSecond"
                );
            }
            self.stderr_dropped += cost;
            return;
        }
        if self.stderr_dropped > 0 {
            tracing::warn!(
                session = %self.session_id,
                dropped_bytes = self.stderr_dropped,
                "adapter stderr resumed after drops"
            );
            self.stderr_dropped = 0;
        }
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
        if update.kind == agentos_protocol::agent_ext::ACTIVITY_UPDATE {
            return Some(Incoming::Live(update.update()));
        }
        if update.kind == agentos_protocol::agent_ext::ERROR_UPDATE {
            return Some(Incoming::Failure(update.update_json));
        }
        Some(Incoming::Durable(update.update_json))
    }

    async fn set_config_option(
        &mut self,
        config_id: String,
        value: Value,
    ) -> Result<SessionConfig, SessionError> {
        let params = acp::to_params(&acp::SetConfigOptionParams {
            session_id: &self.acp_session_id,
            config_id: &config_id,
            value: &value,
        });
        let conn = self.conn.clone();
        let answer = conn.request(methods::SESSION_SET_CONFIG_OPTION, params);
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
            .and_then(Value::as_array)
            .cloned()
            .ok_or_else(|| SessionError::Adapter {
                code: ErrorCode::AcpProtocolError,
                message: "session/set_config_option returned no configOptions".into(),
            })?;
        let revision = self
            .shared
            .store
            .set_config_options(&self.session_id, &options)
            .await?;
        Ok(SessionConfig { revision, options })
    }
}
