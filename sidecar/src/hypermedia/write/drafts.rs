//! The `draft.*` commands over the draft store: drafts kept here until
//! `draft.publish` creates or updates their document as the signer.

use super::*;

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
    let mut markdown = crate::hypermedia::frontmatter::frontmatter(&metadata);
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
                        crate::hypermedia::drafts::MAX_DRAFTS_PER_AGENT
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
