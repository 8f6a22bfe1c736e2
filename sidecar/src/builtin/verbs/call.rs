//! `call{tool, input}` and promoted callables: resolution (a granted
//! builtin, else an enabled authored tool), touch-expand (a tool this thread
//! has not read answers with its contract, and invalid input with the
//! contract and the validation errors), and the builtins themselves:
//! `search` over the agent's memory and the account's thread titles, and
//! `web_fetch`. Authored tools run in the script engine, as script runs
//! of the caller's run (`delegate.rs`).

use agentos_protocol::agent_ext::{ToolSpec, VerbResult};
use agentos_protocol::seed::vocab::ToolKind;
use agentos_protocol::seed::{ipld_to_json, Ipld, JsonForm};
use serde_json::{json, Value};

use super::{failure, success, VerbScope, Verbs};
use crate::space::error::SpaceError;
use crate::space::ToolRecord;
use crate::space::{registry, schema};

/// Memory a `search` reads, at most: files and bytes.
const SEARCH_FILES: usize = 500;
const SEARCH_BYTES: u64 = 8 * 1024 * 1024;
const SEARCH_FILE_BYTES: u64 = 256 * 1024;

/// A stored tool schema as JSON. Schemas are checked to be plain JSON when
/// a tool is saved, and the registry's are; one that somehow is not reads
/// as null.
fn schema_json(schema: &Ipld) -> Value {
    ipld_to_json(schema, JsonForm::Plain).unwrap_or(Value::Null)
}

/// Whether the scope may run this record.
fn allowed(record: &ToolRecord) -> Result<(), VerbResult> {
    if !record.granted {
        return Err(failure(
            "not_granted",
            format!(
                "{} is not in this agent's grants; its owner can grant it",
                record.document.name
            ),
        ));
    }
    if !record.enabled {
        return Err(failure(
            "not_granted",
            format!("{} is disabled", record.document.name),
        ));
    }
    Ok(())
}

/// A promoted callable as a provider tool, when it is granted and can run.
pub(super) async fn direct_spec(
    verbs: &Verbs,
    scope: &VerbScope,
    name: &str,
) -> Result<Option<ToolSpec>, SpaceError> {
    if registry::VERBS.contains(&name) {
        return Ok(None);
    }
    let Some(record) = verbs
        .tools
        .get(&scope.account_id, &scope.agent_id, name)
        .await?
    else {
        return Ok(None);
    };
    if record.document.kind != ToolKind::Builtin || allowed(&record).is_err() {
        return Ok(None);
    }
    Ok(Some(ToolSpec {
        name: record.document.name.clone(),
        description: record.document.description.clone(),
        parameters: schema_json(&record.document.input),
    }))
}

/// Runs a callable. `direct` is a promoted tool called by its own name
/// (already expanded by definition).
pub(super) async fn run(
    verbs: &Verbs,
    scope: &VerbScope,
    tool: &str,
    input: Value,
    direct: bool,
) -> VerbResult {
    if tool.starts_with(crate::mcp::ADDRESS_PREFIX) {
        return super::mcp::run(verbs, scope, tool, input, direct).await;
    }
    let record = match verbs
        .tools
        .get(&scope.account_id, &scope.agent_id, tool)
        .await
    {
        Ok(record) => record,
        Err(e) => return failure(e.code(), e),
    };
    let Some(record) = record else {
        let listing = super::read::run(verbs, scope, &json!({"address": "~/tools/"})).await;
        let listing = agentos_protocol::agent_ext::output_text(&listing.output);
        return failure(
            "not_found",
            format!("no callable tool named {tool:?}.\n{listing}"),
        );
    };
    if let Err(refused) = allowed(&record) {
        return refused;
    }
    if !direct && !verbs.is_expanded(&scope.session_id, tool) {
        return success(Value::String(format!(
            "{}\n\nThis is the tool's contract (first use in this thread). Call it again with \
             input that fits.",
            record.contract_markdown()
        )));
    }
    let input = if input.is_null() { json!({}) } else { input };
    let errors = schema::validate(&schema_json(&record.document.input), &input);
    if !errors.is_empty() {
        return failure(
            "invalid_input",
            format!(
                "{}\n\n{}\n\nThe input does not fit the contract above.",
                errors.join("\n"),
                record.contract_markdown()
            ),
        );
    }
    match (record.document.kind, record.document.name.as_str()) {
        (ToolKind::Builtin, "search") => hypermedia_search(verbs, scope, &input).await,
        (ToolKind::Builtin, "memory_search") => search(verbs, scope, &input).await,
        (ToolKind::Builtin, "web_fetch") => {
            let url = input["url"].as_str().unwrap_or_default();
            if !url.starts_with("https://") {
                return failure("invalid_argument", "only https:// URLs can be fetched");
            }
            match verbs.fetcher.fetch(url).await {
                Ok(page) => success(json!({
                    "url": page.url,
                    "contentType": page.content_type,
                    "text": page.text,
                })),
                Err(e) => failure(e.code(), e),
            }
        }
        (ToolKind::Builtin | ToolKind::Mcp, other) => failure(
            "runtime_unavailable",
            format!("the builtin {other:?} is not provided by this sidecar"),
        ),
        (ToolKind::Lambda, name) => {
            super::delegate::run_lambda(
                verbs,
                scope,
                name,
                record.document.source.as_deref(),
                record.document.runtime.as_deref(),
                input,
            )
            .await
        }
    }
}

/// Case-insensitive search of memory file names and text and of the
/// account's thread titles, bounded in files and bytes read.
/// `search`: the hypermedia server's `Search`, as the reference runs it.
async fn hypermedia_search(verbs: &Verbs, scope: &VerbScope, input: &Value) -> VerbResult {
    let Some(hypermedia) = verbs.hypermedia.as_ref() else {
        return failure("address_unavailable", "no hypermedia server is configured");
    };
    match hypermedia.search(input, &scope.account_id).await {
        Ok(result) => success(result),
        Err(e) => failure(e.code(), e),
    }
}

/// `memory_search`: text in the agent's memory and its threads' titles.
async fn search(verbs: &Verbs, scope: &VerbScope, input: &Value) -> VerbResult {
    let query = input["query"].as_str().unwrap_or_default().to_lowercase();
    if query.is_empty() {
        return failure("invalid_input", "/query: must not be empty");
    }
    let limit = input["limit"].as_u64().unwrap_or(10).clamp(1, 50) as usize;
    let mut hits: Vec<Value> = Vec::new();
    let entries = match verbs.memory.list(&scope.agent_id).await {
        Ok(entries) => entries,
        Err(e) => return failure(e.code(), e),
    };
    let mut read_bytes = 0u64;
    for entry in entries.iter().filter(|e| !e.is_dir).take(SEARCH_FILES) {
        if hits.len() >= limit {
            break;
        }
        if entry.path.to_lowercase().contains(&query) {
            hits.push(json!({"kind": "memory", "address": format!("~/memory/{}", entry.path)}));
            continue;
        }
        if entry.size > SEARCH_FILE_BYTES || read_bytes + entry.size > SEARCH_BYTES {
            continue;
        }
        read_bytes += entry.size;
        let Ok(file) = verbs
            .memory
            .read(&scope.agent_id, &entry.path, SEARCH_FILE_BYTES)
            .await
        else {
            continue;
        };
        let Ok(text) = String::from_utf8(file.data) else {
            continue;
        };
        if let Some((number, line)) = text
            .lines()
            .enumerate()
            .find(|(_, line)| line.to_lowercase().contains(&query))
        {
            let excerpt: String = line.chars().take(200).collect();
            hits.push(json!({
                "kind": "memory",
                "address": format!("~/memory/{}", entry.path),
                "line": number + 1,
                "excerpt": excerpt,
            }));
        }
    }
    if hits.len() < limit {
        if let Ok(page) = verbs
            .control
            .list_sessions_page(&scope.threads(), None, 200)
            .await
        {
            for row in page.sessions {
                if hits.len() >= limit {
                    break;
                }
                if !scope.sees_thread(&row.account_id, &row.agent_id) {
                    continue;
                }
                let Ok(Some(session)) = verbs.store.get_session(&row.session_id).await else {
                    continue;
                };
                let title = session.title.unwrap_or_default();
                if title.to_lowercase().contains(&query) {
                    hits.push(json!({
                        "kind": "thread",
                        "address": format!("thread:{}", row.session_id),
                        "title": title,
                    }));
                }
            }
        }
    }
    success(json!({ "query": query, "hits": hits }))
}
