//! The ACP client connection to one adapter process (or to the builtin
//! agent served as a task of this process over an in-memory pipe,
//! [`AdapterConnection::in_process`], with the same tasks and bounds).
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

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

mod budget;
mod events;
mod process;
mod reader;

pub use budget::{ProcessBudget, FREE_LINE_BYTES};
pub use events::*;
use process::*;
pub use process::{AdapterCommand, Confinement};
use reader::*;

use agentos_protocol::acp::{self, methods, AcpDecodeError, AcpMessage};
pub use agentos_protocol::acp::{error_codes, RpcError};
use agentos_protocol::ErrorCode;
use serde_json::{json, Value};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter,
};
use tokio::process::{Child, Command};
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
    /// What this connection shares with the process's others.
    pub process: Arc<ProcessBudget>,
}

impl Default for AdapterOptions {
    fn default() -> Self {
        AdapterOptions {
            max_read_line_bytes: DEFAULT_MAX_READ_LINE_BYTES,
            initialize_timeout: DEFAULT_INITIALIZE_TIMEOUT,
            event_buffer: DEFAULT_EVENT_BUFFER,
            stdout_buffer_bytes: DEFAULT_STDOUT_BUFFER_BYTES,
            max_queued_stdin_bytes: DEFAULT_MAX_QUEUED_STDIN_BYTES,
            process: ProcessBudget::unbounded(),
        }
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
        Ok(Self::connect(
            stdin,
            stdout,
            Some(stderr),
            pid,
            options,
            move |kill, exit_tx| {
                tokio::spawn(wait_loop(child, group, kill, exit_tx));
            },
        ))
    }

    /// Serves the builtin agent in this process: `serve` runs as a task on
    /// the caller's runtime, speaking the same newline-delimited JSON-RPC
    /// over an in-memory pipe of `pipe_bytes` each way. Everything else is
    /// as for a child: the same reader, writer, bounds and budgets; stopping
    /// it ends the task (reported as SIGKILL), and its end is reported as a
    /// process's exit. It has no stderr and no pid.
    pub fn in_process<F, Fut>(
        serve: F,
        pipe_bytes: usize,
        options: AdapterOptions,
    ) -> (AdapterConnection, AdapterEvents)
    where
        F: FnOnce(
            tokio::io::ReadHalf<tokio::io::DuplexStream>,
            tokio::io::WriteHalf<tokio::io::DuplexStream>,
        ) -> Fut,
        Fut: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
    {
        let (ours, theirs) = tokio::io::duplex(pipe_bytes.max(1));
        let (their_in, their_out) = tokio::io::split(theirs);
        let (from_agent, to_agent) = tokio::io::split(ours);
        let task = tokio::spawn(serve(their_in, their_out));
        Self::connect(
            to_agent,
            from_agent,
            None::<tokio::io::Empty>,
            None,
            options,
            move |kill, exit_tx| {
                tokio::spawn(task_loop(task, kill, exit_tx));
            },
        )
    }

    /// Starts the tasks of a connection on an agent's pipes; `watch` starts
    /// the task that owns the agent and reports its end.
    fn connect<W, R, E>(
        stdin: W,
        stdout: R,
        stderr: Option<E>,
        pid: Option<u32>,
        options: AdapterOptions,
        watch: impl FnOnce(Arc<Notify>, watch::Sender<Option<ExitStatus>>),
    ) -> (AdapterConnection, AdapterEvents)
    where
        W: AsyncWrite + Unpin + Send + 'static,
        R: AsyncRead + Unpin + Send + Sync + 'static,
        E: AsyncRead + Unpin + Send + Sync + 'static,
    {
        let (events_tx, events_rx) = mpsc::channel(options.event_buffer.max(1));
        // The pipe's read-ahead and the queued events share the bound.
        let limit = options.stdout_buffer_bytes.max(2);
        let read_ahead = READ_BUFFER_BYTES.min(limit / 4).max(1);
        let budget = StdoutBudget::new(limit - read_ahead);
        let (writer_tx, writer_rx) = mpsc::unbounded_channel();
        let (exit_tx, exit_rx) = watch::channel(None);
        let kill = Arc::new(Notify::new());
        let pending = Arc::new(Mutex::new(Pending::default()));

        let stdin_queue = Arc::new(StdinQueue::new(options.process.clone()));
        tokio::spawn(write_loop(stdin, writer_rx, stdin_queue.clone()));
        watch(kill.clone(), exit_tx);
        let stderr_task = match stderr {
            Some(stderr) => tokio::spawn(stderr_loop(
                BufReader::with_capacity(READ_BUFFER_BYTES, stderr),
                events_tx.clone(),
            )),
            None => tokio::spawn(async {}),
        };
        tokio::spawn(read_loop(ReadLoop {
            stdout: BufReader::with_capacity(read_ahead, stdout),
            budget: budget.clone(),
            process: options.process.clone(),
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
        (
            AdapterConnection {
                shared: Arc::new(shared),
            },
            AdapterEvents {
                rx: events_rx,
                budget,
                process: options.process.clone(),
            },
        )
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

    /// Like [`request`](Self::request), but a caller that gives up on the
    /// answer (drops this future) tells the agent so: it is sent
    /// `cancel_method` with `{requestId, reason}` (MCP's
    /// `notifications/cancelled`).
    pub async fn request_or_cancel(
        &self,
        method: &str,
        params: Value,
        cancel_method: &str,
    ) -> Result<Value, AdapterError> {
        let (id, reply) = self.send_request(method, &params)?;
        let guard = PendingGuard {
            pending: &self.shared.pending,
            id,
        };
        let mut notice = CancelNotice {
            conn: self,
            id,
            method: cancel_method,
            armed: true,
        };
        let answer = reply.await.unwrap_or(Err(AdapterError::Exited));
        notice.armed = false;
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
                let everyone = self.shared.stdin.process.stdin_room();
                tokio::pin!(everyone);
                everyone.as_mut().enable();
                let fits = self.stdin_queued_bytes() <= self.shared.max_queued_stdin_bytes
                    && self.shared.stdin.process.stdin_fits();
                if fits
                    || self.shared.stdin_closed.load(Ordering::Acquire)
                    || self.shared.exit.borrow().is_some()
                {
                    return;
                }
                tokio::select! {
                    () = room => {}
                    () = everyone => {}
                }
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

/// Sends its notification when the request it watches is abandoned.
struct CancelNotice<'a> {
    conn: &'a AdapterConnection,
    id: u64,
    method: &'a str,
    armed: bool,
}

impl Drop for CancelNotice<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.conn.notify(
                self.method,
                json!({"requestId": self.id, "reason": "the caller gave up on the request"}),
            );
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], limit: usize) -> Vec<(Vec<u8>, bool)> {
        let mut reader = BufReader::with_capacity(8, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while let LineRead::Line { truncated, .. } =
            read_line_limited(&mut reader, &mut buf, limit, None)
                .await
                .unwrap()
        {
            out.push((buf.clone(), truncated));
        }
        out
    }

    #[tokio::test]
    async fn long_lines_take_from_the_process_budget_or_are_refused() {
        let budget = ProcessBudget::new(1 << 20, 100_000, Duration::from_millis(50));
        let long = vec![b'x'; FREE_LINE_BYTES + 60_000];
        let mut input = long.clone();
        input.push(b'\n');
        input.extend_from_slice(&long);
        input.extend_from_slice(b"\nshort\n");
        let mut reader = BufReader::with_capacity(4096, &input[..]);
        let mut buf = Vec::new();
        let mut charge = LineCharge {
            process: &budget,
            held: 0,
        };
        let whole = LineRead::Line {
            truncated: false,
            refused: false,
        };
        let mut next = async |buf: &mut Vec<u8>, charge: &mut LineCharge<'_>| {
            let read = read_line_limited(&mut reader, buf, 1 << 20, Some(charge)).await;
            (read.unwrap(), std::mem::take(&mut charge.held))
        };
        // The first takes what it keeps past the free part.
        let (read, first) = next(&mut buf, &mut charge).await;
        assert_eq!((read, buf == long, first), (whole, true, 60_000));
        assert_eq!(budget.stdout_held(), 60_000);
        // While it is held, the second finds no room in time: refused and
        // skipped to its end, keeping none of it; what it took on the way
        // is the caller's to give back.
        let (read, held) = next(&mut buf, &mut charge).await;
        let refused = LineRead::Line {
            truncated: false,
            refused: true,
        };
        assert_eq!((read, buf.is_empty()), (refused, true));
        assert!(held <= 40_000, "{held}");
        budget.give_stdout(held);
        assert_eq!(budget.stdout_held(), 60_000);
        // The next line is whole; a short line takes nothing.
        let (read, held) = next(&mut buf, &mut charge).await;
        let whole = LineRead::Line {
            truncated: false,
            refused: false,
        };
        assert_eq!((read, buf.as_slice(), held), (whole, &b"short"[..], 0));
        budget.give_stdout(first);
        assert_eq!(budget.stdout_held(), 0);
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
