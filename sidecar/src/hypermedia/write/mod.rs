//! The hypermedia write commands, as the reference's `writeHypermedia`
//! runs them for a signer the caller has already resolved: creating a
//! document (its parent must exist), updating one (its state read from
//! `ListChanges`: genesis, heads, depth; only changed blocks replaced),
//! and commenting (replies included). Content is markdown (with
//! frontmatter) or block-node JSON; every `hm://` link in it is checked
//! first (malformed ones always, missing targets unless the caller skips
//! that); `dryRun` checks everything and publishes nothing. Each publish
//! is one `PublishBlobs`. Results are the reference's
//! `hypermedia_write_result` objects; a version conflict is its
//! `hypermedia_write_error`, answered, not raised.
//!
//! This file holds the dispatch, the input and content checks, link
//! checking and publishing; the commands live by what they write:
//! `documents.rs`, `comments.rs`, `account.rs` (profile, capability,
//! contact), `drafts.rs` (the `draft.*` commands) and `memory.rs` (a memory
//! file published as a document).

use agentos_protocol::seed::blobs::{self, CommentSpec, Lineage, PublishEntry, RefSpec, RefTarget};
use agentos_protocol::seed::hm_id::HmId;
use agentos_protocol::seed::{
    block_diff, cbor, json_to_ipld, markdown, publishable, Ipld, JsonForm, Principal, SigningKey,
};
use futures_util::StreamExt;
use ipld_core::cid::Cid;
use serde_json::{json, Map, Value};

use super::drafts::{Draft, DraftKey, DraftStore, DraftText, Placement};
use super::{HmError, Hypermedia, QueryInput};

mod account;
mod comments;
mod documents;
mod drafts;
mod memory;

pub use drafts::DraftScope;
pub use memory::{title_from_memory_path, MemoryDocument};

/// Content of one write, at most (UTF-8 bytes).
pub const MAX_WRITE_CONTENT_BYTES: usize = 256 * 1024;
/// A document's metadata, at most (DAG-CBOR bytes).
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
/// Distinct `hm://` links resolved per write.
const MAX_LINKS_RESOLVED: usize = 50;
/// Link lookups at once.
const LINKS_AT_ONCE: usize = 4;

/// Metadata keys a write takes from the top level of its input.
const METADATA_INPUT_KEYS: [&str; 15] = [
    "name",
    "summary",
    "displayAuthor",
    "displayPublishTime",
    "icon",
    "cover",
    "siteUrl",
    "layout",
    "showOutline",
    "showActivity",
    "contentWidth",
    "seedExperimentalLogo",
    "seedExperimentalHomeOrder",
    "importCategories",
    "importTags",
];

/// Who signs a write: an identity of the agent's owner.
pub struct Signer {
    pub key: SigningKey,
    pub public_key: String,
    pub profile_name: String,
}

/// Why a write failed. The message is what the model reads.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The request cannot be written as it is (the reference's 400s).
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Hm(#[from] HmError),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Limit(String),
    #[error("drafts storage: {0}")]
    Storage(#[from] agentos_schema::DbError),
}

impl WriteError {
    pub fn code(&self) -> &'static str {
        match self {
            WriteError::Invalid(_) => "invalid_argument",
            WriteError::Hm(e) => e.code(),
            WriteError::NotFound(_) => "not_found",
            WriteError::Limit(_) => "limit_exceeded",
            WriteError::Storage(_) => "storage",
        }
    }
}

fn invalid(message: impl Into<String>) -> WriteError {
    WriteError::Invalid(message.into())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `normalizeBoundedString`: trimmed, required, at most `max` bytes.
fn bounded(value: Option<&Value>, label: &str, max: usize) -> Result<String, WriteError> {
    let text = value.and_then(Value::as_str).map(str::trim).unwrap_or("");
    if text.is_empty() {
        return Err(invalid(format!("{label} is required")));
    }
    if text.len() > max {
        return Err(invalid(format!("{label} is too large")));
    }
    Ok(text.to_owned())
}

/// `normalizeOptionalBoundedString`: absent, null and `''` are absent.
fn optional(value: Option<&Value>, label: &str, max: usize) -> Result<Option<String>, WriteError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        some => bounded(some, label, max).map(Some),
    }
}

/// The first of `keys` that `input` has.
fn first<'a>(input: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    keys.iter()
        .find_map(|k| input.get(*k).filter(|v| !v.is_null()))
}

/// A result of the reference's shape.
pub fn write_result(command: &str, signer: Option<&Signer>, extra: Map<String, Value>) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!("hypermedia_write_result"));
    out.insert("command".into(), json!(command));
    if let Some(signer) = signer {
        out.insert(
            "signer".into(),
            json!({"profileName": signer.profile_name, "publicKey": signer.public_key}),
        );
    }
    out.insert("message".into(), json!(format!("{command} completed")));
    out.extend(extra);
    Value::Object(out)
}

/// A failure answered as the tool's output, as the reference answers it.
pub fn write_error(command: &str, message: &str, details: Option<Value>) -> Value {
    let mut out = json!({"type": "hypermedia_write_error", "command": command, "message": message});
    if let Some(details) = details {
        out["details"] = details;
    }
    out
}

fn fields(pairs: Vec<(&str, Value)>) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// Parsed write content.
struct Content {
    /// As hypermedia block nodes.
    blocks: Vec<Value>,
    /// The operations that lay it out in a new document.
    ops: Vec<Value>,
    metadata: Metadata,
}

/// Document metadata in the order its keys were first set (the order its
/// `SetAttributes` op lists them).
type Metadata = Vec<(String, Value)>;

/// Sets `key`, in place when it is there, else last.
fn put(metadata: &mut Metadata, key: &str, value: Value) {
    match metadata.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => metadata.push((key.to_owned(), value)),
    }
}

fn as_object(metadata: &Metadata) -> Value {
    Value::Object(metadata.iter().cloned().collect())
}

/// `normalizeWriteContent`: a string of at most 256 KiB.
fn text_content<'a>(value: Option<&'a Value>, label: &str) -> Result<&'a str, WriteError> {
    let Some(text) = value.and_then(Value::as_str) else {
        return Err(invalid(format!("{label} is required")));
    };
    if text.len() > MAX_WRITE_CONTENT_BYTES {
        return Err(invalid(format!("{label} is too large")));
    }
    Ok(text)
}

fn fresh_ids() -> impl FnMut() -> String {
    super::publish::block_id
}

fn parse_content(input: &Map<String, Value>) -> Result<Content, WriteError> {
    let raw = first(input, &["content", "body", "text"]);
    let format = match input.get("format").and_then(Value::as_str) {
        Some(format) => format.to_owned(),
        None => match raw {
            Some(Value::String(text)) => {
                match text.trim_start().chars().next() {
                    Some('[' | '{') => "json",
                    _ => "markdown",
                }
            }
            .to_owned(),
            _ => "json".to_owned(),
        },
    };
    match format.as_str() {
        "markdown" => {
            let text = text_content(raw, "Document content")?;
            let parsed = markdown::parse_markdown(text, &mut fresh_ids());
            Ok(Content {
                blocks: markdown::to_hm_block_nodes(&parsed.tree),
                ops: markdown::flatten_to_operations(&parsed.tree, ""),
                metadata: parsed.metadata,
            })
        }
        "json" => {
            let value = match raw {
                Some(Value::String(text)) => {
                    serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?
                }
                Some(value) => value.clone(),
                None => return Err(invalid("Document content must be an array of block nodes")),
            };
            let blocks = block_nodes(value)?;
            Ok(Content {
                ops: markdown::hm_block_nodes_to_operations(&blocks),
                blocks,
                metadata: normalize_metadata(input.get("metadata"))?,
            })
        }
        _ => Err(invalid("Document format must be markdown or json")),
    }
}

/// Block-node JSON checked as the reference's schema checks its shape: a
/// list of `{block: {type, id, …}, children?}`.
fn block_nodes(value: Value) -> Result<Vec<Value>, WriteError> {
    fn check(nodes: &[Value], depth: usize) -> bool {
        depth < 64
            && nodes.iter().all(|node| {
                let block = &node["block"];
                block["type"].is_string()
                    && block["id"].is_string()
                    && (node.get("children").is_none_or(Value::is_null)
                        || node["children"]
                            .as_array()
                            .is_some_and(|c| check(c, depth + 1)))
            })
    }
    match value {
        Value::Array(nodes) if check(&nodes, 0) => Ok(nodes),
        _ => Err(invalid(
            "Document content must be an array of block nodes ({block: {type, id, …}, children?})",
        )),
    }
}

fn metadata_size_ok(metadata: &Metadata) -> Result<(), WriteError> {
    let too_large = || invalid("Document metadata is too large");
    let ipld = json_to_ipld(&as_object(metadata), JsonForm::Plain).map_err(|_| too_large())?;
    let bytes = cbor::to_canonical(&ipld).map_err(|_| too_large())?;
    if bytes.len() > MAX_METADATA_BYTES {
        return Err(too_large());
    }
    Ok(())
}

/// `normalizeMetadataInput`.
fn normalize_metadata(value: Option<&Value>) -> Result<Metadata, WriteError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(map)) => {
            let metadata: Metadata = map.clone().into_iter().collect();
            metadata_size_ok(&metadata)?;
            Ok(metadata)
        }
        Some(_) => Err(invalid("Document metadata must be an object")),
    }
}

/// `mergeWriteMetadata`: the content's, then `input.metadata`, then the
/// input's own metadata keys.
fn merge_metadata(base: Metadata, input: &Map<String, Value>) -> Result<Metadata, WriteError> {
    let mut metadata = base;
    for (key, value) in normalize_metadata(input.get("metadata"))? {
        put(&mut metadata, &key, value);
    }
    for key in METADATA_INPUT_KEYS {
        if let Some(value) = input.get(key).filter(|v| !v.is_null()) {
            put(&mut metadata, key, value.clone());
        }
    }
    metadata_size_ok(&metadata)?;
    Ok(metadata)
}

/// `normalizeDocumentPath`: `''` for home, else `/a/b`; absent: a slug of
/// `fallback`.
fn document_path(value: Option<&Value>, fallback: &str) -> Result<String, WriteError> {
    let given = match value {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        some => Some(bounded(some, "Document path", 2048)?),
    };
    let Some(path) = given else {
        let mut slug = String::new();
        for c in fallback.trim().to_lowercase().chars() {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                slug.push(c);
            } else if !slug.ends_with('-') {
                slug.push('-');
            }
        }
        let slug = slug.trim_matches('-');
        return Ok(format!(
            "/{}",
            if slug.is_empty() { "untitled" } else { slug }
        ));
    };
    if path == "/" {
        return Ok(String::new());
    }
    Ok(if path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    })
}

/// The `SetAttributes` op of `metadata` (none when it is empty).
fn set_attributes(metadata: &Metadata) -> Option<Value> {
    let attrs: Vec<Value> = metadata
        .iter()
        .map(|(k, v)| json!({"key": [k], "value": v}))
        .collect();
    (!attrs.is_empty()).then(|| json!({"type": "SetAttributes", "attrs": attrs}))
}

fn ipld_ops(ops: &[Value]) -> Result<Vec<Ipld>, WriteError> {
    ops.iter()
        .map(|op| json_to_ipld(op, JsonForm::Plain).map_err(|e| invalid(e.to_string())))
        .collect()
}

fn cid(text: &str) -> Result<Cid, WriteError> {
    text.parse()
        .map_err(|_| invalid(format!("Invalid CID: {text}")))
}

fn version_cids(version: &str) -> Result<Vec<Cid>, WriteError> {
    version
        .split('.')
        .filter(|v| !v.is_empty())
        .map(cid)
        .collect()
}

fn principal(uid: &str) -> Result<Principal, WriteError> {
    uid.parse()
        .map_err(|e| invalid(format!("Invalid account {uid}: {e}")))
}

fn encoding(e: agentos_protocol::seed::SeedError) -> WriteError {
    invalid(e.to_string())
}

/// Every `hm:` link of block nodes (blocks' and annotations'), first seen
/// first.
fn hm_links(nodes: &[Value], out: &mut Vec<String>) {
    for node in nodes {
        let block = &node["block"];
        let mut push = |link: &Value| {
            if let Some(link) = link.as_str().filter(|l| l.starts_with("hm:")) {
                if !out.iter().any(|seen| seen == link) {
                    out.push(link.to_owned());
                }
            }
        };
        push(&block["link"]);
        for annotation in block["annotations"].as_array().into_iter().flatten() {
            push(&annotation["link"]);
        }
        if let Some(children) = node["children"].as_array() {
            hm_links(children, out);
        }
    }
}

/// The parts of an `hm://` id, with its path as the API writes it.
fn entity_path(id: &HmId) -> String {
    let segments: Vec<&str> = id
        .path
        .iter()
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .collect();
    if segments.is_empty() {
        String::new()
    } else {
        format!("/{}", segments.join("/"))
    }
}

fn unpack(text: &str) -> Result<HmId, WriteError> {
    HmId::unpack(text).ok_or_else(|| invalid(format!("Invalid ID: {text}")))
}

fn pack(id: &HmId) -> Result<String, WriteError> {
    id.pack()
        .ok_or_else(|| invalid(format!("Invalid ID: {}", id.id)))
}

/// A document's state for a new change: its genesis, heads and the depth
/// of the deepest head.
struct DocumentState {
    genesis: Cid,
    heads: Vec<Cid>,
    depth: u64,
}

/// `resolveDocumentState` over a `ListChanges` answer.
fn document_state(target: &str, changes: &[Value]) -> Result<DocumentState, WriteError> {
    if changes.is_empty() {
        return Err(invalid(format!(
            "No changes found for {target}. Document may not exist."
        )));
    }
    let id = |c: &Value| c["id"].as_str().unwrap_or("").to_owned();
    let deps = |c: &Value| -> Vec<String> {
        c["deps"]
            .as_array()
            .map(|d| {
                d.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let genesis = changes
        .iter()
        .find(|c| deps(c).is_empty())
        .map(id)
        .ok_or_else(|| invalid("Could not find genesis change (change with no deps)."))?;
    let all_deps: Vec<String> = changes.iter().flat_map(deps).collect();
    let heads: Vec<String> = changes
        .iter()
        .map(id)
        .filter(|i| !all_deps.contains(i))
        .collect();
    if heads.is_empty() {
        return Err(invalid("Could not determine document heads."));
    }
    // Depths: a change is one deeper than its deepest dep, roots are 0.
    let mut depth: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    let mut progress = true;
    while progress {
        progress = false;
        for change in changes {
            let key = id(change);
            if depth.contains_key(&key) {
                continue;
            }
            let ds = deps(change);
            if ds.is_empty() {
                depth.insert(key, 0);
                progress = true;
            } else if ds.iter().all(|d| depth.contains_key(d)) {
                let d = ds
                    .iter()
                    .filter_map(|d| depth.get(d))
                    .max()
                    .copied()
                    .unwrap_or(0);
                depth.insert(key, d + 1);
                progress = true;
            }
        }
    }
    let head_depth = heads
        .iter()
        .filter_map(|h| depth.get(h))
        .max()
        .copied()
        .unwrap_or(0);
    Ok(DocumentState {
        genesis: cid(&genesis)?,
        heads: heads.iter().map(|h| cid(h)).collect::<Result<_, _>>()?,
        depth: head_depth,
    })
}

impl Hypermedia {
    /// Runs `command` with `input` as `signer`.
    pub async fn write(
        &self,
        signer: &Signer,
        command: &str,
        input: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<Value, WriteError> {
        let extra = match command {
            "document.create" => {
                self.document_create(signer, input, dry_run, Vec::new())
                    .await?
            }
            "document.update" => match self
                .document_update(signer, input, dry_run, Vec::new())
                .await?
            {
                Ok(extra) => extra,
                Err(conflict) => return Ok(conflict),
            },
            "comment.create" => self.comment_create(signer, input, dry_run).await?,
            "comment.update" | "comment.delete" => {
                self.comment_change(signer, command, input, dry_run).await?
            }
            "document.delete" => self.document_delete(signer, input, dry_run).await?,
            "document.redirect" => {
                self.document_redirect(signer, command, input, dry_run)
                    .await?
            }
            "document.fork" | "document.ref" => self.document_fork(signer, input, dry_run).await?,
            "document.move" => self.document_move(signer, input, dry_run).await?,
            "profile.update" => self.profile_update(signer, input, dry_run).await?,
            "profile.alias" => self.profile_alias(signer, input, dry_run).await?,
            "capability.create" | "capability.grant" => {
                self.capability_create(signer, input, dry_run).await?
            }
            "contact.create" => self.contact_create(signer, input, dry_run).await?,
            "contact.delete" => self.contact_delete(signer, input, dry_run).await?,
            _ => {
                return Ok(write_error(
                    command,
                    &format!("Unsupported write command: {command}"),
                    None,
                ))
            }
        };
        Ok(write_result(command, Some(signer), extra))
    }

    /// `assertHmContentLinks`: malformed links always refuse the write;
    /// links to nothing do unless `skip_resolve`.
    async fn check_links(&self, blocks: &[Value], skip_resolve: bool) -> Result<(), WriteError> {
        let mut links = Vec::new();
        hm_links(blocks, &mut links);
        let mut ids = Vec::new();
        let mut malformed = Vec::new();
        for link in &links {
            match HmId::unpack(link).filter(|id| id.uid.parse::<Principal>().is_ok()) {
                Some(id) => ids.push((link.clone(), id)),
                None => malformed.push(link.clone()),
            }
        }
        if !malformed.is_empty() {
            return Err(invalid(format!(
                "Content contains malformed hm:// links — fix or remove them before publishing: {}",
                malformed.join(" · ")
            )));
        }
        if skip_resolve {
            return Ok(());
        }
        ids.truncate(MAX_LINKS_RESOLVED);
        let broken: Vec<String> = futures_util::stream::iter(ids)
            .map(|(link, mut id)| async move {
                id.block_ref = None;
                id.block_range = None;
                let packed = id.pack()?;
                match self.resource(&packed).await {
                    Ok(resource) if resource["type"] == "not-found" => Some(link),
                    _ => None,
                }
            })
            .buffered(LINKS_AT_ONCE)
            .filter_map(|broken| async move { broken })
            .collect()
            .await;
        if !broken.is_empty() {
            return Err(invalid(format!(
                "Content links to hm:// resources that do not exist on the server: {}. Fix the links (read them to verify), or pass options.skipLinkCheck: true only if the targets are about to be created.",
                broken.join(" · ")
            )));
        }
        Ok(())
    }

    /// `resolveCapability`: the first WRITER or AGENT capability `target`
    /// gave `signer`, when they differ.
    async fn capability(&self, target: &str, signer: &str) -> Result<Option<Cid>, WriteError> {
        if target == signer {
            return Ok(None);
        }
        let answer = self
            .client
            .query(
                "ListCapabilities",
                &QueryInput::TargetId(format!("hm://{target}")),
            )
            .await?;
        let found = answer["capabilities"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| {
                c["delegate"] == signer && matches!(c["role"].as_str(), Some("WRITER" | "AGENT"))
            })
            .and_then(|c| c["id"].as_str());
        found.map(cid).transpose()
    }

    async fn publish_entries(&self, entries: &[PublishEntry]) -> Result<Vec<String>, WriteError> {
        Ok(self.client.publish(entries).await?)
    }

    /// Signs `spec` as a `Ref` and publishes it alone.
    async fn publish_ref(
        &self,
        signer: &Signer,
        spec: &RefSpec<'_>,
    ) -> Result<Vec<String>, WriteError> {
        let reference = blobs::reference(&signer.key, spec).map_err(encoding)?;
        self.publish_entries(&[PublishEntry::bare(reference)]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalized_as_the_reference_does() {
        assert_eq!(document_path(None, "My Notes!").unwrap(), "/my-notes");
        assert_eq!(document_path(None, "  ").unwrap(), "/untitled");
        assert_eq!(document_path(Some(&json!("/")), "x").unwrap(), "");
        assert_eq!(document_path(Some(&json!("a/b")), "x").unwrap(), "/a/b");
        assert_eq!(document_path(Some(&json!("")), "Hé llo").unwrap(), "/h-llo");
    }

    #[test]
    fn a_documents_state_is_its_genesis_heads_and_depth() {
        let g = "bafyreigvj5l7ze6qds5ngjkhqai2bzvwnmn37uga4nbf44wginvl3eyrr4";
        let a = "bafyreiftznmgeosgxtvgndlmvn4q6puioaowkfomda7nfqtquysb6v73m4";
        let b = "bafyreibbiufdbyublunojcgl2w3gry7cte2eydkvzf35e5pp7iflqdz36a";
        let changes = vec![
            json!({"id": g}),
            json!({"id": a, "deps": [g]}),
            json!({"id": b, "deps": [a]}),
        ];
        let state = document_state("hm://x", &changes).unwrap();
        assert_eq!(state.genesis.to_string(), g);
        assert_eq!(
            state
                .heads
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            [b]
        );
        assert_eq!(state.depth, 2);
        assert_eq!(
            document_state("hm://x", &[]).err().map(|e| e.to_string()),
            Some("No changes found for hm://x. Document may not exist.".to_owned())
        );
    }
}
