//! An agent's `~/tools`: tool documents in the shared database (SQL in
//! `control/store/tool_documents.rs`), one per agent and name.
//!
//! Builtins are materialised lazily: reading an agent's tools first makes
//! sure each builtin's row holds the registry's document (inserted when
//! missing, rewritten when its CID differs, in one transaction; a row that
//! already matches is not written), so a new sidecar's contracts reach
//! every agent without a migration. Lambdas are what an agent or its owner
//! authored; saving one checks its name, sizes and schemas before anything
//! is written, and the per-agent bound (`limits.control.maxToolsPerAgent`)
//! is counted inside the writing statement. A rename is one statement.
//!
//! `account` is always the agent's owner: the rows are the owner's, and a
//! collaborator acting on the agent reaches them through its access.

use std::sync::Arc;

use agentos_protocol::seed::tool::{ToolDocument, MAX_TOOL_DOCUMENT_BYTES};
use agentos_protocol::seed::vocab::ToolKind;
use agentos_protocol::seed::{
    cbor, cid_of, ipld_to_json, json_to_ipld, json_to_ipld_clipped, AgentDefinition,
    AgentToolInput, Ipld, JsonForm,
};
use agentos_schema::SharedDatabase;
use agentos_storage::watch::{Memo, TableVersions};
use serde_json::Value;

use super::registry;
use super::schema::shape_check;
use super::SpaceError;
use crate::control::store::{
    ControlStore, Guarded, StoredTool, StoredToolKind, ToolRow, TOOL_DOCUMENTS,
};

/// The setting that bounds an agent's authored tools.
pub const MAX_TOOLS_SETTING: &str = "limits.control.maxToolsPerAgent";
/// Largest description, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;
/// Largest lambda source, in bytes.
pub const MAX_SOURCE_BYTES: usize = 256 * 1024;
/// Largest summary given by its author, in bytes (one line).
pub const MAX_SUMMARY_BYTES: usize = 280;
/// A summary made from a description keeps this many characters.
const DERIVED_SUMMARY_CHARS: usize = 140;
/// The languages a lambda may be written in; the first is the default.
pub const RUNTIMES: [&str; 2] = ["typescript", "python"];

const TABLE: &str = "agentos_core_tool_documents";

/// An authored tool before it becomes a document.
#[derive(Clone, Debug, PartialEq)]
pub struct LambdaInput {
    pub name: String,
    pub summary: Option<String>,
    pub description: String,
    /// JSON Schema of the input.
    pub input: Ipld,
    pub output: Option<Ipld>,
    pub source: String,
    pub runtime: Option<String>,
    /// `None`: a new tool is enabled, an edited one keeps its flag.
    pub enabled: Option<bool>,
}

impl From<AgentToolInput> for LambdaInput {
    fn from(tool: AgentToolInput) -> Self {
        LambdaInput {
            name: tool.name,
            summary: tool.summary,
            description: tool.description,
            input: tool.input,
            output: tool.output,
            source: tool.source,
            runtime: tool.runtime,
            enabled: tool.enabled,
        }
    }
}

impl LambdaInput {
    /// The JSON a `write ~/tools/<name>` carries: `{description, input?,
    /// output?, source, runtime?, summary?, enabled?}` (an absent `input`
    /// is `{"type": "object"}`). Unknown keys and wrong types are refused,
    /// naming them.
    pub fn from_json(name: &str, content: &Value) -> Result<LambdaInput, SpaceError> {
        const KEYS: [&str; 7] = [
            "description",
            "input",
            "output",
            "source",
            "runtime",
            "summary",
            "enabled",
        ];
        let Value::Object(map) = content else {
            return Err(SpaceError::invalid(
                "a tool is a JSON object {description, input?, output?, source, runtime?, \
                 summary?, enabled?}",
            ));
        };
        if let Some(key) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(SpaceError::invalid(format!(
                "unknown key {key:?} (a tool has {})",
                KEYS.join(", ")
            )));
        }
        let text = |key: &str| -> Result<Option<String>, SpaceError> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(SpaceError::invalid(format!("{key} must be a string"))),
            }
        };
        let schema = |key: &str| -> Result<Option<Ipld>, SpaceError> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(value @ Value::Object(_)) => json_to_ipld(value, JsonForm::Plain)
                    .map(Some)
                    .map_err(|e| SpaceError::invalid(format!("the {key} schema: {e}"))),
                Some(_) => Err(SpaceError::invalid(format!(
                    "{key} must be a JSON Schema object"
                ))),
            }
        };
        let enabled = match map.get("enabled") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err(SpaceError::invalid("enabled must be a boolean")),
        };
        Ok(LambdaInput {
            name: name.to_owned(),
            summary: text("summary")?,
            description: text("description")?.unwrap_or_default(),
            input: schema("input")?
                .unwrap_or_else(|| json_to_ipld_clipped(&serde_json::json!({"type": "object"}))),
            output: schema("output")?,
            source: text("source")?.unwrap_or_default(),
            runtime: text("runtime")?,
            enabled,
        })
    }
}

/// One of an agent's tools, as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolRecord {
    pub document: ToolDocument,
    pub cid: String,
    pub enabled: bool,
    /// A builtin: whether the agent's grants offer it; a lambda: true.
    pub granted: bool,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
}

impl ToolRecord {
    /// The contract the model reads: the name, what the tool is, its
    /// description, and its schemas as JSON.
    pub fn contract_markdown(&self) -> String {
        let document = &self.document;
        let mut kind = format!("{} tool · version `{}`", document.kind, self.cid);
        if let Some(runtime) = &document.runtime {
            kind.push_str(&format!(" · {runtime}"));
        }
        let mut out = format!(
            "# {}\n\n> {kind}\n\n{}\n\n## Input schema\n\n```json\n{}\n```\n",
            document.name,
            document.description,
            pretty(&document.input)
        );
        if let Some(output) = &document.output {
            out.push_str(&format!(
                "\n## Output schema\n\n```json\n{}\n```\n",
                pretty(output)
            ));
        }
        out
    }
}

fn pretty(schema: &Ipld) -> String {
    ipld_to_json(schema, JsonForm::Plain)
        .ok()
        .and_then(|json| serde_json::to_string_pretty(&json).ok())
        .unwrap_or_else(|| "{}".to_owned())
}

/// A builtin's document with its bytes and CID, computed once.
struct Builtin {
    document: ToolDocument,
    bytes: Vec<u8>,
    cid: String,
}

/// An agent's tool documents. Cheap to clone.
#[derive(Clone)]
pub struct ToolDocuments {
    store: ControlStore,
    max_tools_per_agent: u64,
    builtins: Arc<Vec<Builtin>>,
    /// Each agent's documents, decoded and checked, kept while the table is
    /// unwritten (`ToolDocuments::keeping`).
    kept: Option<Arc<KeptTools>>,
}

/// Each agent's checked documents, by account and agent.
type KeptTools = Memo<(String, String), Arc<Checked>>;

/// An agent's tool documents as read and checked, before its grants.
struct Checked {
    records: Vec<ToolRecord>,
    /// Their stored bytes, for the bound on what is kept.
    stored_bytes: usize,
}

/// What the documents of all agents kept in memory may cost: decoded
/// documents take about three times their stored bytes.
const KEPT_TOOL_BYTES: usize = 8 << 20;

impl std::fmt::Debug for ToolDocuments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolDocuments")
            .field("max_tools_per_agent", &self.max_tools_per_agent)
            .finish_non_exhaustive()
    }
}

impl ToolDocuments {
    /// The service with the registry's builtins.
    pub fn new(db: SharedDatabase, max_tools_per_agent: u64) -> Result<ToolDocuments, SpaceError> {
        Self::with_builtins(db, max_tools_per_agent, registry::builtins())
    }

    /// The service with other builtin documents (a newer or older registry).
    pub(crate) fn with_builtins(
        db: SharedDatabase,
        max_tools_per_agent: u64,
        documents: Vec<ToolDocument>,
    ) -> Result<ToolDocuments, SpaceError> {
        let builtins = documents
            .into_iter()
            .map(|document| {
                let bytes = document
                    .encode()
                    .map_err(|e| SpaceError::invalid(format!("builtin {}: {e}", document.name)))?;
                let cid = cid_of(&bytes);
                Ok(Builtin {
                    document,
                    bytes,
                    cid,
                })
            })
            .collect::<Result<Vec<_>, SpaceError>>()?;
        Ok(ToolDocuments {
            store: ControlStore::new(db),
            max_tools_per_agent,
            builtins: Arc::new(builtins),
            kept: None,
        })
    }

    fn is_builtin(&self, name: &str) -> bool {
        registry::is_builtin(name) || self.builtins.iter().any(|b| b.document.name == name)
    }

    /// The service keeping each agent's documents in memory while the
    /// VM's handle counts no write to their table (`versions`).
    pub fn keeping(mut self, versions: Arc<TableVersions>) -> ToolDocuments {
        self.kept = Some(Arc::new(Memo::new(
            versions,
            &[TOOL_DOCUMENTS],
            KEPT_TOOL_BYTES,
            |(account, agent), checked| {
                account.len() + agent.len() + checked.stored_bytes.saturating_mul(3)
            },
        )));
        self
    }

    /// Every tool of the agent, builtins first, then lambdas, each by name;
    /// `grants` is the agent definition's `tools`.
    pub async fn list(
        &self,
        account: &str,
        agent_id: &str,
        grants: Option<&[String]>,
    ) -> Result<Vec<ToolRecord>, SpaceError> {
        let read = || async {
            let rows = self.store.list_tool_documents(account, agent_id).await?;
            let rows = self.materialise(account, agent_id, rows).await?;
            Ok::<_, SpaceError>(Arc::new(Checked {
                stored_bytes: rows.iter().map(|row| row.document.len()).sum(),
                records: rows
                    .iter()
                    .map(|row| record(row, None))
                    .collect::<Result<_, _>>()?,
            }))
        };
        let checked = match &self.kept {
            Some(kept) => {
                let key = (account.to_owned(), agent_id.to_owned());
                kept.get_or_read(&key, read).await?
            }
            None => read().await?,
        };
        Ok(checked
            .records
            .iter()
            .map(|kept| ToolRecord {
                granted: granted(&kept.document, grants),
                ..kept.clone()
            })
            .collect())
    }

    /// Brings the builtin rows in `rows` up to the registry, writing only
    /// when one is missing, differs, or names a builtin no longer shipped.
    async fn materialise(
        &self,
        account: &str,
        agent_id: &str,
        rows: Vec<StoredTool>,
    ) -> Result<Vec<StoredTool>, SpaceError> {
        let now_ms = agentos_base::clock::unix_ms();
        let stale: Vec<ToolRow<'_>> = self
            .builtins
            .iter()
            .filter(|b| {
                !rows.iter().any(|row| {
                    row.name == b.document.name
                        && row.cid == b.cid
                        && row.kind == StoredToolKind::Builtin
                })
            })
            .map(|b| ToolRow {
                account_id: account,
                agent_id,
                name: &b.document.name,
                cid: &b.cid,
                document: &b.bytes,
                enabled: None,
                now_ms,
            })
            .collect();
        let retired: Vec<String> = rows
            .iter()
            .filter(|row| {
                row.kind == StoredToolKind::Builtin
                    && !self.builtins.iter().any(|b| b.document.name == row.name)
            })
            .map(|row| row.name.clone())
            .collect();
        if stale.is_empty() && retired.is_empty() {
            return Ok(rows);
        }
        Ok(self
            .store
            .refresh_builtin_tools(account, agent_id, &stale, &retired)
            .await?)
    }

    /// One tool by name (a builtin is materialised first if need be). A
    /// builtin's `granted` follows the agent's current definition.
    pub async fn get(
        &self,
        account: &str,
        agent_id: &str,
        name: &str,
    ) -> Result<Option<ToolRecord>, SpaceError> {
        let mut row = self
            .store
            .get_tool_document(account, agent_id, name)
            .await?;
        let current = |row: &StoredTool| {
            self.builtins
                .iter()
                .any(|b| b.document.name == row.name && b.cid == row.cid)
        };
        if self.is_builtin(name) && !row.as_ref().is_some_and(current) {
            let rows = self.store.list_tool_documents(account, agent_id).await?;
            let rows = self.materialise(account, agent_id, rows).await?;
            row = rows.into_iter().find(|r| r.name == name);
        }
        let Some(row) = row else { return Ok(None) };
        if row.kind == StoredToolKind::Lambda {
            return record(&row, None).map(Some);
        }
        let Some(agent) = self
            .store
            .get_agent(agent_id)
            .await?
            .filter(|agent| agent.account_id == account)
        else {
            return Ok(None);
        };
        let definition: AgentDefinition =
            cbor::from_slice(&agent.definition, usize::MAX).map_err(|e| {
                SpaceError::CorruptRow {
                    table: "agentos_core_agents".into(),
                    message: format!("the definition does not decode: {e}"),
                }
            })?;
        record(&row, definition.tools.as_deref()).map(Some)
    }

    /// Creates or replaces an authored tool; with `previous_name` (and a
    /// different name) renames that tool in the same write.
    pub async fn save_lambda(
        &self,
        account: &str,
        agent_id: &str,
        input: LambdaInput,
        previous_name: Option<&str>,
    ) -> Result<ToolRecord, SpaceError> {
        let enabled = input.enabled;
        let document = self.lambda_document(input)?;
        let bytes = document
            .encode()
            .map_err(|e| SpaceError::invalid(e.to_string()))?;
        if bytes.len() > MAX_TOOL_DOCUMENT_BYTES {
            return Err(SpaceError::invalid(format!(
                "the tool document is {} bytes; at most {MAX_TOOL_DOCUMENT_BYTES}",
                bytes.len()
            )));
        }
        let cid = cid_of(&bytes);
        let name = document.name.as_str();
        let row = ToolRow {
            account_id: account,
            agent_id,
            name,
            cid: &cid,
            document: &bytes,
            enabled,
            now_ms: agentos_base::clock::unix_ms(),
        };
        let stored = match previous_name.filter(|previous| *previous != name) {
            Some(previous) => match self.store.rename_lambda_tool(previous, &row).await? {
                Some(stored) => stored,
                None => return Err(self.rename_refusal(account, agent_id, previous, name).await),
            },
            None => match self
                .store
                .save_lambda_tool(&row, self.max_tools_per_agent)
                .await?
            {
                Guarded::Done { value, count } => {
                    if value.created_at_ms == row.now_ms {
                        warn_near_limit(agent_id, count, self.max_tools_per_agent);
                    }
                    value
                }
                Guarded::Refused => return Err(self.save_refusal(account, agent_id, name).await),
            },
        };
        record(&stored, None)
    }

    async fn rename_refusal(
        &self,
        account: &str,
        agent_id: &str,
        previous: &str,
        name: &str,
    ) -> SpaceError {
        match self
            .store
            .get_tool_document(account, agent_id, previous)
            .await
        {
            Ok(Some(row)) if row.kind == StoredToolKind::Lambda => {
                SpaceError::Conflict(format!("a tool named {name:?} already exists"))
            }
            Ok(_) => SpaceError::NotFound(format!("authored tool {previous:?}")),
            Err(e) => e.into(),
        }
    }

    async fn save_refusal(&self, account: &str, agent_id: &str, name: &str) -> SpaceError {
        match self.store.get_tool_document(account, agent_id, name).await {
            Ok(Some(row)) if row.kind == StoredToolKind::Builtin => {
                SpaceError::Conflict(format!("{name:?} is a builtin tool"))
            }
            Ok(_) => SpaceError::Limit {
                setting: MAX_TOOLS_SETTING,
                limit: self.max_tools_per_agent,
            },
            Err(e) => e.into(),
        }
    }

    /// Checks an authored tool and makes its document.
    fn lambda_document(&self, input: LambdaInput) -> Result<ToolDocument, SpaceError> {
        check_name(&input.name)?;
        if self.is_builtin(&input.name) {
            return Err(SpaceError::invalid(format!(
                "{:?} is a builtin tool's name; choose another",
                input.name
            )));
        }
        if registry::is_verb(&input.name) {
            return Err(SpaceError::invalid(format!(
                "{:?} is a verb's name; choose another",
                input.name
            )));
        }
        let description = input.description.trim();
        if description.is_empty() {
            return Err(SpaceError::invalid("a tool needs a description"));
        }
        if description.len() > MAX_DESCRIPTION_BYTES {
            return Err(SpaceError::invalid(format!(
                "the description is {} bytes; at most {MAX_DESCRIPTION_BYTES}",
                description.len()
            )));
        }
        if input.source.trim().is_empty() {
            return Err(SpaceError::invalid("a tool needs its source code"));
        }
        if input.source.len() > MAX_SOURCE_BYTES {
            return Err(SpaceError::invalid(format!(
                "the source is {} bytes; at most {MAX_SOURCE_BYTES}",
                input.source.len()
            )));
        }
        let runtime = match input.runtime.as_deref() {
            None => RUNTIMES[0],
            Some(runtime) => RUNTIMES
                .iter()
                .copied()
                .find(|r| *r == runtime)
                .ok_or_else(|| {
                    SpaceError::invalid(format!(
                        "runtime {runtime:?} is not one of {}",
                        RUNTIMES.join(", ")
                    ))
                })?,
        };
        let summary = match input.summary.as_deref().map(str::trim) {
            Some(summary) if !summary.is_empty() => {
                if summary.contains(['\n', '\r']) || summary.len() > MAX_SUMMARY_BYTES {
                    return Err(SpaceError::invalid(format!(
                        "the summary must be one line of at most {MAX_SUMMARY_BYTES} bytes"
                    )));
                }
                summary.to_owned()
            }
            _ => summary_of(description),
        };
        check_schema("input", &input.input)?;
        if let Some(output) = &input.output {
            check_schema("output", output)?;
        }
        Ok(ToolDocument {
            name: input.name,
            kind: ToolKind::Lambda,
            summary,
            description: description.to_owned(),
            input: input.input,
            output: input.output,
            source: Some(input.source),
            runtime: Some(runtime.to_owned()),
            binding: None,
        })
    }

    /// Deletes an authored tool; false when there is none. A builtin cannot
    /// be deleted: its grant is the agent definition's to change.
    pub async fn delete_lambda(
        &self,
        account: &str,
        agent_id: &str,
        name: &str,
    ) -> Result<bool, SpaceError> {
        if self.is_builtin(name) {
            return Err(SpaceError::invalid(format!(
                "{name:?} is a builtin tool and cannot be deleted; change the agent's grants \
                 (definition.tools) instead"
            )));
        }
        Ok(self
            .store
            .delete_lambda_tool(account, agent_id, name)
            .await?)
    }

    /// Deletes every tool document of an agent (the agent's own deletion
    /// does this in its transaction); answers how many there were.
    pub async fn delete_agent(&self, agent_id: &str) -> Result<u64, SpaceError> {
        Ok(self.store.delete_agent_tools(agent_id).await?)
    }
}

/// `^[a-z][a-z0-9_-]{1,63}$`.
fn check_name(name: &str) -> Result<(), SpaceError> {
    let bytes = name.as_bytes();
    let valid = (2..=64).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes[1..]
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-');
    if valid {
        Ok(())
    } else {
        Err(SpaceError::invalid(format!(
            "tool name {name:?} must be 2 to 64 characters of a-z, 0-9, _ and -, starting with \
             a letter"
        )))
    }
}

fn check_schema(which: &str, schema: &Ipld) -> Result<(), SpaceError> {
    let json = ipld_to_json(schema, JsonForm::Plain)
        .map_err(|e| SpaceError::invalid(format!("the {which} schema: {e}")))?;
    shape_check(&json).map_err(|e| SpaceError::invalid(format!("the {which} schema: {e}")))
}

/// A description's first sentence (or line), bounded.
fn summary_of(description: &str) -> String {
    let line = description.lines().next().unwrap_or_default();
    let sentence = match line.find(". ") {
        Some(end) => &line[..=end],
        None => line,
    };
    let sentence = sentence.trim();
    if sentence.chars().count() <= DERIVED_SUMMARY_CHARS {
        return sentence.to_owned();
    }
    let mut out: String = sentence.chars().take(DERIVED_SUMMARY_CHARS - 1).collect();
    out.push('…');
    out
}

fn warn_near_limit(agent_id: &str, count: u64, limit: u64) {
    let high = |n: u64| u128::from(n) * 5 >= u128::from(limit) * 4;
    if high(count) && !high(count.saturating_sub(1)) {
        tracing::warn!(
            used = count,
            limit,
            config_path = MAX_TOOLS_SETTING,
            scope = agent_id,
            "usage crossed 80% of a configured limit"
        );
    }
}

fn corrupt(row: &StoredTool, message: impl Into<String>) -> SpaceError {
    SpaceError::CorruptRow {
        table: TABLE.to_owned(),
        message: format!(
            "tool {:?} of agent {}: {}",
            row.name,
            row.agent_id,
            message.into()
        ),
    }
}

/// A stored row as a record, checked: the document decodes, is the one its
/// CID names, and agrees with its row.
fn record(row: &StoredTool, grants: Option<&[String]>) -> Result<ToolRecord, SpaceError> {
    let document = ToolDocument::decode(&row.document).map_err(|e| corrupt(row, e.to_string()))?;
    if cid_of(&row.document) != row.cid {
        return Err(corrupt(row, "the document is not the one its CID names"));
    }
    let kind_matches = matches!(
        (row.kind, document.kind),
        (StoredToolKind::Builtin, ToolKind::Builtin) | (StoredToolKind::Lambda, ToolKind::Lambda)
    );
    if document.name != row.name || !kind_matches {
        return Err(corrupt(row, "the document's name or kind is not its row's"));
    }
    let time = |ms: i64| u64::try_from(ms).map_err(|_| corrupt(row, "a negative time"));
    Ok(ToolRecord {
        cid: row.cid.clone(),
        enabled: row.enabled,
        granted: granted(&document, grants),
        created_at_ms: time(row.created_at_ms)?,
        updated_at_ms: time(row.updated_at_ms)?,
        document,
    })
}

/// Whether `grants` (the definition's `tools`) offer the document.
fn granted(document: &ToolDocument, grants: Option<&[String]>) -> bool {
    match document.kind {
        ToolKind::Lambda => true,
        ToolKind::Builtin => registry::granted(grants, &document.name),
        // Never stored: MCP tools are the servers' (see `mcp`).
        ToolKind::Mcp => false,
    }
}

#[cfg(test)]
mod tests;
