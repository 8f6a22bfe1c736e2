//! Providers and secrets: `SetSecret`, `ListSecrets`, `DeleteSecret`,
//! `SetModelProvider`, `ListModelProviders`, `DeleteModelProvider`,
//! `ListProviderModels`. Everything belongs to the acting account, except
//! that a listing naming an agent reads the agent owner's providers (for a
//! caller who may read the agent); no answer ever holds a secret's value.

use agentos_protocol::seed::response::{
    DeleteModelProviderResponse, DeleteSecretResponse, ListModelProvidersResponse,
    ListProviderModelsResponse, ListSecretsResponse, ProviderModelInfo, SetModelProviderResponse,
    SetSecretResponse,
};
use agentos_protocol::seed::ApiCode;
use agentos_protocol::seed::{cbor, Action};

use super::{ok, render, ApiError, Caller, SignedApi};
use crate::builtin::host::ListModelsError;
use crate::control::{authz, NewProvider, SecretPlaintext};

impl SignedApi {
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
                ok(&SetModelProviderResponse {
                    provider: render::provider(&stored),
                })
            }
            Action::ListModelProviders { agent_id } => {
                let owner = self.provider_account(caller, agent_id.as_deref()).await?;
                let providers = control.list_providers(&owner).await?;
                ok(&ListModelProvidersResponse {
                    providers: providers.iter().map(render::provider).collect(),
                })
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
