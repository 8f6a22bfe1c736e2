//! Runs benchmark, run by `scripts/bench-runs` (release): on a real
//! `sqlite_file` database, side by side in one run,
//! (1) claim-and-finalize throughput of the queue's statements alone
//!     (runs/s: one claim statement and one finish statement per run),
//! (2) the time the real dispatcher takes to drain 10,000 queued runs
//!     through an executor that finishes each at once (the queue, leases
//!     and publishing, no work),
//! (3) the time to start a QuickJS script run and get its answer: a
//!     trivial module through `ScriptEngine::run` (realm, module, thread,
//!     the answer), p50 and p99 over 500 runs, beside the reference's
//!     reported ~10 ms.
//! It prints figures; it asserts nothing about time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentos_schema::migrate_all;
use agentos_scripts::{
    EffectError, ScriptEngine, ScriptHost, ScriptLimits, ScriptOutcome, ScriptRun,
};
use agentos_sidecar::config::{DatabaseDescriptor, SqliteLimits};
use agentos_sidecar::runs::{
    Caps, Executor, Executors, Finish, LiveRun, NewRun, Origin, Outcome, Queue, Run, RunKind,
    RunStatus, RunStore, Runs, RunsConfig,
};
use serde_json::{json, Value};

const CLAIM_RUNS: u64 = 5_000;
const DRAIN_RUNS: u64 = 10_000;
const SCRIPT_STARTS: usize = 500;

type Error = Box<dyn std::error::Error + Send + Sync>;

async fn database(
    dir: &std::path::Path,
    name: &str,
) -> Result<agentos_schema::SharedDatabase, Error> {
    let db = agentos_storage::open(
        &DatabaseDescriptor::SqliteFile {
            path: dir.join(name),
        },
        &SqliteLimits::default(),
    )
    .await?;
    migrate_all(&*db).await?;
    Ok(db)
}

fn script(i: u64) -> NewRun {
    let mut run = NewRun::root(
        RunKind::Script,
        Origin::System,
        if i.is_multiple_of(2) {
            Queue::Interactive
        } else {
            Queue::Background
        },
        json!({"i": i}),
    );
    run.title = Some(format!("bench {i}"));
    run
}

/// Inserts `n` queued runs in transactions of 500.
async fn fill(store: &RunStore, n: u64) -> Result<(), Error> {
    let mut batch = Vec::new();
    for i in 0..n {
        batch.extend(RunStore::insert_statements(
            &script(i),
            RunStatus::Queued,
            None,
            1,
        ));
        if batch.len() >= 500 || i + 1 == n {
            store.db().transaction(std::mem::take(&mut batch)).await?;
        }
    }
    Ok(())
}

async fn claim_and_finalize(dir: &std::path::Path) -> Result<f64, Error> {
    let db = database(dir, "claims.sqlite").await?;
    let store = RunStore::new(db.clone());
    fill(&store, CLAIM_RUNS).await?;
    let caps = Caps {
        agent: 8,
        script: 32,
    };
    let started = Instant::now();
    let mut done = 0u64;
    while let Some(run) = store.claim("bench", 2, 60_000, caps).await? {
        store
            .finish(&run.run_id, &Finish::Succeeded(json!(1)), None, vec![], 3)
            .await?;
        done += 1;
    }
    let elapsed = started.elapsed();
    db.close().await;
    assert_eq!(done, CLAIM_RUNS, "every run was claimed");
    Ok(done as f64 / elapsed.as_secs_f64())
}

/// Finishes every run at once, counting them.
struct Instant0 {
    done: Arc<AtomicU64>,
}

#[async_trait::async_trait]
impl Executor for Instant0 {
    async fn execute(&self, _runs: &Runs, run: Run, _live: Arc<LiveRun>) -> Outcome {
        self.done.fetch_add(1, Ordering::Relaxed);
        Outcome::Finished(Finish::Succeeded(run.input))
    }

    async fn stop(&self, _run: &Run) {}
}

async fn drain(dir: &std::path::Path) -> Result<Duration, Error> {
    let db = database(dir, "drain.sqlite").await?;
    let runs = Runs::new(db.clone(), RunsConfig::default());
    fill(runs.store(), DRAIN_RUNS).await?;
    let done = Arc::new(AtomicU64::new(0));
    let executor = Arc::new(Instant0 { done: done.clone() });
    runs.set_executors(Executors {
        agent: executor.clone(),
        script: Some(executor),
    });
    let started = Instant::now();
    runs.start();
    while done.load(Ordering::Relaxed) < DRAIN_RUNS || runs.working() > 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = started.elapsed();
    let (agent, script) = runs.store().live_counts().await?;
    assert_eq!((agent, script), (0, 0), "nothing is left live");
    runs.shutdown();
    db.close().await;
    Ok(elapsed)
}

/// A host with no effects: the trivial script calls none.
struct NoHost;

#[async_trait::async_trait]
impl ScriptHost for NoHost {
    async fn call(&self, _tool: &str, _input: Value) -> Result<Value, EffectError> {
        Err(EffectError::new("unavailable", "no tools in the benchmark"))
    }
    async fn start_child(&self, _seq: u64, _spec: Value) -> Result<String, EffectError> {
        Err(EffectError::new(
            "unavailable",
            "no children in the benchmark",
        ))
    }
    async fn await_child(&self, _id: &str) -> Result<Value, EffectError> {
        Err(EffectError::new(
            "unavailable",
            "no children in the benchmark",
        ))
    }
    async fn journal(&self, entries: Vec<Value>) -> Result<Vec<u64>, EffectError> {
        Ok((1..=entries.len() as u64).collect())
    }
    async fn set_plan(&self, _plan: Value) -> Result<(), EffectError> {
        Ok(())
    }
    fn log(&self, _level: &str, _message: &str) {}
    fn progress(&self, _fraction: Option<f64>, _label: Option<&str>) {}
    fn now_ms(&self) -> i64 {
        0
    }
}

async fn script_starts() -> Result<(Duration, Duration), Error> {
    let engine = ScriptEngine::new(ScriptLimits::default());
    let host: Arc<dyn ScriptHost> = Arc::new(NoHost);
    let source = "export default async function (input, ctx) { return input.n + 1; }";
    let mut times = Vec::with_capacity(SCRIPT_STARTS);
    for n in 0..SCRIPT_STARTS {
        let started = Instant::now();
        let outcome = engine
            .run(
                ScriptRun {
                    run_id: format!("r{n}"),
                    source: source.to_owned(),
                    input: json!({"n": n}),
                    journal: vec![],
                    wall_deadline_ms: None,
                },
                host.clone(),
                Arc::new(AtomicBool::new(false)),
            )
            .await;
        times.push(started.elapsed());
        match outcome {
            ScriptOutcome::Succeeded(v) if v == json!(n + 1) => {}
            other => return Err(format!("the script answered {other:?}").into()),
        }
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
    Ok((at(0.5), at(0.99)))
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let dir = tempfile::tempdir()?;
    println!(
        "runs benchmark (sqlite_file, release); load average before: {}",
        load()
    );
    let rate = claim_and_finalize(dir.path()).await?;
    println!("claim + finalize, statements alone: {rate:.0} runs/s ({CLAIM_RUNS} runs)");
    let drained = drain(dir.path()).await?;
    println!(
        "drain {DRAIN_RUNS} queued runs through the dispatcher: {:.2} s ({:.0} runs/s)",
        drained.as_secs_f64(),
        DRAIN_RUNS as f64 / drained.as_secs_f64()
    );
    let (p50, p99) = script_starts().await?;
    println!(
        "QuickJS run start to answer: p50 {:.2} ms, p99 {:.2} ms ({SCRIPT_STARTS} runs; the reference reports about 10 ms, the goal is under 2 ms)",
        p50.as_secs_f64() * 1000.0,
        p99.as_secs_f64() * 1000.0
    );
    println!("load average after: {}", load());
    Ok(())
}
