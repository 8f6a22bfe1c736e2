//! Comments: `comment.create` (replies take the parent's version and thread
//! root), and `comment.update`/`delete`, which republish the same record id.

use super::*;

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

impl Hypermedia {
    pub(super) async fn comment_create(
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
                json!({"block": {"type": "Paragraph", "id": crate::hypermedia::publish::block_id(),
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

    pub(super) async fn comment_change(
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
}
