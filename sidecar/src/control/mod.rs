//! The control plane behind the signed Seed Agents API: accounts and the
//! signers that act for them, agents with their collaborators and session
//! links, model providers, encrypted secrets, and the idempotency records
//! of signed actions.
//!
//! [`Control`] is the service both front doors call, with plain domain
//! values (`types.rs`): principals as `z…` text, opaque client documents
//! as CBOR bytes, times in milliseconds. It knows no HTTP, CBOR or
//! JSON-RPC. All SQL is in `store/`, one file per table group; `authz.rs`
//! decides who may do what to an agent; `secrets.rs` holds the key and
//! the sealing; `idempotency.rs` runs an action once per client request
//! id. The service methods live by domain: this file (accounts and
//! signers), `agents.rs` (agents, collaborators, session links) and
//! `vault.rs` (providers and secrets).
//!
//! Every collection is bounded by a [`ControlLimits`] setting, checked in
//! the writing statement itself; a full collection answers
//! `ControlError::Limit` naming the setting, and crossing 80 % logs one
//! warning.

mod agents;
pub mod authz;
mod error;
mod idempotency;
pub mod identities;
mod kept;
pub mod secrets;
pub mod store;
mod types;
pub mod validate;
mod vault;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use agentos_schema::SharedDatabase;

pub use error::ControlError;
pub use idempotency::InFlightGuard;
pub use kept::WATCHED;
pub use secrets::{SecretBox, SecretKey, SecretPlaintext};
pub use store::ControlStore;
pub use types::*;

use idempotency::InFlight;
use store::Guarded;

/// The control-plane service. Cheap to clone; clones share the key, the
/// in-flight idempotency keys and the limit warnings.
#[derive(Clone)]
pub struct Control {
    inner: Arc<Inner>,
}

struct Inner {
    store: ControlStore,
    limits: ControlLimits,
    /// Writers of secrets hold it shared; a rotation holds it alone.
    secret_box: tokio::sync::RwLock<SecretBox>,
    inflight: InFlight,
    warned: NearLimit,
    /// Hot reads kept in memory, when the handle counts writes to their
    /// tables (`Control::keeping`).
    kept: Option<kept::Kept>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

/// Which bounded collections are at or above 80 %, so each crossing warns
/// once. Keys are per setting and scope (an account or an agent).
#[derive(Default)]
struct NearLimit(Mutex<HashSet<String>>);

impl NearLimit {
    fn observe(&self, setting: &'static str, scope: &str, used: u64, limit: u64) {
        let high = limit > 0 && u128::from(used) * 5 >= u128::from(limit) * 4;
        let key = format!("{setting}\u{0}{scope}");
        let mut warned = match self.0.lock() {
            Ok(warned) => warned,
            Err(poisoned) => poisoned.into_inner(),
        };
        if high {
            if warned.insert(key) {
                tracing::warn!(
                    used,
                    limit,
                    config_path = setting,
                    scope,
                    "usage crossed 80% of a configured limit"
                );
            }
        } else {
            warned.remove(&key);
        }
    }
}

fn limit(setting: &'static str, limit: u64) -> ControlError {
    ControlError::Limit { setting, limit }
}

impl Control {
    pub fn new(db: SharedDatabase, limits: ControlLimits, secret_box: SecretBox) -> Control {
        Self::build(db, limits, secret_box, None)
    }

    /// The service over a handle that counts writes to [`WATCHED`]
    /// (`versions` are its counts): session links, agents, providers,
    /// collaborators and sealed secrets are then kept in memory between
    /// writes.
    pub fn keeping(
        db: SharedDatabase,
        limits: ControlLimits,
        secret_box: SecretBox,
        versions: Arc<agentos_storage::watch::TableVersions>,
    ) -> Control {
        Self::build(db, limits, secret_box, Some(kept::Kept::new(versions)))
    }

    fn build(
        db: SharedDatabase,
        limits: ControlLimits,
        secret_box: SecretBox,
        kept: Option<kept::Kept>,
    ) -> Control {
        Control {
            inner: Arc::new(Inner {
                store: ControlStore::new(db),
                limits,
                secret_box: tokio::sync::RwLock::new(secret_box),
                inflight: InFlight::default(),
                warned: NearLimit::default(),
                kept,
            }),
        }
    }

    /// The write counts of [`WATCHED`] tables, when the handle keeps them
    /// (for other services that keep what they read from those tables).
    pub fn versions(&self) -> Option<Arc<agentos_storage::watch::TableVersions>> {
        self.inner.kept.as_ref().map(|kept| kept.versions.clone())
    }

    pub fn limits(&self) -> &ControlLimits {
        &self.inner.limits
    }

    /// The id of the key secrets are sealed with now; `None` when the
    /// vault is locked (the VM has no secrets key).
    pub async fn secrets_key_id(&self) -> Option<String> {
        self.inner
            .secret_box
            .read()
            .await
            .key_id()
            .map(str::to_owned)
    }

    fn store(&self) -> &ControlStore {
        &self.inner.store
    }

    fn observe(&self, setting: &'static str, scope: &str, used: u64, limit: u64) {
        self.inner.warned.observe(setting, scope, used, limit);
    }

    // ---- accounts ------------------------------------------------------

    /// Makes sure the account exists (the first write of a new key makes
    /// it), within `maxAccounts`.
    pub async fn ensure_account(&self, account: &str) -> Result<(), ControlError> {
        validate::principal("account", account)?;
        if self.store().account_exists(account).await? {
            return Ok(());
        }
        let max = self.inner.limits.max_accounts;
        match self.store().insert_account(account, max).await? {
            Guarded::Done { count, .. } => {
                self.observe(setting::MAX_ACCOUNTS, "vm", count, max);
                Ok(())
            }
            // Made meanwhile by a concurrent request, or the VM is full.
            Guarded::Refused if self.store().account_exists(account).await? => Ok(()),
            Guarded::Refused => Err(limit(setting::MAX_ACCOUNTS, max)),
        }
    }

    // ---- signers -------------------------------------------------------

    /// The role `signer` has for `account` now: `Owner` for the account's
    /// own key, the stored role of an unrevoked signer, otherwise `None`.
    pub async fn signer_role(
        &self,
        account: &str,
        signer: &str,
    ) -> Result<Option<SignerRole>, ControlError> {
        if account == signer {
            return Ok(Some(SignerRole::Owner));
        }
        Ok(self
            .store()
            .get_signer(account, signer)
            .await?
            .filter(|s| s.revoked_at_ms.is_none())
            .and_then(|s| s.role))
    }

    fn check_signer_pair(account: &str, signer: &str) -> Result<(), ControlError> {
        validate::principal("account", account)?;
        validate::principal("signer", signer)?;
        if account == signer {
            return Err(ControlError::invalid(
                "the account's own key is always its owner and has no signer row",
            ));
        }
        Ok(())
    }

    /// Refusal of a signer write: the signer was revoked (only a
    /// delegation is refused so), or the account's signers are full.
    async fn signer_refusal(&self, account: &str, signer: &str) -> ControlError {
        match self.store().get_signer(account, signer).await {
            Ok(Some(s)) if s.revoked_at_ms.is_some() => ControlError::Forbidden(format!(
                "signer {signer} was revoked by the account; only the account can authorize \
                 it again"
            )),
            Ok(_) => limit(
                setting::MAX_SIGNERS,
                self.inner.limits.max_signers_per_account,
            ),
            Err(e) => e.into(),
        }
    }

    fn signer_written(&self, account: &str, write: Guarded<SignerRecord>) -> Option<SignerRecord> {
        match write {
            Guarded::Done { value, count } => {
                let max = self.inner.limits.max_signers_per_account;
                self.observe(setting::MAX_SIGNERS, account, count, max);
                Some(value)
            }
            Guarded::Refused => None,
        }
    }

    /// The account authorizes `signer` with `role` (lifting a revocation).
    pub async fn authorize_signer(
        &self,
        account: &str,
        signer: &str,
        role: SignerRole,
    ) -> Result<SignerRecord, ControlError> {
        Self::check_signer_pair(account, signer)?;
        self.ensure_account(account).await?;
        let max = self.inner.limits.max_signers_per_account;
        let write = self
            .store()
            .authorize_signer(account, signer, role, max)
            .await?;
        match self.signer_written(account, write) {
            Some(record) => Ok(record),
            None => Err(self.signer_refusal(account, signer).await),
        }
    }

    /// Revokes `signer`: it stays refused, whatever capability it shows,
    /// until the account authorizes it again.
    pub async fn revoke_signer(
        &self,
        account: &str,
        signer: &str,
    ) -> Result<SignerRecord, ControlError> {
        Self::check_signer_pair(account, signer)?;
        self.ensure_account(account).await?;
        let max = self.inner.limits.max_signers_per_account;
        let write = self.store().revoke_signer(account, signer, max).await?;
        match self.signer_written(account, write) {
            Some(record) => Ok(record),
            None => Err(self.signer_refusal(account, signer).await),
        }
    }

    pub async fn list_signers(&self, account: &str) -> Result<Vec<SignerRecord>, ControlError> {
        Ok(self.store().list_signers(account).await?)
    }

    /// Remembers a capability the caller has verified (issued by `account`
    /// to `signer`), so later requests carrying its CID need no fetch. A
    /// revoked signer is refused (`forbidden`).
    pub async fn store_delegation(
        &self,
        account: &str,
        signer: &str,
        role: SignerRole,
        capability_cid: &str,
        capability_blob: Vec<u8>,
    ) -> Result<SignerRecord, ControlError> {
        Self::check_signer_pair(account, signer)?;
        validate::name("capability", capability_cid, validate::MAX_NAME_BYTES)?;
        validate::bytes(
            "capabilityBlob",
            &capability_blob,
            1,
            validate::MAX_DOCUMENT_BYTES,
        )?;
        self.ensure_account(account).await?;
        let delegation = Delegation {
            role,
            capability_cid: capability_cid.to_owned(),
            capability_blob,
        };
        let max = self.inner.limits.max_signers_per_account;
        let write = self
            .store()
            .store_delegation(account, signer, &delegation, max)
            .await?;
        match self.signer_written(account, write) {
            Some(record) => Ok(record),
            None => Err(self.signer_refusal(account, signer).await),
        }
    }

    /// The unrevoked signer row that stored this capability CID, if any.
    pub async fn known_capability(
        &self,
        capability_cid: &str,
    ) -> Result<Option<SignerRecord>, ControlError> {
        Ok(self.store().signer_by_capability(capability_cid).await?)
    }
}
