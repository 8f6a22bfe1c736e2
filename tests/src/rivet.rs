//! Rivet's real actor runtime as a test peer: the published `rivetkit` and
//! the `rivet-engine` it bundles (installed into `.peers/` by
//! `scripts/install-peers`), running the small actor app in
//! `tests/rivet/runtime.cjs`. Each actor it creates owns one SQLite database
//! and provisions one Actor Runtime Socket over it, which an `actor_uds`
//! sidecar is then launched on, exactly as on a real deployment.
//!
//! The app and its engine run in a private network namespace holding only
//! loopback, and a private PID namespace whose first process is the app:
//! nothing they start can reach outside, and nothing outlives the runtime.
//! The app stops its engine by pid when its standard input closes, which
//! happens when [`RivetRuntime`] is dropped or the test process exits. Its
//! home (engine data, the runtime's socket directory) is a temporary
//! directory of its own, which the app removes as it stops.
//!
//! One runtime serves a whole test process ([`RivetRuntime::shared`]);
//! tests create an actor each, under a fresh key, so none sees another's
//! database.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};

/// How long the engine may take to serve its first actor, and one request.
const PATIENCE: Duration = Duration::from_secs(120);

type Waiters = Arc<Mutex<HashMap<u64, mpsc::Sender<Result<Value, String>>>>>;

/// A running Rivet runtime (the app and its engine).
pub struct RivetRuntime {
    child: Mutex<Child>,
    stdin: Mutex<Option<ChildStdin>>,
    waiters: Waiters,
    next_id: AtomicU64,
    /// The engine's pid inside the runtime's PID namespace.
    pub engine_pid: Option<u64>,
    home: tempfile::TempDir,
}

/// The app, beside this crate's sources.
pub fn app_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("rivet/runtime.cjs")
}

/// `.peers/` at the workspace root, where `scripts/install-peers` puts
/// `rivetkit`.
pub fn peers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|root| root.join(".peers"))
        .unwrap_or_else(|| PathBuf::from(".peers"))
}

impl RivetRuntime {
    /// Starts a runtime and waits until its engine serves actors.
    pub fn start() -> Result<RivetRuntime, String> {
        let peers = peers_dir();
        if !peers.join("node_modules/rivetkit/package.json").exists() {
            return Err(format!(
                "rivetkit is not installed in {}: run scripts/install-peers",
                peers.display()
            ));
        }
        let home = tempfile::Builder::new()
            .prefix("agentos-rivet-")
            .tempdir()
            .map_err(|e| format!("a home for the runtime: {e}"))?;
        let stderr = std::fs::File::create(home.path().join("runtime.stderr"))
            .map_err(|e| format!("the runtime's log: {e}"))?;
        let mut child = Command::new("unshare")
            .args(["--net", "--pid", "--fork", "--kill-child", "--"])
            .args(["sh", "-c", "ip link set lo up && exec node \"$0\""])
            .arg(app_script())
            .env("AGENTOS_PEERS", &peers)
            .env("AGENTOS_RIVET_SCRATCH", home.path())
            .env("HOME", home.path())
            .env("XDG_RUNTIME_DIR", home.path())
            // rivetkit unpacks its inspector under the temporary directory
            // and leaves it there: keep it inside the home the app removes.
            .env("TMPDIR", home.path())
            .env("RIVET_TELEMETRY_DISABLE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .map_err(|e| format!("start the rivet runtime (unshare, node): {e}"))?;
        let stdout = child.stdout.take().ok_or("the runtime has no stdout")?;
        let stdin = child.stdin.take();
        let waiters: Waiters = Arc::default();
        let (ready_tx, ready_rx) = mpsc::channel();
        let reader_waiters = waiters.clone();
        std::thread::Builder::new()
            .name("rivet-runtime".into())
            .spawn(move || read_replies(stdout, reader_waiters, ready_tx))
            .map_err(|e| format!("a reader thread: {e}"))?;
        let ready = match ready_rx.recv_timeout(PATIENCE) {
            Ok(ready) => ready,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let log =
                    std::fs::read_to_string(home.path().join("runtime.stderr")).unwrap_or_default();
                let tail: String = log.lines().rev().take(20).collect::<Vec<_>>().join("\n");
                return Err(format!("the rivet runtime never became ready:\n{tail}"));
            }
        };
        Ok(RivetRuntime {
            child: Mutex::new(child),
            stdin: Mutex::new(stdin),
            waiters,
            next_id: AtomicU64::new(1),
            engine_pid: ready["engine"]["pid"].as_u64(),
            home,
        })
    }

    /// One runtime for the whole test process, started on first use. It is
    /// stopped when the process exits (its app sees standard input close).
    pub fn shared() -> Result<&'static RivetRuntime, String> {
        static SHARED: OnceLock<Result<RivetRuntime, String>> = OnceLock::new();
        SHARED
            .get_or_init(RivetRuntime::start)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Where the runtime keeps its engine data and socket directory.
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    fn call(&self, request: Value) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        self.waiters
            .lock()
            .map_err(|_| "the runtime's waiters are poisoned")?
            .insert(id, tx);
        let mut line = request;
        line["id"] = json!(id);
        let answer = self
            .send_line(&line)
            .and_then(|()| {
                rx.recv_timeout(PATIENCE)
                    .map_err(|_| format!("the runtime did not answer {line} in time"))
            })
            .and_then(|answer| answer);
        if answer.is_err() {
            // Nobody waits for a late answer any more.
            if let Ok(mut waiters) = self.waiters.lock() {
                waiters.remove(&id);
            }
        }
        answer
    }

    fn send_line(&self, line: &Value) -> Result<(), String> {
        let mut stdin = self.stdin.lock().map_err(|_| "stdin poisoned")?;
        let stdin = stdin.as_mut().ok_or("the runtime is stopped")?;
        writeln!(stdin, "{line}").map_err(|e| format!("write to the runtime: {e}"))?;
        stdin
            .flush()
            .map_err(|e| format!("write to the runtime: {e}"))
    }

    /// Creates (or finds) the actor `key` and returns the path of its Actor
    /// Runtime Socket.
    pub fn provision(&self, key: &str) -> Result<PathBuf, String> {
        let ok = self.call(json!({"op": "provision", "key": key}))?;
        ok["socket"]
            .as_str()
            .map(PathBuf::from)
            .ok_or_else(|| format!("no socket path in {ok}"))
    }

    /// Runs `sql` through actor `key`'s own database handle (`c.db`), as the
    /// actor's code would; returns its rows as JSON objects.
    pub fn query(&self, key: &str, sql: &str) -> Result<Vec<Value>, String> {
        let ok = self.call(json!({"op": "query", "key": key, "sql": sql}))?;
        ok.as_array()
            .cloned()
            .ok_or_else(|| format!("not rows: {ok}"))
    }

    /// [`provision`](Self::provision) off the async threads.
    pub async fn provision_async(&'static self, key: String) -> Result<PathBuf, String> {
        tokio::task::spawn_blocking(move || self.provision(&key))
            .await
            .map_err(|e| e.to_string())?
    }

    /// [`query`](Self::query) off the async threads.
    pub async fn query_async(
        &'static self,
        key: String,
        sql: String,
    ) -> Result<Vec<Value>, String> {
        tokio::task::spawn_blocking(move || self.query(&key, &sql))
            .await
            .map_err(|e| e.to_string())?
    }
}

impl Drop for RivetRuntime {
    fn drop(&mut self) {
        // Closing standard input asks the app to stop its engine and exit.
        if let Ok(mut stdin) = self.stdin.lock() {
            stdin.take();
        }
        if let Ok(mut child) = self.child.lock() {
            for _ in 0..100 {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // Killing `unshare` kills the namespace's first process, and
            // with it everything else in the namespace.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Reads the app's lines: the ready line once, then replies by id. Lines
/// without the `rivetPeer` mark are the runtime's own logs.
fn read_replies(stdout: std::process::ChildStdout, waiters: Waiters, ready: mpsc::Sender<Value>) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if message["rivetPeer"] != json!(true) {
            continue;
        }
        if message["event"] == "ready" {
            let _ = ready.send(message);
            continue;
        }
        let Some(id) = message["id"].as_u64() else {
            continue;
        };
        let waiter = waiters.lock().ok().and_then(|mut w| w.remove(&id));
        if let Some(waiter) = waiter {
            let reply = match message.get("error") {
                Some(error) => Err(error.as_str().unwrap_or("error").to_owned()),
                None => Ok(message["ok"].clone()),
            };
            let _ = waiter.send(reply);
        }
    }
    // The runtime is gone: everyone still waiting hears so.
    if let Ok(mut waiters) = waiters.lock() {
        for (_, waiter) in waiters.drain() {
            let _ = waiter.send(Err("the rivet runtime exited".into()));
        }
    }
}

/// Copies the `agentos_*` tables of the database behind an Actor Runtime
/// Socket (schema and rows, then indexes and triggers) into a fresh SQLite
/// file at `into`, so checks that read a store file can read an actor's.
/// Run it while no sidecar is writing.
pub async fn snapshot(socket: &Path, into: &Path) -> Result<(), String> {
    use agentos_schema::{Database, SqlValue};
    use agentos_sidecar::config::SqliteLimits;
    use agentos_storage::actor_uds;
    use rusqlite::types::Value as Local;

    let remote = actor_uds::connect(socket, &SqliteLimits::default())
        .await
        .map_err(|e| format!("connect to {}: {e}", socket.display()))?;
    let objects = remote
        .query(
            "SELECT type, name, sql FROM sqlite_master \
             WHERE sql IS NOT NULL AND name LIKE 'agentos\\_%' ESCAPE '\\' \
             ORDER BY type = 'table' DESC, rowid",
            vec![],
        )
        .await
        .map_err(|e| format!("read the schema: {e}"))?;
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut path = into.as_os_str().to_owned();
        path.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(path));
    }
    let mut local = rusqlite::Connection::open(into).map_err(|e| e.to_string())?;
    let copy = local.transaction().map_err(|e| e.to_string())?;
    let text = |v: &SqlValue| match v {
        SqlValue::Text(t) => t.clone(),
        _ => String::new(),
    };
    for object in &objects.rows {
        let (kind, name, sql) = (text(&object[0]), text(&object[1]), text(&object[2]));
        copy.execute_batch(&sql)
            .map_err(|e| format!("create {name}: {e}"))?;
        if kind != "table" {
            continue;
        }
        let rows = remote
            .query(&format!("SELECT * FROM \"{name}\""), vec![])
            .await
            .map_err(|e| format!("read {name}: {e}"))?;
        if rows.columns.is_empty() {
            continue;
        }
        let marks = vec!["?"; rows.columns.len()].join(", ");
        let mut insert = copy
            .prepare(&format!("INSERT INTO \"{name}\" VALUES ({marks})"))
            .map_err(|e| format!("copy {name}: {e}"))?;
        for row in rows.rows {
            let values = row.into_iter().map(|v| match v {
                SqlValue::Null => Local::Null,
                SqlValue::Integer(i) => Local::Integer(i),
                SqlValue::Real(r) => Local::Real(r),
                SqlValue::Text(t) => Local::Text(t),
                SqlValue::Blob(b) => Local::Blob(b),
            });
            insert
                .execute(rusqlite::params_from_iter(values))
                .map_err(|e| format!("copy a row of {name}: {e}"))?;
        }
    }
    copy.commit().map_err(|e| e.to_string())?;
    remote.close().await;
    Ok(())
}
