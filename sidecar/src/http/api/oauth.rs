//! Subscription sign-in over the signed door: `StartProviderOAuth`,
//! `SubmitProviderOAuthCode`, `GetProviderOAuthStatus`,
//! `CancelProviderOAuth`, each for the signing account's own logins. Only
//! a start needs `builtin.subscriptionAuth`; fields are read with the
//! reference's words (`Login id is required`); the flow is
//! `builtin::oauth`'s.

use agentos_protocol::seed::response::{
    CancelProviderOAuthResponse, ProviderOAuthStatusResponse, StartProviderOAuthResponse,
    SubmitProviderOAuthCodeResponse,
};
use agentos_protocol::seed::{Action, ApiCode, Ipld};

use super::{ok, ApiError, Caller, SignedApi};
use crate::builtin::oauth::OAuthError;
use agentos_protocol::seed::text::js_trim;

/// Names and ids, at most (the reference's `MAX_NAME_BYTES`).
const MAX_NAME_BYTES: usize = 256;
/// A pasted code or redirect address, at most.
const MAX_CODE_BYTES: usize = 8 * 1024;

/// A string field, trimmed, as the reference reads it: absent, not a
/// string or blank is `<label> is required`; longer than `max` bytes
/// `<label> is too large`.
fn bounded(value: Option<Ipld>, label: &str, max: usize) -> Result<String, ApiError> {
    let required = || ApiError::bad_request(ApiCode::BadRequest, format!("{label} is required"));
    let Some(Ipld::String(text)) = value else {
        return Err(required());
    };
    let text = js_trim(&text);
    if text.is_empty() {
        return Err(required());
    }
    if text.len() > max {
        return Err(ApiError::bad_request(
            ApiCode::BadRequest,
            format!("{label} is too large"),
        ));
    }
    Ok(text.to_owned())
}

fn refused(e: OAuthError) -> ApiError {
    let code = match e.status {
        403 => ApiCode::Forbidden,
        404 => ApiCode::NotFound,
        502 => ApiCode::ProviderUnreachable,
        503 => ApiCode::Busy,
        _ => ApiCode::BadRequest,
    };
    ApiError::new(e.status, code, e.message)
}

impl SignedApi {
    pub(super) async fn provider_oauth(
        &self,
        caller: &Caller,
        action: Action,
    ) -> Result<Vec<u8>, ApiError> {
        let Some(oauth) = self.builtin.as_ref().map(|b| &b.oauth) else {
            return Err(ApiError::new(
                403,
                ApiCode::Forbidden,
                "Subscription sign-in is not enabled on this server",
            ));
        };
        let account = caller.account.as_str();
        let now = agentos_base::clock::unix_ms();
        match action {
            Action::StartProviderOAuth { provider_type } => {
                if !oauth.enabled() {
                    return Err(refused(OAuthError {
                        status: 403,
                        message: "Subscription sign-in is not enabled on this server".into(),
                    }));
                }
                let provider_type = bounded(provider_type, "Provider type", MAX_NAME_BYTES)?;
                let started = oauth.start(account, &provider_type, now).map_err(refused)?;
                ok(&StartProviderOAuthResponse {
                    login_id: started.login_id,
                    auth_url: started.auth_url,
                    expires_at: started.expires_at,
                })
            }
            Action::SubmitProviderOAuthCode { login_id, code } => {
                let login_id = bounded(login_id, "Login id", MAX_NAME_BYTES)?;
                let code = bounded(code, "Authorization code", MAX_CODE_BYTES)?;
                oauth
                    .submit(account, &login_id, &code, now)
                    .map_err(refused)?;
                ok(&SubmitProviderOAuthCodeResponse {})
            }
            Action::GetProviderOAuthStatus { login_id } => {
                let login_id = bounded(login_id, "Login id", MAX_NAME_BYTES)?;
                let status = oauth.status(account, &login_id, now).map_err(refused)?;
                ok(&ProviderOAuthStatusResponse {
                    login_id,
                    status: status.status,
                    secret_name: status.secret_name,
                    error: status.error,
                })
            }
            Action::CancelProviderOAuth { login_id } => {
                let login_id = bounded(login_id, "Login id", MAX_NAME_BYTES)?;
                oauth.cancel(account, &login_id, now).map_err(refused)?;
                ok(&CancelProviderOAuthResponse { login_id })
            }
            _ => Err(ApiError::bad_request(
                ApiCode::UnsupportedAction,
                "not a sign-in action",
            )),
        }
    }
}
