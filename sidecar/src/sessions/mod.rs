//! Durable ACP sessions: the service API the front doors call.
//!
//! `Sessions` validates input, answers read-only calls from SQLite without
//! ever starting an adapter, enforces idempotency and limits, and hands
//! everything that writes history to the session's route task (`route.rs`),
//! starting it (the restore ladder) when a prompt or a config change needs
//! one. One route start at a time per session. The service knows nothing of
//! JSON-RPC or sockets: it returns domain values and `SessionError`s.

pub mod coalesce;
mod error;
pub mod hub;
mod route;
pub mod store;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use agentos_protocol::host::{
    Actor, ListSessionsParams, OpenSessionParams, PermissionPolicy, StoredEvent,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, oneshot};

pub use error::SessionError;
pub use hub::{Hub, Item, Sink, SinkRefusal};
pub use store::{HistoryPage, Reconciliation, SessionRow, SessionStore};

use crate::config::{AcpLimits, AgentSpec};
pub use crate::vfs::acp::FsBridge;
use route::{Command, PromptRequest, Route, RouteHandle, StopReason};
use store::{HistoryCounters, NewSession};

pub use route::build_continuation;

const DEFAULT_CWD: &str = "/home/agentos";
const DEFAULT_SESSION_ID: &str = "main";
const DEFAULT_LIST_LIMIT: u64 = 50;
const DEFAULT_HISTORY_LIMIT: u64 = 100;
/// Rows per replay query when a subscription catches up.
const REPLAY_PAGE: u64 = 2048;

/// VM-wide notifications for every host connection.
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    AgentStderr {
        session_id: String,
        line: String,
    },
    AgentExited {
        session_id: String,
        code: Option<i32>,
        signal: Option<i32>,
    },
    KeepAwake {
        held: bool,
        holders: u64,
        session_id: String,
        prompt_id: String,
    },
}

/// Keep-awake holders: one per prompt from dispatch through its terminal
/// commit.
#[derive(Default)]
pub struct KeepAwake {
    holders: AtomicU64,
}

pub(crate) struct KeepAwakeGuard<'a> {
    owner: &'a KeepAwake,
    notices: broadcast::Sender<Notice>,
    session_id: String,
    prompt_id: String,
}

impl KeepAwake {
    pub fn holders(&self) -> u64 {
        self.holders.load(Ordering::SeqCst)
    }

    pub(crate) fn hold<'a>(
        &'a self,
        notices: &broadcast::Sender<Notice>,
        session_id: &str,
        prompt_id: &str,
    ) -> KeepAwakeGuard<'a> {
        let holders = self.holders.fetch_add(1, Ordering::SeqCst) + 1;
        let _ = notices.send(Notice::KeepAwake {
            held: true,
            holders,
            session_id: session_id.to_owned(),
            prompt_id: prompt_id.to_owned(),
        });
        KeepAwakeGuard {
            owner: self,
            notices: notices.clone(),
            session_id: session_id.to_owned(),
            prompt_id: prompt_id.to_owned(),
        }
    }
}

impl Drop for KeepAwakeGuard<'_> {
    fn drop(&mut self) {
        let holders = self.owner.holders.fetch_sub(1, Ordering::SeqCst) - 1;
        let _ = self.notices.send(Notice::KeepAwake {
            held: holders > 0,
            holders,
            session_id: std::mem::take(&mut self.session_id),
            prompt_id: std::mem::take(&mut self.prompt_id),
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// State shared by the service and its route tasks.
pub(crate) struct Shared {
    pub store: SessionStore,
    pub hub: Arc<Hub>,
    pub limits: AcpLimits,
    pub agents: BTreeMap<String, AgentSpec>,
    pub notices: broadcast::Sender<Notice>,
    pub keep_awake: KeepAwake,
    pub fs: Option<Arc<dyn FsBridge>>,
    routes: Mutex<HashMap<String, RouteHandle>>,
    starting: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    generation: AtomicU64,
    /// VM-wide retained prompt records and permission outcomes, kept in
    /// memory so admission checks need no read; re-read after pruning.
    vm_prompt_count: AtomicU64,
    vm_outcome_count: AtomicU64,
    /// Settings currently above 80 %, so each crossing warns once.
    warned: Mutex<HashSet<String>>,
}

impl Shared {
    pub(crate) fn vm_prompts(&self) -> u64 {
        self.vm_prompt_count.load(Ordering::SeqCst)
    }

    pub(crate) fn vm_outcomes(&self) -> u64 {
        self.vm_outcome_count.load(Ordering::SeqCst)
    }

    /// Re-reads the VM counters into memory.
    pub(crate) async fn refresh_vm_counts(&self) -> Result<(), SessionError> {
        let [_, prompts, _, outcomes] = self.store.vm_counters().await?;
        self.vm_prompt_count.store(prompts, Ordering::SeqCst);
        self.vm_outcome_count.store(outcomes, Ordering::SeqCst);
        Ok(())
    }

    /// One prompt record was added; `pruned` says whether others went.
    pub(crate) async fn prompts_changed(&self, pruned: bool) {
        self.vm_prompt_count.fetch_add(1, Ordering::SeqCst);
        if pruned {
            if let Err(e) = self.refresh_vm_counts().await {
                tracing::warn!(error = %e, "could not re-read VM counters");
            }
        }
    }

    /// One outcome was added; `pruned` says whether others went.
    pub(crate) async fn outcomes_changed(&self, pruned: bool) {
        self.vm_outcome_count.fetch_add(1, Ordering::SeqCst);
        if pruned {
            if let Err(e) = self.refresh_vm_counts().await {
                tracing::warn!(error = %e, "could not re-read VM counters");
            }
        }
    }

    pub(crate) fn route_ended(&self, session_id: &str, generation: u64) {
        let mut routes = lock(&self.routes);
        if routes.get(session_id).map(|r| r.generation) == Some(generation) {
            routes.remove(session_id);
        }
    }

    /// Logs once per crossing when `used` passes 80 % of `limit`.
    pub(crate) fn warn_near_limit(&self, setting: &str, used: u64, limit: u64) {
        self.warn_keyed(setting, setting, used, limit);
    }

    fn warn_keyed(&self, key: &str, setting: &str, used: u64, limit: u64) {
        let threshold = limit / 5 * 4 + (limit % 5) * 4 / 5;
        let mut warned = lock(&self.warned);
        if used >= threshold && limit > 0 {
            if warned.insert(key.to_owned()) {
                tracing::warn!(
                    used,
                    limit,
                    config_path = setting,
                    "usage crossed 80% of a configured limit"
                );
            }
        } else {
            warned.remove(key);
        }
    }

    pub(crate) fn warn_history(
        &self,
        session_id: &str,
        _before: &HistoryCounters,
        after: &HistoryCounters,
    ) {
        self.warn_keyed(
            &format!("history-events:{session_id}"),
            "limits.acp.maxSessionHistoryEvents",
            after.retained_event_count,
            self.limits.max_session_history_events,
        );
        self.warn_keyed(
            &format!("history-bytes:{session_id}"),
            "limits.acp.maxSessionHistoryBytes",
            after.retained_event_bytes,
            self.limits.max_session_history_bytes,
        );
    }

    /// Hard limits on pending `ask` permissions.
    pub(crate) async fn admit_pending_permission(
        &self,
        session_pending: u64,
    ) -> Result<(), SessionError> {
        let per_session = self.limits.max_pending_permissions_per_session;
        if session_pending >= per_session {
            return Err(SessionError::Limit {
                code: "acp_pending_permissions_per_session_limit",
                setting: "limits.acp.maxPendingPermissionsPerSession",
                used: session_pending,
                limit: per_session,
            });
        }
        let [_, _, vm_pending, _] = self.store.vm_counters().await?;
        let per_vm = self.limits.max_pending_permissions_per_vm;
        if vm_pending >= per_vm {
            return Err(SessionError::Limit {
                code: "acp_pending_permissions_per_vm_limit",
                setting: "limits.acp.maxPendingPermissionsPerVm",
                used: vm_pending,
                limit: per_vm,
            });
        }
        self.warn_near_limit(
            "limits.acp.maxPendingPermissionsPerSession",
            session_pending + 1,
            per_session,
        );
        self.warn_near_limit(
            "limits.acp.maxPendingPermissionsPerVm",
            vm_pending + 1,
            per_vm,
        );
        Ok(())
    }

    /// The reason a permission answer that is not pending in memory is
    /// refused, from the record or the tombstone.
    pub(crate) async fn late_permission_reason(
        &self,
        session_id: &str,
        request_id: &str,
    ) -> Result<&'static str, SessionError> {
        let status = self.store.permission_status(session_id, request_id).await?;
        Ok(match status {
            None => "request_not_found",
            Some(row) => match (row.state.as_str(), row.terminal_reason.as_deref()) {
                ("responded", _) | (_, Some("accepted")) => "already_resolved",
                (_, Some("prompt_cancelled")) => "prompt_cancelled",
                (_, Some("session_deleted")) => "session_deleted",
                (_, Some("vm_shutdown")) => "vm_shutdown",
                (_, Some("already_resolved")) => "already_resolved",
                _ => "adapter_exited",
            },
        })
    }
}

/// The outcome of `respondPermission`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RespondOutcome {
    pub accepted: bool,
    pub reason: Option<&'static str>,
}

/// The durable sessions service.
#[derive(Clone)]
pub struct Sessions {
    shared: Arc<Shared>,
}

/// SHA-256 of the canonical `{formatVersion:1, content}` (serde_json's map
/// is ordered, so the serialization is canonical).
pub fn input_hash(content: &[Value]) -> Vec<u8> {
    let canonical = json!({"formatVersion": 1, "content": content});
    Sha256::digest(canonical.to_string().as_bytes()).to_vec()
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
        let (notices, _) = broadcast::channel(4096);
        Sessions {
            shared: Arc::new(Shared {
                store,
                hub: Arc::new(Hub::default()),
                limits,
                agents,
                notices,
                keep_awake: KeepAwake::default(),
                fs,
                routes: Mutex::new(HashMap::new()),
                starting: Mutex::new(HashMap::new()),
                generation: AtomicU64::new(1),
                vm_prompt_count: AtomicU64::new(0),
                vm_outcome_count: AtomicU64::new(0),
                warned: Mutex::new(HashSet::new()),
            }),
        }
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

    /// The public session info.
    pub async fn info(&self, row: &SessionRow) -> Result<Value, SessionError> {
        let state = match row.state.as_str() {
            "idle" => json!({"status": "idle"}),
            "running" => json!({
                "status": "running",
                "promptId": row.state_prompt_id,
                "startedAt": row.state_started_at_ms.map(agentos_protocol::host::rfc3339_ms),
            }),
            "waiting" => json!({
                "status": "waiting",
                "promptId": row.state_prompt_id,
                "waitingSince": row.state_started_at_ms.map(agentos_protocol::host::rfc3339_ms),
                "requests": self.shared.store.pending_permissions(&row.session_id).await?,
            }),
            _ => json!({"status": "failed", "error": row.state_error}),
        };
        Ok(session_json(row, state))
    }

    /// Idempotent open. Never starts an adapter.
    pub async fn open(&self, params: OpenSessionParams) -> Result<Value, SessionError> {
        let session_id = params
            .session_id
            .clone()
            .unwrap_or_else(|| DEFAULT_SESSION_ID.to_owned());
        if session_id.is_empty() || session_id.len() > 256 {
            return Err(SessionError::InvalidArgument(
                "sessionId must be 1..=256 bytes".into(),
            ));
        }
        if !self.shared.agents.contains_key(&params.agent) {
            return Err(SessionError::AgentNotFound(params.agent));
        }
        let cwd = params.cwd.clone().unwrap_or_else(|| DEFAULT_CWD.to_owned());
        check_absolute("cwd", &cwd)?;
        let dirs = params.additional_directories.clone().unwrap_or_default();
        for dir in &dirs {
            check_absolute("additionalDirectories", dir)?;
        }
        let policy = params
            .permission_policy
            .unwrap_or(PermissionPolicy::AllowAll);
        let new = NewSession {
            session_id: session_id.clone(),
            agent: params.agent.clone(),
            cwd,
            permission_policy: policy.as_str().to_owned(),
            additional_directories: dirs,
            env: params.env.clone().unwrap_or_default(),
            mcp_servers: params.mcp_servers.clone().unwrap_or_default(),
            title: params.title.clone(),
            metadata: params.metadata.clone(),
        };
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
            Ok(None) => {
                return Err(SessionError::Limit {
                    code: "acp_sessions_limit",
                    setting: "limits.acp.maxSessionsPerVm",
                    used: max,
                    limit: max,
                })
            }
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

    pub async fn get(&self, session_id: &str) -> Result<Value, SessionError> {
        let row = self.row(session_id).await?;
        self.info(&row).await
    }

    pub async fn list(&self, params: ListSessionsParams) -> Result<Value, SessionError> {
        let max = self.shared.limits.max_session_list_entries;
        let limit = params.limit.unwrap_or(DEFAULT_LIST_LIMIT.min(max));
        if limit == 0 || limit > max {
            return Err(SessionError::Limit {
                code: "session_list_limit",
                setting: "limits.acp.maxSessionListEntries",
                used: limit,
                limit: max,
            });
        }
        let cursor = match params.cursor.as_deref() {
            None => None,
            Some(c) => Some(decode_cursor(c).ok_or_else(|| {
                SessionError::InvalidArgument("cursor is not one this sidecar issued".into())
            })?),
        };
        let (rows, more) = self.shared.store.list_sessions(cursor, limit).await?;
        let next = if more {
            rows.last()
                .map(|r| encode_cursor(r.updated_at_ms, &r.session_id))
        } else {
            None
        };
        // The page is built without another query per session: waiting
        // sessions list their state without the request ids.
        let sessions: Vec<Value> = rows
            .iter()
            .map(|row| {
                let state = match row.state.as_str() {
                    "idle" => json!({"status": "idle"}),
                    "failed" => json!({"status": "failed", "error": row.state_error}),
                    status => json!({"status": status, "promptId": row.state_prompt_id}),
                };
                session_json(row, state)
            })
            .collect();
        let mut out = json!({ "sessions": sessions });
        if let Some(next) = next {
            out["nextCursor"] = json!(next);
        }
        Ok(out)
    }

    fn route(&self, session_id: &str) -> Option<RouteHandle> {
        lock(&self.shared.routes)
            .get(session_id)
            .filter(|r| r.is_alive())
            .cloned()
    }

    /// The live route of a session, restoring it if needed. Single flight.
    async fn ensure_route(&self, session_id: &str) -> Result<RouteHandle, SessionError> {
        if let Some(route) = self.route(session_id) {
            return Ok(route);
        }
        let gate = lock(&self.shared.starting)
            .entry(session_id.to_owned())
            .or_default()
            .clone();
        let _guard = gate.lock().await;
        if let Some(route) = self.route(session_id) {
            return Ok(route);
        }
        let mut row = self.row(session_id).await?;
        if row.state == "running" || row.state == "waiting" {
            // No route, yet mid-turn: an earlier route of this process ended
            // without its terminal commit (storage failed). Settle the turn
            // as a restart would.
            if self.shared.store.reconcile_session(session_id).await? {
                tracing::warn!(session = %session_id, "a turn left unfinished by a storage failure was marked prompt_delivery_uncertain");
            }
            self.shared.refresh_vm_counts().await?;
            row = self.row(session_id).await?;
        }
        let generation = self.shared.generation.fetch_add(1, Ordering::SeqCst);
        let handle = Route::start(self.shared.clone(), row, generation).await?;
        lock(&self.shared.routes).insert(session_id.to_owned(), handle.clone());
        Ok(handle)
    }

    async fn stop_route(&self, session_id: &str, reason: StopReason) {
        let route = lock(&self.shared.routes).remove(session_id);
        if let Some(route) = route {
            let (reply, done) = oneshot::channel();
            if route
                .commands
                .send(Command::Stop { reason, reply })
                .await
                .is_ok()
            {
                let _ = done.await;
            }
        }
    }

    pub async fn delete(&self, session_id: &str) -> Result<(), SessionError> {
        self.row(session_id).await?;
        self.stop_route(session_id, StopReason::Delete).await;
        if !self.shared.store.delete_session(session_id).await? {
            return Err(SessionError::NotFound(session_id.to_owned()));
        }
        self.shared.hub.close_session(session_id, "session_deleted");
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

    /// Validates, checks idempotency, makes sure an adapter route exists and
    /// runs the turn. Answers after the terminal commit.
    pub async fn prompt(
        &self,
        session_id: &str,
        content: Vec<Value>,
        idempotency_key: Option<String>,
        actor: Actor,
    ) -> Result<Value, SessionError> {
        let limits = &self.shared.limits;
        if content.is_empty() {
            return Err(SessionError::InvalidContentBlock(
                "content must hold at least one block".into(),
            ));
        }
        SessionError::at_most(
            "acp_prompt_blocks_limit",
            "limits.acp.maxPromptBlocks",
            content.len() as u64,
            limits.max_prompt_blocks,
        )?;
        let bytes = serde_json::to_vec(&content)
            .map(|v| v.len() as u64)
            .unwrap_or(0);
        SessionError::at_most(
            "acp_prompt_bytes_limit",
            "limits.acp.maxPromptBytes",
            bytes,
            limits.max_prompt_bytes,
        )?;
        self.shared
            .warn_near_limit("limits.acp.maxPromptBytes", bytes, limits.max_prompt_bytes);
        for (i, block) in content.iter().enumerate() {
            if !block.get("type").is_some_and(Value::is_string) {
                return Err(SessionError::InvalidContentBlock(format!(
                    "block {i} has no string type"
                )));
            }
        }
        if let Some(key) = &idempotency_key {
            if key.is_empty() || key.len() > 256 {
                return Err(SessionError::InvalidIdempotencyKey(
                    "an idempotency key must be 1..=256 bytes".into(),
                ));
            }
        }
        let hash = input_hash(&content);
        self.row(session_id).await?;
        if let Some(key) = &idempotency_key {
            if let Some(done) = self.replay_idempotent(session_id, key, &hash).await? {
                return done;
            }
        }
        // A route that ends as the prompt reaches it never started it; one
        // more try restores the session on a new route.
        let mut attempts = 0;
        let answer = loop {
            attempts += 1;
            let route = self.ensure_route(session_id).await?;
            let request = PromptRequest {
                prompt_id: uuid::Uuid::new_v4().to_string(),
                content: content.clone(),
                idempotency_key: idempotency_key.clone(),
                input_hash: hash.clone(),
                actor: actor.clone(),
            };
            let (reply, answer) = oneshot::channel();
            let sent = route
                .commands
                .send(Command::Prompt { request, reply })
                .await;
            let answer = match sent {
                Ok(()) => answer.await.ok(),
                Err(_) => Some(Err(route::route_gone())),
            };
            match answer {
                Some(Err(e)) if e.code() == route::ROUTE_GONE && attempts < 3 => continue,
                other => break other,
            }
        };
        match answer.ok_or(()) {
            Ok(Err(SessionError::PromptInProgress)) => {
                // A concurrent prompt with the same key won the insert.
                match &idempotency_key {
                    Some(key) => match self.replay_idempotent(session_id, key, &hash).await? {
                        Some(done) => done,
                        None => Err(SessionError::PromptInProgress),
                    },
                    None => Err(SessionError::PromptInProgress),
                }
            }
            Ok(result) => result,
            Err(()) => Err(SessionError::Adapter {
                code: "adapter_exited",
                message: "the adapter route ended during the turn".into(),
            }),
        }
    }

    /// The stored outcome for an idempotency key, if the key is known.
    async fn replay_idempotent(
        &self,
        session_id: &str,
        key: &str,
        hash: &[u8],
    ) -> Result<Option<Result<Value, SessionError>>, SessionError> {
        let Some(prior) = self
            .shared
            .store
            .find_prompt_by_key(session_id, key)
            .await?
        else {
            return Ok(None);
        };
        if prior.input_hash != hash {
            return Err(SessionError::IdempotencyConflict);
        }
        Ok(Some(match prior.state.as_str() {
            "accepted" => Err(SessionError::PromptInProgress),
            "failed" => Err(SessionError::PromptFailed {
                error: prior.error.unwrap_or(Value::Null),
            }),
            _ => {
                let mut result = prior.result.unwrap_or_else(|| json!({}));
                if let Some(obj) = result.as_object_mut() {
                    obj.insert("sessionId".into(), json!(session_id));
                    obj.insert("promptId".into(), json!(prior.prompt_id));
                }
                Ok(result)
            }
        }))
    }

    pub async fn cancel(&self, session_id: &str) -> Result<&'static str, SessionError> {
        self.row(session_id).await?;
        let Some(route) = self.route(session_id) else {
            return Ok("no_active_prompt");
        };
        let (reply, answer) = oneshot::channel();
        if route
            .commands
            .send(Command::Cancel { reply })
            .await
            .is_err()
        {
            return Ok("no_active_prompt");
        }
        Ok(answer.await.unwrap_or("no_active_prompt"))
    }

    pub async fn respond_permission(
        &self,
        session_id: &str,
        request_id: &str,
        option_id: &str,
    ) -> Result<RespondOutcome, SessionError> {
        self.row(session_id).await?;
        let late = |reason| RespondOutcome {
            accepted: false,
            reason: Some(reason),
        };
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
            Some(Ok(None)) => Ok(RespondOutcome {
                accepted: true,
                reason: None,
            }),
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
                code: "history_limit",
                setting: "limits.acp.maxHistoryPageEntries",
                used: limit,
                limit: max,
            });
        }
        let row = self.row(session_id).await?;
        if let Some(after) = after {
            if after + 1 < row.oldest_retained_sequence {
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

    /// Subscribes `sink` to a session: replay after `after` (default: the
    /// latest committed event, i.e. live only), then live, no gap, no
    /// duplicate.
    ///
    /// Nothing is delivered until `start` fires, so a front door can answer
    /// the subscribe call before the first event reaches the same client.
    pub async fn subscribe(
        &self,
        session_id: &str,
        after: Option<u64>,
        sink: Arc<dyn Sink>,
        start: oneshot::Receiver<()>,
    ) -> Result<String, SessionError> {
        let row = self.row(session_id).await?;
        let after = after.unwrap_or(row.latest_sequence);
        if after + 1 < row.oldest_retained_sequence {
            return Err(SessionError::HistoryCursorExpired {
                earliest: row.oldest_retained_sequence,
            });
        }
        let id = uuid::Uuid::new_v4().to_string();
        let (sub, upto) =
            self.shared
                .hub
                .register(id.clone(), session_id, row.latest_sequence, sink.clone());
        let store = self.shared.store.clone();
        let hub = self.shared.hub.clone();
        let session = session_id.to_owned();
        tokio::spawn(async move {
            if start.await.is_err() {
                hub.unsubscribe(&sub.id);
                return;
            }
            let mut cursor = after;
            while cursor < upto {
                let page = match store
                    .events_between(&session, cursor, upto, REPLAY_PAGE)
                    .await
                {
                    Ok(page) => page,
                    Err(e) => {
                        tracing::warn!(session = %session, error = %e, "subscription replay failed");
                        hub.unsubscribe(&sub.id);
                        sink.ended(&sub.id, &session, "storage_error", cursor);
                        return;
                    }
                };
                let Some(last) = page.last().map(|e| e.sequence) else {
                    break;
                };
                for event in page {
                    let item = Item::durable(event);
                    if sink.deliver(&sub.id, &item).is_err() {
                        hub.unsubscribe(&sub.id);
                        sink.ended(&sub.id, &session, "overflow", cursor);
                        return;
                    }
                }
                cursor = last;
            }
            hub.go_live(&sub, cursor.max(after));
        });
        Ok(id)
    }

    pub fn unsubscribe(&self, subscription_id: &str) -> bool {
        self.shared.hub.unsubscribe(subscription_id)
    }

    pub async fn get_config(&self, session_id: &str) -> Result<Value, SessionError> {
        let row = self.row(session_id).await?;
        Ok(json!({"revision": row.config_revision, "options": row.config_options}))
    }

    pub async fn set_config_option(
        &self,
        session_id: &str,
        config_id: &str,
        value: Value,
    ) -> Result<Value, SessionError> {
        if !(value.is_string() || value.is_boolean()) {
            return Err(SessionError::InvalidArgument(
                "value must be a string or a boolean".into(),
            ));
        }
        self.row(session_id).await?;
        // As for prompts: a route that ends as the request reaches it never
        // started it, so one more try goes to a new route.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let route = self.ensure_route(session_id).await?;
            let (reply, answer) = oneshot::channel();
            let sent = route
                .commands
                .send(Command::SetConfigOption {
                    config_id: config_id.to_owned(),
                    value: value.clone(),
                    reply,
                })
                .await;
            let result = match sent {
                Ok(()) => answer.await.unwrap_or_else(|_| Err(route::route_gone())),
                Err(_) => Err(route::route_gone()),
            };
            match result {
                Err(e) if e.code() == route::ROUTE_GONE && attempts < 3 => continue,
                other => return other,
            }
        }
    }

    pub async fn capabilities(&self, session_id: &str) -> Result<Value, SessionError> {
        let row = self.row(session_id).await?;
        Ok(json!({"capabilities": row.capabilities}))
    }

    pub async fn agent_info(&self, session_id: &str) -> Result<Value, SessionError> {
        let row = self.row(session_id).await?;
        Ok(json!({"agentInfo": row.agent_info}))
    }

    /// VM-wide counts with the configured limits.
    pub async fn status(&self) -> Result<Value, SessionError> {
        let [sessions, prompts, pending, outcomes] = self.shared.store.vm_counters().await?;
        let l = &self.shared.limits;
        let usage = |used: u64, limit: u64, setting: &str| json!({"used": used, "limit": limit, "setting": setting, "nearLimit": limit > 0 && used * 5 >= limit * 4});
        Ok(json!({
            "sessions": usage(sessions, l.max_sessions_per_vm, "limits.acp.maxSessionsPerVm"),
            "prompts": usage(prompts, l.max_prompts_per_vm, "limits.acp.maxPromptsPerVm"),
            "pendingPermissions": usage(pending, l.max_pending_permissions_per_vm, "limits.acp.maxPendingPermissionsPerVm"),
            "permissionOutcomes": usage(outcomes, l.max_permission_outcomes_per_vm, "limits.acp.maxPermissionOutcomesPerVm"),
            "liveAdapters": self.live_routes(),
            "keepAwakeHolders": self.keep_awake_holders(),
        }))
    }
}

fn check_same(
    existing: &SessionRow,
    new: &NewSession,
    params: &OpenSessionParams,
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

fn session_json(row: &SessionRow, state: Value) -> Value {
    use agentos_protocol::host::rfc3339_ms;
    json!({
        "sessionId": row.session_id,
        "agent": row.agent,
        "cwd": row.cwd,
        "additionalDirectories": row.additional_directories,
        "permissionPolicy": row.permission_policy,
        "state": state,
        "latestSequence": row.latest_sequence,
        "oldestRetainedSequence": row.oldest_retained_sequence,
        "retainedEvents": row.retained_event_count,
        "retainedBytes": row.retained_event_bytes,
        "title": row.title,
        "metadata": row.metadata,
        "createdAt": rfc3339_ms(row.created_at_ms),
        "updatedAt": rfc3339_ms(row.updated_at_ms),
    })
}

fn encode_cursor(updated_at_ms: i64, session_id: &str) -> String {
    format!("{updated_at_ms}:{}", hex::encode(session_id))
}

fn decode_cursor(cursor: &str) -> Option<(i64, String)> {
    let (ms, id) = cursor.split_once(':')?;
    let id = String::from_utf8(hex::decode(id).ok()?).ok()?;
    Some((ms.parse().ok()?, id))
}

/// Public rendering of a stored event.
pub fn public_event(event: &StoredEvent) -> Value {
    event.to_public()
}
