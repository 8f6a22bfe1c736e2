//! `AuthorizeSigner`, `RevokeSigner`, `ListSigners`: the account's own key
//! manages which other keys may act for it. A revoked key is refused from
//! its next request, and every `/agents/ws` socket it signed on is closed.

use agentos_protocol::seed::response::{
    AuthorizeSignerResponse, ListSignersResponse, RevokeSignerResponse,
};
use agentos_protocol::seed::ApiCode;
use agentos_protocol::seed::{Action, Role};

use super::{ok, render, ApiError, Caller, SignedApi};
use crate::control::SignerRole;

impl SignedApi {
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
