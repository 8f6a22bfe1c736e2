//! `write{address, content?, options?, dryRun?}`: memory files (never
//! gated; `{fromUrl}` saves a file from an address, `{fromAttachment}`
//! copies one of the session's attachments in), authored tool documents,
//! and publishing to `hm://` and `ipfs://` (`publish.rs`). An option
//! nobody knows is refused, as in the reference.

use agentos_protocol::agent_ext::VerbResult;
use serde_json::{json, Value};

use super::{failure, success, VerbScope, Verbs};

const MEMORY_OPTIONS: &[&str] = &["delete", "fromUrl", "fromAttachment"];
const TOOL_OPTIONS: &[&str] = &["delete", "previousName"];

fn unknown_option(options: &Value, known: &[&str]) -> Option<VerbResult> {
    let map = options.as_object()?;
    map.keys()
        .find(|k| !known.contains(&k.as_str()))
        .map(|k| failure("invalid_argument", format!("unknown option {k:?}")))
}

/// `write ~/memory/<path>` with `{fromAttachment}`: the attachment's bytes
/// saved at `path` (by default `attachments/<its name>`), copied a piece at
/// a time.
async fn from_attachment(
    verbs: &Verbs,
    scope: &VerbScope,
    id: &str,
    path: &str,
    dry_run: bool,
) -> VerbResult {
    if dry_run {
        return match verbs.attachments.info(&scope.session_id, id).await {
            Ok(info) => success(Value::String(format!(
                "would save attachment {} to ~/memory/{}",
                info.name,
                if path.is_empty() {
                    format!("attachments/{}", info.name)
                } else {
                    path.to_owned()
                }
            ))),
            Err(e) => failure(e.code(), e),
        };
    }
    let given = Some(path).filter(|p| !p.is_empty());
    match verbs
        .uploads
        .attachment_into_memory(&scope.session_id, id, &scope.agent_id, given)
        .await
    {
        Ok((info, entry)) => {
            let mut out = json!({
                "summary": format!(
                    "Saved attachment {} to memory at {} ({} bytes).",
                    info.name, entry.path, entry.size
                ),
                "id": info.id,
                "path": entry.path,
                "size": entry.size,
            });
            if let Some(mime) = crate::space::memory::mime_type(&entry.path) {
                out["mimeType"] = json!(mime);
            }
            success(out)
        }
        Err(e) => failure(e.code(), e),
    }
}

/// `write ~/memory/<path>` with `{fromUrl}`: the file at the address saved
/// at `path` (by default `downloads/<its name>`), as `DownloadAgentMemoryFile`
/// saves it (public addresses only, unless the operator allows others).
async fn from_url(
    verbs: &Verbs,
    scope: &VerbScope,
    url: &str,
    path: &str,
    dry_run: bool,
) -> VerbResult {
    if dry_run {
        return success(Value::String(format!(
            "would download {url} to ~/memory/{}",
            if path.is_empty() { "downloads/" } else { path }
        )));
    }
    let given = Some(path).filter(|p| !p.is_empty());
    match verbs
        .downloader
        .into_memory(&verbs.uploads, &scope.agent_id, url, given)
        .await
    {
        Ok(saved) => {
            let mime = crate::space::memory::mime_type(&saved.entry.path);
            let mut out = json!({
                "summary": format!(
                    "Downloaded {} to {} ({} bytes{}).",
                    saved.final_url,
                    saved.entry.path,
                    saved.entry.size,
                    mime.map(|m| format!(", {m}")).unwrap_or_default()
                ),
                "path": saved.entry.path,
                "size": saved.entry.size,
                "finalUrl": saved.final_url,
            });
            if let Some(mime) = mime {
                out["mimeType"] = json!(mime);
            }
            if let Some(kind) = saved.content_type {
                out["contentType"] = json!(kind);
            }
            success(out)
        }
        Err(e) => failure(e.code(), e),
    }
}

pub(super) async fn run(verbs: &Verbs, scope: &VerbScope, input: &Value) -> VerbResult {
    let Some(address) = input["address"].as_str() else {
        return failure("invalid_argument", "`address` must be a string");
    };
    let options = &input["options"];
    if !options.is_null() && !options.is_object() {
        return failure("invalid_argument", "`options` must be an object");
    }
    let dry_run = input["dryRun"].as_bool().unwrap_or(false);
    let delete = options["delete"].as_bool().unwrap_or(false);
    let memory_path = if address == "~/memory" {
        Some("")
    } else {
        address.strip_prefix("~/memory/")
    };
    if let Some(path) = memory_path {
        if let Some(refused) = unknown_option(options, MEMORY_OPTIONS) {
            return refused;
        }
        let path = path.trim_matches('/');
        if let Some(url) = options["fromUrl"].as_str().filter(|url| !url.is_empty()) {
            if !delete {
                return from_url(verbs, scope, url, path, dry_run).await;
            }
        }
        if let Some(id) = options["fromAttachment"]
            .as_str()
            .filter(|id| !id.is_empty())
        {
            if !delete {
                return from_attachment(verbs, scope, id, path, dry_run).await;
            }
        }
        if delete {
            if dry_run {
                return success(Value::String(format!("would delete ~/memory/{path}")));
            }
            return match verbs.memory.delete(&scope.agent_id, path).await {
                Ok(deleted) => success(json!({ "path": path, "deleted": deleted })),
                Err(e) => failure(e.code(), e),
            };
        }
        let Some(content) = input["content"].as_str() else {
            return failure("invalid_argument", "`content` must be a string");
        };
        if dry_run {
            return success(Value::String(format!(
                "would write {} bytes to ~/memory/{path}",
                content.len()
            )));
        }
        return match verbs
            .memory
            .write(&scope.agent_id, path, content.as_bytes())
            .await
        {
            Ok(entry) => success(json!({ "path": entry.path, "size": entry.size })),
            Err(e) => failure(e.code(), e),
        };
    }
    if let Some(name) = address.strip_prefix("~/tools/") {
        if let Some(refused) = unknown_option(options, TOOL_OPTIONS) {
            return refused;
        }
        let name = name.trim_end_matches('/');
        if delete {
            if dry_run {
                return success(Value::String(format!("would delete ~/tools/{name}")));
            }
            return match verbs
                .tools
                .delete_lambda(&scope.account_id, &scope.agent_id, name)
                .await
            {
                Ok(deleted) => success(json!({ "name": name, "deleted": deleted })),
                Err(e) => failure(e.code(), e),
            };
        }
        let document = match &input["content"] {
            Value::String(text) => match serde_json::from_str::<Value>(text) {
                Ok(value) => value,
                Err(e) => {
                    return failure(
                        "invalid_argument",
                        format!("`content` must be a JSON tool document: {e}"),
                    )
                }
            },
            Value::Object(_) => input["content"].clone(),
            _ => {
                return failure(
                    "invalid_argument",
                    "`content` must be a JSON tool document {description, input, output?, source, runtime?}",
                )
            }
        };
        let lambda = match crate::space::LambdaInput::from_json(name, &document) {
            Ok(lambda) => lambda,
            Err(e) => return failure(e.code(), e),
        };
        if dry_run {
            return success(Value::String(format!("would save the tool {name}")));
        }
        let previous = options["previousName"].as_str();
        return match verbs
            .tools
            .save_lambda(&scope.account_id, &scope.agent_id, lambda, previous)
            .await
        {
            Ok(record) => success(json!({ "name": record.document.name, "cid": record.cid })),
            Err(e) => failure(e.code(), e),
        };
    }
    if input
        .get("dryRun")
        .is_some_and(|d| !d.is_null() && !d.is_boolean())
    {
        return failure("invalid_argument", "write dryRun must be a boolean");
    }
    if address.starts_with("hm://") {
        return super::publish::hypermedia(verbs, scope, address, input, dry_run).await;
    }
    if address.starts_with("ipfs:") {
        if dry_run {
            return failure(
                "invalid_argument",
                "dryRun applies only to hm:// writes — it validates a publish without publishing",
            );
        }
        return super::publish::ipfs(verbs, scope, input).await;
    }
    failure(
        "invalid_address",
        format!("Unrecognized write address: {address}. Supported: ~/memory/…, ~/tools/…, ipfs://, hm://<account>/<path>."),
    )
}
