//! The turn: one prompt from its accept commit (session running, prompt
//! accepted, the user's content as events) through the agent's updates and
//! the `session/prompt` answer, a cancel or a stop, to the terminal commit
//! and the reply to the host.

use std::collections::HashMap;

use agentos_adapters::{AdapterError, AdapterEvent};
use agentos_protocol::acp::{self, methods};
use agentos_protocol::session::Actor;
use agentos_protocol::ErrorCode;
use agentos_schema::DbError;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::commit::{oldest_answer, MAX_BATCH_BYTES, MAX_BATCH_EVENTS};
use super::state::Turn;
use super::{
    error_json, Command, Incoming, PromptReply, PromptRequest, Route, StopReason, TurnRun,
};
use crate::runs::obligations::{self, Verdict};
use crate::runs::store::RunStore;
use crate::runs::{AdoptedEnd, Finish, RunLink};
use crate::sessions::coalesce::ChunkBuffer;
use crate::sessions::store::{clock_ms, NewEvent, PromptState, SessionStore};
use crate::sessions::{AgentReply, CancelStatus, PromptOutcome, SessionError};

/// The per-turn bounds on what an agent may produce.
const TURN_OUTPUT_SETTING: &str = "limits.acp.maxTurnOutputBytes";
const MESSAGE_SETTING: &str = "limits.acp.maxCompletedMessageBytes";

const VALID_STOP_REASONS: &[&str] = &[
    "end_turn",
    "max_tokens",
    "max_turn_requests",
    "refusal",
    "cancelled",
];

enum TurnEnd {
    /// The agent answered `session/prompt`.
    Answered(Result<Value, AdapterError>),
    /// The route stops (unload, delete, shutdown) mid-turn.
    Stopped(StopReason, oneshot::Sender<()>),
    /// The turn failed on our side (protocol fault, storage).
    Failed,
}

impl Route {
    /// Runs one prompt to its terminal commit. Returns a stop request that
    /// arrived mid-turn, so the caller can end the route.
    pub(super) async fn turn(
        &mut self,
        mut request: PromptRequest,
        reply: oneshot::Sender<PromptReply>,
        commands: &mut mpsc::Receiver<Command>,
    ) -> Option<(StopReason, oneshot::Sender<()>)> {
        let now = clock_ms();
        let first_input = request
            .input_at
            .unwrap_or(self.counters.latest_sequence + 1);
        let user_events = if request.input_at.is_some() {
            Vec::new()
        } else {
            user_events(&request.content, &request.actor)
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
            &request.input_hash,
            first_input,
            now,
        ));
        if self.preamble.is_some() {
            accept.push(SessionStore::clear_preamble_statement(&self.session_id));
        }
        // The turn's run goes running with its acceptance: a run is running
        // exactly when its prompt may have reached the agent.
        let mut started = None;
        let link = match &mut request.run {
            TurnRun::Claimed(link) => {
                accept.push(RunStore::start_statement(&link.run_id, now));
                Some(link.clone())
            }
            TurnRun::Start(start) => {
                let run = &start.run;
                let lease = (start.runs.owner(), now + start.runs.config().lease_ms);
                accept.extend(RunStore::start_statements(
                    run,
                    first_input,
                    lease,
                    start.cap,
                    now,
                ));
                // A run of no agent (the host door's) is shown by no feed:
                // its waiters wait for its end only.
                if run.agent_id.is_some() {
                    started = Some(crate::runs::Run::started(run, first_input, lease, now));
                }
                Some(RunLink {
                    run_id: run.run_id.clone(),
                    attempt: 1,
                    max_attempts: run.max_attempts.max(1),
                })
            }
            TurnRun::None => None,
        };
        let run_id = link.as_ref().map(|l| l.run_id.clone());
        if let Err(e) = self.commit(user_events, accept).await {
            if let Some(lost) = self.lost_commit.clone() {
                // The accept may have landed: the next start settles it,
                // and a started turn's run is settled now.
                self.end_after_lost_commit().await;
                if let (TurnRun::Start(start), Some(run_id)) = (&request.run, &run_id) {
                    if let Err(e) = start.runs.settle_adopted(run_id, None).await {
                        tracing::warn!(run = %run_id, error = %e, "a started turn's run could not be settled");
                    }
                }
                let _ = reply.send(Err(lost));
                return None;
            }
            let e = match e {
                SessionError::Storage(DbError::ExpectedChanges { .. }) => {
                    SessionError::Busy(self.session_id.clone())
                }
                // One live turn per session, or a key another turn holds.
                SessionError::Storage(ref db) if db.is_constraint() => {
                    SessionError::Busy(self.session_id.clone())
                }
                other => other,
            };
            let _ = reply.send(Err(e));
            return None;
        }
        let quiet = matches!(&request.run, TurnRun::Start(start) if start.run.quiet());
        let progress = match (&request.run, &run_id) {
            (TurnRun::Start(start), Some(run_id)) => {
                // Live in the queue's eyes, and heard to start, as a
                // claimed run is.
                start.runs.adopt(run_id);
                if let Some(started) = started {
                    start.runs.publish(started);
                }
                self.adopted = Some((start.runs.clone(), run_id.clone()));
                start.progress.set_accepted();
                Some(start.progress.clone())
            }
            _ => None,
        };
        self.input_floor = Some((first_input, request.retry));
        self.prompt_count = self.prompt_count + 1 - pruned.own;
        self.shared.prompts_changed(pruned.any).await;
        let mut blocks = Vec::with_capacity(request.content.len() + 1);
        if let Some(preamble) = self.preamble.take() {
            blocks.push(json!({"type": "text", "text": preamble}));
        }
        blocks.extend(request.content);
        // The embedded bytes stay counted while the turn that sends them runs.
        let (blocks, _embedded) = self.with_attachments(blocks).await;
        let shared = self.shared.clone();
        let _awake = shared
            .keep_awake
            .hold(&shared.notices, &self.session_id, &request.prompt_id);
        self.turn_run = run_id.clone();
        self.resume = request.resume;
        let mut turn = Turn {
            prompt_id: request.prompt_id.clone(),
            parked: false,
            verbs: false,
            run_id,
            run: link,
            progress,
            quiet,
            buffer: ChunkBuffer::default(),
            pending: Vec::new(),
            pending_bytes: 0,
            message: ChunkBuffer::default(),
            message_id: None,
            permissions: HashMap::new(),
            cancel_requested: false,
            failure: None,
            failure_setting: None,
            output_bytes: 0,
        };
        // A new turn re-arms the per-turn 80 % warnings.
        let limits = &self.shared.limits;
        for (setting, limit) in [
            (TURN_OUTPUT_SETTING, limits.max_turn_output_bytes),
            (MESSAGE_SETTING, limits.max_completed_message_bytes),
        ] {
            self.shared
                .warn_session(&self.session_id, setting, 0, limit);
        }
        let conn = self.conn.clone();
        let params = acp::to_params(&acp::PromptParams {
            session_id: &self.acp_session_id,
            prompt: &blocks,
        });
        let answer = conn.request(methods::SESSION_PROMPT, params);
        tokio::pin!(answer);
        let end = loop {
            if self.lost_commit.is_some() {
                self.abort_adapter_turn().await;
                break TurnEnd::Failed;
            }
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
                        Some(Command::Prompt { reply, .. }) => {
                            let _ = reply.send(Err(SessionError::Busy(self.session_id.clone())));
                        }
                        Some(Command::Enqueue { events, run, reply }) => {
                            let _ = reply.send(self.enqueue(events, *run).await);
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
                        Some(Command::Append { reply, during_turn: false, .. }) => {
                            let _ = reply.send(Err(SessionError::Busy(self.session_id.clone())));
                        }
                        Some(Command::Append { events, extra, reply, during_turn: true }) if !extra.is_empty() => {
                            // With its own statements (a child's result and
                            // its resolution): one transaction of its own.
                            let result = self.commit(events, extra).await;
                            let _ = reply.send(result.map(|()| self.counters.latest_sequence));
                        }
                        Some(Command::Append { events, reply, during_turn: true, .. }) => {
                            // After the agent's updates so far; the live
                            // chunk buffer stays open.
                            for event in events {
                                turn.pending_bytes += event.bytes();
                                turn.pending.push(event);
                            }
                            let answer = match self.flush(&mut turn).await {
                                Ok(()) => Ok(self.counters.latest_sequence),
                                Err(()) => Err(SessionError::PromptFailed {
                                    error: error_json(
                                        ErrorCode::HistoryCommitFailed,
                                        "the events could not be committed",
                                    ),
                                }),
                            };
                            let _ = reply.send(answer);
                        }
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
                    let limit = self.shared.limits.max_turn_output_bytes;
                    turn.output_bytes += update.update_json.len() as u64;
                    if turn.output_bytes > limit {
                        turn.fail_limit(
                            ErrorCode::ResourceLimit,
                            TURN_OUTPUT_SETTING,
                            format!(
                                "the turn's updates exceeded {TURN_OUTPUT_SETTING} ({limit} bytes)"
                            ),
                        );
                        self.abort_adapter_turn().await;
                        return Err(());
                    }
                    self.shared.warn_session(
                        &self.session_id,
                        TURN_OUTPUT_SETTING,
                        turn.output_bytes,
                        limit,
                    );
                    let Some(incoming) = self.classify(update) else {
                        continue;
                    };
                    let failure = matches!(incoming, Incoming::Failure(_));
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
                            // A chunk with no text (one that closes its
                            // message with a `_meta`) adds nothing to it.
                            if let Some(content) = update
                                .get("content")
                                .filter(|c| c.get("text").and_then(Value::as_str) != Some(""))
                            {
                                turn.message.push_message_content(content);
                            }
                        }
                        turn.buffer.push_ref(&update);
                        self.publish_live(update);
                        let limit = self.shared.limits.max_completed_message_bytes;
                        let used = turn.buffer.bytes() as u64;
                        if used > limit {
                            turn.fail_limit(
                                ErrorCode::ResourceLimit,
                                MESSAGE_SETTING,
                                format!("a message exceeded {MESSAGE_SETTING} ({limit})"),
                            );
                            self.abort_adapter_turn().await;
                            return Err(());
                        }
                        self.shared
                            .warn_session(&self.session_id, MESSAGE_SETTING, used, limit);
                    } else if let Incoming::Live(update) = incoming {
                        self.publish_live(update);
                    } else if let Incoming::Durable(payload_json)
                    | Incoming::Failure(payload_json) = incoming
                    {
                        if failure {
                            // The message the failure cut is not an answer:
                            // it is not stored, so no later turn replays it
                            // to the model as one (it went out live only).
                            turn.buffer.discard();
                        } else {
                            let flushed = turn.buffer.take();
                            self.queue(turn, flushed);
                        }
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
                    if method == methods::SESSION_REQUEST_PERMISSION {
                        let flushed = turn.buffer.take();
                        self.queue(turn, flushed);
                        self.permission_request(turn, id, params).await?;
                    } else {
                        self.flush(turn).await?;
                        // An agent that does not read its answers is not
                        // served more of them.
                        if !self.stdin_room().await {
                            let (setting, message) = self.stdin_shortfall();
                            turn.failure = Some((ErrorCode::ResourceLimit, message));
                            turn.failure_setting = Some(setting);
                            self.abort_adapter_turn().await;
                            return Err(());
                        }
                        // A cancelled turn runs no more verbs, however many
                        // the model asked for.
                        if method == agentos_protocol::agent_ext::methods::VERB {
                            turn.verbs = true;
                        }
                        let answer = if turn.cancel_requested
                            && method == agentos_protocol::agent_ext::methods::VERB
                        {
                            Err(agentos_adapters::RpcError::new(
                                agentos_protocol::acp::error_codes::REQUEST_CANCELLED,
                                "the turn was cancelled",
                            ))
                        } else {
                            self.serve_request(&method, params).await
                        };
                        // A verb that handed work to children the turn
                        // waits for: the turn ends waiting, not done.
                        if method == agentos_protocol::agent_ext::methods::VERB
                            && answer
                                .as_ref()
                                .is_ok_and(|v| v["parked"] == Value::Bool(true))
                        {
                            turn.parked = true;
                        }
                        let _ = self.conn.respond(&id, answer);
                    }
                }
                AdapterEvent::Stderr(line) => self.stderr(line),
                AdapterEvent::ProtocolError(e) => {
                    turn.failure = Some((ErrorCode::AcpProtocolError, e.to_string()));
                    match e {
                        AdapterError::LineTooLong { .. } => {
                            turn.failure_setting = Some("limits.acp.maxReadLineBytes");
                        }
                        AdapterError::StdoutBudget { .. } => {
                            turn.failure_setting = Some("limits.acp.maxStdoutBytesPerVm");
                        }
                        _ => {}
                    }
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

    /// The adapter can no longer be trusted for this turn: stop it. The next
    /// prompt restores the session.
    pub(super) async fn abort_adapter_turn(&mut self) {
        let _ = self.conn.notify(
            methods::SESSION_CANCEL,
            acp::to_params(&acp::CancelParams {
                session_id: &self.acp_session_id,
            }),
        );
        self.conn.shutdown().await;
    }

    async fn cancel(&mut self, turn: &mut Turn) -> CancelStatus {
        turn.cancel_requested = true;
        let _ = self.conn.notify(
            methods::SESSION_CANCEL,
            acp::to_params(&acp::CancelParams {
                session_id: &self.acp_session_id,
            }),
        );
        self.end_permissions(turn, "prompt_cancelled").await;
        CancelStatus::Cancelled
    }

    /// What the run owes at the end of its completed turn. A failure to
    /// read it is logged and owes nothing: the turn's own end stands.
    async fn obligations(&self, run_id: &str) -> Verdict {
        let plan = match self.shared.store.plan(&self.session_id).await {
            Ok(plan) => plan,
            Err(e) => {
                tracing::warn!(session = %self.session_id, error = %e, "the plan could not be read for the run's obligations");
                return Verdict::Met;
            }
        };
        let runs = RunStore::new(self.shared.store.db().clone());
        match obligations::judge(&runs, run_id, plan.as_ref()).await {
            Ok(verdict) => verdict,
            Err(e) => {
                tracing::warn!(run = %run_id, error = %e, "the run's obligations could not be read");
                Verdict::Met
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
        if let Some(lost) = self.lost_commit.clone() {
            // Write nothing more: the next start settles the turn as a
            // restart would (prompt_delivery_uncertain, permissions ended).
            if let TurnEnd::Stopped(reason, reply) = end {
                stop = Some((reason, reply));
            }
            turn.permissions.clear();
            self.end_after_lost_commit().await;
            return (Err(lost), stop);
        }
        // What an agent said of its own failure (`data.code`, `data.retryable`,
        // as the builtin agent answers): kept with the stored error.
        let agent_detail = match &end {
            TurnEnd::Answered(Err(AdapterError::Rpc(rpc))) if turn.failure.is_none() => {
                rpc.data.clone()
            }
            _ => None,
        };
        // The tokens the turn used, as the builtin agent reports them.
        let usage = match &end {
            TurnEnd::Answered(Ok(result)) => {
                let usage = &result["_meta"]["agentos"]["usage"];
                let tokens = |k: &str| usage[k].as_u64().unwrap_or(0);
                Some((tokens("inputTokens"), tokens("outputTokens"))).filter(|u| *u != (0, 0))
            }
            _ => None,
        };
        let outcome: Result<Value, (ErrorCode, String)> = match end {
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
                            ErrorCode::InvalidStopReason,
                            format!("the agent answered with stopReason {stop_reason:?}"),
                        ))
                    }
                }
            },
            TurnEnd::Answered(Err(e)) => Err(match (turn.failure.take(), &e) {
                (Some(f), _) => f,
                (None, AdapterError::Exited | AdapterError::Closed) => (
                    ErrorCode::AdapterExited,
                    "the adapter exited during the turn".into(),
                ),
                (None, AdapterError::Rpc(rpc)) => (
                    ErrorCode::PromptFailed,
                    format!(
                        "the agent answered with error {}: {}",
                        rpc.code, rpc.message
                    ),
                ),
                (None, other) => (other.code(), other.to_string()),
            }),
            TurnEnd::Failed => Err(turn
                .failure
                .take()
                .unwrap_or_else(|| (ErrorCode::PromptFailed, "the turn failed".into()))),
            TurnEnd::Stopped(reason, reply) => {
                stop = Some((reason, reply));
                Err(match reason {
                    StopReason::Delete => {
                        (ErrorCode::SessionDeleted, "the session was deleted".into())
                    }
                    StopReason::Unload => (
                        ErrorCode::PromptInterrupted,
                        "the session was unloaded during the turn".into(),
                    ),
                    // As after a crash: the agent may have acted on it, and
                    // only the host may decide to send it again.
                    StopReason::VmShutdown => (
                        ErrorCode::PromptDeliveryUncertain,
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
                    error: error_json(ErrorCode::SessionDeleted, "the session was deleted"),
                }),
                stop,
            );
        }
        self.end_permissions(turn, permission_reason).await;
        if let Some(lost) = self.lost_commit.clone() {
            turn.permissions.clear();
            self.end_after_lost_commit().await;
            return (Err(lost), stop);
        }
        let now = clock_ms();
        let mut events = std::mem::take(&mut turn.pending);
        let message = AgentReply {
            id: turn
                .message_id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            role: "agent".into(),
            content: turn
                .message
                .take()
                .into_iter()
                .filter_map(|u| u.get("content").cloned())
                .collect(),
        };
        // The stop reason was checked against ACP's list: always a string.
        let completed = |stop_reason: &Value| PromptOutcome {
            session_id: self.session_id.clone(),
            prompt_id: turn.prompt_id.clone(),
            stop_reason: stop_reason.as_str().unwrap_or_default().to_owned(),
            message,
        };
        let (state, result, error, session_error) = match &outcome {
            Ok(stop_reason) if stop_reason == "cancelled" => {
                turn.buffer.discard();
                (
                    PromptState::Cancelled,
                    Some(completed(stop_reason)),
                    None,
                    None,
                )
            }
            Ok(stop_reason) => {
                let flushed = turn.buffer.take();
                for update in flushed {
                    events.push(NewEvent::update(Actor::Agent, &update));
                }
                (
                    PromptState::Completed,
                    Some(completed(stop_reason)),
                    None,
                    None,
                )
            }
            Err((code, message)) => {
                turn.buffer.discard();
                let mut error = error_json(*code, message);
                if let Some(setting) = turn.failure_setting.take() {
                    error["setting"] = json!(setting);
                }
                if let Some(detail) = &agent_detail {
                    if let Some(agent_code) = detail.get("code").and_then(Value::as_str) {
                        error["agentCode"] = json!(agent_code);
                    }
                    if detail.get("retryable") == Some(&Value::Bool(true)) {
                        error["retryable"] = json!(true);
                    }
                }
                let session_error = route_lost.then(|| error.clone());
                (PromptState::Failed, None, Some(error), session_error)
            }
        };
        let last_output = self.counters.latest_sequence + events.len() as u64;
        // A turn that started at once is a new root run: it owes something
        // only if a verb of this turn gave it a plan (it has no typed
        // result to deliver), so a turn without verbs reads nothing here.
        let verdict = match (&turn.run, state) {
            (Some(link), PromptState::Completed)
                if !turn.parked && (turn.progress.is_none() || turn.verbs) =>
            {
                self.obligations(&link.run_id).await
            }
            _ => Verdict::Met,
        };
        let mut extra = SessionStore::finish_prompt_statements(
            &self.session_id,
            &turn.prompt_id,
            state,
            result.as_ref().map(PromptOutcome::stored).as_ref(),
            error.as_ref(),
            session_error.as_ref(),
            last_output,
            now,
        );
        if let Some(run_id) = &turn.run_id {
            let system =
                |text: &str| user_events(&[json!({"type": "text", "text": text})], &Actor::System);
            let finish = match (state, &result, &error) {
                (PromptState::Cancelled, _, _) => Finish::Canceled,
                (PromptState::Completed, _, _) if turn.parked => Finish::AwaitChildren,
                (_, Some(outcome), _) => match &verdict {
                    Verdict::Met => Finish::Succeeded(json!({
                        "promptId": outcome.prompt_id,
                        "stopReason": outcome.stop_reason,
                    })),
                    // The continuation prompt lands right after the turn's
                    // last output, and the run queues again to answer it.
                    Verdict::Continue { text, input } => {
                        let mut input = input.clone();
                        input["inputAt"] = json!(last_output + 1);
                        events.extend(system(text));
                        Finish::Continue(input)
                    }
                    Verdict::Fail { error, notice } => {
                        events.extend(system(notice));
                        Finish::Failed(error.clone())
                    }
                    Verdict::Unmet { unmet, notice } => {
                        events.extend(system(notice));
                        extra.push(RunStore::unmet_statement(run_id, unmet));
                        Finish::Succeeded(json!({
                            "promptId": outcome.prompt_id,
                            "stopReason": outcome.stop_reason,
                        }))
                    }
                },
                (_, None, error) => Finish::Failed(error.clone().unwrap_or(Value::Null)),
            };
            let retry_at = match (&finish, &turn.run) {
                (Finish::Failed(error), Some(link)) => link.retry_at(error, now),
                _ => None,
            };
            extra.push(RunStore::finish_statement(run_id, &finish, retry_at, now));
            if let Some((input, output)) = usage {
                extra.push(RunStore::add_usage_statement(run_id, input, output));
            }
        }
        // A started turn's worker learns what the commit left from the
        // commit itself.
        let read = match (&turn.progress, &turn.run_id) {
            (Some(_), Some(run_id)) if turn.quiet => {
                Some(RunStore::status_with_queue_statement(run_id))
            }
            (Some(_), Some(run_id)) => Some(RunStore::with_queue_statement(run_id)),
            _ => None,
        };
        let (committed, kept) = match self.commit_reading(events, extra, read).await {
            Ok(kept) => (Ok(()), kept),
            Err(e) => (Err(e), None),
        };
        let settle = match (kept, &turn.progress) {
            (Some(rows), Some(progress)) => self.adopted.take().map(|(runs, run_id)| {
                progress.set_closed();
                let left = if turn.quiet {
                    RunStore::decode_status_with_queue(rows).map(|left| {
                        left.map(|(status, queued)| AdoptedEnd::Quiet { status, queued })
                    })
                } else {
                    RunStore::decode_with_queue(rows)
                        .map(|left| left.map(|(run, queued)| AdoptedEnd::Read(Box::new(run), queued)))
                };
                let left = match left {
                    Ok(left) => left,
                    Err(e) => {
                        tracing::warn!(session = %self.session_id, error = %e, "a turn's run read back corrupt");
                        None
                    }
                };
                if left.as_ref().is_some_and(|l| l.status().is_terminal()) {
                    progress.set_ended();
                }
                (runs, run_id, left)
            }),
            _ => None,
        };
        if let Err(e) = committed {
            // This route's view of the session can no longer be trusted: it
            // ends, and the next start settles the turn from what is stored.
            tracing::error!(session = %self.session_id, error = %e, "terminal commit failed; the route ends and the next start settles the turn");
            self.conn.shutdown().await;
            self.exited = true;
            self.shared.route_ended(&self.session_id, self.generation);
            return (Err(e), stop);
        }
        // The host hears the answer only after the terminal events are out,
        // and a started run's end is published after them too (and before
        // its caller hears), as a claimed run's is.
        self.published().await;
        if let Some((runs, run_id, left)) = settle {
            if let Err(e) = runs.settle_adopted(&run_id, left).await {
                tracing::warn!(run = %run_id, error = %e, "a started turn's run could not be settled");
            }
        }
        if route_lost {
            self.conn.shutdown().await;
            self.exited = true;
            // Leave the map before the host hears the answer, so its next
            // prompt starts a new route instead of queueing on this one.
            self.shared.route_ended(&self.session_id, self.generation);
        }
        let reply = match (result, error) {
            (Some(result), _) => Ok(result),
            (None, Some(error)) => Err(SessionError::PromptFailed { error }),
            (None, None) => Err(SessionError::PromptFailed {
                error: error_json(ErrorCode::PromptFailed, "the turn failed"),
            }),
        };
        (reply, stop)
    }
}

/// A prompt's words as `user_message_chunk` events, one per block, naming
/// their actor and sharing one message id.
pub(crate) fn user_events(content: &[Value], actor: &Actor) -> Vec<NewEvent> {
    let message_id = uuid::Uuid::new_v4().to_string();
    content
        .iter()
        .map(|block| {
            NewEvent::update(
                actor.clone(),
                &json!({"sessionUpdate": "user_message_chunk", "content": block, "messageId": message_id}),
            )
        })
        .collect()
}
