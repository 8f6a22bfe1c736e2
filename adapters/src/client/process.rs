//! The adapter as a child process: its confinement (a Landlock ruleset and
//! the seccomp filter, entered between fork and exec), the byte-counted
//! queue to its stdin and the task that writes it, the task that owns the
//! child and records its exit, and killing its whole process group.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::*;

/// A Landlock ruleset, created by the caller, that the child enters between
/// `fork` and `exec` (after `PR_SET_NO_NEW_PRIVS`). Built outside this crate
/// so the adapter layer stays free of policy; it only applies it.
#[derive(Clone, Debug)]
pub struct Confinement(pub(super) Arc<OwnedFd>);

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

/// Bytes queued for the adapter's stdin and not yet written, counted in
/// the process's budget too.
pub(super) struct StdinQueue {
    pub(super) bytes: AtomicUsize,
    pub(super) room: Notify,
    pub(super) process: Arc<ProcessBudget>,
}

impl StdinQueue {
    pub(super) fn new(process: Arc<ProcessBudget>) -> StdinQueue {
        StdinQueue {
            bytes: AtomicUsize::new(0),
            room: Notify::new(),
            process,
        }
    }

    pub(super) fn added(&self, n: usize) {
        self.bytes.fetch_add(n, Ordering::AcqRel);
        self.process.stdin_added(n);
    }

    pub(super) fn written(&self, n: usize) {
        self.bytes.fetch_sub(n, Ordering::AcqRel);
        self.room.notify_waiters();
        self.process.stdin_written(n);
    }
}

pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    stdin: W,
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
pub(super) fn enter_ruleset(fd: std::os::fd::RawFd) -> std::io::Result<()> {
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
pub(super) fn kill_group(group: Option<libc::pid_t>) {
    if let Some(group) = group.filter(|g| *g > 1) {
        // SAFETY: kill(2) has no memory effects; ESRCH (nobody left) is fine.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
}

pub(super) async fn wait_loop(
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

/// The in-process agent's counterpart of [`wait_loop`]: it owns the agent's
/// task, ends it when asked, and reports how it ended as a process would
/// (0 for a clean end, 1 for an error, 101 for a panic, SIGKILL when ended).
pub(super) async fn task_loop(
    mut task: tokio::task::JoinHandle<std::io::Result<()>>,
    kill: Arc<Notify>,
    exit: watch::Sender<Option<ExitStatus>>,
) {
    use std::os::unix::process::ExitStatusExt;
    let status = tokio::select! {
        ended = &mut task => match ended {
            Ok(Ok(())) => ExitStatus::from_raw(0),
            Ok(Err(error)) => {
                tracing::warn!(%error, "the in-process agent ended with an error");
                ExitStatus::from_raw(1 << 8)
            }
            Err(error) => {
                tracing::error!(%error, "the in-process agent panicked");
                ExitStatus::from_raw(101 << 8)
            }
        },
        _ = kill.notified() => {
            task.abort();
            let _ = task.await;
            ExitStatus::from_raw(libc::SIGKILL)
        }
    };
    let _ = exit.send(Some(status));
}

pub(super) fn split_status(status: Option<ExitStatus>) -> (Option<i32>, Option<i32>) {
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
