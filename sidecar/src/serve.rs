//! Running a VM: open it, bind the host socket, print the ready line, serve
//! until SIGTERM or SIGINT, then shut down gracefully.
//!
//! Shutdown, in order: stop accepting and tell every connection
//! (`lifecycle/shutdown`); give requests in flight a grace period to finish
//! on their own; stop every adapter, which settles a turn still in flight as
//! a restart would and fails its prompt with `vm_shutdown`; let the
//! connections answer and drain their outboxes within a deadline; close the
//! database. A clean shutdown exits 0.

use std::time::Duration;

use crate::config::{Config, ConfigError};
use crate::host::{HostError, HostServer};
use crate::http::{HttpError, HttpServer};
use crate::vm::{Vm, VmError};
use agentos_base::private::{LockError, StoreLock};

/// How long requests in flight may take to finish on their own.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long connections may take to answer and drain once adapters stopped.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Vm(#[from] VmError),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Locked(#[from] LockError),
    #[error(transparent)]
    Http(#[from] HttpError),
}

impl ServeError {
    pub fn code(&self) -> &str {
        match self {
            ServeError::Vm(e) => e.code(),
            ServeError::Host(e) => e.code(),
            ServeError::Locked(e) => e.code(),
            ServeError::Http(e) => e.code(),
        }
    }
}

impl From<ConfigError> for ServeError {
    fn from(e: ConfigError) -> Self {
        ServeError::Vm(VmError::Config(e))
    }
}

/// Descriptors the sidecar needs besides its host connections: the
/// database (and its WAL and SHM), the listener, the store lock, adapters'
/// pipes and the runtime's own.
const RESERVED_DESCRIPTORS: u64 = 256;

/// The descriptors `max_connections` host connections need, and the soft
/// limit when it is lower (`None` when it is enough or cannot be read).
pub fn descriptor_shortfall(max_connections: u32) -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes only into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    let needed = u64::from(max_connections) + RESERVED_DESCRIPTORS;
    let soft: u64 = limit.rlim_cur;
    (limit.rlim_cur != libc::RLIM_INFINITY && soft < needed).then_some((needed, soft))
}

/// The signals that stop the sidecar, registered at once: a SIGTERM that
/// arrives after the ready line (but before the serve loop first waits)
/// must start a graceful shutdown, not kill the process by default.
struct Termination {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Termination {
    fn register() -> Termination {
        use tokio::signal::unix::{signal, SignalKind};
        Termination {
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
        }
    }

    /// Resolves on the first SIGTERM or SIGINT.
    async fn received(self) {
        match (self.term, self.int) {
            (Some(mut term), Some(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

/// Runs the sidecar until SIGINT or SIGTERM, then shuts it down: its
/// services on the runtime this is called on, the HTTP door on
/// `http_runtime`.
pub async fn serve(config: Config, http_runtime: tokio::runtime::Handle) -> Result<(), ServeError> {
    let socket = config
        .socket
        .clone()
        .ok_or_else(|| ConfigError::new("socket", "is required to serve"))?;
    let host_limits = config.limits.host.clone();
    if let Some((needed, soft)) = descriptor_shortfall(host_limits.max_connections) {
        tracing::warn!(
            needed,
            soft_limit = soft,
            "the descriptor limit (RLIMIT_NOFILE) is below what limits.host.maxConnections needs; raise it (ulimit -n) or lower the setting"
        );
    }
    // One sidecar per store: the lock sits beside the database file (or the
    // actor socket) and is held until this function returns.
    let _lock = StoreLock::acquire(config.database.path())?;
    let termination = Termination::register();
    let vm = Vm::open(config).await?;
    let server = HostServer::bind(&socket, vm.host_services(), host_limits)?;
    let http = match vm.config.http.listener()? {
        Some(listen) => Some(HttpServer::bind_on(&http_runtime, &listen).await?),
        None => None,
    };
    let http_address = http.as_ref().map(|h| h.address.clone());
    let http = http.map(|h| {
        h.serve(
            &http_runtime,
            vm.http.clone(),
            vm.sockets.clone(),
            &vm.config.http,
        )
    });
    let ready = serde_json::json!({
        "event": "ready",
        "socket": socket,
        "http": http_address,
        "database": vm.database_kind.as_str(),
        "startupMs": vm.started.elapsed().as_secs_f64() * 1000.0,
    });
    println!("{ready}");
    let draining = server.serve(termination.received()).await;
    tracing::info!("shutting down: no longer accepting; requests in flight may finish");
    // The HTTP listener stops now; its requests in flight have the grace
    // period and then until the turns are settled to be answered, which
    // happens below: a turn's caller hears how the shutdown ended it.
    let http = http.map(|running| {
        tokio::spawn(async move { running.shutdown(SHUTDOWN_GRACE + SHUTDOWN_DRAIN).await })
    });
    let finished = draining.wait(SHUTDOWN_GRACE).await;
    vm.runs.shutdown();
    vm.sessions.shutdown().await;
    // The operator's command servers end with their connections.
    vm.mcp.close_all().await;
    if !vm.runs.drain(SHUTDOWN_DRAIN).await {
        tracing::warn!("some runs were still being settled at the shutdown deadline");
    }
    if !finished && !draining.wait(SHUTDOWN_DRAIN).await {
        tracing::warn!("some host connections did not drain before the shutdown deadline");
    }
    if let Some(http) = http {
        if !http.await.unwrap_or(false) {
            tracing::warn!("some HTTP requests did not finish before the shutdown deadline");
        }
    }
    vm.db.close().await;
    tracing::info!("shut down");
    Ok(())
}
