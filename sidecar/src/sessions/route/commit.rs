//! The commit pipeline. The route hands transactions to a committing task
//! in order and moves its history counters on at once; the committing task
//! runs them one after the other and hands the rows read back to a
//! publishing task, which publishes them in commit order. A live update or
//! a barrier goes the same way while anything handed off is unfinished;
//! once everything is (the pipeline's count says so), the route publishes
//! the update, or passes the barrier, itself, two task hops fewer for each
//! streamed delta. A failed commit
//! puts the counters back and fails the turn; one whose outcome is unknown
//! (`sqlite_commit_outcome_unknown`) also ends the route (see
//! `Route::lost_commit`). Agent updates are
//! group-committed: what arrives while one transaction runs goes into the
//! next.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use agentos_protocol::ErrorCode;
use agentos_schema::{DbError, Rows, Statement};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::state::Turn;
use super::Route;
use crate::sessions::store::{clock_ms, HistoryCounters, NewEvent, SessionStore};
use crate::sessions::SessionError;

/// Updates committed in one transaction at most.
pub(super) const MAX_BATCH_EVENTS: usize = 4096;
/// Payload bytes committed in one transaction at most.
pub(super) const MAX_BATCH_BYTES: u64 = 16 << 20;
/// Agent update batches handed to the committing task and not yet
/// confirmed, at most: one committing, one full batch waiting behind it.
const MAX_IN_FLIGHT: usize = 2;

impl Route {
    /// Appends events (plus `extra` statements) in one transaction, reads the
    /// rows back and publishes them; returns once that is committed.
    pub(super) async fn commit(
        &mut self,
        events: Vec<NewEvent>,
        extra: Vec<Statement>,
    ) -> Result<(), SessionError> {
        self.commit_reading(events, extra, None).await.map(drop)
    }

    /// [`Route::commit`], answering the rows of `read`, a statement run
    /// last in the same transaction (what the commit left, without a
    /// read of its own).
    pub(super) async fn commit_reading(
        &mut self,
        events: Vec<NewEvent>,
        extra: Vec<Statement>,
        read: Option<Statement>,
    ) -> Result<Option<Rows>, SessionError> {
        self.settle().await?;
        self.submit_reading(events, extra, read).await?;
        let mut kept = None;
        while !self.in_flight.is_empty() {
            kept = self.confirm_oldest().await?;
        }
        Ok(kept)
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
        self.submit_reading(events, extra, None).await
    }

    async fn submit_reading(
        &mut self,
        events: Vec<NewEvent>,
        extra: Vec<Statement>,
        read: Option<Statement>,
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
            ErrorCode::AcpHistoryEventsLimit,
            "limits.acp.maxSessionHistoryEvents",
            incoming,
            max_events,
        )?;
        SessionError::at_most(
            ErrorCode::AcpHistoryBytesLimit,
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
        let kept = read.map(|read| {
            statements.push(read);
            statements.len() - 1
        });
        statements.push(SessionStore::read_back_statement(
            &self.session_id,
            self.counters.latest_sequence,
        ));
        let (reply, confirmed) = oneshot::channel();
        self.pipeline
            .hand(
                &self.committer,
                Work::Commit {
                    statements,
                    kept,
                    reply,
                },
            )
            .map_err(|_| SessionError::Storage(DbError::Closed))?;
        self.in_flight.push_back(InFlight {
            confirmed,
            before: self.counters,
            after: next,
        });
        self.counters = next;
        Ok(())
    }

    /// Waits for the oldest handed-off commit; answers the rows it kept.
    async fn confirm_oldest(&mut self) -> Result<Option<Rows>, SessionError> {
        let Some(mut first) = self.in_flight.pop_front() else {
            return Ok(None);
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
        answer: Result<Committed, oneshot::error::RecvError>,
    ) -> Result<Option<Rows>, SessionError> {
        let result = match answer {
            Ok(result) => result.map_err(SessionError::from),
            Err(_) => Err(SessionError::Storage(DbError::Closed)),
        };
        match result {
            Ok(kept) => {
                self.shared
                    .warn_history(&self.session_id, &first.before, &first.after);
                Ok(kept)
            }
            Err(e) => {
                while let Some(later) = self.in_flight.pop_front() {
                    let _ = later.confirmed.await;
                }
                self.counters = first.before;
                if matches!(e, SessionError::Storage(DbError::CommitOutcomeUnknown(_))) {
                    // It may have landed: these counters are a guess now.
                    self.lost_commit.get_or_insert_with(|| e.clone());
                }
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

    /// Publishes a live update, in order with the durable events before it:
    /// at once when everything handed off is finished (handed to the
    /// listeners, if any), else behind it.
    pub(super) fn publish_live(&mut self, update: Value) {
        let after = self.counters.latest_sequence;
        if self.pipeline.finished() {
            self.shared
                .hub
                .publish_ephemeral_with(&self.session_id, after, || update);
        } else {
            let _ = self
                .pipeline
                .hand(&self.committer, Work::Ephemeral(after, update));
        }
    }

    /// Waits until everything committed so far has been published.
    pub(super) async fn published(&mut self) {
        if self.pipeline.finished() {
            return;
        }
        let (done, wait) = oneshot::channel();
        if self
            .pipeline
            .hand(&self.committer, Work::Barrier(done))
            .is_ok()
        {
            let _ = wait.await;
        }
    }

    /// Commits the queued updates and waits for every commit in flight.
    pub(super) async fn flush(&mut self, turn: &mut Turn) -> Result<(), ()> {
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
    pub(super) async fn flush_when_free(&mut self, turn: &mut Turn) -> Result<(), ()> {
        let full = turn.pending.len() >= MAX_BATCH_EVENTS || turn.pending_bytes >= MAX_BATCH_BYTES;
        if !self.in_flight.is_empty() && !full {
            return Ok(());
        }
        let mut result = Ok(());
        while result.is_ok() && self.in_flight.len() >= MAX_IN_FLIGHT {
            result = self.confirm_oldest().await.map(drop);
        }
        if result.is_ok() {
            result = self.submit_pending(turn).await;
        }
        self.commit_failed(turn, result).await
    }

    /// The oldest handed-off commit was answered: take the answer, then give
    /// the free database what has accumulated.
    pub(super) async fn on_confirmed(
        &mut self,
        turn: &mut Turn,
        answer: Result<Committed, oneshot::error::RecvError>,
    ) -> Result<(), ()> {
        let Some(first) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let result = self.confirmed(first, answer).await.map(drop);
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
                turn.failure = Some((ErrorCode::HistoryCommitFailed, e.to_string()));
                self.abort_adapter_turn().await;
                Err(())
            }
        }
    }
}

/// A commit's answer: the rows of the statement it was asked to keep.
pub(super) type Committed = Result<Option<Rows>, DbError>;

/// A commit handed to the committing task and not yet confirmed.
pub(super) struct InFlight {
    confirmed: oneshot::Receiver<Committed>,
    before: HistoryCounters,
    after: HistoryCounters,
}

/// The answer for the oldest handed-off commit, left in place: the caller
/// removes the entry once it has the answer.
pub(super) async fn oldest_answer(
    in_flight: &mut VecDeque<InFlight>,
) -> Result<Committed, oneshot::error::RecvError> {
    match in_flight.front_mut() {
        Some(first) => (&mut first.confirmed).await,
        None => std::future::pending().await,
    }
}

/// What the route hands its committing task, in order.
pub(super) enum Work {
    /// A transaction ending in a read-back; the rows read back are
    /// published, then the route is told (with the rows of statement
    /// `kept`, when asked).
    Commit {
        statements: Vec<Statement>,
        kept: Option<usize>,
        reply: oneshot::Sender<Committed>,
    },
    Ephemeral(u64, Value),
    Barrier(oneshot::Sender<()>),
}

/// Runs a route's transactions one after the other and hands each one's
/// rows, read back after its commit, to the publishing task. Live updates
/// and barriers pass through in order. Ends when the route does.
pub(super) async fn commit_loop(
    store: SessionStore,
    mut work: mpsc::UnboundedReceiver<Work>,
    publisher: mpsc::UnboundedSender<Publish>,
    finished: Arc<AtomicU64>,
) {
    while let Some(item) = work.recv().await {
        match item {
            Work::Commit {
                statements,
                kept,
                reply,
            } => {
                // The rows read back go to the publishing task undecoded, so
                // the next transaction is handed over at once.
                let result = match store.db().transaction(statements).await {
                    Ok(mut results) => {
                        match results.pop().filter(|rows| !rows.is_empty()) {
                            Some(rows) => {
                                let _ = publisher.send(Publish::Durable(rows));
                            }
                            None => {
                                finished.fetch_add(1, Ordering::Release);
                            }
                        }
                        Ok(kept.and_then(|i| results.into_iter().nth(i)))
                    }
                    Err(e) => {
                        finished.fetch_add(1, Ordering::Release);
                        Err(e)
                    }
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
pub(super) enum Publish {
    /// Rows read back after a commit, in the event columns' order.
    Durable(Rows),
    Ephemeral(u64, Value),
    Barrier(oneshot::Sender<()>),
}

/// Publishes a route's committed rows and live updates in order. Ends when
/// the route does.
pub(super) async fn publish_loop(
    hub: Arc<crate::sessions::Hub>,
    session_id: String,
    mut publications: mpsc::UnboundedReceiver<Publish>,
    finished: Arc<AtomicU64>,
) {
    while let Some(publication) = publications.recv().await {
        match publication {
            Publish::Durable(rows) => match SessionStore::decode_events(rows) {
                Ok(events) => hub.publish(&session_id, events),
                Err(e) => {
                    // Committed but unreadable: no subscriber may go on
                    // as if it had seen these rows.
                    tracing::error!(session = %session_id, error = %e, "committed rows read back corrupt; ending the session's subscriptions");
                    hub.end_subscriptions(&session_id, "storage_error");
                }
            },
            Publish::Ephemeral(after, update) => hub.publish_ephemeral(&session_id, after, update),
            Publish::Barrier(done) => {
                let _ = done.send(());
            }
        }
        // After the hub has it: a route that reads this count publishes
        // after it.
        finished.fetch_add(1, Ordering::Release);
    }
}

/// How far the committing and publishing tasks are behind the route: work
/// items handed to them, and those they have finished (a commit once its
/// rows are published, or it failed or had none; a live update or barrier
/// once passed on to the hub).
pub(super) struct Pipeline {
    handed: u64,
    finished: Arc<AtomicU64>,
}

impl Pipeline {
    /// A pipeline and the count its two tasks move on.
    pub(super) fn new() -> (Pipeline, Arc<AtomicU64>) {
        let finished = Arc::new(AtomicU64::new(0));
        let pipeline = Pipeline {
            handed: 0,
            finished: finished.clone(),
        };
        (pipeline, finished)
    }

    /// Hands `work` to the committing task.
    fn hand(
        &mut self,
        committer: &mpsc::UnboundedSender<Work>,
        work: Work,
    ) -> Result<(), mpsc::error::SendError<Work>> {
        committer.send(work)?;
        self.handed += 1;
        Ok(())
    }

    /// Whether everything handed off is finished, published where it had
    /// anything to publish.
    fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire) == self.handed
    }
}
