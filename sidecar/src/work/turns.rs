//! The one turn entry. Every door's words reach a session through
//! [`Turns::submit`]: the idempotency key is the turn's run row; a turn on
//! an idle session starts at once (its words, prompt and run, `running`,
//! commit in one accept); a turn on a busy one is queued behind the others
//! ([`WhenBusy::Queue`]) or refused ([`WhenBusy::Refuse`], the host door's
//! option); [`TurnExecutor`] works a queued turn once the dispatcher claims
//! it. The answer a caller hears is read back from the prompt's stored
//! record, so a duplicate or a caller that came back later hears the same.
//!
//! Each run transition of a turn has one writer: the session route inserts
//! the run (`queued` with its words, or `running` with its accept), moves a
//! claimed one to `running` and writes its end with the terminal commit;
//! the dispatcher claims and releases; [`Runs::settle_adopted`] fails a
//! turn whose terminal commit never landed.

use std::sync::Arc;

use agentos_protocol::session::Actor;
use agentos_protocol::ErrorCode;
use serde_json::{json, Value};

use super::TurnError;
use crate::runs::{
    prompt_id_of, run_error, Executor, Finish, LiveRun, NewRun, Origin, Outcome, Queue, Run,
    RunKind, RunLink, RunStatus, Runs,
};
use crate::sessions::{
    input_hash, PromptOutcome, RunTurn, SessionError, Sessions, StartRun, TurnProgress,
};

/// What a turn's caller hears.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnAnswer {
    /// The turn ended with this answer.
    Done(PromptOutcome),
    /// The turn parked (on its children); the rest streams to subscribers.
    Parked(Run),
    /// The run ended without a turn (canceled while it was queued).
    NotRun(Run),
}

/// Who a turn is for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TurnOwner {
    pub account_id: Option<String>,
    pub agent_id: Option<String>,
}

/// The one rule for words that arrive while the session's turn is live or
/// other turns wait in its queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenBusy {
    /// Append them at once and run their turn after the others (the signed
    /// door, the builtin agent's `continue_session`). A turn that could
    /// start at once but would pass `limits.runs.maxConcurrentAgentRuns`
    /// queues too.
    Queue,
    /// Refuse them with `session_busy`, appending nothing (the host door's
    /// `sessions/prompt`: the host sequences its own prompts). Such a turn
    /// is not held by the agent cap: the host bounds its own concurrency.
    Refuse,
}

/// A turn's words and who sends them.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnRequest {
    pub content: Vec<Value>,
    /// Seen before on this session, it answers the same turn (waiting for
    /// it while it runs); with other words it is a conflict. 1..=256 bytes.
    pub key: Option<String>,
    pub actor: Actor,
    pub owner: TurnOwner,
    pub when_busy: WhenBusy,
}

/// Messages and retries of sessions, as runs.
#[derive(Clone)]
pub struct Turns {
    runs: Runs,
    sessions: Sessions,
}

fn done_or_parked(run: &Run) -> bool {
    run.status.is_terminal() || run.status == RunStatus::Waiting
}

/// A refusal before anything was written that the queue may still carry:
/// the session is busy, or its adapter could not take the turn now (the
/// queued turn retries it as a claimed one would).
fn queueable(e: &SessionError) -> bool {
    matches!(
        e,
        SessionError::Busy(_)
            | SessionError::RestoreFailed(_)
            | SessionError::Adapter { .. }
            | SessionError::RouteGone
    )
}

impl Turns {
    pub fn new(runs: Runs, sessions: Sessions) -> Turns {
        Turns { runs, sessions }
    }

    pub fn runs(&self) -> &Runs {
        &self.runs
    }

    /// The one turn entry: runs `request`'s words as a turn of the session
    /// and waits for it (see the module's paragraph for the rules).
    /// The rare paths (a repeated key, a queued turn, a parked run) are
    /// boxed, so that every waiting caller's future is sized for the
    /// common one.
    pub async fn submit(
        &self,
        session_id: &str,
        request: TurnRequest,
    ) -> Result<TurnAnswer, TurnError> {
        let raw_hash = input_hash(&request.content);
        let hash = hex::encode(&raw_hash);
        if let Some(key) = &request.key {
            if key.is_empty() || key.len() > 256 {
                return Err(SessionError::InvalidIdempotencyKey(
                    "an idempotency key must be 1..=256 bytes".into(),
                )
                .into());
            }
            if let Some(run) = self.runs.store().by_key(session_id, key).await? {
                return Box::pin(self.replay(run, &hash)).await;
            }
        }
        let cap = match request.when_busy {
            WhenBusy::Queue => Some(self.runs.config().caps.agent),
            WhenBusy::Refuse => None,
        };
        let run = turn_run(session_id, &request, &hash);
        let refused = match self
            .start_now(session_id, &request, run, raw_hash, cap)
            .await
        {
            Ok(answer) => return Ok(answer),
            Err(TurnError::Session(e)) if queueable(&e) => e,
            Err(e) => return Err(e),
        };
        // A concurrent duplicate may have won the key.
        if let Some(key) = &request.key {
            if let Some(prior) = self.runs.store().by_key(session_id, key).await? {
                return Box::pin(self.replay(prior, &hash)).await;
            }
        }
        match request.when_busy {
            WhenBusy::Refuse => Err(refused.into()),
            WhenBusy::Queue => {
                // Nothing of the refused start was written: a new run.
                let run = turn_run(session_id, &request, &hash);
                Box::pin(self.enqueue(session_id, request, run, &hash)).await
            }
        }
    }

    /// Starts the turn at once; `session_busy` (nothing written) when it
    /// cannot. The route works the started run as the dispatcher works a
    /// claimed one, and settles it whether or not its caller still waits
    /// (see [`StartRun`]).
    async fn start_now(
        &self,
        session_id: &str,
        request: &TurnRequest,
        run: NewRun,
        input_hash: Vec<u8>,
        cap: Option<u32>,
    ) -> Result<TurnAnswer, TurnError> {
        let run_id = run.run_id.clone();
        let progress = Arc::new(TurnProgress::default());
        let start = StartRun {
            run,
            input_hash,
            runs: self.runs.clone(),
            cap,
            progress: progress.clone(),
        };
        let answer = self
            .sessions
            .start_turn(
                session_id,
                request.content.clone(),
                request.actor.clone(),
                start,
            )
            .await;
        match answer {
            // The run ended for good with this turn: the route's own answer
            // (a later replay reads the stored one).
            Ok(outcome) if progress.ended() => Ok(TurnAnswer::Done(outcome)),
            // The turn failed for good, or nothing was written, or its
            // route lost a commit (the run is settled as uncertain): the
            // route's own answer, as the caller of a claimed turn hears it.
            Err(e) if progress.ended() || !progress.accepted() || !progress.closed() => {
                Err(e.into())
            }
            // Parked on its children, or queued again (a continuation or a
            // retry): the run's end as it comes.
            _ => Box::pin(self.answer(&run_id)).await,
        }
    }

    /// Appends the words at once and queues the turn behind whatever is
    /// live or queued on the session, interactive first.
    async fn enqueue(
        &self,
        session_id: &str,
        request: TurnRequest,
        run: NewRun,
        hash: &str,
    ) -> Result<TurnAnswer, TurnError> {
        let run_id = run.run_id.clone();
        let key = request.key.clone();
        match self
            .sessions
            .enqueue(session_id, request.content, request.actor, run)
            .await
        {
            Ok(_) => {}
            Err(SessionError::Storage(db)) if db.is_constraint() && key.is_some() => {
                // A concurrent duplicate won the insert.
                let key = key.as_deref().unwrap_or_default();
                return match self.runs.store().by_key(session_id, key).await? {
                    Some(run) => self.replay(run, hash).await,
                    None => Err(SessionError::Storage(db).into()),
                };
            }
            Err(e) => return Err(e.into()),
        }
        if let Ok(run) = self.runs.get(&run_id).await {
            self.runs.publish(run);
        }
        self.runs.wake();
        self.answer(&run_id).await
    }

    async fn replay(&self, run: Run, hash: &str) -> Result<TurnAnswer, TurnError> {
        if run.input["inputHash"] != json!(hash) {
            return Err(SessionError::IdempotencyConflict.into());
        }
        self.answer(&run.run_id).await
    }

    /// What a caller that waits for the turn's prompt hears: the stored
    /// outcome of the run's latest prompt, also when the run parked on its
    /// children or its continuation was canceled before it ran.
    pub async fn outcome(&self, answer: TurnAnswer) -> Result<PromptOutcome, TurnError> {
        let run = match answer {
            TurnAnswer::Done(outcome) => return Ok(outcome),
            TurnAnswer::Parked(run) | TurnAnswer::NotRun(run) => run,
        };
        let session_id = run.session_id.clone().unwrap_or_default();
        for attempt in (1..=run.attempt.max(1)).rev() {
            let prompt_id = prompt_id_of(&run.run_id, attempt);
            if let Some(stored) = self.sessions.prompt_result(&session_id, &prompt_id).await? {
                return Ok(stored?);
            }
        }
        Err(SessionError::PromptFailed {
            error: run.error.clone().unwrap_or_else(|| {
                run_error(
                    ErrorCode::PromptFailed.as_str(),
                    "the turn's run ended before its prompt ran",
                )
            }),
        }
        .into())
    }

    /// Runs the session's failed latest turn again, as a new interactive
    /// run, without appending its words again. Refused while a turn is live
    /// or queued (`session_busy`).
    pub async fn retry(&self, session_id: &str, owner: TurnOwner) -> Result<TurnAnswer, TurnError> {
        let open = self.runs.store().session_open_runs(session_id).await?;
        if !open.is_empty() {
            return Err(SessionError::Busy(session_id.to_owned()).into());
        }
        let (content, first) = self.sessions.retry_input(session_id).await?;
        let mut run = NewRun::root(
            RunKind::Agent,
            Origin::User,
            Queue::Interactive,
            json!({"content": content, "inputAt": first, "retry": true}),
        );
        run.session_id = Some(session_id.to_owned());
        run.account_id = owner.account_id;
        run.agent_id = owner.agent_id;
        let run_id = run.run_id.clone();
        self.runs.submit(&run).await?;
        self.answer(&run_id).await
    }

    /// Waits for a turn's run to end (or park) and answers what its prompt
    /// stored.
    pub async fn answer(&self, run_id: &str) -> Result<TurnAnswer, TurnError> {
        let run = self.runs.wait_for(run_id, done_or_parked).await?;
        if run.status == RunStatus::Waiting {
            return Ok(TurnAnswer::Parked(run));
        }
        let session_id = run.session_id.clone().unwrap_or_default();
        let prompt_id = prompt_id_of(&run.run_id, run.attempt);
        let mut stored = self.sessions.prompt_result(&session_id, &prompt_id).await?;
        if stored.is_none() && run.started_at_ms.is_some() {
            // The run ended and its prompt did not: a route that lost its
            // terminal commit left it for the session's next start.
            self.sessions.settle_orphaned(&session_id).await?;
            stored = self.sessions.prompt_result(&session_id, &prompt_id).await?;
        }
        match stored {
            Some(Ok(outcome)) => Ok(TurnAnswer::Done(outcome)),
            Some(Err(e)) => Err(e.into()),
            None => match (&run.status, &run.error) {
                (RunStatus::Failed, Some(error)) => Err(SessionError::PromptFailed {
                    error: error.clone(),
                }
                .into()),
                _ => Ok(TurnAnswer::NotRun(run)),
            },
        }
    }
}

/// The run row of a turn of `request`'s words (a root run of the session,
/// its input naming the words and their hash).
fn turn_run(session_id: &str, request: &TurnRequest, hash: &str) -> NewRun {
    let mut run = NewRun::root(
        RunKind::Agent,
        Origin::User,
        Queue::Interactive,
        json!({"content": request.content, "inputHash": hash}),
    );
    run.session_id = Some(session_id.to_owned());
    run.account_id = request.owner.account_id.clone();
    run.agent_id = request.owner.agent_id.clone();
    run.idempotency_key = request.key.clone();
    run
}

/// Works claimed turns through the session service.
pub struct TurnExecutor {
    sessions: Sessions,
}

impl TurnExecutor {
    pub fn new(sessions: Sessions) -> Arc<TurnExecutor> {
        Arc::new(TurnExecutor { sessions })
    }
}

/// A failure before the turn was accepted: worth another attempt when it
/// is the adapter's start or route, not the request.
fn early_failure(e: &SessionError) -> Outcome {
    let retryable = matches!(
        e,
        SessionError::RestoreFailed(_) | SessionError::Adapter { .. } | SessionError::RouteGone
    );
    let mut error = run_error(e.code().as_str(), &e.to_string());
    if retryable {
        error["retryable"] = json!(true);
    }
    Outcome::FailedEarly { error, retryable }
}

#[async_trait::async_trait]
impl Executor for TurnExecutor {
    async fn execute(&self, runs: &Runs, run: Run, live: Arc<LiveRun>) -> Outcome {
        let Some(session_id) = run.session_id.clone() else {
            return Outcome::Finished(Finish::Failed(run_error(
                "invalid_argument",
                "a turn's run names no session",
            )));
        };
        let content: Vec<Value> = match run.input.get("content").and_then(Value::as_array) {
            Some(blocks) => blocks.clone(),
            None => Vec::new(),
        };
        let Some(input_at) = run.input.get("inputAt").and_then(Value::as_u64) else {
            return Outcome::Finished(Finish::Failed(run_error(
                "invalid_argument",
                "a turn's run does not say where its words are",
            )));
        };
        if live.is_stopped() {
            return Outcome::Busy;
        }
        // A run claimed again after its turn completed on the same words
        // (it parked on its children) resumes; after a completed turn with
        // new words (an obligation's continuation) it is a fresh prompt;
        // after a failed attempt it retries.
        let previous = if run.attempt > 1 {
            self.sessions
                .prompt_completion(&session_id, &prompt_id_of(&run.run_id, run.attempt - 1))
                .await
                .ok()
                .flatten()
        } else {
            None
        };
        let (resume, continued) = match previous {
            Some((true, from)) => (from == Some(input_at), from != Some(input_at)),
            _ => (false, false),
        };
        let retry =
            !resume && !continued && (run.input["retry"] == Value::Bool(true) || run.attempt > 1);
        let answer = self
            .sessions
            .run_turn(
                &session_id,
                RunTurn {
                    prompt_id: prompt_id_of(&run.run_id, run.attempt),
                    content,
                    input_at,
                    retry,
                    resume,
                    link: RunLink::of(&run),
                },
            )
            .await;
        let after = match runs.store().get(&run.run_id).await {
            Ok(Some(after)) => after,
            Ok(None) => return Outcome::Settled,
            Err(e) => {
                tracing::warn!(run = %run.run_id, error = %e, "a turn's run could not be read back");
                return Outcome::Settled;
            }
        };
        match (after.status, answer) {
            // The accept never committed: nothing reached the agent.
            (RunStatus::Claimed, Err(SessionError::Busy(_))) => Outcome::Busy,
            (RunStatus::Claimed, Err(e)) => early_failure(&e),
            (RunStatus::Claimed, Ok(_)) => Outcome::Busy,
            // Accepted, and the terminal commit did not land: the route
            // ended, and the prompt may have reached the agent.
            (RunStatus::Running, _) => Outcome::Finished(Finish::Failed(run_error(
                ErrorCode::PromptDeliveryUncertain.as_str(),
                "the turn ended without its terminal commit; the prompt was not resent",
            ))),
            _ => Outcome::Settled,
        }
    }

    async fn stop(&self, run: &Run) {
        if let Some(session_id) = &run.session_id {
            // A claimed turn never starts: its accept refuses a run asked
            // to stop.
            if run.status == RunStatus::Running {
                let _ = self.sessions.cancel(session_id).await;
            }
        }
    }
}
