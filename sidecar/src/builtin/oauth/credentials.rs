//! A subscription provider's sealed tokens: written by a sign-in, read for
//! a turn (refreshed once when expired, under a lock per account and
//! secret, so two turns never spend one refresh token), flagged
//! `needsReauth` when a refresh is refused, and what that makes the
//! provider's `authStatus`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};

use agentos_protocol::seed::action::ModelProviderConfig;
use agentos_protocol::seed::vocab::{AuthMode, AuthStatus};
use agentos_protocol::seed::{cbor, Ipld};

use super::flow::{self, Credentials};
use super::{OAuth, SECRET_NAME};
use crate::control::{Control, ControlError, SecretPlaintext};

/// Why a turn has no subscription credentials, in the reference's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// The provider or its secret is not set up (a 400).
    #[error("{0}")]
    Unconfigured(String),
    /// The sign-in expired or was revoked: sign in again (a 401).
    #[error("Your OpenAI subscription sign-in has expired or was revoked. Open model provider settings and sign in with ChatGPT again.")]
    NeedsLogin,
    /// The vault or the database failed.
    #[error("{0}")]
    Storage(String),
}

/// A refresh's lock, held while a token is refreshed.
type RefreshLock = tokio::sync::Mutex<()>;

/// One lock per account and secret.
#[derive(Default)]
pub(super) struct RefreshLocks {
    locks: Mutex<HashMap<(String, String), Weak<RefreshLock>>>,
}

impl RefreshLocks {
    fn get(&self, account: &str, secret: &str) -> Arc<RefreshLock> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.retain(|_, l| l.strong_count() > 0);
        let key = (account.to_owned(), secret.to_owned());
        if let Some(lock) = locks.get(&key).and_then(Weak::upgrade) {
            return lock;
        }
        let lock = Arc::new(RefreshLock::new(()));
        locks.insert(key, Arc::downgrade(&lock));
        lock
    }
}

fn metadata(needs_reauth: bool) -> Result<Vec<u8>, ControlError> {
    let mut map = BTreeMap::from([
        ("provider".to_owned(), Ipld::String("openai".into())),
        ("kind".to_owned(), Ipld::String("provider-oauth".into())),
    ]);
    if needs_reauth {
        map.insert("needsReauth".into(), Ipld::Bool(true));
    }
    cbor::to_canonical(&Ipld::Map(map)).map_err(|e| ControlError::InvalidArgument(e.to_string()))
}

/// Seals `tokens` as the account's subscription secret.
pub(super) async fn store(
    control: &Control,
    account: &str,
    tokens: &Credentials,
    needs_reauth: bool,
) -> Result<(), ControlError> {
    store_as(control, account, SECRET_NAME, tokens, needs_reauth).await
}

async fn store_as(
    control: &Control,
    account: &str,
    name: &str,
    tokens: &Credentials,
    needs_reauth: bool,
) -> Result<(), ControlError> {
    let value =
        serde_json::to_vec(tokens).map_err(|e| ControlError::InvalidArgument(e.to_string()))?;
    control
        .set_secret(
            account,
            name,
            SecretPlaintext::new(value),
            Some(metadata(needs_reauth)?),
        )
        .await
        .map(drop)
}

/// Whether the secret's metadata says a refresh was refused.
async fn flagged(
    control: &Control,
    account: &str,
    name: &str,
) -> Result<Option<bool>, ControlError> {
    let secrets = control.list_secrets(account).await?;
    let Some(secret) = secrets.iter().find(|s| s.name == name) else {
        return Ok(None);
    };
    let flagged = secret
        .metadata
        .as_deref()
        .and_then(|bytes| cbor::from_slice::<Ipld>(bytes, 1 << 16).ok())
        .is_some_and(|m| match m {
            Ipld::Map(map) => !matches!(
                map.get("needsReauth"),
                None | Some(Ipld::Null) | Some(Ipld::Bool(false))
            ),
            _ => false,
        });
    Ok(Some(flagged))
}

/// A provider's `authStatus`: none for an API-key provider; for a
/// subscription one `needs-login` when its secret is missing or flagged,
/// else `ok` (no network, no expiry check).
pub async fn auth_status(
    control: &Control,
    account: &str,
    config: &ModelProviderConfig,
) -> Result<Option<AuthStatus>, ControlError> {
    if config.auth_mode != Some(AuthMode::Subscription) {
        return Ok(None);
    }
    let Some(name) = config.secret_refs.as_ref().and_then(|r| r.get("oauth")) else {
        return Ok(Some(AuthStatus::NeedsLogin));
    };
    Ok(Some(match flagged(control, account, name).await? {
        Some(false) => AuthStatus::Ok,
        _ => AuthStatus::NeedsLogin,
    }))
}

impl OAuth {
    /// The subscription credentials of `account`'s provider, refreshed
    /// when expired (once, under the lock; a turn that waited on another's
    /// refresh uses its tokens). A refused refresh flags the secret and
    /// tells the account; the turn is told to sign in again.
    pub async fn credentials(
        &self,
        account: &str,
        config: &ModelProviderConfig,
        now: impl Fn() -> i64,
    ) -> Result<Credentials, CredentialError> {
        let Some(name) = config.secret_refs.as_ref().and_then(|r| r.get("oauth")) else {
            return Err(CredentialError::Unconfigured(format!(
                "{} subscription sign-in is not configured",
                config.provider_type
            )));
        };
        let lock = self.refresh.get(account, name);
        let _one = lock.lock().await;
        let tokens = self.read(account, name).await?;
        if now() < tokens.expires {
            return Ok(tokens);
        }
        match self.refresh_tokens(&tokens.refresh).await {
            Ok(fresh) => {
                store_as(&self.control, account, name, &fresh, false)
                    .await
                    .map_err(|e| CredentialError::Storage(e.to_string()))?;
                Ok(fresh)
            }
            Err(why) => {
                tracing::warn!(account = %account, why = %why, "a subscription refresh was refused");
                if flagged(&self.control, account, name).await == Ok(Some(false)) {
                    store_as(&self.control, account, name, &tokens, true)
                        .await
                        .map_err(|e| CredentialError::Storage(e.to_string()))?;
                    self.notify(account);
                }
                Err(CredentialError::NeedsLogin)
            }
        }
    }

    async fn read(&self, account: &str, name: &str) -> Result<Credentials, CredentialError> {
        let secret = self
            .control
            .secret_plaintext(account, name)
            .await
            .map_err(|e| CredentialError::Storage(e.to_string()))?
            .ok_or_else(|| {
                CredentialError::Unconfigured("Required secret is not configured".into())
            })?;
        serde_json::from_slice(secret.as_bytes()).map_err(|_| {
            CredentialError::Unconfigured(
                "Stored OAuth credentials are corrupted; sign in again".into(),
            )
        })
    }

    async fn refresh_tokens(&self, refresh: &str) -> Result<Credentials, String> {
        let body = flow::form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh),
            ("client_id", flow::CLIENT_ID),
        ]);
        let failed = "Failed to refresh OpenAI Codex token";
        let (status, answer) = self.post_token(body).await.map_err(|_| failed.to_owned())?;
        if !(200..300).contains(&status) {
            return Err(format!("{failed}: HTTP {status}"));
        }
        flow::credentials(&answer, agentos_base::clock::unix_ms(), failed)
    }
}
