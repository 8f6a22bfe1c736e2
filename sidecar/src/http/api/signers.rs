//! `AuthorizeSigner`, `RevokeSigner`, `ListSigners`: the account's own key
//! manages which other keys may act for it. A revoked key is refused from
//! its next request, and every `/agents/ws` socket it signed on is closed.
//! `RegisterSigner` (the reference's): a key registers itself as a signer
//! of the account whose Capability blob delegates to it (role `AGENT` or
//! `WRITER`), so a device key acts as the account it was delegated from.

use agentos_protocol::seed::response::{
    AuthorizeSignerResponse, ListSignersResponse, RegisterSignerResponse, RevokeSignerResponse,
};
use agentos_protocol::seed::ApiCode;
use agentos_protocol::seed::{Action, Capability, Role};

use super::{ok, render, ApiError, Caller, SignedApi};
use crate::control::SignerRole;

impl SignedApi {
    /// Verifies the Capability (its own signature, a delegate that is the
    /// envelope's signer, role `AGENT` or `WRITER`, not to its own issuer)
    /// and records its delegate as an `AGENT` signer of its issuer, as the
    /// reference does. A bad capability is 400 `bad_capability`.
    pub(super) async fn register_signer(
        &self,
        caller: &Caller,
        blob: &[u8],
    ) -> Result<Vec<u8>, ApiError> {
        let refuse =
            |message: &str| ApiError::bad_request(ApiCode::BadCapability, message.to_owned());
        let capability = Capability::decode_and_verify(blob)
            .map_err(|e| ApiError::bad_request(ApiCode::BadCapability, e.to_string()))?;
        if capability.delegate.to_string() != caller.signer {
            return Err(refuse(
                "the capability's delegate is not the envelope's signer",
            ));
        }
        if !matches!(capability.role, Role::Agent | Role::Writer) {
            return Err(refuse(
                "the capability's role does not permit agent actions",
            ));
        }
        let account = capability.signer.to_string();
        if account == caller.signer {
            return Err(refuse("the capability delegates to its own issuer"));
        }
        let record = self
            .control
            .authorize_signer(&account, &caller.signer, SignerRole::Agent)
            .await?;
        ok(&RegisterSignerResponse {
            account_id: account,
            signer_id: record.signer,
        })
    }

    pub(super) async fn signers(
        &self,
        caller: &Caller,
        action: Action,
    ) -> Result<Vec<u8>, ApiError> {
        if !caller.is_account_key() {
            return Err(ApiError::forbidden(
                "only the account's own key manages its signers",
            ));
        }
        let account = &caller.account;
        match action {
            Action::AuthorizeSigner { signer, role } => {
                let stored = match role {
                    Role::Agent => SignerRole::Agent,
                    Role::Writer => SignerRole::Writer,
                    Role::Other(other) => {
                        return Err(ApiError::bad_request(
                            ApiCode::BadRequest,
                            format!("AuthorizeSigner: role must be AGENT or WRITER, not {other:?}"),
                        ))
                    }
                };
                let record = self
                    .control
                    .authorize_signer(account, &signer.to_string(), stored)
                    .await?;
                ok(&AuthorizeSignerResponse {
                    account_id: account.clone(),
                    signer_id: record.signer,
                    role: render::signer_role(stored),
                })
            }
            Action::RevokeSigner { signer } => {
                let signer = signer.to_string();
                let was = self.control.signer_role(account, &signer).await?;
                self.control.revoke_signer(account, &signer).await?;
                self.sockets.close_signer(account, &signer);
                ok(&RevokeSignerResponse {
                    account_id: account.clone(),
                    signer_id: signer,
                    revoked: was.is_some(),
                })
            }
            Action::ListSigners => {
                let signers = self.control.list_signers(account).await?;
                ok(&ListSignersResponse {
                    account_id: account.clone(),
                    signers: signers.iter().filter_map(render::signer).collect(),
                })
            }
            other => Err(ApiError::bad_request(
                ApiCode::BadRequest,
                format!("{} is not a signer action", other.name()),
            )),
        }
    }
}
