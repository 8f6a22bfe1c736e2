//! The crash-recovery driver behind `scripts/crash-test` and `tests/crash.rs`.
//!
//! Each trial starts the real sidecar (over a fresh or a reused database: for
//! `actor_uds` over a reference socket server it starts as well, for `rivet`
//! over an actor of Rivet's real runtime), drives
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

mod checks;
mod drive;
mod process;
mod trial;
mod verify;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use self::trial::Trial;

/// How long a process may take to come up, or a request to be answered,
/// before the driver calls it a failure rather than waiting forever.
const PATIENCE: Duration = Duration::from_secs(60);
/// The prefix of the text block that carries a prompt's unique marker.
const MARKER: &str = "marker ";
/// The prefix of every idempotency key the driver sends.
const KEY_PREFIX: &str = "crash-";
/// Consecutive trials that may share one database.
const MAX_REUSE_CHAIN: u32 = 4;

/// Where a trial's store lives: a local file, the reference socket server
/// over one, or an actor of Rivet's real runtime (its `actor_uds` socket;
/// the checks read a copy of its tables taken while no sidecar runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    SqliteFile,
    ActorUds,
    Rivet,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::SqliteFile => "sqlite_file",
            Backend::ActorUds => "actor_uds",
            Backend::Rivet => "rivet",
        }
    }

    /// `sqlite_file`, `actor_uds`, `rivet`, `both` (the first two) or `all`.
    pub fn parse_list(s: &str) -> Option<Vec<Backend>> {
        match s {
            "sqlite_file" => Some(vec![Backend::SqliteFile]),
            "actor_uds" => Some(vec![Backend::ActorUds]),
            "rivet" => Some(vec![Backend::Rivet]),
            "both" => Some(vec![Backend::SqliteFile, Backend::ActorUds]),
            "all" => Some(vec![Backend::SqliteFile, Backend::ActorUds, Backend::Rivet]),
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
            actor_socket: None,
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
    /// On Rivet, the runtime socket of the actor holding the current store.
    actor_socket: Option<PathBuf>,
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
