//! Runs: every execution (a prompt turn from either door, a delegated child,
//! a script) is a row of `agentos_core_runs`, one tree per root, and that
//! table is the queue.
//!
//! [`Runs`] is the service: it inserts runs, and its dispatcher claims them
//! (one statement: interactive first, then age, a per-kind cap, one live
//! turn per session), hands each to the [`Executor`] of its kind, and
//! applies the outcome (finished, retried with backoff, parked, released).
//! Leases are renewed while this process works a run and recovered when
//! they lapse; at start every claimed or running row is recovered (a claimed
//! row and a script go back to the queue, a turn that may have reached its
//! agent fails `prompt_delivery_uncertain`). A waiting run holds no slot: the
//! clock, its children, or a signal (delivered exactly once) wakes it.
//! Cancellation covers the whole subtree. Every transition is published, as
//! the row read back, to [`Runs::subscribe`]rs. What works a run (a
//! session's turn, a script, a delegation) lives above, in `work`, behind
//! [`Executor`] and [`Resolver`]; the session service writes its turns' run
//! rows through [`RunStore`]'s statements in its own transactions. The store
//! knows only SQL.

mod dispatch;
mod error;
pub mod obligations;
pub mod store;
mod types;

pub use agentos_protocol::runs::MAX_LIST;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use agentos_protocol::ErrorCode;
use serde_json::{json, Value};
use tokio::sync::{broadcast, Notify};

pub use error::RunError;
pub use store::{Canceled, Caps, RunStore};
pub use types::{
    run_error, EventWait, Finish, JournalPage, JournalRow, Named, NewRun, Origin, ParentLink,
    Queue, Run, RunKind, RunScope, RunStatus, RunWait, WaitReason, JOURNAL_PAGE,
};

use agentos_base::clock::unix_ms;

/// The first retry waits this long; each further one twice as long.
const BACKOFF_BASE_MS: i64 = 5_000;
const BACKOFF_MAX_MS: i64 = 300_000;
/// Attempts of a background run (an interactive turn gets one: the user has
/// Retry).
pub const BACKGROUND_MAX_ATTEMPTS: u32 = 3;
/// The longest signal name, and the most JSON text a signal's payload may
/// hold (the payload goes into the run's journal).
pub const MAX_SIGNAL_BYTES: usize = 256;
pub const MAX_SIGNAL_PAYLOAD_BYTES: usize = 64 * 1024;
/// The signal a hypermedia activity delivery carries.
pub const ACTIVITY_SIGNAL: &str = "activity";
pub const DEFAULT_LIST: u64 = 50;

/// How the queue behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunsConfig {
    /// How long a claim holds a run without renewal.
    pub lease_ms: i64,
    pub caps: Caps,
    /// The deepest a delegated child may be, and how many children one run
    /// may start.
    pub max_depth: u32,
    pub max_children: u32,
    /// The fallback wake-up of the dispatcher (due timers, lapsed leases).
    pub tick_ms: u64,
    pub max_journal_entries: u64,
    pub max_journal_bytes: u64,
    /// Rows kept: past it the oldest finished trees are pruned.
    pub max_runs: u64,
    /// The wall budget (`budget.maxWallMs`) every script run starts with.
    pub script_wall_ms: i64,
}

impl Default for RunsConfig {
    fn default() -> RunsConfig {
        RunsConfig {
            lease_ms: 60_000,
            caps: Caps {
                agent: 8,
                script: 32,
            },
            max_depth: 3,
            max_children: 10,
            tick_ms: 1_000,
            max_journal_entries: 5_000,
            max_journal_bytes: 8 * 1024 * 1024,
            max_runs: 100_000,
            script_wall_ms: 3_600_000,
        }
    }
}

impl From<&crate::config::RunLimits> for RunsConfig {
    fn from(l: &crate::config::RunLimits) -> RunsConfig {
        RunsConfig {
            lease_ms: i64::try_from(l.lease_ms).unwrap_or(i64::MAX),
            caps: Caps {
                agent: l.max_concurrent_agent_runs,
                script: l.max_concurrent_script_runs,
            },
            max_depth: l.max_depth,
            max_children: l.max_children_per_run,
            tick_ms: 1_000,
            max_journal_entries: l.max_journal_entries,
            max_journal_bytes: l.max_journal_bytes,
            max_runs: l.max_runs,
            script_wall_ms: i64::try_from(l.max_script_wall_ms).unwrap_or(i64::MAX),
        }
    }
}

/// The delay before retry number `attempt` (1 for the first retry):
/// `min(5 s · 2^(attempt−1), 5 min)` plus up to a second of jitter (never
/// more than the base).
pub fn backoff_ms(attempt: u32) -> i64 {
    let doublings = attempt.saturating_sub(1).min(16);
    let base = (BACKOFF_BASE_MS << doublings).min(BACKOFF_MAX_MS);
    let jitter_span = base.min(1_000);
    base + rand::random::<u64>().rem_euclid(jitter_span as u64) as i64
}

/// A claimed run as the turn engine sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunLink {
    pub run_id: String,
    pub attempt: u32,
    pub max_attempts: u32,
}

impl RunLink {
    pub fn of(run: &Run) -> RunLink {
        RunLink {
            run_id: run.run_id.clone(),
            attempt: run.attempt,
            max_attempts: run.max_attempts,
        }
    }

    /// When a failed attempt runs again: only a failure its agent called
    /// retryable, never an uncertain delivery, while attempts remain.
    pub fn retry_at(&self, error: &Value, now: i64) -> Option<i64> {
        let uncertain = error["code"] == json!(ErrorCode::PromptDeliveryUncertain.as_str());
        let retryable = error["retryable"] == Value::Bool(true) && !uncertain;
        (retryable && self.attempt < self.max_attempts).then(|| now + backoff_ms(self.attempt))
    }
}

/// The id of the prompt an attempt of a turn's run sends: the run's own id
/// first, then one per further attempt.
pub fn prompt_id_of(run_id: &str, attempt: u32) -> String {
    if attempt <= 1 {
        run_id.to_owned()
    } else {
        format!("{run_id}.{attempt}")
    }
}

/// What an executor made of a claimed run.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The executor committed the run's end itself (a turn ends with its
    /// terminal commit).
    Settled,
    Finished(Finish),
    /// A failure before anything reached an agent or ran an effect:
    /// retried when `retryable` and attempts remain.
    FailedEarly {
        error: Value,
        retryable: bool,
    },
    /// The run waits without holding a slot.
    Park {
        wait: RunWait,
        events: Vec<EventWait>,
    },
    /// The run could not start now (its session is busy with a turn of the
    /// other door): it goes back as if never claimed.
    Busy,
}

/// A run this process works: whoever cancels it sets `stop`.
#[derive(Default)]
pub struct LiveRun {
    stop: AtomicBool,
    stopped: Notify,
    /// A turn (settled by the session service at shutdown), not a script
    /// (left to be recovered and replayed at the next start).
    turn: bool,
}

impl LiveRun {
    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Resolves once the run was asked to stop.
    pub async fn stopped(&self) {
        loop {
            let notified = self.stopped.notified();
            if self.is_stopped() {
                return;
            }
            notified.await;
        }
    }

    fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.stopped.notify_waiters();
    }
}

/// How an adopted run was left, as its worker's last transaction read it.
#[derive(Debug)]
pub enum AdoptedEnd {
    /// The run, and whether any run waits in the queue.
    Read(Box<Run>, bool),
    /// The status only, for a run no feed shows ([`NewRun::quiet`]).
    Quiet { status: RunStatus, queued: bool },
}

impl AdoptedEnd {
    pub fn status(&self) -> RunStatus {
        match self {
            AdoptedEnd::Read(run, _) => run.status,
            AdoptedEnd::Quiet { status, .. } => *status,
        }
    }
}

/// What subscribers of the runs hear: a transition (the row read back),
/// a journal entry as committed, or a live progress patch (never stored).
#[derive(Clone, Debug, PartialEq)]
pub enum RunEvent {
    Changed(Arc<Run>),
    /// A run no feed shows (see [`NewRun::quiet`]) changed: whoever waits
    /// for it reads it again.
    Moved {
        root_run_id: String,
        run_id: String,
    },
    Journal {
        root_run_id: String,
        row: JournalRow,
    },
    Partial {
        root_run_id: String,
        run_id: String,
        patch: Value,
    },
}

impl RunEvent {
    /// The tree the event belongs to.
    pub fn root_run_id(&self) -> &str {
        match self {
            RunEvent::Changed(run) => &run.root_run_id,
            RunEvent::Moved { root_run_id, .. }
            | RunEvent::Journal { root_run_id, .. }
            | RunEvent::Partial { root_run_id, .. } => root_run_id,
        }
    }
}

/// Works claimed runs of one kind.
#[async_trait::async_trait]
pub trait Executor: Send + Sync + 'static {
    async fn execute(&self, runs: &Runs, run: Run, live: Arc<LiveRun>) -> Outcome;
    /// Asks a live run to stop; its end is then `canceled`.
    async fn stop(&self, run: &Run);
}

/// Brings an ended child's result to its parent (set by the composition
/// root: it needs the session service).
#[async_trait::async_trait]
pub trait Resolver: Send + Sync + 'static {
    async fn resolve(&self, child: &Run);
}

#[derive(Clone)]
pub struct Executors {
    pub agent: Arc<dyn Executor>,
    pub script: Option<Arc<dyn Executor>>,
}

/// A signal's name and payload within their bounds.
pub fn check_signal(signal: &str, payload: &Value) -> Result<(), RunError> {
    if signal.is_empty() || signal.len() > MAX_SIGNAL_BYTES {
        return Err(RunError::InvalidArgument(format!(
            "a signal's name must be 1..={MAX_SIGNAL_BYTES} bytes"
        )));
    }
    if payload.to_string().len() > MAX_SIGNAL_PAYLOAD_BYTES {
        return Err(RunError::InvalidArgument(format!(
            "a signal's payload exceeds {MAX_SIGNAL_PAYLOAD_BYTES} bytes of JSON"
        )));
    }
    Ok(())
}

/// The runs service.
#[derive(Clone)]
pub struct Runs {
    inner: Arc<Inner>,
}

struct Inner {
    store: RunStore,
    /// This process, as the lease owner of what it claims.
    owner: String,
    config: RunsConfig,
    wake: Notify,
    live: Mutex<HashMap<String, Arc<LiveRun>>>,
    changes: broadcast::Sender<RunEvent>,
    executors: OnceLock<Executors>,
    resolver: OnceLock<Arc<dyn Resolver>>,
    stopping: AtomicBool,
    stopped: Notify,
    /// When the dispatcher last pruned finished trees.
    pruned_at: AtomicI64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Runs {
    pub fn new(db: agentos_schema::SharedDatabase, config: RunsConfig) -> Runs {
        let (changes, _) = broadcast::channel(4096);
        Runs {
            inner: Arc::new(Inner {
                store: RunStore::new(db),
                owner: format!("sidecar-{}", uuid::Uuid::new_v4()),
                config,
                wake: Notify::new(),
                live: Mutex::new(HashMap::new()),
                changes,
                executors: OnceLock::new(),
                resolver: OnceLock::new(),
                stopping: AtomicBool::new(false),
                stopped: Notify::new(),
                pruned_at: AtomicI64::new(0),
            }),
        }
    }

    pub fn store(&self) -> &RunStore {
        &self.inner.store
    }

    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    pub fn config(&self) -> &RunsConfig {
        &self.inner.config
    }

    /// Who works each kind; set once, before [`Runs::start`].
    pub fn set_executors(&self, executors: Executors) -> bool {
        self.inner.executors.set(executors).is_ok()
    }

    /// Who brings ended children's results to their parents; set once.
    pub fn set_resolver(&self, resolver: Arc<dyn Resolver>) -> bool {
        self.inner.resolver.set(resolver).is_ok()
    }

    /// Brings every ended child's result that has not reached its parent
    /// there (at start, and on every pass: a crash between a child's end
    /// and its resolution loses nothing).
    pub async fn resolve_children(&self) -> Result<(), RunError> {
        let Some(resolver) = self.inner.resolver.get() else {
            return Ok(());
        };
        for child in self.inner.store.unresolved_children().await? {
            resolver.resolve(&child).await;
        }
        Ok(())
    }

    /// Every transition, as the row read back after it committed, every
    /// journal entry once committed, and live progress.
    pub fn subscribe(&self) -> broadcast::Receiver<RunEvent> {
        self.inner.changes.subscribe()
    }

    /// Has the dispatcher look at the queue now.
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    pub(crate) fn publish(&self, run: Run) {
        let _ = self.inner.changes.send(RunEvent::Changed(Arc::new(run)));
    }

    /// Publishes that a root run no feed shows changed.
    fn publish_moved(&self, run_id: &str) {
        let _ = self.inner.changes.send(RunEvent::Moved {
            root_run_id: run_id.to_owned(),
            run_id: run_id.to_owned(),
        });
    }

    pub(crate) fn publish_journal(&self, run: &Run, seq: u64, entry: Value) {
        let _ = self.inner.changes.send(RunEvent::Journal {
            root_run_id: run.root_run_id.clone(),
            row: JournalRow {
                run_id: run.run_id.clone(),
                seq,
                entry,
                created_at_ms: unix_ms(),
            },
        });
    }

    pub(crate) fn publish_partial(&self, run: &Run, patch: Value) {
        let _ = self.inner.changes.send(RunEvent::Partial {
            root_run_id: run.root_run_id.clone(),
            run_id: run.run_id.clone(),
            patch,
        });
    }

    /// How many runs this process works now.
    pub fn working(&self) -> usize {
        lock(&self.inner.live).len()
    }

    /// Registers a turn this process works without a claim (one that starts
    /// at once, its run inserted `running` by its accept), so that cancel
    /// and drain see it as they see a claimed one. Its worker calls
    /// [`Runs::settle_adopted`] when it is done with it.
    pub fn adopt(&self, run_id: &str) {
        let live = Arc::new(LiveRun {
            turn: true,
            ..LiveRun::default()
        });
        lock(&self.inner.live).insert(run_id.to_owned(), live);
    }

    /// Ends this process's work on an adopted run, as it was left (`left`,
    /// as its worker's last transaction read it, or read here; None when
    /// its accept never committed). A run still
    /// `running` lost its terminal commit, and its prompt may have reached
    /// the agent: it fails as `prompt_delivery_uncertain`, never resent.
    /// The transition is published and the dispatcher woken, as after a
    /// claimed run.
    pub async fn settle_adopted(
        &self,
        run_id: &str,
        left: Option<AdoptedEnd>,
    ) -> Result<(), RunError> {
        let settled = match left {
            // The common end, a root turn that ended with nothing queued,
            // gives the dispatcher nothing to do: published without waking
            // it, and without holding the rare path's state in every
            // session's future.
            Some(AdoptedEnd::Read(run, false))
                if run.status.is_terminal() && run.parent_run_id.is_none() =>
            {
                self.publish(*run);
                Ok(())
            }
            Some(AdoptedEnd::Quiet {
                status,
                queued: false,
            }) if status.is_terminal() => {
                self.publish_moved(run_id);
                Ok(())
            }
            Some(AdoptedEnd::Read(run, queued)) => {
                Box::pin(self.settle_adopted_row(run_id, Some((*run, queued)))).await
            }
            Some(AdoptedEnd::Quiet { .. }) | None => {
                Box::pin(self.settle_adopted_row(run_id, None)).await
            }
        };
        // Last, so that a drain sees the outcome stored and published.
        lock(&self.inner.live).remove(run_id);
        settled
    }

    async fn settle_adopted_row(
        &self,
        run_id: &str,
        left: Option<(Run, bool)>,
    ) -> Result<(), RunError> {
        let store = &self.inner.store;
        let left = match left {
            Some(left) => Some(left),
            None => store.get_with_queue(run_id).await?,
        };
        let Some((mut run, mut queued)) = left else {
            return Ok(());
        };
        if run.status == RunStatus::Running {
            let error = run_error(
                ErrorCode::PromptDeliveryUncertain.as_str(),
                "the turn ended without its terminal commit; the prompt was not resent",
            );
            if let Some(after) = store
                .finish(run_id, &Finish::Failed(error), None, vec![], unix_ms())
                .await?
            {
                run = after;
            }
            queued = true;
        }
        if run.status.is_terminal() && run.parent_run_id.is_none() && !queued {
            self.publish(run);
        } else {
            self.after_transition(run).await;
        }
        Ok(())
    }

    /// Recovers every live row at start: this process holds the store, so
    /// whatever an earlier one claimed nobody works any more. Answers how
    /// many rows were recovered.
    pub async fn bootstrap(&self) -> Result<u64, RunError> {
        let mut recovered = 0;
        for run in self.inner.store.lapsed(i64::MAX).await? {
            if self.recover(&run).await? {
                recovered += 1;
            }
        }
        Ok(recovered)
    }

    async fn recover(&self, run: &Run) -> Result<bool, RunError> {
        let error = run_error(
            ErrorCode::PromptDeliveryUncertain.as_str(),
            "the sidecar stopped during the turn; the prompt was not resent",
        );
        let done = self.inner.store.recover(run, &error, unix_ms()).await?;
        if done {
            tracing::info!(run = %run.run_id, status = run.status.as_str(), "recovered a run nobody works");
            if let Some(after) = self.inner.store.get(&run.run_id).await? {
                self.after_transition(after).await;
            }
        }
        Ok(done)
    }

    /// Inserts a queued run and wakes the dispatcher. A script without a
    /// budget gets the configured wall budget.
    pub async fn submit(&self, run: &NewRun) -> Result<Run, RunError> {
        let budgeted;
        let run = if run.kind == RunKind::Script && run.budget.is_none() {
            let mut with = run.clone();
            with.budget = Some(json!({"maxWallMs": self.inner.config.script_wall_ms}));
            budgeted = with;
            &budgeted
        } else {
            run
        };
        self.inner.store.insert(run, unix_ms()).await?;
        let row = self
            .inner
            .store
            .get(&run.run_id)
            .await?
            .ok_or_else(|| RunError::NotFound(run.run_id.clone()))?;
        self.publish(row.clone());
        self.wake();
        Ok(row)
    }

    pub async fn get(&self, run_id: &str) -> Result<Run, RunError> {
        self.inner
            .store
            .get(run_id)
            .await?
            .ok_or_else(|| RunError::NotFound(run_id.to_owned()))
    }

    pub async fn list(
        &self,
        scope: &RunScope,
        status: Option<RunStatus>,
        limit: Option<u64>,
    ) -> Result<Vec<Run>, RunError> {
        let limit = match (scope, limit) {
            // A tree is answered whole.
            (RunScope::Root(_), _) => u64::from(u32::MAX),
            (_, Some(0)) => {
                return Err(RunError::InvalidArgument("limit must be at least 1".into()))
            }
            (_, Some(n)) => n.min(MAX_LIST),
            (_, None) => DEFAULT_LIST,
        };
        Ok(self.inner.store.list(scope, status, limit).await?)
    }

    pub async fn journal(
        &self,
        run_id: &str,
        after: u64,
        limit: u64,
    ) -> Result<Vec<JournalRow>, RunError> {
        Ok(self.inner.store.journal(run_id, after, limit).await?)
    }

    /// A page of `run`'s journal. The door read the run first (to
    /// authorize it, or only to know it exists), so the journal of a run
    /// that does not exist is not found, never empty.
    pub async fn journal_page(
        &self,
        run: &Run,
        page: JournalPage,
    ) -> Result<Vec<JournalRow>, RunError> {
        self.journal(&run.run_id, page.after, page.limit).await
    }

    /// Waits until `run_id` satisfies `done` (checked on every transition
    /// and once at the start), and answers it.
    pub async fn wait_for(
        &self,
        run_id: &str,
        done: impl Fn(&Run) -> bool,
    ) -> Result<Run, RunError> {
        let mut changes = self.subscribe();
        let mut run = self.get(run_id).await?;
        loop {
            if done(&run) {
                return Ok(run);
            }
            match changes.recv().await {
                Ok(RunEvent::Changed(changed)) if changed.run_id == run_id => {
                    run = Arc::unwrap_or_clone(changed)
                }
                Ok(RunEvent::Moved { run_id: moved, .. }) if moved == run_id => {
                    run = self.get(run_id).await?
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => run = self.get(run_id).await?,
                Err(broadcast::error::RecvError::Closed) => return self.get(run_id).await,
            }
        }
    }

    /// Cancels a run and its whole subtree; answers whether anything was
    /// newly canceled (false the second time).
    pub async fn cancel(&self, run_id: &str) -> Result<bool, RunError> {
        self.get(run_id).await?;
        let canceled = self.inner.store.cancel_tree(run_id, unix_ms()).await?;
        for run in canceled.settled {
            self.after_transition(run).await;
        }
        for run in &canceled.live {
            self.stop_live(run).await;
        }
        Ok(canceled.changed)
    }

    /// Asks whoever works a live run to stop it.
    async fn stop_live(&self, run: &Run) {
        let live = lock(&self.inner.live).get(&run.run_id).cloned();
        if let Some(live) = live {
            live.request_stop();
        }
        if let Some(executors) = self.inner.executors.get() {
            let executor = match run.kind {
                RunKind::Agent => Some(&executors.agent),
                RunKind::Script => executors.script.as_ref(),
            };
            if let Some(executor) = executor {
                executor.stop(run).await;
            }
        }
    }

    /// Cancels every unfinished run of a session (and their subtrees).
    pub async fn cancel_session(&self, session_id: &str) -> Result<bool, RunError> {
        let mut any = false;
        for run_id in self.inner.store.session_open_runs(session_id).await? {
            any |= self.cancel(&run_id).await?;
        }
        Ok(any)
    }

    /// Cancels every unfinished run of an agent (and their subtrees).
    pub async fn cancel_agent(&self, agent_id: &str) -> Result<bool, RunError> {
        let mut any = false;
        for run_id in self.inner.store.agent_open_runs(agent_id).await? {
            any |= self.cancel(&run_id).await?;
        }
        Ok(any)
    }

    /// Delivers `signal` to a run waiting on one; answers whether it was
    /// delivered (false for a run not waiting on that signal).
    pub async fn signal(
        &self,
        run_id: &str,
        signal: &str,
        payload: &Value,
    ) -> Result<bool, RunError> {
        check_signal(signal, payload)?;
        self.get(run_id).await?;
        let delivered = self
            .inner
            .store
            .signal(run_id, signal, payload, unix_ms())
            .await?;
        if delivered {
            self.delivered(run_id).await?;
        }
        Ok(delivered)
    }

    /// Hypermedia activity: each run of `account_id` waiting for activity
    /// whose criteria `matches` takes the event (signal `activity`, source
    /// `activity`), as the reference delivers it; answers how many did.
    pub async fn deliver_activity(
        &self,
        account_id: &str,
        event: &Value,
        matches: impl Fn(&Value) -> bool,
    ) -> Result<u64, RunError> {
        check_signal(ACTIVITY_SIGNAL, event)?;
        let mut delivered = 0;
        for (run_id, criteria) in self.inner.store.activity_waits(account_id).await? {
            if !matches(&criteria) {
                continue;
            }
            let took = self
                .inner
                .store
                .signal_from(&run_id, ACTIVITY_SIGNAL, event, Some("activity"), unix_ms())
                .await?;
            if took {
                self.delivered(&run_id).await?;
                delivered += 1;
            }
        }
        Ok(delivered)
    }

    /// After a delivery committed (here, or in a caller's own transaction
    /// built with [`RunStore::signal_statements`]): the journal entry it
    /// wrote goes to the run's subscribers and the requeued run to the
    /// dispatcher.
    pub async fn delivered(&self, run_id: &str) -> Result<(), RunError> {
        let run = self.get(run_id).await?;
        let after = run.journal_seq.saturating_sub(1);
        for row in self.inner.store.journal(run_id, after, 1).await? {
            let _ = self.inner.changes.send(RunEvent::Journal {
                root_run_id: run.root_run_id.clone(),
                row,
            });
        }
        self.after_transition(run).await;
        Ok(())
    }

    /// Publishes a transition and lets the dispatcher see what it freed; an
    /// ended child's result goes to its parent (a detached one's usage
    /// only).
    async fn after_transition(&self, run: Run) {
        let ended_child = run.status.is_terminal() && run.parent_awaits && !run.resolved;
        let ended_detached = run.status.is_terminal()
            && run.parent_run_id.is_some()
            && !run.parent_awaits
            && !run.resolved;
        if ended_detached {
            // Nobody waits for its result, but its usage counts towards the
            // run that started it, once.
            if let Err(e) = self.inner.store.resolve_child(&run, unix_ms()).await {
                tracing::warn!(run = %run.run_id, error = %e, "a detached child's usage did not roll up");
            }
        }
        self.publish(run.clone());
        if ended_child {
            if let Some(resolver) = self.inner.resolver.get() {
                resolver.resolve(&run).await;
            }
        }
        self.wake();
    }

    /// Stops claiming; runs being worked are left to their owners' shutdown
    /// (a turn is settled by the session service, a script is recovered at
    /// the next start).
    pub fn shutdown(&self) {
        self.inner.stopping.store(true, Ordering::Release);
        self.inner.stopped.notify_waiters();
        self.wake();
    }

    /// Waits (at most `deadline`) until this process works no turn: each
    /// has stored its outcome and told its waiters. Scripts are not waited
    /// for: the next start replays them from their journals. False at the
    /// deadline.
    pub async fn drain(&self, deadline: std::time::Duration) -> bool {
        let until = tokio::time::Instant::now() + deadline;
        let turns = || lock(&self.inner.live).values().filter(|l| l.turn).count();
        while turns() > 0 {
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        true
    }

    /// Whether [`Runs::shutdown`] was called: nothing new is claimed.
    pub fn is_stopping(&self) -> bool {
        self.inner.stopping.load(Ordering::Acquire)
    }
}
