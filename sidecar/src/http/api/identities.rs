//! Signing identities: the hypermedia account keys the server holds for an
//! account, as the reference keeps them: vault secrets named
//! `hm-account-<the account's first 16 characters>` whose metadata says
//! `kind: 'hm-account-key'` (and the account, a label, the server). The
//! key itself is sealed like every secret and never answered.
//! `ListSigningIdentities` (an agent's reader sees the identities granted
//! to it; its owner all), `ImportSigningIdentity` (publishes nothing; one
//! key once) and `DeleteSigningIdentity` (the agents naming it are left
//! as they are). Creating one and updating its profile publish blobs to the
//! hypermedia server and are not offered yet.

use std::collections::BTreeMap;

use agentos_protocol::seed::response::{
    DeleteSigningIdentityResponse, ImportSigningIdentityResponse, ListSigningIdentitiesResponse,
    SigningIdentity,
};
use agentos_protocol::seed::{cbor, encode_response, Action, ApiCode, Ipld, Principal, SigningKey};

use super::{ok, render, ApiError, Caller, SignedApi};
use crate::control::identities::{identity, identity_name, IDENTITY_KIND};
use crate::control::{authz, AccessRole, SecretPlaintext};

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
        let stored = self
            .control
            .set_secret(
                account,
                &name,
                SecretPlaintext::new(seed.to_vec()),
                Some(cbor::to_canonical(&Ipld::Map(metadata))?),
            )
            .await?;
        let identity = identity(&stored).ok_or_else(|| {
            ApiError::new(
                500,
                ApiCode::CorruptRow,
                "a stored identity did not read back",
            )
        })?;
        Ok(encode_response(&ImportSigningIdentityResponse { identity }))
    }
}
