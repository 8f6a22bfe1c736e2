//! The composition root: one VM's config resolved into one database handle,
//! the migrated schema, bootstrap recovery, the services and the host socket.

use std::sync::Arc;
use std::time::Instant;

use agentos_schema::{migrate_all, DatabaseKind, DbError, MigrationError, SharedDatabase};

use crate::config::{Config, ConfigError};
use crate::host::{HostError, HostServer};
use crate::sessions::{Reconciliation, SessionError, SessionStore, Sessions};
use crate::vfs::acp::AcpFs;
use crate::vfs::{FsError, Vfs};

#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("database: {0}")]
    Database(#[from] DbError),
    #[error(transparent)]
    Migration(#[from] MigrationError),
    #[error("bootstrap: {0}")]
    Sessions(#[from] SessionError),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("file system: {0}")]
    Fs(#[from] FsError),
    #[error("{0}")]
    Io(String),
}

impl VmError {
    pub fn code(&self) -> &str {
        match self {
            VmError::Config(e) => e.code(),
            VmError::Database(e) => e.code(),
            VmError::Migration(e) => e.code(),
            VmError::Sessions(e) => e.code(),
            VmError::Host(e) => e.code(),
            VmError::Fs(e) => e.code(),
            VmError::Io(_) => "io_error",
        }
    }
}

/// One logical VM's services over its one database handle.
pub struct Vm {
    pub config: Config,
    pub db: SharedDatabase,
    pub database_kind: DatabaseKind,
    pub sessions: Sessions,
    pub vfs: Vfs,
    pub started: Instant,
    pub recovered: Reconciliation,
}

impl Vm {
    /// Resolves the descriptor once, migrates every owner, recovers
    /// interrupted turns and builds the services.
    pub async fn open(config: Config) -> Result<Arc<Vm>, VmError> {
        config.validate()?;
        let started = Instant::now();
        let db = crate::db::open(&config.database, &config.limits.sqlite).await?;
        migrate_all(&*db).await?;
        let vfs = Vfs::open(
            db.clone(),
            config.limits.fs.clone().validated()?,
            config.filesystem.clone().into(),
        )
        .await?;
        let sessions = Sessions::new(
            SessionStore::new(db.clone()),
            config.agents.clone(),
            config.limits.acp.clone(),
            Some(Arc::new(AcpFs::new(vfs.clone()))),
        );
        let recovered = sessions.bootstrap().await?;
        if recovered != Reconciliation::default() {
            tracing::warn!(?recovered, "recovered interrupted turns at start");
        }
        Ok(Arc::new(Vm {
            database_kind: db.kind(),
            db,
            config,
            sessions,
            vfs,
            started,
            recovered,
        }))
    }
}

/// Runs the sidecar until SIGINT or SIGTERM.
pub async fn serve(config: Config) -> Result<(), VmError> {
    let socket = config
        .socket
        .clone()
        .ok_or_else(|| ConfigError::new("socket", "is required to serve"))?;
    let host_limits = config.limits.host.clone();
    let vm = Vm::open(config).await?;
    let server = HostServer::bind(&socket, vm.clone(), host_limits)?;
    let ready = serde_json::json!({
        "event": "ready",
        "socket": socket,
        "database": vm.database_kind.as_str(),
        "startupMs": vm.started.elapsed().as_secs_f64() * 1000.0,
    });
    println!("{ready}");
    let shutdown = async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    server.serve(shutdown).await;
    vm.sessions.shutdown().await;
    Ok(())
}
