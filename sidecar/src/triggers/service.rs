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
        Some(other) => format!("{other} activity"),
        None => "Activity".to_owned(),
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

    // ---- firing ----------------------------------------------------------

    /// Looks at every enabled schedule trigger at `now` and fires what is
    /// due.
    pub async fn tick_at(&self, now: i64) -> Result<TickReport, TriggerError> {
        let _one = self.inner.ticking.lock().await;
        let store = &self.inner.store;
        let rows = store.enabled("schedule", None).await?;
        let mut report = TickReport {
            checked: rows.len() as u64,
            ..TickReport::default()
        };
        store.checked("schedule", None, now).await?;
        for row in rows {
            let plan = match validate::schedule(Some(&row.source["schedule"])) {
                Ok(plan) => plan,
                Err(e) => {
                    tracing::warn!(trigger = %row.trigger_id, error = %e, "a stored schedule no longer reads");
                    report.errors += 1;
                    continue;
                }
            };
            let state = ScheduleState {
                trigger_created_at: row.created_at_ms,
                last_fired_at: row.last_fired_at_ms,
            };
            let Some(due) = schedule::due(&row.trigger_id, &plan, state, now) else {
                continue;
            };
            report.matched += 1;
            let activity = Activity {
                key: due.activity_key,
                value: due.activity,
                summary: due.summary,
                fired_at: now.max(due.scheduled_at),
                disable: plan.kind() == "once",
            };
            match self.fire(&row, activity).await {
                Ok(Fired::Done) => report.fired += 1,
                Ok(Fired::Skipped) => report.skipped += 1,
                Ok(Fired::Failed(_)) => report.errors += 1,
                Err(e) => {
                    tracing::warn!(trigger = %row.trigger_id, error = %e, "a schedule firing failed");
                    report.errors += 1;
                }
            }
        }
        Ok(report)
    }

    /// A run ended: the run-completed triggers of its account that match
    /// fire, and a firing's own run that failed marks its firing.
    pub async fn run_finished(&self, run: &Run) {
        if !run.status.is_terminal() {
            return;
        }
        if let Err(e) = self.settle_firing_run(run).await {
            tracing::warn!(run = %run.run_id, error = %e, "a firing's failed run was not recorded");
        }
        let Some(account) = run.account_id.as_deref() else {
            return;
        };
        let rows = match self
            .inner
            .store
            .enabled("run-completed", Some(account))
            .await
        {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(run = %run.run_id, error = %e, "run-completed triggers not read");
                return;
            }
        };
        if rows.is_empty() {
            return;
        }
        for row in &rows {
            self.consider(row, run).await;
        }
        let ids: Vec<String> = rows.into_iter().map(|r| r.trigger_id).collect();
        let looked = run.finished_at_ms.unwrap_or_else(now_ms);
        if let Err(e) = self.inner.store.looked_up_to(&ids, looked).await {
            tracing::warn!(error = %e, "run-completed triggers' last look not recorded");
        }
    }

    /// Looks at the runs that ended since each run-completed trigger last
    /// looked (a process that stopped, or a listener that fell behind),
    /// page by page, with a margin for runs published out of their order
    /// (a key that fired before is not fired again), but never before the
    /// trigger was last edited or enabled; and marks the firings whose run
    /// failed while nobody listened (at start, the runs a kill cut short).
    pub async fn catch_up(&self) {
        if let Err(e) = self.settle_unsettled().await {
            tracing::warn!(error = %e, "failed firing runs not recorded at catch-up");
        }
        let rows = match self.inner.store.enabled("run-completed", None).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "run-completed triggers not read for catch-up");
                return;
            }
        };
        for row in rows {
            if let Err(e) = self.catch_up_one(&row).await {
                tracing::warn!(trigger = %row.trigger_id, error = %e, "catch-up failed");
            }
        }
    }

    async fn catch_up_one(&self, row: &TriggerRow) -> Result<(), TriggerError> {
        let looked = row
            .last_checked_at_ms
            .map(|at| at.saturating_sub(CATCH_UP_MARGIN_MS));
        let mut since = (
            looked
                .unwrap_or(row.created_at_ms)
                .max(row.created_at_ms)
                .max(row.updated_at_ms),
            String::new(),
        );
        loop {
            let page = self
                .inner
                .runs
                .store()
                .ended_since(&row.account_id, &since, CATCH_UP_RUNS)
                .await?;
            for run in &page {
                self.consider(row, run).await;
            }
            let Some(last) = page.last() else {
                return Ok(());
            };
            since = (last.finished_at_ms.unwrap_or(since.0), last.run_id.clone());
            self.inner
                .store
                .looked_up_to(std::slice::from_ref(&row.trigger_id), since.0)
                .await?;
            if (page.len() as u64) < CATCH_UP_RUNS {
                return Ok(());
            }
        }
    }

    /// Firings still `created` whose run failed for good.
    async fn settle_unsettled(&self) -> Result<(), TriggerError> {
        for run_id in self.inner.store.failed_firing_runs().await? {
            if let Some(run) = self.inner.runs.store().get(&run_id).await? {
                self.settle_firing_run(&run).await?;
            }
        }
        Ok(())
    }

    /// Fires `row` on `run` if it matches and is not its own chain.
    async fn consider(&self, row: &TriggerRow, run: &Run) {
        if !matches_run(&row.source, run) {
            return;
        }
        match self.in_chain(run, &row.trigger_id).await {
            Ok(false) => {}
            Ok(true) => {
                tracing::info!(trigger = %row.trigger_id, run = %run.run_id, "a trigger does not fire on a run its own firing led to");
                return;
            }
            Err(e) => {
                tracing::warn!(trigger = %row.trigger_id, error = %e, "the trigger chain could not be walked");
                return;
            }
        }
        let mut value = Map::new();
        value.insert("type".into(), json!("run-completed"));
        value.insert("runId".into(), json!(run.run_id));
        value.insert(
            "runTitle".into(),
            json!(run.title.clone().unwrap_or_default()),
        );
        value.insert("runStatus".into(), json!(run.status.as_str()));
        value.insert(
            "agentId".into(),
            json!(run.agent_id.clone().unwrap_or_default()),
        );
        if let Some(session) = &run.session_id {
            value.insert("sessionId".into(), json!(session));
        }
        let value = Value::Object(value);
        let now = now_ms();
        let activity = Activity {
            key: format!("run:{}", run.run_id),
            summary: activity_summary(&value),
            value,
            fired_at: now,
            disable: false,
        };
        if let Err(e) = self.fire(row, activity).await {
            tracing::warn!(trigger = %row.trigger_id, run = %run.run_id, error = %e, "a run-completed firing failed");
        }
    }

    /// Whether `run` was led to by a firing of `trigger_id`, walking back
    /// through run-completed firings at most eight hops (still
    /// trigger-caused after that counts as a loop).
    async fn in_chain(&self, run: &Run, trigger_id: &str) -> Result<bool, TriggerError> {
        let mut firing = run.trigger_firing_id.clone();
        for _ in 0..CHAIN_MAX_HOPS {
            let Some(firing_id) = firing.take() else {
                return Ok(false);
            };
            let Some((fired_by, activity)) = self.inner.store.firing_origin(&firing_id).await?
            else {
                return Ok(false);
            };
            if fired_by == trigger_id {
                return Ok(true);
            }
            let Some(source_run) = activity["runId"].as_str() else {
                return Ok(false);
            };
            firing = match self.inner.runs.store().get(source_run).await? {
                Some(earlier) if earlier.account_id == run.account_id => earlier.trigger_firing_id,
                _ => None,
            };
        }
        Ok(firing.is_some())
    }

    /// A firing's own run failed for good: its firing and trigger say why.
    async fn settle_firing_run(&self, run: &Run) -> Result<(), TriggerError> {
        let (Some(firing_id), RunStatus::Failed) = (&run.trigger_firing_id, run.status) else {
            return Ok(());
        };
        let message = run
            .error
            .as_ref()
            .and_then(|e| e["message"].as_str())
            .unwrap_or("Trigger session run failed")
            .to_owned();
        if let Some((trigger_id, _)) = self.inner.store.firing_origin(firing_id).await? {
            self.inner
                .store
                .failed(firing_id, &trigger_id, &message)
                .await?;
        }
        Ok(())
    }

    /// Claims and carries out one firing of `row` on `activity`. What it
    /// writes is stamped with the sidecar's clock (a look as of another
    /// instant only decides what is due).
    async fn fire(&self, row: &TriggerRow, activity: Activity) -> Result<Fired, TriggerError> {
        let now = now_ms();
        let firing = NewFiring {
            firing_id: uuid::Uuid::new_v4().to_string(),
            account_id: row.account_id.clone(),
            agent_id: row.agent_id.clone(),
            trigger_id: row.trigger_id.clone(),
            activity_key: activity.key.clone(),
            session_id: None,
            activity: activity.value.clone(),
            created_at_ms: now,
        };
        if continuation_kind(row) == "wake" {
            return self.wake(row, firing).await;
        }
        self.new_thread(row, firing, activity).await
    }

    /// A new thread: the session, its words and its queued run, claimed in
    /// one transaction.
    async fn new_thread(
        &self,
        row: &TriggerRow,
        mut firing: NewFiring,
        activity: Activity,
    ) -> Result<Fired, TriggerError> {
        let Some(agent) = self.inner.control.get_agent(&row.agent_id).await? else {
            return Ok(Fired::Skipped);
        };
        let title = format!("{} — {}", row.name, activity.summary);
        if title.len() > MAX_TITLE_BYTES {
            return self
                .claim_failed(&firing, row, "Session title is too large")
                .await;
        }
        let text = first_words(row, &firing, &activity.value);
        // As the reference: a message too large still opens the session and
        // counts as the trigger's firing; the firing records why no turn ran.
        let too_large = text.len() > MAX_MESSAGE_BYTES;
        let session_id = uuid::Uuid::new_v4().to_string();
        firing.session_id = Some(session_id.clone());
        let content = if too_large {
            Vec::new()
        } else {
            vec![json!({"type": "text", "text": text})]
        };
        let now = firing.created_at_ms;
        let open = OpenSession {
            session_id: Some(session_id.clone()),
            agent: agent.adapter.clone(),
            title: Some(title),
            ..OpenSession::default()
        };
        let actor = Actor::User {
            account: Some(row.account_id.clone()),
            signer: None,
        };
        let session_statements = match self
            .inner
            .sessions
            .open_with_words_statements(&open, &content, &actor, now)
        {
            Ok(statements) => statements,
            Err(e) => return self.claim_failed(&firing, row, &e.to_string()).await,
        };
        let mut run = NewRun::root(
            RunKind::Agent,
            Origin::Trigger,
            Queue::Background,
            json!({
                "content": content,
                "inputHash": hex::encode(input_hash(&content)),
                "inputAt": 1,
            }),
        );
        run.run_id = format!("firing-{}", firing.firing_id);
        run.session_id = Some(session_id.clone());
        run.account_id = Some(row.account_id.clone());
        run.agent_id = Some(row.agent_id.clone());
        run.title = Some(title_from_words(&text));
        run.max_attempts = FIRING_ATTEMPTS;
        run.trigger_firing_id = Some(firing.firing_id.clone());
        let mut statements = vec![store::claim_statement(&firing)];
        let sessions_guard = statements.len();
        statements.extend(session_statements);
        statements.push(crate::control::store::link_statement(
            &session_id,
            &row.agent_id,
            now,
        ));
        if too_large {
            statements.push(store::failed_firing_statement(
                &firing.firing_id,
                "Message content is too large",
            ));
        } else {
            statements.extend(RunStore::insert_statements(
                &run,
                RunStatus::Queued,
                None,
                now,
            ));
        }
        let trigger_guard = statements.len();
        statements.push(store::fired_statement(
            &row.trigger_id,
            activity.fired_at,
            activity.disable,
            true,
        ));
        if too_large {
            // Written after the firing, which clears the last error.
            statements.push(store::trigger_error_statement(
                &row.trigger_id,
                "Message content is too large",
            ));
        }
        statements.push(store::prune_statement(
            &row.trigger_id,
            self.inner.max_firings,
        ));
        match self.inner.store.db().transaction(statements).await {
            Ok(_) => {}
            Err(DbError::ExpectedChanges {
                statement_index, ..
            }) => {
                let index = statement_index as usize;
                if index == 0 || index == trigger_guard {
                    // Fired before, or the trigger went or was disabled.
                    return Ok(Fired::Skipped);
                }
                if index == sessions_guard {
                    let full = self.inner.sessions.sessions_full();
                    return self.claim_failed(&firing, row, &full.to_string()).await;
                }
                // The agent went meanwhile.
                return Ok(Fired::Skipped);
            }
            Err(e) => return Err(e.into()),
        }
        let _ = self.inner.opened.send(SessionOpened {
            agent_id: row.agent_id.clone(),
            session_id,
        });
        if too_large {
            return Ok(Fired::Failed("Message content is too large".into()));
        }
        if let Ok(run) = self.inner.runs.get(&run.run_id).await {
            self.inner.runs.publish(run);
        }
        self.inner.runs.wake();
        Ok(Fired::Done)
    }

    /// Claims a firing that cannot start anything, recorded as failed.
    async fn claim_failed(
        &self,
        firing: &NewFiring,
        row: &TriggerRow,
        message: &str,
    ) -> Result<Fired, TriggerError> {
        let mut firing = firing.clone();
        firing.session_id = None;
        let statements = vec![
            store::claim_statement(&firing),
            store::enabled_guard_statement(&row.trigger_id),
            store::failed_firing_statement(&firing.firing_id, message),
            store::trigger_error_statement(&row.trigger_id, message),
            store::prune_statement(&row.trigger_id, self.inner.max_firings),
        ];
        match self.inner.store.db().transaction(statements).await {
            Ok(_) => Ok(Fired::Failed(message.to_owned())),
            Err(DbError::ExpectedChanges { .. }) => Ok(Fired::Skipped),
            Err(e) => Err(e.into()),
        }
    }

    /// A wake: the signal goes to one waiting run (the named one, or the
    /// account's oldest wait on it), or the firing is `no-listener` and the
    /// trigger is left as it was. The claim commits with the delivery (its
    /// journal entry, the requeue, the trigger's `lastFiredAt`) or with
    /// `no-listener`, never alone, so a process killed at any moment
    /// neither loses the wake nor delivers it twice.
    async fn wake(&self, row: &TriggerRow, firing: NewFiring) -> Result<Fired, TriggerError> {
        let continuation = row.continuation.clone().unwrap_or(Value::Null);
        let signal = continuation["signal"].as_str().unwrap_or_default();
        let payload = match continuation.get("payload") {
            Some(payload) => payload.clone(),
            None => firing.activity.clone(),
        };
        if let Err(e) = check_signal(signal, &payload) {
            return self.claim_failed(&firing, row, &e.to_string()).await;
        }
        let runs = &self.inner.runs;
        let candidates = match continuation["runId"].as_str() {
            Some(run_id) => vec![run_id.to_owned()],
            None => runs.store().waiting_on(&row.account_id, signal).await?,
        };
        let db = self.inner.store.db();
        for run_id in candidates {
            match runs.store().get(&run_id).await? {
                Some(run) if run.account_id.as_deref() == Some(row.account_id.as_str()) => {}
                _ => continue,
            }
            let now = now_ms();
            let mut statements = vec![
                store::claim_statement(&firing),
                store::fired_statement(&row.trigger_id, now, false, true),
            ];
            let delivery = statements.len();
            let mut signals =
                RunStore::signal_statements(&run_id, signal, &payload, Some("trigger"), true, now);
            if let Some(first) = signals.first_mut() {
                *first = first.clone().expect_changes(1);
            }
            statements.extend(signals);
            statements.push(store::firing_status_statement(
                &firing.firing_id,
                "delivered",
            ));
            statements.push(store::prune_statement(
                &row.trigger_id,
                self.inner.max_firings,
            ));
            match db.transaction(statements).await {
                Ok(_) => {
                    if let Err(e) = runs.delivered(&run_id).await {
                        tracing::warn!(run = %run_id, error = %e, "a woken run was not announced");
                    }
                    return Ok(Fired::Done);
                }
                // This run no longer waits on it: the next one.
                Err(DbError::ExpectedChanges {
                    statement_index, ..
                }) if statement_index as usize == delivery => continue,
                // Fired before, or the trigger went or was disabled.
                Err(DbError::ExpectedChanges { .. }) => return Ok(Fired::Skipped),
                Err(e) => return Err(e.into()),
            }
        }
        let statements = vec![
            store::claim_statement(&firing),
            store::enabled_guard_statement(&row.trigger_id),
            store::firing_status_statement(&firing.firing_id, "no-listener"),
            store::prune_statement(&row.trigger_id, self.inner.max_firings),
        ];
        match db.transaction(statements).await {
            Ok(_) | Err(DbError::ExpectedChanges { .. }) => Ok(Fired::Skipped),
            Err(e) => Err(e.into()),
        }
    }
}

/// Whether a run-completed source matches `run`: the exact agent and
/// status when named, the title containing `titleMatch` (any case).
fn matches_run(source: &Value, run: &Run) -> bool {
    if let Some(agent) = source["agentId"].as_str() {
        if run.agent_id.as_deref() != Some(agent) {
            return false;
        }
    }
    if let Some(status) = source["status"].as_str() {
        if run.status.as_str() != status {
            return false;
        }
    }
    if let Some(needle) = source["titleMatch"].as_str() {
        let title = run.title.clone().unwrap_or_default().to_lowercase();
        if !title.contains(&needle.to_lowercase()) {
            return false;
        }
    }
    true
}

/// A new thread's first words: the prompt, then the trigger's context and
/// instructions, as the reference writes them.
fn first_words(row: &TriggerRow, firing: &NewFiring, activity: &Value) -> String {
    let prompt = prompt::to_resolved_markdown(&prompt::from_stored(&row.prompt));
    let fields = [
        ("triggerId", json!(row.trigger_id)),
        ("firingId", json!(firing.firing_id)),
        // The reference's activity-event key: none for schedules and runs.
        ("activityKey", Value::Null),
        ("activitySummary", json!(activity_summary(activity))),
    ];
    let mut context = String::from("{\n");
    for (key, value) in &fields {
        context.push_str(&format!("  \"{key}\": {},\n", pretty(value, &[], 1)));
    }
    context.push_str(&format!(
        "  \"activity\": {}\n}}",
        pretty(activity, ACTIVITY_ORDER, 1)
    ));
    let text = [
        prompt.as_str(),
        "",
        "<trigger_context>",
        context.as_str(),
        "</trigger_context>",
        "",
        "<trigger_instructions>",
        INSTRUCTIONS,
        "</trigger_instructions>",
    ]
    .join("\n");
    validate::js_trim(&text).to_owned()
}

/// The order the reference writes an activity's fields in.
const ACTIVITY_ORDER: &[&str] = &[
    "type",
    "scheduleKind",
    "scheduledAt",
    "firedAt",
    "timezone",
    "runId",
    "runTitle",
    "runStatus",
    "agentId",
    "sessionId",
];

/// JSON with two-space indentation (as `JSON.stringify(v, null, 2)`), an
/// object's fields in `order` first and the rest after them.
fn pretty(value: &Value, order: &[&str], depth: usize) -> String {
    let Value::Object(map) = value else {
        let text = serde_json::to_string_pretty(value).unwrap_or_default();
        return text.replace('\n', &format!("\n{}", "  ".repeat(depth)));
    };
    if map.is_empty() {
        return "{}".to_owned();
    }
    let mut keys: Vec<&String> = order
        .iter()
        .filter_map(|k| map.get_key_value(*k).map(|(k, _)| k))
        .collect();
    keys.extend(map.keys().filter(|k| !order.contains(&k.as_str())));
    let inner = "  ".repeat(depth + 1);
    let fields: Vec<String> = keys
        .into_iter()
        .map(|k| {
            format!(
                "{inner}{}: {}",
                Value::String(k.clone()),
                pretty(&map[k], &[], depth + 1)
            )
        })
        .collect();
    format!("{{\n{}\n{}}}", fields.join(",\n"), "  ".repeat(depth))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_from_words_are_the_first_line_collapsed_and_bounded() {
        assert_eq!(
            title_from_words("  Check   the\tnews \nmore"),
            "Check the news"
        );
        assert_eq!(title_from_words("\n"), "Agent-started session");
        let long = "x".repeat(100);
        let title = title_from_words(&long);
        assert_eq!(title.encode_utf16().count(), 80);
        assert!(title.ends_with('…'));
    }

    #[test]
    fn run_completed_summaries_name_the_run() {
        let a =
            json!({"type": "run-completed", "runTitle": "Nightly crawl", "runStatus": "succeeded"});
        assert_eq!(activity_summary(&a), "Nightly crawl succeeded");
        let b = json!({"type": "run-completed", "runTitle": "", "runStatus": "failed"});
        assert_eq!(activity_summary(&b), "A run failed");
    }

    #[test]
    fn context_json_keeps_the_references_field_order() {
        let activity = json!({"type": "schedule", "scheduleKind": "once", "scheduledAt": 5,
            "firedAt": 6, "nested": {"b": [1, {"c": null}], "a": "x"}});
        assert_eq!(
            pretty(&activity, ACTIVITY_ORDER, 1),
            "{\n    \"type\": \"schedule\",\n    \"scheduleKind\": \"once\",\n    \"scheduledAt\": 5,\n    \"firedAt\": 6,\n    \"nested\": {\n      \"a\": \"x\",\n      \"b\": [\n        1,\n        {\n          \"c\": null\n        }\n      ]\n    }\n  }"
        );
        let parsed: Value = serde_json::from_str(&pretty(&activity, ACTIVITY_ORDER, 1)).unwrap();
        assert_eq!(parsed, activity);
    }
}
