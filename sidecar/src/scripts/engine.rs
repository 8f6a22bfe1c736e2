//! The QuickJS side of a script run: the realm (limits, the interrupt that
//! enforces the compute budget and cancellation, the prelude, no module
//! loader), loading and checking the workflow module, and the pump that runs
//! on the script's thread: it drains the job queue, turns the effects the
//! script issued into journal lookups or host futures on the tokio runtime,
//! and delivers results one at a time, each only after it is journaled.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use rquickjs::loader::{ImportAttributes, Loader, Resolver};
use rquickjs::promise::PromiseState;
use rquickjs::{
    Coerced, Context, Ctx, Exception, FromJs, Function, Module, Object, Promise, Runtime,
};
use serde_json::{json, Value};
use tokio::runtime::Handle;

use super::journal::{self, Budget, Group, Replay};
use super::{
    panic_message, EffectError, FailureSite, Park, ScriptError, ScriptHost, ScriptLimits,
    ScriptOutcome, ScriptRun,
};

const PRELUDE: &str = include_str!("prelude.js");
const MODULE_NAME: &str = "workflow.js";
const SHAPE: &str = "a script is an ES module with exactly one export, `export default async function (input, ctx) { ... }`";
/// How often the pump looks at the cancel flag while it waits for an effect.
const STOP_POLL: Duration = Duration::from_millis(20);

/// What stops a run from outside: the caller's cancel flag, or the caller
/// having dropped the run's future.
#[derive(Clone)]
pub(crate) struct Stop {
    pub cancel: Arc<AtomicBool>,
    pub abandoned: Arc<AtomicBool>,
}

impl Stop {
    fn never() -> Stop {
        Stop {
            cancel: Arc::new(AtomicBool::new(false)),
            abandoned: Arc::new(AtomicBool::new(false)),
        }
    }

    fn requested(&self) -> bool {
        self.cancel.load(Ordering::SeqCst) || self.abandoned.load(Ordering::SeqCst)
    }
}

/// Why JavaScript was stopped from outside the script.
#[derive(Clone, Debug)]
enum Tripped {
    Fuel,
    Canceled,
    /// A native function the prelude calls panicked; the panic is kept here
    /// because QuickJS sits between it and the pump.
    Panic(String),
}

/// The compute budget and the stop flags, as the interrupt handler sees
/// them. Once tripped it stays tripped, so every later interrupt check stops
/// JavaScript again until the pump notices.
struct Fuel {
    since: Cell<Instant>,
    budget: Duration,
    tripped: RefCell<Option<Tripped>>,
    stop: Stop,
}

impl Fuel {
    fn reset(&self) {
        self.since.set(Instant::now());
    }

    fn trip(&self, why: Tripped) {
        let mut tripped = self.tripped.borrow_mut();
        if tripped.is_none() {
            *tripped = Some(why);
        }
    }

    fn tripped(&self) -> Option<Tripped> {
        self.tripped.borrow().clone()
    }

    /// The interrupt handler: true stops JavaScript with an uncatchable
    /// error.
    fn interrupt(&self) -> bool {
        if self.tripped.borrow().is_some() {
            return true;
        }
        if self.stop.requested() {
            self.trip(Tripped::Canceled);
            return true;
        }
        if self.since.get().elapsed() > self.budget {
            self.trip(Tripped::Fuel);
            return true;
        }
        false
    }
}

/// Refuses every import, static or dynamic: a script is one module.
struct NoImports;

const NO_IMPORTS: &str =
    "imports are unavailable in scripts: a script is one self-contained module, and ctx.call() reaches tools";

impl Resolver for NoImports {
    fn resolve<'js>(
        &mut self,
        _ctx: &Ctx<'js>,
        base: &str,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> rquickjs::Result<String> {
        Err(rquickjs::Error::new_resolving_message(
            base, name, NO_IMPORTS,
        ))
    }
}

impl Loader for NoImports {
    fn load<'js>(
        &mut self,
        _ctx: &Ctx<'js>,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> rquickjs::Result<Module<'js, rquickjs::module::Declared>> {
        Err(rquickjs::Error::new_loading_message(name, NO_IMPORTS))
    }
}

/// One runtime and its one context. The context is declared first so it is
/// dropped before the runtime.
struct Realm {
    context: Context,
    _runtime: Runtime,
    fuel: Rc<Fuel>,
}

fn realm(limits: &ScriptLimits, stop: Stop) -> Result<Realm, ScriptError> {
    let runtime = Runtime::new().map_err(ScriptError::engine)?;
    runtime.set_memory_limit(limits.memory_bytes);
    runtime.set_max_stack_size(limits.stack_bytes);
    runtime.set_loader(NoImports, NoImports);
    let fuel = Rc::new(Fuel {
        since: Cell::new(Instant::now()),
        budget: limits.compute_between_awaits,
        tripped: RefCell::new(None),
        stop,
    });
    let handler_fuel = fuel.clone();
    runtime.set_interrupt_handler(Some(Box::new(move || handler_fuel.interrupt())));
    let context = Context::full(&runtime).map_err(ScriptError::engine)?;
    Ok(Realm {
        context,
        _runtime: runtime,
        fuel,
    })
}

/// An effect as the script issued it.
#[derive(Debug)]
enum Op {
    Call {
        tool: String,
        input: Value,
        description: Option<String>,
    },
    Delegate {
        spec: Value,
    },
    Sleep {
        ms: u64,
    },
    Wait {
        match_: Value,
        timeout_ms: Option<i64>,
        label: Option<String>,
    },
    Now,
    StepStart {
        label: String,
    },
    StepEnd {
        step: u32,
        value: Value,
    },
    Plan {
        plan: Value,
    },
    ContinueAsNew {
        state: Value,
    },
}

fn parse_op(kind: &str, mut payload: Value) -> Result<Op, String> {
    let mut take = |name: &str| payload.get_mut(name).map(Value::take);
    Ok(match kind {
        "call" => Op::Call {
            tool: take("tool")
                .and_then(|v| v.as_str().map(str::to_owned))
                .ok_or("ctx.call: tool must be a string")?,
            input: take("input").unwrap_or(Value::Null),
            description: take("description").and_then(|v| v.as_str().map(str::to_owned)),
        },
        "delegate" => Op::Delegate {
            spec: take("spec").unwrap_or(Value::Null),
        },
        "sleep" => {
            let ms = take("ms")
                .and_then(|v| v.as_f64())
                .ok_or("ctx.sleep: ms must be a number")?;
            // Negative or fractional milliseconds mean "now" and "about that".
            Op::Sleep {
                ms: ms.max(0.0).ceil() as u64,
            }
        }
        "wait" => Op::Wait {
            match_: take("match").unwrap_or_else(|| json!({})),
            timeout_ms: take("timeoutMs")
                .and_then(|v| v.as_f64())
                .map(|ms| ms.max(0.0).ceil() as i64),
            label: take("label").and_then(|v| v.as_str().map(str::to_owned)),
        },
        "now" => Op::Now,
        "stepStart" => Op::StepStart {
            label: take("label")
                .and_then(|v| v.as_str().map(str::to_owned))
                .ok_or("ctx.step: label must be a string")?,
        },
        "stepEnd" => Op::StepEnd {
            step: take("step")
                .and_then(|v| v.as_u64())
                .and_then(|v| u32::try_from(v).ok())
                .ok_or("ctx.step: no such step")?,
            value: take("value").unwrap_or(Value::Null),
        },
        "plan" => Op::Plan {
            plan: take("plan").unwrap_or(Value::Null),
        },
        "continueAsNew" => Op::ContinueAsNew {
            state: take("state").unwrap_or(Value::Null),
        },
        other => return Err(format!("unknown effect {other:?}")),
    })
}

/// Effects issued by the script since the pump last looked.
#[derive(Default)]
struct Bridge {
    next_id: u32,
    requests: Vec<(u32, Op)>,
}

/// The prelude's answer: what the pump calls in the realm.
struct Api<'js> {
    deliver: Function<'js>,
    start: Function<'js>,
    is_async_function: Function<'js>,
    to_json: Function<'js>,
}

/// Runs the prelude with the three natives it builds `ctx` on.
fn install<'js>(
    ctx: &Ctx<'js>,
    fuel: &Rc<Fuel>,
    bridge: &Rc<RefCell<Bridge>>,
    host: Option<Arc<dyn ScriptHost>>,
) -> Result<Api<'js>, ScriptError> {
    let setup = || -> rquickjs::Result<Api<'js>> {
        let effect_bridge = bridge.clone();
        let effect = Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>, kind: String, payload: String| -> rquickjs::Result<u32> {
                let payload: Value = serde_json::from_str(&payload).map_err(|e| {
                    Exception::throw_type(&ctx, &format!("effect input is not JSON: {e}"))
                })?;
                let op = parse_op(&kind, payload).map_err(|m| Exception::throw_type(&ctx, &m))?;
                let mut bridge = effect_bridge.borrow_mut();
                bridge.next_id += 1;
                let id = bridge.next_id;
                bridge.requests.push((id, op));
                Ok(id)
            },
        )?;
        let log_host = host.clone();
        let log_fuel = fuel.clone();
        let log = Function::new(ctx.clone(), move |level: String, message: String| {
            if let Some(host) = &log_host {
                guarded(&log_fuel, || host.log(&level, &message));
            }
        })?;
        let progress_host = host.clone();
        let progress_fuel = fuel.clone();
        let progress = Function::new(
            ctx.clone(),
            move |fraction: Option<f64>, label: Option<String>| {
                if let Some(host) = &progress_host {
                    guarded(&progress_fuel, || host.progress(fraction, label.as_deref()));
                }
            },
        )?;
        let factory: Function = ctx.eval(PRELUDE)?;
        let api: Object = factory.call((effect, log, progress))?;
        Ok(Api {
            deliver: api.get("deliver")?,
            start: api.get("start")?,
            is_async_function: api.get("isAsyncFunction")?,
            to_json: api.get("toJson")?,
        })
    };
    setup().map_err(|e| ScriptError::engine(format!("the realm prelude failed: {e}")))
}

/// Runs a host method on the script thread; a panic in it trips the run
/// instead of unwinding through QuickJS.
fn guarded(fuel: &Fuel, f: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(f)) {
        fuel.trip(Tripped::Panic(panic_message(&*panic)));
    }
}

/// A thrown value, read defensively (it may be anything, and reading it may
/// fail right after an out-of-memory error).
struct Thrown {
    name: Option<String>,
    message: String,
    stack: Option<String>,
    code: Option<String>,
    tool: Option<String>,
    call_seq: Option<u64>,
}

fn read_thrown<'js>(ctx: &Ctx<'js>, value: rquickjs::Value<'js>) -> Thrown {
    if let Some(obj) = value.as_object() {
        let text = |name: &str| -> Option<String> {
            obj.get::<_, rquickjs::Value>(name)
                .ok()
                .and_then(|v| v.as_string().and_then(|s| s.to_string().ok()))
        };
        let stack = text("stack").and_then(|s| script_frames(&s));
        Thrown {
            name: text("name"),
            message: text("message").unwrap_or_default(),
            stack,
            code: text("code"),
            tool: text("tool"),
            call_seq: obj
                .get::<_, Option<f64>>("callSeq")
                .ok()
                .flatten()
                .filter(|n| *n >= 1.0)
                .map(|n| n as u64),
        }
    } else {
        let message = Coerced::<String>::from_js(ctx, value)
            .map(|c| c.0)
            .unwrap_or_else(|_| "a value that is not an Error was thrown".into());
        Thrown {
            name: None,
            message,
            stack: None,
            code: None,
            tool: None,
            call_seq: None,
        }
    }
}

/// Only the script's own frames: the prelude's are noise to its author.
fn script_frames(stack: &str) -> Option<String> {
    let frames: Vec<&str> = stack
        .lines()
        .map(str::trim)
        .filter(|l| l.contains(MODULE_NAME))
        .collect();
    (!frames.is_empty()).then(|| frames.join("\n"))
}

/// The error a thrown value means: a realm limit, or the script's own.
fn classify(limits: &ScriptLimits, thrown: Thrown) -> ScriptError {
    let site = FailureSite {
        stack: thrown.stack.clone(),
        tool: thrown.tool.clone(),
        call_seq: thrown.call_seq,
    };
    let m = thrown.message.to_ascii_lowercase();
    if m.contains("out of memory") {
        return ScriptError::MemoryLimit {
            limit: limits.memory_bytes,
            site,
        };
    }
    if m.contains("stack overflow") || m.contains("maximum call stack size exceeded") {
        return ScriptError::StackLimit {
            limit: limits.stack_bytes,
            site,
        };
    }
    let message = match thrown.name.as_deref() {
        Some(name) if name != "Error" && !name.is_empty() => {
            format!("{name}: {}", thrown.message)
        }
        _ => thrown.message,
    };
    ScriptError::Thrown {
        message,
        thrown_code: thrown.code,
        site,
    }
}

/// How JavaScript stopped early, if it did.
enum Halt {
    Fail(ScriptError),
    Canceled,
}

impl From<ScriptError> for Halt {
    fn from(e: ScriptError) -> Self {
        Halt::Fail(e)
    }
}

impl Halt {
    fn outcome(self) -> ScriptOutcome {
        match self {
            Halt::Fail(e) => ScriptOutcome::Failed(e),
            Halt::Canceled => ScriptOutcome::Canceled,
        }
    }
}

fn tripped_halt(limits: &ScriptLimits, tripped: Tripped) -> Halt {
    match tripped {
        Tripped::Fuel => Halt::Fail(ScriptError::FuelExhausted {
            limit_ms: limits.compute_between_awaits.as_millis(),
            site: FailureSite::default(),
        }),
        Tripped::Canceled => Halt::Canceled,
        Tripped::Panic(message) => Halt::Fail(ScriptError::EnginePanic(message)),
    }
}

/// The error behind a failed rquickjs call, with a trip taking precedence
/// (an interrupt surfaces as an exception too).
fn js_failure<'js>(ctx: &Ctx<'js>, limits: &ScriptLimits, fuel: &Fuel, e: rquickjs::Error) -> Halt {
    if let Some(t) = fuel.tripped() {
        return tripped_halt(limits, t);
    }
    match e {
        rquickjs::Error::Exception => Halt::Fail(classify(limits, read_thrown(ctx, ctx.catch()))),
        other => Halt::Fail(classify(
            limits,
            Thrown {
                name: None,
                message: other.to_string(),
                stack: None,
                code: None,
                tool: None,
                call_seq: None,
            },
        )),
    }
}

/// Declares and evaluates the module and answers its default function, or
/// why the module is not a script.
fn load<'js>(
    ctx: &Ctx<'js>,
    api: &Api<'js>,
    fuel: &Fuel,
    limits: &ScriptLimits,
    source: &str,
) -> Result<Function<'js>, Halt> {
    if source.len() > limits.max_source_bytes {
        return Err(too_large(limits, source).into());
    }
    // A load failure that is not a realm limit is the module's fault.
    let invalid = |halt: Halt| match halt {
        Halt::Fail(ScriptError::Thrown { message, site, .. }) => {
            let at = site.stack.map(|s| format!(" ({s})")).unwrap_or_default();
            Halt::Fail(ScriptError::invalid(format!("{message}{at}")))
        }
        other => other,
    };
    let declared = Module::declare(ctx.clone(), MODULE_NAME, source)
        .map_err(|e| invalid(js_failure(ctx, limits, fuel, e)))?;
    let (module, evaluated) = declared
        .eval()
        .map_err(|e| invalid(js_failure(ctx, limits, fuel, e)))?;
    while evaluated.state() == PromiseState::Pending {
        if let Some(t) = fuel.tripped() {
            return Err(tripped_halt(limits, t));
        }
        if !ctx.execute_pending_job() {
            break;
        }
    }
    if let Some(t) = fuel.tripped() {
        return Err(tripped_halt(limits, t));
    }
    match evaluated.state() {
        PromiseState::Pending => {
            return Err(ScriptError::invalid(
                "the module's top level awaits something that never settles",
            )
            .into())
        }
        PromiseState::Rejected => {
            let e = match evaluated.result::<rquickjs::Value>() {
                Some(Err(e)) => e,
                _ => rquickjs::Error::Exception,
            };
            return Err(invalid(js_failure(ctx, limits, fuel, e)));
        }
        PromiseState::Resolved => {}
    }
    let namespace = module
        .namespace()
        .map_err(|e| js_failure(ctx, limits, fuel, e))?;
    let names: Vec<String> = namespace
        .keys::<String>()
        .collect::<rquickjs::Result<_>>()
        .map_err(|e| js_failure(ctx, limits, fuel, e))?;
    if !names.iter().any(|n| n == "default") {
        return Err(
            ScriptError::invalid(format!("the module has no default export; {SHAPE}")).into(),
        );
    }
    if let Some(other) = names.iter().find(|n| *n != "default") {
        return Err(
            ScriptError::invalid(format!("the module also exports `{other}`; {SHAPE}")).into(),
        );
    }
    let main: rquickjs::Value = namespace
        .get("default")
        .map_err(|e| js_failure(ctx, limits, fuel, e))?;
    let is_async: bool = api
        .is_async_function
        .call((main.clone(),))
        .map_err(|e| js_failure(ctx, limits, fuel, e))?;
    match main.into_function() {
        Some(f) if is_async => Ok(f),
        _ => Err(ScriptError::invalid(format!(
            "the default export is not an async function; {SHAPE}"
        ))
        .into()),
    }
}

pub(crate) fn too_large(limits: &ScriptLimits, source: &str) -> ScriptError {
    ScriptError::invalid(format!(
        "the source is {} bytes, over max_source_bytes ({})",
        source.len(),
        limits.max_source_bytes
    ))
}

pub(crate) fn check(limits: &ScriptLimits, source: &str) -> Result<(), ScriptError> {
    if source.len() > limits.max_source_bytes {
        return Err(too_large(limits, source));
    }
    let realm = realm(limits, Stop::never())?;
    let fuel = realm.fuel.clone();
    realm.context.with(|ctx| {
        let bridge = Rc::new(RefCell::new(Bridge::default()));
        let api = install(&ctx, &fuel, &bridge, None)?;
        fuel.reset();
        match load(&ctx, &api, &fuel, limits, source) {
            Ok(_) => Ok(()),
            Err(Halt::Fail(e)) => Err(e),
            Err(Halt::Canceled) => Err(ScriptError::engine("the check was interrupted")),
        }
    })
}

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
                json!({
                    "signal": event.get("signal").cloned().unwrap_or(Value::Null),
                    "payload": event.get("payload").cloned().unwrap_or(Value::Null),
                })
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

/// Two parks at once (the script waits on several things): a timer's wake
/// is the earliest of the timers; an event wait keeps its id and is woken by
/// the earliest of its timeout and any timer.
fn merge_park(old: &mut Park, new: Park) {
    let earliest = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    match (old, new) {
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
