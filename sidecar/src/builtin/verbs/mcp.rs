//! MCP tools as callables: `call{tool: "mcp:<server>/<tool>"}`, their
//! contracts under `~/tools/`, their lines in the listing and the
//! `<space>` index, and a promoted one's provider tool
//! (`mcp__<server>__<tool>`). The grant is the server's name in the
//! definition's `mcpServers`, checked at every call. A call waits at most
//! `mcp.callTimeoutMs` and gives up when its session is cancelled; a tool
//! error is a result the model reads (`mcp_tool_error: …`).

use agentos_protocol::agent_ext::{ToolSpec, VerbResult};
use agentos_protocol::mcp::{CallOutcome, ToolDescriptor};
use serde_json::{json, Value};

use super::{failure, success, VerbScope, Verbs};
use crate::mcp::{self, McpError};

/// The first line of a tool's description, within the index's width.
fn summary(tool: &ToolDescriptor) -> String {
    let first = tool
        .description
        .as_deref()
        .and_then(|d| d.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("(no description)");
    let mut line: String = first.chars().take(140).collect();
    if line.len() < first.len() {
        line.push('…');
    }
    line
}

/// The usable MCP tools of the scope's granted servers, from the cache:
/// `(address, summary)`, and a line per server that has none with why.
pub(super) async fn listing(
    verbs: &Verbs,
    scope: &VerbScope,
) -> (Vec<(String, String)>, Vec<String>) {
    let Some(mcp) = &verbs.mcp else {
        return (Vec::new(), Vec::new());
    };
    let mut tools = Vec::new();
    let mut notes = Vec::new();
    for state in mcp
        .servers_for(&scope.account_id, &scope.mcp_server_names())
        .await
    {
        let name = &state.view.name;
        if let Some(error) = &state.view.error {
            notes.push(format!("- mcp:{name}/ — unavailable: {error}"));
        } else if state.view.discovered_at.is_none() {
            notes.push(format!("- mcp:{name}/ — tools not discovered yet"));
        }
        for tool in state
            .tools
            .iter()
            .filter(|t| scope.allows_mcp(name, &t.name))
        {
            tools.push((mcp::address(name, &tool.name), summary(tool)));
        }
    }
    (tools, notes)
}

/// `read ~/tools/mcp:<server>/<tool>`: the contract, from the cache (one
/// discovery per run when it does not know the tool).
pub(super) async fn contract(verbs: &Verbs, scope: &VerbScope, address: &str) -> VerbResult {
    match resolve(verbs, scope, address).await {
        Ok((server, tool)) => success(Value::String(mcp::contract_markdown(server, &tool))),
        Err(refused) => refused,
    }
}

/// The server and tool an address names, if the scope may use it.
async fn resolve<'a>(
    verbs: &Verbs,
    scope: &VerbScope,
    address: &'a str,
) -> Result<(&'a str, ToolDescriptor), VerbResult> {
    let Some(service) = &verbs.mcp else {
        return Err(failure(
            "runtime_unavailable",
            "MCP servers are not available in this sidecar",
        ));
    };
    let Some((server, tool)) = mcp::parse_address(address) else {
        return Err(failure(
            "invalid_argument",
            format!("{address:?} is not an MCP callable; they are named mcp:<server>/<tool>"),
        ));
    };
    if !scope.allows_mcp(server, tool) {
        return Err(failure(
            "not_granted",
            format!(
                "mcp:{server}/{tool} is not granted: the agent's mcpServers (or a delegated \
                 child's tools) do not name it; its owner can add the server to mcpServers"
            ),
        ));
    }
    match service
        .tool(&scope.account_id, server, tool, scope.run_id.as_deref())
        .await
    {
        Ok(Some(found)) => Ok((server, found)),
        Ok(None) => {
            let known = service
                .cached_tools(&scope.account_id, server)
                .await
                .unwrap_or_default();
            let names: Vec<String> = known
                .iter()
                .map(|t| mcp::address(server, &t.name))
                .collect();
            Err(failure(
                "not_found",
                format!(
                    "the MCP server {server:?} has no tool {tool:?}; its tools: {}",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                ),
            ))
        }
        Err(e) => Err(failure(e.code(), e)),
    }
}

/// What the model reads of a successful call.
fn output(outcome: CallOutcome) -> Value {
    match outcome.structured {
        Some(structured)
            if structured.to_string().len() + outcome.text.len()
                <= agentos_protocol::mcp::MAX_RESULT_BYTES =>
        {
            json!({"text": outcome.text, "structuredContent": structured})
        }
        _ => Value::String(outcome.text),
    }
}

/// Runs an MCP callable (`direct`: promoted, called by its own name).
pub(super) async fn run(
    verbs: &Verbs,
    scope: &VerbScope,
    address: &str,
    input: Value,
    direct: bool,
) -> VerbResult {
    // Watched from the start: a cancel while the tool is looked up (which
    // may discover the server) is not lost.
    let mut interrupt = verbs
        .sessions
        .get()
        .map(|(sessions, _)| sessions.interrupt(&scope.session_id));
    let found = tokio::select! {
        found = resolve(verbs, scope, address) => found,
        () = fired(&mut interrupt) => return failure("canceled", McpError::Canceled),
    };
    let (server, tool) = match found {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    if !direct && !verbs.is_expanded(&scope.session_id, address) {
        return success(Value::String(format!(
            "{}\n\nThis is the tool's contract (first use in this thread). Call it again with \
             input that fits.",
            mcp::contract_markdown(server, &tool)
        )));
    }
    let Some(service) = &verbs.mcp else {
        return failure("runtime_unavailable", "MCP servers are not available");
    };
    let cancel = async move { fired(&mut interrupt).await };
    let input = if input.is_null() { json!({}) } else { input };
    match service
        .call(&scope.account_id, server, &tool.name, input, cancel)
        .await
    {
        Ok(outcome) if outcome.is_error => failure("mcp_tool_error", outcome.text),
        Ok(outcome) => success(output(outcome)),
        Err(McpError::Rpc(error)) => failure("mcp_tool_error", error.message),
        Err(e) => failure(e.code(), e),
    }
}

/// Resolves when the session is cancelled (never without a watch).
async fn fired(interrupt: &mut Option<crate::sessions::interrupts::Interrupt>) {
    match interrupt {
        Some(interrupt) => interrupt.fired().await,
        None => std::future::pending().await,
    }
}

/// A promoted MCP callable as a provider tool, when granted and known.
pub(super) async fn direct_spec(
    verbs: &Verbs,
    scope: &VerbScope,
    address: &str,
) -> Option<ToolSpec> {
    let service = verbs.mcp.as_ref()?;
    let (server, tool) = mcp::parse_address(address)?;
    if !scope.allows_mcp(server, tool) {
        return None;
    }
    let found = service
        .cached_tools(&scope.account_id, server)
        .await
        .ok()?
        .into_iter()
        .find(|t| t.name == tool)?;
    Some(ToolSpec {
        name: mcp::provider_name(server, tool),
        description: found
            .description
            .clone()
            .unwrap_or_else(|| format!("Tool \"{tool}\" from MCP server \"{server}\".")),
        parameters: found
            .input_schema
            .unwrap_or_else(|| json!({"type": "object", "additionalProperties": true})),
    })
}

/// The address a promoted tool's provider name stands for.
pub(super) async fn address_of(
    verbs: &Verbs,
    scope: &VerbScope,
    provider_name: &str,
) -> Option<String> {
    let service = verbs.mcp.as_ref()?;
    for server in scope.mcp_server_names() {
        // A server that is gone hides only its own tools.
        let Ok(tools) = service.cached_tools(&scope.account_id, &server).await else {
            continue;
        };
        if let Some(tool) = tools.iter().find(|t| {
            mcp::provider_name(&server, &t.name) == provider_name
                && scope.allows_mcp(&server, &t.name)
        }) {
            return Some(mcp::address(&server, &tool.name));
        }
    }
    None
}
