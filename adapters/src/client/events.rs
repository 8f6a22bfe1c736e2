//! What an adapter connection hands its caller: the agent's requests,
//! notifications, stderr lines and exit as [`AdapterEvent`]s on a channel
//! bounded in events and in stdout bytes ([`AdapterEvents`]), the typed
//! [`AdapterError`], and what `initialize` negotiated.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::*;

/// The id of a request the agent sent us, kept verbatim so the answer echoes
/// it exactly (agents may use numbers, strings or null).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncomingRequestId(pub(super) Value);

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

/// An event in its connection's queue, with its share of the connection's
/// stdout budget and the bytes it holds of the process's. Boxed: the queue
/// holds blocks of 32 entries from its start, one per connection, and most
/// of the time it is empty.
pub(super) type Queued = Box<(AdapterEvent, u32, usize)>;

/// Stdout bytes read but not yet taken by the caller, against their bound.
pub(super) struct StdoutBudget {
    pub(super) permits: Arc<Semaphore>,
    pub(super) limit: usize,
    /// Above 80 % since the last warning; re-armed below it.
    pub(super) warned: AtomicBool,
}

impl StdoutBudget {
    pub(super) fn new(limit: usize) -> Arc<StdoutBudget> {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(StdoutBudget {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            warned: AtomicBool::new(false),
        })
    }

    /// What an event of `bytes` holds: a line longer than the whole budget
    /// takes all of it.
    pub(super) fn cost(&self, bytes: usize) -> u32 {
        // `limit` is at most `Semaphore::MAX_PERMITS`, below `u32::MAX`.
        u32::try_from(bytes.clamp(1, self.limit)).unwrap_or(u32::MAX)
    }

    pub(super) fn used(&self) -> usize {
        self.limit.saturating_sub(self.permits.available_permits())
    }

    /// Logs once per crossing of 80 %.
    pub(super) fn check_pressure(&self) {
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
    pub(super) rx: mpsc::Receiver<Queued>,
    pub(super) budget: Arc<StdoutBudget>,
    pub(super) process: Arc<ProcessBudget>,
}

impl AdapterEvents {
    /// The next event; `None` once the adapter is gone and every event was
    /// taken.
    pub async fn recv(&mut self) -> Option<AdapterEvent> {
        let (event, cost, held) = *self.rx.recv().await?;
        self.budget.permits.add_permits(cost as usize);
        self.process.give_stdout(held);
        Some(event)
    }

    /// The next event if one is waiting.
    pub fn try_recv(&mut self) -> Result<AdapterEvent, mpsc::error::TryRecvError> {
        let (event, cost, held) = *self.rx.try_recv()?;
        self.budget.permits.add_permits(cost as usize);
        self.process.give_stdout(held);
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
    /// A long line found no room in the process's stdout budget in time.
    #[error("adapter wrote a line that found no room in the process-wide stdout budget ({limit} bytes) in time")]
    StdoutBudget { limit: usize },
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
            AdapterError::LineTooLong { .. } | AdapterError::StdoutBudget { .. } => {
                ErrorCode::AdapterLineTooLong
            }
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
    pub(super) fn from_raw(raw: Value) -> Result<Self, AdapterError> {
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
