//! MCP servers as callables. Accounts configure remote servers (Streamable
//! HTTP or the legacy SSE transport) over the signed API, the operator may
//! add command servers (stdio) in the VM config, and an agent may use the
//! servers its definition names in `mcpServers`. Each tool a server
//! advertises is a callable at `mcp:<server>/<tool>`, reached through the
//! `call` verb like the builtin callables: it never widens the provider
//! payload unless the thread promoted it by using it.
//!
//! Discovery (`tools/list`) runs when a server is set or refreshed, and at
//! most once per run when a call names a tool the cache does not know; its
//! outcome (the tools, or why it failed) is kept on the server's row, so a
//! listing never waits for a server. Connections are pooled per account and
//! server, closed after `mcp.idleMs` idle, at most `mcp.maxConnections` in
//! the VM; calls in flight are at most `mcp.maxCalls`, each within
//! `mcp.callTimeoutMs` and cancelled with its session's turn. Header
//! secrets are opened when a connection opens and never leave this module
//! (responses carry header names only). URLs an account chose lead to
//! public addresses only unless `mcp.allowPrivateUrls`.

mod error;
mod names;
mod pool;
mod records;
mod store;
mod transport;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentos_adapters::builtin::net;
use agentos_protocol::mcp::{self as wire, methods, CallOutcome, ToolDescriptor};
use agentos_protocol::seed::action::McpServerConfig;
use agentos_protocol::seed::response::{McpToolInfo, RedactedMcpServer};
use serde_json::{json, Value};

pub use self::error::McpError;
pub use self::names::{address, contract_markdown, parse_address, provider_name, tool_infos};
use self::pool::Pool;
use self::records::{check_config, config_of, redact, tools_json, tools_of};
pub use self::store::{McpStore, ServerRow};
use crate::config::mcp::McpConfig;
use crate::config::AgentSpec;
use crate::control::Control;
use crate::sandbox::Launcher;

/// What every callable address of an MCP tool starts with.
pub const ADDRESS_PREFIX: &str = "mcp:";
/// Pages of `tools/list` read, and tools kept, at most.
const MAX_TOOL_PAGES: usize = 20;
const MAX_TOOLS: usize = 512;
/// Bytes of one server's kept tool descriptors (their JSON, as stored and
/// listed), at most; the tools past it are left out.
const MAX_TOOLS_JSON_BYTES: usize = 1024 * 1024;
/// Runs remembered as having rediscovered a server (past it the memory
/// starts again).
const MAX_REMEMBERED_RUNS: usize = 4096;

/// One server as an agent's views show it.
#[derive(Clone, Debug)]
pub struct ServerState {
    pub view: RedactedMcpServer,
    pub tools: Vec<ToolDescriptor>,
}

impl ServerState {
    pub fn tool_infos(&self) -> Vec<McpToolInfo> {
        tool_infos(&self.view.name, &self.tools)
    }
}

/// Discovery outcomes of the operator's servers (the same command for
/// every account), by name.
type OperatorTools = HashMap<String, (Result<Vec<ToolDescriptor>, String>, i64)>;

struct Inner {
    store: McpStore,
    control: Control,
    config: McpConfig,
    client: reqwest::Client,
    launcher: Arc<Launcher>,
    operator_tools: Mutex<OperatorTools>,
    /// Operator servers whose discovery runs in the background now.
    discovering: Mutex<HashSet<String>>,
    pool: Mutex<Pool>,
    calls: Arc<tokio::sync::Semaphore>,
    /// (run, account, server) that already rediscovered.
    rediscovered: Mutex<HashSet<(String, String, String)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn now_ms() -> i64 {
    agentos_base::clock::unix_ms()
}

/// MCP servers: records, discovery, connections and calls. Cheap to clone.
#[derive(Clone)]
pub struct Mcp {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Mcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mcp").finish_non_exhaustive()
    }
}

impl Mcp {
    /// The service, and the task that closes idle connections.
    pub fn new(
        db: agentos_schema::SharedDatabase,
        control: Control,
        config: McpConfig,
        launcher: Arc<Launcher>,
    ) -> Result<Mcp, McpError> {
        let builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            .user_agent(concat!("agentos-sidecar/", env!("CARGO_PKG_VERSION")));
        let builder = if config.allow_private_urls {
            builder
        } else {
            builder.dns_resolver(Arc::new(net::PublicOnly))
        };
        let client = builder
            .build()
            .map_err(|e| McpError::Unreachable(e.to_string()))?;
        let permits = usize::try_from(config.max_calls)
            .unwrap_or(usize::MAX)
            .min(tokio::sync::Semaphore::MAX_PERMITS);
        let inner = Arc::new(Inner {
            store: McpStore::new(db),
            control,
            client,
            launcher,
            operator_tools: Mutex::default(),
            discovering: Mutex::default(),
            pool: Mutex::default(),
            calls: Arc::new(tokio::sync::Semaphore::new(permits)),
            rediscovered: Mutex::default(),
            config,
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(pool::reap_idle(Arc::downgrade(&inner)));
        }
        Ok(Mcp { inner })
    }

    fn operator(&self, name: &str) -> Option<&AgentSpec> {
        self.inner.config.servers.get(name)
    }

    fn operator_view(&self, name: &str) -> ServerState {
        let cached = lock(&self.inner.operator_tools).get(name).cloned();
        let (tools, error, at) = match cached {
            Some((Ok(tools), at)) => (tools, None, Some(at)),
            Some((Err(error), at)) => (Vec::new(), Some(error), Some(at)),
            None => (Vec::new(), None, None),
        };
        ServerState {
            view: RedactedMcpServer {
                id: format!("operator:{name}"),
                name: name.to_owned(),
                url: String::new(),
                transport: "stdio".into(),
                header_names: Vec::new(),
                secret_header_names: Vec::new(),
                has_secrets: false,
                created_at: 0,
                updated_at: 0,
                tool_count: at.is_some().then_some(tools.len() as u64),
                error,
                discovered_at: at,
                operator: true,
            },
            tools,
        }
    }

    /// The account's servers, then the operator's.
    pub async fn list(&self, account: &str) -> Result<Vec<RedactedMcpServer>, McpError> {
        let mut servers: Vec<RedactedMcpServer> = self
            .inner
            .store
            .list(account)
            .await?
            .iter()
            .map(redact)
            .collect();
        for name in self.inner.config.servers.keys() {
            servers.push(self.operator_view(name).view);
        }
        Ok(servers)
    }

    /// The servers an agent names, in its order, each with its tools or
    /// why it has none; never reaches a server (an operator server never
    /// discovered is discovered in the background).
    pub async fn servers_for(&self, account: &str, names: &[String]) -> Vec<ServerState> {
        let mut seen = HashSet::new();
        let mut states = Vec::new();
        for name in names {
            if !seen.insert(name.as_str()) {
                continue;
            }
            if self.operator(name).is_some() {
                let state = self.operator_view(name);
                if state.view.discovered_at.is_none()
                    && lock(&self.inner.discovering).insert(name.clone())
                {
                    let mcp = self.clone();
                    let (account, name) = (account.to_owned(), name.clone());
                    tokio::spawn(async move {
                        let _ = mcp.discover(&account, &name).await;
                        lock(&mcp.inner.discovering).remove(&name);
                    });
                }
                states.push(state);
                continue;
            }
            match self.inner.store.get(account, name).await {
                Ok(Some(row)) => states.push(ServerState {
                    tools: tools_of(row.tools.as_ref()),
                    view: redact(&row),
                }),
                Ok(None) => states.push(ServerState {
                    view: RedactedMcpServer {
                        id: String::new(),
                        name: name.clone(),
                        url: String::new(),
                        transport: "http".into(),
                        header_names: Vec::new(),
                        secret_header_names: Vec::new(),
                        has_secrets: false,
                        created_at: 0,
                        updated_at: 0,
                        tool_count: None,
                        error: Some(format!(
                            "MCP server \"{name}\" is enabled for this agent but no longer exists."
                        )),
                        discovered_at: None,
                        operator: false,
                    },
                    tools: Vec::new(),
                }),
                Err(e) => {
                    tracing::warn!(server = %name, error = %e, "an MCP server row could not be read")
                }
            }
        }
        states
    }

    /// Creates or replaces an account's server, then discovers its tools;
    /// a failed discovery keeps the record and says why in `error`.
    pub async fn set(
        &self,
        account: &str,
        name: &str,
        config: McpServerConfig,
    ) -> Result<RedactedMcpServer, McpError> {
        if self.operator(name).is_some() {
            return Err(McpError::Invalid(format!(
                "MCP server \"{name}\" is configured by the operator"
            )));
        }
        let config = check_config(name, config)?;
        self.check_url(&config.url)?;
        let value = serde_json::to_value(&config).map_err(|e| McpError::Invalid(e.to_string()))?;
        let max = self.inner.config.max_servers_per_account;
        let id = uuid::Uuid::new_v4().to_string();
        let Some(_) = self
            .inner
            .store
            .upsert(account, name, &id, &value, now_ms(), max)
            .await?
        else {
            return Err(McpError::Limit(format!(
                "an account may configure at most {max} MCP servers (mcp.maxServersPerAccount)"
            )));
        };
        self.forget(account, name, None);
        match self.refresh(account, name).await {
            // Saved, not yet discovered: the answer says why.
            Err(busy @ McpError::Busy(..)) => match self.inner.store.get(account, name).await? {
                Some(row) => {
                    let mut view = redact(&row);
                    view.error = Some(busy.to_string());
                    Ok(view)
                }
                None => Err(McpError::NotFound("MCP server not found".into())),
            },
            other => other,
        }
    }

    /// Discovers a server's tools again; answers its record.
    pub async fn refresh(&self, account: &str, name: &str) -> Result<RedactedMcpServer, McpError> {
        // A failed discovery is kept on the record and shown there; only a
        // discovery that could not run at all (no slot) is the answer.
        let ran = |found: Result<Vec<ToolDescriptor>, McpError>| match found {
            Err(busy @ McpError::Busy(..)) => Err(busy),
            _ => Ok(()),
        };
        if self.operator(name).is_some() {
            ran(self.discover(account, name).await)?;
            return Ok(self.operator_view(name).view);
        }
        if self.inner.store.get(account, name).await?.is_none() {
            return Err(McpError::NotFound("MCP server not found".into()));
        }
        ran(self.discover(account, name).await)?;
        match self.inner.store.get(account, name).await? {
            Some(row) => Ok(redact(&row)),
            None => Err(McpError::NotFound("MCP server not found".into())),
        }
    }

    /// Discovers a server's tools now (`ListMcpServerTools`): its tools, or
    /// why they cannot be listed.
    pub async fn fresh_tools(
        &self,
        account: &str,
        name: &str,
    ) -> Result<Vec<ToolDescriptor>, McpError> {
        if self.operator(name).is_none() && self.inner.store.get(account, name).await?.is_none() {
            return Err(McpError::NotFound("MCP server not found".into()));
        }
        self.discover(account, name).await
    }

    /// Deletes an account's server and the header secrets it owns (named
    /// `mcp-<server>-…`, as the desktop client names them).
    pub async fn delete(&self, account: &str, name: &str) -> Result<(), McpError> {
        if self.operator(name).is_some() {
            return Err(McpError::Invalid(format!(
                "MCP server \"{name}\" is configured by the operator"
            )));
        }
        let Some(row) = self.inner.store.get(account, name).await? else {
            return Err(McpError::NotFound("MCP server not found".into()));
        };
        let prefix = format!("mcp-{name}-");
        let owned: Vec<String> = config_of(&row)
            .ok()
            .and_then(|c| c.secret_refs)
            .map(|refs| {
                refs.into_values()
                    .filter(|s| s.starts_with(&prefix))
                    .collect()
            })
            .unwrap_or_default();
        if !self.inner.store.delete(account, name, &owned).await? {
            return Err(McpError::NotFound("MCP server not found".into()));
        }
        self.forget(account, name, None);
        Ok(())
    }

    /// The tool `tool` of server `name` as the cache knows it; when it does
    /// not, one discovery per run (and server) looks again.
    pub async fn tool(
        &self,
        account: &str,
        name: &str,
        tool: &str,
        run: Option<&str>,
    ) -> Result<Option<ToolDescriptor>, McpError> {
        let cached = self.cached_tools(account, name).await?;
        if let Some(found) = cached.iter().find(|t| t.name == tool) {
            return Ok(Some(found.clone()));
        }
        let key = (
            run.unwrap_or_default().to_owned(),
            account.to_owned(),
            name.to_owned(),
        );
        if run.is_some() {
            let mut seen = lock(&self.inner.rediscovered);
            if seen.len() >= MAX_REMEMBERED_RUNS {
                seen.clear();
            }
            if !seen.insert(key) {
                return Ok(None);
            }
        }
        let tools = self.discover(account, name).await?;
        Ok(tools.into_iter().find(|t| t.name == tool))
    }

    /// The tools of a server as last discovered (`NotFound` for a name
    /// that is no server of the account or the operator).
    pub async fn cached_tools(
        &self,
        account: &str,
        name: &str,
    ) -> Result<Vec<ToolDescriptor>, McpError> {
        if self.operator(name).is_some() {
            return Ok(self.operator_view(name).tools);
        }
        match self.inner.store.get(account, name).await? {
            Some(row) => Ok(tools_of(row.tools.as_ref())),
            None => Err(McpError::NotFound(format!(
                "MCP server \"{name}\" is enabled for this agent but no longer exists."
            ))),
        }
    }

    /// One of the `mcp.maxCalls` slots a call or a listing holds while it
    /// reads an answer; `mcp_busy` when none is free.
    fn call_slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit, McpError> {
        let max = self.inner.config.max_calls;
        self.inner
            .calls
            .clone()
            .try_acquire_owned()
            .map_err(|_| McpError::Busy("calls", max, "maxCalls"))
    }

    /// Lists a server's tools through a connection and keeps the outcome.
    async fn discover(&self, account: &str, name: &str) -> Result<Vec<ToolDescriptor>, McpError> {
        // A listing reads up to a message like a call: it takes a call's
        // slot, so neither a flood of refreshes nor of calls holds more than
        // `mcp.maxCalls` answers at once. Without one it keeps nothing (the
        // last outcome stands) and says so.
        let _slot = self.call_slot()?;
        // The config this discovery reaches, read before it connects: what
        // it finds is kept only while the config is still this one.
        let config = match self.operator(name) {
            Some(_) => None,
            None => self
                .inner
                .store
                .get(account, name)
                .await?
                .map(|row| row.config),
        };
        // The listing's own deadline outlasts the connection's, so a slow
        // open ends as its own timeout and is settled there.
        let deadline =
            Duration::from_millis(self.inner.config.connect_timeout_ms.saturating_mul(2));
        // A session the server forgot is opened again once, as for calls.
        let listing = async {
            match self.list_tools(account, name).await {
                Err(McpError::SessionExpired) => self.list_tools(account, name).await,
                other => other,
            }
        };
        let found = match tokio::time::timeout(deadline, listing).await {
            Ok(found) => found,
            Err(_) => {
                self.forget(account, name, None);
                Err(McpError::Timeout(
                    self.inner.config.connect_timeout_ms.saturating_mul(2),
                ))
            }
        };
        let at = now_ms();
        if self.operator(name).is_some() {
            lock(&self.inner.operator_tools).insert(
                name.to_owned(),
                (found.clone().map_err(|e| e.to_string()), at),
            );
            return found;
        }
        if let Some(config) = config {
            let outcome = found.as_ref().map(|tools| tools_json(tools));
            let error = found.as_ref().err().map(|e| e.to_string());
            self.inner
                .store
                .discovered(
                    account,
                    name,
                    &config,
                    match (&outcome, &error) {
                        (Ok(tools), _) => Ok(tools),
                        (Err(_), Some(error)) => Err(error.as_str()),
                        (Err(_), None) => Err(""),
                    },
                    at,
                )
                .await?;
        }
        found
    }

    async fn list_tools(&self, account: &str, name: &str) -> Result<Vec<ToolDescriptor>, McpError> {
        let conn = self.connection(account, name).await?;
        let mut tools = Vec::new();
        let mut kept_bytes = 0usize;
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_TOOL_PAGES {
            let params = match &cursor {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            let page = match conn.transport.request(methods::TOOLS_LIST, params).await {
                Ok(page) => page,
                Err(e) => {
                    self.forget(account, name, Some(&conn));
                    return Err(e.scrubbed(&conn.secrets));
                }
            };
            let (found, next) = wire::tools_page(&page);
            let mut full = false;
            for tool in found {
                let size = tool.to_json().to_string().len();
                if tools.len() >= MAX_TOOLS || kept_bytes + size > MAX_TOOLS_JSON_BYTES {
                    full = true;
                    break;
                }
                kept_bytes += size;
                tools.push(tool);
            }
            if full {
                tracing::warn!(server = %name, kept = tools.len(), "an MCP server advertises more tools than are kept");
                break;
            }
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        Ok(tools)
    }

    /// Calls a tool; `cancel` resolving abandons the call (its turn was
    /// cancelled). A session the server forgot is opened again once.
    pub async fn call(
        &self,
        account: &str,
        name: &str,
        tool: &str,
        arguments: Value,
        cancel: impl Future<Output = ()>,
    ) -> Result<CallOutcome, McpError> {
        let _slot = self.call_slot()?;
        let arguments = if arguments.is_object() {
            arguments
        } else {
            json!({})
        };
        let timeout_ms = self.inner.config.call_timeout_ms;
        tokio::pin!(cancel);
        for attempt in 0..2 {
            let work = async {
                let conn = self.connection(account, name).await?;
                let answer = tokio::time::timeout(
                    Duration::from_millis(timeout_ms),
                    conn.transport.request(
                        methods::TOOLS_CALL,
                        json!({"name": tool, "arguments": arguments}),
                    ),
                )
                .await
                .unwrap_or(Err(McpError::Timeout(timeout_ms)));
                if answer.as_ref().is_err_and(McpError::breaks_connection)
                    || !conn.transport.is_alive()
                {
                    self.forget(account, name, Some(&conn));
                }
                Ok::<_, McpError>((answer, conn))
            };
            let (answer, conn) = tokio::select! {
                answer = work => answer?,
                () = &mut cancel => return Err(McpError::Canceled),
            };
            match answer {
                Err(McpError::SessionExpired) if attempt == 0 => continue,
                Err(e) => return Err(e.scrubbed(&conn.secrets)),
                Ok(result) => {
                    // Scrubbed whole, then cut: no part of a secret
                    // survives at the cut.
                    let mut outcome = wire::flatten_result(&result, usize::MAX);
                    outcome.text = conn.scrub(&outcome.text);
                    wire::cut(&mut outcome.text, wire::MAX_RESULT_BYTES);
                    if let Some(structured) = &outcome.structured {
                        let text = structured.to_string();
                        if conn.scrub(&text) != text {
                            outcome.structured = None;
                        }
                    }
                    return Ok(outcome);
                }
            }
        }
        Err(McpError::SessionExpired)
    }
}
