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

const THREE_CALLS: &str = "export default async function (input, ctx) {
  const a = await ctx.call('echo', 'first');
  const b = await ctx.call('count', 'second');
  const c = await ctx.call('echo', 'third');
  return [a, b, c];
}";

#[tokio::test]
async fn a_rerun_after_a_crash_does_not_repeat_a_journaled_call() {
    // The store dies after the first call's two entries are committed.
    let host = Arc::new(Host {
        fail_journal_after: Some(2),
        ..Host::new()
    });
    let e = failed(run(&host, THREE_CALLS).await);
    assert_eq!(e.code(), "journal_failed");
    assert_eq!(host.entries().len(), 2);
    // Back up, the run is rerun from the top with what was committed.
    let host = Arc::new(Host {
        journal: Mutex::new(host.journal.lock().unwrap().clone()),
        calls: Mutex::new(host.calls.lock().unwrap().clone()),
        ..Host::new()
    });
    assert_eq!(
        succeeded(run(&host, THREE_CALLS).await),
        json!(["first", 1, "third"])
    );
    assert_eq!(host.calls_of("echo"), vec![json!("first"), json!("third")]);
    // The second call was never journaled and ran in the rerun only.
    assert_eq!(host.calls_of("count").len(), 1);
    // A third run replays everything and calls nothing.
    let before = host.calls.lock().unwrap().len();
    assert_eq!(
        succeeded(run(&host, THREE_CALLS).await),
        json!(["first", 1, "third"])
    );
    assert_eq!(host.calls.lock().unwrap().len(), before);
}

#[tokio::test]
async fn a_call_in_flight_when_the_host_panicked_reruns_once_under_its_call_seq() {
    let host = Arc::new(Host {
        explode: true,
        ..Host::new()
    });
    let source = script("const a = await ctx.call('echo', 1);\nconst b = await ctx.call('flaky', 2);\nreturn [a, b];");
    let e = failed(run(&host, &source).await);
    assert_eq!(e.code(), "host_panic");
    // The call entry of the interrupted call is journaled, its result not.
    assert_eq!(host.kinds(), ["call", "result", "call"]);
    let host = Arc::new(Host {
        journal: Mutex::new(host.journal.lock().unwrap().clone()),
        ..Host::new()
    });
    // The finished call replays; the interrupted one runs again, once, and
    // its result joins its group.
    assert_eq!(succeeded(run(&host, &source).await), json!([1, 2]));
    assert!(host.calls_of("echo").is_empty());
    assert_eq!(host.calls_of("flaky"), vec![json!(2)]);
    let entries = host.entries();
    assert_eq!(host.kinds(), ["call", "result", "call", "result"]);
    assert_eq!(entries[3]["callSeq"], 2);
    assert_eq!(entries[3]["key"], entries[2]["key"]);
    assert_eq!(succeeded(run(&host, &source).await), json!([1, 2]));
    assert_eq!(host.calls_of("flaky").len(), 1);
}

#[tokio::test]
async fn the_same_call_twice_replays_first_in_first_out() {
    let host = Arc::new(Host::new());
    let source = script("const a = await ctx.call('count', 'same');\nconst b = await ctx.call('count', 'same');\nreturn [a, b];");
    assert_eq!(succeeded(run(&host, &source).await), json!([1, 2]));
    assert_eq!(succeeded(run(&host, &source).await), json!([1, 2]));
    assert_eq!(host.calls_of("count").len(), 2);
    // A rerun that stopped between the two resumes the second group.
    let host2 = Arc::new(Host::new());
    for e in host.entries().into_iter().take(3) {
        host2.push(e);
    }
    assert_eq!(succeeded(run(&host2, &source).await), json!([1, 1]));
    assert_eq!(host2.kinds(), ["call", "result", "call", "result"]);
    assert_eq!(host2.entries()[3]["callSeq"], 2);
}

#[tokio::test]
async fn now_is_journaled_and_replayed_in_order() {
    let host = Arc::new(Host {
        now_step: 10,
        ..Host::new()
    });
    let source = script("const a = await ctx.now();\nconst b = await ctx.now();\nreturn [a, b];");
    let first = succeeded(run(&host, &source).await);
    assert_eq!(first, json!([1_000_000, 1_000_010]));
    host.now.store(5_000_000, Ordering::SeqCst);
    assert_eq!(succeeded(run(&host, &source).await), first);
    assert_eq!(host.kinds(), ["now", "now"]);
}

#[tokio::test]
async fn a_finished_step_is_skipped_on_replay() {
    let host = Arc::new(Host::new());
    let source = script(
        "const v = await ctx.step('load', async () => { await ctx.call('count', null); return {got: 42}; });
         return v;",
    );
    assert_eq!(succeeded(run(&host, &source).await), json!({"got": 42}));
    assert_eq!(host.kinds(), ["step", "call", "result", "step"]);
    assert_eq!(host.entries()[0]["key"], "step|load|start");
    assert_eq!(host.entries()[3]["key"], "step|load|end");
    assert_eq!(succeeded(run(&host, &source).await), json!({"got": 42}));
    assert_eq!(host.calls_of("count").len(), 1);
    assert_eq!(host.entries().len(), 4);
}

#[tokio::test]
async fn a_short_sleep_stays_resident_and_is_journaled() {
    let host = Arc::new(Host::new());
    assert_eq!(
        succeeded(run(&host, &script("await ctx.sleep(1); return 'woke';")).await),
        json!("woke")
    );
    let entries = host.entries();
    assert_eq!(host.kinds(), ["timer", "fired"]);
    assert_eq!(entries[0]["key"], "sleep|1");
    assert_eq!(entries[0]["ms"], 1);
    assert_eq!(entries[0]["wakeAt"], 1_000_001);
}

#[tokio::test]
async fn a_long_sleep_parks_and_a_rerun_after_the_wake_completes() {
    let host = Arc::new(Host::new());
    let source = script(
        "const a = await ctx.call('count', null);\nawait ctx.sleep(ctx.minutes(5));\nreturn a;",
    );
    match run(&host, &source).await {
        ScriptOutcome::Park(Park::Timer { wake_at_ms }) => {
            assert_eq!(wake_at_ms, 1_000_000 + 300_000)
        }
        other => panic!("{other:?}"),
    }
    // Too early: it parks again at the same time.
    match run(&host, &source).await {
        ScriptOutcome::Park(Park::Timer { wake_at_ms }) => assert_eq!(wake_at_ms, 1_300_000),
        other => panic!("{other:?}"),
    }
    host.now.store(1_300_000, Ordering::SeqCst);
    assert_eq!(succeeded(run(&host, &source).await), json!(1));
    assert_eq!(host.kinds(), ["call", "result", "timer", "fired"]);
    assert_eq!(host.calls_of("count").len(), 1);
}

#[tokio::test]
async fn wait_for_event_parks_and_resolves_with_the_delivered_event() {
    let host = Arc::new(Host::new());
    let source = script(
        "const e = await ctx.waitForEvent({signal: 'approve'}, {label: 'approval'});\nreturn e;",
    );
    let wait_id = match run(&host, &source).await {
        ScriptOutcome::Park(Park::Event {
            wait_id,
            match_,
            timeout_at_ms,
            label,
        }) => {
            assert_eq!(match_, json!({"signal": "approve"}));
            assert_eq!(timeout_at_ms, None);
            assert_eq!(label.as_deref(), Some("approval"));
            wait_id
        }
        other => panic!("{other:?}"),
    };
    // A rerun before the signal parks again with the same wait id.
    match run(&host, &source).await {
        ScriptOutcome::Park(Park::Event { wait_id: again, .. }) => assert_eq!(again, wait_id),
        other => panic!("{other:?}"),
    }
    assert_eq!(host.kinds(), ["wait"]);
    host.push(
        json!({"kind": "event", "waitId": wait_id, "signal": "approve", "payload": {"ok": 1}}),
    );
    assert_eq!(
        succeeded(run(&host, &source).await),
        json!({"signal": "approve", "payload": {"ok": 1}})
    );
}

#[tokio::test]
async fn a_timed_out_wait_resolves_null() {
    let host = Arc::new(Host::new());
    let source = script("return await ctx.waitForEvent({signal: 'go'}, {timeoutMs: 1000});");
    match run(&host, &source).await {
        ScriptOutcome::Park(Park::Event { timeout_at_ms, .. }) => {
            assert_eq!(timeout_at_ms, Some(1_001_000))
        }
        other => panic!("{other:?}"),
    }
    host.now.store(1_001_000, Ordering::SeqCst);
    assert_eq!(succeeded(run(&host, &source).await), json!(null));
    let entries = host.entries();
    assert_eq!(host.kinds(), ["wait", "event"]);
    assert_eq!(entries[1]["timedOut"], true);
    assert_eq!(entries[1]["waitId"], entries[0]["waitId"]);
    // And stays timed out.
    assert_eq!(succeeded(run(&host, &source).await), json!(null));
    assert_eq!(host.entries().len(), 2);
}

#[tokio::test]
async fn the_journal_cap_fails_the_run() {
    let host = Arc::new(Host::new());
    let engine = ScriptEngine::new(ScriptLimits {
        max_journal_entries: 5,
        ..ScriptLimits::default()
    });
    let source = script("for (let i = 0; i < 10; i++) await ctx.call('echo', i);");
    let e = failed(run_on(&engine, &host, &source, json!(null)).await);
    assert_eq!(e.code(), "journal_cap");
    assert_eq!(e.setting(), Some("max_journal_entries"));
    assert!(host.entries().len() <= 5);
    let engine = ScriptEngine::new(ScriptLimits {
        max_journal_bytes: 300,
        ..ScriptLimits::default()
    });
    let host = Arc::new(Host::new());
    let e = failed(run_on(&engine, &host, &source, json!(null)).await);
    assert_eq!(e.setting(), Some("max_journal_bytes"));
}

#[tokio::test]
async fn cancel_interrupts_compute_and_awaits() {
    for (body, cue) in [
        ("ctx.log('spinning');\nwhile (true) {}", "spinning"),
        ("await ctx.call('hang', null);", "hang"),
    ] {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let host = Arc::new(Host {
            signal: Some(tx),
            ..Host::new()
        });
        let engine = ScriptEngine::new(ScriptLimits {
            compute_between_awaits: Duration::from_secs(3600),
            ..ScriptLimits::default()
        });
        let cancel = Arc::new(AtomicBool::new(false));
        let run = ScriptRun {
            run_id: "r".into(),
            source: script(body),
            input: json!(null),
            journal: vec![],
        };
        let running = tokio::spawn({
            let host = host.clone();
            let cancel = cancel.clone();
            async move { engine.run(run, host, cancel).await }
        });
        assert_eq!(rx.recv().await.as_deref(), Some(cue));
        cancel.store(true, Ordering::SeqCst);
        assert!(
            matches!(running.await.unwrap(), ScriptOutcome::Canceled),
            "{body}"
        );
    }
}

#[tokio::test]
async fn continue_as_new_ends_the_run_with_its_state() {
    let host = Arc::new(Host::new());
    let out = run(
        &host,
        &script("await ctx.call('echo', 1);\nreturn ctx.continueAsNew({page: 2});"),
    )
    .await;
    match out {
        ScriptOutcome::ContinueAsNew(state) => assert_eq!(state, json!({"page": 2})),
        other => panic!("{other:?}"),
    }
    assert_eq!(host.kinds(), ["call", "result", "continueAsNew"]);
}

#[tokio::test]
async fn delegate_starts_a_child_and_a_rerun_reconnects_to_it() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let host = Arc::new(Host {
        children_finish: false,
        signal: Some(tx),
        ..Host::new()
    });
    let source = script("const out = await ctx.delegate({brief: 'summarise'});\nreturn out;");
    let cancel = Arc::new(AtomicBool::new(false));
    let running = tokio::spawn({
        let host = host.clone();
        let cancel = cancel.clone();
        let run = ScriptRun {
            run_id: "r".into(),
            source: source.clone(),
            input: json!(null),
            journal: vec![],
        };
        async move { engine().run(run, host, cancel).await }
    });
    assert_eq!(rx.recv().await.as_deref(), Some("awaiting child"));
    cancel.store(true, Ordering::SeqCst);
    assert!(matches!(running.await.unwrap(), ScriptOutcome::Canceled));
    let entries = host.entries();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["kind"], "call");
    assert_eq!(entries[0]["key"], r#"agent|{"brief":"summarise"}"#);
    assert_eq!(entries[0]["childRunId"], "child-1");
    assert_eq!(
        *host.started_children.lock().unwrap(),
        vec![(1, json!({"brief": "summarise"}))]
    );

    let host = Arc::new(Host {
        journal: Mutex::new(host.journal.lock().unwrap().clone()),
        ..Host::new()
    });
    assert_eq!(
        succeeded(run(&host, &source).await),
        json!({"from": "child-1"})
    );
    assert!(host.started_children.lock().unwrap().is_empty());
    assert_eq!(
        *host.awaited_children.lock().unwrap(),
        vec!["child-1".to_owned()]
    );
    assert_eq!(host.kinds(), ["call", "result"]);
}

#[tokio::test]
async fn plan_log_and_progress_reach_the_host() {
    let host = Arc::new(Host::new());
    let source = script(
        "await ctx.plan({steps: [{id: 'a', label: 'A', status: 'pending'}]});
         ctx.log('hello');
         ctx.log('warn', {n: 1});
         ctx.progress(0.5, 'half');
         return 'ok';",
    );
    assert_eq!(succeeded(run(&host, &source).await), json!("ok"));
    assert_eq!(host.plans.lock().unwrap().len(), 1);
    assert_eq!(
        *host.logs.lock().unwrap(),
        vec![
            ("info".to_owned(), "hello".to_owned()),
            ("warn".to_owned(), r#"{"n":1}"#.to_owned())
        ]
    );
    assert_eq!(host.kinds(), ["plan"]);
    // The plan is not set again on replay.
    assert_eq!(succeeded(run(&host, &source).await), json!("ok"));
    assert_eq!(host.plans.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn awaiting_what_nothing_settles_is_a_stall() {
    let host = Arc::new(Host::new());
    let e = failed(run(&host, &script("await new Promise(() => {});")).await);
    assert_eq!(e.code(), "script_stalled");
}

#[tokio::test]
async fn a_panic_on_the_script_thread_fails_the_run() {
    let host = Arc::new(Host {
        panic_on_log: true,
        ..Host::new()
    });
    let e = failed(run(&host, &script("ctx.log('boom');\nreturn 1;")).await);
    assert_eq!(e.code(), "engine_panic");
}

#[tokio::test]
async fn two_hundred_sequential_runs() {
    let engine = engine();
    let source = script("const v = await ctx.call('echo', input);\nreturn v * 2;");
    for i in 0..200 {
        let host = Arc::new(Host::new());
        let out = run_on(&engine, &host, &source, json!(i)).await;
        assert_eq!(succeeded(out), json!(i * 2));
    }
}

#[test]
fn canonical_json_sorts_keys_at_every_level() {
    let v = json!({"b": 1, "a": {"d": [1, {"z": 0, "y": "s"}], "c": null}});
    assert_eq!(
        canonical(&v),
        r#"{"a":{"c":null,"d":[1,{"y":"s","z":0}]},"b":1}"#
    );
}

#[test]
fn codes_are_stable() {
    assert_eq!(ScriptError::invalid("x").code(), "invalid_script");
    assert_eq!(
        ScriptError::JournalCap {
            setting: "max_journal_bytes",
            limit: 1
        }
        .code(),
        "journal_cap"
    );
    assert_eq!(ScriptError::EnginePanic("p".into()).code(), "engine_panic");
}

#[tokio::test]
async fn dropping_the_run_stops_the_script_thread() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let host = Arc::new(Host {
        signal: Some(tx),
        ..Host::new()
    });
    let run = ScriptRun {
        run_id: "r".into(),
        source: script("await ctx.call('hang', null);"),
        input: json!(null),
        journal: vec![],
    };
    let running = tokio::spawn({
        let host: Arc<dyn ScriptHost> = host.clone();
        async move {
            engine()
                .run(run, host, Arc::new(AtomicBool::new(false)))
                .await
        }
    });
    assert_eq!(rx.recv().await.as_deref(), Some("hang"));
    running.abort();
    let _ = running.await;
    // The thread notices, aborts the hanging effect and lets go of the host.
    for _ in 0..500 {
        if Arc::strong_count(&host) == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the script thread still holds the host");
}

#[tokio::test]
async fn a_live_delegate_journals_its_call_and_result() {
    let host = Arc::new(Host::new());
    let out = run(
        &host,
        &script("await ctx.now();\nreturn await ctx.delegate({a: 1});"),
    )
    .await;
    assert_eq!(succeeded(out), json!({"from": "child-1"}));
    assert_eq!(host.kinds(), ["now", "call", "result"]);
    assert_eq!(
        *host.started_children.lock().unwrap(),
        vec![(2, json!({"a": 1}))]
    );
}
