//! The ACP client connection to one adapter process.
//!
//! The adapter is a child process speaking newline-delimited JSON-RPC on its
//! stdio. One writer task serializes every outgoing line; one reader task
//! classifies incoming lines, resolves our pending requests and forwards
//! everything else to the caller as [`AdapterEvent`]s in arrival order; a
//! stderr task turns diagnostic output into events and logs; a wait task owns
//! the child and records its exit status. Bad lines become events, never a
//! crash: the stream resynchronises at the next newline.
//!
//! The adapter is a program we did not write. It starts with a cleared
//! environment (only [`INHERITED_ENV`] from ours, plus what the command
//! sets), in a process group of its own, and, when the caller prepared one,
//! under a Landlock ruleset it cannot leave ([`Confinement`]). Every way the
//! connection ends kills the whole group, so nothing the agent started in the
//! background outlives it.
//!
//! The event channel is bounded and the reader waits when it is full rather
//! than dropping events. Lines waiting for the adapter's stdin are counted in
//! bytes: the caller asks [`AdapterConnection::stdin_room`] before it answers
//! an agent's request, so an agent that stops reading cannot make the
//! sidecar queue answers without bound. A caller that awaits a response while not draining
//! events can therefore stall its own response; drain events concurrently.
//!
//! The event channel is bounded, in events and in bytes: stdout read but not
//! yet taken by the caller is at most `stdout_buffer_bytes` (a line longer
//! than that takes the whole budget alone). When either is full the reader
//! stops reading the pipe, so the agent blocks on its writes; nothing is
//! dropped and the buffer never grows. A caller that awaits a response while
//! not draining events can therefore stall its own response; drain events
//! concurrently.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agentos_protocol::acp::{self, methods, AcpDecodeError, AcpMessage};
pub use agentos_protocol::acp::{error_codes, RpcError};
use agentos_protocol::ErrorCode;
use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, oneshot, watch, Notify, Semaphore};

/// 16 MiB, the longest stdout line accepted from an adapter.
pub const DEFAULT_MAX_READ_LINE_BYTES: usize = 16 * 1024 * 1024;
/// How long `initialize` may take before the adapter is declared unusable.
pub const DEFAULT_INITIALIZE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default capacity of the event channel.
pub const DEFAULT_EVENT_BUFFER: usize = 1024;
/// 1 MiB, the adapter stdout read but not yet taken by the caller, at most.
pub const DEFAULT_STDOUT_BUFFER_BYTES: usize = 1024 * 1024;
/// The setting that bounds the stdout buffer, named in its 80 % warning.
pub const STDOUT_BUFFER_SETTING: &str = "limits.acp.stdoutBufferByteLimit";
/// Default bound of the bytes queued for the adapter's stdin.
pub const DEFAULT_MAX_QUEUED_STDIN_BYTES: usize = 64 * 1024 * 1024;
/// Longest stderr line kept in an event; the rest of the line is dropped.
pub const MAX_STDERR_LINE_BYTES: usize = 4096;
/// How long `shutdown` waits for a graceful exit after closing stdin.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long the reader keeps draining stdout after the process has exited,
/// in case a grandchild inherited the pipe and keeps it open.
const EXIT_DRAIN_GRACE: Duration = Duration::from_secs(2);
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// The only variables of the sidecar's own environment an adapter inherits;
/// everything else it sees is what its command sets.
pub const INHERITED_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TERM"];

/// A Landlock ruleset, created by the caller, that the child enters between
/// `fork` and `exec` (after `PR_SET_NO_NEW_PRIVS`). Built outside this crate
/// so the adapter layer stays free of policy; it only applies it.
#[derive(Clone, Debug)]
pub struct Confinement(Arc<OwnedFd>);

impl Confinement {
    /// Wraps a ruleset descriptor returned by `landlock_create_ruleset`.
    pub fn from_ruleset(fd: OwnedFd) -> Self {
        Confinement(Arc::new(fd))
    }
}

impl PartialEq for Confinement {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Confinement {}

/// How to start an adapter process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdapterCommand {
    pub program: String,
    pub args: Vec<String>,
    /// Set on top of the inherited [`INHERITED_ENV`]; the rest of the
    /// sidecar's environment is never passed on.
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// Entered by the child before it runs `program`; `None` runs it
    /// unconfined.
    pub confinement: Option<Confinement>,
}

impl AdapterCommand {
    pub fn new(program: impl Into<String>) -> Self {
        AdapterCommand {
            program: program.into(),
            ..AdapterCommand::default()
        }
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }
}

/// Limits of one connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterOptions {
    pub max_read_line_bytes: usize,
    pub initialize_timeout: Duration,
    pub event_buffer: usize,
    /// Stdout bytes read but not yet taken from [`AdapterEvents`], at most.
    pub stdout_buffer_bytes: usize,
    /// Above this many queued stdin bytes, [`AdapterConnection::stdin_room`]
    /// waits.
    pub max_queued_stdin_bytes: usize,
}

impl Default for AdapterOptions {
    fn default() -> Self {
        AdapterOptions {
            max_read_line_bytes: DEFAULT_MAX_READ_LINE_BYTES,
            initialize_timeout: DEFAULT_INITIALIZE_TIMEOUT,
            event_buffer: DEFAULT_EVENT_BUFFER,
            stdout_buffer_bytes: DEFAULT_STDOUT_BUFFER_BYTES,
            max_queued_stdin_bytes: DEFAULT_MAX_QUEUED_STDIN_BYTES,
        }
    }
}

/// Bytes queued for the adapter's stdin and not yet written.
#[derive(Default)]
struct StdinQueue {
    bytes: AtomicUsize,
    room: Notify,
}

impl StdinQueue {
    fn added(&self, n: usize) {
        self.bytes.fetch_add(n, Ordering::AcqRel);
    }

    fn written(&self, n: usize) {
        self.bytes.fetch_sub(n, Ordering::AcqRel);
        self.room.notify_waiters();
    }
}

/// The id of a request the agent sent us, kept verbatim so the answer echoes
/// it exactly (agents may use numbers, strings or null).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncomingRequestId(Value);

impl IncomingRequestId {
    pub fn new(id: Value) -> Self {
        IncomingRequestId(id)
    }

    pub fn as_value(&self) -> &Value {
        &self.0
    }
}

impl Hash for IncomingRequestId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Equal Values print identically, so hashing the canonical JSON keeps
        // Hash consistent with Eq.
        self.0.to_string().hash(state);
    }
}

/// Something the agent sent that the caller must handle, in arrival order.
#[derive(Clone, Debug, PartialEq)]
pub enum AdapterEvent {
    /// A well-formed `session/update`, kept as the agent wrote it.
    SessionUpdate(acp::SessionUpdate),
    /// Any other notification (and a `session/update` that is malformed).
    Notification { method: String, params: Value },
    /// For example `session/request_permission`, `fs/read_text_file` or an
    /// unknown method; the caller answers with [`AdapterConnection::respond`].
    Request {
        id: IncomingRequestId,
        method: String,
        params: Value,
    },
    /// One stderr line (lossy UTF-8, truncated to [`MAX_STDERR_LINE_BYTES`]).
    Stderr(String),
    /// An invalid JSON line or an oversize line; the stream continues.
    ProtocolError(AdapterError),
    /// The process ended. Always the last event.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// Stdout bytes read but not yet taken by the caller, against their bound.
struct StdoutBudget {
    permits: Arc<Semaphore>,
    limit: usize,
    /// Above 80 % since the last warning; re-armed below it.
    warned: AtomicBool,
}

impl StdoutBudget {
    fn new(limit: usize) -> Arc<StdoutBudget> {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(StdoutBudget {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            warned: AtomicBool::new(false),
        })
    }

    /// What an event of `bytes` holds: a line longer than the whole budget
    /// takes all of it.
    fn cost(&self, bytes: usize) -> u32 {
        // `limit` is at most `Semaphore::MAX_PERMITS`, below `u32::MAX`.
        u32::try_from(bytes.clamp(1, self.limit)).unwrap_or(u32::MAX)
    }

    fn used(&self) -> usize {
        self.limit.saturating_sub(self.permits.available_permits())
    }

    /// Logs once per crossing of 80 %.
    fn check_pressure(&self) {
        let used = self.used();
        let near = used.saturating_mul(5) >= self.limit.saturating_mul(4);
        if near {
            if !self.warned.swap(true, Ordering::AcqRel) {
                tracing::warn!(
                    used,
                    limit = self.limit,
                    config_path = STDOUT_BUFFER_SETTING,
                    "usage crossed 80% of a configured limit"
                );
            }
        } else {
            self.warned.store(false, Ordering::Release);
        }
    }
}

/// The agent's events in arrival order (see [`AdapterConnection::spawn`]).
/// Taking an event frees its share of the stdout buffer.
pub struct AdapterEvents {
    rx: mpsc::Receiver<(AdapterEvent, u32)>,
    budget: Arc<StdoutBudget>,
}

impl AdapterEvents {
    /// The next event; `None` once the adapter is gone and every event was
    /// taken.
    pub async fn recv(&mut self) -> Option<AdapterEvent> {
        let (event, cost) = self.rx.recv().await?;
        self.budget.permits.add_permits(cost as usize);
        Some(event)
    }

    /// The next event if one is waiting.
    pub fn try_recv(&mut self) -> Result<AdapterEvent, mpsc::error::TryRecvError> {
        let (event, cost) = self.rx.try_recv()?;
        self.budget.permits.add_permits(cost as usize);
        Ok(event)
    }

    /// Stdout bytes read and waiting in this queue (a line longer than the
    /// bound counts as the bound).
    pub fn buffered_bytes(&self) -> usize {
        self.budget.used()
    }

    /// The bound on [`Self::buffered_bytes`].
    pub fn buffer_limit(&self) -> usize {
        self.budget.limit
    }
}

/// The adapter layer's errors.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AdapterError {
    #[error("cannot start adapter: {0}")]
    Spawn(String),
    #[error("adapter i/o failed: {0}")]
    Io(String),
    #[error("adapter answered with an error: {0}")]
    Rpc(RpcError),
    #[error("adapter did not answer {method} in time")]
    Timeout { method: String },
    #[error("adapter process exited before answering")]
    Exited,
    #[error("adapter wrote a line longer than {limit} bytes")]
    LineTooLong { limit: usize },
    #[error("adapter wrote invalid JSON-RPC: {0}")]
    InvalidJson(String),
    #[error("adapter speaks ACP protocol version {0}, this client speaks only 1")]
    UnsupportedProtocolVersion(u64),
    #[error("adapter connection is closed")]
    Closed,
}

impl AdapterError {
    pub fn code(&self) -> ErrorCode {
        match self {
            AdapterError::Spawn(_) => ErrorCode::AdapterSpawnFailed,
            AdapterError::Io(_) => ErrorCode::AdapterIo,
            AdapterError::Rpc(_) => ErrorCode::AdapterRpcError,
            AdapterError::Timeout { .. } => ErrorCode::AdapterTimeout,
            AdapterError::Exited => ErrorCode::AdapterExited,
            AdapterError::LineTooLong { .. } => ErrorCode::AdapterLineTooLong,
            AdapterError::InvalidJson(_) => ErrorCode::AdapterInvalidJson,
            AdapterError::UnsupportedProtocolVersion(_) => ErrorCode::AcpProtocolError,
            AdapterError::Closed => ErrorCode::AdapterClosed,
        }
    }

    /// Whether the agent said it does not know the session (contract §6.5):
    /// the standard -32002, or a generic -32603 whose `data.details` is
    /// `"NotFoundError"` (the error's class name, as SDK-based adapters
    /// send it) or says "... not found" (the reference SDK's message).
    pub fn is_unknown_session(&self) -> bool {
        let AdapterError::Rpc(error) = self else {
            return false;
        };
        match error.code {
            error_codes::RESOURCE_NOT_FOUND => true,
            error_codes::INTERNAL_ERROR => error
                .data
                .as_ref()
                .and_then(|data| data.get("details"))
                .and_then(Value::as_str)
                .is_some_and(|details| {
                    details == "NotFoundError" || details.to_ascii_lowercase().contains("not found")
                }),
            _ => false,
        }
    }
}

impl From<AcpDecodeError> for AdapterError {
    fn from(error: AcpDecodeError) -> Self {
        AdapterError::InvalidJson(error.to_string())
    }
}

/// The agent's answer to `initialize`.
#[derive(Clone, Debug, PartialEq)]
pub struct InitializeResult {
    pub protocol_version: u64,
    pub agent_capabilities: Value,
    pub agent_info: Option<Value>,
    pub auth_methods: Value,
    pub raw: Value,
}

impl InitializeResult {
    fn from_raw(raw: Value) -> Result<Self, AdapterError> {
        let protocol_version = raw
            .get("protocolVersion")
            .and_then(Value::as_u64)
            .ok_or_else(|| {
                AdapterError::InvalidJson(
                    "initialize result has no integer protocolVersion".to_owned(),
                )
            })?;
        Ok(InitializeResult {
            protocol_version,
            agent_capabilities: raw
                .get("agentCapabilities")
                .cloned()
                .unwrap_or_else(|| json!({})),
            agent_info: raw.get("agentInfo").filter(|v| !v.is_null()).cloned(),
            auth_methods: raw.get("authMethods").cloned().unwrap_or_else(|| json!([])),
            raw,
        })
    }

    /// `agentCapabilities.loadSession` is true; anything else means no.
    pub fn supports_load(&self) -> bool {
        self.agent_capabilities.get("loadSession") == Some(&Value::Bool(true))
    }

    /// `agentCapabilities.sessionCapabilities.resume` is an object (or the
    /// legacy `true`).
    pub fn supports_resume(&self) -> bool {
        matches!(
            self.agent_capabilities
                .get("sessionCapabilities")
                .and_then(|caps| caps.get("resume")),
            Some(Value::Object(_)) | Some(Value::Bool(true))
        )
    }
}

type PendingReply = oneshot::Sender<Result<Value, AdapterError>>;

/// Our in-flight requests. `closed` is set under the same lock when the
/// process is gone, so a request registered afterwards fails at once instead
/// of waiting for an answer that can never come.
#[derive(Default)]
struct Pending {
    waiting: HashMap<u64, PendingReply>,
    closed: bool,
}

enum WriterCommand {
    Line(String),
    Close,
}

struct Shared {
    writer: mpsc::UnboundedSender<WriterCommand>,
    stdin: Arc<StdinQueue>,
    max_queued_stdin_bytes: usize,
    pending: Arc<Mutex<Pending>>,
    next_id: AtomicU64,
    exit: watch::Receiver<Option<ExitStatus>>,
    kill: Arc<Notify>,
    stdin_closed: AtomicBool,
    pid: Option<u32>,
    initialize_timeout: Duration,
}

/// A live connection to one adapter process. Clones share the connection.
#[derive(Clone)]
pub struct AdapterConnection {
    shared: Arc<Shared>,
}

fn lock(pending: &Mutex<Pending>) -> MutexGuard<'_, Pending> {
    // A panic while holding this lock leaves the map itself consistent, so
    // poisoning carries no meaning here.
    pending
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl AdapterConnection {
    /// Starts the adapter and the tasks that serve it. The receiver yields
    /// the agent's notifications, requests, stderr lines and exit.
    pub async fn spawn(
        cmd: &AdapterCommand,
        options: AdapterOptions,
    ) -> Result<(AdapterConnection, AdapterEvents), AdapterError> {
        let mut command = Command::new(&cmd.program);
        command.env_clear();
        for name in INHERITED_ENV {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
            .args(&cmd.args)
            .envs(&cmd.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so stopping it stops whatever it started.
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &cmd.cwd {
            command.current_dir(cwd);
        }
        if let Some(confinement) = &cmd.confinement {
            let ruleset = confinement.0.as_raw_fd();
            // SAFETY: the closure runs in the forked child before exec and
            // makes only async-signal-safe system calls, on a descriptor
            // the parent keeps open until `spawn` returns.
            unsafe {
                command.pre_exec(move || enter_ruleset(ruleset));
            }
        }
        let mut child = command
            .spawn()
            .map_err(|e| AdapterError::Spawn(format!("{}: {e}", cmd.program)))?;
        let pid = child.id();
        let group = pid.and_then(|pid| libc::pid_t::try_from(pid).ok());
        let (stdin, stdout, stderr) =
            match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
                (Some(stdin), Some(stdout), Some(stderr)) => (stdin, stdout, stderr),
                _ => {
                    // Unreachable with piped stdio, but never leave the child behind.
                    let _ = child.start_kill();
                    return Err(AdapterError::Spawn(format!(
                        "{}: stdio pipes were not created",
                        cmd.program
                    )));
                }
            };

        let (events_tx, events_rx) = mpsc::channel(options.event_buffer.max(1));
        // The pipe's read-ahead and the queued events share the bound.
        let limit = options.stdout_buffer_bytes.max(2);
        let read_ahead = READ_BUFFER_BYTES.min(limit / 4).max(1);
        let budget = StdoutBudget::new(limit - read_ahead);
        let (writer_tx, writer_rx) = mpsc::unbounded_channel();
        let (exit_tx, exit_rx) = watch::channel(None);
        let kill = Arc::new(Notify::new());
        let pending = Arc::new(Mutex::new(Pending::default()));

        let stdin_queue = Arc::new(StdinQueue::default());
        tokio::spawn(write_loop(stdin, writer_rx, stdin_queue.clone()));
        tokio::spawn(wait_loop(child, group, kill.clone(), exit_tx));
        let stderr_task = tokio::spawn(stderr_loop(
            BufReader::with_capacity(READ_BUFFER_BYTES, stderr),
            events_tx.clone(),
        ));
        tokio::spawn(read_loop(ReadLoop {
            stdout: BufReader::with_capacity(read_ahead, stdout),
            budget: budget.clone(),
            max_line: options.max_read_line_bytes,
            events: events_tx,
            pending: pending.clone(),
            // Weak, so that dropping every connection handle still closes
            // the adapter's stdin.
            writer: writer_tx.downgrade(),
            exit: exit_rx.clone(),
            stderr_task,
        }));

        let shared = Shared {
            writer: writer_tx,
            stdin: stdin_queue,
            max_queued_stdin_bytes: options.max_queued_stdin_bytes,
            pending,
            next_id: AtomicU64::new(0),
            exit: exit_rx,
            kill,
            stdin_closed: AtomicBool::new(false),
            pid,
            initialize_timeout: options.initialize_timeout,
        };
        Ok((
            AdapterConnection {
                shared: Arc::new(shared),
            },
            AdapterEvents {
                rx: events_rx,
                budget,
            },
        ))
    }

    /// Sends a request and waits for its answer, however long it takes.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, AdapterError> {
        let (id, reply) = self.send_request(method, &params)?;
        let guard = PendingGuard {
            pending: &self.shared.pending,
            id,
        };
        let answer = reply.await.unwrap_or(Err(AdapterError::Exited));
        drop(guard);
        answer
    }

    /// Like [`request`](Self::request) but gives up after `timeout`; a late
    /// answer is then logged and ignored.
    pub async fn request_timeout(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, AdapterError> {
        match tokio::time::timeout(timeout, self.request(method, params)).await {
            Ok(answer) => answer,
            Err(_) => Err(AdapterError::Timeout {
                method: method.to_owned(),
            }),
        }
    }

    fn send_request(
        &self,
        method: &str,
        params: &Value,
    ) -> Result<(u64, oneshot::Receiver<Result<Value, AdapterError>>), AdapterError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&self.shared.pending);
            if pending.closed {
                return Err(AdapterError::Exited);
            }
            pending.waiting.insert(id, tx);
        }
        let line = acp::encode_request_u64(id, method, params);
        if let Err(error) = self.send_line(line) {
            lock(&self.shared.pending).waiting.remove(&id);
            return Err(error);
        }
        Ok((id, rx))
    }

    fn send_line(&self, line: String) -> Result<(), AdapterError> {
        if self.shared.stdin_closed.load(Ordering::Acquire) {
            return Err(AdapterError::Closed);
        }
        if self.shared.exit.borrow().is_some() {
            return Err(AdapterError::Exited);
        }
        let n = line.len();
        self.shared.stdin.added(n);
        self.shared
            .writer
            .send(WriterCommand::Line(line))
            .map_err(|_| {
                self.shared.stdin.written(n);
                AdapterError::Closed
            })
    }

    /// Bytes queued for the adapter's stdin and not yet written to it.
    pub fn stdin_queued_bytes(&self) -> usize {
        self.shared.stdin.bytes.load(Ordering::Acquire)
    }

    /// Waits until the bytes queued for stdin are within
    /// `max_queued_stdin_bytes`; `false` if they still are not after
    /// `timeout` (the agent is not reading its stdin). A closed or exited
    /// connection has room: sending then fails on its own.
    pub async fn stdin_room(&self, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let room = self.shared.stdin.room.notified();
                tokio::pin!(room);
                room.as_mut().enable();
                if self.stdin_queued_bytes() <= self.shared.max_queued_stdin_bytes
                    || self.shared.stdin_closed.load(Ordering::Acquire)
                    || self.shared.exit.borrow().is_some()
                {
                    return;
                }
                room.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    /// Sends a notification (for example `session/cancel`).
    pub fn notify(&self, method: &str, params: Value) -> Result<(), AdapterError> {
        self.send_line(acp::encode_notification(method, &params))
    }

    /// Answers a request the agent sent, echoing its id.
    pub fn respond(
        &self,
        id: &IncomingRequestId,
        result: Result<Value, RpcError>,
    ) -> Result<(), AdapterError> {
        self.send_line(acp::encode_response(&id.0, &result))
    }

    /// Negotiates protocol version 1 and reads the agent's capabilities.
    /// `client_info` may be `Value::Null` to leave it out.
    pub async fn initialize(
        &self,
        client_info: Value,
        client_capabilities: Value,
    ) -> Result<InitializeResult, AdapterError> {
        let mut params = json!({
            "protocolVersion": acp::PROTOCOL_VERSION,
            "clientCapabilities": client_capabilities,
        });
        if !client_info.is_null() {
            params["clientInfo"] = client_info;
        }
        let raw = self
            .request_timeout(methods::INITIALIZE, params, self.shared.initialize_timeout)
            .await?;
        let result = InitializeResult::from_raw(raw)?;
        if result.protocol_version != acp::PROTOCOL_VERSION {
            return Err(AdapterError::UnsupportedProtocolVersion(
                result.protocol_version,
            ));
        }
        Ok(result)
    }

    pub fn pid(&self) -> Option<u32> {
        self.shared.pid
    }

    /// Closes stdin, waits up to about 2 s for the process to exit, then
    /// kills it. Safe to call more than once and from several tasks.
    pub async fn shutdown(&self) {
        if !self.shared.stdin_closed.swap(true, Ordering::AcqRel) {
            let _ = self.shared.writer.send(WriterCommand::Close);
        }
        let mut exit = self.shared.exit.clone();
        let exited = matches!(
            tokio::time::timeout(SHUTDOWN_GRACE, exit.wait_for(Option::is_some)).await,
            Ok(Ok(_))
        );
        if !exited {
            self.shared.kill.notify_one();
            let _ = exit.wait_for(Option::is_some).await;
        }
    }

    pub fn is_alive(&self) -> bool {
        self.shared.exit.borrow().is_none()
    }
}

/// Removes an abandoned request (its caller timed out or was dropped) from
/// the pending map, so a late answer is recognised as unmatched.
struct PendingGuard<'a> {
    pending: &'a Mutex<Pending>,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(self.pending).waiting.remove(&self.id);
    }
}

async fn write_loop(
    stdin: ChildStdin,
    mut commands: mpsc::UnboundedReceiver<WriterCommand>,
    queue: Arc<StdinQueue>,
) {
    let mut out = BufWriter::new(stdin);
    let mut broken = false;
    while let Some(command) = commands.recv().await {
        let mut close = false;
        let mut next = Some(command);
        // Batch whatever is already queued into one flush.
        while let Some(command) = next.take() {
            match command {
                WriterCommand::Line(line) => {
                    if !broken {
                        if let Err(error) = out.write_all(line.as_bytes()).await {
                            tracing::debug!(%error, "adapter stdin write failed");
                            broken = true;
                        }
                    }
                    queue.written(line.len());
                }
                WriterCommand::Close => {
                    close = true;
                    break;
                }
            }
            next = commands.try_recv().ok();
        }
        if !broken {
            if let Err(error) = out.flush().await {
                tracing::debug!(%error, "adapter stdin flush failed");
                broken = true;
            }
        }
        if close {
            break;
        }
    }
    if !broken {
        let _ = out.shutdown().await;
    }
    // Lines queued behind the close are never written.
    commands.close();
    while let Ok(command) = commands.try_recv() {
        if let WriterCommand::Line(line) = command {
            queue.written(line.len());
        }
    }
}

/// Enters the Landlock ruleset `fd` in a forked child: no new privileges
/// (required by Landlock for an unprivileged caller, and wanted anyway),
/// then `landlock_restrict_self`, then the seccomp filter that keeps the
/// agent off Unix sockets. Async-signal-safe.
fn enter_ruleset(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: plain system calls with integer arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // Landlock does not govern connecting to a Unix socket by path.
    crate::seccomp::deny_unix_sockets()
}

/// SIGKILL to every process of the adapter's group (the group id is the
/// adapter's pid: it was started as the leader of a new group).
fn kill_group(group: Option<libc::pid_t>) {
    if let Some(group) = group.filter(|g| *g > 1) {
        // SAFETY: kill(2) has no memory effects; ESRCH (nobody left) is fine.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
}

async fn wait_loop(
    mut child: Child,
    group: Option<libc::pid_t>,
    kill: Arc<Notify>,
    exit: watch::Sender<Option<ExitStatus>>,
) {
    let status = tokio::select! {
        status = child.wait() => status,
        _ = kill.notified() => {
            kill_group(group);
            let _ = child.start_kill();
            child.wait().await
        }
    };
    // Whatever the agent left running in its group goes with it.
    kill_group(group);
    match status {
        Ok(status) => {
            let _ = exit.send(Some(status));
        }
        Err(error) => {
            tracing::warn!(%error, "waiting for the adapter process failed");
            let _ = child.start_kill();
            // Report an exit anyway so no caller waits forever; the status
            // is synthesised as a plain failure.
            #[cfg(unix)]
            {
                use std::os::unix::process::ExitStatusExt;
                let _ = exit.send(Some(ExitStatus::from_raw(1 << 8)));
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum LineRead {
    /// A complete line is in the buffer; `truncated` when bytes beyond the
    /// limit were dropped.
    Line {
        truncated: bool,
    },
    Eof,
}

/// Reads one line into `buf` (without the newline and a trailing `\r`),
/// keeping at most `limit` bytes and discarding the rest of an overlong line
/// so the next call starts at the next line.
async fn read_line_limited<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    let mut truncated = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            if buf.is_empty() && !truncated {
                return Ok(LineRead::Eof);
            }
            break;
        }
        let (chunk, consumed, done) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (&available[..at], at + 1, true),
            None => (available, available.len(), false),
        };
        let room = limit.saturating_sub(buf.len());
        if chunk.len() > room {
            truncated = true;
        }
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        reader.consume(consumed);
        if done {
            break;
        }
    }
    if !truncated && buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(LineRead::Line { truncated })
}

async fn stderr_loop<R: AsyncBufRead + Unpin>(
    mut reader: R,
    events: mpsc::Sender<(AdapterEvent, u32)>,
) {
    let mut buf = Vec::with_capacity(256);
    loop {
        match read_line_limited(&mut reader, &mut buf, MAX_STDERR_LINE_BYTES).await {
            Ok(LineRead::Line { .. }) => {
                let line = String::from_utf8_lossy(&buf).into_owned();
                tracing::debug!(target: "agentos_adapters::stderr", "{line}");
                // A dropped receiver only means nobody listens any more.
                // Stderr is bounded per line and not part of the stdout budget.
                let _ = events.send((AdapterEvent::Stderr(line), 0)).await;
            }
            Ok(LineRead::Eof) => return,
            Err(error) => {
                tracing::debug!(%error, "adapter stderr read failed");
                return;
            }
        }
    }
}

struct ReadLoop<R> {
    stdout: R,
    budget: Arc<StdoutBudget>,
    max_line: usize,
    events: mpsc::Sender<(AdapterEvent, u32)>,
    pending: Arc<Mutex<Pending>>,
    writer: mpsc::WeakUnboundedSender<WriterCommand>,
    exit: watch::Receiver<Option<ExitStatus>>,
    stderr_task: tokio::task::JoinHandle<()>,
}

async fn read_loop<R: AsyncBufRead + Unpin>(mut state: ReadLoop<R>) {
    let mut buf = Vec::with_capacity(4096);
    let mut exit_watch = state.exit.clone();
    let drain_deadline = async {
        let _ = exit_watch.wait_for(Option::is_some).await;
        tokio::time::sleep(EXIT_DRAIN_GRACE).await;
    };
    tokio::pin!(drain_deadline);
    let mut listening = true;
    loop {
        let read = tokio::select! {
            read = read_line_limited(&mut state.stdout, &mut buf, state.max_line) => read,
            _ = &mut drain_deadline => {
                tracing::debug!("adapter exited but its stdout stayed open; stop reading");
                break;
            }
        };
        match read {
            Ok(LineRead::Eof) => break,
            Err(error) => {
                tracing::debug!(%error, "adapter stdout read failed");
                break;
            }
            Ok(LineRead::Line { truncated: true }) => {
                let error = AdapterError::LineTooLong {
                    limit: state.max_line,
                };
                tracing::warn!(limit = state.max_line, "adapter wrote an oversize line");
                let event = AdapterEvent::ProtocolError(error);
                listening = deliver(&state, listening, event, state.max_line).await;
            }
            Ok(LineRead::Line { truncated: false }) => {
                if buf.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                if let Some(update) = acp::decode_session_update(&buf) {
                    let event = AdapterEvent::SessionUpdate(update);
                    listening = deliver(&state, listening, event, buf.len()).await;
                    continue;
                }
                match acp::decode_line(&buf) {
                    Ok(AcpMessage::Response { id, result }) => resolve(&state.pending, id, result),
                    Ok(AcpMessage::Notification { method, params }) => {
                        let event = AdapterEvent::Notification { method, params };
                        listening = deliver(&state, listening, event, buf.len()).await;
                    }
                    Ok(AcpMessage::Request { id, method, params }) => {
                        let event = AdapterEvent::Request {
                            id: IncomingRequestId(id),
                            method,
                            params,
                        };
                        listening = deliver(&state, listening, event, buf.len()).await;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "adapter wrote an invalid line");
                        let event = AdapterEvent::ProtocolError(error.into());
                        listening = deliver(&state, listening, event, buf.len()).await;
                    }
                }
            }
        }
    }

    // stderr usually ends together with stdout; bound the wait in case a
    // grandchild keeps it open.
    let _ = tokio::time::timeout(EXIT_DRAIN_GRACE, &mut state.stderr_task).await;
    state.stderr_task.abort();

    let status = {
        let mut exit = state.exit.clone();
        let status = match exit.wait_for(Option::is_some).await {
            Ok(status) => *status,
            Err(_) => None,
        };
        status
    };
    let waiting = {
        let mut pending = lock(&state.pending);
        pending.closed = true;
        std::mem::take(&mut pending.waiting)
    };
    for (_, reply) in waiting {
        let _ = reply.send(Err(AdapterError::Exited));
    }
    let (code, signal) = split_status(status);
    tracing::debug!(?code, ?signal, "adapter exited");
    let _ = state
        .events
        .send((AdapterEvent::Exited { code, signal }, 0))
        .await;
}

/// Sends an event read from `bytes` of stdout, waiting for room in the
/// channel and in the stdout budget (the reader reads no more meanwhile).
/// Once the receiver is gone, requests are answered with "method not found"
/// so the agent is not left waiting.
async fn deliver<R>(
    state: &ReadLoop<R>,
    listening: bool,
    event: AdapterEvent,
    bytes: usize,
) -> bool {
    if listening {
        let cost = state.budget.cost(bytes);
        // The semaphore is never closed; the permits travel with the event
        // and come back when the caller takes it.
        if let Ok(permits) = state.budget.permits.acquire_many(cost).await {
            permits.forget();
        }
        state.budget.check_pressure();
        match state.events.send((event, cost)).await {
            Ok(()) => return true,
            Err(mpsc::error::SendError((event, cost))) => {
                state.budget.permits.add_permits(cost as usize);
                return reject_unheard(state, event);
            }
        }
    }
    reject_unheard(state, event)
}

fn reject_unheard<R>(state: &ReadLoop<R>, event: AdapterEvent) -> bool {
    if let AdapterEvent::Request { id, method, .. } = event {
        if let Some(writer) = state.writer.upgrade() {
            let line = acp::encode_response(&id.0, &Err(RpcError::method_not_found(&method)));
            let _ = writer.send(WriterCommand::Line(line));
        }
    }
    false
}

fn resolve(pending: &Mutex<Pending>, id: Value, result: Result<Value, RpcError>) {
    let reply = id
        .as_u64()
        .and_then(|key| lock(pending).waiting.remove(&key));
    match reply {
        Some(reply) => {
            let _ = reply.send(result.map_err(AdapterError::Rpc));
        }
        None => tracing::debug!(%id, "ignoring a response that matches no pending request"),
    }
}

fn split_status(status: Option<ExitStatus>) -> (Option<i32>, Option<i32>) {
    let Some(status) = status else {
        return (None, None);
    };
    #[cfg(unix)]
    let signal = {
        use std::os::unix::process::ExitStatusExt;
        status.signal()
    };
    #[cfg(not(unix))]
    let signal = None;
    (status.code(), signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], limit: usize) -> Vec<(Vec<u8>, bool)> {
        let mut reader = BufReader::with_capacity(8, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while let LineRead::Line { truncated } = read_line_limited(&mut reader, &mut buf, limit)
            .await
            .unwrap()
        {
            out.push((buf.clone(), truncated));
        }
        out
    }

    #[tokio::test]
    async fn splits_lines_across_buffer_refills() {
        let got = lines(b"first line\r\nsecond\n\nlast-no-newline", 64).await;
        assert_eq!(
            got,
            vec![
                (b"first line".to_vec(), false),
                (b"second".to_vec(), false),
                (b"".to_vec(), false),
                (b"last-no-newline".to_vec(), false),
            ]
        );
    }

    #[tokio::test]
    async fn oversize_line_is_cut_and_the_next_line_survives() {
        let got = lines(b"0123456789abcdef\nok\n", 10).await;
        assert_eq!(
            got,
            vec![(b"0123456789".to_vec(), true), (b"ok".to_vec(), false)]
        );
        let got = lines(b"0123456789\n", 10).await;
        assert_eq!(got, vec![(b"0123456789".to_vec(), false)]);
    }

    #[test]
    fn unknown_session_detection() {
        let not_found = AdapterError::Rpc(RpcError::resource_not_found("Resource not found"));
        assert!(not_found.is_unknown_session());
        let sdk_style = AdapterError::Rpc(
            RpcError::internal("Internal error")
                .with_data(json!({"details": "Session nope not found"})),
        );
        assert!(sdk_style.is_unknown_session());
        let class_name = AdapterError::Rpc(
            RpcError::internal("Internal error").with_data(json!({"details": "NotFoundError"})),
        );
        assert!(class_name.is_unknown_session());
        let other_class = AdapterError::Rpc(
            RpcError::internal("Internal error").with_data(json!({"details": "TypeError"})),
        );
        assert!(!other_class.is_unknown_session());
        let generic = AdapterError::Rpc(
            RpcError::internal("Internal error").with_data(json!({"details": "disk on fire"})),
        );
        assert!(!generic.is_unknown_session());
        assert!(!AdapterError::Exited.is_unknown_session());
    }

    #[test]
    fn capability_gating() {
        let result = |caps: Value| {
            InitializeResult::from_raw(json!({"protocolVersion": 1, "agentCapabilities": caps}))
                .unwrap()
        };
        assert!(!result(json!({"loadSession": false})).supports_load());
        assert!(!result(json!({"loadSession": "yes"})).supports_load());
        assert!(result(json!({"loadSession": true})).supports_load());
        assert!(result(json!({"sessionCapabilities": {"resume": {}}})).supports_resume());
        assert!(result(json!({"sessionCapabilities": {"resume": true}})).supports_resume());
        assert!(!result(json!({"sessionCapabilities": {}})).supports_resume());
        assert!(!result(json!({})).supports_resume());
        assert!(InitializeResult::from_raw(json!({"agentCapabilities": {}})).is_err());
    }

    #[test]
    fn incoming_ids_hash_like_they_compare() {
        use std::collections::HashSet;
        let mut set = HashSet::new();
        set.insert(IncomingRequestId::new(json!(0)));
        set.insert(IncomingRequestId::new(json!("0")));
        set.insert(IncomingRequestId::new(Value::Null));
        set.insert(IncomingRequestId::new(json!(0)));
        assert_eq!(set.len(), 3);
    }
}
