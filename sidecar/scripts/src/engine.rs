//! The QuickJS side of a script run: the realm (limits, the interrupt that
//! enforces the compute budget and cancellation, the prelude, no module
//! loader), the effects a script issues as the realm hands them over, the
//! reading of what it threw, and loading and checking the workflow module.
//! The pump that runs a module to its outcome is `pump.rs`.

use std::cell::{Cell, RefCell};
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rquickjs::loader::{ImportAttributes, Loader, Resolver};
use rquickjs::promise::PromiseState;
use rquickjs::{Coerced, Context, Ctx, Exception, FromJs, Function, Module, Object, Runtime};
use serde_json::{json, Value};

use super::{panic_message, FailureSite, ScriptError, ScriptHost, ScriptLimits, ScriptOutcome};

pub(super) const PRELUDE: &str = include_str!("prelude.js");
pub(super) const MODULE_NAME: &str = "workflow.js";
pub(super) const SHAPE: &str = "a script is an ES module with exactly one export, `export default async function (input, ctx) { ... }`";
/// How often the pump looks at the cancel flag while it waits for an effect.
pub(super) const STOP_POLL: Duration = Duration::from_millis(20);

/// What stops a run from outside: the caller's cancel flag, or the caller
/// having dropped the run's future.
#[derive(Clone)]
pub(crate) struct Stop {
    pub cancel: Arc<AtomicBool>,
    pub abandoned: Arc<AtomicBool>,
}

impl Stop {
    pub(super) fn never() -> Stop {
        Stop {
            cancel: Arc::new(AtomicBool::new(false)),
            abandoned: Arc::new(AtomicBool::new(false)),
        }
    }

    pub(super) fn requested(&self) -> bool {
        self.cancel.load(Ordering::SeqCst) || self.abandoned.load(Ordering::SeqCst)
    }
}

/// Why JavaScript was stopped from outside the script.
#[derive(Clone, Debug)]
pub(super) enum Tripped {
    Fuel,
    Canceled,
    /// A native function the prelude calls panicked; the panic is kept here
    /// because QuickJS sits between it and the pump.
    Panic(String),
}

/// The compute budget and the stop flags, as the interrupt handler sees
/// them. Once tripped it stays tripped, so every later interrupt check stops
/// JavaScript again until the pump notices.
pub(super) struct Fuel {
    pub(super) since: Cell<Instant>,
    pub(super) budget: Duration,
    pub(super) tripped: RefCell<Option<Tripped>>,
    pub(super) stop: Stop,
}

impl Fuel {
    pub(super) fn reset(&self) {
        self.since.set(Instant::now());
    }

    pub(super) fn trip(&self, why: Tripped) {
        let mut tripped = self.tripped.borrow_mut();
        if tripped.is_none() {
            *tripped = Some(why);
        }
    }

    pub(super) fn tripped(&self) -> Option<Tripped> {
        self.tripped.borrow().clone()
    }

    /// The interrupt handler: true stops JavaScript with an uncatchable
    /// error.
    pub(super) fn interrupt(&self) -> bool {
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
pub(super) struct NoImports;

pub(super) const NO_IMPORTS: &str =
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
pub(super) struct Realm {
    pub(super) context: Context,
    pub(super) _runtime: Runtime,
    pub(super) fuel: Rc<Fuel>,
}

pub(super) fn realm(limits: &ScriptLimits, stop: Stop) -> Result<Realm, ScriptError> {
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
pub(super) enum Op {
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

pub(super) fn parse_op(kind: &str, mut payload: Value) -> Result<Op, String> {
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
pub(super) struct Bridge {
    pub(super) next_id: u32,
    pub(super) requests: Vec<(u32, Op)>,
}

/// The prelude's answer: what the pump calls in the realm.
pub(super) struct Api<'js> {
    pub(super) deliver: Function<'js>,
    pub(super) start: Function<'js>,
    pub(super) is_async_function: Function<'js>,
    pub(super) to_json: Function<'js>,
}

/// Runs the prelude with the three natives it builds `ctx` on.
pub(super) fn install<'js>(
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
pub(super) fn guarded(fuel: &Fuel, f: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(f)) {
        fuel.trip(Tripped::Panic(panic_message(&*panic)));
    }
}

/// A thrown value, read defensively (it may be anything, and reading it may
/// fail right after an out-of-memory error).
pub(super) struct Thrown {
    pub(super) name: Option<String>,
    pub(super) message: String,
    pub(super) stack: Option<String>,
    pub(super) code: Option<String>,
    pub(super) tool: Option<String>,
    pub(super) call_seq: Option<u64>,
}

pub(super) fn read_thrown<'js>(ctx: &Ctx<'js>, value: rquickjs::Value<'js>) -> Thrown {
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
pub(super) fn script_frames(stack: &str) -> Option<String> {
    let frames: Vec<&str> = stack
        .lines()
        .map(str::trim)
        .filter(|l| l.contains(MODULE_NAME))
        .collect();
    (!frames.is_empty()).then(|| frames.join("\n"))
}

/// The error a thrown value means: a realm limit, or the script's own.
pub(super) fn classify(limits: &ScriptLimits, thrown: Thrown) -> ScriptError {
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
pub(super) enum Halt {
    Fail(ScriptError),
    Canceled,
}

impl From<ScriptError> for Halt {
    fn from(e: ScriptError) -> Self {
        Halt::Fail(e)
    }
}

impl Halt {
    pub(super) fn outcome(self) -> ScriptOutcome {
        match self {
            Halt::Fail(e) => ScriptOutcome::Failed(e),
            Halt::Canceled => ScriptOutcome::Canceled,
        }
    }
}

pub(super) fn tripped_halt(limits: &ScriptLimits, tripped: Tripped) -> Halt {
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
pub(super) fn js_failure<'js>(
    ctx: &Ctx<'js>,
    limits: &ScriptLimits,
    fuel: &Fuel,
    e: rquickjs::Error,
) -> Halt {
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
pub(super) fn load<'js>(
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
