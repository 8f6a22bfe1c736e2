//! Prompt turns as runs. [`Turns`] is what a front door calls to message a
//! session (the words are appended at once and the turn queued as a run in
//! one transaction; the caller waits for the turn) or to retry its failed
//! turn; [`TurnExecutor`] works a claimed turn through the session service,
//! whose accept moves the run to `running` and whose terminal commit ends it.
//! The answer a caller hears is read back from the prompt's stored record,
//! so a duplicate or a caller that came back later hears the same.

use std::sync::Arc;

use agentos_protocol::session::Actor;
use agentos_protocol::ErrorCode;
use serde_json::{json, Value};

use super::TurnError;
use crate::runs::{
    prompt_id_of, run_error, Executor, Finish, LiveRun, NewRun, Origin, Outcome, Queue, Run,
    RunKind, RunLink, RunStatus, Runs,
};
use crate::sessions::{input_hash, PromptOutcome, RunTurn, SessionError, Sessions};

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

/// Messages and retries of sessions, as runs.
#[derive(Clone)]
pub struct Turns {
    runs: Runs,
    sessions: Sessions,
}

fn done_or_parked(run: &Run) -> bool {
    run.status.is_terminal() || run.status == RunStatus::Waiting
}

impl Turns {
    pub fn new(runs: Runs, sessions: Sessions) -> Turns {
        Turns { runs, sessions }
    }

    pub fn runs(&self) -> &Runs {
        &self.runs
    }

    /// Appends `content` to the session at once and runs its turn behind
    /// whatever is live or queued there, interactive first; waits for it.
    /// A message `key` seen before answers the same turn (waiting for it if
    /// it still runs); the same key with other words is a conflict.
    pub async fn message(
        &self,
        session_id: &str,
        content: Vec<Value>,
        key: Option<String>,
        actor: Actor,
        owner: TurnOwner,
    ) -> Result<TurnAnswer, TurnError> {
        let hash = hex::encode(input_hash(&content));
        if let Some(key) = &key {
            if key.is_empty() || key.len() > 256 {
                return Err(SessionError::InvalidIdempotencyKey(
                    "an idempotency key must be 1..=256 bytes".into(),
                )
                .into());
            }
            if let Some(run) = self.runs.store().by_key(session_id, key).await? {
                return self.replay(run, &hash).await;
            }
        }
        let mut run = NewRun::root(
            RunKind::Agent,
            Origin::User,
            Queue::Interactive,
            json!({"content": content, "inputHash": hash}),
        );
        run.session_id = Some(session_id.to_owned());
        run.account_id = owner.account_id;
        run.agent_id = owner.agent_id;
        run.idempotency_key = key.clone();
        let run_id = run.run_id.clone();
        match self.sessions.enqueue(session_id, content, actor, run).await {
            Ok(_) => {}
            Err(SessionError::Storage(db)) if db.is_constraint() && key.is_some() => {
                // A concurrent duplicate won the insert.
                let key = key.as_deref().unwrap_or_default();
                return match self.runs.store().by_key(session_id, key).await? {
                    Some(run) => self.replay(run, &hash).await,
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
        match self.sessions.prompt_result(&session_id, &prompt_id).await? {
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
