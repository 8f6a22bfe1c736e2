//! State shared by the session service and its route tasks: the store, the
//! hub, the limits and registry, the live routes, and the VM-wide counters
//! kept in memory so admission checks need no read. Limit warnings at 80 %
//! are issued here, once per crossing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use agentos_protocol::ErrorCode;
use tokio::sync::broadcast;

use super::notice::{KeepAwake, Notice};
use super::route::RouteHandle;
use super::store::{HistoryCounters, PermissionState, SessionStore};
use super::{AgentHost, FsBridge, Hub, MemoryCounters, NotPendingReason, SessionError};
use crate::config::{AcpLimits, AgentSpec};
use crate::sandbox::Launcher;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The builtin model agent: the command that starts it and the service
/// that answers it.
pub(crate) struct BuiltinAgent {
    pub spec: AgentSpec,
    pub host: Arc<dyn AgentHost>,
    /// How long a builtin session's route waits idle before it ends its
    /// agent process (`builtin.idleAgentMs`).
    pub idle: std::time::Duration,
    /// Set when the agent runs as a task of this process, not as `spec`'s
    /// process (`builtin.agentProcess` off).
    pub in_process: Option<InProcess>,
}

/// What the builtin agents running as tasks of this process share: one
/// provider client (its pools and TLS roots built once) and one set of
/// options, whose budget bounds what they hold between turns together.
#[derive(Clone)]
pub struct InProcess {
    pub provider: agentos_adapters::builtin::provider::Provider,
    pub options: agentos_adapters::builtin::agent::AgentOptions,
}

/// State shared by the service and its route tasks.
pub(crate) struct Shared {
    /// What every adapter connection of the VM shares
    /// (`limits.acp.maxQueuedStdinBytesPerVm`, `maxStdoutBytesPerVm`).
    pub adapters: Arc<agentos_adapters::client::ProcessBudget>,
    pub store: SessionStore,
    pub hub: Arc<Hub>,
    pub limits: AcpLimits,
    pub agents: BTreeMap<String, AgentSpec>,
    pub notices: broadcast::Sender<Notice>,
    /// Sessions renamed outside a front door's request (a generated title),
    /// for the signed door's live feed.
    pub renamed: broadcast::Sender<String>,
    pub keep_awake: KeepAwake,
    pub fs: Option<Arc<dyn FsBridge>>,
    /// Where and how adapters start (their directories and confinement).
    pub launcher: Arc<Launcher>,
    pub counters: Arc<MemoryCounters>,
    /// Attachment bytes being embedded in registry adapters' prompts, in
    /// the whole VM (held while the turn that sends them runs); past it a
    /// file goes as a link.
    pub embedded: Arc<agentos_base::budget::ByteBudget>,
    /// Each session's cancel, for the verbs its turn waits on.
    pub interrupts: super::interrupts::Interrupts,
    /// How to start the builtin model agent and who answers its
    /// `_agentos/*` requests; unset, its sessions answer
    /// `builtin_agent_unavailable`.
    pub(crate) builtin: OnceLock<BuiltinAgent>,
    pub(super) routes: Mutex<HashMap<String, RouteHandle>>,
    /// The runtime the service was made on, where every route starts and
    /// runs (with its adapter's tasks, and the builtin agent's) whichever
    /// door asked for it: the HTTP door's runtime is another.
    pub(super) runtime: Option<tokio::runtime::Handle>,
    /// One route start at a time per session.
    pub(super) starting: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    pub(super) generation: AtomicU64,
    /// VM-wide retained prompt records and permission outcomes, kept in
    /// memory so admission checks need no read; re-read after pruning.
    vm_prompt_count: AtomicU64,
    vm_outcome_count: AtomicU64,
    /// Settings currently above 80 %, so each crossing warns once.
    warned: Mutex<HashSet<String>>,
}

impl Shared {
    pub(super) fn new(
        store: SessionStore,
        agents: BTreeMap<String, AgentSpec>,
        limits: AcpLimits,
        fs: Option<Arc<dyn FsBridge>>,
    ) -> Shared {
        let (notices, _) = broadcast::channel(4096);
        let (renamed, _) = broadcast::channel(1024);
        let adapters = agentos_adapters::client::ProcessBudget::new(
            usize::try_from(limits.max_queued_stdin_bytes_per_vm).unwrap_or(usize::MAX),
            usize::try_from(limits.max_stdout_bytes_per_vm).unwrap_or(usize::MAX),
            std::time::Duration::from_millis(limits.stalled_stdin_timeout_ms),
        );
        Shared {
            adapters,
            store,
            hub: Arc::new(Hub::default()),
            limits,
            agents,
            notices,
            renamed,
            keep_awake: KeepAwake::default(),
            fs,
            launcher: Arc::new(Launcher::inherit()),
            counters: Arc::default(),
            interrupts: super::interrupts::Interrupts::default(),
            embedded: agentos_base::budget::ByteBudget::new(
                super::route::MAX_EMBEDDED_BYTES_PER_VM,
            ),
            builtin: OnceLock::new(),
            routes: Mutex::new(HashMap::new()),
            runtime: tokio::runtime::Handle::try_current().ok(),
            starting: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(1),
            vm_prompt_count: AtomicU64::new(0),
            vm_outcome_count: AtomicU64::new(0),
            warned: Mutex::new(HashSet::new()),
        }
    }

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
        self.warn_keyed(|| setting.to_owned(), setting, used, limit);
    }

    /// Like [`Self::warn_near_limit`], for a bound that each session has
    /// on its own (one turn's output, one message): each session's crossing
    /// warns once.
    pub(crate) fn warn_session(&self, session_id: &str, setting: &str, used: u64, limit: u64) {
        self.warn_keyed(|| format!("{setting}:{session_id}"), setting, used, limit);
    }

    /// Warns once when `used` reaches 80 % of `limit` under the name
    /// `key()`, and forgets the name once `used` is below the mark again.
    /// The name is built only when the set is touched: under the mark with
    /// nothing warned (every update of a quiet turn) costs one lock.
    fn warn_keyed(&self, key: impl FnOnce() -> String, setting: &str, used: u64, limit: u64) {
        let threshold = limit / 5 * 4 + (limit % 5) * 4 / 5;
        let mut warned = lock(&self.warned);
        if used >= threshold && used > 0 && limit > 0 {
            if warned.insert(key()) {
                tracing::warn!(
                    used,
                    limit,
                    config_path = setting,
                    "usage crossed 80% of a configured limit"
                );
            }
        } else if !warned.is_empty() {
            warned.remove(&key());
        }
    }

    pub(crate) fn warn_history(
        &self,
        session_id: &str,
        _before: &HistoryCounters,
        after: &HistoryCounters,
    ) {
        self.warn_keyed(
            || format!("history-events:{session_id}"),
            "limits.acp.maxSessionHistoryEvents",
            after.retained_event_count,
            self.limits.max_session_history_events,
        );
        self.warn_keyed(
            || format!("history-bytes:{session_id}"),
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
                code: ErrorCode::AcpPendingPermissionsPerSessionLimit,
                setting: "limits.acp.maxPendingPermissionsPerSession",
                used: session_pending,
                limit: per_session,
            });
        }
        let [_, _, vm_pending, _] = self.store.vm_counters().await?;
        let per_vm = self.limits.max_pending_permissions_per_vm;
        if vm_pending >= per_vm {
            return Err(SessionError::Limit {
                code: ErrorCode::AcpPendingPermissionsPerVmLimit,
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
    ) -> Result<NotPendingReason, SessionError> {
        let status = self.store.permission_status(session_id, request_id).await?;
        Ok(match status {
            None => NotPendingReason::RequestNotFound,
            Some(row) => match (row.state, row.terminal_reason.as_deref()) {
                (PermissionState::Responded, _) | (_, Some("accepted")) => {
                    NotPendingReason::AlreadyResolved
                }
                (_, Some(reason)) => {
                    NotPendingReason::parse(reason).unwrap_or(NotPendingReason::AdapterExited)
                }
                _ => NotPendingReason::AdapterExited,
            },
        })
    }
}
