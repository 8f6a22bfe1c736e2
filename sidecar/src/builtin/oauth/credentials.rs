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
    pub(super) fn get(&self, account: &str, secret: &str) -> Arc<RefreshLock> {
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

/// A sign-in's metadata: the reference's two fields, nothing else.
fn sign_in_metadata() -> BTreeMap<String, Ipld> {
    BTreeMap::from([
        ("provider".to_owned(), Ipld::String("openai".into())),
        ("kind".to_owned(), Ipld::String("provider-oauth".into())),
    ])
}

fn encode(map: BTreeMap<String, Ipld>) -> Result<Vec<u8>, ControlError> {
    cbor::to_canonical(&Ipld::Map(map)).map_err(|e| ControlError::InvalidArgument(e.to_string()))
}

fn sealed(tokens: &Credentials) -> Result<SecretPlaintext, ControlError> {
    serde_json::to_vec(tokens)
        .map(SecretPlaintext::new)
        .map_err(|e| ControlError::InvalidArgument(e.to_string()))
}

/// Seals a sign-in's tokens as the account's subscription secret, its
/// metadata replaced (a `needsReauth` of an earlier sign-in goes).
pub(super) async fn store(
    control: &Control,
    account: &str,
    tokens: &Credentials,
) -> Result<(), ControlError> {
    control
        .set_secret(
            account,
            SECRET_NAME,
            sealed(tokens)?,
            Some(encode(sign_in_metadata())?),
        )
        .await
        .map(drop)
}

/// The secret's metadata as a map, `None` when the secret is gone.
async fn metadata_of(
    control: &Control,
    account: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Ipld>>, ControlError> {
    let secrets = control.list_secrets(account).await?;
    let Some(secret) = secrets.iter().find(|s| s.name == name) else {
        return Ok(None);
    };
    let map = secret
        .metadata
        .as_deref()
        .and_then(|bytes| cbor::from_slice::<Ipld>(bytes, 1 << 16).ok())
        .and_then(|m| match m {
            Ipld::Map(map) => Some(map),
            _ => None,
        })
        .unwrap_or_default();
    Ok(Some(map))
}

/// Rewrites an existing secret with `tokens`, its metadata kept but for
/// `needsReauth` (set or removed); a secret deleted meanwhile stays gone.
async fn rewrite(
    control: &Control,
    account: &str,
    name: &str,
    tokens: &Credentials,
    needs_reauth: bool,
) -> Result<(), ControlError> {
    let Some(mut map) = metadata_of(control, account, name).await? else {
        return Ok(());
    };
    if needs_reauth {
        map.insert("needsReauth".into(), Ipld::Bool(true));
    } else {
        map.remove("needsReauth");
    }
    control
        .set_secret(account, name, sealed(tokens)?, Some(encode(map)?))
        .await
        .map(drop)
}

/// Whether the secret's metadata says a refresh was refused (`None`: no
/// such secret).
async fn flagged(
    control: &Control,
    account: &str,
    name: &str,
) -> Result<Option<bool>, ControlError> {
    Ok(metadata_of(control, account, name).await?.map(|map| {
        !matches!(
            map.get("needsReauth"),
            None | Some(Ipld::Null) | Some(Ipld::Bool(false))
        )
    }))
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
                // The old refresh token is spent: the new pair is used even
                // if it could not be kept (the next turn signs in again).
                if let Err(e) = rewrite(&self.control, account, name, &fresh, false).await {
                    tracing::error!(account = %account, error = %e, "refreshed subscription tokens were not kept");
                }
                Ok(fresh)
            }
            Err(why) => {
                tracing::warn!(account = %account, why = %why, "a subscription refresh was refused");
                if flagged(&self.control, account, name).await == Ok(Some(false)) {
                    rewrite(&self.control, account, name, &tokens, true)
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
