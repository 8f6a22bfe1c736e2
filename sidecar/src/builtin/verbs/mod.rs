//! The verbs, run for the agent and for the user alike: `read`, `write` and
//! `call` over the agent's Space (memory files, tool documents), the
//! account's threads and the web; `status` and `continue_session` on the
//! session; `delegate`, `plan` and `return_result` on the run. The same implementation serves the builtin agent's tool calls
//! and a user's `InvokeSessionTool`, so the log is symmetric.
//!
//! A verb's failure is a result the caller reads (`is_error`, the text
//! starting with a stable code such as `not_granted:` or
//! `address_unavailable:`), never a crash or a protocol error. Grants are
//! checked here, on every call: an expanded tool whose grant was withdrawn
//! is refused.

mod call;
mod delegate;
mod mcp;
pub use crate::space::registry::granted;
mod publish;
mod read;
mod session;
pub mod specs;
mod write;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use agentos_protocol::agent_ext::{ToolSpec, VerbResult};
use agentos_protocol::host::Actor;
use serde_json::Value;

use super::fetch::Fetcher;
use super::index;
use super::resolved::Resolved;
use crate::control::Control;
use crate::sessions::{SessionStore, Sessions};
use crate::space::{AgentMemory, Space, ToolDocuments};
use crate::work::{Delegation, Turns};

/// Sessions whose expanded tools are remembered at once, at most; past it
/// the memory starts again (a call then shows a contract once more).
const MAX_REMEMBERED_SESSIONS: usize = 4096;

/// Who runs a verb, for which agent and session.
#[derive(Clone, Debug)]
pub struct VerbScope {
    pub account_id: String,
    pub agent_id: String,
    pub agent_name: String,
    pub model: String,
    pub provider: String,
    pub session_id: String,
    pub actor: Actor,
    /// The definition's `tools`: the grant set.
    pub grants: Option<Vec<String>>,
    /// The signing identities the definition names (`signingKeys`, or its
    /// one `signingKey`): who an `hm://` write may sign as.
    pub signing_keys: Vec<String>,
    /// The definition's `mcpServers`: whose tools `call` may reach.
    pub mcp_servers: Vec<String>,
    /// Single MCP tools (`mcp:<server>/<tool>`) a narrowed scope may still
    /// reach on servers it does not hold whole (a delegated child's).
    pub mcp_tools: Vec<String>,
    /// The run the verb works for (a turn's or a script's): what a
    /// delegated child or a lambda hangs from.
    pub run_id: Option<String>,
    /// The agent's call that runs the verb.
    pub tool_call_id: Option<String>,
    /// The verb's result goes to a model that takes images (an attached
    /// image is then shown, not described).
    pub image_input: bool,
    /// The largest image that model is shown (its provider's bound).
    pub image_max_bytes: u64,
}

impl VerbScope {
    pub fn new(resolved: &Resolved, session_id: &str, actor: Actor) -> VerbScope {
        VerbScope {
            account_id: resolved.agent.account_id.clone(),
            agent_id: resolved.agent.agent_id.clone(),
            agent_name: resolved.agent.name.clone(),
            model: resolved.definition.model.clone(),
            provider: resolved.provider_name.clone(),
            session_id: session_id.to_owned(),
            actor,
            grants: resolved.definition.tools.clone(),
            signing_keys: resolved
                .definition
                .signing_keys
                .clone()
                .or_else(|| resolved.definition.signing_key.clone().map(|k| vec![k]))
                .unwrap_or_default(),
            mcp_servers: resolved.definition.mcp_servers.clone().unwrap_or_default(),
            mcp_tools: Vec::new(),
            run_id: None,
            tool_call_id: None,
            image_input: resolved.provider.as_ref().is_some_and(|p| {
                agentos_protocol::seed::model::supports_image_input(
                    &p.provider_type,
                    &resolved.definition.model,
                )
            }),
            image_max_bytes: agentos_protocol::seed::model::max_image_bytes(
                resolved
                    .provider
                    .as_ref()
                    .map_or("", |p| p.provider_type.as_str()),
            ),
        }
    }

    /// The same scope for the verbs of run `run_id`, called by `call`.
    pub fn for_run(mut self, run_id: Option<&str>, tool_call_id: Option<&str>) -> VerbScope {
        self.run_id = run_id.map(str::to_owned);
        self.tool_call_id = tool_call_id.map(str::to_owned);
        self
    }

    /// Narrows the grants to those of `allowed` the agent has (a delegated
    /// child's `tools`; an MCP server stays whole when `allowed` names it,
    /// `mcp:<server>`, and only the tools it names, `mcp:<server>/<tool>`,
    /// otherwise).
    pub fn restricted(mut self, allowed: Option<&[String]>) -> VerbScope {
        if let Some(allowed) = allowed {
            let servers = std::mem::take(&mut self.mcp_servers);
            let tools = std::mem::take(&mut self.mcp_tools);
            for name in allowed {
                let Some(rest) = name.strip_prefix(crate::mcp::ADDRESS_PREFIX) else {
                    continue;
                };
                match rest.split_once('/') {
                    None if servers.iter().any(|s| s == rest) => {
                        self.mcp_servers.push(rest.to_owned());
                    }
                    Some((server, _))
                        if servers.iter().any(|s| s == server) || tools.contains(name) =>
                    {
                        self.mcp_tools.push(name.clone());
                    }
                    _ => {}
                }
            }
            let grants = self.grants.clone();
            self.grants = Some(
                allowed
                    .iter()
                    .filter(|name| crate::space::registry::granted(grants.as_deref(), name))
                    .cloned()
                    .collect(),
            );
        }
        self
    }

    /// Whether the scope may call tool `tool` of MCP server `server`.
    pub(super) fn allows_mcp(&self, server: &str, tool: &str) -> bool {
        self.mcp_servers.iter().any(|s| s == server)
            || self.mcp_tools.contains(&crate::mcp::address(server, tool))
    }

    /// The MCP servers the scope reaches any tool of, in order.
    pub(super) fn mcp_server_names(&self) -> Vec<String> {
        let mut names = self.mcp_servers.clone();
        for tool in &self.mcp_tools {
            if let Some((server, _)) = crate::mcp::parse_address(tool) {
                if !names.iter().any(|n| n == server) {
                    names.push(server.to_owned());
                }
            }
        }
        names
    }

    pub(super) fn grants(&self) -> Option<&[String]> {
        self.grants.as_deref()
    }

    /// Whose threads `thread:` and `search` see: the agent and its owner
    /// see the owner's; a collaborator running a verb sees this agent's
    /// only (what its access already shows it).
    pub(super) fn threads(&self) -> crate::control::SessionScope {
        match &self.actor {
            Actor::User {
                account: Some(account),
                ..
            } if *account != self.account_id => {
                crate::control::SessionScope::Agent(self.agent_id.clone())
            }
            _ => crate::control::SessionScope::Account(self.account_id.clone()),
        }
    }

    /// Whether a thread of `agent_id` owned by `owner` is within
    /// [`VerbScope::threads`].
    pub(super) fn sees_thread(&self, owner: &str, agent_id: &str) -> bool {
        owner == self.account_id
            && match self.threads() {
                crate::control::SessionScope::Agent(own) => own == agent_id,
                crate::control::SessionScope::Account(_) => true,
            }
    }
}

/// A failed verb: `code: message`, as the model and the log see it.
pub(crate) fn failure(code: &str, message: impl std::fmt::Display) -> VerbResult {
    VerbResult {
        output: Value::String(format!("{code}: {message}")),
        is_error: true,
        ends_turn: false,
        parked: false,
        images: Vec::new(),
    }
}

pub(crate) fn success(output: Value) -> VerbResult {
    VerbResult {
        output,
        is_error: false,
        ends_turn: false,
        parked: false,
        images: Vec::new(),
    }
}

#[derive(Clone)]
pub struct Verbs {
    pub(crate) control: Control,
    pub(crate) store: SessionStore,
    pub(crate) tools: ToolDocuments,
    pub(crate) memory: AgentMemory,
    /// The session's attachments, for `read attachment:<id>`.
    pub(crate) attachments: crate::space::SessionAttachments,
    /// MCP servers, for `mcp:<server>/<tool>` callables (absent: none).
    pub(crate) mcp: Option<crate::mcp::Mcp>,
    /// The hypermedia server, for `read hm://…` (absent: such reads answer
    /// `address_unavailable`).
    pub(crate) hypermedia: Option<crate::hypermedia::Hypermedia>,
    /// Hypermedia drafts, for `write hm://… {action: 'draft.*'}`.
    pub(crate) drafts: Option<crate::hypermedia::drafts::DraftStore>,
    /// Downloads from the operator's IPFS gateway, for `read ipfs://…`.
    pub(crate) ipfs: Option<crate::builtin::download::Downloader>,
    /// Staging, for `write ~/memory/…` with `{fromAttachment}`.
    pub(crate) uploads: crate::space::uploads::Uploads,
    pub(crate) fetcher: Fetcher,
    /// Files saved from addresses, for `write ~/memory/…` with `{fromUrl}`
    /// (the VM's download slots, shared with the signed door).
    pub(crate) downloader: crate::builtin::download::Downloader,
    /// The session service and its turns as runs, for `continue_session`
    /// (set once the service exists: it holds this through the agent host).
    pub(crate) sessions: Arc<OnceLock<(Sessions, Turns)>>,
    /// Children and lambdas, for `delegate` and authored tools.
    pub(crate) delegation: Arc<OnceLock<Arc<Delegation>>>,
    /// The agent's triggers, for `read ~/triggers/`.
    pub(crate) triggers: crate::triggers::Triggers,
    /// The tools each session's thread has expanded: set from the log at
    /// every turn's context, grown by the reads and calls of the turn.
    expanded: Arc<Mutex<HashMap<String, BTreeSet<String>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Verbs {
    pub fn new(
        control: Control,
        store: SessionStore,
        space: Space,
        (fetcher, downloader): (Fetcher, crate::builtin::download::Downloader),
        triggers: crate::triggers::Triggers,
    ) -> Verbs {
        Verbs {
            triggers,
            control,
            store,
            tools: space.tools,
            memory: space.memory,
            attachments: space.attachments,
            uploads: space.uploads,
            fetcher,
            downloader,
            mcp: None,
            hypermedia: None,
            ipfs: None,
            drafts: None,
            sessions: Arc::new(OnceLock::new()),
            delegation: Arc::new(OnceLock::new()),
            expanded: Arc::default(),
        }
    }

    /// Gives `call` the MCP servers.
    pub fn with_mcp(mut self, mcp: crate::mcp::Mcp) -> Verbs {
        self.mcp = Some(mcp);
        self
    }

    /// Gives `read` and `write` the hypermedia server, and `write` its
    /// drafts.
    pub fn with_hypermedia(
        mut self,
        hypermedia: crate::hypermedia::Hypermedia,
        ipfs: crate::builtin::download::Downloader,
        drafts: crate::hypermedia::drafts::DraftStore,
    ) -> Verbs {
        self.hypermedia = Some(hypermedia);
        self.ipfs = Some(ipfs);
        self.drafts = Some(drafts);
        self
    }

    /// Gives `continue_session` the session service.
    pub fn attach(&self, sessions: Sessions, turns: Turns) {
        let _ = self.sessions.set((sessions, turns));
    }

    /// Gives `delegate`, `plan` and authored tools the runs.
    pub fn attach_delegation(&self, delegation: Arc<Delegation>) {
        let _ = self.delegation.set(delegation);
    }

    /// Runs a callable without touch-expand (a script calls what it names).
    pub async fn run_direct(&self, scope: &VerbScope, tool: &str, input: Value) -> VerbResult {
        call::run(self, scope, tool, input, true).await
    }

    fn remember(&self, session_id: &str, names: impl IntoIterator<Item = String>) {
        let mut expanded = lock(&self.expanded);
        if expanded.len() >= MAX_REMEMBERED_SESSIONS && !expanded.contains_key(session_id) {
            expanded.clear();
        }
        expanded
            .entry(session_id.to_owned())
            .or_default()
            .extend(names);
    }

    pub(crate) fn is_expanded(&self, session_id: &str, tool: &str) -> bool {
        lock(&self.expanded)
            .get(session_id)
            .is_some_and(|names| names.contains(tool))
    }

    /// The tools the provider sees this turn: the verbs, then the promoted
    /// callables that are granted and can run here.
    pub async fn provider_tools(
        &self,
        scope: &VerbScope,
        promoted: &[String],
    ) -> Result<Vec<ToolSpec>, crate::space::error::SpaceError> {
        {
            let mut expanded = lock(&self.expanded);
            if expanded.len() >= MAX_REMEMBERED_SESSIONS {
                expanded.clear();
            }
            expanded.insert(scope.session_id.clone(), promoted.iter().cloned().collect());
        }
        let output = delegate::output_schema(self, scope).await;
        let mut tools = specs::offered(scope.run_id.is_some(), output);
        for name in promoted {
            if name.starts_with(crate::mcp::ADDRESS_PREFIX) {
                if let Some(spec) = mcp::direct_spec(self, scope, name).await {
                    tools.push(spec);
                }
            } else if let Some(spec) = call::direct_spec(self, scope, name).await? {
                tools.push(spec);
            }
        }
        Ok(tools)
    }

    /// The `<space>` index of the agent (empty when it cannot be read).
    pub async fn space_index(&self, scope: &VerbScope) -> String {
        let (mcp_tools, _) = mcp::listing(self, scope).await;
        index::build(
            &self.tools,
            &self.memory,
            &scope.account_id,
            &scope.agent_id,
            scope.grants(),
            &mcp_tools,
        )
        .await
    }

    /// Runs one verb (or a promoted callable by its own name).
    pub async fn run(&self, scope: &VerbScope, name: &str, input: Value) -> VerbResult {
        let user = matches!(scope.actor, Actor::User { .. });
        match name {
            "read" => {
                let result = read::run(self, scope, &input).await;
                if let Some(tool) = input["address"]
                    .as_str()
                    .and_then(|a| a.strip_prefix("~/tools/"))
                    .filter(|t| !t.is_empty())
                {
                    self.remember(&scope.session_id, [tool.trim_end_matches('/').to_owned()]);
                }
                result
            }
            "write" => write::run(self, scope, &input).await,
            "call" => {
                let Some(tool) = input["tool"].as_str() else {
                    return failure("invalid_argument", "`tool` must be a string");
                };
                let tool = tool.to_owned();
                let args = input.get("input").cloned().unwrap_or(Value::Null);
                let result = call::run(self, scope, &tool, args, false).await;
                self.remember(&scope.session_id, [tool]);
                result
            }
            "status" | "continue_session" if user => failure(
                "invalid_argument",
                format!("{name} is the agent's; a user may run read, write and call"),
            ),
            "status" => session::status(self, scope, &input).await,
            "continue_session" => session::continue_session(self, scope, &input).await,
            "delegate" | "plan" if user => failure(
                "invalid_argument",
                format!("{name} is the agent's; a user may run read, write and call"),
            ),
            "delegate" => delegate::delegate(self, scope, &input).await,
            "plan" => delegate::plan(self, scope, &input).await,
            "return_result" if user => failure(
                "invalid_argument",
                "return_result is the agent's; a user may run read, write and call",
            ),
            "return_result" => delegate::return_result(self, scope, &input).await,
            // A promoted tool by its own name; one the thread has not
            // expanded shows its contract first, as through `call`.
            other => {
                if other.starts_with("mcp__") {
                    if let Some(address) = mcp::address_of(self, scope, other).await {
                        let direct = self.is_expanded(&scope.session_id, &address);
                        let result = mcp::run(self, scope, &address, input, direct).await;
                        self.remember(&scope.session_id, [address]);
                        return result;
                    }
                }
                let direct = self.is_expanded(&scope.session_id, other);
                call::run(self, scope, other, input, direct).await
            }
        }
    }
}
