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

    /// `document.create`; `extra` blobs (a document's files) go in the same
    /// publish.
    async fn document_create(
        &self,
        signer: &Signer,
        input: &Map<String, Value>,
        dry_run: bool,
        extra: Vec<PublishEntry>,
    ) -> Result<Map<String, Value>, WriteError> {
        let parsed = parse_content(input)?;
        let mut metadata = merge_metadata(parsed.metadata, input)?;
        let name = metadata
            .iter()
            .find(|(k, _)| k == "name")
            .and_then(|(_, v)| v.as_str())
            .map(str::trim)
            .unwrap_or("")
            .to_owned();
        if name.is_empty() {
            return Err(invalid(
                "document.create requires a name — pass options.name (or metadata: {name}, or frontmatter name in the content)",
            ));
        }
        put(&mut metadata, "name", json!(name));
        let account = optional(input.get("account"), "Document account", 256)?
            .unwrap_or_else(|| signer.public_key.clone());
        let path = document_path(input.get("path"), &name)?;
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        if segments.len() > 1 {
            let parent = format!("/{}", segments[..segments.len() - 1].join("/"));
            let exists = matches!(
                self.resource(&format!("hm://{account}{parent}")).await,
                Ok(resource) if resource["type"] == "document"
            );
            if !exists {
                return Err(invalid(format!(
                    "Cannot create document at {path}: parent path {parent} does not exist. Create the parent document first."
                )));
            }
        }
        self.check_links(
            &parsed.blocks,
            input.get("skipLinkCheck") == Some(&json!(true)),
        )
        .await?;
        let mut ops: Vec<Value> = set_attributes(&metadata).into_iter().collect();
        ops.extend(parsed.ops);
        let id = format!("hm://{account}{path}");
        if dry_run {
            return Ok(fields(vec![
                ("id", json!(id)),
                ("metadata", as_object(&metadata)),
                ("blockCount", json!(parsed.blocks.len())),
                ("dryRun", json!(true)),
            ]));
        }
        let space = principal(&account)?;
        let capability = self.capability(&account, &signer.public_key).await?;
        let genesis = blobs::genesis_change(&signer.key).map_err(encoding)?;
        let ts = now_ms();
        let lineage = Lineage {
            genesis: genesis.cid,
            deps: vec![genesis.cid],
            depth: 1,
        };
        let change =
            blobs::change(&signer.key, ipld_ops(&ops)?, Some(&lineage), ts).map_err(encoding)?;
        let version = change.cid;
        let reference = blobs::reference(
            &signer.key,
            &RefSpec {
                space: Some(&space),
                path: &path,
                genesis: genesis.cid,
                generation: ts,
                capability,
                target: RefTarget::Version(vec![version]),
                ts_ms: now_ms(),
            },
        )
        .map_err(encoding)?;
        let mut entries = vec![
            PublishEntry::named(genesis),
            PublishEntry::named(change),
            PublishEntry::bare(reference),
        ];
        entries.extend(extra);
        let cids = self.publish_entries(&entries).await?;
        Ok(fields(vec![
            ("id", json!(id)),
            ("version", json!(version.to_string())),
            ("cids", json!(cids)),
        ]))
    }

    /// A version conflict is `Ok(Err(answer))`: answered, not raised.
    async fn document_update(
        &self,
        signer: &Signer,
        input: &Map<String, Value>,
        dry_run: bool,
        extra: Vec<PublishEntry>,
    ) -> Result<Result<Map<String, Value>, Value>, WriteError> {
        if first(input, &["edit", "id"]).is_none() {
            return Err(invalid(
                "Document edit target is required: pass the hm:// URL of the document to revise as input.edit. (The write verb with action \"update\" fills it from the address automatically.)",
            ));
        }
        let edit = bounded(first(input, &["edit", "id"]), "Document edit target", 2048)?;
        let id = unpack(&edit)?;
        let packed = pack(&id)?;
        let resource = self.resource(&packed).await?;
        let kind = resource["type"].as_str().unwrap_or("unknown");
        if kind != "document" {
            return Err(invalid(format!("Resource is {kind}, not a document")));
        }
        let document = &resource["document"];
        let current = document["version"].as_str().unwrap_or("");
        if let Some(expected) = input.get("expectedVersion").and_then(Value::as_str) {
            if expected != current {
                return Ok(Err(write_error(
                    "document.update",
                    "Document version conflict",
                    Some(json!({"currentVersion": current})),
                )));
            }
        }
        let parsed = match first(input, &["content", "body", "text"]) {
            Some(_) => Some(parse_content(input)?),
            None => None,
        };
        if let Some(parsed) = &parsed {
            self.check_links(
                &parsed.blocks,
                input.get("skipLinkCheck") == Some(&json!(true)),
            )
            .await?;
        }
        let base = parsed
            .as_ref()
            .map(|p| p.metadata.clone())
            .unwrap_or_default();
        let metadata = merge_metadata(base, input)?;
        let content_ops = match &parsed {
            Some(parsed) => {
                let old = document["content"]
                    .as_array()
                    .map_or(&[][..], Vec::as_slice);
                block_diff::replace_ops(old, &parsed.blocks)
            }
            None => Vec::new(),
        };
        let mut ops: Vec<Value> = set_attributes(&metadata).into_iter().collect();
        ops.extend(content_ops);
        if ops.is_empty() {
            return Err(invalid(
                "No document updates specified — provide content and/or metadata",
            ));
        }
        if dry_run {
            let mut out = fields(vec![("id", json!(packed))]);
            match &parsed {
                Some(parsed) => out.insert("blockCount".into(), json!(parsed.blocks.len())),
                None => out.insert("metadataOnly".into(), json!(true)),
            };
            out.insert("dryRun".into(), json!(true));
            return Ok(Ok(out));
        }
        let changes = self
            .client
            .query("ListChanges", &QueryInput::TargetId(edit.clone()))
            .await?;
        let list = changes["changes"].as_array().map_or(&[][..], Vec::as_slice);
        let state = document_state(&edit, list)?;
        let account = document["account"].as_str().unwrap_or(&id.uid).to_owned();
        let space = principal(&account)?;
        let capability = self.capability(&account, &signer.public_key).await?;
        let ts = now_ms();
        let lineage = Lineage {
            genesis: state.genesis,
            deps: state.heads.clone(),
            depth: state.depth + 1,
        };
        let change =
            blobs::change(&signer.key, ipld_ops(&ops)?, Some(&lineage), ts).map_err(encoding)?;
        let version = change.cid;
        let reference = blobs::reference(
            &signer.key,
            &RefSpec {
                space: Some(&space),
                path: document["path"].as_str().unwrap_or(""),
                genesis: state.genesis,
                generation: ts,
                capability,
                target: RefTarget::Version(vec![version]),
                ts_ms: now_ms(),
            },
        )
        .map_err(encoding)?;
        let mut entries = vec![PublishEntry::named(change), PublishEntry::bare(reference)];
        entries.extend(extra);
        let cids = self.publish_entries(&entries).await?;
        Ok(Ok(fields(vec![
            ("id", json!(packed)),
            ("version", json!(version.to_string())),
            ("cids", json!(cids)),
        ])))
    }

    async fn comment_create(
        &self,
        signer: &Signer,
        input: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<Map<String, Value>, WriteError> {
        let body = text_content(first(input, &["body", "content", "text"]), "Comment body")?;
        let reply = first(
            input,
            &[
                "replyCommentId",
                "replyComment",
                "reply",
                "replyTo",
                "commentId",
            ],
        );
        let parent = match reply {
            None => None,
            Some(reply) => {
                let record = comment_id(Some(reply), "Reply comment")?;
                Some(self.existing_comment(&record).await?)
            }
        };
        let target = match optional(
            first(input, &["target", "targetId", "id"]),
            "Comment target",
            2048,
        )? {
            Some(target) => target,
            None => match &parent {
                Some(parent) => {
                    let path = parent["targetPath"]
                        .as_str()
                        .map(|p| p.trim_start_matches('/'))
                        .filter(|p| !p.is_empty())
                        .map(|p| format!("/{p}"))
                        .unwrap_or_default();
                    format!(
                        "hm://{}{path}",
                        parent["targetAccount"].as_str().unwrap_or("")
                    )
                }
                None => return Err(invalid("Comment target is required")),
            },
        };
        let mut id = unpack(&target)?;
        id.block_ref = None;
        id.block_range = None;
        let target_url = pack(&id)?;
        let resource = self.resource(&target_url).await?;
        let kind = resource["type"].as_str().unwrap_or("unknown");
        if kind != "document" {
            return Err(invalid(format!("Comment target is {kind}, not a document")));
        }
        let document = &resource["document"];
        let blocks = if body.trim().is_empty() {
            vec![
                json!({"block": {"type": "Paragraph", "id": super::publish::block_id(),
                                  "text": "", "annotations": [], "attributes": {}},
                        "children": []}),
            ]
        } else {
            let parsed = markdown::parse_markdown(body, &mut fresh_ids());
            markdown::to_hm_block_nodes(&parsed.tree)
        };
        self.check_links(&blocks, input.get("skipLinkCheck") == Some(&json!(true)))
            .await?;
        let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
        let parent_field = |key: &str| parent.as_ref().and_then(|p| text(&p[key]));
        let reply_version = parent_field("version");
        let root_version = parent_field("threadRootVersion").or_else(|| reply_version.clone());
        let doc_version = parent_field("targetVersion")
            .or_else(|| text(&document["version"]))
            .unwrap_or_default();
        let private = parent_field("visibility")
            .or_else(|| text(&document["visibility"]))
            .as_deref()
            == Some("PRIVATE");
        if dry_run {
            let mut out = fields(vec![("target", json!(target_url))]);
            if let Some(parent) = &parent {
                out.insert("replyCommentId".into(), parent["id"].clone());
            }
            out.insert("blockCount".into(), json!(blocks.len()));
            out.insert("dryRun".into(), json!(true));
            return Ok(out);
        }
        let nodes = publishable::trim_trailing_empty(&blocks);
        let body_blocks = publishable::blocks(nodes).map_err(|e| invalid(e.to_string()))?;
        let space = principal(&id.uid)?;
        let path = entity_path(&id);
        let version = version_cids(&doc_version)?;
        let ts = now_ms();
        let blob = blobs::comment(
            &signer.key,
            &CommentSpec {
                id: None,
                body: body_blocks,
                space: &space,
                path: &path,
                version: &version,
                reply_parent: reply_version.as_deref().map(cid).transpose()?,
                thread_root: root_version.as_deref().map(cid).transpose()?,
                visibility: private.then_some("Private"),
                ts_ms: ts,
            },
        )
        .map_err(encoding)?;
        let comment_id = format!(
            "{}/{}",
            signer.public_key,
            blobs::record_tsid(ts, &blob.data)
        );
        let cids = self.publish_entries(&[PublishEntry::bare(blob)]).await?;
        let comment_url = match target_url.split_once('?') {
            Some((base, query)) => format!("{base}/:comments/{comment_id}?{query}"),
            None => format!("{target_url}/:comments/{comment_id}"),
        };
        let target_name = document["metadata"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map_or_else(|| target_url.clone(), str::to_owned);
        let mut out = fields(vec![
            ("commentId", json!(comment_id)),
            ("commentRecordId", json!(comment_id)),
            ("commentUrl", json!(comment_url)),
            ("commentCid", json!(cids.first())),
            ("target", json!(target_url)),
            ("targetUrl", json!(target_url)),
            ("targetName", json!(target_name)),
            ("authorUrl", json!(format!("hm://{}", signer.public_key))),
            ("authorName", json!(signer.profile_name)),
            ("markdown", json!(body)),
        ]);
        if let Some(parent) = &parent {
            out.insert("replyCommentId".into(), parent["id"].clone());
        }
        out.insert("cids".into(), json!(cids));
        Ok(out)
    }
}

/// The record id `authority/tsid` of a comment or contact.
fn record_parts<'a>(record: &'a str, what: &str) -> Result<(&'a str, &'a str), WriteError> {
    record
        .split_once('/')
        .filter(|(a, t)| !a.is_empty() && !t.is_empty())
        .ok_or_else(|| invalid(format!("Invalid {what} ID format: {record}")))
}

/// `normalizeCommentId`: an `hm://` id reads as `uid/tsid`.
fn comment_id(value: Option<&Value>, label: &str) -> Result<String, WriteError> {
    let raw = bounded(value, label, 2048)?;
    Ok(match HmId::unpack(&raw) {
        Some(id) => format!("{}{}", id.uid, entity_path(&id)),
        None => raw,
    })
}

/// A document resource, or the reference's words for what else is there.
fn document_of<'a>(resource: &'a Value, refusal: &str) -> Result<&'a Value, WriteError> {
    if resource["type"] == "document" {
        Ok(&resource["document"])
    } else {
        Err(invalid(refusal.replace(
            "{type}",
            resource["type"].as_str().unwrap_or("unknown"),
        )))
    }
}

fn generation(document: &Value, default: u64) -> u64 {
    let value = &document["generationInfo"]["generation"];
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(default)
}

impl Hypermedia {
    /// An existing comment, read through `Comment`.
    async fn existing_comment(&self, record: &str) -> Result<Value, WriteError> {
        let comment = self
            .client
            .query("Comment", &QueryInput::Value(record.to_owned()))
            .await?;
        if !comment["id"].is_string() {
            return Err(WriteError::Hm(HmError::Malformed {
                key: "Comment".into(),
                message: "the answer is not a comment".into(),
            }));
        }
        Ok(comment)
    }

    async fn comment_change(
        &self,
        signer: &Signer,
        command: &str,
        input: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<Map<String, Value>, WriteError> {
        let record = comment_id(first(input, &["comment", "commentId"]), "Comment ID")?;
        let (_, tsid) = record_parts(&record, "comment")?;
        let update = command == "comment.update";
        let body = if update {
            Some(text_content(
                first(input, &["body", "content", "text"]),
                "Comment body",
            )?)
        } else {
            None
        };
        let existing = self.existing_comment(&record).await?;
        let blocks = match body {
            Some(body) if !body.trim().is_empty() => {
                let parsed = markdown::parse_markdown(body, &mut fresh_ids());
                let blocks = markdown::to_hm_block_nodes(&parsed.tree);
                self.check_links(&blocks, input.get("skipLinkCheck") == Some(&json!(true)))
                    .await?;
                blocks
            }
            _ => Vec::new(),
        };
        if dry_run {
            return Ok(fields(vec![
                ("commentId", json!(record)),
                ("dryRun", json!(true)),
            ]));
        }
        let text = |key: &str| {
            existing[key]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let space = principal(&text("targetAccount").unwrap_or_default())?;
        let path = text("targetPath").unwrap_or_default();
        let version = version_cids(&text("targetVersion").unwrap_or_default())?;
        let body_blocks = publishable::blocks(publishable::trim_trailing_empty(&blocks))
            .map_err(|e| invalid(e.to_string()))?;
        let blob = blobs::comment(
            &signer.key,
            &CommentSpec {
                id: Some(tsid),
                body: body_blocks,
                space: &space,
                path: &path,
                version: &version,
                reply_parent: if update {
                    text("replyParentVersion").as_deref().map(cid).transpose()?
                } else {
                    None
                },
                thread_root: if update {
                    text("threadRootVersion").as_deref().map(cid).transpose()?
                } else {
                    None
                },
                visibility: (existing["visibility"] == "PRIVATE").then_some("Private"),
                ts_ms: now_ms(),
            },
        )
        .map_err(encoding)?;
        let cids = self.publish_entries(&[PublishEntry::bare(blob)]).await?;
        Ok(fields(vec![
            ("commentId", json!(record)),
            ("cids", json!(cids)),
        ]))
    }

    /// A document's id and resource, by the input's `keys`.
    async fn target_document(
        &self,
        input: &Map<String, Value>,
        keys: &[&str],
        label: &str,
    ) -> Result<(HmId, Value), WriteError> {
        let target = bounded(first(input, keys), label, 2048)?;
        let mut id = unpack(&target)?;
        id.block_ref = None;
        id.block_range = None;
        let resource = self.resource(&pack(&id)?).await?;
        Ok((id, resource))
    }

    async fn document_delete(
        &self,
        signer: &Signer,
        input: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<Map<String, Value>, WriteError> {
        let (id, resource) = self
            .target_document(input, &["id", "target"], "Document ID")
            .await?;
        let document = document_of(&resource, "Cannot delete {type}")?;
        let packed = pack(&id)?;
        if dry_run {
            return Ok(fields(vec![("id", json!(packed)), ("dryRun", json!(true))]));
        }
        let space = principal(&id.uid)?;
        let capability = self.capability(&id.uid, &signer.public_key).await?;
        let cids = self
            .publish_ref(
                signer,
                &RefSpec {
                    space: Some(&space),
                    path: &entity_path(&id),
                    genesis: cid(document["genesis"].as_str().unwrap_or(""))?,
                    generation: generation(document, 0),
                    capability,
                    target: RefTarget::Tombstone,
                    ts_ms: now_ms(),
                },
            )
            .await?;
        Ok(fields(vec![("id", json!(packed)), ("cids", json!(cids))]))
    }

    async fn document_redirect(
        &self,
        signer: &Signer,
        _command: &str,
        input: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<Map<String, Value>, WriteError> {
        let (id, resource) = self
            .target_document(input, &["id", "source"], "Source ID")
            .await?;
        let to = bounded(first(input, &["to", "target"]), "Redirect target", 2048)?;
        let target = unpack(&to)?;
        let document = document_of(&resource, "Redirect source is not a document")?;
        let (packed, target_url) = (pack(&id)?, pack(&target)?);
        if dry_run {
            return Ok(fields(vec![
                ("id", json!(packed)),
                ("target", json!(target_url)),
                ("dryRun", json!(true)),
            ]));
        }
        let space = principal(&id.uid)?;
        let capability = self.capability(&id.uid, &signer.public_key).await?;
        let cids = self
            .publish_ref(
                signer,
                &RefSpec {
                    space: Some(&space),
                    path: &entity_path(&id),
                    genesis: cid(document["genesis"].as_str().unwrap_or(""))?,
                    generation: generation(document, 1),
                    capability,
                    target: RefTarget::Redirect {
                        path: entity_path(&target),
                        space: Some(principal(&target.uid)?),
                        republish: input.get("republish") == Some(&json!(true)),
                    },
                    ts_ms: now_ms(),
                },
            )
            .await?;
        Ok(fields(vec![
            ("id", json!(packed)),
            ("target", json!(target_url)),
            ("cids", json!(cids)),
        ]))
    }

    /// `document.fork`: the source document's version, referenced at the
    /// destination.
    async fn document_fork(
        &self,
        signer: &Signer,
        input: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<Map<String, Value>, WriteError> {
        let (_, resource) = self
            .target_document(input, &["source", "sourceId"], "Source ID")
            .await?;
        let destination = bounded(
            first(input, &["destination", "destinationId"]),
            "Destination ID",
            2048,
        )?;
        let dest = unpack(&destination)?;
        let document = document_of(&resource, "Source is not a document")?;
        let info = &document["generationInfo"];
        if !info.is_object() {
            return Err(invalid("Source document has no generation info"));
        }
        let packed = pack(&dest)?;
        if dry_run {
            return Ok(fields(vec![("id", json!(packed)), ("dryRun", json!(true))]));
        }
        let space = principal(&dest.uid)?;
        let cids = self
            .publish_ref(
                signer,
                &RefSpec {
                    space: Some(&space),
                    path: &entity_path(&dest),
                    genesis: cid(info["genesis"].as_str().unwrap_or(""))?,
                    generation: generation(document, 0),
                    capability: None,
                    target: RefTarget::Version(version_cids(
                        document["version"].as_str().unwrap_or(""),
                    )?),
                    ts_ms: now_ms(),
                },
            )
            .await?;
        Ok(fields(vec![("id", json!(packed)), ("cids", json!(cids))]))
    }

    /// `document.move`: the document referenced at its new place (unless
    /// it is there already), then its old place redirected there.
    async fn document_move(
        &self,
        signer: &Signer,
        input: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<Map<String, Value>, WriteError> {
        let (source_id, resource) = self
            .target_document(
                input,
                &["source", "sourceId", "id", "target", "targetId"],
                "Source ID",
            )
            .await?;
        let source = pack(&source_id)?;
        let destination = match first(input, &["destination", "destinationId", "to"]) {
            Some(value) => bounded(Some(value), "Destination ID", 2048)?,
            None => match input.get("path").filter(|p| !p.is_null()) {
                Some(path) => {
                    let path = document_path(Some(path), "")?;
                    format!("hm://{}{path}", source_id.uid)
                }
                None => return Err(invalid("Destination ID or path is required")),
            },
        };
        let dest = unpack(&destination)?;
        let document = document_of(&resource, "Source is not a document")?;
        let dest_url = pack(&dest)?;
        let already = match self.resource(&dest_url).await {
            Ok(there) => {
                there["type"] == "document"
                    && there["document"]["version"] == document["version"]
                    && there["document"]["generationInfo"]["genesis"]
                        == document["generationInfo"]["genesis"]
            }
            Err(_) => false,
        };
        let fork_input = fields(vec![
            ("source", json!(source)),
            ("destination", json!(dest_url)),
        ]);
        let reference = if already {
            write_result(
                "document.fork",
                Some(signer),
                fields(vec![
                    ("id", json!(dest_url)),
                    ("status", json!("already_exists")),
                    ("version", document["version"].clone()),
                ]),
            )
        } else {
            let extra = self.document_fork(signer, &fork_input, dry_run).await?;
            write_result("document.fork", Some(signer), extra)
        };
        if dry_run {
            let Value::Object(map) = reference else {
                return Ok(Map::new());
            };
            return Ok(map);
        }
        let redirect_input = fields(vec![("id", json!(source)), ("to", json!(dest_url))]);
        let mut out = fields(vec![("destination", json!(dest_url)), ("ref", reference)]);
        match self
            .document_redirect(signer, "document.move", &redirect_input, false)
            .await
        {
            Ok(extra) => {
                out.insert(
                    "redirect".into(),
                    write_result("document.move", Some(signer), extra),
                );
            }
            Err(e) => {
                out.insert(
                    "warning".into(),
                    json!(format!(
                        "Destination was created, but source redirect failed: {e}"
                    )),
                );
            }
        }
        Ok(out)
    }

    async fn profile_update(
        &self,
        signer: &Signer,
        input: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<Map<String, Value>, WriteError> {
        let name = optional(input.get("name"), "Profile name", 256)?
            .unwrap_or_else(|| signer.profile_name.clone());
        let description = optional(input.get("description"), "Profile description", 64 * 1024)?;
        let avatar = optional(first(input, &["icon", "avatar"]), "Profile avatar", 2048)?;
        let profile = json!({"name": name, "publicKey": signer.public_key});
        if dry_run {
            return Ok(fields(vec![("profile", profile), ("dryRun", json!(true))]));
        }
        let blob = blobs::profile(
            &signer.key,
            &name,
            avatar.as_deref(),
            description.as_deref(),
            now_ms(),
        )
        .map_err(encoding)?;
        let cids = self.publish_entries(&[PublishEntry::named(blob)]).await?;
        Ok(fields(vec![("profile", profile), ("cids", json!(cids))]))
    }

    async fn profile_alias(
        &self,
        signer: &Signer,
        input: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<Map<String, Value>, WriteError> {
        let alias = bounded(input.get("alias"), "Profile alias", 256)?;
        let principal = principal(&alias)?;
        if dry_run {
            return Ok(fields(vec![
                ("alias", json!(alias)),
                ("dryRun", json!(true)),
            ]));
        }
        let blob = blobs::profile_alias(&signer.key, &principal, now_ms()).map_err(encoding)?;
        let cids = self.publish_entries(&[PublishEntry::named(blob)]).await?;
        Ok(fields(vec![("alias", json!(alias)), ("cids", json!(cids))]))
    }

    async fn capability_create(
        &self,
        signer: &Signer,
        input: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<Map<String, Value>, WriteError> {
        let delegate = bounded(
            first(input, &["delegate", "delegateUid"]),
            "Capability delegate",
            256,
        )?;
        let role = bounded(input.get("role"), "Capability role", 256)?.to_uppercase();
        if role != "WRITER" && role != "AGENT" {
            return Err(invalid("Capability role must be WRITER or AGENT"));
        }
        let path = optional(input.get("path"), "Capability path", 2048)?;
        let label = optional(input.get("label"), "Capability label", 256)?;
        if dry_run {
            return Ok(fields(vec![
                ("delegate", json!(delegate)),
                ("role", json!(role)),
                ("path", json!(path)),
                ("label", json!(label)),
                ("dryRun", json!(true)),
            ]));
        }
        let data = agentos_protocol::seed::Capability::issue(
            &signer.key,
            principal(&delegate)?,
            agentos_protocol::seed::Role::parse(&role),
            now_ms() as i64,
            path.as_deref(),
            label.as_deref(),
        )
        .map_err(encoding)?;
        let cids = self
            .publish_entries(&[PublishEntry { cid: None, data }])
            .await?;
        Ok(fields(vec![
            ("delegate", json!(delegate)),
            ("role", json!(role)),
            ("cids", json!(cids)),
        ]))
    }

    async fn contact_create(
        &self,
        signer: &Signer,
        input: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<Map<String, Value>, WriteError> {
        let subject = bounded(
            first(input, &["subject", "subjectUid"]),
            "Contact subject",
            256,
        )?;
        let name = bounded(input.get("name"), "Contact name", 256)?;
        let subject_principal = principal(&subject)?;
        if dry_run {
            return Ok(fields(vec![
                ("subject", json!(subject)),
                ("name", json!(name)),
                ("dryRun", json!(true)),
            ]));
        }
        let ts = now_ms();
        let blob = blobs::contact(
            &signer.key,
            &blobs::ContactSpec {
                id: None,
                subject: Some(&subject_principal),
                name: Some(&name),
                account: None,
                ts_ms: ts,
            },
        )
        .map_err(encoding)?;
        let record = format!(
            "{}/{}",
            signer.public_key,
            blobs::record_tsid(ts, &blob.data)
        );
        let cids = self.publish_entries(&[PublishEntry::bare(blob)]).await?;
        Ok(fields(vec![
            ("contactId", json!(record)),
            ("cids", json!(cids)),
        ]))
    }

    async fn contact_delete(
        &self,
        signer: &Signer,
        input: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<Map<String, Value>, WriteError> {
        let record = bounded(first(input, &["contact", "contactId"]), "Contact ID", 2048)?;
        let (authority, tsid) = record
            .split_once('/')
            .filter(|(a, t)| !a.is_empty() && !t.is_empty())
            .ok_or_else(|| {
                invalid(format!(
                    "Invalid contact ID format: {record}. Expected \"authority/tsid\"."
                ))
            })?;
        let account = principal(authority)?;
        if dry_run {
            return Ok(fields(vec![
                ("contactId", json!(record)),
                ("dryRun", json!(true)),
            ]));
        }
        let blob = blobs::contact(
            &signer.key,
            &blobs::ContactSpec {
                id: Some(tsid),
                subject: None,
                name: None,
                account: Some(&account),
                ts_ms: now_ms(),
            },
        )
        .map_err(encoding)?;
        let cids = self.publish_entries(&[PublishEntry::bare(blob)]).await?;
        Ok(fields(vec![
            ("contactId", json!(record)),
            ("cids", json!(cids)),
        ]))
    }
}

/// A markdown file of an agent's memory, to publish as a document.
pub struct MemoryDocument {
    /// Its memory path.
    pub path: String,
    /// Its blocks, file links already rewritten to `ipfs://`.
    pub nodes: Vec<Value>,
    /// Its frontmatter, media rewritten likewise.
    pub metadata: Vec<(String, Value)>,
    /// The files its links name, as IPFS blocks.
    pub files: Vec<PublishEntry>,
    /// How many of its blocks linked a file.
    pub images: usize,
}

/// `titleFromMemoryPath`: `notes/weekly-update.md` is "Weekly update".
pub fn title_from_memory_path(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = match base.rfind('.') {
        Some(dot)
            if dot + 1 < base.len()
                && base[dot + 1..].bytes().all(|b| b.is_ascii_alphanumeric()) =>
        {
            &base[..dot]
        }
        _ => base,
    };
    let mut words = String::new();
    for c in stem.chars() {
        if c == '-' || c == '_' {
            if !words.ends_with(' ') {
                words.push(' ');
            }
        } else {
            words.push(c);
        }
    }
    let words = words.trim();
    let mut chars = words.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => "Untitled".to_owned(),
    }
}

impl Hypermedia {
    /// `publishMemoryDocument`: the file as the document at `path` of
    /// `account` (a slug of its title when `None`), updated in place when
    /// one is there, created otherwise; its files in the same publish.
    pub async fn publish_memory_document(
        &self,
        signer: &Signer,
        account: &str,
        path: Option<&str>,
        document: MemoryDocument,
        dry_run: bool,
    ) -> Result<Value, WriteError> {
        let name = document
            .metadata
            .iter()
            .find(|(k, _)| k == "name")
            .and_then(|(_, v)| v.as_str())
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        let title = name.unwrap_or_else(|| title_from_memory_path(&document.path));
        let doc_path = document_path(path.map(|p| json!(p)).as_ref(), &title)?;
        let target = format!("hm://{account}{doc_path}");
        let existing = matches!(
            self.resource(&target).await,
            Ok(resource) if resource["type"] == "document"
        );
        let metadata = as_object(&document.metadata);
        let (command, mut result) = if existing {
            let input = fields(vec![
                ("edit", json!(target)),
                ("content", json!(document.nodes)),
                ("format", json!("json")),
                ("metadata", metadata),
            ]);
            match self
                .document_update(signer, &input, dry_run, document.files)
                .await?
            {
                Ok(extra) => ("document.update", extra),
                Err(conflict) => return Ok(conflict),
            }
        } else {
            let input = fields(vec![
                ("account", json!(account)),
                (
                    "path",
                    json!(if doc_path.is_empty() { "/" } else { &doc_path }),
                ),
                ("content", json!(document.nodes)),
                ("format", json!("json")),
                ("metadata", metadata),
                ("name", json!(title)),
            ]);
            (
                "document.create",
                self.document_create(signer, &input, dry_run, document.files)
                    .await?,
            )
        };
        let note = match document.images {
            0 => String::new(),
            1 => " with 1 image".to_owned(),
            n => format!(" with {n} images"),
        };
        let summary = if dry_run {
            format!(
                "Validated {} for publishing to {target}{note}.",
                document.path
            )
        } else if existing {
            format!("Updated {} at {target}{note}.", document.path)
        } else {
            format!("Published {} as {target}{note}.", document.path)
        };
        result.insert("summary".into(), json!(summary));
        result.insert("memoryPath".into(), json!(document.path));
        result.insert(
            "url".into(),
            json!(format!("{}/hm/{account}{doc_path}", self.server())),
        );
        if document.images > 0 {
            result.insert("imagesUploaded".into(), json!(document.images));
        }
        Ok(write_result(command, Some(signer), result))
    }
}

/// Where drafts are kept and whose they are.
pub struct DraftScope<'a> {
    pub store: &'a DraftStore,
    /// The agent's owner.
    pub account_id: &'a str,
    pub agent_id: &'a str,
}

fn draft_id(input: &Map<String, Value>) -> Result<String, WriteError> {
    bounded(first(input, &["draft", "draftId"]), "Draft ID", 256)
}

fn placement(input: &Map<String, Value>) -> Placement {
    let text = |key: &str| input.get(key).and_then(Value::as_str).map(str::to_owned);
    Placement {
        edit_target: text("edit"),
        location_target: text("location"),
        path_name: text("path"),
        visibility: text("visibility"),
    }
}

fn now_i64() -> i64 {
    i64::try_from(now_ms()).unwrap_or(i64::MAX)
}

/// A draft's markdown, as `draft.get` shows it: its frontmatter and
/// blocks, cut at 256 KiB.
fn draft_markdown(draft: &Draft) -> String {
    let metadata: Map<String, Value> = draft.metadata.iter().cloned().collect();
    let mut markdown = super::frontmatter::frontmatter(&metadata);
    let body = crate::triggers::prompt::resolved_content(
        &draft.content,
        &crate::triggers::prompt::Lookups::default(),
    );
    if !body.is_empty() {
        markdown.push('\n');
        markdown.push_str(&body);
    }
    if markdown.len() > MAX_WRITE_CONTENT_BYTES {
        let mut cut = MAX_WRITE_CONTENT_BYTES;
        while !markdown.is_char_boundary(cut) {
            cut -= 1;
        }
        markdown.truncate(cut);
        markdown.push_str("\n[truncated]");
    }
    markdown
}

impl Hypermedia {
    /// Runs a `draft.*` command: kept here, published only by
    /// `draft.publish` (which alone needs `signer`).
    pub async fn draft(
        &self,
        scope: &DraftScope<'_>,
        signer: Option<&Signer>,
        command: &str,
        input: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<Value, WriteError> {
        let (account, agent) = (scope.account_id, scope.agent_id);
        let not_found = || WriteError::NotFound("Draft not found".into());
        let extra = match command {
            "draft.create" => {
                let parsed = parse_content(input)?;
                let metadata = merge_metadata(parsed.metadata, input)?;
                let name = match optional(input.get("name"), "Draft name", 256)? {
                    Some(name) => name,
                    None => metadata
                        .iter()
                        .find(|(k, _)| k == "name")
                        .and_then(|(_, v)| v.as_str())
                        .map(str::trim)
                        .unwrap_or("")
                        .to_owned(),
                };
                if name.is_empty() {
                    return Err(invalid(
                        "draft.create requires a name — pass name (or metadata: {name}, or frontmatter name)",
                    ));
                }
                let id = uuid::Uuid::new_v4().to_string();
                let mut out = fields(vec![
                    ("draftId", json!(id)),
                    ("name", json!(name)),
                    ("metadata", as_object(&metadata)),
                ]);
                if dry_run {
                    out.insert("dryRun".into(), json!(true));
                    return Ok(write_result(command, None, out));
                }
                let kept = scope
                    .store
                    .create(
                        DraftKey {
                            account_id: account,
                            agent_id: agent,
                            draft_id: &id,
                        },
                        DraftText {
                            title: &name,
                            content: &parsed.blocks,
                            metadata: &metadata,
                        },
                        &placement(input),
                        now_i64(),
                    )
                    .await?;
                if !kept {
                    return Err(WriteError::Limit(format!(
                        "This agent keeps {} drafts already; publish or delete some first",
                        super::drafts::MAX_DRAFTS_PER_AGENT
                    )));
                }
                out
            }
            "draft.update" => {
                let id = draft_id(input)?;
                let existing = scope
                    .store
                    .get(account, agent, &id)
                    .await?
                    .ok_or_else(not_found)?;
                let (blocks, metadata) = if first(input, &["content", "body", "text"]).is_some() {
                    let parsed = parse_content(input)?;
                    let metadata = merge_metadata(parsed.metadata, input)?;
                    (parsed.blocks, metadata)
                } else {
                    (
                        existing.content.clone(),
                        merge_metadata(existing.metadata.clone(), input)?,
                    )
                };
                let text = |v: Option<&Value>| {
                    v.and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                };
                let name = text(input.get("name"))
                    .or_else(|| text(metadata.iter().find(|(k, _)| k == "name").map(|(_, v)| v)))
                    .or_else(|| Some(existing.title.clone()).filter(|t| !t.is_empty()))
                    .unwrap_or_else(|| "Untitled".to_owned());
                let mut out = fields(vec![
                    ("draftId", json!(id)),
                    ("name", json!(name)),
                    ("metadata", as_object(&metadata)),
                ]);
                if dry_run {
                    out.insert("dryRun".into(), json!(true));
                    return Ok(write_result(command, None, out));
                }
                scope
                    .store
                    .update(
                        DraftKey {
                            account_id: account,
                            agent_id: agent,
                            draft_id: &id,
                        },
                        DraftText {
                            title: &name,
                            content: &blocks,
                            metadata: &metadata,
                        },
                        &placement(input),
                        now_i64(),
                    )
                    .await?;
                out
            }
            "draft.get" => {
                let id = draft_id(input)?;
                let draft = scope
                    .store
                    .get(account, agent, &id)
                    .await?
                    .ok_or_else(not_found)?;
                fields(vec![
                    ("draftId", json!(id)),
                    ("name", json!(draft.title)),
                    ("metadata", as_object(&draft.metadata)),
                    ("markdown", json!(draft_markdown(&draft))),
                    ("status", json!(draft.status)),
                    ("edit", json!(draft.edit_target)),
                    ("location", json!(draft.location_target)),
                    ("path", json!(draft.path_name)),
                    ("visibility", json!(draft.visibility)),
                ])
            }
            "draft.list" => {
                let limit = match input.get("limit").filter(|v| !v.is_null()) {
                    None => 50,
                    Some(Value::Number(n)) => n
                        .as_f64()
                        .filter(|f| f.is_finite())
                        .map(|f| f.max(0.0) as u64)
                        .ok_or_else(|| invalid("Draft list limit must be a number"))?,
                    Some(_) => return Err(invalid("Draft list limit must be a number")),
                }
                .min(100);
                let drafts: Vec<Value> = scope
                    .store
                    .list(account, agent, limit)
                    .await?
                    .into_iter()
                    .map(|d| {
                        json!({"id": d.draft_id, "status": d.status, "edit_target": d.edit_target,
                               "location_target": d.location_target,
                               "updated_at": d.updated_at_ms, "name": d.title})
                    })
                    .collect();
                fields(vec![("drafts", json!(drafts))])
            }
            "draft.delete" => {
                let id = draft_id(input)?;
                scope
                    .store
                    .get(account, agent, &id)
                    .await?
                    .ok_or_else(not_found)?;
                if dry_run {
                    return Ok(write_result(
                        command,
                        None,
                        fields(vec![("draftId", json!(id)), ("dryRun", json!(true))]),
                    ));
                }
                if !scope.store.delete(account, agent, &id).await? {
                    return Err(not_found());
                }
                fields(vec![("draftId", json!(id)), ("status", json!("deleted"))])
            }
            "draft.publish" => {
                let id = draft_id(input)?;
                let draft = scope
                    .store
                    .get(account, agent, &id)
                    .await?
                    .ok_or_else(not_found)?;
                let Some(signer) = signer else {
                    return Err(invalid("draft.publish needs a signer"));
                };
                if dry_run {
                    return Ok(write_result(
                        command,
                        None,
                        fields(vec![
                            ("draftId", json!(id)),
                            ("name", json!(draft.title)),
                            ("dryRun", json!(true)),
                        ]),
                    ));
                }
                let metadata = as_object(&draft.metadata);
                let (target, publish_input) = match &draft.edit_target {
                    Some(edit) => {
                        let mut publish = fields(vec![
                            ("edit", json!(edit)),
                            ("content", json!(draft.content)),
                            ("format", json!("json")),
                            ("metadata", metadata),
                        ]);
                        if let Some(expected) = input.get("expectedVersion") {
                            publish.insert("expectedVersion".into(), expected.clone());
                        }
                        ("document.update", publish)
                    }
                    None => {
                        let mut publish = fields(vec![
                            ("content", json!(draft.content)),
                            ("format", json!("json")),
                            ("metadata", metadata),
                            ("name", json!(draft.title)),
                        ]);
                        if let Some(path) = draft.path_name.as_deref().filter(|p| !p.is_empty()) {
                            publish.insert("path".into(), json!(path));
                        }
                        ("document.create", publish)
                    }
                };
                let mut result = self.write(signer, target, &publish_input, false).await?;
                scope
                    .store
                    .published(
                        &id,
                        result["id"].as_str(),
                        result["version"].as_str(),
                        now_i64(),
                    )
                    .await?;
                result["command"] = json!("draft.publish");
                result["draftId"] = json!(id);
                return Ok(result);
            }
            _ => {
                return Ok(write_error(
                    command,
                    &format!("Unsupported draft command: {command}"),
                    None,
                ))
            }
        };
        Ok(write_result(command, None, extra))
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
