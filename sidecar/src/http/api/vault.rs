//! Providers and secrets: `SetSecret`, `ListSecrets`, `DeleteSecret`,
//! `SetModelProvider`, `ListModelProviders`, `DeleteModelProvider`,
//! `ListProviderModels`. Everything belongs to the acting account, except
//! that a listing naming an agent reads the agent owner's providers (for a
//! caller who may read the agent); no answer ever holds a secret's value.

use agentos_protocol::seed::action::ModelProviderConfig;
use agentos_protocol::seed::response::{
    DeleteModelProviderResponse, DeleteSecretResponse, ListModelProvidersResponse,
    ListProviderModelsResponse, ListSecretsResponse, ProviderModelInfo, SetModelProviderResponse,
    SetSecretResponse,
};
use agentos_protocol::seed::vocab::{AuthMode, AuthStatus};
use agentos_protocol::seed::ApiCode;
use agentos_protocol::seed::{cbor, Action};

use super::{ok, render, ApiError, Caller, SignedApi};
use crate::builtin::host::ListModelsError;
use crate::builtin::oauth;
use crate::control::{authz, NewProvider, SecretPlaintext};

/// The models a ChatGPT subscription offers, as the reference lists them.
const SUBSCRIPTION_MODELS: &[(&str, &str)] = &[
    ("gpt-5.6-sol", "GPT-5.6 Sol"),
    ("gpt-5.6-terra", "GPT-5.6 Terra"),
    ("gpt-5.6-luna", "GPT-5.6 Luna"),
    ("gpt-5.5", "GPT-5.5"),
    ("gpt-5.4", "GPT-5.4"),
];

impl SignedApi {
    /// A subscription provider's `authStatus` (none for an API-key one).
    async fn auth_status_of(
        &self,
        account: &str,
        provider: &crate::control::RedactedProvider,
    ) -> Result<Option<AuthStatus>, ApiError> {
        if provider.auth_mode != Some(crate::control::AuthMode::Subscription) {
            return Ok(None);
        }
        let Some(record) = self.control.get_provider(account, &provider.name).await? else {
            return Ok(None);
        };
        let config: ModelProviderConfig = cbor::from_slice(&record.config, 16 * 1024 * 1024)?;
        Ok(oauth::auth_status(&self.control, account, &config).await?)
    }

    /// Whose providers a listing reads: the caller's own, or, when it names
    /// an agent the caller may read, the agent owner's (whose providers the
    /// agent's sessions use). An agent the caller cannot read is
    /// `not_found`, as everywhere.
    async fn provider_account(
        &self,
        caller: &Caller,
        agent_id: Option<&str>,
    ) -> Result<String, ApiError> {
        match agent_id {
            None => Ok(caller.account.clone()),
            Some(agent_id) => {
                let access = authz::require_read(&self.control, &caller.account, agent_id).await?;
                Ok(access.agent.account_id)
            }
        }
    }

    pub(super) async fn vault(&self, caller: &Caller, action: Action) -> Result<Vec<u8>, ApiError> {
        let account = &caller.account;
        let control = &self.control;
        match action {
            Action::SetSecret {
                name,
                value,
                metadata,
            } => {
                let metadata = metadata.as_ref().map(cbor::to_canonical).transpose()?;
                let secret = control
                    .set_secret(account, &name, SecretPlaintext::new(value), metadata)
                    .await?;
                ok(&SetSecretResponse {
                    secret: render::secret(&secret)?,
                })
            }
            Action::ListSecrets => {
                let secrets = control.list_secrets(account).await?;
                let secrets = secrets
                    .iter()
                    .map(render::secret)
                    .collect::<Result<Vec<_>, _>>()?;
                ok(&ListSecretsResponse { secrets })
            }
            Action::DeleteSecret { name } => {
                control.delete_secret(account, &name).await?;
                ok(&DeleteSecretResponse { name })
            }
            Action::SetModelProvider { name, provider } => {
                if oauth::RESERVED_TYPES.contains(&provider.provider_type.as_str()) {
                    return Err(ApiError::bad_request(
                        ApiCode::BadRequest,
                        format!(
                            "Provider type {} is reserved for subscription sign-in",
                            provider.provider_type
                        ),
                    ));
                }
                if provider.auth_mode == Some(AuthMode::Subscription) {
                    if !oauth::OAUTH_PROVIDER_TYPES.contains(&provider.provider_type.as_str()) {
                        return Err(ApiError::bad_request(
                            ApiCode::BadRequest,
                            format!(
                                "Provider type does not support subscription auth: {}",
                                provider.provider_type
                            ),
                        ));
                    }
                    let oauth_ref = provider.secret_refs.as_ref().and_then(|r| r.get("oauth"));
                    if oauth_ref.is_none_or(|name| name.trim().is_empty()) {
                        return Err(ApiError::bad_request(
                            ApiCode::BadRequest,
                            "Subscription providers require a secretRefs.oauth credential reference",
                        ));
                    }
                }
                let config = cbor::to_canonical(&provider)?;
                let secret_refs = provider
                    .secret_refs
                    .as_ref()
                    .map(|refs| refs.values().cloned().collect())
                    .unwrap_or_default();
                let auth_mode = provider.auth_mode.map(render::stored_auth_mode);
                let stored = control
                    .set_provider(
                        account,
                        NewProvider {
                            name,
                            provider_type: provider.provider_type.clone(),
                            config,
                            auth_mode,
                            secret_refs,
                        },
                    )
                    .await?;
                self.sockets.account_changed(
                    &[account.to_owned()],
                    crate::http::ws::reason::MODEL_PROVIDER_CHANGED,
                    None,
                    None,
                );
                let status = oauth::auth_status(control, account, &provider).await?;
                ok(&SetModelProviderResponse {
                    provider: render::provider(&stored, status),
                })
            }
            Action::ListModelProviders { agent_id } => {
                let owner = self.provider_account(caller, agent_id.as_deref()).await?;
                let providers = control.list_providers(&owner).await?;
                let mut shown = Vec::with_capacity(providers.len());
                for provider in &providers {
                    let status = self.auth_status_of(&owner, provider).await?;
                    shown.push(render::provider(provider, status));
                }
                ok(&ListModelProvidersResponse { providers: shown })
            }
            Action::DeleteModelProvider { name } => {
                let deleted = control.delete_provider(account, &name).await?;
                self.sockets.account_changed(
                    &[account.to_owned()],
                    crate::http::ws::reason::MODEL_PROVIDER_CHANGED,
                    None,
                    None,
                );
                ok(&DeleteModelProviderResponse { name: deleted.name })
            }
            Action::ListProviderModels { provider, agent_id } => {
                let owner = self.provider_account(caller, agent_id.as_deref()).await?;
                let not_found = || {
                    ApiError::new(
                        404,
                        ApiCode::NotFound,
                        format!("provider {provider:?} not found"),
                    )
                };
                // A subscription's models are the reference's list: the
                // backend refuses others, and there is nothing to ask.
                if let Some(record) = control.get_provider(&owner, &provider).await? {
                    if record.redacted.auth_mode == Some(crate::control::AuthMode::Subscription) {
                        return ok(&ListProviderModelsResponse {
                            models: SUBSCRIPTION_MODELS
                                .iter()
                                .map(|(id, name)| ProviderModelInfo {
                                    id: (*id).to_owned(),
                                    name: (*name).to_owned(),
                                })
                                .collect(),
                        });
                    }
                }
                let Some(builtin) = &self.builtin else {
                    return Err(ApiError::new(
                        502,
                        ApiCode::ProviderUnreachable,
                        "this sidecar calls no providers",
                    ));
                };
                match builtin.host.list_models(&owner, &provider).await {
                    Ok(models) => ok(&ListProviderModelsResponse {
                        models: models
                            .into_iter()
                            .map(|m| ProviderModelInfo {
                                id: m.id,
                                name: m.name,
                            })
                            .collect(),
                    }),
                    Err(ListModelsError::NotFound) => Err(not_found()),
                    Err(ListModelsError::Storage(code)) => {
                        tracing::error!(code, "a model listing could not read its provider");
                        Err(ApiError::new(
                            500,
                            ApiCode::CorruptRow,
                            "Internal server error",
                        ))
                    }
                    Err(ListModelsError::Refused(e)) => {
                        Err(ApiError::new(400, ApiCode::ProviderRejected, e.message))
                    }
                    Err(ListModelsError::Provider(e)) => Err(ApiError::new(
                        502,
                        if e.is_retryable() {
                            ApiCode::ProviderUnreachable
                        } else {
                            ApiCode::ProviderRejected
                        },
                        format!("{}: {}", e.code, e.message),
                    )),
                }
            }
            _ => Err(ApiError::bad_request(
                ApiCode::UnsupportedAction,
                "not a vault action",
            )),
        }
    }
}
