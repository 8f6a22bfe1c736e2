//! Script runs: the executor that works a claimed script run in the QuickJS
//! engine, and the host the engine asks for effects. Every effect's entry
//! goes into the run's journal (capped on the run's row) before its result
//! reaches the script, so a rerun after a crash, a timer or a signal takes
//! completed effects from the journal instead of doing them again. Tools
//! (`read`, `write`, a callable, a lambda) run as the run's agent through
//! [`ScriptTools`]; children start through [`Delegation`] and are awaited
//! in the resident VM. A park becomes the run's wait; `continueAsNew` ends
//! the run and queues its successor in one transaction.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use serde_json::{json, Value};

use super::delegate::{ChildSpec, Delegation};
use crate::runs::store::RunStore;
use crate::runs::{
    run_error, EventWait, Executor, Finish, LiveRun, NewRun, Outcome, ParentLink, Run, RunStatus,
    RunWait, Runs, WaitReason,
};
use agentos_base::clock::unix_ms;
use agentos_scripts::{
    EffectError, JournalEntry, Park, ScriptEngine, ScriptHost, ScriptOutcome, ScriptRun,
};

/// Runs a script's tool calls as its agent.
#[async_trait::async_trait]
pub trait ScriptTools: Send + Sync + 'static {
    async fn call(&self, run: &Run, tool: &str, input: Value) -> Result<Value, EffectError>;
}

/// Works claimed script runs.
pub struct ScriptExecutor {
    engine: ScriptEngine,
    tools: Arc<dyn ScriptTools>,
    delegation: Arc<OnceLock<Arc<Delegation>>>,
}

impl ScriptExecutor {
    pub fn new(
        engine: ScriptEngine,
        tools: Arc<dyn ScriptTools>,
        delegation: Arc<OnceLock<Arc<Delegation>>>,
    ) -> Arc<ScriptExecutor> {
        Arc::new(ScriptExecutor {
            engine,
            tools,
            delegation,
        })
    }
}

struct Host {
    runs: Runs,
    run: Run,
    tools: Arc<dyn ScriptTools>,
    delegation: Option<Arc<Delegation>>,
}

fn storage(e: impl std::fmt::Display) -> EffectError {
    EffectError::new("storage", e.to_string())
}

#[async_trait::async_trait]
impl ScriptHost for Host {
    async fn call(&self, tool: &str, input: Value) -> Result<Value, EffectError> {
        self.tools.call(&self.run, tool, input).await
    }

    async fn start_child(&self, call_seq: u64, spec: Value) -> Result<String, EffectError> {
        let Some(delegation) = &self.delegation else {
            return Err(EffectError::new(
                "delegate_unavailable",
                "this sidecar starts no children",
            ));
        };
        let spec = ChildSpec::parse(&spec).map_err(|r| EffectError::new(r.code, r.message))?;
        if matches!(spec, ChildSpec::Model { awaits: false, .. }) {
            return Err(EffectError::new(
                "invalid_argument",
                "a script cannot start a detached session (await:false)",
            ));
        }
        // The parent as it is now (its child count moved on).
        let parent = self.runs.get(&self.run.run_id).await.map_err(storage)?;
        let started = delegation
            .start(&parent, &format!("{}:{call_seq}", self.run.run_id), spec)
            .await
            .map_err(|r| EffectError::new(r.code, r.message))?;
        Ok(started.run_id)
    }

    async fn await_child(&self, child_run_id: &str) -> Result<Value, EffectError> {
        let child = self
            .runs
            .wait_for(child_run_id, |r| r.status.is_terminal())
            .await
            .map_err(storage)?;
        // The parent reads it here; mark it delivered.
        if let Some(delegation) = &self.delegation {
            let _ = delegation.resolve(&child).await;
        }
        match child.status {
            RunStatus::Succeeded => {
                let result = match &self.delegation {
                    Some(d) => d.child_result(&child).await,
                    None => json!({"output": child.output}),
                };
                Ok(result["output"].clone())
            }
            RunStatus::Canceled => Err(EffectError::new("canceled", "the child was canceled")),
            _ => {
                let error = child.error.unwrap_or(Value::Null);
                Err(EffectError::new(
                    error["code"].as_str().unwrap_or("run_failed"),
                    error["message"].as_str().unwrap_or("the child failed"),
                ))
            }
        }
    }

    async fn journal(&self, entries: Vec<Value>) -> Result<Vec<u64>, EffectError> {
        let config = self.runs.config();
        match self
            .runs
            .store()
            .journal_append(
                &self.run.run_id,
                &entries,
                config.max_journal_entries,
                config.max_journal_bytes,
                unix_ms(),
            )
            .await
        {
            Ok(Some(seqs)) => {
                for (seq, entry) in seqs.iter().zip(entries) {
                    self.runs.publish_journal(&self.run, *seq, entry);
                }
                Ok(seqs)
            }
            Ok(None) => Err(EffectError::new(
                "journal_cap",
                "the run's journal is full (limits.runs.maxJournalEntries, maxJournalBytes)",
            )),
            Err(e) => Err(storage(e)),
        }
    }

    async fn set_plan(&self, plan: Value) -> Result<(), EffectError> {
        self.runs
            .store()
            .set_plan(&self.run.run_id, &plan, unix_ms())
            .await
            .map_err(storage)?;
        if let Ok(run) = self.runs.get(&self.run.run_id).await {
            self.runs.publish(run);
        }
        Ok(())
    }

    fn log(&self, level: &str, message: &str) {
        tracing::debug!(run = %self.run.run_id, level, "script: {message}");
        self.runs.publish_partial(
            &self.run,
            json!({"activity": {"phase": "tool", "detail": message}}),
        );
    }

    fn progress(&self, fraction: Option<f64>, label: Option<&str>) {
        self.runs.publish_partial(
            &self.run,
            json!({"progress": {"fraction": fraction, "label": label}}),
        );
    }

    fn now_ms(&self) -> i64 {
        unix_ms()
    }
}

/// When a script's wall budget ends: `budget.maxWallMs` after it first
/// started (None once a person lifted it).
fn wall_deadline(run: &Run) -> Option<i64> {
    let budget = run.budget.as_ref()?["maxWallMs"].as_i64()?;
    let started = run.started_at_ms.unwrap_or_else(unix_ms);
    Some(started.saturating_add(budget))
}

/// A script's failure as the run stores it: `{code, message, stack?, tool?,
/// callSeq?}`.
fn failure(e: &agentos_scripts::ScriptError) -> Value {
    let mut error = run_error(e.code(), &e.to_string());
    if let Some(stack) = e.stack() {
        error["stack"] = json!(stack);
    }
    if let Some(tool) = e.tool() {
        error["tool"] = json!(tool);
    }
    if let Some(seq) = e.call_seq() {
        error["callSeq"] = json!(seq);
    }
    error
}

#[async_trait::async_trait]
impl Executor for ScriptExecutor {
    async fn execute(&self, runs: &Runs, run: Run, live: Arc<LiveRun>) -> Outcome {
        let Some(source) = run.source_text.clone() else {
            return Outcome::Finished(Finish::Failed(run_error(
                "invalid_script",
                "a script run without its source",
            )));
        };
        let journal = match runs
            .store()
            .journal(&run.run_id, 0, runs.config().max_journal_entries)
            .await
        {
            Ok(rows) => rows
                .into_iter()
                .map(|r| JournalEntry {
                    seq: r.seq,
                    entry: r.entry,
                })
                .collect(),
            Err(e) => {
                return Outcome::FailedEarly {
                    error: run_error("storage", &e.to_string()),
                    retryable: true,
                }
            }
        };
        let host = Arc::new(Host {
            runs: runs.clone(),
            run: run.clone(),
            tools: self.tools.clone(),
            delegation: self.delegation.get().cloned(),
        });
        let cancel = Arc::new(AtomicBool::new(live.is_stopped()));
        let watcher = {
            let cancel = cancel.clone();
            let live = live.clone();
            tokio::spawn(async move {
                live.stopped().await;
                cancel.store(true, Ordering::Release);
            })
        };
        let outcome = self
            .engine
            .run(
                ScriptRun {
                    run_id: run.run_id.clone(),
                    source,
                    input: run.input.clone(),
                    journal,
                    wall_deadline_ms: wall_deadline(&run),
                },
                host,
                cancel,
            )
            .await;
        watcher.abort();
        match outcome {
            ScriptOutcome::Succeeded(value) => Outcome::Finished(Finish::Succeeded(value)),
            ScriptOutcome::Failed(e) => Outcome::Finished(Finish::Failed(failure(&e))),
            ScriptOutcome::Canceled => Outcome::Finished(Finish::Canceled),
            // Only a person resumes it: any signal, which lifts the budget.
            ScriptOutcome::Park(Park::Budget) => Outcome::Park {
                wait: RunWait {
                    reason: WaitReason::BudgetPause,
                    wake_at: None,
                    tool_call_ids: vec![],
                    wait_id: None,
                    label: Some(format!(
                        "paused: the run passed its wall budget of {} ms",
                        run.budget
                            .as_ref()
                            .and_then(|b| b["maxWallMs"].as_i64())
                            .unwrap_or_default()
                    )),
                    answer_with: None,
                },
                events: vec![EventWait {
                    wait_id: format!("{}:budget", run.run_id),
                    signal: None,
                    match_json: None,
                }],
            },
            ScriptOutcome::Park(Park::Timer { wake_at_ms }) => Outcome::Park {
                wait: RunWait {
                    reason: WaitReason::Timer,
                    wake_at: Some(wake_at_ms),
                    tool_call_ids: vec![],
                    wait_id: None,
                    label: None,
                    answer_with: None,
                },
                events: vec![],
            },
            ScriptOutcome::Park(Park::Event {
                wait_id,
                match_,
                timeout_at_ms,
                label,
            }) => {
                let signal = match_["signal"].as_str().map(str::to_owned);
                Outcome::Park {
                    wait: RunWait {
                        reason: WaitReason::Event,
                        wake_at: timeout_at_ms,
                        tool_call_ids: vec![],
                        wait_id: Some(wait_id.clone()),
                        label,
                        answer_with: signal.clone(),
                    },
                    events: vec![EventWait {
                        wait_id,
                        signal,
                        match_json: Some(match_),
                    }],
                }
            }
            ScriptOutcome::ContinueAsNew(state) => match continue_as_new(runs, &run, state).await {
                Ok(()) => Outcome::Settled,
                Err(e) => Outcome::Finished(Finish::Failed(run_error("storage", &e.to_string()))),
            },
        }
    }

    async fn stop(&self, _run: &Run) {
        // The live run's stop flag interrupts the VM.
    }
}

/// Ends `run` and queues its successor with `state` as its input, in one
/// transaction: the same tree position, the same source, a fresh journal.
/// The successor answers the parent, not this run.
async fn continue_as_new(
    runs: &Runs,
    run: &Run,
    state: Value,
) -> Result<(), crate::runs::RunError> {
    let mut next = NewRun::root(run.kind, run.origin, run.queue, state);
    next.parent = run.parent_run_id.as_ref().map(|parent| ParentLink {
        run_id: parent.clone(),
        root_run_id: run.root_run_id.clone(),
        tool_call_id: run.parent_tool_call_id.clone(),
        depth: run.depth,
        awaits: run.parent_awaits,
    });
    next.continued_from = Some(run.run_id.clone());
    next.account_id = run.account_id.clone();
    next.agent_id = run.agent_id.clone();
    next.title = run.title.clone();
    next.source_text = run.source_text.clone();
    next.source_cid = run.source_cid.clone();
    next.plan_step_id = run.plan_step_id.clone();
    next.step_label = run.step_label.clone();
    next.max_attempts = run.max_attempts;
    let now = unix_ms();
    let mut successor = RunStore::insert_statements(&next, RunStatus::Queued, None, now);
    // The predecessor does not answer its parent: mark it delivered.
    successor.push(agentos_schema::Statement::new(
        "UPDATE agentos_core_runs SET resolved = 1 WHERE run_id = ?1",
        vec![run.run_id.as_str().into()],
    ));
    runs.store()
        .finish(
            &run.run_id,
            &Finish::Succeeded(json!({"continuedAsRunId": next.run_id})),
            None,
            successor,
            now,
        )
        .await?;
    Ok(())
}
