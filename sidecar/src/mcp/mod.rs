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
mod sse;
mod store;
mod transport;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use agentos_adapters::builtin::net;
use agentos_protocol::mcp::{self as wire, methods, CallOutcome, ToolDescriptor};
use agentos_protocol::seed::action::McpServerConfig;
use agentos_protocol::seed::response::{McpToolInfo, RedactedMcpServer};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub use self::error::McpError;
pub use self::store::{McpStore, ServerRow};
use self::transport::{header_map, LegacySse, Stdio, StreamableHttp, Transport};
use crate::config::mcp::{is_server_name, McpConfig};
use crate::config::AgentSpec;
use crate::control::Control;
use crate::sandbox::Launcher;

/// What every callable address of an MCP tool starts with.
pub const ADDRESS_PREFIX: &str = "mcp:";
/// Longest URL and header value, and most headers, as the reference.
const MAX_URL_BYTES: usize = 2048;
const MAX_HEADERS: usize = 16;
const MAX_HEADER_NAME_BYTES: usize = 256;
/// Pages of `tools/list` read, and tools kept, at most.
const MAX_TOOL_PAGES: usize = 20;
const MAX_TOOLS: usize = 512;
/// Runs remembered as having rediscovered a server (past it the memory
/// starts again).
const MAX_REMEMBERED_RUNS: usize = 4096;

/// `mcp:<server>/<tool>` as its parts.
pub fn parse_address(address: &str) -> Option<(&str, &str)> {
    let rest = address.strip_prefix(ADDRESS_PREFIX)?;
    let (server, tool) = rest.split_once('/')?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

pub fn address(server: &str, tool: &str) -> String {
    format!("{ADDRESS_PREFIX}{server}/{tool}")
}

/// A segment in the `[a-zA-Z0-9_-]` providers take for tool names.
fn sanitize(segment: &str) -> String {
    let mut out = String::new();
    let mut gap = false;
    for c in segment.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            if gap && !out.is_empty() {
                out.push('_');
            }
            gap = false;
            out.push(c);
        } else {
            gap = true;
        }
    }
    let trimmed = out.trim_matches('_');
    if trimmed.is_empty() {
        "mcp".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// The provider-facing name of a promoted MCP tool
/// (`mcp__<server>__<tool>`, as the reference names them).
pub fn provider_name(server: &str, tool: &str) -> String {
    format!("mcp__{}__{}", sanitize(server), sanitize(tool))
}

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

pub fn tool_infos(server: &str, tools: &[ToolDescriptor]) -> Vec<McpToolInfo> {
    tools
        .iter()
        .map(|tool| McpToolInfo {
            name: tool.name.clone(),
            qualified_name: address(server, &tool.name),
            description: tool.description.clone(),
            input_schema: tool
                .input_schema
                .as_ref()
                .map(agentos_protocol::seed::json_to_ipld_clipped),
        })
        .collect()
}

/// The contract the model reads for an MCP tool.
pub fn contract_markdown(server: &str, tool: &ToolDescriptor) -> String {
    let description = tool
        .description
        .clone()
        .filter(|d| !d.trim().is_empty())
        .unwrap_or_else(|| format!("Tool \"{}\" from MCP server \"{server}\".", tool.name));
    let schema = tool
        .input_schema
        .clone()
        .unwrap_or_else(|| json!({"type": "object", "additionalProperties": true}));
    format!(
        "# {}\n\n> mcp tool · server `{server}`\n\n{description}\n\n## Input schema\n\n```json\n{}\n```\n",
        address(server, &tool.name),
        serde_json::to_string_pretty(&schema).unwrap_or_else(|_| "{}".into())
    )
}

/// Where a server is and how to reach it, with its secrets opened.
enum Target {
    Remote {
        url: reqwest::Url,
        transport: Option<String>,
        headers: Vec<(String, String)>,
        /// The values of `headers` that are secrets.
        secrets: Vec<String>,
    },
    Command(AgentSpec),
}

/// A live, initialized connection.
struct Conn {
    transport: Box<dyn Transport>,
    /// The header values that came from secrets: scrubbed from whatever
    /// the server says before anyone reads it (a server may echo them).
    secrets: Vec<String>,
}

impl Conn {
    fn scrub(&self, text: &str) -> String {
        scrub(text, &self.secrets)
    }
}

/// `text` with every secret value replaced.
fn scrub(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(text.to_owned(), |text, secret| {
            text.replace(secret.as_str(), "[redacted]")
        })
}

struct Pooled {
    conn: Arc<Conn>,
    /// What the connection was opened with (config and secrets, hashed):
    /// a change opens another.
    fingerprint: String,
    last_used: Instant,
}

#[derive(Default)]
struct Pool {
    open: HashMap<(String, String), Pooled>,
    /// Connections being opened, counted against the bound.
    opening: usize,
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

fn tools_json(tools: &[ToolDescriptor]) -> Value {
    Value::Array(tools.iter().map(ToolDescriptor::to_json).collect())
}

fn tools_of(value: Option<&Value>) -> Vec<ToolDescriptor> {
    value
        .and_then(Value::as_array)
        .map(|tools| tools.iter().filter_map(ToolDescriptor::from_json).collect())
        .unwrap_or_default()
}

fn config_of(row: &ServerRow) -> Result<McpServerConfig, McpError> {
    serde_json::from_value(row.config.clone()).map_err(|e| {
        McpError::Storage(format!(
            "the stored config of {:?} does not decode: {e}",
            row.name
        ))
    })
}

fn redact(row: &ServerRow) -> RedactedMcpServer {
    let config = config_of(row).ok();
    let keys = |map: Option<&BTreeMap<String, String>>| -> Vec<String> {
        map.map(|m| m.keys().cloned().collect()).unwrap_or_default()
    };
    let secret_header_names = keys(config.as_ref().and_then(|c| c.secret_refs.as_ref()));
    RedactedMcpServer {
        id: row.server_id.clone(),
        name: row.name.clone(),
        url: config.as_ref().map(|c| c.url.clone()).unwrap_or_default(),
        transport: config
            .as_ref()
            .and_then(|c| c.transport.clone())
            .unwrap_or_else(|| "http".to_owned()),
        header_names: keys(config.as_ref().and_then(|c| c.headers.as_ref())),
        has_secrets: !secret_header_names.is_empty(),
        secret_header_names,
        created_at: row.created_at_ms,
        updated_at: row.updated_at_ms,
        tool_count: row
            .tools
            .as_ref()
            .and_then(Value::as_array)
            .map(|t| t.len() as u64),
        error: row.last_error.clone(),
        discovered_at: row.discovered_at_ms,
        operator: false,
    }
}

/// Checks a config as the reference does, with our name rule; answers it
/// normalized (empty maps left out).
fn check_config(name: &str, mut config: McpServerConfig) -> Result<McpServerConfig, McpError> {
    if !is_server_name(name) {
        return Err(McpError::Invalid(
            "MCP server names are 1 to 32 of a-z, 0-9, _ and -, starting with a letter or digit"
                .into(),
        ));
    }
    let url = config.url.trim().to_owned();
    if url.is_empty() {
        return Err(McpError::Invalid("MCP server URL is required".into()));
    }
    if url.len() > MAX_URL_BYTES {
        return Err(McpError::Invalid("MCP server URL is too long".into()));
    }
    let parsed = reqwest::Url::parse(&url)
        .map_err(|_| McpError::Invalid("MCP server URL is invalid".into()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(McpError::Invalid(
            "MCP server URL must start with http:// or https://".into(),
        ));
    }
    config.url = url;
    if let Some(transport) = &config.transport {
        if transport != "http" && transport != "sse" {
            return Err(McpError::Invalid("MCP transport is unsupported".into()));
        }
    }
    for (what, map) in [
        ("headers", &config.headers),
        ("secret headers", &config.secret_refs),
    ] {
        let Some(map) = map else { continue };
        if map.len() > MAX_HEADERS {
            return Err(McpError::Invalid(format!("Too many MCP {what}")));
        }
        for (header, value) in map {
            if header.is_empty()
                || header.len() > MAX_HEADER_NAME_BYTES
                || reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err()
            {
                return Err(McpError::Invalid(format!(
                    "MCP header name {header:?} is invalid"
                )));
            }
            if value.is_empty() || value.len() > MAX_URL_BYTES {
                return Err(McpError::Invalid(format!(
                    "MCP header {header:?} needs a value of 1 to {MAX_URL_BYTES} bytes"
                )));
            }
        }
    }
    if let Some(headers) = &config.headers {
        for (header, value) in headers {
            if reqwest::header::HeaderValue::from_str(value).is_err() {
                return Err(McpError::Invalid(format!(
                    "MCP header {header:?} has an invalid value"
                )));
            }
        }
    }
    config.headers = config.headers.filter(|m| !m.is_empty());
    config.secret_refs = config.secret_refs.filter(|m| !m.is_empty());
    Ok(config)
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
            runtime.spawn(reap_idle(Arc::downgrade(&inner)));
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
        self.refresh(account, name).await
    }

    /// Discovers a server's tools again; answers its record.
    pub async fn refresh(&self, account: &str, name: &str) -> Result<RedactedMcpServer, McpError> {
        if self.operator(name).is_some() {
            let _ = self.discover(account, name).await;
            return Ok(self.operator_view(name).view);
        }
        if self.inner.store.get(account, name).await?.is_none() {
            return Err(McpError::NotFound("MCP server not found".into()));
        }
        let _ = self.discover(account, name).await;
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

    /// Lists a server's tools through a connection and keeps the outcome.
    async fn discover(&self, account: &str, name: &str) -> Result<Vec<ToolDescriptor>, McpError> {
        let deadline = Duration::from_millis(self.inner.config.connect_timeout_ms);
        let found = match tokio::time::timeout(deadline, self.list_tools(account, name)).await {
            Ok(found) => found,
            Err(_) => {
                self.forget(account, name, None);
                Err(McpError::Timeout(self.inner.config.connect_timeout_ms))
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
        if let Some(row) = self.inner.store.get(account, name).await? {
            let outcome = found.as_ref().map(|tools| tools_json(tools));
            let error = found.as_ref().err().map(|e| e.to_string());
            self.inner
                .store
                .discovered(
                    account,
                    name,
                    &row.config,
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
            tools.extend(found);
            if tools.len() >= MAX_TOOLS {
                tools.truncate(MAX_TOOLS);
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
        let max = self.inner.config.max_calls;
        let _slot = self
            .inner
            .calls
            .clone()
            .try_acquire_owned()
            .map_err(|_| McpError::Busy("calls", max, "maxCalls"))?;
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
                    let mut outcome = wire::flatten_result(&result, wire::MAX_RESULT_BYTES);
                    outcome.text = conn.scrub(&outcome.text);
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

    /// Drops the pooled connection of a server (only `conn` when given: a
    /// newer one stays), closing it in the background.
    fn forget(&self, account: &str, name: &str, conn: Option<&Arc<Conn>>) {
        let key = (account.to_owned(), name.to_owned());
        let removed = {
            let mut pool = lock(&self.inner.pool);
            match (pool.open.get(&key), conn) {
                (Some(pooled), Some(conn)) if !Arc::ptr_eq(&pooled.conn, conn) => None,
                (Some(_), _) => pool.open.remove(&key),
                (None, _) => None,
            }
        };
        if let Some(pooled) = removed {
            tokio::spawn(async move { pooled.conn.transport.close().await });
        }
    }

    /// Closes every connection (the VM is stopping).
    pub async fn close_all(&self) {
        let all: Vec<Pooled> = lock(&self.inner.pool)
            .open
            .drain()
            .map(|(_, p)| p)
            .collect();
        for pooled in all {
            pooled.conn.transport.close().await;
        }
    }

    fn check_url(&self, url: &str) -> Result<reqwest::Url, McpError> {
        let parsed = reqwest::Url::parse(url)
            .map_err(|_| McpError::Invalid("MCP server URL is invalid".into()))?;
        if !self.inner.config.allow_private_urls {
            net::check_url(&parsed).map_err(McpError::Refused)?;
        }
        Ok(parsed)
    }

    /// The server's target and its fingerprint, secrets opened.
    async fn target(&self, account: &str, name: &str) -> Result<(Target, String), McpError> {
        if let Some(spec) = self.operator(name) {
            return Ok((Target::Command(spec.clone()), "stdio".to_owned()));
        }
        let Some(row) = self.inner.store.get(account, name).await? else {
            return Err(McpError::NotFound(format!(
                "MCP server \"{name}\" is enabled for this agent but no longer exists."
            )));
        };
        let config = config_of(&row)?;
        let url = self.check_url(&config.url)?;
        let mut headers: BTreeMap<String, String> = config.headers.clone().unwrap_or_default();
        let mut secrets = Vec::new();
        let mut hash = Sha256::new();
        hash.update(row.config.to_string().as_bytes());
        for (header, secret) in config.secret_refs.iter().flatten() {
            let value = self
                .inner
                .control
                .secret_plaintext(account, secret)
                .await
                .map_err(|e| McpError::Secret(format!("MCP server \"{name}\": {e}")))?
                .ok_or_else(|| {
                    McpError::Secret(format!(
                        "MCP server \"{name}\": the secret {secret:?} of header {header:?} does not exist"
                    ))
                })?;
            let value = String::from_utf8(value.as_bytes().to_vec()).map_err(|_| {
                McpError::Secret(format!(
                    "MCP server \"{name}\": the secret {secret:?} of header {header:?} is not text"
                ))
            })?;
            hash.update(header.as_bytes());
            hash.update([0]);
            hash.update(value.as_bytes());
            hash.update([0]);
            secrets.push(value.clone());
            headers.insert(header.clone(), value);
        }
        let fingerprint = hex::encode(hash.finalize());
        Ok((
            Target::Remote {
                url,
                transport: config.transport,
                headers: headers.into_iter().collect(),
                secrets,
            },
            fingerprint,
        ))
    }

    /// A pooled connection to the server, opened when there is none.
    async fn connection(&self, account: &str, name: &str) -> Result<Arc<Conn>, McpError> {
        let (target, fingerprint) = self.target(account, name).await?;
        let key = (account.to_owned(), name.to_owned());
        let max = self.inner.config.max_connections;
        let stale = {
            let mut pool = lock(&self.inner.pool);
            if let Some(pooled) = pool.open.get_mut(&key) {
                if pooled.fingerprint == fingerprint && pooled.conn.transport.is_alive() {
                    pooled.last_used = Instant::now();
                    return Ok(pooled.conn.clone());
                }
            }
            let mut stale: Vec<Pooled> = pool.open.remove(&key).into_iter().collect();
            if (pool.open.len() + pool.opening) as u64 >= max {
                // Room from the connection idle the longest.
                let idle = pool
                    .open
                    .iter()
                    .filter(|(_, p)| Arc::strong_count(&p.conn) == 1)
                    .min_by_key(|(_, p)| p.last_used)
                    .map(|(k, _)| k.clone());
                match idle.and_then(|k| pool.open.remove(&k)) {
                    Some(evicted) => stale.push(evicted),
                    None => return Err(McpError::Busy("connections", max, "maxConnections")),
                }
            }
            pool.opening += 1;
            stale
        };
        for pooled in stale {
            tokio::spawn(async move { pooled.conn.transport.close().await });
        }
        let deadline = Duration::from_millis(self.inner.config.connect_timeout_ms);
        let opened = tokio::time::timeout(deadline, self.open(account, name, target))
            .await
            .unwrap_or(Err(McpError::Timeout(self.inner.config.connect_timeout_ms)));
        let mut pool = lock(&self.inner.pool);
        pool.opening -= 1;
        let conn = Arc::new(opened?);
        let replaced = pool.open.insert(
            key,
            Pooled {
                conn: conn.clone(),
                fingerprint,
                last_used: Instant::now(),
            },
        );
        drop(pool);
        // Another call opened one meanwhile: that one is closed, not leaked
        // (a command server's process ends with its connection).
        if let Some(replaced) = replaced {
            tokio::spawn(async move { replaced.conn.transport.close().await });
        }
        Ok(conn)
    }

    /// Opens and initializes a connection.
    async fn open(&self, account: &str, name: &str, target: Target) -> Result<Conn, McpError> {
        let max_message =
            usize::try_from(self.inner.config.max_message_bytes).unwrap_or(usize::MAX);
        match target {
            Target::Remote {
                url,
                transport,
                headers,
                secrets,
            } => {
                let headers = header_map(&headers)?;
                let opened = self
                    .open_remote(url, transport.as_deref(), headers, max_message)
                    .await;
                match opened {
                    Ok(mut conn) => {
                        conn.secrets = secrets;
                        Ok(conn)
                    }
                    Err(e) => Err(e.scrubbed(&secrets)),
                }
            }
            Target::Command(spec) => {
                let command = self
                    .inner
                    .launcher
                    .command(&format!("mcp-{name}-{account}"), &spec, spec.env.clone())
                    .map_err(McpError::Unreachable)?;
                let stdio = Stdio::spawn(&command, max_message).await?;
                initialize(Box::new(stdio)).await
            }
        }
    }

    /// Opens a remote server: Streamable HTTP, the legacy SSE transport,
    /// or (no transport named) the first, then the second.
    async fn open_remote(
        &self,
        url: reqwest::Url,
        transport: Option<&str>,
        headers: reqwest::header::HeaderMap,
        max_message: usize,
    ) -> Result<Conn, McpError> {
        let client = self.inner.client.clone();
        let http = || -> Box<dyn Transport> {
            Box::new(StreamableHttp::new(
                client.clone(),
                url.clone(),
                headers.clone(),
                max_message,
            ))
        };
        match transport {
            Some("sse") => {
                let sse =
                    LegacySse::connect(client.clone(), url.clone(), headers.clone(), max_message)
                        .await?;
                initialize(Box::new(sse)).await
            }
            Some(_) => initialize(http()).await,
            None => match initialize(http()).await {
                Ok(conn) => Ok(conn),
                Err(first) => {
                    let sse = LegacySse::connect(
                        client.clone(),
                        url.clone(),
                        headers.clone(),
                        max_message,
                    )
                    .await;
                    match sse {
                        Ok(sse) => initialize(Box::new(sse)).await.map_err(|_| first),
                        Err(_) => Err(first),
                    }
                }
            },
        }
    }
}

/// `initialize`, then `notifications/initialized`.
async fn initialize(transport: Box<dyn Transport>) -> Result<Conn, McpError> {
    let result = transport
        .request(
            methods::INITIALIZE,
            wire::initialize_params("agentos-sidecar", env!("CARGO_PKG_VERSION")),
        )
        .await;
    let result = match result {
        Ok(result) => result,
        Err(e) => {
            transport.close().await;
            return Err(e);
        }
    };
    if !result.is_object() {
        transport.close().await;
        return Err(McpError::Protocol("initialize answered no object".into()));
    }
    if let Err(e) = transport.notify(methods::INITIALIZED, json!({})).await {
        transport.close().await;
        return Err(e);
    }
    Ok(Conn {
        transport,
        secrets: Vec::new(),
    })
}

/// Closes connections idle past `mcp.idleMs`, until the service is gone.
async fn reap_idle(inner: Weak<Inner>) {
    loop {
        let idle = match inner.upgrade() {
            Some(inner) => Duration::from_millis(inner.config.idle_ms),
            None => return,
        };
        tokio::time::sleep((idle / 2).max(Duration::from_millis(50))).await;
        let Some(inner) = inner.upgrade() else { return };
        let expired: Vec<Pooled> = {
            let mut pool = lock(&inner.pool);
            let keys: Vec<_> = pool
                .open
                .iter()
                .filter(|(_, p)| Arc::strong_count(&p.conn) == 1 && p.last_used.elapsed() >= idle)
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter().filter_map(|k| pool.open.remove(k)).collect()
        };
        drop(inner);
        for pooled in expired {
            pooled.conn.transport.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_provider_names() {
        assert_eq!(
            parse_address("mcp:everything/get-sum"),
            Some(("everything", "get-sum"))
        );
        assert_eq!(parse_address("mcp:s/a/b"), Some(("s", "a/b")));
        assert_eq!(parse_address("mcp:/t"), None);
        assert_eq!(parse_address("mcp:s/"), None);
        assert_eq!(parse_address("search"), None);
        assert_eq!(address("s", "t"), "mcp:s/t");
        assert_eq!(
            provider_name("everything", "get-sum"),
            "mcp__everything__get-sum"
        );
        assert_eq!(provider_name("s", "a.b c"), "mcp__s__a_b_c");
        assert_eq!(provider_name("s", "..."), "mcp__s__mcp");
    }

    fn config(url: &str) -> McpServerConfig {
        McpServerConfig {
            url: url.into(),
            transport: None,
            headers: None,
            secret_refs: None,
        }
    }

    #[test]
    fn configs_are_checked_as_the_reference() {
        let ok = check_config("weather", config(" https://mcp.example/mcp ")).unwrap();
        assert_eq!(ok.url, "https://mcp.example/mcp");
        let refused =
            |name: &str, c: McpServerConfig| check_config(name, c).unwrap_err().to_string();
        assert!(refused("Weather", config("https://x")).contains("server names"));
        assert_eq!(refused("w", config("")), "MCP server URL is required");
        assert_eq!(
            refused("w", config("not a url")),
            "MCP server URL is invalid"
        );
        assert_eq!(
            refused("w", config("ftp://x/")),
            "MCP server URL must start with http:// or https://"
        );
        let mut c = config("https://x/");
        c.transport = Some("stdio".into());
        assert_eq!(refused("w", c), "MCP transport is unsupported");
        let mut c = config("https://x/");
        c.headers = Some((0..17).map(|i| (format!("h{i}"), "v".into())).collect());
        assert_eq!(refused("w", c), "Too many MCP headers");
        let mut c = config("https://x/");
        c.headers = Some([("bad header".into(), "v".into())].into());
        assert!(refused("w", c).contains("is invalid"));
        let mut c = config("https://x/");
        c.secret_refs = Some(BTreeMap::new());
        assert_eq!(check_config("w", c).unwrap().secret_refs, None);
    }
}
