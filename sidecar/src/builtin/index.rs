//! The `<space>` index appended to every builtin system prompt: a tools
//! line with one `- name — summary` line per callable the agent may use
//! (`(authored)` for its own, `(mcp)` for an MCP server's), and a memory line with its top-level
//! entries. Within [`INDEX_BYTES`]; over it, the index collapses to counts.
//! It reads the agent's Space directly; the verbs (`Verbs::space_index`)
//! call it with their scope.

use agentos_protocol::seed::vocab::ToolKind;

use crate::space::{AgentMemory, ToolDocuments};

/// The index's budget.
pub const INDEX_BYTES: usize = 2048;

/// The index of agent `agent_id` of account `account_id`, which may use
/// what its definition's `grants` offer.
pub async fn build(
    tool_documents: &ToolDocuments,
    agent_memory: &AgentMemory,
    account_id: &str,
    agent_id: &str,
    grants: Option<&[String]>,
    mcp_tools: &[(String, String)],
) -> String {
    let tools = tool_documents
        .list(account_id, agent_id, grants)
        .await
        .unwrap_or_default();
    let usable: Vec<_> = tools.iter().filter(|t| t.granted && t.enabled).collect();
    // The top level only: the index never walks the whole memory.
    let memory = agent_memory
        .list_dir(agent_id, "")
        .await
        .unwrap_or_default();
    let top: Vec<String> = memory
        .iter()
        .map(|e| {
            if e.is_dir {
                format!("{}/", e.path)
            } else {
                e.path.clone()
            }
        })
        .collect();
    let mut full = String::from("<space>\n");
    full.push_str(&format!(
        "tools ({}; call{{tool, input}}, read ~/tools/<name> for a contract):\n",
        usable.len() + mcp_tools.len()
    ));
    for tool in &usable {
        let authored = if tool.document.kind == ToolKind::Lambda {
            " (authored)"
        } else {
            ""
        };
        full.push_str(&format!(
            "- {} — {}{authored}\n",
            tool.document.name, tool.document.summary
        ));
    }
    for (name, summary) in mcp_tools {
        full.push_str(&format!("- {name} — {summary} (mcp)\n"));
    }
    full.push_str(&format!(
        "memory (~/memory/): {}\n",
        if top.is_empty() {
            "empty".to_owned()
        } else {
            top.join(", ")
        }
    ));
    full.push_str("</space>");
    if full.len() <= INDEX_BYTES {
        return full;
    }
    format!(
        "<space>\ntools: {} callable (read ~/tools/ for the list)\nmemory: {} top-level entries (read ~/memory/ for the list)\n</space>",
        usable.len() + mcp_tools.len(),
        memory.len()
    )
}
