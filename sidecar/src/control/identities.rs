//! Signing identities as the control plane keeps them: vault secrets whose
//! metadata says `kind: 'hm-account-key'`, named after the hypermedia
//! account their key signs as. What both doors read of them; the key
//! itself only ever leaves the vault to sign.

use agentos_protocol::seed::response::SigningIdentity;
use agentos_protocol::seed::{cbor, Ipld, SigningKey};

use super::RedactedSecret;

/// What marks a secret as a signing identity.
pub const IDENTITY_KIND: &str = "hm-account-key";

/// The secret name of the key for `account_id`.
pub fn identity_name(account_id: &str) -> String {
    let head: String = account_id.chars().take(16).collect();
    format!("hm-account-{head}")
}

/// A secret as a signing identity, when its metadata says it is one.
pub fn identity(secret: &RedactedSecret) -> Option<SigningIdentity> {
    let metadata: Ipld = cbor::from_slice(secret.metadata.as_deref()?, 1 << 20).ok()?;
    let Ipld::Map(map) = metadata else {
        return None;
    };
    let text = |key: &str| match map.get(key) {
        Some(Ipld::String(s)) => Some(s.clone()),
        _ => None,
    };
    if text("kind").as_deref() != Some(IDENTITY_KIND) {
        return None;
    }
    Some(SigningIdentity {
        id: secret.id.clone(),
        name: secret.name.clone(),
        account_id: text("accountId"),
        label: text("label"),
        icon: text("icon"),
        server_url: text("serverUrl"),
        dev: match map.get("dev") {
            Some(Ipld::Bool(dev)) => Some(*dev),
            _ => None,
        },
        created_at: secret.created_at_ms,
        updated_at: secret.updated_at_ms,
    })
}

/// Why a signing identity's key cannot sign.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Control(#[from] super::ControlError),
    /// The secret is gone.
    #[error("Signing identity secret not found")]
    Missing,
    /// The secret holds something other than a 32-byte seed (a
    /// `SetSecret` can make such an identity).
    #[error("Signing identity secret is not a 32-byte key seed")]
    NotASeed,
}

/// The key of the identity `name` of `account`, unsealed to sign; it never
/// leaves the process.
pub async fn signing_key(
    control: &super::Control,
    account: &str,
    name: &str,
) -> Result<SigningKey, KeyError> {
    let plaintext = control
        .secret_plaintext(account, name)
        .await?
        .ok_or(KeyError::Missing)?;
    let seed: &[u8; 32] = plaintext
        .as_bytes()
        .try_into()
        .map_err(|_| KeyError::NotASeed)?;
    Ok(SigningKey::from_bytes(seed))
}
