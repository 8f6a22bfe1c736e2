//! The service methods for model providers and secrets. Responses carry
//! redacted values only; a plaintext leaves this module only through
//! `secret_plaintext`, for in-process use (a provider call).

use std::sync::Arc;

use super::error::ControlError;
use super::secrets::{SecretPlaintext, MAX_SECRET_BYTES};
use super::store::Guarded;
use super::types::*;
use super::{limit, validate, Control};

impl Control {
    fn check_provider(provider: &mut NewProvider) -> Result<(), ControlError> {
        validate::name("name", &provider.name, validate::MAX_NAME_BYTES)?;
        validate::name("type", &provider.provider_type, 64)?;
        validate::bytes(
            "provider",
            &provider.config,
            1,
            validate::MAX_DOCUMENT_BYTES,
        )?;
        provider.secret_refs.sort();
        provider.secret_refs.dedup();
        if provider.secret_refs.len() > validate::MAX_SECRET_REFS {
            return Err(ControlError::invalid(format!(
                "secretRefs names {} secrets; at most {} are allowed",
                provider.secret_refs.len(),
                validate::MAX_SECRET_REFS
            )));
        }
        for name in &provider.secret_refs {
            validate::name("secretRefs", name, validate::MAX_NAME_BYTES)?;
        }
        Ok(())
    }

    /// Creates or replaces the account's provider of this name, with the
    /// secret names its config refers to.
    pub async fn set_provider(
        &self,
        account: &str,
        mut provider: NewProvider,
    ) -> Result<RedactedProvider, ControlError> {
        Self::check_provider(&mut provider)?;
        self.ensure_account(account).await?;
        let max = self.inner.limits.max_providers_per_account;
        let id = uuid::Uuid::new_v4().to_string();
        match self
            .store()
            .upsert_provider(account, &id, &provider, max)
            .await?
        {
            Guarded::Done { value, count } => {
                self.observe(setting::MAX_PROVIDERS, account, count, max);
                Ok(value)
            }
            Guarded::Refused => Err(limit(setting::MAX_PROVIDERS, max)),
        }
    }

    pub async fn list_providers(
        &self,
        account: &str,
    ) -> Result<Vec<RedactedProvider>, ControlError> {
        Ok(self.store().list_providers(account).await?)
    }

    /// The provider with its config, for in-process use.
    pub async fn get_provider(
        &self,
        account: &str,
        name: &str,
    ) -> Result<Option<ProviderRecord>, ControlError> {
        let read = || async { Ok(self.store().get_provider(account, name).await?) };
        match &self.inner.kept {
            Some(kept) => {
                let key = (account.to_owned(), name.to_owned());
                kept.providers.get_or_read(&key, read).await
            }
            None => read().await,
        }
    }

    /// Deletes the provider and the secrets it referred to that no other
    /// provider of the account uses.
    pub async fn delete_provider(
        &self,
        account: &str,
        name: &str,
    ) -> Result<DeletedProvider, ControlError> {
        match self.store().delete_provider(account, name).await? {
            Some(deleted_secrets) => Ok(DeletedProvider {
                name: name.to_owned(),
                deleted_secrets,
            }),
            None => Err(ControlError::NotFound(format!("provider {name:?}"))),
        }
    }

    /// Seals and stores the value (creating or replacing the secret).
    pub async fn set_secret(
        &self,
        account: &str,
        name: &str,
        value: SecretPlaintext,
        metadata: Option<Vec<u8>>,
    ) -> Result<RedactedSecret, ControlError> {
        validate::name("name", name, validate::MAX_NAME_BYTES)?;
        if value.len() > MAX_SECRET_BYTES {
            return Err(ControlError::SecretTooLarge {
                size: value.len(),
                limit: MAX_SECRET_BYTES,
            });
        }
        if let Some(metadata) = &metadata {
            validate::bytes("metadata", metadata, 0, validate::MAX_DOCUMENT_BYTES)?;
        }
        self.ensure_account(account).await?;
        let max = self.inner.limits.max_secrets_per_account;
        let id = uuid::Uuid::new_v4().to_string();
        // Held through the write, so a rotation never misses this value.
        let sealer = self.inner.secret_box.read().await;
        let sealed = sealer.seal(account, name, &value)?;
        drop(value);
        let key_id = sealer.key_id().ok_or(ControlError::VaultLocked)?;
        let write = self
            .store()
            .upsert_secret(account, &id, name, key_id, sealed, metadata, max)
            .await?;
        drop(sealer);
        match write {
            Guarded::Done { value, count } => {
                self.observe(setting::MAX_SECRETS, account, count, max);
                Ok(value)
            }
            Guarded::Refused => Err(limit(setting::MAX_SECRETS, max)),
        }
    }

    /// Replaces a secret's metadata (checked as `set_secret` checks it),
    /// its sealed value untouched; `None` when there is no such secret.
    pub async fn update_secret_metadata(
        &self,
        account: &str,
        name: &str,
        metadata: Vec<u8>,
    ) -> Result<Option<RedactedSecret>, ControlError> {
        validate::bytes("metadata", &metadata, 0, validate::MAX_DOCUMENT_BYTES)?;
        Ok(self
            .store()
            .set_secret_metadata(account, name, metadata)
            .await?)
    }

    pub async fn list_secrets(&self, account: &str) -> Result<Vec<RedactedSecret>, ControlError> {
        Ok(self.store().list_secrets(account).await?)
    }

    pub async fn delete_secret(&self, account: &str, name: &str) -> Result<(), ControlError> {
        if self.store().delete_secret(account, name).await? {
            Ok(())
        } else {
            Err(ControlError::NotFound(format!("secret {name:?}")))
        }
    }

    /// The plaintext of a secret, for in-process use only (a provider
    /// call); never put it in a response, an event or a log.
    pub async fn secret_plaintext(
        &self,
        account: &str,
        name: &str,
    ) -> Result<Option<SecretPlaintext>, ControlError> {
        let sealer = self.inner.secret_box.read().await;
        // Locked says more than "no such secret": say it first.
        sealer.key_id().ok_or(ControlError::VaultLocked)?;
        let read = || async {
            Ok::<_, ControlError>(self.store().get_secret(account, name).await?.map(Arc::new))
        };
        let stored = match &self.inner.kept {
            Some(kept) => {
                let key = (account.to_owned(), name.to_owned());
                kept.secrets.get_or_read(&key, read).await?
            }
            None => read().await?,
        };
        let Some(stored) = stored else {
            return Ok(None);
        };
        sealer
            .open(
                &stored.account_id,
                &stored.name,
                &stored.key_id,
                &stored.ciphertext,
            )
            .map(Some)
    }

    /// Re-seals every secret under `new_key` (see `secrets::rotate`).
    pub async fn rotate_secrets_key(&self, new_key: super::SecretKey) -> Result<u64, ControlError> {
        super::secrets::rotate(self, new_key).await
    }
}
