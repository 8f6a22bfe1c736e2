//! Shared harness for the end-to-end tests: starts the real `agentos-sidecar`
//! binary (and, for the `actor_uds` backend, a real `ars-serve` child first)
//! with a config on standard input, waits for its ready line, connects a host
//! client and kills every child process on drop.
//!
//! The binaries are found next to the test executable's `deps` directory.
//! They are built by `cargo test --workspace` (cargo builds every bin target
//! of a package whose integration tests run, and the sidecar and adapter
//! packages have some). When only this package is tested, build the bins
//! first: `cargo build --bins && cargo test -p agentos-tests`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agentos_client::ctl::{ClientError, HostClient, Notification};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc::UnboundedReceiver;

/// Generous bound for anything that should happen; only to avoid hangs.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The database backends the storage tests run on: a local file, the
/// reference socket server (`ars-serve`), and Rivet's real actor runtime
/// (an `actor_uds` descriptor naming a socket the runtime provisioned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    SqliteFile,
    ActorUds,
    Rivet,
}

impl Backend {
    /// The descriptor's `type`.
    pub fn type_name(self) -> &'static str {
        match self {
            Backend::SqliteFile => "sqlite_file",
            Backend::ActorUds | Backend::Rivet => "actor_uds",
        }
    }
}

/// Defines `mod $name` with one test per listed backend, each calling the
/// async fn `$name(Backend)`.
#[macro_export]
macro_rules! backend_tests {
    ($name:ident: $($test:ident => $backend:ident),+) => {
        mod $name {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$name($crate::common::Backend::$backend).await
                }
            )+
        }
    };
}

/// Defines `mod $name { sqlite_file, actor_uds }`, two tests that call the
/// async fn `$name(Backend)`.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),+ $(,)?) => {$(
        $crate::backend_tests!($name: sqlite_file => SqliteFile, actor_uds => ActorUds);
    )+};
}

/// Like [`both_backends!`], plus a third test, `rivet`, on Rivet's real
/// actor runtime.
#[macro_export]
macro_rules! all_backends {
    ($($name:ident),+ $(,)?) => {$(
        $crate::backend_tests!(
            $name: sqlite_file => SqliteFile, actor_uds => ActorUds, rivet => Rivet
        );
    )+};
}

/// The Rivet runtime this test process shares (started on first use).
pub fn rivet() -> &'static agentos_tests::rivet::RivetRuntime {
    agentos_tests::rivet::RivetRuntime::shared()
        .unwrap_or_else(|e| panic!("Rivet's actor runtime is needed for this test: {e}"))
}

/// The workspace root (this package lives one level below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package sits inside the workspace")
        .to_path_buf()
}

/// Where `scripts/install-peers` puts the Node peers.
pub fn peers() -> PathBuf {
    workspace_root().join(".peers")
}

/// Whether node and the Node peers are there. Without them a test is
/// skipped with a note naming `what`, outside CI; under CI (`CI` set, as
/// `.ci/run` runs) it fails, so a broken install cannot pass unseen.
pub fn node_peers_present(what: &str) -> bool {
    node_package_present(what, "node_modules/@ipld/dag-cbor")
}

/// Whether node and the Node peer at `package` (a path under the peers
/// folder) are there, as [`node_peers_present`] asks it.
pub fn node_package_present(what: &str, package: &str) -> bool {
    let codec = peers().join(package);
    let why = if !codec.exists() {
        format!("{} is missing; run scripts/install-peers", codec.display())
    } else if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        "node is not on PATH".to_owned()
    } else {
        return true;
    };
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("{what} needs its peers under CI: {why}");
    }
    eprintln!("note: skipping {what}: {why}");
    false
}

/// Runs `protocol/tests/node/seed-sign.mjs <command>` (Seed's own
/// libraries, from the Node peers) with `input` on its standard input, and
/// answers its standard output, trimmed.
pub fn seed_sign(command: &str, input: &Value) -> String {
    node_script("seed-sign.mjs", &[command], input)
}

/// Runs `protocol/tests/node/<script> <args>` with `input` on its standard
/// input, and answers its standard output, trimmed.
pub fn node_script(script: &str, args: &[&str], input: &Value) -> String {
    use std::io::Write;
    let command = script;
    let script = workspace_root().join("protocol/tests/node").join(script);
    let mut child = std::process::Command::new("node")
        .arg(script)
        .args(args)
        .env("AGENTOS_PEERS", peers())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("node runs");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().expect("node runs");
    writer
        .join()
        .expect("writer")
        .expect("node reads its input");
    assert!(
        output.status.success(),
        "{command} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("UTF-8")
        .trim()
        .to_owned()
}

/// Bytes from lowercase hex.
pub fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

/// A workspace binary next to the test executable: `target/<profile>/name`.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let deps = exe.parent().expect("the test executable lives in deps/");
    let dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("deps/ has a parent").to_path_buf()
    } else {
        deps.to_path_buf()
    };
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace binaries first with \
         `cargo build --bins` (or run `cargo test --workspace`)",
        path.display()
    );
    path
}

/// The example agent shipped with the published ACP SDK (installed by
/// `scripts/install-peers`).
pub fn example_agent_script() -> PathBuf {
    workspace_root().join(".peers/node_modules/@agentclientprotocol/sdk/dist/examples/agent.js")
}

/// Knobs for one sidecar.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Merged into the config's `limits` (per section).
    pub limits: Value,
    /// Extra agents, merged into the registry.
    pub agents: Value,
    /// Merged into the top level of the config.
    pub config: Value,
    /// Set in the sidecar's own environment.
    pub env: Vec<(String, String)>,
    /// Launch as a host does: no `secrets.keyFile` (by default the harness
    /// names one in the test's directory).
    pub no_secrets_key: bool,
}

/// One running sidecar and its first client connection.
pub struct Sidecar {
    pub backend: Backend,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub client: HostClient,
    pub notes: UnboundedReceiver<Notification>,
    /// The ready line the sidecar printed.
    pub ready: Value,
    child: Child,
    ars: Option<Child>,
    /// The config's database descriptor.
    pub database: Value,
    /// On [`Backend::Rivet`], the key of the actor whose socket this
    /// sidecar runs on (a restart keeps it).
    pub actor_key: Option<String>,
}

fn merge(base: &mut Value, extra: &Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (_, Value::Null) => {}
        (b, e) => *b = e.clone(),
    }
}

/// Opens `path` for appending, creating it: a restarted sidecar adds to
/// the logs of the one before.
fn append_to(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open a log file")
}

/// The first stdout line of a child that announces readiness as JSON
/// (`{"event":"ready",...}`); its stdout keeps being drained afterwards.
async fn wait_for_ready_line(child: &mut Child, stderr: PathBuf) -> Value {
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .expect("no ready line in time")
        .expect("read stdout");
    let Some(line) = line else {
        let stderr = std::fs::read_to_string(stderr).unwrap_or_default();
        panic!("exited before it was ready: {stderr}");
    };
    let ready: Value = serde_json::from_str(&line).expect("the ready line is JSON");
    assert_eq!(ready["event"], "ready");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    ready
}

impl Sidecar {
    pub async fn start(backend: Backend) -> Sidecar {
        Self::start_with(backend, Options::default()).await
    }

    pub async fn start_with(backend: Backend, options: Options) -> Sidecar {
        let dir = tempfile::tempdir().expect("temp dir");
        let actor_key = (backend == Backend::Rivet).then(|| uuid::Uuid::new_v4().to_string());
        Self::start_in(dir, backend, actor_key, options).await
    }

    /// Stops this sidecar (SIGTERM, and its socket server) and starts a new
    /// one on the same directory, database and secrets key file.
    pub async fn restart(mut self, options: Options) -> Sidecar {
        self.terminate().await;
        if let Some(mut ars) = self.ars.take() {
            let pid = ars.id().expect("ars-serve is running") as libc::pid_t;
            // SAFETY: kill(2) on our own child's pid has no memory effects.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            tokio::time::timeout(PATIENCE, ars.wait())
                .await
                .expect("ars-serve did not exit after SIGTERM")
                .expect("wait for ars-serve");
        }
        self.start_again(options).await
    }

    /// Kills this sidecar (SIGKILL: no shutdown at all) and starts a new
    /// one on the same directory, database and secrets key file.
    pub async fn crash(mut self, options: Options) -> Sidecar {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let _ = tokio::time::timeout(PATIENCE, self.child.wait()).await;
        if let Some(mut ars) = self.ars.take() {
            let pid = ars.id().expect("ars-serve is running") as libc::pid_t;
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let _ = tokio::time::timeout(PATIENCE, ars.wait()).await;
        }
        self.start_again(options).await
    }

    /// A new sidecar on this one's directory, backend and actor (this one
    /// has stopped).
    async fn start_again(self, options: Options) -> Sidecar {
        let Sidecar {
            backend,
            dir,
            actor_key,
            ..
        } = self;
        Self::start_in(dir, backend, actor_key, options).await
    }

    async fn start_in(
        dir: tempfile::TempDir,
        backend: Backend,
        actor_key: Option<String>,
        options: Options,
    ) -> Sidecar {
        let root = dir.path();
        let sidecar = binary("agentos-sidecar");
        let fake = binary("agentos-fake-agent").display().to_string();
        let db_file = root.join("vm.sqlite");
        let mut ars = None;
        let database = match backend {
            Backend::SqliteFile => json!({"type": "sqlite_file", "path": db_file}),
            Backend::ActorUds => {
                let ars_socket = root.join("ars.sock");
                let child = Command::new(&sidecar)
                    .arg("ars-serve")
                    .arg("--db")
                    .arg(&db_file)
                    .arg("--socket")
                    .arg(&ars_socket)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::from(append_to(&root.join("ars.stderr"))))
                    .kill_on_drop(true)
                    .spawn()
                    .expect("start ars-serve");
                let mut child = child;
                let ready = wait_for_ready_line(&mut child, root.join("ars.stderr")).await;
                assert_eq!(ready["socket"], json!(ars_socket));
                assert_eq!(ready["protocol"], "actor_runtime_socket_v1");
                ars = Some(child);
                json!({"type": "actor_uds", "path": ars_socket})
            }
            Backend::Rivet => {
                let key = actor_key.clone().expect("a rivet sidecar has an actor key");
                let socket = rivet()
                    .provision_async(key)
                    .await
                    .expect("the rivet actor provisions its runtime socket");
                json!({"type": "actor_uds", "path": socket})
            }
        };
        let state = root.join("agent-state");
        let log = root.join("prompts.log");
        // Confined agents may write only where the registry says, and a
        // Landlock rule names an existing path: create both first.
        std::fs::create_dir_all(&state).expect("agent state dir");
        append_to(&log);
        let sandbox = json!({"writePaths": [state, log]});
        let mut agents = json!({
            "echo": {"command": fake, "env": {"AGENTOS_FAKE_AGENT_LOG": log},
                     "sandbox": sandbox},
            "loader": {"command": fake, "args": ["--load-session", "--state-dir", state],
                       "env": {"AGENTOS_FAKE_AGENT_LOG": log}, "sandbox": sandbox},
            "resumer": {"command": fake, "args": ["--resume", "--state-dir", state],
                        "env": {"AGENTOS_FAKE_AGENT_LOG": log}, "sandbox": sandbox},
            "example": {"command": "node", "args": [example_agent_script()]},
        });
        merge(&mut agents, &options.agents);
        let mut limits = json!({});
        merge(&mut limits, &options.limits);
        let socket = root.join("sidecar.sock");
        let mut config = json!({
            "database": database.clone(),
            "socket": socket,
            "agents": agents,
            "limits": limits,
        });
        if !options.no_secrets_key {
            config["secrets"] = json!({"keyFile": root.join("secrets.key")});
        }
        merge(&mut config, &options.config);
        let mut child = Command::new(&sidecar)
            .arg("serve")
            .arg("--config")
            .arg("-")
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(append_to(&root.join("sidecar.stderr"))))
            .kill_on_drop(true)
            .spawn()
            .expect("start the sidecar");
        {
            use tokio::io::AsyncWriteExt;
            let mut stdin = child.stdin.take().expect("piped stdin");
            stdin
                .write_all(config.to_string().as_bytes())
                .await
                .expect("write the config");
            // Dropping stdin closes it: the sidecar reads to the end.
        }
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .expect("the sidecar printed no ready line in time")
            .expect("read the sidecar's stdout");
        let Some(line) = line else {
            let stderr = std::fs::read_to_string(root.join("sidecar.stderr")).unwrap_or_default();
            panic!("the sidecar exited before it was ready: {stderr}");
        };
        let ready: Value = serde_json::from_str(&line).expect("the ready line is JSON");
        assert_eq!(ready["event"], "ready");
        assert_eq!(ready["socket"], json!(socket));
        // Keep draining stdout so the sidecar never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let (client, notes) = HostClient::connect(&socket).await.expect("connect");
        Sidecar {
            backend,
            dir,
            socket,
            client,
            notes,
            ready,
            child,
            ars,
            database,
            actor_key,
        }
    }

    /// Where the sessions' adapter directories are by default: `sessions/`
    /// beside a database file, `<socket>.sessions/` beside an actor socket.
    pub fn sessions_dir(&self) -> PathBuf {
        let path = PathBuf::from(self.database["path"].as_str().expect("a database path"));
        match self.backend {
            Backend::SqliteFile => path.parent().expect("a directory").join("sessions"),
            Backend::ActorUds | Backend::Rivet => {
                let mut name = path.into_os_string();
                name.push(".sessions");
                PathBuf::from(name)
            }
        }
    }

    /// Reads the store directly, beside the sidecar: the local file (which
    /// `ars-serve` serves too), or on Rivet through the actor's own handle.
    /// Each row is an object by column name.
    pub async fn stored(&self, sql: &str) -> Vec<Value> {
        if self.backend == Backend::Rivet {
            return self.actor_query(sql).await;
        }
        let db = rusqlite::Connection::open(self.dir.path().join("vm.sqlite"))
            .expect("open the database file");
        let mut statement = db.prepare(sql).expect("prepare");
        let columns: Vec<String> = statement
            .column_names()
            .iter()
            .map(|c| (*c).to_owned())
            .collect();
        let rows = statement
            .query_map([], |row| {
                let mut object = serde_json::Map::new();
                for (i, column) in columns.iter().enumerate() {
                    let value = match row.get_ref(i)? {
                        rusqlite::types::ValueRef::Null => Value::Null,
                        rusqlite::types::ValueRef::Integer(v) => json!(v),
                        rusqlite::types::ValueRef::Real(v) => json!(v),
                        rusqlite::types::ValueRef::Text(t) => {
                            json!(String::from_utf8_lossy(t))
                        }
                        rusqlite::types::ValueRef::Blob(b) => json!(b),
                    };
                    object.insert(column.clone(), value);
                }
                Ok(Value::Object(object))
            })
            .expect("query");
        rows.map(|row| row.expect("a row")).collect()
    }

    /// Runs `sql` through the Rivet actor's own database handle (`c.db`).
    pub async fn actor_query(&self, sql: &str) -> Vec<Value> {
        let key = self
            .actor_key
            .clone()
            .expect("only a rivet sidecar has an actor");
        rivet()
            .query_async(key, sql.to_owned())
            .await
            .unwrap_or_else(|e| panic!("the actor's own query {sql}: {e}"))
    }

    /// Where the signed API listens (the config must set `http.listen`).
    pub fn api(&self) -> agentos_tests::http::Target {
        agentos_tests::http::Target::from_ready(
            self.ready["http"]
                .as_str()
                .expect("the ready line names the http listener"),
        )
    }

    /// A second, independent connection.
    pub async fn connect(&self) -> (HostClient, UnboundedReceiver<Notification>) {
        HostClient::connect(&self.socket).await.expect("connect")
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("the sidecar is running")
    }

    /// Sends SIGTERM and waits (at most `PATIENCE`) for the process to exit.
    /// Once it has exited, this only returns how.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on our own child's pid has no memory effects.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("the sidecar did not exit after SIGTERM")
            .expect("wait for the sidecar")
    }

    /// True while the sidecar process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The prompts the fake agents received (one JSON object each).
    pub fn delivered_prompts(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("prompts.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("prompt log line"))
            .collect()
    }

    pub async fn call(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        tokio::time::timeout(PATIENCE, self.client.call(method, params))
            .await
            .unwrap_or_else(|_| panic!("{method} did not answer in time"))
    }

    /// A call that must succeed.
    pub async fn ok(&self, method: &str, params: Value) -> Value {
        match self.call(method, params.clone()).await {
            Ok(v) => v,
            Err(e) => panic!("{method} {params} failed: {e} [{}] {e:?}", e.code()),
        }
    }

    /// A call that must fail; returns the error object.
    pub async fn err(&self, method: &str, params: Value) -> agentos_protocol::host::ErrorObject {
        match self.call(method, params.clone()).await {
            Ok(v) => panic!("{method} {params} unexpectedly succeeded: {v}"),
            Err(ClientError::Rpc(e)) => e,
            Err(e) => panic!("{method} {params} failed without an RPC error: {e}"),
        }
    }

    pub async fn open(&self, session: &str, agent: &str) -> Value {
        self.ok(
            "sessions/open",
            json!({"sessionId": session, "agent": agent}),
        )
        .await
    }

    pub async fn open_with_policy(&self, session: &str, agent: &str, policy: &str) -> Value {
        self.ok(
            "sessions/open",
            json!({"sessionId": session, "agent": agent, "permissionPolicy": policy}),
        )
        .await
    }

    pub async fn prompt(&self, session: &str, text: &str) -> Result<Value, ClientError> {
        self.call(
            "sessions/prompt",
            json!({"sessionId": session, "content": [{"type": "text", "text": text}]}),
        )
        .await
    }

    /// Every event of a session, oldest first.
    pub async fn history(&self, session: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut after = 0;
        loop {
            let page = self
                .ok(
                    "sessions/history",
                    json!({"sessionId": session, "after": after, "limit": 1000}),
                )
                .await;
            let events = page["events"].as_array().expect("events").clone();
            if let Some(last) = events.last() {
                after = last["sequence"].as_u64().expect("sequence");
            }
            out.extend(events);
            if !page["hasMoreAfter"].as_bool().expect("hasMoreAfter") {
                return out;
            }
        }
    }

    /// The next notification matching `pred` (others are dropped).
    pub async fn next_note(&mut self, pred: impl Fn(&str, &Value) -> bool) -> (String, Value) {
        next_note(&mut self.notes, pred).await
    }

    pub async fn live_adapters(&self) -> u64 {
        self.ok("vm/status", json!({})).await["liveAdapters"]
            .as_u64()
            .expect("liveAdapters")
    }
}

/// The next notification on `rx` matching `pred`.
pub async fn next_note(
    rx: &mut UnboundedReceiver<Notification>,
    pred: impl Fn(&str, &Value) -> bool,
) -> (String, Value) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let note = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("no matching notification in time")
            .expect("the connection closed");
        if pred(&note.0, &note.1) {
            return note;
        }
    }
}

/// `data.code` of an application error.
pub fn data_code(e: &agentos_protocol::host::ErrorObject) -> &str {
    e.data_code().unwrap_or("<none>")
}

/// Compact `(type, text)` view of events for readable assertions.
pub fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().expect("type").to_owned())
        .collect()
}

pub fn text_of(event: &Value) -> &str {
    event["content"]["text"].as_str().unwrap_or("")
}

/// Polls `f` until it returns true (state that settles asynchronously).
pub async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !f().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `agentos-sidecar serve` on `config` and waits (at most `PATIENCE`)
/// for it to exit: for configs that must be refused at start.
pub async fn serve_until_exit(config: &Value) -> std::process::Output {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(binary("agentos-sidecar"))
        .args(["serve", "--config", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start a sidecar");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(config.to_string().as_bytes())
        .await
        .expect("config");
    drop(stdin);
    tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .expect("the sidecar exits")
        .expect("wait")
}

/// What one `agentos-sidecar ctl` run printed, and its exit code.
pub struct CtlOut {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `agentos-sidecar ctl --socket <socket> <args>` to its end (within
/// `PATIENCE`).
pub async fn ctl(socket: &Path, args: &[&str]) -> CtlOut {
    let out = tokio::time::timeout(
        PATIENCE,
        Command::new(binary("agentos-sidecar"))
            .arg("ctl")
            .arg("--socket")
            .arg(socket)
            .args(args)
            .output(),
    )
    .await
    .expect("ctl finishes in time")
    .expect("run ctl");
    CtlOut {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8(out.stdout).expect("utf-8"),
        stderr: String::from_utf8(out.stderr).expect("utf-8"),
    }
}

/// The sidecar's resident memory now and at its peak, in bytes.
pub fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map(|kib| kib * 1024)
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}
