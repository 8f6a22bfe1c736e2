//! An account's own records: `profile.update`/`alias`, `capability.create`
//! and `contact.create`/`delete`.

use super::*;

impl Hypermedia {
    pub(super) async fn profile_update(
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

    pub(super) async fn profile_alias(
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

    pub(super) async fn capability_create(
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

    pub(super) async fn contact_create(
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

    pub(super) async fn contact_delete(
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
