//! The pump that runs on a script's thread: it drains the job queue, turns
//! the effects the script issued into journal lookups or host futures on
//! the tokio runtime, and delivers results one at a time, each only after
//! it is journaled; and how the run ends once nothing is in flight.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use futures_util::FutureExt;
use rquickjs::promise::PromiseState;
use rquickjs::{Ctx, Promise};
use serde_json::{json, Value};
use tokio::runtime::Handle;

use super::journal::{self, Budget, Group, Replay};
use super::{
    panic_message, EffectError, FailureSite, Park, ScriptError, ScriptHost, ScriptLimits,
    ScriptOutcome, ScriptRun,
};

use super::engine::*;

/// Runs one script run on the current (script) thread to its outcome.
pub(crate) fn execute(
    limits: &ScriptLimits,
    run: ScriptRun,
    host: Arc<dyn ScriptHost>,
    stop: Stop,
    handle: Handle,
) -> ScriptOutcome {
    let realm = match realm(limits, stop.clone()) {
        Ok(realm) => realm,
        Err(e) => return ScriptOutcome::Failed(e),
    };
    let fuel = realm.fuel.clone();
    realm.context.with(|ctx| {
        let bridge = Rc::new(RefCell::new(Bridge::default()));
        let api = match install(&ctx, &fuel, &bridge, Some(host.clone())) {
            Ok(api) => api,
            Err(e) => return ScriptOutcome::Failed(e),
        };
        fuel.reset();
        let main = match load(&ctx, &api, &fuel, limits, &run.source) {
            Ok(main) => main,
            Err(halt) => return halt.outcome(),
        };
        let input = journal::canonical(&run.input);
        let promise: Promise = match api.start.call((main, input, run.run_id.clone())) {
            Ok(p) => p,
            Err(e) => return js_failure(&ctx, limits, &fuel, e).outcome(),
        };
        let (tx, rx) = mpsc::channel();
        let pump = Pump {
            ctx: ctx.clone(),
            api,
            limits,
            fuel: fuel.clone(),
            bridge,
            live: Arc::new(Live {
                budget: Budget::new(
                    &run.journal,
                    limits.max_journal_entries,
                    limits.max_journal_bytes,
                ),
                host: host.clone(),
            }),
            replay: Replay::new(&run.journal),
            handle,
            stop,
            tx,
            rx,
            tasks: Vec::new(),
            in_flight: 0,
            ready: VecDeque::new(),
            next_seq: 0,
            steps: HashMap::new(),
            ending: None,
            wall_deadline_ms: run.wall_deadline_ms,
        };
        pump.run(promise)
    })
}

/// What every effect task shares: the host and the journal budget.
struct Live {
    host: Arc<dyn ScriptHost>,
    budget: Budget,
}

impl Live {
    async fn append(&self, entries: Vec<Value>) -> Result<(), ScriptError> {
        self.budget.reserve(&entries)?;
        self.host
            .journal(entries)
            .await
            .map(|_| ())
            .map_err(|e| ScriptError::JournalFailed {
                code: e.code,
                message: e.message,
            })
    }
}

/// What an effect task ends with.
enum TaskOutput {
    Deliver(Result<Value, EffectError>),
    Park(Park),
    /// Journaled, nothing to hand back (the effect ends the run).
    Nothing,
}

struct Completion {
    id: u32,
    meta: Meta,
    output: Result<TaskOutput, ScriptError>,
}

/// What a failed effect's Error says about where it came from.
#[derive(Clone, Debug)]
struct Meta {
    call_seq: u64,
    tool: Option<String>,
}

/// How the run will end once nothing is in flight.
enum Ending {
    Park(Park),
    Done(ScriptOutcome),
    Continue(Value),
}

impl Ending {
    fn rank(&self) -> u8 {
        match self {
            Ending::Park(_) => 0,
            Ending::Done(_) => 1,
            Ending::Continue(_) => 2,
        }
    }
}

struct Pump<'a, 'js> {
    ctx: Ctx<'js>,
    api: Api<'js>,
    limits: &'a ScriptLimits,
    fuel: Rc<Fuel>,
    bridge: Rc<RefCell<Bridge>>,
    live: Arc<Live>,
    replay: Replay,
    handle: Handle,
    stop: Stop,
    tx: mpsc::Sender<Completion>,
    rx: mpsc::Receiver<Completion>,
    tasks: Vec<tokio::task::AbortHandle>,
    in_flight: usize,
    ready: VecDeque<(u32, Meta, Result<Value, EffectError>)>,
    /// The program-order effect counter of this execution.
    next_seq: u64,
    /// Open steps by effect id: their callSeq and label.
    steps: HashMap<u32, (u64, String)>,
    ending: Option<Ending>,
    /// When the run's wall budget ends (`budget.maxWallMs` after its start).
    wall_deadline_ms: Option<i64>,
}

impl<'js> Pump<'_, 'js> {
    fn run(mut self, main: Promise<'js>) -> ScriptOutcome {
        let outcome = self.pump(main);
        for task in &self.tasks {
            task.abort();
        }
        if matches!(outcome, ScriptOutcome::Succeeded(_)) {
            let left = self.replay.unconsumed();
            if left > 0 {
                self.live.host.log(
                    "warn",
                    &format!(
                        "{left} journaled effect(s) were not reached by this run of the script"
                    ),
                );
            }
        }
        outcome
    }

    fn pump(&mut self, main: Promise<'js>) -> ScriptOutcome {
        loop {
            if self.stop.requested() {
                return ScriptOutcome::Canceled;
            }
            if let Err(halt) = self.drain_jobs() {
                return halt.outcome();
            }
            let requests = std::mem::take(&mut self.bridge.borrow_mut().requests);
            for (id, op) in requests {
                self.dispatch(id, op);
            }
            if let Err(halt) = self.settle(&main) {
                return halt.outcome();
            }
            if self.ending.is_some() {
                if self.in_flight == 0 {
                    return match self.ending.take() {
                        Some(Ending::Park(park)) => ScriptOutcome::Park(park),
                        Some(Ending::Done(outcome)) => outcome,
                        Some(Ending::Continue(state)) => ScriptOutcome::ContinueAsNew(state),
                        None => ScriptOutcome::Failed(ScriptError::engine("no ending")),
                    };
                }
            } else if let Some((id, meta, result)) = self.ready.pop_front() {
                if let Err(halt) = self.deliver(id, meta, result) {
                    return halt.outcome();
                }
                continue;
            } else if self.in_flight == 0 {
                return ScriptOutcome::Failed(ScriptError::Stalled {
                    site: FailureSite::default(),
                });
            }
            match self.rx.recv_timeout(STOP_POLL) {
                Ok(done) => {
                    self.in_flight -= 1;
                    if let Err(e) = self.complete(done) {
                        return ScriptOutcome::Failed(e);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return ScriptOutcome::Failed(ScriptError::engine("the effect channel closed"))
                }
            }
        }
    }

    /// Runs every queued job. Exceptions inside jobs reject promises the
    /// script holds; only a trip ends the run here.
    fn drain_jobs(&self) -> Result<(), Halt> {
        loop {
            if let Some(t) = self.fuel.tripped() {
                return Err(tripped_halt(self.limits, t));
            }
            if !self.ctx.execute_pending_job() {
                return Ok(());
            }
        }
    }

    /// Notes the default function's end, once.
    fn settle(&mut self, main: &Promise<'js>) -> Result<(), Halt> {
        if self.ending.as_ref().is_some_and(|e| e.rank() >= 1) {
            return Ok(());
        }
        let outcome = match main.state() {
            PromiseState::Pending => return Ok(()),
            PromiseState::Resolved => {
                let value: rquickjs::Value = main
                    .result()
                    .unwrap_or(Err(rquickjs::Error::Exception))
                    .map_err(|e| js_failure(&self.ctx, self.limits, &self.fuel, e))?;
                match self.api.to_json.call::<_, String>((value,)) {
                    Ok(text) => match serde_json::from_str(&text) {
                        Ok(v) => ScriptOutcome::Succeeded(v),
                        Err(e) => ScriptOutcome::Failed(ScriptError::engine(format!(
                            "the result did not read back as JSON: {e}"
                        ))),
                    },
                    Err(e) => match js_failure(&self.ctx, self.limits, &self.fuel, e) {
                        Halt::Fail(ScriptError::Thrown { message, site, .. }) => {
                            ScriptOutcome::Failed(ScriptError::Thrown {
                                message: format!("the script's result is not JSON: {message}"),
                                thrown_code: None,
                                site,
                            })
                        }
                        other => other.outcome(),
                    },
                }
            }
            PromiseState::Rejected => {
                let e = match main.result::<rquickjs::Value>() {
                    Some(Err(e)) => e,
                    _ => rquickjs::Error::Exception,
                };
                js_failure(&self.ctx, self.limits, &self.fuel, e).outcome()
            }
        };
        self.end_with(Ending::Done(outcome));
        Ok(())
    }

    fn end_with(&mut self, ending: Ending) {
        match (&mut self.ending, ending) {
            (None, new) => self.ending = Some(new),
            (Some(Ending::Park(old)), Ending::Park(new)) => merge_park(old, new),
            (Some(old), new) if new.rank() > old.rank() => self.ending = Some(new),
            _ => {}
        }
    }

    fn deliver(
        &mut self,
        id: u32,
        meta: Meta,
        result: Result<Value, EffectError>,
    ) -> Result<(), Halt> {
        self.fuel.reset();
        let call_seq = meta.call_seq as f64;
        let called = match result {
            Ok(value) => self.api.deliver.call::<_, ()>((
                id,
                true,
                value.to_string(),
                None::<String>,
                None::<String>,
                None::<String>,
                call_seq,
            )),
            Err(e) => self.api.deliver.call::<_, ()>((
                id,
                false,
                None::<String>,
                Some(e.code),
                Some(e.message),
                meta.tool,
                call_seq,
            )),
        };
        called.map_err(|e| js_failure(&self.ctx, self.limits, &self.fuel, e))
    }

    fn complete(&mut self, done: Completion) -> Result<(), ScriptError> {
        match done.output? {
            TaskOutput::Deliver(result) => {
                if self.ending.is_none() {
                    self.ready.push_back((done.id, done.meta, result));
                }
            }
            TaskOutput::Park(park) => self.end_with(Ending::Park(park)),
            TaskOutput::Nothing => {}
        }
        Ok(())
    }

    /// Past the run's wall deadline, once the rerun has caught up with its
    /// journal (a replayed effect costs nothing, a new one is not started).
    fn over_wall_budget(&self) -> bool {
        self.wall_deadline_ms.is_some_and(|deadline| {
            self.replay.unconsumed() == 0 && self.live.host.now_ms() >= deadline
        })
    }

    fn ready(&mut self, id: u32, meta: Meta, result: Result<Value, EffectError>) {
        self.ready.push_back((id, meta, result));
    }

    fn spawn<F>(&mut self, id: u32, meta: Meta, task: F)
    where
        F: Future<Output = Result<TaskOutput, ScriptError>> + Send + 'static,
    {
        let tx = self.tx.clone();
        let task_meta = meta.clone();
        let joined = self.handle.spawn(async move {
            let output = match AssertUnwindSafe(task).catch_unwind().await {
                Ok(output) => output,
                Err(panic) => Err(ScriptError::HostPanic(panic_message(&*panic))),
            };
            let _ = tx.send(Completion {
                id,
                meta: task_meta,
                output,
            });
        });
        self.tasks.retain(|t| !t.is_finished());
        self.tasks.push(joined.abort_handle());
        self.in_flight += 1;
    }

    fn dispatch(&mut self, id: u32, op: Op) {
        if let Op::StepEnd { step, value } = op {
            return self.step_end(id, step, value);
        }
        if self.over_wall_budget() {
            // The effect is not started: the run pauses before it, and a
            // rerun after the pause reaches it again.
            return self.end_with(Ending::Park(Park::Budget));
        }
        self.next_seq += 1;
        let counter = self.next_seq;
        let live = self.live.clone();
        match op {
            Op::Call {
                tool,
                input,
                description,
            } => {
                let key = journal::tool_key(&tool, &input);
                let group = self.replay.take(&key);
                let (call_seq, journal_call) = match &group {
                    Some(g) => (g.call_seq, false),
                    None => (counter, true),
                };
                let meta = Meta {
                    call_seq,
                    tool: Some(tool.clone()),
                };
                if let Some(result) = group.as_ref().and_then(|g| g.find("result")) {
                    return self.ready(id, meta, journal::result_of(result));
                }
                self.spawn(id, meta, async move {
                    if journal_call {
                        let mut fields = json!({"tool": tool});
                        if let Some(d) = description {
                            fields["description"] = Value::from(d);
                        }
                        live.append(vec![journal::entry("call", call_seq, &key, fields)])
                            .await?;
                    }
                    let result = live.host.call(&tool, input).await;
                    live.append(vec![journal::result_entry(call_seq, &key, &result)])
                        .await?;
                    Ok(TaskOutput::Deliver(result))
                });
            }
            Op::Delegate { spec } => {
                let key = journal::agent_key(&spec);
                let group = self.replay.take(&key);
                let call_seq = group.as_ref().map_or(counter, |g| g.call_seq);
                let meta = Meta {
                    call_seq,
                    tool: None,
                };
                if let Some(result) = group.as_ref().and_then(|g| g.find("result")) {
                    return self.ready(id, meta, journal::result_of(result));
                }
                let child = group
                    .as_ref()
                    .and_then(|g| g.find("call"))
                    .and_then(|c| c.get("childRunId"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                self.spawn(id, meta, async move {
                    let child = match child {
                        Some(child) => child,
                        None => match live.host.start_child(call_seq, spec).await {
                            Ok(child) => {
                                let fields = json!({"agent": true, "childRunId": child});
                                live.append(vec![journal::entry("call", call_seq, &key, fields)])
                                    .await?;
                                child
                            }
                            Err(e) => {
                                let result = Err(e);
                                live.append(vec![journal::result_entry(call_seq, &key, &result)])
                                    .await?;
                                return Ok(TaskOutput::Deliver(result));
                            }
                        },
                    };
                    let result = live.host.await_child(&child).await;
                    live.append(vec![journal::result_entry(call_seq, &key, &result)])
                        .await?;
                    Ok(TaskOutput::Deliver(result))
                });
            }
            Op::Sleep { ms } => self.sleep(id, counter, ms),
            Op::Wait {
                match_,
                timeout_ms,
                label,
            } => self.wait(id, counter, match_, timeout_ms, label),
            Op::Now => {
                let group = self.replay.take(journal::NOW_KEY);
                if let Some((g, entry)) = group.as_ref().and_then(|g| g.find("now").map(|e| (g, e)))
                {
                    let meta = Meta {
                        call_seq: g.call_seq,
                        tool: None,
                    };
                    let value = entry.get("value").cloned().unwrap_or(Value::Null);
                    return self.ready(id, meta, Ok(value));
                }
                let call_seq = group.as_ref().map_or(counter, |g| g.call_seq);
                let now = self.live.host.now_ms();
                let meta = Meta {
                    call_seq,
                    tool: None,
                };
                self.spawn(id, meta, async move {
                    let entry =
                        journal::entry("now", call_seq, journal::NOW_KEY, json!({"value": now}));
                    live.append(vec![entry]).await?;
                    Ok(TaskOutput::Deliver(Ok(Value::from(now))))
                });
            }
            Op::StepStart { label } => {
                let key = journal::step_key(&label);
                let group = self.replay.take(&key);
                let call_seq = group.as_ref().map_or(counter, |g| g.call_seq);
                let meta = Meta {
                    call_seq,
                    tool: None,
                };
                if let Some(end) = group.as_ref().and_then(|g| g.step_phase("end")) {
                    let value = end.get("value").cloned().unwrap_or(Value::Null);
                    return self.ready(id, meta, Ok(json!({"done": true, "value": value})));
                }
                self.steps.insert(id, (call_seq, label));
                if group.as_ref().and_then(|g| g.step_phase("start")).is_some() {
                    return self.ready(id, meta, Ok(json!({"done": false})));
                }
                self.spawn(id, meta, async move {
                    let entry = journal::entry(
                        "step",
                        call_seq,
                        &format!("{key}|start"),
                        json!({"phase": "start"}),
                    );
                    live.append(vec![entry]).await?;
                    Ok(TaskOutput::Deliver(Ok(json!({"done": false}))))
                });
            }
            Op::Plan { plan } => {
                let key = journal::plan_key(&plan);
                let group = self.replay.take(&key);
                let call_seq = group.as_ref().map_or(counter, |g| g.call_seq);
                let meta = Meta {
                    call_seq,
                    tool: None,
                };
                if group.is_some() {
                    return self.ready(id, meta, Ok(Value::Null));
                }
                self.spawn(id, meta, async move {
                    if let Err(e) = live.host.set_plan(plan).await {
                        return Ok(TaskOutput::Deliver(Err(e)));
                    }
                    live.append(vec![journal::entry("plan", call_seq, &key, json!({}))])
                        .await?;
                    Ok(TaskOutput::Deliver(Ok(Value::Null)))
                });
            }
            Op::ContinueAsNew { state } => {
                let group = self.replay.take(journal::CONTINUE_KEY);
                self.end_with(Ending::Continue(state.clone()));
                if group.is_none() {
                    let meta = Meta {
                        call_seq: counter,
                        tool: None,
                    };
                    self.spawn(id, meta, async move {
                        let entry = journal::entry(
                            "continueAsNew",
                            counter,
                            journal::CONTINUE_KEY,
                            json!({"state": state}),
                        );
                        live.append(vec![entry]).await?;
                        Ok(TaskOutput::Nothing)
                    });
                }
            }
            Op::StepEnd { .. } => {}
        }
    }

    fn step_end(&mut self, id: u32, step: u32, value: Value) {
        let Some((call_seq, label)) = self.steps.remove(&step) else {
            let meta = Meta {
                call_seq: 0,
                tool: None,
            };
            return self.ready(
                id,
                meta,
                Err(EffectError::new(
                    "invalid_step",
                    "ctx.step ended a step that is not open",
                )),
            );
        };
        let live = self.live.clone();
        let meta = Meta {
            call_seq,
            tool: None,
        };
        self.spawn(id, meta, async move {
            let key = format!("{}|end", journal::step_key(&label));
            let entry = journal::entry(
                "step",
                call_seq,
                &key,
                json!({"phase": "end", "value": value}),
            );
            live.append(vec![entry]).await?;
            Ok(TaskOutput::Deliver(Ok(value)))
        });
    }

    fn sleep(&mut self, id: u32, counter: u64, ms: u64) {
        let key = journal::sleep_key(ms);
        let group = self.replay.take(&key);
        let call_seq = group.as_ref().map_or(counter, |g| g.call_seq);
        let meta = Meta {
            call_seq,
            tool: None,
        };
        let resident_max = self.limits.resident_sleep_max.as_millis();
        let live = self.live.clone();
        let fired = move |live: Arc<Live>, key: String| async move {
            live.append(vec![journal::entry("fired", call_seq, &key, json!({}))])
                .await
        };
        match group {
            Some(g) if g.find("fired").is_some() => self.ready(id, meta, Ok(Value::Null)),
            Some(g) => {
                let now = self.live.host.now_ms();
                let wake_at = timer_wake(&g).unwrap_or(now);
                let remaining = wake_at.saturating_sub(now);
                if remaining > 0 && remaining as u128 > resident_max {
                    self.end_with(Ending::Park(Park::Timer {
                        wake_at_ms: wake_at,
                    }));
                    return;
                }
                self.spawn(id, meta, async move {
                    if remaining > 0 {
                        tokio::time::sleep(Duration::from_millis(remaining as u64)).await;
                    }
                    fired(live, key).await?;
                    Ok(TaskOutput::Deliver(Ok(Value::Null)))
                });
            }
            None => {
                let wake_at = self
                    .live
                    .host
                    .now_ms()
                    .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX));
                let resident = ms as u128 <= resident_max;
                self.spawn(id, meta, async move {
                    let timer = journal::entry(
                        "timer",
                        call_seq,
                        &key,
                        json!({"ms": ms, "wakeAt": wake_at}),
                    );
                    live.append(vec![timer]).await?;
                    if !resident {
                        return Ok(TaskOutput::Park(Park::Timer {
                            wake_at_ms: wake_at,
                        }));
                    }
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    fired(live, key).await?;
                    Ok(TaskOutput::Deliver(Ok(Value::Null)))
                });
            }
        }
    }

    fn wait(
        &mut self,
        id: u32,
        counter: u64,
        match_: Value,
        timeout_ms: Option<i64>,
        label: Option<String>,
    ) {
        let key = journal::wait_key(&match_);
        let group = self.replay.take(&key);
        let live = self.live.clone();
        let journaled = group
            .as_ref()
            .and_then(|g| g.find("wait").map(|w| (g.call_seq, w.clone())));
        let Some((call_seq, wait)) = journaled else {
            let call_seq = group.as_ref().map_or(counter, |g| g.call_seq);
            let meta = Meta {
                call_seq,
                tool: None,
            };
            let wait_id = uuid::Uuid::new_v4().to_string();
            let timeout_at = timeout_ms.map(|ms| self.live.host.now_ms().saturating_add(ms));
            return self.spawn(id, meta, async move {
                let mut fields = json!({"waitId": wait_id, "match": match_});
                if let Some(at) = timeout_at {
                    fields["timeoutAt"] = Value::from(at);
                }
                if let Some(label) = &label {
                    fields["label"] = Value::from(label.clone());
                }
                live.append(vec![journal::entry("wait", call_seq, &key, fields)])
                    .await?;
                Ok(TaskOutput::Park(Park::Event {
                    wait_id,
                    match_,
                    timeout_at_ms: timeout_at,
                    label,
                }))
            });
        };
        let meta = Meta {
            call_seq,
            tool: None,
        };
        let wait_id = wait
            .get("waitId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if let Some(event) = self.replay.event(&wait_id) {
            let delivered = if event.get("timedOut").and_then(Value::as_bool) == Some(true) {
                Value::Null
            } else {
                let mut delivered = json!({
                    "signal": event.get("signal").cloned().unwrap_or(Value::Null),
                    "payload": event.get("payload").cloned().unwrap_or(Value::Null),
                });
                // Where it came from, when not a plain signal (a trigger).
                if let Some(source) = event.get("source") {
                    delivered["source"] = source.clone();
                }
                delivered
            };
            return self.ready(id, meta, Ok(delivered));
        }
        let timeout_at = wait.get("timeoutAt").and_then(Value::as_i64);
        if timeout_at.is_some_and(|at| self.live.host.now_ms() >= at) {
            return self.spawn(id, meta, async move {
                let entry = journal::entry(
                    "event",
                    call_seq,
                    &key,
                    json!({"waitId": wait_id, "timedOut": true}),
                );
                live.append(vec![entry]).await?;
                Ok(TaskOutput::Deliver(Ok(Value::Null)))
            });
        }
        self.end_with(Ending::Park(Park::Event {
            wait_id,
            match_: wait.get("match").cloned().unwrap_or(match_),
            timeout_at_ms: timeout_at,
            label: wait
                .get("label")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or(label),
        }));
    }
}

fn timer_wake(group: &Group) -> Option<i64> {
    group.find("timer")?.get("wakeAt")?.as_i64()
}

/// Two parks at once (the script waits on several things): a budget pause
/// wins; a timer's wake is the earliest of the timers; an event wait keeps
/// its id and is woken by the earliest of its timeout and any timer.
fn merge_park(old: &mut Park, new: Park) {
    let earliest = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    match (old, new) {
        // A pause waits for a person; whatever else the script waits on
        // parks again when it resumes and replays.
        (Park::Budget, _) => {}
        (old, Park::Budget) => *old = Park::Budget,
        (Park::Timer { wake_at_ms }, Park::Timer { wake_at_ms: new }) => {
            *wake_at_ms = (*wake_at_ms).min(new)
        }
        (old @ Park::Timer { .. }, new @ Park::Event { .. }) => {
            let Park::Timer { wake_at_ms } = *old else {
                return;
            };
            *old = new;
            if let Park::Event { timeout_at_ms, .. } = old {
                *timeout_at_ms = earliest(*timeout_at_ms, Some(wake_at_ms));
            }
        }
        (Park::Event { timeout_at_ms, .. }, Park::Timer { wake_at_ms }) => {
            *timeout_at_ms = earliest(*timeout_at_ms, Some(wake_at_ms));
        }
        (
            Park::Event { timeout_at_ms, .. },
            Park::Event {
                timeout_at_ms: new, ..
            },
        ) => {
            *timeout_at_ms = earliest(*timeout_at_ms, new);
        }
    }
}
