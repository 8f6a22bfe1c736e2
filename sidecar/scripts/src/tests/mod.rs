//! Tests of the script engine against real QuickJS and an in-memory host
//! that records what it was asked and keeps the journal in a Vec. They
//! assert behaviour, never timing: concurrency is shown with a barrier,
//! cancellation is triggered by the host seeing the script get somewhere.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, Barrier};

use super::journal::canonical;
use super::*;

#[derive(Default)]
struct Host {
    journal: Mutex<Vec<JournalEntry>>,
    calls: Mutex<Vec<(String, Value)>>,
    now: AtomicI64,
    /// Every `now_ms` adds this much, so two reads differ.
    now_step: i64,
    counter: AtomicUsize,
    /// Journaling fails once the journal would hold more than this.
    fail_journal_after: Option<usize>,
    barrier: Option<Barrier>,
    started_children: Mutex<Vec<(u64, Value)>>,
    awaited_children: Mutex<Vec<String>>,
    /// When false, `await_child` never returns.
    children_finish: bool,
    plans: Mutex<Vec<Value>>,
    logs: Mutex<Vec<(String, String)>>,
    panic_on_log: bool,
    /// The `flaky` tool panics while this is set.
    explode: bool,
    /// Told when the script logs or a hanging effect starts.
    signal: Option<mpsc::UnboundedSender<String>>,
}

impl Host {
    fn new() -> Host {
        Host {
            now: AtomicI64::new(1_000_000),
            children_finish: true,
            ..Host::default()
        }
    }

    fn tell(&self, what: &str) {
        if let Some(tx) = &self.signal {
            let _ = tx.send(what.to_owned());
        }
    }

    fn calls_of(&self, tool: &str) -> Vec<Value> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t == tool)
            .map(|(_, i)| i.clone())
            .collect()
    }

    fn entries(&self) -> Vec<Value> {
        self.journal
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.entry.clone())
            .collect()
    }

    fn kinds(&self) -> Vec<String> {
        self.entries()
            .iter()
            .map(|e| e["kind"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    fn push(&self, entry: Value) {
        let mut journal = self.journal.lock().unwrap();
        let seq = journal.len() as u64 + 1;
        journal.push(JournalEntry { seq, entry });
    }
}

#[async_trait::async_trait]
impl ScriptHost for Host {
    async fn call(&self, tool: &str, input: Value) -> Result<Value, EffectError> {
        self.calls
            .lock()
            .unwrap()
            .push((tool.to_owned(), input.clone()));
        match tool {
            "echo" => Ok(input),
            "count" => Ok(json!(self.counter.fetch_add(1, Ordering::SeqCst) + 1)),
            "fail" => Err(EffectError::new("tool_failed", "the tool broke")),
            "gate" => {
                if let Some(barrier) = &self.barrier {
                    barrier.wait().await;
                }
                Ok(input)
            }
            "hang" => {
                self.tell("hang");
                std::future::pending().await
            }
            "flaky" if self.explode => panic!("the host fell over"),
            "flaky" => Ok(input),
            other => Err(EffectError::new("not_found", format!("no tool {other}"))),
        }
    }

    async fn start_child(&self, call_seq: u64, spec: Value) -> Result<String, EffectError> {
        let mut started = self.started_children.lock().unwrap();
        started.push((call_seq, spec));
        Ok(format!("child-{}", started.len()))
    }

    async fn await_child(&self, child_run_id: &str) -> Result<Value, EffectError> {
        self.awaited_children
            .lock()
            .unwrap()
            .push(child_run_id.to_owned());
        if !self.children_finish {
            self.tell("awaiting child");
            std::future::pending::<()>().await;
        }
        Ok(json!({"from": child_run_id}))
    }

    async fn journal(&self, entries: Vec<Value>) -> Result<Vec<u64>, EffectError> {
        let mut journal = self.journal.lock().unwrap();
        if let Some(max) = self.fail_journal_after {
            if journal.len() + entries.len() > max {
                return Err(EffectError::new("storage", "the store crashed"));
            }
        }
        let mut seqs = Vec::new();
        for entry in entries {
            let seq = journal.len() as u64 + 1;
            journal.push(JournalEntry { seq, entry });
            seqs.push(seq);
        }
        Ok(seqs)
    }

    async fn set_plan(&self, plan: Value) -> Result<(), EffectError> {
        self.plans.lock().unwrap().push(plan);
        Ok(())
    }

    fn log(&self, level: &str, message: &str) {
        if self.panic_on_log {
            panic!("log exploded");
        }
        self.logs
            .lock()
            .unwrap()
            .push((level.to_owned(), message.to_owned()));
        self.tell(message);
    }

    fn progress(&self, _fraction: Option<f64>, _label: Option<&str>) {}

    fn now_ms(&self) -> i64 {
        self.now.fetch_add(self.now_step, Ordering::SeqCst)
    }
}

fn engine() -> ScriptEngine {
    ScriptEngine::new(ScriptLimits::default())
}

fn script(body: &str) -> String {
    format!("export default async function (input, ctx) {{\n{body}\n}}\n")
}

/// Runs `source` with whatever the host has journaled so far.
async fn run_on(
    engine: &ScriptEngine,
    host: &Arc<Host>,
    source: &str,
    input: Value,
) -> ScriptOutcome {
    let journal = host.journal.lock().unwrap().clone();
    let run = ScriptRun {
        run_id: "run-1".into(),
        source: source.to_owned(),
        input,
        journal,
        wall_deadline_ms: None,
    };
    engine
        .run(run, host.clone(), Arc::new(AtomicBool::new(false)))
        .await
}

async fn run(host: &Arc<Host>, source: &str) -> ScriptOutcome {
    run_on(&engine(), host, source, json!(null)).await
}

fn succeeded(outcome: ScriptOutcome) -> Value {
    match outcome {
        ScriptOutcome::Succeeded(v) => v,
        other => panic!("expected success, got {other:?}"),
    }
}

fn failed(outcome: ScriptOutcome) -> ScriptError {
    match outcome {
        ScriptOutcome::Failed(e) => e,
        other => panic!("expected failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_plain_return_succeeds_and_undefined_is_null() {
    let host = Arc::new(Host::new());
    assert_eq!(
        succeeded(run(&host, &script("return {a: [1, 'two']};")).await),
        json!({"a": [1, "two"]})
    );
    assert_eq!(
        succeeded(run(&host, &script("return undefined;")).await),
        json!(null)
    );
    assert_eq!(
        succeeded(run(&host, &script("return () => 1;")).await),
        json!(null)
    );
}

#[tokio::test]
async fn input_and_run_id_are_visible() {
    let host = Arc::new(Host::new());
    let out = run_on(
        &engine(),
        &host,
        &script("return {input, seen: ctx.input.n, runId: ctx.runId};"),
        json!({"n": 7}),
    )
    .await;
    assert_eq!(
        succeeded(out),
        json!({"input": {"n": 7}, "seen": 7, "runId": "run-1"})
    );
}

#[tokio::test]
async fn module_shape_errors_are_invalid_script() {
    let engine = engine();
    assert!(engine.check(&script("return 1;")).is_ok());
    let cases = [
        ("export const x = 1;", "no default export"),
        (
            "export default function (input, ctx) { return 1; }",
            "not an async function",
        ),
        ("export default 5;", "not an async function"),
        (
            "export const helper = 1;\nexport default async function (input, ctx) {}",
            "also exports `helper`",
        ),
        (
            "export default async function (input, ctx) {",
            "SyntaxError",
        ),
        (
            "import x from 'other.js';\nexport default async function () {}",
            "imports are unavailable",
        ),
        (
            "throw new Error('top level broke');\nexport default async function () {}",
            "top level broke",
        ),
    ];
    for (source, needle) in cases {
        let e = engine.check(source).expect_err(source);
        assert_eq!(e.code(), "invalid_script", "{source}");
        assert!(e.to_string().contains(needle), "{source}: {e}");
    }
    let small = ScriptEngine::new(ScriptLimits {
        max_source_bytes: 10,
        ..ScriptLimits::default()
    });
    let e = small.check(&script("return 1;")).unwrap_err();
    assert!(e.to_string().contains("max_source_bytes"), "{e}");
    // A run refuses the same way.
    let host = Arc::new(Host::new());
    let e = failed(run(&host, "export const x = 1;").await);
    assert_eq!(e.code(), "invalid_script");
}

#[tokio::test]
async fn banned_globals_give_clear_errors() {
    let host = Arc::new(Host::new());
    let out = run(
        &host,
        &script(
            "const tries = {
               'Math.random': () => Math.random(),
               'Date': () => new Date(),
               'Date.now': () => Date.now(),
               'setTimeout': () => setTimeout(() => {}, 1),
               'setInterval': () => setInterval(() => {}, 1),
               'fetch': () => fetch('https://example.invalid'),
               'XMLHttpRequest': () => new XMLHttpRequest(),
               'require': () => require('fs'),
               'eval': () => eval('1 + 1'),
               'Function': () => new Function('return 1')(),
               'constructor': () => (function () {}).constructor('return 1')(),
               'AsyncFunction': () => (async function () {}).constructor('return 1'),
               'performance.now': () => performance.now(),
               'WeakRef': () => new WeakRef({}),
               'FinalizationRegistry': () => new FinalizationRegistry(() => {}),
             };
             const out = {};
             for (const [name, f] of Object.entries(tries)) {
               try { f(); out[name] = 'allowed'; } catch (e) { out[name] = e.message; }
             }
             return out;",
        ),
    )
    .await;
    let out = succeeded(out);
    for (name, message) in out.as_object().unwrap() {
        let message = message.as_str().unwrap();
        assert!(
            message.contains("unavailable in scripts"),
            "{name}: {message}"
        );
    }
    assert!(out["Date"].as_str().unwrap().contains("ctx.now()"));
    assert!(out["setTimeout"].as_str().unwrap().contains("ctx.sleep"));
    assert!(out["fetch"].as_str().unwrap().contains("ctx.call"));
}

#[tokio::test]
async fn dynamic_import_is_refused() {
    let host = Arc::new(Host::new());
    let out = run(
        &host,
        &script("try { await import('./other.js'); return 'loaded'; } catch (e) { return String(e.message || e); }"),
    )
    .await;
    let message = succeeded(out);
    assert!(
        message
            .as_str()
            .unwrap()
            .contains("imports are unavailable"),
        "{message}"
    );
}

#[tokio::test]
async fn text_encoder_and_decoder_round_trip_utf8() {
    let host = Arc::new(Host::new());
    let out = run(
        &host,
        &script(
            "const bytes = new TextEncoder().encode('héllo €𝄞');
             return {n: bytes.length, back: new TextDecoder().decode(bytes),
                     bad: new TextDecoder().decode(new Uint8Array([0x61, 0xff, 0x62]))};",
        ),
    )
    .await;
    assert_eq!(
        succeeded(out),
        json!({"n": 14, "back": "héllo €𝄞", "bad": "a\u{fffd}b"})
    );
}

#[tokio::test]
async fn endless_compute_exhausts_fuel() {
    let host = Arc::new(Host::new());
    let engine = ScriptEngine::new(ScriptLimits {
        compute_between_awaits: Duration::from_millis(100),
        ..ScriptLimits::default()
    });
    let e = failed(run_on(&engine, &host, &script("while (true) {}"), json!(null)).await);
    assert_eq!(e.code(), "fuel_exhausted");
    // A try/catch does not save it: the interrupt is uncatchable.
    let e = failed(
        run_on(
            &engine,
            &host,
            &script("await ctx.now(); try { while (true) {} } catch (e) { return 'caught'; }"),
            json!(null),
        )
        .await,
    );
    assert_eq!(e.code(), "fuel_exhausted");
}

#[tokio::test]
async fn a_big_allocation_hits_the_memory_limit() {
    let host = Arc::new(Host::new());
    let engine = ScriptEngine::new(ScriptLimits {
        memory_bytes: 16 << 20,
        ..ScriptLimits::default()
    });
    let e = failed(
        run_on(
            &engine,
            &host,
            &script("const big = 'x'.repeat(64 << 20); return big.length;"),
            json!(null),
        )
        .await,
    );
    assert_eq!(e.code(), "memory_limit", "{e}");
    let e = failed(
        run_on(
            &engine,
            &host,
            &script("const a = []; while (true) a.push(new Array(10000).fill(1.5));"),
            json!(null),
        )
        .await,
    );
    assert_eq!(e.code(), "memory_limit", "{e}");
}

#[tokio::test]
async fn deep_recursion_hits_the_stack_limit() {
    let host = Arc::new(Host::new());
    let e = failed(
        run(
            &host,
            &script("function f(n) { return f(n + 1) + 1; }\nreturn f(0);"),
        )
        .await,
    );
    assert_eq!(e.code(), "stack_limit", "{e}");
}

#[tokio::test]
async fn call_results_are_delivered_after_they_are_journaled() {
    let host = Arc::new(Host::new());
    let out = run(
        &host,
        &script(
            "const a = await ctx.call('echo', {b: 2, a: 1}, {description: 'first'});
             const b = await ctx.call('count', null);
             return [a, b];",
        ),
    )
    .await;
    assert_eq!(succeeded(out), json!([{"a": 1, "b": 2}, 1]));
    let entries = host.entries();
    assert_eq!(entries.len(), 4);
    assert_eq!(entries[0]["kind"], "call");
    assert_eq!(entries[0]["callSeq"], 1);
    assert_eq!(entries[0]["key"], r#"tool|echo|{"a":1,"b":2}"#);
    assert_eq!(entries[0]["description"], "first");
    assert_eq!(entries[1]["kind"], "result");
    assert_eq!(entries[1]["value"], json!({"a": 1, "b": 2}));
    assert_eq!(entries[1]["ok"], true);
    assert_eq!(entries[2]["callSeq"], 2);
    assert_eq!(entries[3]["value"], 1);
}

#[tokio::test]
async fn an_effect_error_reaches_the_script_with_its_code() {
    let host = Arc::new(Host::new());
    let out = run(
        &host,
        &script(
            "try { await ctx.call('fail', {}); }
             catch (e) { return {isError: e instanceof Error, code: e.code, message: e.message, tool: e.tool, callSeq: e.callSeq}; }",
        ),
    )
    .await;
    assert_eq!(
        succeeded(out),
        json!({"isError": true, "code": "tool_failed", "message": "the tool broke", "tool": "fail", "callSeq": 1})
    );
    let result = &host.entries()[1];
    assert_eq!(
        result["error"],
        json!({"code": "tool_failed", "message": "the tool broke"})
    );

    // Uncaught, it fails the run with where it happened.
    let host = Arc::new(Host::new());
    let e = failed(
        run(
            &host,
            &script("await ctx.now();\nawait ctx.call('fail', {});"),
        )
        .await,
    );
    assert_eq!(e.code(), "script_error");
    assert_eq!(e.tool(), Some("fail"));
    assert_eq!(e.call_seq(), Some(2));
    let ScriptError::Thrown { thrown_code, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(thrown_code.as_deref(), Some("tool_failed"));
    assert!(
        e.stack().unwrap_or("").contains("workflow.js:3"),
        "{:?}",
        e.stack()
    );
}

#[tokio::test]
async fn a_thrown_error_fails_with_its_line() {
    let host = Arc::new(Host::new());
    let e = failed(run(&host, &script("const x = 1;\nthrow new TypeError('nope');")).await);
    assert_eq!(e.code(), "script_error");
    assert_eq!(e.to_string(), "TypeError: nope");
    assert!(
        e.stack().unwrap_or("").contains("workflow.js:3"),
        "{:?}",
        e.stack()
    );
}

#[tokio::test]
async fn parallel_runs_host_calls_concurrently() {
    let host = Arc::new(Host {
        barrier: Some(Barrier::new(2)),
        ..Host::new()
    });
    // Each gate call returns only once both have started, so this completes
    // only if the two host futures run at the same time.
    let out = run(
        &host,
        &script("return await ctx.parallel([() => ctx.call('gate', 1), ctx.call('gate', 2)]);"),
    )
    .await;
    assert_eq!(succeeded(out), json!([1, 2]));
    assert_eq!(host.calls_of("gate").len(), 2);
}

#[tokio::test]
async fn parallel_settled_reports_each_outcome() {
    let host = Arc::new(Host::new());
    let out = run(
        &host,
        &script(
            "const r = await ctx.parallelSettled([ctx.call('echo', 'a'), () => ctx.call('fail', {})]);
             return r.map(x => x.status === 'fulfilled' ? x.value : x.reason.code);",
        ),
    )
    .await;
    assert_eq!(succeeded(out), json!(["a", "tool_failed"]));
}

mod replay;
