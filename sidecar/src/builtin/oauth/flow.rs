//! The OAuth steps of a ChatGPT sign-in, as the reference takes them: PKCE
//! (a 32-byte verifier, its S256 challenge), a 16-byte hex `state`, the
//! authorize URL with the reference's client id, scopes and parameters,
//! what a user pastes back read in its four forms, the code exchanged (and
//! later refreshed) at the token endpoint, and the ChatGPT account id read
//! from the access token's claim.

use base64::Engine as _;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The client the reference signs in as.
pub const CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
/// Where the browser is sent back; nothing listens there: the user pastes
/// the address (or the code) back.
pub const REDIRECT_URI: &str = "http://localhost:1455/auth/callback";
pub const SCOPE: &str = "openid profile email offline_access";
/// The access token's claim holding the ChatGPT account.
const AUTH_CLAIM: &str = "https://api.openai.com/auth";
const ACCOUNT_FIELD: &str = "chatgpt_account_id";

/// The issuer's public address (`builtin.providerEndpoints["openai-oauth"]`
/// moves it).
pub const DEFAULT_ISSUER: &str = "https://auth.openai.com";

/// A sign-in's secrets before the code comes back.
pub struct Pkce {
    pub verifier: String,
    pub challenge: String,
    pub state: String,
}

impl Default for Pkce {
    fn default() -> Pkce {
        Pkce::new()
    }
}

impl Pkce {
    pub fn new() -> Pkce {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let verifier = url.encode(bytes);
        let challenge = url.encode(Sha256::digest(verifier.as_bytes()));
        let mut state = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut state);
        Pkce {
            verifier,
            challenge,
            state: hex::encode(state),
        }
    }
}

/// The authorize URL, its parameters in the reference's order.
pub fn authorize_url(issuer: &str, pkce: &Pkce) -> String {
    let mut url = format!("{}/oauth/authorize?", issuer.trim_end_matches('/'));
    let params = [
        ("response_type", "code"),
        ("client_id", CLIENT_ID),
        ("redirect_uri", REDIRECT_URI),
        ("scope", SCOPE),
        ("code_challenge", pkce.challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("state", pkce.state.as_str()),
        ("id_token_add_organizations", "true"),
        ("codex_cli_simplified_flow", "true"),
        ("originator", "pi"),
    ];
    let encoded: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", form_encode(v)))
        .collect();
    url.push_str(&encoded.join("&"));
    url
}

/// `application/x-www-form-urlencoded`, spaces as `+`.
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => {
                out.push(char::from(byte))
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

/// A form body.
pub fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// What the user pasted: a code and perhaps the state it came with.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pasted {
    pub code: Option<String>,
    pub state: Option<String>,
}

/// Reads the redirect URL, `code=…&state=…`, `code#state` or a bare code.
pub fn parse_pasted(input: &str) -> Pasted {
    let value = input.trim();
    if value.is_empty() {
        return Pasted::default();
    }
    let query = |q: &str| {
        let mut pasted = Pasted::default();
        for (k, v) in url::form_urlencoded::parse(q.trim_start_matches('?').as_bytes()) {
            match k.as_ref() {
                "code" if pasted.code.is_none() => pasted.code = Some(v.into_owned()),
                "state" if pasted.state.is_none() => pasted.state = Some(v.into_owned()),
                _ => {}
            }
        }
        pasted
    };
    if let Ok(url) = url::Url::parse(value) {
        return query(url.query().unwrap_or_default());
    }
    if let Some((code, rest)) = value.split_once('#') {
        let state = rest.split('#').next().unwrap_or_default();
        return Pasted {
            code: Some(code.to_owned()),
            state: Some(state.to_owned()),
        };
    }
    if value.contains("code=") {
        return query(value);
    }
    Pasted {
        code: Some(value.to_owned()),
        state: None,
    }
}

/// What a sign-in keeps, sealed as the account's secret: the reference's
/// four fields, `expires` in epoch milliseconds.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Credentials {
    pub access: String,
    pub refresh: String,
    pub expires: i64,
    pub account_id: String,
}

impl std::fmt::Debug for Credentials {
    // Tokens never reach a log line through a `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

/// The token endpoint's answer, as far as a sign-in reads it.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: Option<String>,
    refresh_token: Option<String>,
    expires_in: Option<f64>,
}

/// The ChatGPT account an access token is for, from its claim.
pub fn account_id(access_token: &str) -> Option<String> {
    let mut parts = access_token.split('.');
    let (Some(_), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims[AUTH_CLAIM][ACCOUNT_FIELD]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}

/// Credentials from a token answer's body, or the reference's words for
/// what is wrong with it.
pub fn credentials(body: &[u8], now: i64, missing: &str) -> Result<Credentials, String> {
    let answer: TokenAnswer = serde_json::from_slice(body).map_err(|_| missing.to_owned())?;
    let (Some(access), Some(refresh), Some(expires_in)) =
        (answer.access_token, answer.refresh_token, answer.expires_in)
    else {
        return Err(missing.to_owned());
    };
    let account_id =
        account_id(&access).ok_or_else(|| "Failed to extract accountId from token".to_owned())?;
    Ok(Credentials {
        access,
        refresh,
        expires: now.saturating_add((expires_in * 1000.0) as i64),
        account_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pasted_codes_read_in_all_four_forms() {
        let both = |code: &str, state: &str| Pasted {
            code: Some(code.into()),
            state: Some(state.into()),
        };
        assert_eq!(
            parse_pasted("http://localhost:1455/auth/callback?code=abc&state=xyz"),
            both("abc", "xyz")
        );
        assert_eq!(parse_pasted("code=abc&state=xyz"), both("abc", "xyz"));
        assert_eq!(parse_pasted("abc#xyz"), both("abc", "xyz"));
        assert_eq!(
            parse_pasted("  abc  "),
            Pasted {
                code: Some("abc".into()),
                state: None
            }
        );
        assert_eq!(parse_pasted(""), Pasted::default());
        assert_eq!(
            parse_pasted("http://localhost:1455/auth/callback?state=xyz"),
            Pasted {
                code: None,
                state: Some("xyz".into())
            }
        );
    }

    #[test]
    fn the_authorize_url_carries_the_references_parameters_in_order() {
        let pkce = Pkce::new();
        assert_eq!(pkce.verifier.len(), 43);
        assert_eq!(pkce.state.len(), 32);
        let url = authorize_url("https://auth.example/", &pkce);
        assert!(url.starts_with(
            "https://auth.example/oauth/authorize?response_type=code&client_id=app_EMoamEEZ73f0CkXaXp7hrann\
             &redirect_uri=http%3A%2F%2Flocalhost%3A1455%2Fauth%2Fcallback\
             &scope=openid+profile+email+offline_access&code_challenge="
        ));
        assert!(url.ends_with(&format!(
            "&code_challenge_method=S256&state={}&id_token_add_organizations=true\
             &codex_cli_simplified_flow=true&originator=pi",
            pkce.state
        )));
        let expected = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(Sha256::digest(pkce.verifier.as_bytes()));
        assert!(url.contains(&format!("code_challenge={expected}&")));
    }

    #[test]
    fn the_account_comes_from_the_tokens_claim() {
        let claims = serde_json::json!({AUTH_CLAIM: {ACCOUNT_FIELD: "acct-1"}});
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string());
        assert_eq!(account_id(&format!("h.{payload}.s")), Some("acct-1".into()));
        assert_eq!(account_id(&format!("h.{payload}")), None);
        let none = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("{}");
        assert_eq!(account_id(&format!("h.{none}.s")), None);
        let body = serde_json::json!({"access_token": format!("h.{payload}.s"),
                                      "refresh_token": "r", "expires_in": 60});
        let made = credentials(body.to_string().as_bytes(), 1_000, "missing").unwrap();
        assert_eq!((made.expires, made.account_id.as_str()), (61_000, "acct-1"));
        assert_eq!(
            credentials(b"{\"access_token\":\"x\"}", 0, "missing").unwrap_err(),
            "missing"
        );
    }
}
