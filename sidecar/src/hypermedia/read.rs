//! `read hm://…`: a document or comment by its id, as the reference's
//! `readHypermedia` returns it. A comment is read by its own id
//! (`hm://<author>/<tsid>`) or through a document's comment view
//! (`…/:comments/<author>/<tsid>`); `:attributes` gives a document's
//! metadata alone. The result carries the resource itself (`format: json`,
//! and always for a redirect, a missing, deleted or failed resource: none
//! is followed) or its markdown: the frontmatter, then the blocks with
//! their id comments, inline mentions named through `Account` (or the
//! resource they point at), embedded resources inlined two levels deep
//! through `Resource`, and query blocks listed through `Query`.
//! Lookups run a few at a time and are bounded per read; past the bound, or
//! when one fails, the reference's fallback shows instead.

use std::collections::HashMap;

use agentos_protocol::seed::hm_id::HmId;
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Map, Value};

use super::client::{HmClient, Param, QueryInput};
use super::frontmatter::frontmatter;
use super::HmError;
use crate::config::hypermedia::HypermediaConfig;
use crate::triggers::prompt::{
    self, fallback_doc_label, fallback_uid, Embedded, Lookups, Reference,
};

/// The longest id a read takes (UTF-8 bytes).
const MAX_ID_BYTES: usize = 2048;
/// Markdown longer than this (UTF-8 bytes) is cut and marked.
const MAX_MARKDOWN_BYTES: usize = 256 * 1024;
/// Inline mentions and query blocks looked up per read, at most.
const MAX_LOOKUPS: usize = 64;
/// The embedded resources' content one read keeps, at most (bytes of
/// JSON).
const MAX_EMBEDDED_BYTES: usize = 4 * 1024 * 1024;
/// Lookups in flight at once.
const LOOKUPS_AT_ONCE: usize = 8;
/// Path segments that open a document's comment view.
const COMMENT_TERMS: [&str; 3] = [":comments", ":comment", ":discussions"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Json,
}

impl Format {
    fn as_str(self) -> &'static str {
        match self {
            Format::Markdown => "markdown",
            Format::Json => "json",
        }
    }
}

/// The VM's hypermedia reads.
#[derive(Clone)]
pub struct Hypermedia {
    pub(super) client: HmClient,
    /// The IPFS gateway's base URL.
    ipfs: String,
    /// How the activity monitor reads feeds.
    pub(super) activity: ActivityPace,
    /// Accounts' display names as last looked up, until when.
    names: std::sync::Arc<std::sync::Mutex<NameCache>>,
}

/// Display names by account: a name for five minutes, a failed lookup for
/// thirty seconds; at most [`MAX_CACHED_NAMES`] kept.
type NameCache = std::collections::HashMap<String, (Option<String>, std::time::Instant)>;

/// Accounts whose display names are kept at once.
const MAX_CACHED_NAMES: usize = 4096;

/// `hypermedia.activity*`: how often and how far the monitor reads.
#[derive(Clone, Copy, Debug)]
pub struct ActivityPace {
    pub poll_interval: std::time::Duration,
    pub page_size: u64,
    pub max_pages: u64,
}

impl Hypermedia {
    pub fn new(config: &HypermediaConfig) -> Result<Hypermedia, HmError> {
        Ok(Hypermedia {
            names: Default::default(),
            client: HmClient::new(config)?,
            ipfs: config.ipfs_server(),
            activity: ActivityPace {
                poll_interval: std::time::Duration::from_millis(config.activity_poll_interval_ms),
                page_size: config.activity_page_size,
                max_pages: config.activity_max_pages,
            },
        })
    }

    /// Where the gateway serves `cid`.
    pub fn ipfs_url(&self, cid: &str) -> String {
        format!("{}/ipfs/{cid}", self.ipfs)
    }

    /// Reads `address` (an `hm://` id).
    pub async fn read(&self, address: &str, format: Format) -> Result<Value, HmError> {
        let requested = address.trim();
        if requested.is_empty() {
            return Err(HmError::InvalidAddress("Hypermedia ID is required".into()));
        }
        if requested.len() > MAX_ID_BYTES {
            return Err(HmError::InvalidAddress("Hypermedia ID is too large".into()));
        }
        let mut id = resolve(requested)?;
        if id.path.first().map(String::as_str) == Some(":profile") {
            return self.profile(requested, &id).await;
        }
        if id.path.last().map(String::as_str) == Some(":directory") {
            id.path.pop();
            id.id = agentos_protocol::seed::hm_id::pack_base_id(&id.uid, &id.path);
            return self.directory(requested, &id).await;
        }
        let attributes_only = matches!(
            id.path.last().map(String::as_str),
            Some(":attributes" | ":metadata")
        );
        if attributes_only {
            id.path.pop();
            id.id = agentos_protocol::seed::hm_id::pack_base_id(&id.uid, &id.path);
        }
        let packed = id.pack().ok_or_else(|| {
            HmError::InvalidAddress(format!("Invalid Hypermedia ID: {requested}"))
        })?;
        let resource = self
            .client
            .query("Resource", &QueryInput::Id(packed.clone()))
            .await?;
        let resource = valid_resource(resource)?;
        let mut result = Map::new();
        result.insert("type".into(), json!("hypermedia_document"));
        result.insert("requestedId".into(), json!(requested));
        result.insert("id".into(), json!(packed));
        result.insert("server".into(), json!(self.client.server()));
        result.insert("format".into(), json!(format.as_str()));
        match resource["type"].as_str() {
            Some("document") => {
                let document = &resource["document"];
                if let Some(name) = document["metadata"].get("name").filter(|n| !n.is_null()) {
                    result.insert("title".into(), name.clone());
                }
                result.insert("version".into(), document["version"].clone());
                result.insert("metadata".into(), document["metadata"].clone());
                if attributes_only {
                    result.insert("view".into(), json!("attributes"));
                } else if format == Format::Json {
                    result.insert("resource".into(), resource);
                } else {
                    let content = blocks(&document["content"]);
                    let body = self.resolved(content).await;
                    let empty = Map::new();
                    let metadata = document["metadata"].as_object().unwrap_or(&empty);
                    let mut markdown = frontmatter(metadata);
                    if !body.is_empty() {
                        markdown.push('\n');
                        markdown.push_str(&body);
                    }
                    result.insert("markdown".into(), json!(bounded(markdown)));
                }
            }
            Some("comment") => {
                result.insert("version".into(), resource["comment"]["version"].clone());
                if format == Format::Json {
                    result.insert("resource".into(), resource);
                } else {
                    let body = self.resolved(blocks(&resource["comment"]["content"])).await;
                    result.insert("markdown".into(), json!(bounded(body)));
                }
            }
            _ => {
                result.insert("resource".into(), resource);
            }
        }
        Ok(Value::Object(result))
    }

    /// The resource at the packed id `packed`, checked as a read checks
    /// it.
    pub(super) async fn resource(&self, packed: &str) -> Result<Value, HmError> {
        let resource = self
            .client
            .query("Resource", &QueryInput::Id(packed.to_owned()))
            .await?;
        valid_resource(resource)
    }

    /// `promptBlocksToResolvedMarkdown`: prompt blocks as the model reads
    /// them, resolved, without empty frontmatter or id comments.
    pub async fn prompt_markdown(&self, blocks: &[Value]) -> String {
        prompt::strip(&self.resolved(blocks).await)
    }

    /// `contentToResolvedMarkdown`: the lookups first, then the rendering.
    /// Embedded resources are fetched level by level, as deep as they are
    /// inlined; every level's mentions and queries are looked up too.
    async fn resolved(&self, content: &[Value]) -> String {
        let mut lookups = Lookups::default();
        let mut rendered: Vec<Value> = content.to_vec();
        let mut level: Vec<Value> = content.to_vec();
        let mut kept = 0usize;
        for _ in 0..prompt::MAX_EMBED_DEPTH {
            let links: Vec<String> = prompt::embed_block_links(&level)
                .into_iter()
                .filter(|link| !lookups.embeds.contains_key(link))
                .take(MAX_LOOKUPS.saturating_sub(lookups.embeds.len()))
                .collect();
            let fetched: Vec<(String, Option<Embedded>)> = stream::iter(links)
                .map(|link| async move {
                    let embedded = self.embedded(&link).await;
                    (link, embedded)
                })
                .buffer_unordered(LOOKUPS_AT_ONCE)
                .collect()
                .await;
            level = Vec::new();
            for (link, embedded) in fetched {
                let Some(embedded) = embedded else { continue };
                // What a read keeps of embedded resources is bounded: past
                // the bound an embed shows its link, as a failed one does.
                let size = embedded
                    .content
                    .iter()
                    .map(|node| node.to_string().len())
                    .sum::<usize>();
                if kept + size > MAX_EMBEDDED_BYTES {
                    continue;
                }
                kept += size;
                if let Some(id) = HmId::unpack(&link) {
                    level.extend(prompt::select_embedded(&embedded.content, &id));
                }
                lookups.embeds.insert(link, embedded);
            }
            rendered.extend(level.iter().cloned());
        }
        let links = prompt::embed_links(&rendered);
        let queries = prompt::query_requests(&rendered);
        let references: Vec<(String, Option<Reference>)> =
            stream::iter(links.into_iter().take(MAX_LOOKUPS))
                .map(|link| async move {
                    let reference = self.reference(&link).await;
                    (link, reference)
                })
                .buffer_unordered(LOOKUPS_AT_ONCE)
                .collect()
                .await;
        lookups.references = references
            .into_iter()
            .filter_map(|(link, reference)| Some((link, reference?)))
            .collect();
        let answers: Vec<(String, Result<Vec<String>, String>)> =
            stream::iter(queries.into_iter().take(MAX_LOOKUPS))
                .map(|request| async move {
                    let answer = self.query_lines(&request).await;
                    (request.to_string(), answer)
                })
                .buffer_unordered(LOOKUPS_AT_ONCE)
                .collect()
                .await;
        lookups.queries = answers.into_iter().collect::<HashMap<_, _>>();
        prompt::resolved_content(content, &lookups)
    }

    /// `resolveEmbeddedResource`: the resource an Embed block links to
    /// (never an account: `hm://<uid>` embeds its home document), labelled;
    /// `None` when the lookup failed.
    async fn embedded(&self, link: &str) -> Option<Embedded> {
        let id = HmId::unpack(link)?;
        let resource = self
            .client
            .query("Resource", &QueryInput::Id(id.pack()?))
            .await
            .ok()
            .and_then(|r| valid_resource(r).ok())?;
        let label = self.label(&id, &resource).await;
        let content = match resource["type"].as_str() {
            Some("document") => resource["document"]["content"].clone(),
            Some("comment") => resource["comment"]["content"].clone(),
            _ => Value::Null,
        };
        Some(Embedded {
            label,
            content: match content {
                Value::Array(content) => content,
                _ => Vec::new(),
            },
        })
    }

    /// A resource's label: a document's name, `Comment by <author>`, or
    /// the link's path or shortened account.
    async fn label(&self, id: &HmId, resource: &Value) -> String {
        match resource["type"].as_str() {
            Some("document") => resource["document"]["metadata"]["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .unwrap_or_else(|| fallback_doc_label(id)),
            Some("comment") => {
                let author = resource["comment"]["author"].as_str().unwrap_or_default();
                let name = self.account_name(author).await.flatten();
                format!(
                    "Comment by {}",
                    name.unwrap_or_else(|| fallback_uid(author))
                )
            }
            _ => fallback_doc_label(id),
        }
    }

    /// `resolveReference`: an account's name for a profile link, else the
    /// name of the document or comment it points at; `None` when the
    /// lookups fail (the fallback label shows).
    async fn reference(&self, link: &str) -> Option<Reference> {
        let id = HmId::unpack(link)?;
        let profile = match id.path.first().map(String::as_str) {
            Some(":profile") => Some(id.path.get(1).cloned().unwrap_or_else(|| id.uid.clone())),
            None => Some(id.uid.clone()),
            Some(_) => None,
        };
        if let Some(uid) = profile {
            if let Some(name) = self.account_name(&uid).await {
                return Some(Reference {
                    label: name.unwrap_or_else(|| fallback_uid(&uid)),
                    account: true,
                });
            }
        }
        let packed = id.pack()?;
        let resource = self
            .client
            .query("Resource", &QueryInput::Id(packed))
            .await
            .ok()
            .and_then(|r| valid_resource(r).ok())?;
        let label = self.label(&id, &resource).await;
        Some(Reference {
            label,
            account: false,
        })
    }

    /// An account's display name for a conversation's members, as the
    /// reference looks it up: within a second, trimmed and cut to 200
    /// characters, kept five minutes (thirty seconds after a failure).
    pub async fn display_name(&self, uid: &str) -> Option<String> {
        use std::time::{Duration, Instant};
        let now = Instant::now();
        let cached = {
            let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
            names.get(uid).filter(|(_, until)| *until > now).cloned()
        };
        if let Some((name, _)) = cached {
            return name;
        }
        let input = QueryInput::Id(uid.to_owned());
        let lookup = self.client.query("Account", &input);
        let (name, keep) = match tokio::time::timeout(Duration::from_secs(1), lookup).await {
            Ok(Ok(account)) => {
                let name = (account["type"] == "account")
                    .then(|| account["metadata"]["name"].as_str())
                    .flatten()
                    .map(|n| n.trim().chars().take(200).collect::<String>())
                    .filter(|n| !n.is_empty());
                (name, Duration::from_secs(300))
            }
            _ => (None, Duration::from_secs(30)),
        };
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if names.len() >= MAX_CACHED_NAMES {
            names.retain(|_, (_, until)| *until > now);
            if names.len() >= MAX_CACHED_NAMES {
                names.clear();
            }
        }
        names.insert(uid.to_owned(), (name.clone(), now + keep));
        name
    }

    /// An account's display name: `Some(None)` for an account without one,
    /// `None` when there is no such account or the lookup failed.
    async fn account_name(&self, uid: &str) -> Option<Option<String>> {
        let account = self
            .client
            .query("Account", &QueryInput::Id(uid.to_owned()))
            .await
            .ok()?;
        if account["type"].as_str() != Some("account") {
            return None;
        }
        Some(
            account["metadata"]["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
        )
    }

    /// A Query block's results as markdown lines, or the error's message.
    async fn query_lines(&self, request: &Value) -> Result<Vec<String>, String> {
        // Objects go into the URL as JSON in the schema's key order.
        let ordered = |value: Option<&Value>, keys: &[&str]| {
            let items = value
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            let objects: Vec<String> = items
                .iter()
                .map(|item| {
                    let members: Vec<String> = keys
                        .iter()
                        .filter_map(|key| {
                            let value = item.get(*key).filter(|v| !v.is_null())?;
                            Some(format!("{}:{value}", Value::from(*key)))
                        })
                        .collect();
                    format!("{{{}}}", members.join(","))
                })
                .collect();
            Param::Json(format!("[{}]", objects.join(",")))
        };
        let fields = vec![
            (
                "includes",
                ordered(request.get("includes"), &["space", "path", "mode"]),
            ),
            ("sort", ordered(request.get("sort"), &["reverse", "term"])),
            (
                "limit",
                Param::Text(
                    request
                        .get("limit")
                        .map(Value::to_string)
                        .unwrap_or_default(),
                ),
            ),
        ];
        let answer = self
            .client
            .query("Query", &QueryInput::Fields(fields))
            .await
            .map_err(|e| e.to_string())?;
        let results = match &answer {
            Value::Null => return Ok(Vec::new()),
            Value::Object(result) => match result.get("results") {
                Some(Value::Array(results)) => results,
                _ => return Err("invalid answer from Query: no results".into()),
            },
            _ => return Err("invalid answer from Query: not an object".into()),
        };
        Ok(results
            .iter()
            .map(|info| {
                let id = &info["id"];
                let name = info["metadata"]["name"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .or_else(|| {
                        id["path"]
                            .as_array()
                            .map(|path| {
                                path.iter()
                                    .filter_map(Value::as_str)
                                    .collect::<Vec<_>>()
                                    .join("/")
                            })
                            .filter(|p| !p.is_empty())
                    })
                    .unwrap_or_else(|| id["uid"].as_str().unwrap_or_default().to_owned());
                format!("- [{name}]({})", id["id"].as_str().unwrap_or_default())
            })
            .collect())
    }
}

/// The id a read asks the server for: a comment named through a
/// document's comment view becomes the comment's own id (its version and
/// block dropped, as the reference does).
fn resolve(requested: &str) -> Result<HmId, HmError> {
    let invalid = || HmError::InvalidAddress(format!("Invalid Hypermedia ID: {requested}"));
    if !requested.starts_with("hm://") {
        return Err(invalid());
    }
    let bare = requested
        .split('#')
        .next()
        .unwrap_or_default()
        .split('?')
        .next()
        .unwrap_or_default();
    if let Some(base) = HmId::unpack(bare) {
        let path = &base.path;
        let n = path.len();
        let comment = if n >= 3 && COMMENT_TERMS.contains(&path[n - 3].as_str()) {
            Some(format!("{}/{}", path[n - 2], path[n - 1]))
        } else if n >= 2 && COMMENT_TERMS.contains(&path[n - 2].as_str()) {
            Some(path[n - 1].clone())
        } else {
            None
        };
        if let Some(comment) = comment {
            return HmId::unpack(&format!("hm://{comment}"))
                .ok_or_else(|| HmError::InvalidAddress(format!("Invalid comment ID: {comment}")));
        }
    }
    HmId::unpack(requested).ok_or_else(invalid)
}

fn malformed(message: impl Into<String>) -> HmError {
    HmError::Malformed {
        key: "Resource".into(),
        message: message.into(),
    }
}

/// The resource, checked as strictly as the reference's schema checks it,
/// with the schema's defaults filled in.
fn valid_resource(mut resource: Value) -> Result<Value, HmError> {
    let Value::Object(map) = &mut resource else {
        return Err(malformed("the resource is not an object"));
    };
    if !map.get("id").is_some_and(Value::is_object) {
        return Err(malformed("the resource has no id"));
    }
    match map.get("type").and_then(Value::as_str) {
        Some("document") => {
            let Some(Value::Object(document)) = map.get_mut("document") else {
                return Err(malformed("a document resource has no document"));
            };
            valid_document(document)?;
        }
        Some("comment") => {
            let Some(Value::Object(comment)) = map.get_mut("comment") else {
                return Err(malformed("a comment resource has no comment"));
            };
            for key in ["id", "version", "author", "targetAccount", "targetVersion"] {
                if !comment.get(key).is_some_and(Value::is_string) {
                    return Err(malformed(format!("the comment's {key} is not a string")));
                }
            }
            valid_blocks(comment.get("content"), "the comment's content")?;
            visibility(comment)?;
        }
        Some("redirect") => {
            if !map.get("redirectTarget").is_some_and(Value::is_object) {
                return Err(malformed("a redirect has no redirectTarget"));
            }
            map.entry("republish").or_insert(json!(false));
        }
        Some("error") => {
            if !map.get("message").is_some_and(Value::is_string) {
                return Err(malformed("an error resource has no message"));
            }
        }
        Some("not-found" | "tombstone") => {}
        _ => {
            return Err(malformed(
                "Invalid discriminator value. Expected 'document' | 'comment' | 'redirect' | 'not-found' | 'tombstone' | 'error'",
            ))
        }
    }
    Ok(resource)
}

fn valid_document(document: &mut Map<String, Value>) -> Result<(), HmError> {
    match document.get("authors") {
        Some(Value::Array(authors)) if authors.iter().all(Value::is_string) => {}
        _ => return Err(malformed("the document's authors are not strings")),
    }
    if !document.get("metadata").is_some_and(Value::is_object) {
        return Err(malformed("the document's metadata is not an object"));
    }
    if !document.get("genesis").is_some_and(Value::is_string) {
        return Err(malformed("the document's genesis is not a string"));
    }
    for key in ["version", "account", "path", "createTime", "updateTime"] {
        document.entry(key).or_insert(json!(""));
    }
    document.entry("content").or_insert(json!([]));
    valid_blocks(document.get("content"), "the document's content")?;
    visibility(document)
}

/// `visibility` is required; its spellings map to `PUBLIC` or `PRIVATE`.
fn visibility(map: &mut Map<String, Value>) -> Result<(), HmError> {
    let mapped = match map.get("visibility") {
        Some(Value::String(v))
            if matches!(v.as_str(), "RESOURCE_VISIBILITY_PRIVATE" | "PRIVATE") =>
        {
            "PRIVATE"
        }
        Some(Value::Number(n)) if n.as_f64() == Some(2.0) => "PRIVATE",
        Some(Value::String(_) | Value::Number(_)) => "PUBLIC",
        _ => return Err(malformed("visibility is required")),
    };
    map.insert("visibility".into(), json!(mapped));
    Ok(())
}

/// Block nodes: each an object whose `block` has a string `id` and `type`,
/// with children that are block nodes too.
fn valid_blocks(nodes: Option<&Value>, what: &str) -> Result<(), HmError> {
    fn check(nodes: &[Value], depth: usize) -> bool {
        depth <= 64
            && nodes.iter().all(|node| {
                let block = &node["block"];
                block["id"].is_string()
                    && block["type"].is_string()
                    && match node.get("children") {
                        None | Some(Value::Null) => true,
                        Some(Value::Array(children)) => check(children, depth + 1),
                        Some(_) => false,
                    }
            })
    }
    match nodes {
        Some(Value::Array(nodes)) if check(nodes, 0) => Ok(()),
        _ => Err(malformed(format!("{what} is not a list of blocks"))),
    }
}

fn blocks(content: &Value) -> &[Value] {
    content.as_array().map_or(&[], Vec::as_slice)
}

/// `ensureToolResultSize`: past 256 KiB, the text up to there and a
/// notice. (The reference cuts at 262,144 UTF-16 units, which can leave
/// more than 256 KiB; this cuts at that many bytes, on a character
/// boundary.)
pub(super) fn bounded(mut markdown: String) -> String {
    if markdown.len() <= MAX_MARKDOWN_BYTES {
        return markdown;
    }
    let mut end = MAX_MARKDOWN_BYTES;
    while !markdown.is_char_boundary(end) {
        end -= 1;
    }
    markdown.truncate(end);
    markdown.push_str("\n[truncated]");
    markdown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_views_resolve_to_the_comment_and_other_ids_stay() {
        let id = |text| resolve(text).map(|id| id.pack().unwrap_or_default());
        assert_eq!(
            id("hm://doc-author/doc/:comments/comment-author/comment-tsid").unwrap(),
            "hm://comment-author/comment-tsid"
        );
        assert_eq!(id("hm://a/b/:discussions/c/d?v=1#x").unwrap(), "hm://c/d");
        assert_eq!(id("hm://doc/x/:comment/tsidonly").unwrap(), "hm://tsidonly");
        assert_eq!(id("hm://u/doc?v=V#b").unwrap(), "hm://u/doc?v=V#b");
        assert!(matches!(id("hm:abc"), Err(HmError::InvalidAddress(_))));
    }

    #[test]
    fn long_markdown_is_cut_and_marked() {
        assert_eq!(bounded("short".into()), "short");
        let long = "é".repeat(200_000);
        let cut = bounded(long);
        assert!(cut.ends_with("\n[truncated]"));
        assert_eq!(cut.chars().count(), MAX_MARKDOWN_BYTES / 2 + 12);
    }
}
