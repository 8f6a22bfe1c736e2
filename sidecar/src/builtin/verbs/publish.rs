//! `write hm://…` and `write ipfs://`: publishing, as the reference's
//! write verb does it. Both need the publish grant (the agent's tools
//! absent, or naming `publish` or `write`). An `hm://` write becomes one of
//! the hypermedia write commands (`document.create` by default, `update`,
//! `comment`, or a raw command name), signed by an identity the agent's
//! `signingKeys` name and its owner holds, chosen by `options.signer`
//! when there are several. An `ipfs://` write publishes a memory file or
//! an attachment of the session as IPFS blocks. Unknown options are
//! refused in the reference's words.

use agentos_protocol::agent_ext::VerbResult;
use serde_json::{json, Map, Value};

use super::{failure, success, VerbScope, Verbs};
use crate::control::identities::{identity, signing_key, KeyError};
use crate::hypermedia::write::{DraftScope, Signer};

/// Grants that allow publishing.
const PUBLISH_GRANTS: [&str; 5] = [
    "publish",
    "write",
    "memory_publish_document",
    "ipfs_write",
    "attachment_to_ipfs",
];

/// The largest file a write publishes to IPFS.
const MAX_IPFS_BYTES: u64 = 64 << 20;

const NOT_ENABLED: &str = "Publishing is not enabled for this agent. The owner can grant \"Publish Seed content\" in its tool settings.";

fn publish_enabled(scope: &VerbScope) -> bool {
    scope
        .grants
        .as_ref()
        .is_none_or(|grants| grants.iter().any(|g| PUBLISH_GRANTS.contains(&g.as_str())))
}

/// The reference's refusal of options a form does not take.
fn unknown_options(
    form: &str,
    options: &Map<String, Value>,
    allowed: &[&str],
    hm: bool,
) -> Option<VerbResult> {
    let unknown: Vec<&String> = options
        .keys()
        .filter(|k| !allowed.contains(&k.as_str()))
        .collect();
    if unknown.is_empty() {
        return None;
    }
    let listed: Vec<String> = unknown.iter().map(|k| format!("{k:?}")).collect();
    let mut message = format!(
        "write {form} does not understand option{} {}. Supported options: {}.",
        if unknown.len() == 1 { "" } else { "s" },
        listed.join(", "),
        if allowed.is_empty() {
            "(none)".to_owned()
        } else {
            allowed.join(", ")
        }
    );
    for key in &unknown {
        match key.as_str() {
            "title" => message.push_str(" A document has no separate title — its name lives in metadata.name; pass {name} (or metadata: {name})."),
            "dryRun" => message.push_str(" dryRun is a top-level field on the write call itself, next to address and content."),
            _ => {}
        }
    }
    if hm {
        message
            .push_str(" Extra command fields belong in options.input, never as loose option keys.");
    }
    Some(failure("invalid_argument", message))
}

/// `hm://<account>[/<path>]`: the account and the path (`/` for home).
fn hm_address(address: &str) -> Option<(String, String)> {
    let rest = address.strip_prefix("hm://")?;
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let rest = &rest[..end];
    let (account, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, ""),
    };
    if account.is_empty() {
        return None;
    }
    let path = if path.is_empty() || path == "/" {
        "/".to_owned()
    } else {
        let trimmed = path.trim_end_matches('/');
        if trimmed.is_empty() { "/" } else { trimmed }.to_owned()
    };
    Some((account.to_owned(), path))
}

/// The signer of a write: the identity `selector` names among those the
/// agent may use, in the reference's words when there is none.
async fn resolve_signer(
    verbs: &Verbs,
    scope: &VerbScope,
    selector: Option<&Value>,
) -> Result<(Signer, String), VerbResult> {
    let refuse = |message: &str| failure("invalid_argument", message);
    let secrets = verbs
        .control
        .list_secrets(&scope.account_id)
        .await
        .map_err(|e| failure(e.code(), e))?;
    let mut identities: Vec<(String, String, String)> = Vec::new();
    for name in &scope.signing_keys {
        if identities.iter().any(|(n, _, _)| n == name) {
            continue;
        }
        if let Some(found) = secrets.iter().find(|s| s.name == *name).and_then(identity) {
            let public_key = found.account_id.clone().unwrap_or_else(|| name.clone());
            let profile_name = found.label.clone().unwrap_or_else(|| name.clone());
            identities.push((name.clone(), public_key, profile_name));
        }
    }
    if identities.is_empty() {
        return Err(refuse("No signing identities are enabled for this agent"));
    }
    let pick = |key: &str, label: &str, none: &str| -> Result<Option<Vec<usize>>, VerbResult> {
        let Some(value) = selector.and_then(|s| s.get(key)).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let wanted = value.as_str().map(str::trim).unwrap_or("");
        if wanted.is_empty() {
            return Err(refuse(&format!("{label} is required")));
        }
        if wanted.len() > 256 {
            return Err(refuse(&format!("{label} is too large")));
        }
        let matches: Vec<usize> = identities
            .iter()
            .enumerate()
            .filter(|(_, (_, public_key, profile))| {
                if key == "publicKey" {
                    public_key == wanted
                } else {
                    profile == wanted
                }
            })
            .map(|(i, _)| i)
            .collect();
        if matches.is_empty() {
            return Err(refuse(none));
        }
        Ok(Some(matches))
    };
    let chosen = match pick(
        "publicKey",
        "Signer public key",
        "Signer public key is not enabled for this agent",
    )? {
        Some(matches) => matches,
        None => match pick(
            "profileName",
            "Signer profile name",
            "Signer profile name is not enabled for this agent",
        )? {
            Some(matches) => matches,
            None if identities.len() > 1 => {
                return Err(refuse(
                    "Multiple signing identities are enabled; choose a signer by profileName or publicKey",
                ))
            }
            None => vec![0],
        },
    };
    if chosen.len() > 1 {
        return Err(refuse(
            "Signing profile name is ambiguous; choose by publicKey",
        ));
    }
    let (secret, public_key, profile_name) = identities.swap_remove(chosen[0]);
    let key = signing_key(&verbs.control, &scope.account_id, &secret)
        .await
        .map_err(|e| match e {
            KeyError::Control(e) => failure(e.code(), e),
            other => failure("invalid_argument", other),
        })?;
    Ok((
        Signer {
            key,
            public_key,
            profile_name,
        },
        secret,
    ))
}

/// Keeps an identity's label after its profile was published under a new
/// name. The publish stands whatever happens here, so a failure is only
/// logged.
async fn relabel(verbs: &Verbs, scope: &VerbScope, secret: &str, name: &str, account: &str) {
    use agentos_protocol::seed::{cbor, Ipld};
    let secrets = match verbs.control.list_secrets(&scope.account_id).await {
        Ok(secrets) => secrets,
        Err(e) => {
            tracing::warn!(error = %e, "could not relabel a signing identity");
            return;
        }
    };
    let Some(metadata) = secrets
        .iter()
        .find(|s| s.name == secret)
        .and_then(|s| s.metadata.as_deref())
        .and_then(|m| cbor::from_slice::<Ipld>(m, 1 << 20).ok())
    else {
        return;
    };
    let Ipld::Map(mut map) = metadata else { return };
    map.insert("label".into(), Ipld::String(name.to_owned()));
    map.insert("accountId".into(), Ipld::String(account.to_owned()));
    let Ok(bytes) = cbor::to_canonical(&Ipld::Map(map)) else {
        return;
    };
    if let Err(e) = verbs
        .control
        .update_secret_metadata(&scope.account_id, secret, bytes)
        .await
    {
        tracing::warn!(error = %e, "could not relabel a signing identity");
    }
}

/// `write hm://…`.
pub(super) async fn hypermedia(
    verbs: &Verbs,
    scope: &VerbScope,
    address: &str,
    input: &Value,
    dry_run: bool,
) -> VerbResult {
    if !publish_enabled(scope) {
        return failure("forbidden", NOT_ENABLED);
    }
    let Some(hypermedia) = verbs.hypermedia.as_ref() else {
        return failure("address_unavailable", "no hypermedia server is configured");
    };
    let Some((account, path)) = hm_address(address) else {
        return failure(
            "invalid_argument",
            format!("Unrecognized write address: {address}. Supported: ~/memory/…, ipfs://, hm://<account>/<path>."),
        );
    };
    let empty = Map::new();
    let options = input["options"].as_object().unwrap_or(&empty);
    if let Some(from) = options
        .get("fromPath")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
    {
        if let Some(refused) =
            unknown_options("hm:// (fromPath)", options, &["fromPath", "signer"], false)
        {
            return refused;
        }
        return memory_document(verbs, scope, &account, &path, from, options, dry_run).await;
    }
    let action = options
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or("document")
        .to_owned();
    let mut allowed = vec!["action", "signer", "input", "skipLinkCheck"];
    allowed.extend_from_slice(match action.as_str() {
        "comment" => &["target", "replyTo"],
        "move" => &["toPath"],
        "redirect" => &["toUrl"],
        "delete" => &[],
        "fork" => &["fromUrl"],
        _ => &["name", "metadata"],
    });
    if let Some(refused) = unknown_options(
        &format!("hm:// (action \"{action}\")"),
        options,
        &allowed,
        true,
    ) {
        return refused;
    }
    if options.get("metadata").is_some_and(|m| !m.is_object()) {
        return failure(
            "invalid_argument",
            "write options.metadata must be an object of document metadata attributes",
        );
    }
    let mut command_input: Map<String, Value> = options
        .get("input")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if options.get("skipLinkCheck") == Some(&json!(true)) {
        command_input.insert("skipLinkCheck".into(), json!(true));
    }
    let content = input["content"].as_str();
    let mut set = |key: &str, value: Value| {
        command_input.insert(key.to_owned(), value);
    };
    let document_fields = |set: &mut dyn FnMut(&str, Value)| {
        if let Some(name) = options.get("name").filter(|n| n.is_string()) {
            set("name", name.clone());
        }
        if let Some(metadata) = options.get("metadata").filter(|m| m.is_object()) {
            set("metadata", metadata.clone());
        }
        if let Some(content) = content {
            set("content", json!(content));
            set("format", json!("markdown"));
        }
    };
    let command = match action.as_str() {
        "document" => {
            set("account", json!(account));
            set("path", json!(path));
            document_fields(&mut set);
            "document.create".to_owned()
        }
        "update" => {
            set("edit", json!(address));
            document_fields(&mut set);
            "document.update".to_owned()
        }
        "comment" => {
            set(
                "target",
                options
                    .get("target")
                    .cloned()
                    .unwrap_or_else(|| json!(address)),
            );
            if let Some(reply) = options.get("replyTo").filter(|r| r.is_string()) {
                set("replyTo", reply.clone());
            }
            if let Some(content) = content {
                set("content", json!(content));
            }
            "comment.create".to_owned()
        }
        "move" => {
            set("source", json!(address));
            if let Some(to) = options.get("toPath") {
                set("path", to.clone());
            }
            "document.move".to_owned()
        }
        // The reference's verb passes these three fields its handlers do
        // not read (so they fail unless `options.input` supplies them);
        // here the address and the option are given as the handlers read
        // them.
        "redirect" => {
            set("source", json!(address));
            if let Some(to) = options.get("toUrl") {
                set("to", to.clone());
            }
            "document.redirect".to_owned()
        }
        "delete" => {
            set("account", json!(account));
            set("path", json!(path));
            set("id", json!(address));
            "document.delete".to_owned()
        }
        "fork" => {
            set("account", json!(account));
            set("path", json!(path));
            set("destination", json!(address));
            if let Some(from) = options.get("fromUrl") {
                set("source", from.clone());
            }
            "document.fork".to_owned()
        }
        raw if raw.contains('.') => {
            set("account", json!(account));
            if path != "/" {
                set("path", json!(path));
            }
            document_fields(&mut set);
            raw.to_owned()
        }
        other => {
            return failure(
                "invalid_argument",
                format!("Unknown write action \"{other}\". Supported: document (default), update, comment, move, redirect, delete, fork, or a raw command like draft.create / profile.update."),
            )
        }
    };
    if options.get("signer").is_some_and(|s| !s.is_object()) {
        return failure("invalid_argument", "Write signer must be an object");
    }
    if command.starts_with("draft.") {
        let Some(store) = verbs.drafts.as_ref() else {
            return failure("address_unavailable", "drafts are not kept here");
        };
        let drafts = DraftScope {
            store,
            account_id: &scope.account_id,
            agent_id: &scope.agent_id,
        };
        // Only publishing a draft signs.
        let signer = if command == "draft.publish" {
            match resolve_signer(verbs, scope, options.get("signer")).await {
                Ok((signer, _)) => Some(signer),
                Err(refused) => return refused,
            }
        } else {
            None
        };
        return match hypermedia
            .draft(&drafts, signer.as_ref(), &command, &command_input, dry_run)
            .await
        {
            Ok(result) => success(result),
            Err(e) => failure(e.code(), e),
        };
    }
    let (signer, secret) = match resolve_signer(verbs, scope, options.get("signer")).await {
        Ok(resolved) => resolved,
        Err(refused) => return refused,
    };
    let result = match hypermedia
        .write(&signer, &command, &command_input, dry_run)
        .await
    {
        Ok(result) => result,
        Err(e) => return failure(e.code(), e),
    };
    if command == "profile.update" && !dry_run && result["type"] == "hypermedia_write_result" {
        // The identity's label follows its published profile.
        if let Some(name) = result["profile"]["name"].as_str() {
            relabel(verbs, scope, &secret, name, &signer.public_key).await;
        }
    }
    success(result)
}

/// `collapseMemoryPath`: `.` and `..` resolved; `None` when it leaves
/// memory or names nothing.
fn collapse(path: &str) -> Option<String> {
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split(['/', '\\']) {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop()?;
            }
            other => segments.push(other),
        }
    }
    (!segments.is_empty()).then(|| segments.join("/"))
}

/// The bytes of a file a published markdown file links: relative to the
/// file's directory, then to memory's root.
async fn linked_file(
    verbs: &Verbs,
    scope: &VerbScope,
    base_dir: &str,
    link: &str,
) -> Result<Vec<u8>, VerbResult> {
    let mut candidates: Vec<String> = Vec::new();
    if link.starts_with('/') || base_dir.is_empty() {
        candidates.extend(collapse(link));
    } else {
        candidates.extend(collapse(&format!("{base_dir}/{link}")));
        candidates.extend(collapse(link));
    }
    candidates.dedup();
    for candidate in candidates {
        if let Ok(file) = verbs
            .memory
            .read(&scope.agent_id, &candidate, MAX_IPFS_BYTES)
            .await
        {
            return Ok(file.data);
        }
    }
    Err(failure(
        "invalid_argument",
        format!("Linked file not found in memory: {link}"),
    ))
}

/// Rewrites the `file://` links of block nodes to `ipfs://` of the files'
/// blocks, which join `files`; answers how many blocks linked a file.
async fn rewrite_file_links(
    verbs: &Verbs,
    scope: &VerbScope,
    base_dir: &str,
    nodes: &mut [Value],
    files: &mut Vec<agentos_protocol::seed::blobs::PublishEntry>,
) -> Result<usize, VerbResult> {
    let mut count = 0;
    let mut stack: Vec<&mut Value> = nodes.iter_mut().collect();
    while let Some(node) = stack.pop() {
        if let Some(link) = node["block"]["link"]
            .as_str()
            .and_then(|l| l.strip_prefix("file://"))
            .map(str::to_owned)
        {
            count += 1;
            let bytes = linked_file(verbs, scope, base_dir, &link).await?;
            node["block"]["link"] = json!(format!("ipfs://{}", add_file(&bytes, files)));
        }
        if let Some(children) = node.get_mut("children").and_then(Value::as_array_mut) {
            stack.extend(children.iter_mut());
        }
    }
    Ok(count)
}

/// `bytes` as IPFS blocks added to `files` (each block once); answers the
/// root CID.
fn add_file(bytes: &[u8], files: &mut Vec<agentos_protocol::seed::blobs::PublishEntry>) -> String {
    let file = agentos_protocol::seed::unixfs::file_blocks(bytes);
    for block in file.blocks {
        let cid = block.cid.to_string();
        if !files.iter().any(|f| f.cid.as_deref() == Some(cid.as_str())) {
            files.push(agentos_protocol::seed::blobs::PublishEntry {
                cid: Some(cid),
                data: block.data,
            });
        }
    }
    file.root.to_string()
}

/// `write hm://… {fromPath}`: a markdown file of memory published as a
/// document, its linked files and frontmatter media as IPFS blocks in the
/// same publish.
async fn memory_document(
    verbs: &Verbs,
    scope: &VerbScope,
    account: &str,
    path: &str,
    from: &str,
    options: &Map<String, Value>,
    dry_run: bool,
) -> VerbResult {
    use crate::hypermedia::write::{MemoryDocument, MAX_WRITE_CONTENT_BYTES};
    let Some(hypermedia) = verbs.hypermedia.as_ref() else {
        return failure("address_unavailable", "no hypermedia server is configured");
    };
    if options.get("signer").is_some_and(|s| !s.is_object()) {
        return failure("invalid_argument", "Signer must be an object");
    }
    let from = from.strip_prefix("~/memory/").unwrap_or(from);
    let file = match verbs
        .memory
        .read(&scope.agent_id, from, MAX_WRITE_CONTENT_BYTES as u64)
        .await
    {
        Ok(file) => file,
        Err(crate::space::SpaceError::TooLarge { .. }) => {
            return failure(
                "invalid_argument",
                format!("Memory file {from} is too large to publish"),
            )
        }
        Err(e) => return failure(e.code(), e),
    };
    let Ok(text) = String::from_utf8(file.data) else {
        return failure(
            "invalid_argument",
            format!(
                "Memory file {} is not UTF-8 text; only markdown files can be published",
                file.path
            ),
        );
    };
    let parsed = agentos_protocol::seed::markdown::parse_markdown(
        &text,
        &mut crate::hypermedia::publish::block_id,
    );
    let mut nodes = agentos_protocol::seed::markdown::to_hm_block_nodes(&parsed.tree);
    let mut metadata = parsed.metadata;
    let base_dir = file
        .path
        .rsplit_once('/')
        .map_or("", |(dir, _)| dir)
        .to_owned();
    let mut files = Vec::new();
    let images = match rewrite_file_links(verbs, scope, &base_dir, &mut nodes, &mut files).await {
        Ok(images) => images,
        Err(refused) => return refused,
    };
    for (key, value) in metadata.iter_mut() {
        if !matches!(key.as_str(), "icon" | "cover" | "seedExperimentalLogo") {
            continue;
        }
        let Some(text) = value.as_str().filter(|t| !t.is_empty()) else {
            continue;
        };
        let has_scheme = text.split_once(':').is_some_and(|(scheme, _)| {
            scheme
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
        });
        if has_scheme && !text.starts_with("file://") {
            continue;
        }
        let link = text.trim_start_matches("file://").to_owned();
        let bytes = match linked_file(verbs, scope, &base_dir, &link).await {
            Ok(bytes) => bytes,
            Err(refused) => return refused,
        };
        *value = json!(format!("ipfs://{}", add_file(&bytes, &mut files)));
    }
    let (signer, _) = match resolve_signer(verbs, scope, options.get("signer")).await {
        Ok(resolved) => resolved,
        Err(refused) => return refused,
    };
    let document = MemoryDocument {
        path: file.path,
        nodes,
        metadata,
        files,
        images,
    };
    let target_path = (path != "/").then_some(path);
    match hypermedia
        .publish_memory_document(&signer, account, target_path, document, dry_run)
        .await
    {
        Ok(result) => success(result),
        Err(e) => failure(e.code(), e),
    }
}

/// `write ipfs://` with `{fromPath}` (a memory file) or
/// `{fromAttachment}` (one of the session's attachments).
pub(super) async fn ipfs(verbs: &Verbs, scope: &VerbScope, input: &Value) -> VerbResult {
    let empty = Map::new();
    let options = input["options"].as_object().unwrap_or(&empty);
    if let Some(refused) =
        unknown_options("ipfs://", options, &["fromPath", "fromAttachment"], false)
    {
        return refused;
    }
    if !publish_enabled(scope) {
        return failure("forbidden", NOT_ENABLED);
    }
    let Some(hypermedia) = verbs.hypermedia.as_ref() else {
        return failure("address_unavailable", "no hypermedia server is configured");
    };
    let text = |key: &str| {
        options
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    if let Some(id) = text("fromAttachment") {
        let info = match verbs.attachments.info(&scope.session_id, id).await {
            Ok(info) => info,
            Err(e) => return failure(e.code(), e),
        };
        if info.size > MAX_IPFS_BYTES {
            return failure(
                "too_large",
                format!(
                    "Attachment {} is larger than {MAX_IPFS_BYTES} bytes",
                    info.name
                ),
            );
        }
        let (info, data) = match verbs.attachments.read(&scope.session_id, id).await {
            Ok(read) => read,
            Err(e) => return failure(e.code(), e),
        };
        return match hypermedia.publish_file(&data).await {
            Ok(cid) => {
                let url = format!("ipfs://{cid}");
                success(json!({
                    "summary": format!("Published attachment {} to IPFS as {url}.", info.name),
                    "id": info.id, "name": info.name, "cid": cid, "url": url,
                    "size": info.size, "mimeType": info.mime_type,
                }))
            }
            Err(e) => failure(e.code(), e),
        };
    }
    let Some(path) = text("fromPath") else {
        return failure(
            "invalid_argument",
            "write ipfs:// requires options.fromPath (a memory path) or options.fromAttachment",
        );
    };
    let path = path.strip_prefix("~/memory/").unwrap_or(path);
    let file = match verbs
        .memory
        .read(&scope.agent_id, path, MAX_IPFS_BYTES)
        .await
    {
        Ok(file) => file,
        Err(e) => return failure(e.code(), e),
    };
    match hypermedia.publish_file(&file.data).await {
        Ok(cid) => {
            let url = format!("ipfs://{cid}");
            let mut out = json!({
                "summary": format!("Uploaded {} to IPFS as {url}.", file.path),
                "path": file.path, "cid": cid, "url": url, "size": file.size,
            });
            if let Some(mime) = crate::space::memory::mime_type(&file.path) {
                out["mimeType"] = json!(mime);
            }
            success(out)
        }
        Err(e) => failure(e.code(), e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_as_the_reference_reads_them() {
        assert_eq!(
            hm_address("hm://z6Mk/a/b/?v=x#blk"),
            Some(("z6Mk".into(), "/a/b".into()))
        );
        assert_eq!(hm_address("hm://z6Mk"), Some(("z6Mk".into(), "/".into())));
        assert_eq!(hm_address("hm://z6Mk/"), Some(("z6Mk".into(), "/".into())));
        assert_eq!(hm_address("hm:///x"), None);
    }

    #[test]
    fn unknown_options_are_refused_in_the_references_words() {
        let options = json!({"title": "x", "dryRun": true});
        let refused = unknown_options(
            "hm:// (action \"document\")",
            options.as_object().unwrap(),
            &["action", "name"],
            true,
        )
        .unwrap();
        assert_eq!(
            refused.output,
            json!("invalid_argument: write hm:// (action \"document\") does not understand options \"dryRun\", \"title\". Supported options: action, name. dryRun is a top-level field on the write call itself, next to address and content. A document has no separate title — its name lives in metadata.name; pass {name} (or metadata: {name}). Extra command fields belong in options.input, never as loose option keys.")
        );
    }
}
