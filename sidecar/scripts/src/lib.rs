//! The script engine: runs a workflow script (an ES module exporting one
//! `default async function (input, ctx)`) in a QuickJS realm on its own OS
//! thread, turns every `ctx` effect into a host call that is journaled before
//! its result reaches the script, and reruns a script from the top against
//! that journal after a crash, a timer wake or a delivered event. The engine
//! holds no state between runs; the host owns the journal, the runs queue and
//! what an effect does.

mod engine;
mod error;
mod journal;
mod pump;
#[cfg(test)]
mod tests;

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use error::{EffectError, FailureSite, ScriptError};

/// The bounds of one script run. Defaults are the contract's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptLimits {
    /// The realm's heap.
    pub memory_bytes: usize,
    /// The realm's JavaScript stack.
    pub stack_bytes: usize,
    /// Continuous JavaScript execution allowed between two effect results.
    pub compute_between_awaits: Duration,
    pub max_journal_entries: usize,
    /// Bytes of JSON text over all of the run's journal entries.
    pub max_journal_bytes: usize,
    pub max_source_bytes: usize,
    /// A sleep up to this long waits in the resident VM; a longer one parks.
    pub resident_sleep_max: Duration,
}

impl Default for ScriptLimits {
    fn default() -> Self {
        ScriptLimits {
            memory_bytes: 64 << 20,
            stack_bytes: 1 << 20,
            compute_between_awaits: Duration::from_secs(2),
            max_journal_entries: 5000,
            max_journal_bytes: 8 << 20,
            max_source_bytes: 256 << 10,
            resident_sleep_max: Duration::from_secs(60),
        }
    }
}

/// One stored journal entry: seq is assigned by the store (1-based,
/// increasing per run).
#[derive(Clone, Debug, PartialEq)]
pub struct JournalEntry {
    pub seq: u64,
    pub entry: serde_json::Value,
}

/// What one (re)run needs: the source, the input, and everything journaled
/// so far, oldest first.
#[derive(Clone, Debug)]
pub struct ScriptRun {
    pub run_id: String,
    pub source: String,
    pub input: serde_json::Value,
    pub journal: Vec<JournalEntry>,
    /// Past this instant (the host's clock), the run pauses at its next new
    /// effect ([`Park::Budget`]).
    pub wall_deadline_ms: Option<i64>,
}

/// What the engine asks of its embedder. The async methods run on the tokio
/// runtime `ScriptEngine::run` was called on, several at a time when the
/// script fans out; the sync ones run on the script's own thread and must
/// not block.
#[async_trait::async_trait]
pub trait ScriptHost: Send + Sync + 'static {
    /// Runs a tool effect live (`read`, `write`, a callable, a lambda). Err
    /// is delivered to the script as a thrown Error with `.code`.
    async fn call(
        &self,
        tool: &str,
        input: serde_json::Value,
    ) -> Result<serde_json::Value, EffectError>;
    /// Starts a child run for `ctx.delegate(spec)`; answers the child run
    /// id. The engine journals it before awaiting.
    async fn start_child(
        &self,
        call_seq: u64,
        spec: serde_json::Value,
    ) -> Result<String, EffectError>;
    /// Waits for a child run to end; its output or its error.
    async fn await_child(&self, child_run_id: &str) -> Result<serde_json::Value, EffectError>;
    /// Appends entries durably (committed before it returns) and answers
    /// their seqs. The engine never delivers a result to the script before
    /// its entry is journaled.
    async fn journal(&self, entries: Vec<serde_json::Value>) -> Result<Vec<u64>, EffectError>;
    /// Replaces the run's plan (`ctx.plan`).
    async fn set_plan(&self, plan: serde_json::Value) -> Result<(), EffectError>;
    /// Not journaled: `ctx.log`.
    fn log(&self, level: &str, message: &str);
    /// Not journaled: `ctx.progress`.
    fn progress(&self, fraction: Option<f64>, label: Option<&str>);
    /// Wall clock in ms (the engine journals what `ctx.now()` returned).
    fn now_ms(&self) -> i64;
}

/// How a run ended.
#[derive(Debug)]
pub enum ScriptOutcome {
    /// The default function's resolved value (JSON; undefined → null).
    Succeeded(serde_json::Value),
    Failed(ScriptError),
    /// The run must wait without holding a slot; rerun it later from the top
    /// with the journal.
    Park(Park),
    /// `ctx.continueAsNew(state)`: end this run, start a successor with
    /// `state`.
    ContinueAsNew(serde_json::Value),
    Canceled,
}

/// Why a parked run waits and what wakes it.
#[derive(Clone, Debug, PartialEq)]
pub enum Park {
    /// A sleep longer than `resident_sleep_max`.
    Timer { wake_at_ms: i64 },
    /// `ctx.waitForEvent`. The store writes `{kind:'event', waitId, signal,
    /// payload}` when a matching signal lands, or wakes the run at
    /// `timeout_at_ms` (which may also be an earlier parked timer's wake).
    Event {
        wait_id: String,
        match_: serde_json::Value,
        timeout_at_ms: Option<i64>,
        label: Option<String>,
    },
    /// The run's wall budget ran out before a new effect: it waits for a
    /// person (any signal resumes it, without the budget).
    Budget,
}

/// Runs scripts. Cheap to share: it holds only the limits, and every run
/// gets a fresh runtime on a fresh thread.
#[derive(Clone, Debug)]
pub struct ScriptEngine {
    limits: ScriptLimits,
}

impl ScriptEngine {
    pub fn new(limits: ScriptLimits) -> Self {
        ScriptEngine { limits }
    }

    pub fn limits(&self) -> &ScriptLimits {
        &self.limits
    }

    /// Checks the module's shape without running effects (used when a
    /// script is submitted). The module's top level is evaluated, under the
    /// same limits as a run; `ctx` does not exist there, so it can have no
    /// effect. It runs on a thread of its own with the stack QuickJS needs,
    /// and blocks the caller until it ends (at most `compute_between_awaits`
    /// of compute): call it from `spawn_blocking` on a runtime worker.
    pub fn check(&self, source: &str) -> Result<(), ScriptError> {
        if source.len() > self.limits.max_source_bytes {
            return Err(engine::too_large(&self.limits, source));
        }
        let limits = self.limits.clone();
        let source = source.to_owned();
        let spawned = std::thread::Builder::new()
            .name("script-check".into())
            .stack_size(thread_stack(&limits))
            .spawn(move || {
                std::panic::catch_unwind(AssertUnwindSafe(|| engine::check(&limits, &source)))
            });
        match spawned {
            Err(e) => Err(ScriptError::engine(format!(
                "could not start the check thread: {e}"
            ))),
            Ok(thread) => match thread.join() {
                Ok(Ok(checked)) => checked,
                Ok(Err(panic)) | Err(panic) => {
                    Err(ScriptError::EnginePanic(panic_message(&*panic)))
                }
            },
        }
    }

    /// Runs (or reruns) one script run to its outcome. Setting `cancel`
    /// interrupts it (outcome Canceled); so does dropping the returned
    /// future. Must be called within a tokio runtime: the host's futures run
    /// there, the script itself on its own thread.
    pub async fn run(
        &self,
        run: ScriptRun,
        host: Arc<dyn ScriptHost>,
        cancel: Arc<AtomicBool>,
    ) -> ScriptOutcome {
        let handle = match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle,
            Err(_) => {
                return ScriptOutcome::Failed(ScriptError::engine(
                    "ScriptEngine::run needs a tokio runtime",
                ))
            }
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let abandoned = Arc::new(AtomicBool::new(false));
        let _guard = AbandonOnDrop(abandoned.clone());
        let limits = self.limits.clone();
        let spawned = std::thread::Builder::new()
            .name("script-run".into())
            .stack_size(thread_stack(&limits))
            .spawn(move || {
                let stop = engine::Stop { cancel, abandoned };
                let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    pump::execute(&limits, run, host, stop, handle)
                }))
                .unwrap_or_else(|panic| {
                    ScriptOutcome::Failed(ScriptError::EnginePanic(panic_message(&*panic)))
                });
                let _ = tx.send(outcome);
            });
        if let Err(e) = spawned {
            return ScriptOutcome::Failed(ScriptError::engine(format!(
                "could not start the script thread: {e}"
            )));
        }
        match rx.await {
            Ok(outcome) => outcome,
            Err(_) => ScriptOutcome::Failed(ScriptError::EnginePanic(
                "the script thread ended without an outcome".into(),
            )),
        }
    }
}

/// QuickJS checks its own stack cap; its thread gets that plus room for the
/// engine's Rust frames and the C code below the check.
fn thread_stack(limits: &ScriptLimits) -> usize {
    limits.stack_bytes.saturating_add(8 << 20)
}

/// Tells the script thread its caller is gone, so it stops instead of
/// running effects nobody will see the end of.
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}
