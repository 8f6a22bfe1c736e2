//! `read{address, format?, options?}`: memory files and listings, tool
//! contracts, the agent's triggers, the session's attachments, the agent
//! itself, the account's threads, hypermedia documents, comments,
//! profiles and directories (`hm://`) and the activity feed (`activity:`)
//! from the VM's hypermedia server, and web pages when granted.
//! `ipfs://` and `run:` answer a result the model can read.

use agentos_protocol::agent_ext::{
    cut_with_notice, output_text, ImagePart, VerbResult, MAX_TEXT_ATTACHMENT_BYTES,
    STORED_RESULT_BYTES,
};
use agentos_protocol::host::{EventKind, StoredEvent};
use agentos_protocol::seed::model::{is_model_image, is_text_type, looks_like};
use base64::Engine as _;
use serde_json::{json, Value};

use super::{failure, success, VerbScope, Verbs};
use crate::space::registry;

/// Events `thread:<id>` shows, newest last.
const THREAD_EVENTS: u64 = 200;
/// Threads `thread:` lists.
const THREAD_LIST: u32 = 50;

pub(super) async fn run(verbs: &Verbs, scope: &VerbScope, input: &Value) -> VerbResult {
    let Some(address) = input["address"].as_str() else {
        return failure("invalid_argument", "`address` must be a string");
    };
    let address = address.trim();
    if address == "~/memory" || address.starts_with("~/memory/") {
        let path = address
            .strip_prefix("~/memory")
            .unwrap_or_default()
            .trim_matches('/');
        return memory(verbs, scope, path).await;
    }
    if address == "~/tools" || address == "~/tools/" {
        return tool_listing(verbs, scope).await;
    }
    if let Some(name) = address.strip_prefix("~/tools/") {
        if name.starts_with(crate::mcp::ADDRESS_PREFIX) {
            return super::mcp::contract(verbs, scope, name).await;
        }
        return contract(verbs, scope, name.trim_end_matches('/')).await;
    }
    if address == "~/triggers" || address == "~/triggers/" {
        return match verbs.triggers.read_listing(&scope.agent_id).await {
            Ok(listing) => success(listing),
            Err(e) => failure(e.code(), e),
        };
    }
    if let Some(name) = address.strip_prefix("~/triggers/") {
        let name = name.trim_end_matches('/');
        return match verbs.triggers.read_one(&scope.agent_id, name).await {
            Ok(one) => success(one),
            Err(e) => failure(e.code(), e),
        };
    }
    if let Some(id) = address.strip_prefix("attachment:") {
        return attachment(verbs, scope, id).await;
    }
    if address == "~/self" {
        return success(json!({
            "agentId": scope.agent_id,
            "name": scope.agent_name,
            "model": scope.model,
            "modelProvider": scope.provider,
            "grants": granted_names(scope),
            "sessionId": scope.session_id,
        }));
    }
    if address == "thread:" {
        let query = input["options"]["query"].as_str().unwrap_or_default();
        return threads(verbs, scope, query).await;
    }
    if let Some(id) = address.strip_prefix("thread:") {
        return thread(verbs, scope, id).await;
    }
    if let Some(id) = address.strip_prefix("run:") {
        return failure(
            "not_found",
            format!("no run {id:?}: runs arrive with the runs engine, which this sidecar does not have yet"),
        );
    }
    if address.starts_with("hm://") {
        let Some(hypermedia) = &verbs.hypermedia else {
            return failure(
                "address_unavailable",
                "hm:// addresses need a hypermedia server, which this sidecar has none of",
            );
        };
        let format = match input["format"].as_str() {
            Some("json") => crate::hypermedia::Format::Json,
            _ => crate::hypermedia::Format::Markdown,
        };
        return match hypermedia.read(address, format).await {
            Ok(result) => success(result),
            Err(e) => failure(e.code(), e),
        };
    }
    if address.starts_with("activity:") {
        let Some(hypermedia) = &verbs.hypermedia else {
            return failure(
                "address_unavailable",
                "activity: needs a hypermedia server, which this sidecar has none of",
            );
        };
        return match hypermedia
            .activity(&scope.account_id, &input["options"])
            .await
        {
            Ok(result) => success(result),
            Err(e) => failure(e.code(), e),
        };
    }
    if address.starts_with("ipfs://") {
        return ipfs(verbs, scope, address, input["options"]["path"].as_str()).await;
    }
    if address.starts_with("https://") {
        if !registry::granted(scope.grants(), "web_fetch") {
            return failure(
                "not_granted",
                "reading web pages needs the agent's web_fetch grant",
            );
        }
        return match verbs.fetcher.fetch(address).await {
            Ok(page) => success(Value::String(page.text)),
            Err(e) => failure(e.code(), e),
        };
    }
    if address.starts_with("http://") {
        return failure("invalid_address", "only https:// pages can be read");
    }
    failure(
        "invalid_address",
        format!(
            "{address:?} is not an address this agent can read; see the read verb's description"
        ),
    )
}

/// `read ipfs://<cid>`: the gateway's file saved into the agent's memory
/// (at `options.path`, else `ipfs/<cid>` with an extension from its type),
/// as the reference does; its text comes back when it is UTF-8 without NUL.
async fn ipfs(verbs: &Verbs, scope: &VerbScope, address: &str, path: Option<&str>) -> VerbResult {
    let (Some(hypermedia), Some(gateway)) = (&verbs.hypermedia, &verbs.ipfs) else {
        return failure(
            "address_unavailable",
            "ipfs:// needs a hypermedia server, which this sidecar has none of",
        );
    };
    let cid = match crate::hypermedia::ipfs_cid(address) {
        Ok(cid) => cid,
        Err(e) => return failure(e.code(), e),
    };
    let path = path
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map_or_else(|| format!("ipfs/{cid}"), str::to_owned);
    let saved = match gateway
        .into_memory(
            &verbs.uploads,
            &scope.agent_id,
            &hypermedia.ipfs_url(&cid),
            Some(&path),
        )
        .await
    {
        Ok(saved) => saved,
        Err(e) => return failure(e.code(), e),
    };
    let entry = saved.entry;
    let mime = saved
        .content_type
        .as_deref()
        .and_then(|t| t.split(';').next())
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .or_else(|| crate::space::memory::mime_type(&entry.path).map(str::to_owned));
    let mut out = json!({"path": entry.path, "cid": cid, "size": entry.size, "mimeType": mime});
    let text = if entry.size <= STORED_RESULT_BYTES as u64 {
        verbs
            .memory
            .read(&scope.agent_id, &entry.path, STORED_RESULT_BYTES as u64)
            .await
            .ok()
            .and_then(|file| String::from_utf8(file.data).ok())
            .filter(|text| !text.contains('\0'))
    } else {
        None
    };
    match text {
        Some(text) => {
            out["summary"] = json!(format!(
                "Fetched ipfs://{cid} to {} ({} bytes).",
                entry.path, entry.size
            ));
            out["content"] = json!(text);
        }
        None => {
            let kind = mime
                .as_deref()
                .map(|m| format!(", {m}"))
                .unwrap_or_default();
            out["summary"] = json!(format!(
                "Fetched ipfs://{cid} to {} ({} bytes{kind}); binary content not shown.",
                entry.path, entry.size
            ));
        }
    }
    success(out)
}

/// `read attachment:<id>`: one of this session's attachments. An image up
/// to 4.5 MB is shown to a model that takes images (the result carries it
/// beside its description); text up to 256 KiB comes back as its content
/// (decoded lossily, a leading byte-order mark dropped); anything else as
/// what it is and why it is not shown.
async fn attachment(verbs: &Verbs, scope: &VerbScope, id: &str) -> VerbResult {
    let info = match verbs.attachments.info(&scope.session_id, id).await {
        Ok(found) => found,
        Err(e) => return failure(e.code(), e),
    };
    let mime = info.mime_type.clone().unwrap_or_default();
    let mut out =
        json!({"id": info.id, "name": info.name, "size": info.size, "shownAsImage": false});
    if let Some(mime) = &info.mime_type {
        out["mimeType"] = json!(mime);
    }
    let image = mime.starts_with("image/");
    let viewable = is_model_image(&mime);
    let shown = viewable && scope.image_input && info.size <= scope.image_max_bytes;
    // Only what is shown is read at all.
    if shown || (is_text_type(&mime) && info.size <= MAX_TEXT_ATTACHMENT_BYTES) {
        let data = match verbs.attachments.read(&scope.session_id, id).await {
            Ok((_, data)) => data,
            Err(e) => return failure(e.code(), e),
        };
        if shown && !looks_like(&mime, &data) {
            out["summary"] = json!(format!(
                "{} ({mime}, {} bytes); its bytes are not an image of that type. Save it to memory with write to keep it.",
                info.name, info.size
            ));
            return success(out);
        }
        if shown {
            out["summary"] = json!(format!(
                "Viewed {} ({mime}, {} bytes).",
                info.name, info.size
            ));
            out["shownAsImage"] = json!(true);
            let mut result = success(out);
            result.images.push(ImagePart {
                mime_type: mime,
                data: base64::engine::general_purpose::STANDARD.encode(&data),
            });
            return result;
        }
        let text = String::from_utf8_lossy(&data);
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        out["summary"] = json!(format!("Read {} ({} bytes).", info.name, info.size));
        out["content"] = json!(text);
        return success(out);
    }
    let reason = match (image, viewable, scope.image_input) {
        (true, _, false) => "this model does not support image input",
        (true, true, true) => "the image is too large to view inline",
        (true, false, true) => "models are shown PNG, JPEG, GIF and WebP images only",
        (false, _, _) => "the content is not viewable inline",
    };
    out["summary"] = json!(format!(
        "{} ({}, {} bytes); {reason}. Save it to memory with write to keep it.",
        info.name,
        info.mime_type.as_deref().unwrap_or("unknown type"),
        info.size
    ));
    success(out)
}

/// The builtins the agent's grants offer.
fn granted_names(scope: &VerbScope) -> Vec<String> {
    registry::builtins()
        .into_iter()
        .map(|doc| doc.name)
        .filter(|name| registry::granted(scope.grants(), name))
        .collect()
}

async fn memory(verbs: &Verbs, scope: &VerbScope, path: &str) -> VerbResult {
    let listing = |entries: Vec<crate::space::MemoryEntry>| {
        let lines: Vec<String> = entries
            .iter()
            .map(|e| {
                if e.is_dir {
                    format!("{}/", e.path)
                } else {
                    format!("{} ({} bytes)", e.path, e.size)
                }
            })
            .collect();
        if lines.is_empty() {
            success(Value::String("(empty)".into()))
        } else {
            success(Value::String(lines.join("\n")))
        }
    };
    if path.is_empty() {
        return match verbs.memory.list(&scope.agent_id).await {
            Ok(entries) => listing(entries),
            Err(e) => failure(e.code(), e),
        };
    }
    match verbs.memory.stat(&scope.agent_id, path).await {
        Ok(Some(entry)) if entry.is_dir => {
            return match verbs.memory.list_dir(&scope.agent_id, path).await {
                Ok(entries) => listing(entries),
                Err(e) => failure(e.code(), e),
            }
        }
        Ok(Some(_)) => {}
        Ok(None) => return failure("not_found", format!("~/memory/{path} does not exist")),
        Err(e) => return failure(e.code(), e),
    }
    match verbs
        .memory
        .read(&scope.agent_id, path, STORED_RESULT_BYTES as u64)
        .await
    {
        Ok(file) => match String::from_utf8(file.data) {
            Ok(text) => success(Value::String(text)),
            Err(_) => success(Value::String(format!(
                "{path} is a binary file of {} bytes",
                file.size
            ))),
        },
        Err(e) => failure(e.code(), e),
    }
}

async fn tool_listing(verbs: &Verbs, scope: &VerbScope) -> VerbResult {
    match verbs
        .tools
        .list(&scope.account_id, &scope.agent_id, scope.grants())
        .await
    {
        Ok(tools) => {
            let lines: Vec<String> = tools
                .iter()
                .map(|t| {
                    let mut line = format!("- {} — {}", t.document.name, t.document.summary);
                    if !t.granted {
                        line.push_str(" (not granted)");
                    } else if !t.enabled {
                        line.push_str(" (disabled)");
                    }
                    line
                })
                .collect();
            let (mcp_tools, notes) = super::mcp::listing(verbs, scope).await;
            let mut lines = lines;
            lines.extend(
                mcp_tools
                    .iter()
                    .map(|(name, summary)| format!("- {name} — {summary}")),
            );
            lines.extend(notes);
            success(Value::String(format!(
                "Callable tools (read ~/tools/<name> for a contract):\n{}",
                lines.join("\n")
            )))
        }
        Err(e) => failure(e.code(), e),
    }
}

async fn contract(verbs: &Verbs, scope: &VerbScope, name: &str) -> VerbResult {
    match verbs
        .tools
        .get(&scope.account_id, &scope.agent_id, name)
        .await
    {
        Ok(Some(record)) => success(Value::String(record.contract_markdown())),
        Ok(None) => failure(
            "not_found",
            format!("no tool named {name:?}; read ~/tools/ for the list"),
        ),
        Err(e) => failure(e.code(), e),
    }
}

async fn threads(verbs: &Verbs, scope: &VerbScope, query: &str) -> VerbResult {
    let page = match verbs
        .control
        .list_sessions_page(&scope.threads(), None, THREAD_LIST)
        .await
    {
        Ok(page) => page,
        Err(e) => return failure(e.code(), "the account's threads cannot be read"),
    };
    let needle = query.to_lowercase();
    let mut lines = Vec::new();
    for row in page.sessions {
        // Sessions of agents the owner only collaborates on are not the
        // agent's to read.
        if !scope.sees_thread(&row.account_id, &row.agent_id) {
            continue;
        }
        let title = match verbs.store.get_session(&row.session_id).await {
            Ok(Some(session)) => session.title.unwrap_or_default(),
            Ok(None) => continue,
            Err(_) => return failure("storage", "the account's threads cannot be read"),
        };
        if !needle.is_empty() && !title.to_lowercase().contains(&needle) {
            continue;
        }
        let here = if row.session_id == scope.session_id {
            " (this thread)"
        } else {
            ""
        };
        let shown = if title.is_empty() {
            "(untitled)"
        } else {
            &title
        };
        lines.push(format!("- thread:{} {shown}{here}", row.session_id));
    }
    if lines.is_empty() {
        return success(Value::String("no threads".into()));
    }
    success(Value::String(lines.join("\n")))
}

async fn thread(verbs: &Verbs, scope: &VerbScope, id: &str) -> VerbResult {
    let link = match verbs.control.session_agent(id).await {
        Ok(link) => link,
        Err(e) => return failure(e.code(), "the thread cannot be read"),
    };
    // Another account's thread is exactly as absent as a missing one.
    let Some(link) = link.filter(|l| scope.sees_thread(&l.account_id, &l.agent_id)) else {
        return failure("not_found", format!("no thread {id:?}"));
    };
    let page = match verbs
        .store
        .history(&link.session_id, None, None, THREAD_EVENTS)
        .await
    {
        Ok(page) => page,
        Err(_) => return failure("storage", "the thread cannot be read"),
    };
    let lines: Vec<String> = page.events.iter().filter_map(event_line).collect();
    success(Value::String(lines.join("\n")))
}

/// One event of another thread as a line of text: who said or did what.
fn event_line(event: &StoredEvent) -> Option<String> {
    if event.kind != EventKind::SessionUpdate {
        return None;
    }
    let update: Value = serde_json::from_str(&event.payload_json).ok()?;
    let who = event.actor.kind();
    let text = match update["sessionUpdate"].as_str()? {
        "user_message_chunk" | "agent_message_chunk" => {
            update["content"]["text"].as_str()?.to_owned()
        }
        "tool_call" => format!(
            "[tool call {} {}]",
            update["title"].as_str().unwrap_or_default(),
            update
                .get("rawInput")
                .map(Value::to_string)
                .unwrap_or_default()
        ),
        "tool_call_update" => format!(
            "[tool result {}: {}]",
            update["status"].as_str().unwrap_or_default(),
            update.get("rawOutput").map(output_text).unwrap_or_default()
        ),
        _ => return None,
    };
    Some(format!(
        "#{} {who}: {}",
        event.sequence,
        cut_with_notice(&text, 2048)
    ))
}
