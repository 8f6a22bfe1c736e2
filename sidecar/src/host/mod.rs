//! The host front door: length-delimited JSON-RPC 2.0 on a Unix socket
//! (mode 0600), for the host actor and operators. A connecting process must
//! run under an allowed uid (`allowedUids`, checked with `SO_PEERCRED`;
//! by default only the sidecar's own), so adapters run under another uid
//! cannot reach it.
//!
//! Bytes become frames in `FrameDecoder`, frames become messages in
//! `decode_message`, and messages become service calls in `dispatch.rs`
//! (`fs.rs` for the file system, `runs.rs` for runs), whose typed answers
//! `render.rs` maps to the wire types of `protocol::host`. The listener
//! (here) bounds connections with a semaphore and backs off when accepting
//! fails; each connection (`connection.rs`) runs every request as its own
//! task so a long prompt never blocks other calls on the same connection,
//! and one writer task owns the socket's write half. Protocol faults get the standard codes
//! and leave the connection open whenever the frame boundary is intact; an
//! oversize frame is answered and the connection closed, since its bytes
//! cannot be skipped safely.

mod codec;
mod connection;
mod dispatch;
mod fs;
mod render;
mod runs;
mod signers;
mod triggers;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::{watch, Semaphore};

use agentos_schema::DatabaseKind;
use agentos_vfs::Vfs;

use crate::config::{HostLimits, Limits};
use crate::control::Control;
use crate::http::ws::Sockets;
use crate::runs::Runs;
use crate::sandbox::Launcher;
use crate::sessions::Sessions;
use crate::work::Turns;

pub use render::{error_object, fs_error_object};

/// The first and the longest pause after a failed accept (for example at
/// the descriptor limit), doubling in between, so the loop never spins.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot bind {path}: {message}")]
    Bind { path: PathBuf, message: String },
}

impl HostError {
    pub fn code(&self) -> &'static str {
        match self {
            HostError::Bind { .. } => "host_bind_failed",
        }
    }
}

/// What the host door serves, and nothing else of the VM: the
/// composition root builds it (`Vm::host_services`).
pub struct HostServices {
    pub sessions: Sessions,
    /// `sessions/prompt`: the one turn entry.
    pub turns: Turns,
    /// The `runs/*` methods.
    pub runs: Runs,
    /// The `triggers/*` methods.
    pub triggers: crate::triggers::Triggers,
    /// A deleted session's attachments and uploads go with it.
    pub attachments: crate::space::SessionAttachments,
    pub uploads: crate::space::uploads::Uploads,
    /// The `fs/*` methods, and the file system's use in `vm/status`.
    pub vfs: Vfs,
    /// The `signers/*` methods, and whether the vault is locked.
    pub control: Control,
    /// The signed API's sockets, which `signers/revoke` closes.
    pub sockets: Arc<Sockets>,
    /// The signed API's routes, which `http/request` runs.
    pub http: axum::Router,
    /// Every limit of the VM, as `initialize` and `vm/status` report them.
    pub limits: Limits,
    /// `allowedUids`: who may connect (by default only the sidecar's uid).
    pub allowed_uids: Option<Vec<u32>>,
    pub database_kind: DatabaseKind,
    /// When the VM started, for `vm/status`'s uptime.
    pub started: std::time::Instant,
    /// How adapters start, for `vm/status`'s confinement.
    pub launcher: Arc<Launcher>,
}

/// A bound host socket.
pub struct HostServer {
    listener: UnixListener,
    path: PathBuf,
    services: Arc<HostServices>,
    limits: HostLimits,
    allowed_uids: Vec<u32>,
}

impl HostServer {
    /// Binds the socket with mode 0600, replacing a stale socket file.
    pub fn bind(
        path: &Path,
        services: HostServices,
        limits: HostLimits,
    ) -> Result<HostServer, HostError> {
        let err = |message: String| HostError::Bind {
            path: path.to_owned(),
            message,
        };
        let listener = agentos_base::private::bind_private_socket(path).map_err(err)?;
        // SAFETY: getuid(2) cannot fail and has no memory effects.
        let own_uid = unsafe { libc::getuid() };
        let allowed_uids = services
            .allowed_uids
            .clone()
            .unwrap_or_else(|| vec![own_uid]);
        Ok(HostServer {
            listener,
            path: path.to_owned(),
            services: Arc::new(services),
            limits,
            allowed_uids,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts connections until `shutdown` resolves; then stops accepting,
    /// removes the socket file and tells every connection to finish. The
    /// returned handle waits for the connections to close.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) -> Draining {
        let max = self.limits.max_connections;
        let permits = Arc::new(Semaphore::new(max as usize));
        let shared =
            connection::Shared::new(&self.limits, self.services.sessions.counters().clone());
        let (stop, stopping) = watch::channel(false);
        let mut backoff = ACCEPT_BACKOFF_MIN;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.listener.accept() => {
                    let stream = match accepted {
                        Ok((stream, _)) => {
                            backoff = ACCEPT_BACKOFF_MIN;
                            stream
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, pause_ms = backoff.as_millis() as u64, "accepting a host connection failed; pausing");
                            tokio::select! {
                                _ = &mut shutdown => break,
                                _ = tokio::time::sleep(backoff) => {}
                            }
                            backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                            continue;
                        }
                    };
                    match stream.peer_cred() {
                        Ok(cred) if self.allowed_uids.contains(&cred.uid()) => {}
                        Ok(cred) => {
                            tracing::warn!(uid = cred.uid(), pid = ?cred.pid(), "refusing a host connection: its uid is not in allowedUids");
                            drop(stream);
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "refusing a host connection: its credentials cannot be read");
                            drop(stream);
                            continue;
                        }
                    }
                    let Ok(permit) = permits.clone().try_acquire_owned() else {
                        tracing::warn!("refusing a host connection: limits.host.maxConnections reached");
                        drop(stream);
                        continue;
                    };
                    let services = self.services.clone();
                    let limits = self.limits.clone();
                    let stopping = stopping.clone();
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        connection::serve_connection(stream, services, limits, shared, stopping).await;
                        drop(permit);
                    });
                }
            }
        }
        drop(self.listener);
        let _ = std::fs::remove_file(&self.path);
        let _ = stop.send(true);
        Draining {
            permits,
            max,
            _stop: stop,
        }
    }
}

/// Connections finishing after the server stopped accepting.
pub struct Draining {
    permits: Arc<Semaphore>,
    max: u32,
    _stop: watch::Sender<bool>,
}

impl Draining {
    /// Waits up to `deadline` for every connection to close; `true` when
    /// they all did.
    pub async fn wait(&self, deadline: Duration) -> bool {
        match tokio::time::timeout(deadline, self.permits.acquire_many(self.max)).await {
            Ok(Ok(all)) => {
                drop(all);
                true
            }
            _ => false,
        }
    }
}
