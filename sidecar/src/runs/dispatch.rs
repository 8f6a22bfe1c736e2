//! The dispatcher: one task that wakes due timers, recovers runs whose
//! foreign lease lapsed, claims queued runs for as long as a kind has a
//! free slot (starting a task per claimed run), and prunes the oldest
//! finished trees past the table's cap; and the lease keeper, which
//! renews every lease this process holds at a third of the lease length.
//! It sleeps until it is woken (an insert, a finish, a signal), the next
//! clock among waiting and delayed runs, or its fallback tick.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use super::{lock, Finish, LiveRun, Outcome, Run, RunError, RunKind, Runs};
use agentos_base::clock::unix_ms;

/// How often the dispatcher prunes finished trees past the table's cap, and
/// how many trees one pass removes at most.
const PRUNE_EVERY_MS: i64 = 10_000;
const PRUNE_BATCH: u64 = 500;

impl Runs {
    /// Starts the dispatcher and the lease keeper; both end at
    /// [`Runs::shutdown`].
    pub fn start(&self) {
        let dispatcher = self.clone();
        tokio::spawn(async move { dispatcher.dispatch().await });
        let keeper = self.clone();
        tokio::spawn(async move { keeper.keep_leases().await });
    }

    async fn dispatch(self) {
        let tick = Duration::from_millis(self.inner.config.tick_ms.max(1));
        loop {
            if self.is_stopping() {
                return;
            }
            let now = unix_ms();
            let mut sleep = tick;
            match self.tick(now).await {
                Ok(Some(next)) => {
                    let wait = u64::try_from(next.saturating_sub(now)).unwrap_or(0);
                    sleep = sleep.min(Duration::from_millis(wait.max(1)));
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "the run dispatcher's pass failed"),
            }
            let stopped = self.inner.stopped.notified();
            if self.is_stopping() {
                return;
            }
            tokio::select! {
                _ = self.inner.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
                _ = stopped => return,
            }
        }
    }

    /// One pass; answers the next clock worth waking for.
    async fn tick(&self, now: i64) -> Result<Option<i64>, RunError> {
        let store = &self.inner.store;
        if store.wake_due(now).await? > 0 {
            tracing::debug!("woke runs whose clock came");
        }
        self.resolve_children().await?;
        for run in store.lapsed(now).await? {
            // Our own leases are renewed while we work the run: a lapse of
            // one means the renewal is late, not that the work is gone.
            if run.lease_owner.as_deref() != Some(self.owner()) {
                self.recover(&run).await?;
            }
        }
        let config = self.inner.config;
        while !self.is_stopping() {
            let Some(run) = store
                .claim(self.owner(), unix_ms(), config.lease_ms, config.caps)
                .await?
            else {
                break;
            };
            self.launch(run);
        }
        self.prune(now).await;
        let timer = store.next_timer().await?;
        let delayed = store.next_queued(now).await?;
        Ok(match (timer, delayed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// Keeps the table within `limits.runs.maxRuns`, at most once per
    /// [`PRUNE_EVERY_MS`]; a failure waits for the next pass.
    async fn prune(&self, now: i64) {
        let last = self.inner.pruned_at.load(Ordering::Acquire);
        if now - last < PRUNE_EVERY_MS {
            return;
        }
        self.inner.pruned_at.store(now, Ordering::Release);
        match self
            .inner
            .store
            .prune(self.inner.config.max_runs, PRUNE_BATCH)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(rows = n, "pruned the oldest finished run trees"),
            Err(e) => tracing::warn!(error = %e, "pruning finished run trees failed"),
        }
    }

    fn launch(&self, run: Run) {
        let live = Arc::new(LiveRun {
            turn: run.kind == RunKind::Agent,
            ..LiveRun::default()
        });
        lock(&self.inner.live).insert(run.run_id.clone(), live.clone());
        let runs = self.clone();
        tokio::spawn(async move {
            let run_id = run.run_id.clone();
            runs.publish(run.clone());
            let outcome = std::panic::AssertUnwindSafe(runs.work(run.clone(), live))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    tracing::error!(run = %run_id, "a run's executor panicked");
                    Outcome::Finished(Finish::Failed(super::run_error(
                        "executor_panic",
                        "the run's executor failed unexpectedly",
                    )))
                });
            if let Err(e) = runs.apply(&run, outcome).await {
                tracing::error!(run = %run_id, error = %e, "a run's outcome could not be stored; its lease will lapse");
            }
            match runs.inner.store.get(&run_id).await {
                Ok(Some(after)) => runs.after_transition(after).await,
                Ok(None) => runs.wake(),
                Err(e) => {
                    tracing::warn!(run = %run_id, error = %e, "a run could not be read back");
                    runs.wake();
                }
            }
            // Last, so that a drain sees the outcome stored and published.
            lock(&runs.inner.live).remove(&run_id);
        });
    }

    async fn work(&self, run: Run, live: Arc<LiveRun>) -> Outcome {
        let executor = self.inner.executors.get().and_then(|e| match run.kind {
            RunKind::Agent => Some(e.agent.clone()),
            RunKind::Script => e.script.clone(),
        });
        match executor {
            Some(executor) => executor.execute(self, run, live).await,
            None => Outcome::Finished(Finish::Failed(super::run_error(
                "executor_unavailable",
                &format!("this sidecar runs no {} runs", run.kind.as_str()),
            ))),
        }
    }

    async fn apply(&self, run: &Run, outcome: Outcome) -> Result<(), RunError> {
        let store = &self.inner.store;
        let now = unix_ms();
        match outcome {
            Outcome::Settled => {}
            Outcome::Finished(finish) => {
                store
                    .finish(&run.run_id, &finish, None, vec![], now)
                    .await?;
            }
            Outcome::FailedEarly { error, retryable } => {
                if retryable && run.attempt < run.max_attempts {
                    let at = now + super::backoff_ms(run.attempt);
                    store.requeue(&run.run_id, at, Some(&error), now).await?;
                } else {
                    store
                        .finish(&run.run_id, &Finish::Failed(error), None, vec![], now)
                        .await?;
                }
            }
            Outcome::Park { wait, events } => {
                // Published as parked before anything else is read: its
                // children may already have ended and queued it again, and
                // a turn's caller must still hear that it parked.
                if let Some(parked) = store.park(&run.run_id, &wait, &events, now).await? {
                    self.publish(parked);
                }
            }
            Outcome::Busy => {
                store.release(&run.run_id, now).await?;
            }
        }
        Ok(())
    }

    async fn keep_leases(self) {
        let lease = self.inner.config.lease_ms.max(3);
        let every = Duration::from_millis(u64::try_from(lease / 3).unwrap_or(1));
        loop {
            let stopped = self.inner.stopped.notified();
            if self.is_stopping() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stopped => return,
            }
            if let Err(e) = self
                .inner
                .store
                .renew(self.owner(), unix_ms() + lease)
                .await
            {
                tracing::warn!(error = %e, "renewing the run leases failed");
            }
        }
    }
}
