//! Who is asking: an envelope's signature, its timestamp window, the replay
//! cache and the signer's authority for the account, in that order, before
//! any of the action's fields are looked at.
//!
//! The account's own key is its owner. Another key acts for the account
//! when the account authorized it (`AuthorizeSigner`, stored) or when the
//! envelope carries a Capability the account issued to it (the reference's
//! protocol 2: the blob verifies, its CID matches, `delegate == signer`, the
//! role is AGENT or WRITER, the issuer is the account and not the delegate,
//! and it carries no `path`: a grant scoped to one document does not
//! delegate the account).
//! A verified capability is stored, so later envelopes may carry only its
//! CID; a CID never seen, without its blob, is refused (there is no network
//! fetch). A revoked signer is refused whatever it shows.

use agentos_protocol::seed::ApiCode;
use agentos_protocol::seed::{cid_of, Capability, Envelope, Role};

use super::error::ApiError;
use super::keys::KeyCache;
use super::replay::{Refusal, ReplayCache};
use crate::config::HttpConfig;
use crate::control::{Control, ControlError, SignerRole};

/// A verified caller.
#[derive(Clone, Debug)]
pub struct Caller {
    /// The account the action runs as (`z…`).
    pub account: String,
    /// The exact key that signed (`z…`).
    pub signer: String,
    pub role: SignerRole,
    /// The client's protocol version (1 when absent).
    pub protocol: u64,
}

impl Caller {
    pub fn is_account_key(&self) -> bool {
        self.account == self.signer
    }
}

use agentos_base::clock::unix_ms as now_ms;

/// Whether `ts` is at most `window` ms away from `now`, either way. Computed
/// without overflow: `ts` comes from outside and may be any `i64`.
fn within_window(ts: i64, now: i64, window: i64) -> bool {
    u64::try_from(window).is_ok_and(|window| now.abs_diff(ts) <= window)
}

fn out_of_window(window: i64) -> ApiError {
    ApiError::unauthorized(
        ApiCode::TimestampOutOfWindow,
        format!("Action timestamp is outside allowed window ({window} ms either way)"),
    )
}

/// The envelope check of the signed door, shared by `POST /api/message`
/// and `/agents/ws`: one replay cache, so a request accepted one way is a
/// replay the other way.
pub struct Verifier {
    control: Control,
    /// `http.maxBodyBytes`: the most one envelope may be.
    max_body_bytes: u64,
    /// `http.timestampWindowMs`.
    timestamp_window_ms: u64,
    replay: ReplayCache,
    keys: KeyCache,
}

impl Verifier {
    pub fn new(control: Control, config: &HttpConfig) -> Verifier {
        Verifier {
            control,
            max_body_bytes: config.max_body_bytes,
            timestamp_window_ms: config.timestamp_window_ms,
            replay: ReplayCache::new(config.replay_cache_entries),
            keys: KeyCache::default(),
        }
    }

    /// Decodes (bounded by `http.maxBodyBytes`) and verifies an envelope.
    pub async fn open(&self, body: &[u8]) -> Result<(Envelope, Caller), ApiError> {
        let max = usize::try_from(self.max_body_bytes).unwrap_or(usize::MAX);
        let envelope = Envelope::decode(body, max)?;
        let caller = self.verify(&envelope).await?;
        Ok((envelope, caller))
    }

    /// Verifies `envelope` and admits it to the replay cache.
    pub async fn verify(&self, envelope: &Envelope) -> Result<Caller, ApiError> {
        let key = self.keys.get(envelope.signer.public_key())?;
        envelope.verify_signature_with(&key)?;
        let ts = envelope.ts_ms()?;
        let now = now_ms();
        let window = i64::try_from(self.timestamp_window_ms).unwrap_or(i64::MAX);
        if !within_window(ts, now, window) {
            return Err(out_of_window(window));
        }
        let account = envelope.account.to_string();
        let signer = envelope.signer.to_string();
        let role = self.signer_authority(envelope, &account, &signer).await?;
        let signer_key = envelope.signer.public_key();
        match self
            .replay
            .admit(&signer_key, &envelope.sig, ts, now, window)
        {
            Ok(()) => {}
            Err(Refusal::Replayed) => {
                return Err(ApiError::unauthorized(
                    ApiCode::Replayed,
                    "this signed request was already accepted",
                ))
            }
            Err(Refusal::Forgotten) => {
                return Err(ApiError::unauthorized(
                    ApiCode::Replayed,
                    "the request is older than what the replay cache remembers; sign it again",
                ))
            }
            Err(Refusal::Expired) => return Err(out_of_window(window)),
        }
        Ok(Caller {
            account,
            signer,
            role,
            protocol: envelope.protocol.unwrap_or(1),
        })
    }

    async fn signer_authority(
        &self,
        envelope: &Envelope,
        account: &str,
        signer: &str,
    ) -> Result<SignerRole, ApiError> {
        if account == signer {
            return Ok(SignerRole::Owner);
        }
        if let Some(role) = self.control.signer_role(account, signer).await? {
            return Ok(role);
        }
        let refused = || {
            ApiError::unauthorized(
                ApiCode::SignerNotAuthorized,
                "Signer is not authorized for account",
            )
        };
        let Some(cid) = &envelope.capability else {
            return Err(refused());
        };
        let Some(blob) = &envelope.capability_blob else {
            // A stored capability that still stands would have given a role
            // above; anything else is unknown here.
            return Err(ApiError::unauthorized(
                ApiCode::CapabilityUnknown,
                format!("capability {cid} is not known here; send capabilityBlob with it"),
            ));
        };
        let capability = Capability::decode_and_verify(blob)?;
        let bad = |m: &str| ApiError::unauthorized(ApiCode::BadCapability, m.to_owned());
        if cid_of(blob) != *cid {
            return Err(bad("the capability CID does not match its blob"));
        }
        if capability.delegate != envelope.signer {
            return Err(bad("the capability delegates to another key"));
        }
        if capability.signer != envelope.account {
            return Err(bad("the capability was not issued by the account"));
        }
        if capability
            .path
            .as_deref()
            .is_some_and(|path| !path.is_empty())
        {
            return Err(bad(
                "a path-scoped capability does not delegate the account",
            ));
        }
        if capability.signer == capability.delegate {
            return Err(bad("a self-issued capability delegates nothing"));
        }
        let role = match capability.role {
            Role::Agent => SignerRole::Agent,
            Role::Writer => SignerRole::Writer,
            Role::Other(_) => return Err(bad("the capability's role is not AGENT or WRITER")),
        };
        match self
            .control
            .store_delegation(account, signer, role, cid, blob.clone())
            .await
        {
            Ok(_) => Ok(role),
            Err(ControlError::Forbidden(m)) => {
                Err(ApiError::unauthorized(ApiCode::SignerRevoked, m))
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::within_window;

    #[test]
    fn the_window_check_does_not_overflow_on_extreme_timestamps() {
        let now = 1_700_000_000_000;
        assert!(within_window(now + 300_000, now, 300_000));
        assert!(within_window(now - 300_000, now, 300_000));
        assert!(!within_window(now - 300_001, now, 300_000));
        for ts in [i64::MIN, i64::MIN + 1, i64::MAX, -1] {
            assert!(!within_window(ts, now, 300_000), "{ts}");
        }
        assert!(!within_window(i64::MIN, i64::MAX, i64::MAX));
        assert!(!within_window(0, 0, -1));
    }
}
