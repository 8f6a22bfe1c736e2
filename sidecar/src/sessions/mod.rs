//! Durable ACP sessions: the service API the front doors call.
//!
//! `Sessions` validates input, answers read-only calls from SQLite without
//! ever starting an adapter, enforces idempotency and limits, and hands
//! everything that writes history to the session's route task (`route.rs`),
//! starting it (the restore ladder) when a prompt or a config change needs
//! one. One route start at a time per session. The service knows nothing of
//! JSON-RPC or sockets: it returns domain values and `SessionError`s.

mod acp_fs;
mod agent_host;
pub mod coalesce;
mod counters;
mod error;
pub mod hub;
pub mod interrupts;
mod notice;
mod route;
mod routes;
mod shared;
pub mod store;
mod subscribe;
mod turns;
mod types;

use std::collections::BTreeMap;
use std::sync::Arc;

use agentos_protocol::session::{Actor, PermissionPolicy};
use agentos_protocol::ErrorCode;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, oneshot};

pub use agent_host::{AgentHost, TurnScope};
pub use counters::{MemoryCounters, MemorySnapshot};
pub use error::SessionError;
pub use hub::{Batch, FrameCache, Hub, Item, Sink, SinkRefusal, Tap};
pub use notice::{KeepAwake, Notice};
pub use shared::InProcess;
pub use store::{HistoryPage, Reconciliation, SessionRow, SessionStore};
pub use turns::{RunTurn, StartRun, TurnProgress};
pub use types::{
    AgentReply, CancelStatus, LimitUse, NotPendingReason, OpenSession, PermissionAnswer,
    PromptOutcome, SessionConfig, SessionInfo, SessionPage, SessionState, Usage, VmStatus,
};

use crate::config::{AcpLimits, AgentSpec};
pub use acp_fs::{AcpFs, FsBridge};
use route::{Command, PromptRequest, StopReason, TurnRun};
pub(crate) use shared::{lock, Shared};
use store::{NewSession, PromptState};

pub use route::build_continuation;

/// A session opened without `cwd` gets `DEFAULT_CWD/<escaped session id>`,
/// its own, so sessions never share files by accident.
const DEFAULT_CWD: &str = "/home/agentos/sessions";
const DEFAULT_SESSION_ID: &str = "main";
const DEFAULT_LIST_LIMIT: u64 = 50;
const DEFAULT_HISTORY_LIMIT: u64 = 100;

/// The durable sessions service.
#[derive(Clone)]
pub struct Sessions {
    shared: Arc<Shared>,
}

/// SHA-256 of the canonical `{"content":…,"formatVersion":1}`: keys in
/// order, as serde_json writes an ordered map, and the words written as
/// they are, without a copy of them.
pub fn input_hash(content: &[Value]) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Canonical<'a> {
        content: &'a [Value],
        #[serde(rename = "formatVersion")]
        format_version: u8,
    }
    let canonical = Canonical {
        content,
        format_version: 1,
    };
    // Serializing plain JSON values into memory cannot fail.
    let text = serde_json::to_vec(&canonical).unwrap_or_default();
    Sha256::digest(&text).to_vec()
}

/// Titles travel in every list and change event: at most 1,024 bytes.
const MAX_TITLE_BYTES: usize = 1024;

fn check_title(title: Option<&str>) -> Result<(), SessionError> {
    if title.is_some_and(|t| t.len() > MAX_TITLE_BYTES) {
        return Err(SessionError::InvalidArgument(format!(
            "title must be at most {MAX_TITLE_BYTES} bytes"
        )));
    }
    Ok(())
}

fn check_absolute(field: &str, path: &str) -> Result<(), SessionError> {
    if !path.starts_with('/') || path.contains('\0') {
        return Err(SessionError::InvalidArgument(format!(
            "{field} must be an absolute path"
        )));
    }
    Ok(())
}

impl Sessions {
    pub fn new(
        store: SessionStore,
        agents: BTreeMap<String, AgentSpec>,
        limits: AcpLimits,
        fs: Option<Arc<dyn FsBridge>>,
    ) -> Sessions {
        Sessions {
            shared: Arc::new(Shared::new(store, agents, limits, fs)),
        }
    }

    /// Lets sessions of the builtin model agent start: `spec` runs it, and
    /// `host` answers its `_agentos/*` requests. Set once; a second call is
    /// refused with `false`.
    /// The builtin agent: how it starts, what answers its `_agentos/*`, and
    /// how long an idle session keeps its process.
    pub fn set_builtin(
        &self,
        spec: AgentSpec,
        host: Arc<dyn AgentHost>,
        idle: std::time::Duration,
        in_process: Option<InProcess>,
    ) -> bool {
        self.shared
            .builtin
            .set(shared::BuiltinAgent {
                spec,
                host,
                idle,
                in_process,
            })
            .is_ok()
    }

    /// Starts adapters through `launcher`; call it on a service just built.
    pub fn with_launcher(mut self, launcher: Arc<crate::sandbox::Launcher>) -> Sessions {
        match Arc::get_mut(&mut self.shared) {
            Some(shared) => shared.launcher = launcher,
            None => tracing::error!("with_launcher on a service already in use; ignored"),
        }
        self
    }

    pub fn store(&self) -> &SessionStore {
        &self.shared.store
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.shared.hub
    }

    pub fn limits(&self) -> &AcpLimits {
        &self.shared.limits
    }

    pub fn agents(&self) -> &BTreeMap<String, AgentSpec> {
        &self.shared.agents
    }

    pub fn notices(&self) -> broadcast::Receiver<Notice> {
        self.shared.notices.subscribe()
    }

    /// Says that a session was renamed by the sidecar itself (a generated
    /// title), for whoever shows it live.
    pub fn announce_renamed(&self, session_id: &str) {
        let _ = self.shared.renamed.send(session_id.to_owned());
    }

    /// The sessions renamed by the sidecar itself, as it happens.
    pub fn renames(&self) -> broadcast::Receiver<String> {
        self.shared.renamed.subscribe()
    }

    /// The VM-wide counters of bounded queues (shared with the host door).
    pub fn counters(&self) -> &Arc<MemoryCounters> {
        &self.shared.counters
    }

    pub fn keep_awake_holders(&self) -> u64 {
        self.shared.keep_awake.holders()
    }

    pub fn live_routes(&self) -> usize {
        lock(&self.shared.routes)
            .values()
            .filter(|r| r.is_alive())
            .count()
    }

    /// Crash recovery at start.
    pub async fn bootstrap(&self) -> Result<Reconciliation, SessionError> {
        let reconciliation = self.shared.store.reconcile().await?;
        self.shared.refresh_vm_counts().await?;
        Ok(reconciliation)
    }

    async fn row(&self, session_id: &str) -> Result<SessionRow, SessionError> {
        self.shared
            .store
            .get_session(session_id)
            .await?
            .ok_or_else(|| SessionError::NotFound(session_id.to_owned()))
    }

    /// A session read alone: a waiting session lists its pending requests.
    async fn info(&self, row: &SessionRow) -> Result<SessionInfo, SessionError> {
        let requests = match row.state.as_str() {
            "waiting" => Some(
                self.shared
                    .store
                    .pending_permissions(&row.session_id)
                    .await?,
            ),
            _ => None,
        };
        Ok(SessionInfo::from_row(row, SessionState::of(row, requests)))
    }

    /// Idempotent open. Never starts an adapter.
    pub async fn open(&self, params: OpenSession) -> Result<SessionInfo, SessionError> {
        let new = self.new_session(&params)?;
        let session_id = new.session_id.clone();
        if let Some(existing) = self.shared.store.get_session(&session_id).await? {
            check_same(&existing, &new, &params)?;
            return self.info(&existing).await;
        }
        let max = self.shared.limits.max_sessions_per_vm;
        match self.shared.store.insert_session(&new, max).await {
            Ok(Some(count)) => {
                self.shared
                    .warn_near_limit("limits.acp.maxSessionsPerVm", count, max);
            }
            Ok(None) => return Err(self.sessions_full()),
            Err(e) if e.is_constraint() => {
                // Lost a race with an identical open.
                let existing = self.row(&session_id).await?;
                check_same(&existing, &new, &params)?;
                return self.info(&existing).await;
            }
            Err(e) => return Err(e.into()),
        }
        let row = self.row(&session_id).await?;
        self.info(&row).await
    }

    /// The refusal of a session beyond `limits.acp.maxSessionsPerVm`.
    pub fn sessions_full(&self) -> SessionError {
        let max = self.shared.limits.max_sessions_per_vm;
        SessionError::Limit {
            code: ErrorCode::AcpSessionsLimit,
            setting: "limits.acp.maxSessionsPerVm",
            used: max,
            limit: max,
        }
    }

    /// Statements that open a new session (`params.session_id`, which must
    /// be new) with `content` as its first words (none when empty), as
    /// `actor`, for a caller that commits them with its own in one
    /// transaction (a trigger's firing). The first statement fails that
    /// transaction, at its index, when the VM holds
    /// `limits.acp.maxSessionsPerVm` sessions.
    pub fn open_with_words_statements(
        &self,
        params: &OpenSession,
        content: &[Value],
        actor: &Actor,
        now: i64,
    ) -> Result<Vec<agentos_schema::Statement>, SessionError> {
        let new = self.new_session(params)?;
        let limits = &self.shared.limits;
        let mut statements =
            SessionStore::insert_session_statements(&new, limits.max_sessions_per_vm, now);
        if content.is_empty() {
            return Ok(statements);
        }
        self.check_content(content)?;
        let events = route::user_events(content, actor);
        let bytes: u64 = events.iter().map(store::NewEvent::bytes).sum();
        SessionError::at_most(
            ErrorCode::AcpHistoryEventsLimit,
            "limits.acp.maxSessionHistoryEvents",
            events.len() as u64,
            limits.max_session_history_events,
        )?;
        SessionError::at_most(
            ErrorCode::AcpHistoryBytesLimit,
            "limits.acp.maxSessionHistoryBytes",
            bytes,
            limits.max_session_history_bytes,
        )?;
        let fresh = store::HistoryCounters {
            latest_sequence: 0,
            oldest_retained_sequence: 1,
            retained_event_count: 0,
            retained_event_bytes: 0,
        };
        let (append, _) = SessionStore::append_statements(
            &new.session_id,
            &fresh,
            store::Prune::default(),
            events,
            now,
        );
        statements.extend(append);
        Ok(statements)
    }

    /// A session row to insert for `params`, checked.
    fn new_session(&self, params: &OpenSession) -> Result<NewSession, SessionError> {
        let session_id = params
            .session_id
            .clone()
            .unwrap_or_else(|| DEFAULT_SESSION_ID.to_owned());
        if session_id.is_empty() || session_id.len() > 256 {
            return Err(SessionError::InvalidArgument(
                "sessionId must be 1..=256 bytes".into(),
            ));
        }
        if !self.shared.agents.contains_key(&params.agent)
            && params.agent != crate::config::BUILTIN_AGENT
        {
            return Err(SessionError::AgentNotFound(params.agent.clone()));
        }
        let cwd = params.cwd.clone().unwrap_or_else(|| {
            format!(
                "{DEFAULT_CWD}/{}",
                crate::sandbox::session_dir_name(&session_id)
            )
        });
        check_absolute("cwd", &cwd)?;
        check_title(params.title.as_deref())?;
        let dirs = params.additional_directories.clone().unwrap_or_default();
        for dir in &dirs {
            check_absolute("additionalDirectories", dir)?;
        }
        let policy = params
            .permission_policy
            .unwrap_or(PermissionPolicy::AllowAll);
        Ok(NewSession {
            session_id: session_id.clone(),
            agent: params.agent.clone(),
            cwd,
            permission_policy: policy,
            additional_directories: dirs,
            env: params.env.clone().unwrap_or_default(),
            mcp_servers: params.mcp_servers.clone().unwrap_or_default(),
            title: params.title.clone(),
            metadata: params.metadata.clone(),
        })
    }

    /// Renames a session.
    pub async fn set_title(
        &self,
        session_id: &str,
        title: &str,
    ) -> Result<SessionInfo, SessionError> {
        check_title(Some(title))?;
        let now = crate::sessions::store::clock_ms();
        if !self.shared.store.set_title(session_id, title, now).await? {
            return Err(SessionError::NotFound(session_id.to_owned()));
        }
        self.get(session_id).await
    }

    /// Appends `updates` (ACP `session/update` payloads) to the log as
    /// `actor`: a user's own verb on the shared log. Goes through the
    /// session's route, the log's only writer (starting it if needed);
    /// `session_busy` while a turn is live, unless `during_turn` (the result
    /// of a call already logged). Answers the sequence of the last event.
    pub async fn append(
        &self,
        session_id: &str,
        actor: Actor,
        updates: Vec<Value>,
        during_turn: bool,
    ) -> Result<u64, SessionError> {
        self.append_with(session_id, actor, updates, during_turn, Vec::new())
            .await
    }

    /// As [`Sessions::append`], with `extra` statements that commit with the
    /// events or not at all.
    pub async fn append_with(
        &self,
        session_id: &str,
        actor: Actor,
        updates: Vec<Value>,
        during_turn: bool,
        extra: Vec<agentos_schema::Statement>,
    ) -> Result<u64, SessionError> {
        self.row(session_id).await?;
        let events: Vec<store::NewEvent> = updates
            .iter()
            .map(|update| store::NewEvent::update(actor.clone(), update))
            .collect();
        let bytes: u64 = events.iter().map(store::NewEvent::bytes).sum();
        if bytes > self.shared.limits.max_turn_output_bytes {
            return Err(SessionError::InvalidArgument(format!(
                "the events to append hold {bytes} bytes, over limits.acp.maxTurnOutputBytes"
            )));
        }
        self.send_to_route(
            session_id,
            || Err(SessionError::RouteGone),
            |reply| Command::Append {
                events: events.clone(),
                extra: extra.clone(),
                during_turn,
                reply,
            },
        )
        .await
    }

    /// The sequence of the last event a finished prompt's turn wrote.
    pub async fn prompt_last_output(
        &self,
        session_id: &str,
        prompt_id: &str,
    ) -> Result<Option<u64>, SessionError> {
        Ok(self
            .shared
            .store
            .prompt_last_output(session_id, prompt_id)
            .await?)
    }

    pub async fn get(&self, session_id: &str) -> Result<SessionInfo, SessionError> {
        let row = self.row(session_id).await?;
        self.info(&row).await
    }

    /// A page of at most `limit` sessions (the default page when `None`),
    /// after `cursor` (one this service issued).
    pub async fn list(
        &self,
        cursor: Option<&str>,
        limit: Option<u64>,
    ) -> Result<SessionPage, SessionError> {
        let max = self.shared.limits.max_session_list_entries;
        let limit = limit.unwrap_or(DEFAULT_LIST_LIMIT.min(max));
        if limit == 0 || limit > max {
            return Err(SessionError::Limit {
                code: ErrorCode::SessionListLimit,
                setting: "limits.acp.maxSessionListEntries",
                used: limit,
                limit: max,
            });
        }
        let cursor = match cursor {
            None => None,
            Some(c) => Some(decode_cursor(c).ok_or_else(|| {
                SessionError::InvalidArgument("cursor is not one this sidecar issued".into())
            })?),
        };
        let (rows, more) = self.shared.store.list_sessions(cursor, limit).await?;
        let next_cursor = if more {
            rows.last()
                .map(|r| encode_cursor(r.updated_at_ms, &r.session_id))
        } else {
            None
        };
        // The page is built without another query per session: waiting
        // sessions list their state without the request ids.
        let sessions = rows
            .iter()
            .map(|row| SessionInfo::from_row(row, SessionState::of(row, None)))
            .collect();
        Ok(SessionPage {
            sessions,
            next_cursor,
        })
    }

    pub async fn delete(&self, session_id: &str) -> Result<(), SessionError> {
        self.row(session_id).await?;
        self.stop_route(session_id, StopReason::Delete).await;
        let max_tombstones = self.shared.limits.max_sessions_per_vm;
        if !self
            .shared
            .store
            .delete_session(session_id, max_tombstones)
            .await?
        {
            return Err(SessionError::NotFound(session_id.to_owned()));
        }
        self.shared.hub.close_session(session_id, "session_deleted");
        // Its adapter is stopped; what it left on the host goes too. The
        // rows are gone already, so a failure here is logged, not answered.
        if let Err(e) = self.shared.launcher.remove(session_id).await {
            tracing::warn!(session = %session_id, error = %e, "could not remove a deleted session's directory");
        }
        self.shared.refresh_vm_counts().await?;
        Ok(())
    }

    pub async fn unload(&self, session_id: &str) -> Result<(), SessionError> {
        self.row(session_id).await?;
        self.stop_route(session_id, StopReason::Unload).await;
        Ok(())
    }

    /// Stops every adapter (process shutdown).
    pub async fn shutdown(&self) {
        let ids: Vec<String> = lock(&self.shared.routes).keys().cloned().collect();
        for id in ids {
            self.stop_route(&id, StopReason::VmShutdown).await;
        }
    }

    /// Runs a turn on the session service alone, with no run row (tests,
    /// embedding): makes sure an adapter route exists and runs the turn.
    /// Answers after the terminal commit. A session with a live turn answers
    /// `session_busy`. The doors start turns through the work layer's one
    /// entry, which records each as a run.
    pub async fn prompt(
        &self,
        session_id: &str,
        content: Vec<Value>,
        actor: Actor,
    ) -> Result<PromptOutcome, SessionError> {
        let prompt_id = uuid::Uuid::new_v4().to_string();
        self.start(session_id, prompt_id, content, actor, TurnRun::None)
            .await
    }

    /// Bounds and shape of a prompt's content.
    fn check_content(&self, content: &[Value]) -> Result<(), SessionError> {
        let limits = &self.shared.limits;
        if content.is_empty() {
            return Err(SessionError::InvalidContentBlock(
                "content must hold at least one block".into(),
            ));
        }
        SessionError::at_most(
            ErrorCode::AcpPromptBlocksLimit,
            "limits.acp.maxPromptBlocks",
            content.len() as u64,
            limits.max_prompt_blocks,
        )?;
        let bytes = serde_json::to_vec(&content)
            .map(|v| v.len() as u64)
            .unwrap_or(0);
        SessionError::at_most(
            ErrorCode::AcpPromptBytesLimit,
            "limits.acp.maxPromptBytes",
            bytes,
            limits.max_prompt_bytes,
        )?;
        self.shared
            .warn_near_limit("limits.acp.maxPromptBytes", bytes, limits.max_prompt_bytes);
        self.shared.warn_near_limit(
            "limits.acp.maxPromptBlocks",
            content.len() as u64,
            limits.max_prompt_blocks,
        );
        for (i, block) in content.iter().enumerate() {
            if !block.get("type").is_some_and(Value::is_string) {
                return Err(SessionError::InvalidContentBlock(format!(
                    "block {i} has no string type"
                )));
            }
        }
        Ok(())
    }

    /// Sends a new turn to the session's route and waits for its terminal
    /// commit: its words are appended with its accept.
    pub(super) async fn start(
        &self,
        session_id: &str,
        prompt_id: String,
        content: Vec<Value>,
        actor: Actor,
        run: TurnRun,
    ) -> Result<PromptOutcome, SessionError> {
        self.check_content(&content)?;
        let hash = match &run {
            TurnRun::Start(start) => start.input_hash.clone(),
            _ => input_hash(&content),
        };
        self.known(session_id).await?;
        // A reply dropped unanswered: the turn may have started, so it is
        // not retried.
        let dropped = || {
            Err(SessionError::Adapter {
                code: ErrorCode::AdapterExited,
                message: "the adapter route ended during the turn".into(),
            })
        };
        self.send_to_route(session_id, dropped, |reply| {
            let request = Box::new(PromptRequest {
                prompt_id: prompt_id.clone(),
                content: content.clone(),
                input_hash: hash.clone(),
                actor: actor.clone(),
                input_at: None,
                retry: false,
                run: run.clone(),
                resume: false,
            });
            Command::Prompt { request, reply }
        })
        .await
    }

    pub async fn cancel(&self, session_id: &str) -> Result<CancelStatus, SessionError> {
        self.row(session_id).await?;
        // A verb the turn is waiting on gives up first, so the route can
        // take the command.
        self.shared.interrupts.fire(session_id);
        let Some(route) = self.route(session_id) else {
            return Ok(CancelStatus::NoActivePrompt);
        };
        let (reply, answer) = oneshot::channel();
        if route
            .commands
            .send(Command::Cancel { reply })
            .await
            .is_err()
        {
            return Ok(CancelStatus::NoActivePrompt);
        }
        Ok(answer.await.unwrap_or(CancelStatus::NoActivePrompt))
    }

    /// Watches the session's next cancel (a long verb selects on it).
    pub fn interrupt(&self, session_id: &str) -> interrupts::Interrupt {
        self.shared.interrupts.watch(session_id)
    }

    pub async fn respond_permission(
        &self,
        session_id: &str,
        request_id: &str,
        option_id: &str,
    ) -> Result<PermissionAnswer, SessionError> {
        if self.shared.store.get_session(session_id).await?.is_none() {
            // An answer that arrives after its session was deleted.
            if self.shared.store.was_deleted(session_id).await? {
                return Ok(PermissionAnswer::NotPending(
                    NotPendingReason::SessionDeleted,
                ));
            }
            return Err(SessionError::NotFound(session_id.to_owned()));
        }
        let late = PermissionAnswer::NotPending;
        let Some(route) = self.route(session_id) else {
            let reason = self
                .shared
                .late_permission_reason(session_id, request_id)
                .await?;
            return Ok(late(reason));
        };
        let (reply, answer) = oneshot::channel();
        let sent = route
            .commands
            .send(Command::RespondPermission {
                request_id: request_id.to_owned(),
                option_id: option_id.to_owned(),
                reply,
            })
            .await;
        let result = match sent {
            Ok(()) => answer.await.ok(),
            Err(_) => None,
        };
        match result {
            Some(Ok(None)) => Ok(PermissionAnswer::Accepted),
            Some(Ok(Some(reason))) => Ok(late(reason)),
            Some(Err(e)) => Err(e),
            None => {
                let reason = self
                    .shared
                    .late_permission_reason(session_id, request_id)
                    .await?;
                Ok(late(reason))
            }
        }
    }

    pub async fn history(
        &self,
        session_id: &str,
        before: Option<u64>,
        after: Option<u64>,
        limit: Option<u64>,
    ) -> Result<HistoryPage, SessionError> {
        if before.is_some() && after.is_some() {
            return Err(SessionError::InvalidHistoryCursor);
        }
        let max = self.shared.limits.max_history_page_entries;
        let limit = limit.unwrap_or(DEFAULT_HISTORY_LIMIT.min(max));
        if limit == 0 || limit > max {
            return Err(SessionError::Limit {
                code: ErrorCode::HistoryLimit,
                setting: "limits.acp.maxHistoryPageEntries",
                used: limit,
                limit: max,
            });
        }
        let row = self.row(session_id).await?;
        if let Some(after) = after {
            if after.saturating_add(1) < row.oldest_retained_sequence {
                return Err(SessionError::HistoryCursorExpired {
                    earliest: row.oldest_retained_sequence,
                });
            }
        }
        Ok(self
            .shared
            .store
            .history(session_id, before, after, limit)
            .await?)
    }

    pub fn unsubscribe(&self, subscription_id: &str) -> bool {
        self.shared.hub.unsubscribe(subscription_id)
    }

    pub async fn get_config(&self, session_id: &str) -> Result<SessionConfig, SessionError> {
        let row = self.row(session_id).await?;
        Ok(SessionConfig {
            revision: row.config_revision,
            options: row.config_options,
        })
    }

    pub async fn set_config_option(
        &self,
        session_id: &str,
        config_id: &str,
        value: Value,
    ) -> Result<SessionConfig, SessionError> {
        if !(value.is_string() || value.is_boolean()) {
            return Err(SessionError::InvalidArgument(
                "value must be a string or a boolean".into(),
            ));
        }
        self.row(session_id).await?;
        // A reply dropped unanswered counts as a route found gone: the
        // change goes to a new route.
        self.send_to_route(
            session_id,
            || Err(SessionError::RouteGone),
            |reply| Command::SetConfigOption {
                config_id: config_id.to_owned(),
                value: value.clone(),
                reply,
            },
        )
        .await
    }

    /// The capabilities the agent announced at its last start, as it sent
    /// them (`None` before its first start).
    pub async fn capabilities(&self, session_id: &str) -> Result<Option<Value>, SessionError> {
        Ok(self.row(session_id).await?.capabilities)
    }

    /// The agent's self-description from its last start, as it sent it.
    pub async fn agent_info(&self, session_id: &str) -> Result<Option<Value>, SessionError> {
        Ok(self.row(session_id).await?.agent_info)
    }

    /// VM-wide counts with the configured limits.
    pub async fn status(&self) -> Result<VmStatus, SessionError> {
        let [sessions, prompts, pending, outcomes] = self.shared.store.vm_counters().await?;
        let l = &self.shared.limits;
        let usage = |used, limit, setting| Usage {
            used,
            limit,
            setting,
        };
        Ok(VmStatus {
            sessions: usage(
                sessions,
                l.max_sessions_per_vm,
                "limits.acp.maxSessionsPerVm",
            ),
            prompts: usage(prompts, l.max_prompts_per_vm, "limits.acp.maxPromptsPerVm"),
            pending_permissions: usage(
                pending,
                l.max_pending_permissions_per_vm,
                "limits.acp.maxPendingPermissionsPerVm",
            ),
            permission_outcomes: usage(
                outcomes,
                l.max_permission_outcomes_per_vm,
                "limits.acp.maxPermissionOutcomesPerVm",
            ),
            live_adapters: self.live_routes() as u64,
            keep_awake_holders: self.keep_awake_holders(),
            limits: Vec::new(),
            memory: self.shared.counters.snapshot(),
        }
        .with_limits(l))
    }
}

/// A settled prompt's answer as stored.
pub(super) fn stored_outcome(
    session_id: &str,
    prior: store::PromptRow,
) -> Result<PromptOutcome, SessionError> {
    match prior.state {
        PromptState::Failed => Err(SessionError::PromptFailed {
            error: prior.error.unwrap_or(Value::Null),
        }),
        _ => prior
            .result
            .as_ref()
            .and_then(|stored| PromptOutcome::from_stored(session_id, &prior.prompt_id, stored))
            .ok_or_else(|| {
                SessionError::Storage(agentos_schema::DbError::CorruptRow {
                    table: "agentos_core_prompts".into(),
                    message: format!(
                        "prompt {} finished without a stop reason and message",
                        prior.prompt_id
                    ),
                })
            }),
    }
}

fn check_same(
    existing: &SessionRow,
    new: &NewSession,
    params: &OpenSession,
) -> Result<(), SessionError> {
    let conflict = |field| {
        Err(SessionError::Conflict {
            session_id: existing.session_id.clone(),
            field,
        })
    };
    if existing.agent != new.agent {
        return conflict("agent");
    }
    if params.cwd.is_some() && existing.cwd != new.cwd {
        return conflict("cwd");
    }
    if params.permission_policy.is_some() && existing.permission_policy != new.permission_policy {
        return conflict("permissionPolicy");
    }
    if params.additional_directories.is_some()
        && existing.additional_directories != new.additional_directories
    {
        return conflict("additionalDirectories");
    }
    if params.env.is_some() && existing.env != new.env {
        return conflict("env");
    }
    if params.mcp_servers.is_some() && existing.mcp_servers != new.mcp_servers {
        return conflict("mcpServers");
    }
    Ok(())
}

fn encode_cursor(updated_at_ms: i64, session_id: &str) -> String {
    format!("{updated_at_ms}:{}", hex::encode(session_id))
}

fn decode_cursor(cursor: &str) -> Option<(i64, String)> {
    let (ms, id) = cursor.split_once(':')?;
    let id = String::from_utf8(hex::decode(id).ok()?).ok()?;
    Some((ms.parse().ok()?, id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Stored hashes decide idempotency across restarts: the hash is the
    /// one of the canonical map as serde_json writes it.
    #[test]
    fn input_hash_is_the_canonical_maps() {
        let content = vec![
            json!({"type": "text", "text": "héllo \"there\"\n", "z": 1, "a": [1.5, null]}),
            json!({"type": "image", "data": "AAAA", "mimeType": "image/png"}),
        ];
        let canonical = json!({"formatVersion": 1, "content": content});
        let expected = Sha256::digest(canonical.to_string().as_bytes()).to_vec();
        assert_eq!(input_hash(&content), expected);
        assert_eq!(
            hex::encode(input_hash(&[])),
            hex::encode(Sha256::digest(br#"{"content":[],"formatVersion":1}"#))
        );
    }
}
