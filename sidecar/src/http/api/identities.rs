//! Signing identities: the hypermedia account keys the server holds for an
//! account, as the reference keeps them: vault secrets named
//! `hm-account-<the account's first 16 characters>` whose metadata says
//! `kind: 'hm-account-key'` (and the account, a label, the server). The
//! key itself is sealed like every secret and never answered.
//! `ListSigningIdentities` (an agent's reader sees the identities granted
//! to it; its owner all), `CreateSigningIdentity` (a fresh key whose
//! account is published, profile, genesis, home and ref, in one
//! `PublishBlobs` before anything is stored: a failed publish is a 502 and
//! keeps nothing), `ImportSigningIdentity` (publishes nothing; one key
//! once), `UpdateSigningIdentity` (its icon as IPFS blocks, then its
//! profile, republished) and `DeleteSigningIdentity` (the agents naming it
//! are left as they are).

use std::collections::BTreeMap;

use agentos_protocol::seed::response::{
    CreateSigningIdentityResponse, DeleteSigningIdentityResponse, ImportSigningIdentityResponse,
    ListSigningIdentitiesResponse, SigningIdentity, UpdateSigningIdentityResponse,
};
use agentos_protocol::seed::{cbor, encode_response, Action, ApiCode, Ipld, Principal, SigningKey};

use super::{ok, render, ApiError, Caller, SignedApi};
use crate::control::identities::{identity, identity_name, signing_key, KeyError, IDENTITY_KIND};
use crate::control::{authz, AccessRole, SecretPlaintext};
use crate::hypermedia::Hypermedia;

/// Labels and names, at most (UTF-8 bytes).
const MAX_LABEL_BYTES: usize = 256;

/// A label as the reference bounds it.
fn label(raw: Option<String>) -> Result<Option<String>, ApiError> {
    let Some(raw) = raw else { return Ok(None) };
    let label = raw.trim();
    if label.is_empty() {
        return Err(ApiError::bad_request(
            ApiCode::BadRequest,
            "Signing identity label is required",
        ));
    }
    if label.len() > MAX_LABEL_BYTES {
        return Err(ApiError::bad_request(
            ApiCode::BadRequest,
            "Signing identity label is too large",
        ));
    }
    Ok(Some(label.to_owned()))
}

/// A signing key's name as the reference bounds it.
fn key_name(raw: &str) -> Result<&str, ApiError> {
    let name = raw.trim();
    if name.is_empty() {
        return Err(ApiError::bad_request(
            ApiCode::BadRequest,
            "Signing key is required",
        ));
    }
    if name.len() > MAX_LABEL_BYTES {
        return Err(ApiError::bad_request(
            ApiCode::BadRequest,
            "Signing key is too large",
        ));
    }
    Ok(name)
}

impl SignedApi {
    /// The identities of `account`, newest first.
    async fn identities_of(&self, account: &str) -> Result<Vec<SigningIdentity>, ApiError> {
        let mut identities: Vec<SigningIdentity> = self
            .control
            .list_secrets(account)
            .await?
            .iter()
            .filter_map(identity)
            .collect();
        identities.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then_with(|| a.name.cmp(&b.name))
        });
        Ok(identities)
    }

    pub(super) async fn identity_action(
        &self,
        caller: &Caller,
        action: Action,
    ) -> Result<Vec<u8>, ApiError> {
        let account = &caller.account;
        match action {
            Action::ListSigningIdentities { agent_id } => {
                let (owner, granted) = match agent_id {
                    None => (account.clone(), None),
                    Some(agent_id) => {
                        let access = authz::require_read(&self.control, account, &agent_id).await?;
                        let granted = (access.access_role != AccessRole::Owner).then(|| {
                            render::definition(&access.agent.definition).map(|definition| {
                                definition
                                    .signing_keys
                                    .or_else(|| definition.signing_key.map(|key| vec![key]))
                                    .unwrap_or_default()
                            })
                        });
                        (access.agent.account_id, granted.transpose()?)
                    }
                };
                let identities = self
                    .identities_of(&owner)
                    .await?
                    .into_iter()
                    .filter(|i| granted.as_ref().is_none_or(|keys| keys.contains(&i.name)))
                    .collect();
                ok(&ListSigningIdentitiesResponse { identities })
            }
            Action::ImportSigningIdentity {
                seed,
                label: raw_label,
                client_request_id,
            } => {
                let seed: [u8; 32] = match seed {
                    Some(Ipld::Bytes(bytes)) => bytes.try_into().map_err(|_| {
                        ApiError::bad_request(
                            ApiCode::BadRequest,
                            "Key seed must be exactly 32 bytes",
                        )
                    })?,
                    _ => {
                        return Err(ApiError::bad_request(
                            ApiCode::BadRequest,
                            "Key seed must be exactly 32 bytes",
                        ))
                    }
                };
                let fields = Ipld::Map(BTreeMap::from([(
                    "label".to_owned(),
                    raw_label.clone().map_or(Ipld::Null, Ipld::String),
                )]));
                let label = label(raw_label)?;
                let run = || self.import_identity(account, seed, label);
                match client_request_id {
                    None => run().await,
                    Some(id) => {
                        // The seed is not part of the request, as the
                        // reference hashes it: the same id and label replay
                        // the first answer.
                        let key =
                            Self::idempotency_key(caller, "ImportSigningIdentity", &id, fields)?;
                        Ok(self.control.idempotent(key, run).await?.into_response())
                    }
                }
            }
            Action::CreateSigningIdentity {
                label: raw_label,
                client_request_id,
            } => {
                let fields = Ipld::Map(BTreeMap::from([(
                    "label".to_owned(),
                    raw_label.clone().map_or(Ipld::Null, Ipld::String),
                )]));
                let label = label(raw_label)?;
                let run = || self.create_identity(account, label);
                match client_request_id {
                    None => run().await,
                    Some(id) => {
                        let key =
                            Self::idempotency_key(caller, "CreateSigningIdentity", &id, fields)?;
                        Ok(self.control.idempotent(key, run).await?.into_response())
                    }
                }
            }
            Action::UpdateSigningIdentity {
                name,
                label: raw_label,
                icon,
            } => {
                let name = key_name(&name)?;
                let label = label(Some(raw_label.unwrap_or_default()))?.unwrap_or_default();
                let icon = match icon {
                    None | Some(Ipld::Null) => None,
                    Some(Ipld::Map(fields)) => match fields.get("data") {
                        Some(Ipld::Bytes(data)) => Some(data.clone()),
                        _ => {
                            return Err(ApiError::bad_request(
                                ApiCode::BadRequest,
                                "Icon data must be bytes",
                            ))
                        }
                    },
                    Some(_) => {
                        return Err(ApiError::bad_request(
                            ApiCode::BadRequest,
                            "Icon must be an object with data bytes",
                        ))
                    }
                };
                self.update_identity(account, name, label, icon).await
            }
            Action::DeleteSigningIdentity { name } => {
                let name = key_name(&name)?;
                let found = self
                    .control
                    .list_secrets(account)
                    .await?
                    .iter()
                    .any(|secret| secret.name == name && identity(secret).is_some());
                if !found {
                    return Err(ApiError::not_found("Signing identity not found"));
                }
                self.control.delete_secret(account, name).await?;
                ok(&DeleteSigningIdentityResponse {
                    name: name.to_owned(),
                })
            }
            _ => Err(ApiError::bad_request(
                ApiCode::UnsupportedAction,
                "not a signing identity action",
            )),
        }
    }

    /// The VM's hypermedia server, which identities publish to.
    pub(super) fn hypermedia(&self) -> Result<&Hypermedia, ApiError> {
        self.builtin
            .as_ref()
            .and_then(|b| b.verbs.hypermedia.as_ref())
            .ok_or_else(|| {
                ApiError::new(
                    502,
                    ApiCode::PublishFailed,
                    "no hypermedia server is configured",
                )
            })
    }

    async fn create_identity(
        &self,
        account: &str,
        label: Option<String>,
    ) -> Result<Vec<u8>, ApiError> {
        let hypermedia = self.hypermedia()?;
        let mut seed = zeroize::Zeroizing::new([0u8; 32]);
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, seed.as_mut());
        let key = SigningKey::from_bytes(&seed);
        let account_id = Principal::of_key(&key).to_string();
        let name = identity_name(&account_id);
        let display: String = label.unwrap_or_else(|| {
            let head: String = account_id.chars().take(10).collect();
            format!("Agent account {head}")
        });
        hypermedia
            .publish_account(&key, &display)
            .await
            .map_err(|e| {
                ApiError::new(
                    502,
                    ApiCode::PublishFailed,
                    format!(
                        "Failed to publish agent account to {}: {e}",
                        hypermedia.server()
                    ),
                )
            })?;
        drop(key);
        let metadata = BTreeMap::from([
            ("kind".to_owned(), Ipld::String(IDENTITY_KIND.into())),
            ("accountId".to_owned(), Ipld::String(account_id)),
            ("label".to_owned(), Ipld::String(display)),
            (
                "serverUrl".to_owned(),
                Ipld::String(hypermedia.server().to_owned()),
            ),
            ("generatedBy".to_owned(), Ipld::String("agentos".into())),
        ]);
        let identity = self.keep_identity(account, &name, &seed, metadata).await?;
        Ok(encode_response(&CreateSigningIdentityResponse { identity }))
    }

    /// Seals `seed` as the identity `name` of `account` with `metadata`.
    async fn keep_identity(
        &self,
        account: &str,
        name: &str,
        seed: &[u8; 32],
        metadata: BTreeMap<String, Ipld>,
    ) -> Result<SigningIdentity, ApiError> {
        let stored = self
            .control
            .set_secret(
                account,
                name,
                SecretPlaintext::new(seed.to_vec()),
                Some(cbor::to_canonical(&Ipld::Map(metadata))?),
            )
            .await?;
        read_back(&stored)
    }

    async fn update_identity(
        &self,
        account: &str,
        name: &str,
        label: String,
        icon: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, ApiError> {
        let not_found = || ApiError::not_found("Signing identity not found");
        let secret = self
            .control
            .list_secrets(account)
            .await?
            .into_iter()
            .find(|secret| secret.name == name && identity(secret).is_some())
            .ok_or_else(not_found)?;
        let key = signing_key(&self.control, account, name)
            .await
            .map_err(|e| match e {
                KeyError::Control(e) => ApiError::from(e),
                KeyError::Missing => not_found(),
                KeyError::NotASeed => ApiError::new(500, ApiCode::CorruptRow, e.to_string()),
            })?;
        let hypermedia = self.hypermedia()?;
        let server = hypermedia.server().to_owned();
        let failed = |what: &str, e: crate::hypermedia::HmError| {
            ApiError::new(
                502,
                ApiCode::PublishFailed,
                format!("Failed to publish agent account {what} to {server}: {e}"),
            )
        };
        let mut metadata = match secret
            .metadata
            .as_deref()
            .map(|m| cbor::from_slice::<Ipld>(m, 1 << 20))
        {
            Some(Ok(Ipld::Map(map))) => map,
            _ => return Err(not_found()),
        };
        let mut icon_url = match metadata.get("icon") {
            Some(Ipld::String(url)) => Some(url.clone()),
            _ => None,
        };
        if let Some(icon) = icon {
            let root = hypermedia
                .publish_file(&icon)
                .await
                .map_err(|e| failed("icon", e))?;
            icon_url = Some(format!("ipfs://{root}"));
        }
        hypermedia
            .publish_profile(&key, &label, icon_url.as_deref())
            .await
            .map_err(|e| failed("profile", e))?;
        let account_id = Principal::of_key(&key).to_string();
        drop(key);
        metadata.insert("accountId".into(), Ipld::String(account_id));
        metadata.insert("label".into(), Ipld::String(label));
        metadata.insert("serverUrl".into(), Ipld::String(server));
        if let Some(url) = icon_url {
            metadata.insert("icon".into(), Ipld::String(url));
        }
        let stored = self
            .control
            .update_secret_metadata(account, name, cbor::to_canonical(&Ipld::Map(metadata))?)
            .await?
            .ok_or_else(not_found)?;
        let mut identity = read_back(&stored)?;
        identity.dev = None;
        Ok(encode_response(&UpdateSigningIdentityResponse { identity }))
    }

    async fn import_identity(
        &self,
        account: &str,
        seed: [u8; 32],
        label: Option<String>,
    ) -> Result<Vec<u8>, ApiError> {
        let key = SigningKey::from_bytes(&seed);
        let account_id = Principal::of_key(&key).to_string();
        drop(key);
        let name = identity_name(&account_id);
        if self
            .control
            .list_secrets(account)
            .await?
            .iter()
            .any(|secret| secret.name == name)
        {
            return Err(ApiError::conflict(format!(
                "This account key is already on the server ({account_id})"
            )));
        }
        let mut metadata = BTreeMap::from([
            ("kind".to_owned(), Ipld::String(IDENTITY_KIND.into())),
            ("accountId".to_owned(), Ipld::String(account_id.clone())),
            (
                "serverUrl".to_owned(),
                Ipld::String(self.hypermedia_server()),
            ),
            ("importedBy".to_owned(), Ipld::String("user".into())),
        ]);
        if let Some(label) = &label {
            metadata.insert("label".to_owned(), Ipld::String(label.clone()));
        }
        let identity = self.keep_identity(account, &name, &seed, metadata).await?;
        Ok(encode_response(&ImportSigningIdentityResponse { identity }))
    }
}

/// A just-stored secret as the identity it was stored as.
fn read_back(stored: &crate::control::RedactedSecret) -> Result<SigningIdentity, ApiError> {
    identity(stored).ok_or_else(|| {
        ApiError::new(
            500,
            ApiCode::CorruptRow,
            "a stored identity did not read back",
        )
    })
}
