//! Documents: `document.create` (its parent must exist), `document.update`
//! (state from `ListChanges`, only changed blocks replaced, a stale
//! `expectedVersion` answered), and the refs that delete, redirect, fork and
//! move one.

use super::*;

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
    /// `document.create`; `extra` blobs (a document's files) go in the same
    /// publish.
    pub(super) async fn document_create(
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
    pub(super) async fn document_update(
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

    pub(super) async fn document_delete(
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

    pub(super) async fn document_redirect(
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
    pub(super) async fn document_fork(
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
    pub(super) async fn document_move(
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
}
