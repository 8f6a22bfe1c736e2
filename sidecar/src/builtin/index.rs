//! The `<space>` index appended to every builtin system prompt: a tools
//! line with one `- name — summary` line per callable the agent may use
//! (`(authored)` for its own), and a memory line with its top-level
//! entries. Within [`INDEX_BYTES`]; over it, the index collapses to counts.

use agentos_protocol::seed::vocab::ToolKind;

use super::verbs::{VerbScope, Verbs};

/// The index's budget.
pub const INDEX_BYTES: usize = 2048;

pub async fn build(verbs: &Verbs, scope: &VerbScope) -> String {
    let tools = verbs
        .tools
        .list(&scope.account_id, &scope.agent_id, scope.grants.as_deref())
        .await
        .unwrap_or_default();
    let usable: Vec<_> = tools.iter().filter(|t| t.granted && t.enabled).collect();
    // The top level only: the index never walks the whole memory.
    let memory = verbs
        .memory
        .list_dir(&scope.agent_id, "")
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
        usable.len()
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
        usable.len(),
        memory.len()
    )
}
