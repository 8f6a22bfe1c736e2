//! The triggers service: what both doors call to keep triggers, and what
//! fires them.
//!
//! A firing is claimed in the one transaction that writes everything it
//! starts. A new thread's claim commits its firing row, the session with
//! its first words (the prompt, the trigger's context and instructions, as
//! the reference writes them), the session's link to its agent, its turn's
//! run (queued on the background queue, origin `trigger`, three attempts)
//! and the trigger's `lastFiredAt`; the dispatcher then works the run like
//! any queued turn. A key that fired before fails the claim with nothing
//! written, so a process killed at any moment and started again never
//! fires a key twice, and a due firing it had not claimed is still due.
//! A wake claims its firing and delivers its signal to one waiting run
//! through the runs service (journaled once), or records `no-listener`.
//!
//! Schedules are looked at by [`Triggers::tick_at`], which the monitor calls
//! on the sidecar's clock every `triggers.tickMs` and tests call with the
//! time they choose. Run-completed triggers fire from run finalization:
//! every terminal run the runs service publishes, and at start (and after
//! missing publications) the runs that ended since each trigger last looked.
//!
//! Hypermedia activity is polled by [`Triggers::poll_activity`]
//! (`monitor.rs`): each account with enabled hypermedia triggers has its
//! feed read from where the last poll saw it, and each new event fires the
//! triggers it matches, under its firing key.
//!
//! This file keeps triggers and reads them back; `fire.rs` fires them.

use std::sync::Arc;
use std::time::Duration;

use agentos_protocol::session::Actor;
use agentos_schema::{DbError, Statement};
use serde_json::{json, Map, Value};
use tokio::sync::{broadcast, Mutex};

use super::error::TriggerError;
use super::prompt;
use super::schedule::{self, ScheduleState};
use super::store::{self, FiringRow, NewFiring, Part, TriggerRow, TriggerStore};
use super::validate;
use crate::config::ControlLimits;
use crate::control::Control;
use crate::runs::{
    check_signal, NewRun, Origin, Queue, Run, RunEvent, RunKind, RunStatus, RunStore, Runs,
};
use crate::sessions::{input_hash, OpenSession, Sessions};

/// How far back a trigger chain is walked before a firing is refused as a
/// loop.
const CHAIN_MAX_HOPS: usize = 8;
/// A firing's session title, at most (the reference's session title bound).
const MAX_TITLE_BYTES: usize = 256;
/// A firing's first words, at most (the reference's message bound).
const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Attempts of a firing's turn.
const FIRING_ATTEMPTS: u32 = 3;
/// Ended runs one page of a catch-up pass reads.
const CATCH_UP_RUNS: u64 = 500;
/// How far before a trigger's last look a catch-up starts again: runs are
/// published about in the order they end, not exactly.
const CATCH_UP_MARGIN_MS: i64 = 5 * 60_000;

/// What every firing's first words end with, as the reference writes it.
const INSTRUCTIONS: &str = "When responding to a comment activity, reply with the write verb as a THREADED reply, not a new top-level comment: write {address: <target document id>, content: <your reply>, options: {action: \"comment\", replyTo: <parent comment id>}}. Take the target document id from trigger_context.activity.target.id.id or the activity comment target fields, and replyTo from trigger_context.activity.comment.id when present, or trigger_context.activity.commentId.id as a fallback. Do not omit replyTo when the user was mentioned in a comment.";

/// A firing opened a session: the doors announce it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionOpened {
    pub agent_id: String,
    pub session_id: String,
}

/// What one look at the schedules did (for logs and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TickReport {
    pub checked: u64,
    pub matched: u64,
    pub fired: u64,
    pub skipped: u64,
    pub errors: u64,
}

/// How one claim ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fired {
    /// A session and its run (new thread), or a delivered wake.
    Done,
    /// The key fired before, the trigger changed meanwhile, or a wake found
    /// nobody waiting (`no-listener`).
    Skipped,
    /// Claimed, and recorded as failed with this message.
    Failed(String),
}

/// One activity a trigger fires on.
struct Activity {
    key: String,
    value: Value,
    /// After the trigger's name in a new thread's title.
    summary: String,
    /// The trigger's `lastFiredAt` when it fires.
    fired_at: i64,
    /// A once schedule is disabled by its firing.
    disable: bool,
}

#[derive(Clone)]
pub struct Triggers {
    inner: Arc<Inner>,
}

struct Inner {
    store: TriggerStore,
    control: Control,
    sessions: Sessions,
    runs: Runs,
    max_per_agent: u64,
    max_firings: u64,
    opened: broadcast::Sender<SessionOpened>,
    /// One look at the schedules at a time.
    ticking: Mutex<()>,
    /// One activity poll at a time.
    polling: Mutex<()>,
    /// Where a prompt's embeds and mentions are looked up.
    hypermedia: crate::hypermedia::Hypermedia,
}

fn now_ms() -> i64 {
    agentos_base::clock::unix_ms()
}

/// `{"kind": …}` of a continuation (absent: a new thread).
fn continuation_kind(row: &TriggerRow) -> &str {
    row.continuation
        .as_ref()
        .and_then(|c| c["kind"].as_str())
        .unwrap_or("newThread")
}

/// The fields of an object, or of nothing for an array (the reference
/// reads an array's fields as absent).
fn fields(raw: &Value, required: &str) -> Result<Map<String, Value>, TriggerError> {
    match raw {
        Value::Object(map) => Ok(map.clone()),
        Value::Array(_) => Ok(Map::new()),
        _ => Err(TriggerError::Invalid(required.to_owned())),
    }
}

/// How an activity is summarized where its firing is shown.
pub fn activity_summary(activity: &Value) -> String {
    match activity["type"].as_str() {
        Some("schedule") => schedule::activity_summary(activity),
        Some("run-completed") => {
            let title = activity["runTitle"].as_str().filter(|t| !t.is_empty());
            let status = activity["runStatus"].as_str().filter(|s| !s.is_empty());
            format!(
                "{} {}",
                title.unwrap_or("A run"),
                status.unwrap_or("finished")
            )
        }
        _ => super::activity::summary(activity),
    }
}

/// A session title from its first line of words, as the reference makes
/// one for a run: whitespace collapsed, at most 80 UTF-16 units.
fn title_from_words(text: &str) -> String {
    let first = text.lines().next().unwrap_or_default();
    let collapsed = first.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.is_empty() {
        return "Agent-started session".to_owned();
    }
    if collapsed.encode_utf16().count() <= 80 {
        return collapsed;
    }
    let mut out = String::new();
    let mut units = 0;
    for c in collapsed.chars() {
        units += c.len_utf16();
        if units > 79 {
            break;
        }
        out.push(c);
    }
    out.push('…');
    out
}

impl Triggers {
    pub fn new(
        db: agentos_schema::SharedDatabase,
        control: Control,
        sessions: Sessions,
        runs: Runs,
        limits: &ControlLimits,
        hypermedia: crate::hypermedia::Hypermedia,
    ) -> Triggers {
        let (opened, _) = broadcast::channel(256);
        Triggers {
            inner: Arc::new(Inner {
                store: TriggerStore::new(db),
                control,
                sessions,
                runs,
                max_per_agent: limits.max_triggers_per_agent,
                max_firings: limits.max_firings_per_trigger,
                opened,
                ticking: Mutex::new(()),
                polling: Mutex::new(()),
                hypermedia,
            }),
        }
    }

    pub fn store(&self) -> &TriggerStore {
        &self.inner.store
    }

    /// Sessions firings open, as they commit.
    pub fn subscribe(&self) -> broadcast::Receiver<SessionOpened> {
        self.inner.opened.subscribe()
    }

    /// Starts the schedule monitor (a look now, then every `tick`) and the
    /// run-completed listener (after a catch-up pass over the runs that
    /// ended while nobody listened).
    pub fn start(&self, tick: Duration) {
        let monitor = self.clone();
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                // A stopping sidecar claims nothing new; what is due stays
                // due for the next start.
                if monitor.inner.runs.is_stopping() {
                    return;
                }
                if let Err(e) = monitor.tick_at(now_ms()).await {
                    tracing::warn!(error = %e, "the schedule monitor's look failed");
                }
            }
        });
        let activity = self.clone();
        tokio::spawn(async move {
            let every = activity.inner.hypermedia.activity_pace().poll_interval;
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                if activity.inner.runs.is_stopping() {
                    return;
                }
                let report = activity.poll_activity().await;
                if report.fired > 0 || report.errors > 0 {
                    tracing::info!(?report, "activity poll");
                }
            }
        });
        let listener = self.clone();
        let mut events = self.inner.runs.subscribe();
        tokio::spawn(async move {
            listener.catch_up().await;
            loop {
                match events.recv().await {
                    Ok(RunEvent::Changed(run)) if run.status.is_terminal() => {
                        if listener.inner.runs.is_stopping() {
                            // The next start catches up from the store.
                            return;
                        }
                        listener.run_finished(&run).await;
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(
                            missed,
                            "run-completed triggers missed run events; catching up from the store"
                        );
                        listener.catch_up().await;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }

    // ---- keeping triggers ------------------------------------------------

    /// Creates a trigger of `agent_id` under its owner's `account_id`.
    pub async fn create(
        &self,
        account_id: &str,
        agent_id: &str,
        raw: &Value,
    ) -> Result<TriggerRow, TriggerError> {
        let row = Self::prepare(account_id, agent_id, raw)?;
        self.insert(&row, Vec::new()).await?;
        Ok(row)
    }

    /// A new trigger of `agent_id` from a client's input, checked, not yet
    /// stored (see [`Triggers::insert`]).
    pub fn prepare(
        account_id: &str,
        agent_id: &str,
        raw: &Value,
    ) -> Result<TriggerRow, TriggerError> {
        let map = fields(raw, "Agent trigger is required")?;
        let source = validate::source(map.get("source"))?;
        let name = validate::name(map.get("name"))?;
        let enabled = validate::enabled(map.get("enabled"))?;
        let blocks = prompt::normalize(map.get("prompt"), "Trigger prompt")?;
        let continuation = match map.get("continuation") {
            None => None,
            Some(c) => Some(validate::continuation(Some(c))?),
        };
        let now = now_ms();
        let row = TriggerRow {
            trigger_id: uuid::Uuid::new_v4().to_string(),
            account_id: account_id.to_owned(),
            agent_id: agent_id.to_owned(),
            name,
            enabled,
            source,
            prompt: prompt::to_stored(&blocks),
            continuation,
            created_at_ms: now,
            updated_at_ms: now,
            last_checked_at_ms: None,
            last_fired_at_ms: None,
            last_error: None,
        };
        Ok(row)
    }

    /// Stores a prepared trigger, with `with` in the same transaction (the
    /// record of an idempotent create), within the agent's bound.
    pub async fn insert(&self, row: &TriggerRow, with: Vec<Statement>) -> Result<(), TriggerError> {
        let store = &self.inner.store;
        if !store.insert(row, self.inner.max_per_agent, with).await? {
            if store.count_for_agent(&row.agent_id).await? >= self.inner.max_per_agent {
                return Err(TriggerError::Limit {
                    setting: "limits.control.maxTriggersPerAgent",
                    limit: self.inner.max_per_agent,
                });
            }
            return Err(TriggerError::NotFound("Agent"));
        }
        Ok(())
    }

    /// Merges a patch into a trigger (each part replaces the stored one);
    /// `updatedAt` moves and the last error clears. Only the parts the
    /// patch names are written, so two patches at once (a rename and a
    /// toggle) both stand, and a once schedule's firing is not undone.
    pub async fn update(&self, trigger_id: &str, raw: &Value) -> Result<TriggerRow, TriggerError> {
        self.get(trigger_id).await?;
        let Value::Object(map) = raw else {
            return Err(TriggerError::Invalid(
                "Agent trigger patch is required".into(),
            ));
        };
        let mut parts = Vec::new();
        if map.contains_key("name") {
            parts.push(Part::Name(validate::name(map.get("name"))?));
        }
        if map.contains_key("enabled") {
            parts.push(Part::Enabled(validate::enabled(map.get("enabled"))?));
        }
        if map.contains_key("source") {
            parts.push(Part::Source(validate::source(map.get("source"))?));
        }
        if map.contains_key("prompt") {
            let blocks = prompt::normalize(map.get("prompt"), "Trigger prompt")?;
            parts.push(Part::Prompt(prompt::to_stored(&blocks)));
        }
        if let Some(c) = map.get("continuation") {
            parts.push(Part::Continuation(validate::continuation(Some(c))?));
        }
        if parts.is_empty() {
            return Err(TriggerError::Invalid("Agent trigger patch is empty".into()));
        }
        if !self
            .inner
            .store
            .update(trigger_id, &parts, now_ms())
            .await?
        {
            return Err(TriggerError::NotFound("Agent trigger"));
        }
        self.get(trigger_id).await
    }

    /// Deletes a trigger and its firings; the sessions it started stay.
    pub async fn delete(&self, trigger_id: &str) -> Result<(), TriggerError> {
        if !self.inner.store.delete(trigger_id).await? {
            return Err(TriggerError::NotFound("Agent trigger"));
        }
        Ok(())
    }

    /// A deleted session's firings stay, no longer naming it (its trigger
    /// lists it no more, and no later session of that id inherits it).
    pub async fn session_deleted(&self, session_id: &str) -> Result<(), TriggerError> {
        self.inner
            .store
            .db()
            .transaction(vec![store::forget_session_statement(session_id)])
            .await?;
        Ok(())
    }

    /// Deletes every trigger of a deleted agent.
    pub async fn delete_agent(&self, agent_id: &str) -> Result<(), TriggerError> {
        self.inner
            .store
            .db()
            .transaction(store::delete_agent_statements(agent_id))
            .await?;
        Ok(())
    }

    pub async fn get(&self, trigger_id: &str) -> Result<TriggerRow, TriggerError> {
        self.inner
            .store
            .get(trigger_id)
            .await?
            .ok_or(TriggerError::NotFound("Agent trigger"))
    }

    pub async fn list(&self, agent_id: &str) -> Result<Vec<TriggerRow>, TriggerError> {
        Ok(self.inner.store.list_for_agent(agent_id).await?)
    }

    /// The sessions a trigger started that still exist, the newest first.
    pub async fn sessions_of(&self, trigger_id: &str) -> Result<Vec<String>, TriggerError> {
        Ok(self.inner.store.sessions_of(trigger_id).await?)
    }

    /// `AgentTriggerInfo` as JSON: the prompt as blocks, optional parts
    /// only when set.
    pub fn info(row: &TriggerRow) -> Value {
        let mut out = Map::new();
        out.insert("id".into(), json!(row.trigger_id));
        out.insert("account".into(), json!(row.account_id));
        out.insert("agentId".into(), json!(row.agent_id));
        out.insert("name".into(), json!(row.name));
        out.insert("enabled".into(), json!(row.enabled));
        out.insert("source".into(), row.source.clone());
        out.insert(
            "prompt".into(),
            Value::Array(prompt::from_stored(&row.prompt)),
        );
        if let Some(c) = &row.continuation {
            out.insert("continuation".into(), c.clone());
        }
        out.insert("createdAt".into(), json!(row.created_at_ms));
        out.insert("updatedAt".into(), json!(row.updated_at_ms));
        if let Some(at) = row.last_checked_at_ms {
            out.insert("lastCheckedAt".into(), json!(at));
        }
        if let Some(at) = row.last_fired_at_ms {
            out.insert("lastFiredAt".into(), json!(at));
        }
        if let Some(e) = &row.last_error {
            out.insert("lastError".into(), json!(e));
        }
        Value::Object(out)
    }

    /// `SessionInfo.startedByTrigger`: the firing that started the session,
    /// with its trigger's current name and source.
    pub async fn started_by(&self, session_id: &str) -> Result<Option<Value>, TriggerError> {
        Ok(self
            .inner
            .store
            .firing_of_session(session_id)
            .await?
            .map(|f| summary_json(&f)))
    }

    /// `GetSession.triggerContext`: the summary plus the trigger's prompt
    /// (markdown and blocks), the activity and the firing's status.
    pub async fn context(&self, session_id: &str) -> Result<Option<Value>, TriggerError> {
        let Some(firing) = self.inner.store.firing_of_session(session_id).await? else {
            return Ok(None);
        };
        let mut out = summary_json(&firing);
        let blocks = prompt::from_stored(&firing.prompt);
        out["prompt"] = json!(prompt::to_markdown(&blocks));
        out["promptBlocks"] = Value::Array(blocks);
        out["activity"] = firing.activity.clone();
        out["status"] = json!(firing.status);
        if let Some(e) = &firing.error {
            out["error"] = json!(e);
        }
        Ok(Some(out))
    }
}

/// `startedByTrigger` of a firing.
fn summary_json(f: &FiringRow) -> Value {
    json!({
        "triggerId": f.trigger_id,
        "triggerName": f.trigger_name,
        "firingId": f.firing_id,
        "activityKey": f.activity_key,
        "activitySummary": activity_summary(&f.activity),
        "source": f.source,
        "firedAt": f.created_at_ms,
    })
}

mod fire;
mod monitor;
