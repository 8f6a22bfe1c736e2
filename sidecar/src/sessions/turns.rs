//! The session service's side of turns as runs: a turn that starts at once
//! (its accept inserts its run `running`), a message's words and its
//! queued run in one transaction on the route, a claimed run's turn
//! (accepted with the run moving to `running`, ended with it), a prompt's
//! stored answer for the run's waiters, and a failed prompt's words for a
//! retry. The work layer's one turn entry (`work/turns.rs`) drives these.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use agentos_protocol::session::Actor;
use agentos_protocol::ErrorCode;
use serde_json::Value;

use super::route::{self, Command, PromptRequest, TurnRun};
use super::store::PromptState;
use super::{input_hash, stored_outcome, PromptOutcome, SessionError, Sessions};
use crate::runs::{NewRun, RunLink, Runs};

/// A claimed run's turn, for [`Sessions::run_turn`].
#[derive(Clone, Debug, PartialEq)]
pub struct RunTurn {
    pub prompt_id: String,
    /// The words, already in the log from `input_at` on.
    pub content: Vec<Value>,
    pub input_at: u64,
    pub retry: bool,
    pub resume: bool,
    pub link: RunLink,
}

/// A turn that starts at once, for [`Sessions::start_turn`]: the run its
/// accept inserts `running`, leased to `runs`' owner. The route works it as
/// the dispatcher works a claimed run: `runs` sees it live from its accept
/// ([`Runs::adopt`]) and hears it start, and its end is settled and
/// published ([`Runs::settle_adopted`]) before the route answers, whether
/// or not anybody still waits for it.
pub struct StartRun {
    pub run: NewRun,
    /// [`super::input_hash`] of the words, as the caller computed it.
    pub input_hash: Vec<u8>,
    pub runs: Runs,
    /// Starts only while fewer agent runs than this are live (None: not
    /// held by the cap).
    pub cap: Option<u32>,
    pub progress: Arc<TurnProgress>,
}

/// What a started turn's route tells its caller besides the answer: that
/// the accept committed, and that the run ended for good with the turn
/// (not parked, queued again or left for a retry).
#[derive(Debug, Default)]
pub struct TurnProgress {
    accepted: AtomicBool,
    /// The terminal commit landed.
    closed: AtomicBool,
    ended: AtomicBool,
}

impl TurnProgress {
    pub(crate) fn set_closed(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// The turn's terminal commit landed (else its route lost or never
    /// reached it, and the run was settled as its delivery left it).
    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn set_accepted(&self) {
        self.accepted.store(true, Ordering::Release);
    }

    pub(crate) fn set_ended(&self) {
        self.ended.store(true, Ordering::Release);
    }

    pub fn accepted(&self) -> bool {
        self.accepted.load(Ordering::Acquire)
    }

    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }
}

impl Sessions {
    /// Starts a turn at once on an idle session: its words, its prompt and
    /// its run (`running`, the run's id as the prompt's) commit in one
    /// accept; answers after the terminal commit. `session_busy` when a
    /// turn is live, turns wait in the queue, or the cap is reached; then
    /// nothing was written.
    pub async fn start_turn(
        &self,
        session_id: &str,
        content: Vec<Value>,
        actor: Actor,
        start: StartRun,
    ) -> Result<PromptOutcome, SessionError> {
        let prompt_id = start.run.run_id.clone();
        self.start(
            session_id,
            prompt_id,
            content,
            actor,
            TurnRun::Start(Arc::new(start)),
        )
        .await
    }

    /// Appends a message's words to the log at once and queues its turn as
    /// `run` (whose input learns where the words start), in one
    /// transaction, whether or not a turn is live: several writers may
    /// message one session at once. Answers that first sequence.
    pub async fn enqueue(
        &self,
        session_id: &str,
        content: Vec<Value>,
        actor: Actor,
        run: NewRun,
    ) -> Result<u64, SessionError> {
        self.check_content(&content)?;
        self.known(session_id).await?;
        let events = route::user_events(&content, &actor);
        let dropped = || {
            Err(SessionError::Adapter {
                code: ErrorCode::AdapterExited,
                message: "the adapter route ended before the message was queued".into(),
            })
        };
        self.send_to_route(session_id, dropped, |reply| Command::Enqueue {
            events: events.clone(),
            run: Box::new(run.clone()),
            reply,
        })
        .await
    }

    /// Runs the turn of a claimed run: `content` is already in the log from
    /// `input_at` on (appended when it queued, or the failed prompt's words
    /// for a retry). The accept moves the run to `running` and the terminal
    /// commit ends it (or queues it again for a retryable failure).
    pub async fn run_turn(
        &self,
        session_id: &str,
        turn: RunTurn,
    ) -> Result<PromptOutcome, SessionError> {
        let RunTurn {
            prompt_id,
            content,
            input_at,
            retry,
            resume,
            link,
        } = turn;
        let actor = Actor::System;
        self.known(session_id).await?;
        let hash = input_hash(&content);
        let dropped = || {
            Err(SessionError::Adapter {
                code: ErrorCode::AdapterExited,
                message: "the adapter route ended during the turn".into(),
            })
        };
        self.send_to_route(session_id, dropped, |reply| Command::Prompt {
            request: Box::new(PromptRequest {
                prompt_id: prompt_id.clone(),
                content: content.clone(),
                input_hash: hash.clone(),
                actor: actor.clone(),
                input_at: Some(input_at),
                retry,
                run: TurnRun::Claimed(link.clone()),
                resume,
            }),
            reply,
        })
        .await
    }

    /// Settles a turn no route runs any more (an earlier route of this
    /// process ended without its terminal commit) as the session's next
    /// start would, so that its prompt reads as settled; nothing while a
    /// route is live.
    pub async fn settle_orphaned(&self, session_id: &str) -> Result<(), SessionError> {
        if self.route(session_id).is_some() {
            return Ok(());
        }
        let gate = super::lock(&self.shared.starting)
            .entry(session_id.to_owned())
            .or_default()
            .clone();
        let _guard = gate.lock().await;
        if self.route(session_id).is_none() {
            self.settle_orphaned_turn(session_id).await?;
        }
        Ok(())
    }

    /// A prompt's stored answer, once it has one (None while it runs or when
    /// it was never accepted).
    pub async fn prompt_result(
        &self,
        session_id: &str,
        prompt_id: &str,
    ) -> Result<Option<Result<PromptOutcome, SessionError>>, SessionError> {
        let Some(prior) = self.shared.store.find_prompt(session_id, prompt_id).await? else {
            return Ok(None);
        };
        Ok(match prior.state {
            PromptState::Accepted => None,
            _ => Some(stored_outcome(session_id, prior)),
        })
    }

    /// Whether a prompt completed, and where its words start in the log
    /// (None when it was never accepted).
    pub async fn prompt_completion(
        &self,
        session_id: &str,
        prompt_id: &str,
    ) -> Result<Option<(bool, Option<u64>)>, SessionError> {
        Ok(self
            .shared
            .store
            .find_prompt(session_id, prompt_id)
            .await?
            .map(|p| (p.state == PromptState::Completed, p.first_input)))
    }

    /// The latest prompt's words when it failed, and where they start in
    /// the log, so it can run again without appending them again. Refused
    /// when the latest prompt did not fail or its input is no longer
    /// retained (`nothing_to_retry`).
    pub async fn retry_input(&self, session_id: &str) -> Result<(Vec<Value>, u64), SessionError> {
        self.row(session_id).await?;
        let store = &self.shared.store;
        let nothing = |why: &str| Err(SessionError::NothingToRetry(why.to_owned()));
        let Some((_, state, first_input)) = store.latest_prompt(session_id).await? else {
            return nothing("the session has no prompt");
        };
        if state != PromptState::Failed {
            return nothing("the latest prompt did not fail");
        }
        let Some(first) = first_input else {
            return nothing("the latest prompt's input is not recorded");
        };
        let limit = self.shared.limits.max_prompt_blocks;
        let page = store
            .history(session_id, None, Some(first.saturating_sub(1)), limit)
            .await?;
        let mut content = Vec::new();
        let mut message_id = None;
        for event in &page.events {
            let payload: Value = serde_json::from_str(&event.payload_json).map_err(|e| {
                SessionError::Storage(agentos_schema::DbError::CorruptRow {
                    table: "agentos_core_events".into(),
                    message: format!("event {}: {e}", event.sequence),
                })
            })?;
            if event.sequence < first
                || payload["sessionUpdate"] != "user_message_chunk"
                || (message_id.is_some() && message_id != Some(payload["messageId"].clone()))
            {
                break;
            }
            message_id = Some(payload["messageId"].clone());
            content.push(payload["content"].clone());
        }
        if content.is_empty() || page.events.first().is_none_or(|e| e.sequence != first) {
            return nothing("the latest prompt's input is no longer retained");
        }
        Ok((content, first))
    }
}
