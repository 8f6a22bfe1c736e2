//! The composition root: one VM's config resolved into one database handle,
//! the migrated schema, bootstrap recovery and the services. The front doors
//! never receive the `Vm`: each gets a struct of the services it uses, built
//! here (`host_services` for the host door; `SignedServices` for the signed
//! API and `WsState` for its live feed); `serve.rs` runs them and the
//! shutdown.

use std::sync::Arc;
use std::time::Instant;

use agentos_schema::{migrate_all, DatabaseKind, DbError, MigrationError, SharedDatabase};

use crate::config::{Config, ConfigError, DatabaseDescriptor};
use crate::control::{Control, SecretBox, SecretKey};
use crate::host::HostServices;
use crate::http::api::{SignedApi, SignedServices};
use crate::runs::{Executors, Runs, RunsConfig};
use crate::sandbox::Launcher;
use crate::sessions::{Reconciliation, SessionError, SessionStore, Sessions};
use crate::space::Space;
use crate::triggers::Triggers;
use crate::work::{Delegation, ScriptExecutor, TurnExecutor, Turns};
use agentos_scripts::{ScriptEngine, ScriptLimits};
use agentos_vfs::{FsError, Vfs};

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
    #[error("file system: {0}")]
    Fs(#[from] FsError),
    #[error("{0}")]
    Io(String),
    #[error("secrets: {0}")]
    Secrets(#[from] crate::control::ControlError),
    #[error("space: {0}")]
    Space(#[from] crate::space::SpaceError),
    #[error("builtin agent: {0}")]
    Builtin(String),
    #[error("runs: {0}")]
    Runs(#[from] crate::runs::RunError),
}

impl VmError {
    pub fn code(&self) -> &str {
        match self {
            VmError::Config(e) => e.code(),
            VmError::Database(e) => e.code(),
            VmError::Migration(e) => e.code(),
            VmError::Sessions(e) => e.code().as_str(),
            VmError::Fs(e) => e.code().as_str(),
            VmError::Io(_) => "io_error",
            VmError::Secrets(e) => e.code(),
            VmError::Space(e) => e.code(),
            VmError::Builtin(_) => "builtin_agent_failed",
            VmError::Runs(e) => e.code(),
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
    /// How adapters start: their directories and confinement.
    pub launcher: Arc<Launcher>,
    /// The signed control plane's state: accounts, agents, secrets.
    pub control: Control,
    /// Agents' tools and memory.
    pub space: Space,
    /// The signed API's routes, served by the HTTP listener and by the host
    /// socket's `http/request`.
    pub http: axum::Router,
    /// The signed API's open WebSockets, closed first at shutdown.
    pub sockets: Arc<crate::http::ws::Sockets>,
    /// Every execution as a row of one tree that is also the queue.
    pub runs: Runs,
    /// Prompt turns as runs, for the front doors.
    pub turns: Turns,
    /// Agents' triggers and their firings.
    pub triggers: Triggers,
    /// MCP servers (closed at shutdown).
    pub mcp: crate::mcp::Mcp,
}

/// The environment variable that may hold the secrets key (hex or base64).
pub const SECRETS_KEY_ENV: &str = "AGENTOS_SECRETS_KEY";

/// Where the key that seals provider secrets comes from.
pub enum KeySource {
    File(std::path::PathBuf),
    /// The value of `AGENTOS_SECRETS_KEY`.
    Env(String),
}

/// `secrets.keyFile`, else `AGENTOS_SECRETS_KEY`, else `secrets.key` beside
/// a `sqlite_file` database. An `actor_uds` VM that names none has no key
/// (`None`): its database lives with the host and the key must not sit
/// beside it, so its vault stays locked.
pub fn secrets_key_source(config: &Config) -> Option<KeySource> {
    if let Some(path) = &config.secrets.key_file {
        return Some(KeySource::File(path.clone()));
    }
    if let Ok(value) = std::env::var(SECRETS_KEY_ENV) {
        return Some(KeySource::Env(value));
    }
    match &config.database {
        DatabaseDescriptor::SqliteFile { .. } => {
            Some(KeySource::File(config.data_dir().join("secrets.key")))
        }
        DatabaseDescriptor::ActorUds { .. } => None,
    }
}

/// The vault that seals provider secrets (a missing key file is created),
/// locked when the VM has no key: everything else is served, and what
/// needs a secret answers `vault_locked` naming `secrets.keyFile`.
pub fn secret_box(config: &Config) -> Result<SecretBox, VmError> {
    Ok(match secrets_key_source(config) {
        Some(KeySource::File(path)) => SecretBox::new(SecretKey::load_or_create(&path)?),
        Some(KeySource::Env(value)) => SecretBox::new(SecretKey::from_env_value(&value)?),
        None => {
            tracing::warn!(
                setting = "secrets.keyFile",
                "no secrets key: the vault is locked; sessions, the file system and every action that needs no secret are served, and setting a secret or opening a provider key answers vault_locked until secrets.keyFile (or {SECRETS_KEY_ENV}) names a key"
            );
            SecretBox::locked()
        }
    })
}

/// The builtin model agent: its verbs and host, and the command sessions
/// of `builtin` start (this executable's `agent`).
#[allow(clippy::too_many_arguments)]
fn builtin_services(
    config: &Config,
    control: &Control,
    db: &agentos_schema::SharedDatabase,
    space: &Space,
    sessions: &Sessions,
    turns: &Turns,
    triggers: &Triggers,
    mcp: &crate::mcp::Mcp,
    hypermedia: crate::hypermedia::Hypermedia,
) -> Result<crate::builtin::Services, VmError> {
    use crate::builtin::{fetch::Fetcher, host, verbs::Verbs};
    let fetcher = Fetcher::new().map_err(|e| VmError::Builtin(e.to_string()))?;
    let downloader = crate::builtin::download::Downloader::new(
        config.builtin.allow_private_downloads,
        config.limits.control.max_downloads,
    )
    .map_err(|e| VmError::Builtin(e.to_string()))?;
    let ipfs = downloader
        .for_operator()
        .map_err(|e| VmError::Builtin(e.to_string()))?;
    let verbs = Verbs::new(
        control.clone(),
        SessionStore::new(db.clone()),
        space.clone(),
        (fetcher, downloader),
        triggers.clone(),
    )
    .with_mcp(mcp.clone())
    .with_hypermedia(
        hypermedia,
        ipfs,
        crate::hypermedia::drafts::DraftStore::new(db.clone()),
    );
    verbs.attach(sessions.clone(), turns.clone());
    let endpoint = |key: &str, default: &str| {
        config
            .builtin
            .provider_endpoints
            .get(key)
            .cloned()
            .unwrap_or_else(|| default.to_owned())
    };
    let oauth = crate::builtin::oauth::OAuth::new(
        control.clone(),
        config.builtin.subscription_auth,
        crate::builtin::oauth::OAuthEndpoints {
            issuer: endpoint("openai-oauth", crate::builtin::oauth::flow::DEFAULT_ISSUER),
            codex: endpoint("openai-codex", crate::builtin::oauth::DEFAULT_CODEX_BASE),
        },
    )
    .map_err(|e| VmError::Builtin(e.to_string()))?;
    let oauth = Arc::new(oauth);
    let host = Arc::new(
        host::Host::new(
            control.clone(),
            SessionStore::new(db.clone()),
            verbs.clone(),
            host::ProviderEndpoints {
                pinned: config.builtin.provider_endpoints.clone(),
                allow_private: config.builtin.allow_private_endpoints,
                provider_retries: config.builtin.provider_retries,
            },
            oauth.clone(),
        )
        .map_err(|e| VmError::Builtin(e.message))?,
    );
    if config.builtin.session_titles {
        let titles = crate::builtin::titles::Titles::new(
            host.clone(),
            control.clone(),
            sessions.clone(),
            SessionStore::new(db.clone()),
        );
        titles.spawn(turns.runs().subscribe());
    }
    // In-process agents share one provider client (its pools and TLS
    // roots built once) and one budget for what they hold between turns;
    // an agent process has its own.
    let in_process = if config.builtin.agent_process {
        None
    } else {
        Some(crate::sessions::InProcess {
            provider: agentos_adapters::builtin::provider::Provider::new(Default::default())
                .map_err(|e| VmError::Builtin(e.message))?,
            options: Default::default(),
        })
    };
    match crate::builtin::agent_spec() {
        Ok(spec) => {
            sessions.set_builtin(
                spec,
                host.clone(),
                std::time::Duration::from_millis(config.builtin.idle_agent_ms),
                in_process,
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "this executable cannot be found; builtin sessions cannot start")
        }
    }
    Ok(crate::builtin::Services { host, verbs, oauth })
}

impl Vm {
    /// What the host door serves: the services it calls and the settings
    /// it reports, nothing else of the VM.
    pub fn host_services(&self) -> HostServices {
        HostServices {
            sessions: self.sessions.clone(),
            turns: self.turns.clone(),
            runs: self.runs.clone(),
            triggers: self.triggers.clone(),
            attachments: self.space.attachments.clone(),
            uploads: self.space.uploads.clone(),
            vfs: self.vfs.clone(),
            control: self.control.clone(),
            sockets: self.sockets.clone(),
            http: self.http.clone(),
            limits: self.config.limits.clone(),
            allowed_uids: self.config.allowed_uids.clone(),
            database_kind: self.database_kind,
            started: self.started,
            launcher: self.launcher.clone(),
        }
    }

    /// Resolves the descriptor once, migrates every owner, recovers
    /// interrupted turns and builds the services.
    pub async fn open(config: Config) -> Result<Arc<Vm>, VmError> {
        config.validate()?;
        let started = Instant::now();
        let db = agentos_storage::open(&config.database, &config.limits.sqlite).await?;
        migrate_all(&*db).await?;
        // Every store shares this handle, so every write to a table the
        // control plane keeps in memory is counted.
        let watched = agentos_storage::watch::Watched::new(db, crate::control::WATCHED)?;
        let versions = watched.versions();
        let db: SharedDatabase = Arc::new(watched);
        let vfs = Vfs::open(
            db.clone(),
            config
                .limits
                .fs
                .clone()
                .validated()
                .map_err(ConfigError::from)?,
            config.filesystem.clone().into(),
        )
        .await?;
        let sessions = Sessions::new(
            SessionStore::new(db.clone()),
            config.agents.clone(),
            config.limits.acp.clone(),
            Some(Arc::new(crate::sessions::AcpFs::new(vfs.clone()))),
        );
        let launcher = Arc::new(Launcher::for_config(&config));
        let sessions = sessions.with_launcher(launcher.clone());
        let recovered = sessions.bootstrap().await?;
        if recovered != Reconciliation::default() {
            tracing::warn!(?recovered, "recovered interrupted turns at start");
        }
        let runs = Runs::new(db.clone(), RunsConfig::from(&config.limits.runs));
        let recovered_runs = runs.bootstrap().await?;
        if recovered_runs > 0 {
            tracing::warn!(
                runs = recovered_runs,
                "recovered runs nobody works at start"
            );
        }
        let turns = Turns::new(runs.clone(), sessions.clone());
        let control = Control::keeping(
            db.clone(),
            config.limits.control.clone(),
            secret_box(&config)?,
            versions.clone(),
        );
        let space = Space::new(db.clone(), &vfs, &config.limits.control)?.keeping(versions.clone());
        let hypermedia = crate::hypermedia::Hypermedia::new(&config.hypermedia)
            .map_err(|e| VmError::Builtin(e.to_string()))?;
        let triggers = Triggers::new(
            db.clone(),
            control.clone(),
            sessions.clone(),
            runs.clone(),
            &config.limits.control,
            hypermedia.clone(),
        );
        let mcp = crate::mcp::Mcp::new(
            db.clone(),
            control.clone(),
            config.mcp.clone(),
            launcher.clone(),
        )
        .map_err(|e| VmError::Builtin(e.to_string()))?;
        let builtin = builtin_services(
            &config, &control, &db, &space, &sessions, &turns, &triggers, &mcp, hypermedia,
        )?;
        // Scripts run as their agent's verbs; children start through the
        // delegation, which also brings their results back.
        let limits = &config.limits.runs;
        let engine = ScriptEngine::new(ScriptLimits {
            max_journal_entries: usize::try_from(limits.max_journal_entries).unwrap_or(usize::MAX),
            max_journal_bytes: usize::try_from(limits.max_journal_bytes).unwrap_or(usize::MAX),
            ..ScriptLimits::default()
        });
        let delegation_cell = Arc::new(std::sync::OnceLock::new());
        let tools = Arc::new(crate::builtin::script_tools::BuiltinScriptTools {
            host: builtin.host.clone(),
            verbs: builtin.verbs.clone(),
            runs: runs.clone(),
        });
        runs.set_executors(Executors {
            agent: TurnExecutor::new(sessions.clone()),
            script: Some(ScriptExecutor::new(
                engine.clone(),
                tools,
                delegation_cell.clone(),
            )),
        });
        let delegation = Delegation::new(runs.clone(), sessions.clone(), control.clone(), engine);
        let _ = delegation_cell.set(delegation.clone());
        runs.set_resolver(delegation.clone());
        builtin.verbs.attach_delegation(delegation);
        runs.start();
        // One set of download slots for the door and the verb.
        let downloader = builtin.verbs.downloader.clone();
        let oauth = builtin.oauth.clone();
        let api = SignedApi::new(
            SignedServices {
                control: control.clone(),
                sessions: sessions.clone(),
                turns: turns.clone(),
                space: space.clone(),
                builtin: Some(builtin),
                triggers: triggers.clone(),
                downloader,
                mcp: mcp.clone(),
            },
            config.http.clone(),
        );
        let sockets = api.sockets().clone();
        {
            let sockets = sockets.clone();
            oauth.set_notifier(Arc::new(move |account: &str, why: &str| {
                sockets.account_changed(&[account.to_owned()], why, None, None)
            }));
        }
        let ws = crate::http::ws::WsState::new(
            api.verifier().clone(),
            sockets.clone(),
            control.clone(),
            sessions.clone(),
            runs.clone(),
        );
        let state = Arc::new(crate::http::HttpState {
            config: config.http.clone(),
            started,
            database_kind: db.kind().as_str(),
            subscription_auth: config.builtin.subscription_auth,
            api,
            ws,
            bodies: crate::http::Bodies::new(config.http.max_buffered_body_bytes),
        });
        // Sessions a firing opens are announced like the doors' own.
        let mut opened = triggers.subscribe();
        let announcer = state.clone();
        tokio::spawn(async move {
            loop {
                match opened.recv().await {
                    Ok(o) => {
                        announcer
                            .api
                            .announce_session(
                                &o.agent_id,
                                &o.session_id,
                                crate::http::ws::reason::SESSION_CREATED,
                            )
                            .await
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        triggers.start(std::time::Duration::from_millis(config.triggers.tick_ms));
        let http = crate::http::router(state);
        Ok(Arc::new(Vm {
            control,
            space,
            http,
            sockets,
            database_kind: db.kind(),
            db,
            config,
            sessions,
            vfs,
            started,
            recovered,
            launcher,
            runs,
            turns,
            triggers,
            mcp,
        }))
    }
}
