//! The crash-recovery driver behind `scripts/crash-test` and `tests/crash.rs`.
//!
//! Each trial starts the real sidecar (over a fresh or a reused database, and
//! for `actor_uds` over a reference socket server it starts as well), drives
//! concurrent turns through the fake agent (streams, tools, floods,
//! permissions answered or left pending, cancels, duplicate idempotent
//! prompts) while recording every durable event its subscribers see and every
//! answer it gets, then SIGKILLs the sidecar (or, for `actor_uds`, the socket
//! server first) at a random moment. It checks the file as the crash left it,
//! restarts, and checks again through the database and the host protocol:
//! contiguous sequences and counters equal to the rows, every event seen
//! before the kill present and identical, answers equal to the terminal
//! commits, no prompt left `accepted`, interrupted prompts
//! `prompt_delivery_uncertain` (also on retry), and no prompt ever delivered
//! to an adapter twice. Every broken rule is a [`Violation`].

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agentos_protocol::host::{Actor, EventKind, StoredEvent};
use agentos_sidecar::ctl::{ClientError, HostClient};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rusqlite::{Connection, OpenFlags};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// How long a process may take to come up, or a request to be answered,
/// before the driver calls it a failure rather than waiting forever.
const PATIENCE: Duration = Duration::from_secs(60);
/// The prefix of the text block that carries a prompt's unique marker.
const MARKER: &str = "marker ";
/// The prefix of every idempotency key the driver sends.
const KEY_PREFIX: &str = "crash-";
/// Consecutive trials that may share one database.
const MAX_REUSE_CHAIN: u32 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    SqliteFile,
    ActorUds,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::SqliteFile => "sqlite_file",
            Backend::ActorUds => "actor_uds",
        }
    }

    /// `sqlite_file`, `actor_uds` or `both`.
    pub fn parse_list(s: &str) -> Option<Vec<Backend>> {
        match s {
            "sqlite_file" => Some(vec![Backend::SqliteFile]),
            "actor_uds" => Some(vec![Backend::ActorUds]),
            "both" => Some(vec![Backend::SqliteFile, Backend::ActorUds]),
            _ => None,
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct CrashOptions {
    /// The `agentos-sidecar` binary.
    pub sidecar: PathBuf,
    /// The `agentos-fake-agent` binary.
    pub fake_agent: PathBuf,
    /// Trials per backend.
    pub trials: u32,
    pub backends: Vec<Backend>,
    pub seed: u64,
    /// The kill comes uniformly between 0 and this many ms after start.
    pub max_kill_delay_ms: u64,
    /// One line per trial on standard error.
    pub progress: bool,
}

impl CrashOptions {
    /// Defaults (200 trials, both backends) with the binaries in `bin_dir`.
    pub fn new(bin_dir: &Path) -> Self {
        CrashOptions {
            sidecar: bin_dir.join("agentos-sidecar"),
            fake_agent: bin_dir.join("agentos-fake-agent"),
            trials: 200,
            backends: vec![Backend::SqliteFile, Backend::ActorUds],
            seed: 1,
            max_kill_delay_ms: 1500,
            progress: false,
        }
    }
}

/// The build profile directory (`target/<profile>`) of the running test or
/// example executable, where the workspace binaries are.
pub fn profile_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.to_owned())
}

/// One broken rule.
#[derive(Clone, Debug)]
pub struct Violation {
    pub backend: Backend,
    pub trial: u32,
    pub check: &'static str,
    pub detail: String,
}

/// The figures of a run.
#[derive(Debug, Default)]
pub struct Summary {
    pub trials: u32,
    pub sidecar_kills: u32,
    pub socket_server_kills: u32,
    pub reused_databases: u32,
    pub prompts_sent: u64,
    pub answered_before_kill: u64,
    pub uncertain_prompts: u64,
    pub retries_checked: u64,
    pub events_seen: u64,
    pub permissions_answered: u64,
    pub cancels_sent: u64,
    pub violations: Vec<Violation>,
    /// Oddities that are not violations (slow shutdowns, leftovers).
    pub notes: Vec<String>,
}

impl Summary {
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "trials: {}  (databases reused: {})",
            self.trials, self.reused_databases
        );
        let _ = writeln!(
            out,
            "kills: {}  (sidecar: {}, socket server: {})",
            self.sidecar_kills + self.socket_server_kills,
            self.sidecar_kills,
            self.socket_server_kills
        );
        let _ = writeln!(
            out,
            "prompts sent: {}  answered before the kill: {}  uncertain after restart: {}  retries checked: {}",
            self.prompts_sent, self.answered_before_kill, self.uncertain_prompts, self.retries_checked
        );
        let _ = writeln!(
            out,
            "events seen by subscribers: {}  permissions answered: {}  cancels sent: {}",
            self.events_seen, self.permissions_answered, self.cancels_sent
        );
        for note in self.notes.iter().take(20) {
            let _ = writeln!(out, "note: {note}");
        }
        let _ = writeln!(out, "violations: {}", self.violations.len());
        let mut by_check: BTreeMap<&str, usize> = BTreeMap::new();
        for v in &self.violations {
            *by_check.entry(v.check).or_default() += 1;
        }
        for (check, n) in &by_check {
            let _ = writeln!(out, "  {check}: {n}");
        }
        for v in self.violations.iter().take(50) {
            let _ = writeln!(
                out,
                "  [{} trial {}] {}: {}",
                v.backend.name(),
                v.trial,
                v.check,
                v.detail
            );
        }
        out
    }
}

/// The driver could not run at all (missing binaries, no temp space).
#[derive(Debug)]
pub struct HarnessError(pub String);

impl std::fmt::Display for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HarnessError {}

/// Runs every trial of every backend and returns the figures.
pub async fn run(options: &CrashOptions) -> Result<Summary, HarnessError> {
    for bin in [&options.sidecar, &options.fake_agent] {
        if !bin.is_file() {
            return Err(HarnessError(format!(
                "missing binary {} (build the workspace binaries first)",
                bin.display()
            )));
        }
    }
    let mut summary = Summary::default();
    for (b, backend) in options.backends.iter().enumerate() {
        let dir = tempfile::Builder::new()
            .prefix("crash")
            .tempdir()
            .map_err(|e| HarnessError(format!("cannot create a temporary directory: {e}")))?;
        let mut state = BackendState {
            backend: *backend,
            dir: dir.path().to_owned(),
            db_serial: 0,
            chain: 0,
            sessions: Vec::new(),
            has_db: false,
        };
        let before = summary.violations.len();
        for trial in 1..=options.trials {
            let seed = options
                .seed
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(u64::from(trial) << 8 | b as u64);
            let mut t = Trial::new(options, &mut state, trial, seed);
            t.run(&mut summary).await;
            summary.trials += 1;
            if options.progress {
                eprintln!("{}", t.progress_line());
            }
        }
        if summary.violations.len() > before {
            // Keep the sidecar logs and prompt logs of the failing trials.
            let kept = dir.keep();
            summary.notes.push(format!(
                "{} logs of the failing trials kept in {}",
                backend.name(),
                kept.display()
            ));
        }
    }
    Ok(summary)
}

struct BackendState {
    backend: Backend,
    dir: PathBuf,
    db_serial: u32,
    chain: u32,
    sessions: Vec<(String, &'static str)>,
    has_db: bool,
}

impl BackendState {
    fn db_path(&self) -> PathBuf {
        self.dir.join(format!("db-{}.sqlite", self.db_serial))
    }

    fn remove_db(&self) {
        let db = self.db_path();
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = db.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
    }
}

// ---------------------------------------------------------------------------
// Processes

struct Proc {
    child: Child,
    pid: i32,
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid of a process this driver started.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Processes of process group `pgid` that are still running (not zombies).
fn live_group_members(pgid: i32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 3
            && fields[2].parse::<i32>().ok() == Some(pgid)
            && !matches!(fields[0], "Z" | "X")
        {
            n += 1;
        }
    }
    n
}

/// Waits until the process group of a stopped sidecar (its adapters) is
/// gone, so their prompt log is final; kills leftovers after a while.
async fn drain_group(pgid: i32, notes: &mut Vec<String>) {
    for _ in 0..500 {
        if live_group_members(pgid) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    notes.push(format!(
        "adapters of process group {pgid} outlived their sidecar by 5 s; killed"
    ));
    signal(-pgid, libc::SIGKILL);
    for _ in 0..200 {
        if live_group_members(pgid) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn start_ars(sidecar: &Path, db: &Path, socket: &Path) -> Result<Proc, String> {
    let mut child = Command::new(sidecar)
        .arg("ars-serve")
        .arg("--db")
        .arg(db)
        .arg("--socket")
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the socket server: {e}"))?;
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    let stderr = child
        .stderr
        .take()
        .ok_or("the socket server has no stderr pipe")?;
    let mut lines = BufReader::new(stderr).lines();
    let ready = tokio::time::timeout(PATIENCE, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with("serving ") {
                return Ok(());
            }
        }
        Err("the socket server exited before serving".to_owned())
    })
    .await
    .unwrap_or_else(|_| Err("the socket server did not come up".to_owned()));
    if let Err(e) = ready {
        signal(pid, libc::SIGKILL);
        let _ = child.wait().await;
        return Err(e);
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Proc { child, pid })
}

async fn start_sidecar(sidecar: &Path, config: &Value, stderr: &Path) -> Result<Proc, String> {
    let err_file =
        std::fs::File::create(stderr).map_err(|e| format!("cannot create a log file: {e}"))?;
    let mut child = Command::new(sidecar)
        .args(["serve", "--config", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(err_file))
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the sidecar: {e}"))?;
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(config.to_string().as_bytes()).await;
    }
    let stdout = child
        .stdout
        .take()
        .ok_or("the sidecar has no stdout pipe")?;
    let mut lines = BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(PATIENCE, async {
        match lines.next_line().await {
            Ok(Some(line)) => match serde_json::from_str::<Value>(&line) {
                Ok(v) if v["event"] == "ready" => Ok(()),
                _ => Err(format!("unexpected first line: {line}")),
            },
            _ => Err("the sidecar exited before it was ready".to_owned()),
        }
    })
    .await
    .unwrap_or_else(|_| Err("the sidecar did not become ready".to_owned()));
    if let Err(e) = ready {
        signal(pid, libc::SIGKILL);
        let _ = child.wait().await;
        drain_group(pid, &mut Vec::new()).await;
        let tail = std::fs::read_to_string(stderr).unwrap_or_default();
        let tail: String = tail.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
        return Err(format!("{e}; stderr: {tail}"));
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Proc { child, pid })
}

/// SIGTERM, then SIGKILL if it does not stop; returns a note when it had to.
async fn stop(proc: &mut Proc, what: &str) -> Option<String> {
    signal(proc.pid, libc::SIGTERM);
    match tokio::time::timeout(Duration::from_secs(15), proc.child.wait()).await {
        Ok(Ok(status)) if status.success() => None,
        Ok(Ok(status)) => Some(format!("{what} exited with {status} after SIGTERM")),
        _ => {
            signal(proc.pid, libc::SIGKILL);
            let _ = proc.child.wait().await;
            Some(format!("{what} ignored SIGTERM for 15 s; killed"))
        }
    }
}

// ---------------------------------------------------------------------------
// Driving

#[derive(Clone, Debug)]
enum Outcome {
    /// No answer before the connection ended.
    None,
    Ok(Value),
    /// The JSON-RPC error object.
    Err(Value),
}

#[derive(Clone, Debug)]
struct SentPrompt {
    session: String,
    key: String,
    marker: String,
    command: String,
    content: Vec<Value>,
    /// A second, concurrent send of the same key and content.
    duplicate: bool,
    outcome: Outcome,
}

#[derive(Default)]
struct Seen {
    subscription: Option<String>,
    /// `sessions/event` params as received: `{subscriptionId, event}`.
    events: Vec<Value>,
}

#[derive(Default)]
struct Record {
    seen: BTreeMap<String, Seen>,
    prompts: Vec<SentPrompt>,
    permissions_answered: u64,
    cancels: u64,
}

fn lock(record: &Mutex<Record>) -> MutexGuard<'_, Record> {
    record.lock().unwrap_or_else(|e| e.into_inner())
}

enum CallError {
    Rpc(Value),
    Closed,
}

async fn call(client: &HostClient, method: &str, params: Value) -> Result<Value, CallError> {
    match tokio::time::timeout(PATIENCE, client.call(method, params)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(ClientError::Rpc(e))) => Err(CallError::Rpc(
            serde_json::to_value(&e).unwrap_or_else(|_| json!({"message": e.message})),
        )),
        Ok(Err(_)) | Err(_) => Err(CallError::Closed),
    }
}

fn data_code(error: &Value) -> &str {
    error["data"]["code"].as_str().unwrap_or("")
}

fn pick_command(rng: &mut StdRng, policy: &str) -> String {
    let permission_weight = if policy == "ask" { 25 } else { 8 };
    let roll = rng.gen_range(0..100 + permission_weight);
    match roll {
        0..=24 => format!("stream {}", rng.gen_range(3..80)),
        25..=34 => "tools".to_owned(),
        35..=44 => "wait_for_cancel".to_owned(),
        45..=59 => format!("sleep {}", rng.gen_range(10..300)),
        60..=69 => format!("flood {}", rng.gen_range(10..150)),
        70..=79 => "plan".to_owned(),
        80..=89 => format!("thought t{}", rng.gen_range(0..1000)),
        90..=99 => format!("echo e{}", rng.gen_range(0..1000)),
        _ => "permission".to_owned(),
    }
}

/// One session's client: open, subscribe from the start, then prompts one
/// after another until the connection dies.
async fn session_worker(
    socket: PathBuf,
    session: String,
    policy: &'static str,
    mut rng: StdRng,
    record: Arc<Mutex<Record>>,
) {
    let Ok((client, mut notes)) = HostClient::connect(&socket).await else {
        return;
    };
    let note_client = client.clone();
    let note_record = record.clone();
    let note_session = session.clone();
    let mut note_rng = StdRng::seed_from_u64(rng.gen());
    let notes_task = tokio::spawn(async move {
        while let Some((method, params)) = notes.recv().await {
            if method != "sessions/event" {
                continue;
            }
            let event = params["event"].clone();
            lock(&note_record)
                .seen
                .entry(note_session.clone())
                .or_default()
                .events
                .push(params);
            if event["type"] != "permission_request" {
                continue;
            }
            let request_id = event["requestId"].as_str().unwrap_or("").to_owned();
            let options: Vec<String> = event["options"]
                .as_array()
                .map(|o| {
                    o.iter()
                        .filter_map(|o| o["optionId"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let roll: f64 = note_rng.gen();
            let delay = Duration::from_millis(note_rng.gen_range(0..250));
            let client = note_client.clone();
            let record = note_record.clone();
            let session = note_session.clone();
            if roll < 0.6 && !options.is_empty() {
                let option = options[note_rng.gen_range(0..options.len())].clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let params =
                        json!({"sessionId": session, "requestId": request_id, "optionId": option});
                    if call(&client, "sessions/respondPermission", params)
                        .await
                        .is_ok()
                    {
                        lock(&record).permissions_answered += 1;
                    }
                });
            } else if roll < 0.8 {
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    if call(&client, "sessions/cancel", json!({"sessionId": session}))
                        .await
                        .is_ok()
                    {
                        lock(&record).cancels += 1;
                    }
                });
            }
        }
    });
    let ready = async {
        call(&client, "initialize", json!({"protocolVersion": 1})).await?;
        call(
            &client,
            "sessions/open",
            json!({"sessionId": session, "agent": "echo", "permissionPolicy": policy}),
        )
        .await?;
        call(
            &client,
            "sessions/subscribe",
            json!({"sessionId": session, "after": 0}),
        )
        .await
    };
    match ready.await {
        Ok(v) => {
            let id = v["subscriptionId"].as_str().map(str::to_owned);
            lock(&record)
                .seen
                .entry(session.clone())
                .or_default()
                .subscription = id;
        }
        Err(_) => {
            drop(client);
            let _ = tokio::time::timeout(PATIENCE, notes_task).await;
            return;
        }
    }
    loop {
        let command = pick_command(&mut rng, policy);
        let marker = uuid::Uuid::new_v4().to_string();
        let key = format!("{KEY_PREFIX}{marker}");
        let content = vec![
            json!({"type": "text", "text": format!("{MARKER}{marker}")}),
            json!({"type": "text", "text": command}),
        ];
        let params = json!({"sessionId": session, "content": content, "idempotencyKey": key});
        let sent = SentPrompt {
            session: session.clone(),
            key,
            marker,
            command: command.clone(),
            content,
            duplicate: false,
            outcome: Outcome::None,
        };
        let cancel_after = match command.split(' ').next().unwrap_or("") {
            "wait_for_cancel" => Some(rng.gen_range(0..400)),
            "sleep" | "permission" if rng.gen_bool(0.3) => Some(rng.gen_range(0..300)),
            "stream" | "flood" if rng.gen_bool(0.15) => Some(rng.gen_range(0..20)),
            _ => None,
        };
        if let Some(ms) = cancel_after {
            let client = client.clone();
            let session = session.clone();
            let record = record.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                if call(&client, "sessions/cancel", json!({"sessionId": session}))
                    .await
                    .is_ok()
                {
                    lock(&record).cancels += 1;
                }
            });
        }
        let duplicate = rng.gen_bool(0.1).then(|| rng.gen_range(0..40u64));
        let index = {
            let mut r = lock(&record);
            r.prompts.push(sent.clone());
            if duplicate.is_some() {
                r.prompts.push(SentPrompt {
                    duplicate: true,
                    ..sent
                });
            }
            r.prompts.len() - 1
        };
        let first = call(&client, "sessions/prompt", params.clone());
        let (first, second) = match duplicate {
            None => (first.await, None),
            Some(ms) => {
                let second = async {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    call(&client, "sessions/prompt", params.clone()).await
                };
                let (a, b) = tokio::join!(first, second);
                (a, Some(b))
            }
        };
        let to_outcome = |r: Result<Value, CallError>| match r {
            Ok(v) => (Outcome::Ok(v), false),
            Err(CallError::Rpc(e)) => (Outcome::Err(e), false),
            Err(CallError::Closed) => (Outcome::None, true),
        };
        let mut closed = false;
        {
            let mut r = lock(&record);
            match second {
                None => {
                    let (o, c) = to_outcome(first);
                    r.prompts[index].outcome = o;
                    closed |= c;
                }
                Some(second) => {
                    let (o, c) = to_outcome(first);
                    r.prompts[index - 1].outcome = o;
                    closed |= c;
                    let (o, c) = to_outcome(second);
                    r.prompts[index].outcome = o;
                    closed |= c;
                }
            }
        }
        if closed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..20))).await;
    }
    drop(client);
    let _ = tokio::time::timeout(PATIENCE, notes_task).await;
}

// ---------------------------------------------------------------------------
// Checks on the file

struct PromptRow {
    session: String,
    prompt_id: String,
    state: String,
    result: Option<Value>,
    error: Option<Value>,
    first_input: Option<u64>,
    last_output: Option<u64>,
}

fn open_ro(path: &Path) -> Option<Connection> {
    if !path.is_file() {
        return None;
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()?;
    let _ = conn.busy_timeout(Duration::from_secs(10));
    let migrated: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'agentos_core_vm_counters'",
            [],
            |r| r.get(0),
        )
        .ok()?;
    (migrated == 1).then_some(conn)
}

type Found = Vec<(&'static str, String)>;

/// Sequences contiguous, counters equal to the rows, session state agreeing
/// with the prompts; with `reconciled`, nothing left in flight.
fn check_store(conn: &Connection, reconciled: bool) -> Result<Found, rusqlite::Error> {
    let mut found = Found::new();
    let tx = conn.unchecked_transaction()?;
    let mut aggregates: HashMap<String, (i64, i64, i64, i64)> = HashMap::new();
    {
        let mut stmt = tx.prepare(
            "SELECT session_id, count(*), coalesce(sum(payload_bytes), 0), min(sequence), max(sequence) \
             FROM agentos_core_events GROUP BY session_id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?),
            ))
        })?;
        for row in rows {
            let (sid, agg) = row?;
            aggregates.insert(sid, agg);
        }
    }
    let count = |sql: &str, sid: &str| -> Result<i64, rusqlite::Error> {
        tx.query_row(sql, [sid], |r| r.get(0))
    };
    let mut stmt = tx.prepare(
        "SELECT session_id, state, state_prompt_id, latest_sequence, oldest_retained_sequence, \
           retained_event_count, retained_event_bytes, prompt_count, pending_permission_count, \
           outcome_count FROM agentos_core_sessions",
    )?;
    let sessions = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                [
                    r.get::<_, i64>(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                ],
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    for (sid, state, state_prompt, c) in &sessions {
        let [latest, oldest, n, bytes, prompts, pending, outcomes] = *c;
        let (en, eb, lo, hi) = aggregates.remove(sid).unwrap_or((0, 0, 0, 0));
        if en > 0 && hi - lo + 1 != en {
            found.push((
                "sequence_gap",
                format!("{sid}: {en} events span sequences {lo}..={hi}"),
            ));
        }
        let expected_oldest = if en == 0 { latest + 1 } else { lo };
        if oldest != expected_oldest || (en > 0 && latest != hi) {
            found.push((
                "sequence_counters",
                format!(
                    "{sid}: row says oldest {oldest} latest {latest}; events {lo}..={hi} ({en})"
                ),
            ));
        }
        if n != en || bytes != eb {
            found.push((
                "event_counters",
                format!("{sid}: row says {n} events / {bytes} bytes; rows hold {en} / {eb}"),
            ));
        }
        let rp = count(
            "SELECT count(*) FROM agentos_core_prompts WHERE session_id = ?1",
            sid,
        )?;
        let rpend = count(
            "SELECT count(*) FROM agentos_core_permission_records WHERE session_id = ?1 AND state = 'pending'",
            sid,
        )?;
        let rout = count(
            "SELECT count(*) FROM agentos_core_permission_outcomes WHERE session_id = ?1",
            sid,
        )?;
        if (prompts, pending, outcomes) != (rp, rpend, rout) {
            found.push((
                "record_counters",
                format!(
                    "{sid}: row says prompts {prompts} pending {pending} outcomes {outcomes}; rows hold {rp} / {rpend} / {rout}"
                ),
            ));
        }
        let accepted: Vec<String> = {
            let mut s = tx.prepare(
                "SELECT prompt_id FROM agentos_core_prompts WHERE session_id = ?1 AND state = 'accepted'",
            )?;
            let v = s
                .query_map([sid], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            v
        };
        let busy = state == "running" || state == "waiting";
        let consistent = if busy {
            accepted.len() == 1 && state_prompt.as_deref() == Some(accepted[0].as_str())
        } else {
            accepted.is_empty()
        };
        if !consistent {
            found.push((
                "session_state",
                format!("{sid}: state {state} (prompt {state_prompt:?}) but accepted prompts {accepted:?}"),
            ));
        }
        if busy && (state == "waiting") != (rpend > 0) {
            found.push((
                "session_state",
                format!("{sid}: state {state} with {rpend} pending permissions"),
            ));
        }
        let stray = count(
            "SELECT count(*) FROM agentos_core_permission_records r WHERE r.session_id = ?1 \
               AND r.state = 'pending' AND NOT EXISTS (SELECT 1 FROM agentos_core_prompts p \
               WHERE p.session_id = r.session_id AND p.prompt_id = r.prompt_id AND p.state = 'accepted')",
            sid,
        )?;
        if stray > 0 {
            found.push((
                "permission_state",
                format!("{sid}: {stray} pending permissions of a prompt that is not accepted"),
            ));
        }
        if reconciled && (busy || !accepted.is_empty() || rpend > 0) {
            found.push((
                "not_reconciled",
                format!(
                    "{sid}: after restart state {state}, accepted prompts {accepted:?}, pending permissions {rpend}"
                ),
            ));
        }
    }
    for (sid, (en, ..)) in aggregates {
        found.push((
            "orphan_events",
            format!("{en} events of missing session {sid}"),
        ));
    }
    let vm: [i64; 4] = tx.query_row(
        "SELECT session_count, prompt_count, pending_permission_count, outcome_count \
         FROM agentos_core_vm_counters WHERE singleton = 1",
        [],
        |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?]),
    )?;
    let rows: [i64; 4] = tx.query_row(
        "SELECT (SELECT count(*) FROM agentos_core_sessions), \
           (SELECT count(*) FROM agentos_core_prompts), \
           (SELECT count(*) FROM agentos_core_permission_records WHERE state = 'pending'), \
           (SELECT count(*) FROM agentos_core_permission_outcomes)",
        [],
        |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?]),
    )?;
    if vm != rows {
        found.push((
            "vm_counters",
            format!("counter row [sessions, prompts, pending, outcomes] = {vm:?}; rows {rows:?}"),
        ));
    }
    Ok(found)
}

/// Every stored event of a session in its public shape, by sequence.
fn stored_events(conn: &Connection, sid: &str) -> Result<BTreeMap<u64, Value>, rusqlite::Error> {
    let mut stmt = conn.prepare(
        "SELECT sequence, occurred_at_ms, event_kind, correlation_id, payload_json, outcome_status, \
           terminal_reason, actor_kind, actor_account, actor_signer \
         FROM agentos_core_events WHERE session_id = ?1 ORDER BY sequence",
    )?;
    let rows = stmt.query_map([sid], |r| {
        let kind: String = r.get(2)?;
        let payload: String = r.get(4)?;
        let actor = match r.get::<_, String>(7)?.as_str() {
            "user" => Actor::User {
                account: r.get(8)?,
                signer: r.get(9)?,
            },
            "agent" => Actor::Agent,
            _ => Actor::System,
        };
        Ok(StoredEvent {
            session_id: sid.to_owned(),
            sequence: r.get::<_, i64>(0)? as u64,
            timestamp_ms: r.get(1)?,
            kind: EventKind::parse(&kind).unwrap_or(EventKind::SessionUpdate),
            correlation_id: r.get(3)?,
            outcome_status: r.get(5)?,
            terminal_reason: r.get(6)?,
            actor,
            payload_json: payload,
        })
    })?;
    let mut out = BTreeMap::new();
    for event in rows {
        let event = event?;
        out.insert(event.sequence, event.to_public());
    }
    Ok(out)
}

fn prompt_rows(conn: &Connection) -> Result<HashMap<String, PromptRow>, rusqlite::Error> {
    let mut stmt = conn.prepare(
        "SELECT session_id, prompt_id, idempotency_key, state, result_json, error_json, \
           first_input_sequence, last_output_sequence FROM agentos_core_prompts \
         WHERE idempotency_key IS NOT NULL",
    )?;
    let rows = stmt.query_map([], |r| {
        let json = |s: Option<String>| s.and_then(|s| serde_json::from_str(&s).ok());
        Ok((
            r.get::<_, String>(2)?,
            PromptRow {
                session: r.get(0)?,
                prompt_id: r.get(1)?,
                state: r.get(3)?,
                result: json(r.get(4)?),
                error: json(r.get(5)?),
                first_input: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
                last_output: r.get::<_, Option<i64>>(7)?.map(|v| v as u64),
            },
        ))
    })?;
    let mut out = HashMap::new();
    for row in rows {
        let (key, row) = row?;
        out.insert(format!("{}\u{0}{key}", row.session), row);
    }
    Ok(out)
}

fn row_key(session: &str, key: &str) -> String {
    format!("{session}\u{0}{key}")
}

/// The answer a stored terminal prompt replays.
fn stored_answer(row: &PromptRow) -> Value {
    let mut result = row.result.clone().unwrap_or_else(|| json!({}));
    if let Some(obj) = result.as_object_mut() {
        obj.insert("sessionId".into(), json!(row.session));
        obj.insert("promptId".into(), json!(row.prompt_id));
    }
    result
}

/// Markers of every prompt the adapters received, with counts, and the
/// lines that could not be read (which would hide deliveries).
fn delivered_markers(log: &Path) -> (HashMap<String, usize>, Vec<String>) {
    let mut out = HashMap::new();
    let mut unreadable = Vec::new();
    let Ok(text) = std::fs::read_to_string(log) else {
        return (out, unreadable);
    };
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            unreadable.push(line.chars().take(200).collect());
            continue;
        };
        for block in entry["prompt"].as_array().into_iter().flatten() {
            if let Some(marker) = block["text"].as_str().and_then(|t| t.strip_prefix(MARKER)) {
                *out.entry(marker.to_owned()).or_default() += 1;
            }
        }
    }
    (out, unreadable)
}

// ---------------------------------------------------------------------------
// A trial

enum KillPlan {
    Sidecar,
    /// Kill the socket server, then the sidecar `grace_ms` later.
    SocketServer {
        grace_ms: u64,
    },
}

struct Trial<'a> {
    options: &'a CrashOptions,
    state: &'a mut BackendState,
    number: u32,
    rng: StdRng,
    violations: Vec<Violation>,
    line: String,
}

impl<'a> Trial<'a> {
    fn new(options: &'a CrashOptions, state: &'a mut BackendState, number: u32, seed: u64) -> Self {
        Trial {
            options,
            state,
            number,
            rng: StdRng::seed_from_u64(seed),
            violations: Vec::new(),
            line: String::new(),
        }
    }

    fn violation(&mut self, check: &'static str, detail: impl Into<String>) {
        self.violations.push(Violation {
            backend: self.state.backend,
            trial: self.number,
            check,
            detail: detail.into(),
        });
    }

    fn progress_line(&self) -> String {
        format!(
            "[{} {}/{}] {} violations: {}",
            self.state.backend.name(),
            self.number,
            self.options.trials,
            self.line,
            self.violations.len()
        )
    }

    fn config(&self, log: &Path) -> Value {
        let dir = &self.state.dir;
        let database = match self.state.backend {
            Backend::SqliteFile => json!({"type": "sqlite_file", "path": self.state.db_path()}),
            Backend::ActorUds => json!({"type": "actor_uds", "path": dir.join("a.sock")}),
        };
        json!({
            "database": database,
            "socket": dir.join("h.sock"),
            "agents": {"echo": {
                "command": self.options.fake_agent,
                "args": [],
                "env": {"AGENTOS_FAKE_AGENT_LOG": log},
            }},
        })
    }

    async fn start_ars(&self) -> Result<Option<Proc>, String> {
        match self.state.backend {
            Backend::SqliteFile => Ok(None),
            Backend::ActorUds => start_ars(
                &self.options.sidecar,
                &self.state.db_path(),
                &self.state.dir.join("a.sock"),
            )
            .await
            .map(Some),
        }
    }

    async fn run(&mut self, summary: &mut Summary) {
        // The database: reuse the previous one sometimes.
        let reuse =
            self.state.has_db && self.state.chain < MAX_REUSE_CHAIN && self.rng.gen_bool(0.4);
        if reuse {
            self.state.chain += 1;
            summary.reused_databases += 1;
        } else {
            if self.state.has_db {
                self.state.remove_db();
            }
            self.state.db_serial += 1;
            self.state.chain = 0;
            self.state.has_db = true;
            let policies = ["ask", "allow_all", "ask", "reject_all", "ask"];
            let n = self.rng.gen_range(2..=5);
            self.state.sessions = (0..n).map(|i| (format!("s{i}"), policies[i])).collect();
        }
        let log = self.state.dir.join(format!("agent-{}.log", self.number));
        let config = self.config(&log);
        let stderr_first = self
            .state
            .dir
            .join(format!("sidecar-{}-a.err", self.number));
        let stderr_second = self
            .state
            .dir
            .join(format!("sidecar-{}-b.err", self.number));

        let mut ars = match self.start_ars().await {
            Ok(ars) => ars,
            Err(e) => {
                self.violation("start_failed", e);
                summary
                    .notes
                    .push(format!("trial {}: no socket server", self.number));
                self.finish(summary, None);
                return;
            }
        };
        let sidecar = match start_sidecar(&self.options.sidecar, &config, &stderr_first).await {
            Ok(p) => p,
            Err(e) => {
                self.violation("start_failed", e);
                if let Some(mut ars) = ars.take() {
                    let _ = stop(&mut ars, "socket server").await;
                }
                self.state.has_db = false;
                self.finish(summary, None);
                return;
            }
        };
        let mut sidecar = sidecar;

        // Drive, then kill.
        let record = Arc::new(Mutex::new(Record::default()));
        let socket = self.state.dir.join("h.sock");
        let mut workers = Vec::new();
        for (session, policy) in self.state.sessions.clone() {
            let rng = StdRng::seed_from_u64(self.rng.gen());
            workers.push(tokio::spawn(session_worker(
                socket.clone(),
                session,
                policy,
                rng,
                record.clone(),
            )));
        }
        let plan = if ars.is_some() && self.rng.gen_bool(0.35) {
            KillPlan::SocketServer {
                grace_ms: self.rng.gen_range(0..400),
            }
        } else {
            KillPlan::Sidecar
        };
        let delay = self.rng.gen_range(0..=self.options.max_kill_delay_ms);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let mut ars_killed = false;
        match plan {
            KillPlan::Sidecar => {
                signal(sidecar.pid, libc::SIGKILL);
                summary.sidecar_kills += 1;
                self.line = format!("kill sidecar at {delay} ms;");
            }
            KillPlan::SocketServer { grace_ms } => {
                if let Some(ars) = ars.as_mut() {
                    signal(ars.pid, libc::SIGKILL);
                    let _ = ars.child.wait().await;
                    ars_killed = true;
                }
                summary.socket_server_kills += 1;
                tokio::time::sleep(Duration::from_millis(grace_ms)).await;
                signal(sidecar.pid, libc::SIGKILL);
                self.line =
                    format!("kill socket server at {delay} ms, sidecar {grace_ms} ms later;");
            }
        }
        let _ = sidecar.child.wait().await;
        for worker in workers {
            if tokio::time::timeout(PATIENCE, worker).await.is_err() {
                summary
                    .notes
                    .push(format!("trial {}: a client did not stop", self.number));
            }
        }
        drain_group(sidecar.pid, &mut summary.notes).await;
        if ars_killed {
            ars = None;
        }
        let record = std::mem::take(&mut *lock(&record));

        // The file as the crash left it.
        if let Some(conn) = open_ro(&self.state.db_path()) {
            match check_store(&conn, false) {
                Ok(found) => {
                    for (check, detail) in found {
                        self.violation(check, format!("after the kill: {detail}"));
                    }
                }
                Err(e) => self.violation("unreadable", format!("after the kill: {e}")),
            }
        }

        // Restart.
        if ars.is_none() && self.state.backend == Backend::ActorUds {
            match self.start_ars().await {
                Ok(p) => ars = p,
                Err(e) => {
                    self.violation("restart_failed", format!("socket server: {e}"));
                    self.state.has_db = false;
                    self.finish(summary, Some(&record));
                    return;
                }
            }
        }
        let mut restarted =
            match start_sidecar(&self.options.sidecar, &config, &stderr_second).await {
                Ok(p) => p,
                Err(e) => {
                    self.violation("restart_failed", e);
                    if let Some(mut ars) = ars.take() {
                        let _ = stop(&mut ars, "socket server").await;
                    }
                    self.state.has_db = false;
                    self.finish(summary, Some(&record));
                    return;
                }
            };
        let rows = self.verify_after_restart(&socket, &record, summary).await;
        if let Some(note) = stop(&mut restarted, "restarted sidecar").await {
            summary.notes.push(format!("trial {}: {note}", self.number));
        }
        drain_group(restarted.pid, &mut summary.notes).await;
        if let Some(conn) = open_ro(&self.state.db_path()) {
            match check_store(&conn, true) {
                Ok(found) => {
                    for (check, detail) in found {
                        self.violation(check, format!("after restart and stop: {detail}"));
                    }
                }
                Err(e) => self.violation("unreadable", format!("after restart: {e}")),
            }
        }
        if let Some(mut ars) = ars.take() {
            if let Some(note) = stop(&mut ars, "socket server").await {
                summary.notes.push(format!("trial {}: {note}", self.number));
            }
        }

        // Deliveries.
        let (delivered, unreadable) = delivered_markers(&log);
        for line in unreadable {
            self.violation("unreadable_prompt_log", line);
        }
        for (marker, n) in &delivered {
            if *n > 1 {
                self.violation(
                    "delivered_twice",
                    format!("prompt {marker} reached the adapter {n} times"),
                );
            }
        }
        if let Some(rows) = rows {
            for p in record.prompts.iter().filter(|p| !p.duplicate) {
                let row = rows.get(&row_key(&p.session, &p.key));
                let got = delivered.contains_key(&p.marker);
                match row {
                    None if got => self.violation(
                        "delivered_without_accept",
                        format!(
                            "{} ({}) reached the adapter without a prompt row",
                            p.key, p.command
                        ),
                    ),
                    Some(r)
                        if r.state == "completed"
                            && r.result
                                .as_ref()
                                .is_some_and(|v| v["stopReason"] == "end_turn")
                            && !got =>
                    {
                        self.violation(
                            "completed_without_delivery",
                            format!(
                                "{} ({}) is completed but the adapter never saw it",
                                p.key, p.command
                            ),
                        )
                    }
                    _ => {}
                }
            }
        }
        self.finish(summary, Some(&record));
        if self.violations.is_empty() {
            let _ = std::fs::remove_file(&log);
            let _ = std::fs::remove_file(&stderr_first);
            let _ = std::fs::remove_file(&stderr_second);
        }
    }

    fn finish(&mut self, summary: &mut Summary, record: Option<&Record>) {
        if let Some(record) = record {
            let primary = record.prompts.iter().filter(|p| !p.duplicate);
            summary.prompts_sent += primary.clone().count() as u64;
            summary.answered_before_kill += primary
                .filter(|p| !matches!(p.outcome, Outcome::None))
                .count() as u64;
            summary.events_seen += record
                .seen
                .values()
                .map(|s| s.events.len() as u64)
                .sum::<u64>();
            summary.permissions_answered += record.permissions_answered;
            summary.cancels_sent += record.cancels;
            let _ = write!(
                self.line,
                " prompts {} events {}",
                record.prompts.len(),
                record.seen.values().map(|s| s.events.len()).sum::<usize>()
            );
        }
        summary.violations.append(&mut self.violations.clone());
    }

    /// The protocol-side checks with the restarted sidecar; returns the
    /// prompt rows for the delivery checks.
    async fn verify_after_restart(
        &mut self,
        socket: &Path,
        record: &Record,
        summary: &mut Summary,
    ) -> Option<HashMap<String, PromptRow>> {
        let Some(conn) = open_ro(&self.state.db_path()) else {
            if record
                .prompts
                .iter()
                .any(|p| matches!(p.outcome, Outcome::Ok(_)))
            {
                self.violation(
                    "database_missing",
                    "answers were given but no database exists",
                );
            }
            return None;
        };
        let client = match HostClient::connect(socket).await {
            Ok((client, _notes)) => client,
            Err(e) => {
                self.violation("restart_failed", format!("cannot connect: {e}"));
                return None;
            }
        };
        if call(&client, "initialize", json!({"protocolVersion": 1}))
            .await
            .is_err()
        {
            self.violation("restart_failed", "initialize failed");
            return None;
        }
        let sessions: Vec<String> = match conn
            .prepare("SELECT session_id FROM agentos_core_sessions ORDER BY session_id")
            .and_then(|mut s| {
                s.query_map([], |r| r.get(0))?
                    .collect::<Result<Vec<String>, _>>()
            }) {
            Ok(s) => s,
            Err(e) => {
                self.violation("unreadable", e.to_string());
                return None;
            }
        };
        let mut stored: HashMap<String, BTreeMap<u64, Value>> = HashMap::new();
        for sid in &sessions {
            let rows = match stored_events(&conn, sid) {
                Ok(rows) => rows,
                Err(e) => {
                    self.violation("unreadable", e.to_string());
                    continue;
                }
            };
            // History through the protocol equals the rows.
            let mut history = BTreeMap::new();
            let mut after = rows.keys().next().map_or(0, |first| first - 1);
            loop {
                let page = call(
                    &client,
                    "sessions/history",
                    json!({"sessionId": sid, "after": after, "limit": 1000}),
                )
                .await;
                let Ok(page) = page else {
                    self.violation("history_failed", format!("{sid}: history after {after}"));
                    break;
                };
                let events = page["events"].as_array().cloned().unwrap_or_default();
                for e in &events {
                    if let Some(seq) = e["sequence"].as_u64() {
                        history.insert(seq, e.clone());
                        after = seq;
                    }
                }
                if events.is_empty() || page["hasMoreAfter"] != true {
                    break;
                }
            }
            if history != rows {
                let differing = rows
                    .iter()
                    .find(|(seq, v)| history.get(seq) != Some(v))
                    .map(|(seq, _)| *seq);
                self.violation(
                    "history_mismatch",
                    format!(
                        "{sid}: history has {} events, rows {}; first difference at {differing:?}",
                        history.len(),
                        rows.len()
                    ),
                );
            }
            stored.insert(sid.clone(), rows);
        }

        // What subscribers saw before the kill is there, unchanged.
        for (sid, seen) in &record.seen {
            let rows = stored.get(sid);
            let mut previous: Option<u64> = None;
            for params in &seen.events {
                let event = &params["event"];
                let Some(seq) = event["sequence"].as_u64() else {
                    self.violation("bad_event", format!("{sid}: event without sequence"));
                    continue;
                };
                if seen.subscription.is_some()
                    && params["subscriptionId"].as_str() != seen.subscription.as_deref()
                {
                    self.violation(
                        "bad_event",
                        format!("{sid}: event for another subscription"),
                    );
                }
                let expected_next = previous.map_or(1, |p| p + 1);
                if seq != expected_next {
                    self.violation(
                        "subscription_gap",
                        format!("{sid}: subscriber saw {seq} after {previous:?}"),
                    );
                }
                previous = Some(seq);
                match rows.and_then(|r| r.get(&seq)) {
                    None => self.violation(
                        "seen_event_lost",
                        format!(
                            "{sid}: sequence {seq} ({}) was seen but is gone",
                            event["type"]
                        ),
                    ),
                    Some(stored) if stored != event => self.violation(
                        "seen_event_changed",
                        format!("{sid}: sequence {seq}: seen {event} stored {stored}"),
                    ),
                    Some(_) => {}
                }
            }
        }

        // Prompts: answers equal commits; interruptions are uncertain.
        let rows = match prompt_rows(&conn) {
            Ok(rows) => rows,
            Err(e) => {
                self.violation("unreadable", e.to_string());
                return None;
            }
        };
        for p in &record.prompts {
            let row = rows.get(&row_key(&p.session, &p.key));
            let tag = format!("{} {} ({})", p.session, p.key, p.command);
            // Sends are sequential per session, so only the other send of
            // the same key can make a session busy: that is in progress.
            if let Outcome::Err(e) = &p.outcome {
                if data_code(e) == "session_busy" {
                    self.violation(
                        "same_key_not_in_progress",
                        format!("{tag}: a concurrent send of the same key answered {e}"),
                    );
                }
            }
            if p.duplicate {
                if let (Outcome::Ok(v), Some(r)) = (&p.outcome, row) {
                    if *v != stored_answer(r) {
                        self.violation(
                            "duplicate_answer_differs",
                            format!("{tag}: duplicate got {v}, stored {}", stored_answer(r)),
                        );
                    }
                }
                continue;
            }
            let Some(r) = row else {
                if let Outcome::Ok(v) = &p.outcome {
                    self.violation(
                        "answered_without_commit",
                        format!("{tag}: answered {v} but no prompt row exists"),
                    );
                }
                continue;
            };
            match r.state.as_str() {
                "accepted" => {
                    self.violation("accepted_after_restart", tag.clone());
                    continue;
                }
                "failed" => {
                    let code = r
                        .error
                        .as_ref()
                        .map_or("", |e| e["code"].as_str().unwrap_or(""));
                    if code == "prompt_delivery_uncertain" {
                        summary.uncertain_prompts += 1;
                        if r.error.as_ref().map(|e| &e["retryable"]) != Some(&json!(true)) {
                            self.violation("uncertain_not_retryable", tag.clone());
                        }
                    }
                    // An answer that the commit's outcome is unknown
                    // explains any stored state; the retry below must then
                    // replay what was stored.
                    let explained = matches!(&p.outcome, Outcome::Err(e)
                        if data_code(e) == code || data_code(e) == "commit_outcome_unknown");
                    if code != "prompt_delivery_uncertain" && !explained {
                        self.violation(
                            "unexpected_failure",
                            format!("{tag}: failed with {:?}", r.error),
                        );
                    }
                    if let Outcome::Ok(v) = &p.outcome {
                        self.violation(
                            "answer_differs_from_commit",
                            format!("{tag}: answered {v} but stored failed {:?}", r.error),
                        );
                    }
                }
                _ => {
                    let answer = stored_answer(r);
                    if let Outcome::Ok(v) = &p.outcome {
                        if *v != answer {
                            self.violation(
                                "answer_differs_from_commit",
                                format!("{tag}: answered {v}, stored {answer}"),
                            );
                        }
                    }
                    if let Outcome::Err(e) = &p.outcome {
                        // `prompt_in_progress` honestly names a concurrent
                        // send of the same key that went first.
                        if r.state == "completed"
                            && data_code(e) != "prompt_in_progress"
                            && data_code(e) != "commit_outcome_unknown"
                        {
                            self.violation(
                                "answer_differs_from_commit",
                                format!("{tag}: answered error {e}, stored completed {answer}"),
                            );
                        }
                    }
                    if let Some(events) = stored.get(&p.session) {
                        self.check_turn_events(&tag, p, r, events);
                    }
                }
            }
            // The retry replays the stored outcome and delivers nothing.
            let params =
                json!({"sessionId": p.session, "content": p.content, "idempotencyKey": p.key});
            let retry = call(&client, "sessions/prompt", params).await;
            summary.retries_checked += 1;
            match (r.state.as_str(), retry) {
                ("failed", Err(CallError::Rpc(e))) => {
                    let code = r
                        .error
                        .as_ref()
                        .map_or("", |e| e["code"].as_str().unwrap_or(""));
                    if data_code(&e) != code
                        || (code == "prompt_delivery_uncertain" && e["data"]["retryable"] != true)
                    {
                        self.violation(
                            "retry_mismatch",
                            format!("{tag}: stored failure {code}, retry answered {e}"),
                        );
                    }
                }
                ("completed" | "cancelled", Ok(v)) if v == stored_answer(r) => {}
                (state, Ok(v)) => self.violation(
                    "retry_mismatch",
                    format!("{tag}: stored {state}, retry answered {v}"),
                ),
                (state, Err(CallError::Rpc(e))) => self.violation(
                    "retry_mismatch",
                    format!("{tag}: stored {state}, retry failed {e}"),
                ),
                (_, Err(CallError::Closed)) => {
                    self.violation("restart_failed", format!("{tag}: no answer to the retry"))
                }
            }
        }
        Some(rows)
    }

    /// A completed turn's events are all there: its input, and for a
    /// finished stream every chunk in order.
    fn check_turn_events(
        &mut self,
        tag: &str,
        p: &SentPrompt,
        r: &PromptRow,
        events: &BTreeMap<u64, Value>,
    ) {
        let (Some(first), Some(last)) = (r.first_input, r.last_output) else {
            self.violation(
                "completed_without_events",
                format!("{tag}: {} without input/output sequences", r.state),
            );
            return;
        };
        let turn: Vec<&Value> = events.range(first..=last).map(|(_, v)| v).collect();
        if turn.len() as u64 != last + 1 - first {
            self.violation(
                "completed_without_events",
                format!("{tag}: sequences {first}..={last} are not all stored"),
            );
            return;
        }
        let marker = format!("{MARKER}{}", p.marker);
        if !turn
            .iter()
            .any(|e| e["type"] == "user_message_chunk" && e["content"]["text"] == marker.as_str())
        {
            self.violation(
                "completed_without_events",
                format!("{tag}: its input is not among sequences {first}..={last}"),
            );
        }
        let ended = r
            .result
            .as_ref()
            .is_some_and(|v| v["stopReason"] == "end_turn");
        if let Some(n) = p.command.strip_prefix("stream ") {
            let n: u64 = n.parse().unwrap_or(0);
            if ended {
                let text: String = turn
                    .iter()
                    .filter(|e| e["type"] == "agent_message_chunk")
                    .filter_map(|e| e["content"]["text"].as_str())
                    .collect();
                let expected: String = (0..n).map(|i| format!("c{i} ")).collect();
                if text != expected {
                    self.violation(
                        "completed_output_mismatch",
                        format!("{tag}: stored text {text:?}, streamed {expected:?}"),
                    );
                }
            }
        }
        if p.command == "tools" && ended {
            let done = turn
                .iter()
                .any(|e| e["type"] == "tool_call_update" && e["status"] == "completed");
            if !done {
                self.violation(
                    "completed_output_mismatch",
                    format!("{tag}: completed tools turn without its completed tool call"),
                );
            }
        }
    }
}
