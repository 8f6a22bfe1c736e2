//! Subscription sign-in ("Sign in with ChatGPT"), as the reference offers
//! it: `StartProviderOAuth` makes a PKCE login and answers where the user
//! signs in; nothing listens for the redirect, so the user pastes it (or
//! the code) back with `SubmitProviderOAuthCode`, which hands the code to
//! the token endpoint in the background; `GetProviderOAuthStatus` tells how
//! it went and `CancelProviderOAuth` gives up. A completed sign-in seals
//! its tokens as the account's secret `openai-subscription-oauth` (like
//! every secret) and tells the account `model-provider-changed`.
//!
//! Logins live in memory, bounded: one pending per account (a new start
//! replaces it), a pending one fails ten minutes after it began, a finished
//! one stays readable ten minutes, and at most [`MAX_LOGINS`] are kept in
//! the VM. Every step takes the time as an argument, so tests turn the
//! clock. `credentials.rs` reads the sealed tokens for a turn, refreshing
//! them once under a lock when they have expired. Tokens never appear in
//! an answer, an event or a log.

mod credentials;
pub mod flow;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use agentos_protocol::seed::vocab::OAuthLoginStatus;

pub use credentials::{auth_status, CredentialError};

use crate::control::Control;

/// The ChatGPT backend subscription turns call.
pub const DEFAULT_CODEX_BASE: &str = "https://chatgpt.com/backend-api";
/// The sealed secret a completed sign-in writes.
pub const SECRET_NAME: &str = "openai-subscription-oauth";
/// Names of the sign-in's endpoints in `builtin.providerEndpoints`, never
/// a provider's `type` (a client must not reach the issuer, or the Codex
/// backend with an API key, through a provider of its own).
pub const RESERVED_TYPES: &[&str] = &["openai-oauth", "openai-codex"];
/// Provider types that sign in by subscription.
pub const OAUTH_PROVIDER_TYPES: &[&str] = &["openai"];
/// A pending login fails this long after it began.
pub const LOGIN_TTL_MS: i64 = 10 * 60 * 1000;
/// A finished login stays readable this long.
pub const FINISHED_TTL_MS: i64 = 10 * 60 * 1000;
/// Logins kept in the VM at most; past it the oldest finished go first.
pub const MAX_LOGINS: usize = 10_000;
/// How long a call to the issuer may take.
const ISSUER_DEADLINE: Duration = Duration::from_secs(30);
/// The largest answer read from the issuer.
const MAX_ISSUER_ANSWER_BYTES: usize = 64 * 1024;

/// Where sign-in and subscription calls go: the reference's public
/// addresses unless the operator moved them
/// (`builtin.providerEndpoints["openai-oauth"]`, `["openai-codex"]`).
#[derive(Clone, Debug)]
pub struct OAuthEndpoints {
    pub issuer: String,
    pub codex: String,
}

/// A refusal with the reference's status and words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OAuthError {
    pub status: u16,
    pub message: String,
}

impl OAuthError {
    fn new(status: u16, message: impl Into<String>) -> OAuthError {
        OAuthError {
            status,
            message: message.into(),
        }
    }

    fn not_found() -> OAuthError {
        OAuthError::new(404, "Sign-in not found")
    }
}

/// Tells an account's sockets why it changed (`model-provider-changed`).
pub type Notifier = Arc<dyn Fn(&str, &str) + Send + Sync>;

struct Login {
    account_id: String,
    status: OAuthLoginStatus,
    verifier: String,
    state: String,
    /// A code was taken and is being exchanged.
    exchanging: bool,
    /// Its tokens are being stored: it completes whatever comes meanwhile
    /// (as in the reference, where nothing can come between the check and
    /// the store).
    storing: bool,
    secret_name: Option<String>,
    error: Option<String>,
    expires_at: i64,
    finished_at: Option<i64>,
}

impl Login {
    /// Settles a pending login whose time ran out.
    fn settle(&mut self, now: i64) {
        if self.status == OAuthLoginStatus::Pending && now >= self.expires_at {
            self.fail("Sign-in timed out", self.expires_at);
        }
    }

    fn fail(&mut self, why: &str, at: i64) {
        if self.status == OAuthLoginStatus::Pending && !self.storing {
            self.status = OAuthLoginStatus::Failed;
            self.error = Some(why.to_owned());
            self.finished_at = Some(at);
        }
    }
}

/// A login as `GetProviderOAuthStatus` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginStatus {
    pub status: OAuthLoginStatus,
    pub secret_name: Option<String>,
    pub error: Option<String>,
}

/// What `StartProviderOAuth` answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    pub login_id: String,
    pub auth_url: String,
    pub expires_at: i64,
}

/// Sign-ins and subscription credentials. One per VM.
pub struct OAuth {
    enabled: bool,
    endpoints: OAuthEndpoints,
    client: reqwest::Client,
    control: Control,
    logins: Mutex<HashMap<String, Login>>,
    notifier: OnceLock<Notifier>,
    refresh: credentials::RefreshLocks,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl OAuth {
    /// `enabled` is `builtin.subscriptionAuth`.
    pub fn new(
        control: Control,
        enabled: bool,
        endpoints: OAuthEndpoints,
    ) -> Result<OAuth, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(ISSUER_DEADLINE)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(OAuth {
            enabled,
            endpoints,
            client,
            control,
            logins: Mutex::new(HashMap::new()),
            notifier: OnceLock::new(),
            refresh: credentials::RefreshLocks::default(),
        })
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn endpoints(&self) -> &OAuthEndpoints {
        &self.endpoints
    }

    /// Set once the signed door's sockets exist.
    pub fn set_notifier(&self, notifier: Notifier) {
        let _ = self.notifier.set(notifier);
    }

    fn notify(&self, account: &str) {
        if let Some(notify) = self.notifier.get() {
            notify(account, "model-provider-changed");
        }
    }

    /// Begins a sign-in for `account`, replacing its pending one.
    pub fn start(
        &self,
        account: &str,
        provider_type: &str,
        now: i64,
    ) -> Result<Started, OAuthError> {
        if !self.enabled {
            return Err(OAuthError::new(
                403,
                "Subscription sign-in is not enabled on this server",
            ));
        }
        if !OAUTH_PROVIDER_TYPES.contains(&provider_type) {
            return Err(OAuthError::new(
                400,
                format!("Provider type does not support subscription sign-in: {provider_type}"),
            ));
        }
        let pkce = flow::Pkce::new();
        let auth_url = flow::authorize_url(&self.endpoints.issuer, &pkce);
        let mut logins = lock(&self.logins);
        for login in logins.values_mut() {
            login.settle(now);
            if login.account_id == account {
                login.fail("Replaced by a new sign-in", now);
            }
        }
        logins.retain(|_, l| l.finished_at.is_none_or(|at| now - at < FINISHED_TTL_MS));
        if logins.len() >= MAX_LOGINS {
            // The oldest finished go first; pending ones are someone's.
            let mut finished: Vec<(i64, String)> = logins
                .iter()
                .filter_map(|(id, l)| l.finished_at.map(|at| (at, id.clone())))
                .collect();
            finished.sort();
            for (_, id) in finished.iter().take(logins.len() + 1 - MAX_LOGINS) {
                logins.remove(id);
            }
            if logins.len() >= MAX_LOGINS {
                return Err(OAuthError::new(
                    503,
                    "Too many sign-ins in progress; try again later",
                ));
            }
        }
        let login_id = uuid::Uuid::new_v4().to_string();
        let expires_at = now + LOGIN_TTL_MS;
        logins.insert(
            login_id.clone(),
            Login {
                account_id: account.to_owned(),
                status: OAuthLoginStatus::Pending,
                verifier: pkce.verifier,
                state: pkce.state,
                exchanging: false,
                storing: false,
                secret_name: None,
                error: None,
                expires_at,
                finished_at: None,
            },
        );
        Ok(Started {
            login_id,
            auth_url,
            expires_at,
        })
    }

    /// Takes the pasted code of a pending login; the exchange runs in the
    /// background (its outcome is the login's status).
    pub fn submit(
        self: &Arc<Self>,
        account: &str,
        login_id: &str,
        code: &str,
        now: i64,
    ) -> Result<(), OAuthError> {
        let (verifier, pasted) = {
            let mut logins = lock(&self.logins);
            let login = logins
                .get_mut(login_id)
                .filter(|l| l.account_id == account)
                .ok_or_else(|| OAuthError::new(400, "Sign-in not found"))?;
            login.settle(now);
            if login.status != OAuthLoginStatus::Pending {
                return Err(OAuthError::new(400, "Sign-in is no longer pending"));
            }
            if login.exchanging {
                // One code per sign-in: a later one is not read.
                return Ok(());
            }
            let pasted = flow::parse_pasted(code);
            // An empty or absent state is not checked, as the reference.
            let state = pasted.state.as_deref().filter(|s| !s.is_empty());
            if state.is_some_and(|s| s != login.state) {
                login.fail("State mismatch", now);
                return Ok(());
            }
            let Some(code) = pasted.code.filter(|c| !c.is_empty()) else {
                login.fail("Missing authorization code", now);
                return Ok(());
            };
            login.exchanging = true;
            (login.verifier.clone(), code)
        };
        let oauth = Arc::clone(self);
        let login_id = login_id.to_owned();
        tokio::spawn(async move { oauth.exchange(&login_id, &verifier, &pasted).await });
        Ok(())
    }

    /// The code for tokens; a login still pending when they come completes.
    async fn exchange(&self, login_id: &str, verifier: &str, code: &str) {
        let outcome = self.exchange_code(verifier, code).await;
        let now = agentos_base::clock::unix_ms();
        let account = {
            let mut logins = lock(&self.logins);
            let Some(login) = logins.get_mut(login_id) else {
                return;
            };
            login.settle(now);
            if login.status != OAuthLoginStatus::Pending {
                // Canceled, replaced or timed out meanwhile: nothing kept.
                return;
            }
            if let Err(why) = &outcome {
                login.fail(why, now);
                return;
            }
            login.storing = true;
            login.account_id.clone()
        };
        let Ok(tokens) = outcome else { return };
        // Never at the same time as a refresh of the same secret, which
        // would otherwise write its old tokens over these.
        let guard = self.refresh.get(&account, SECRET_NAME);
        let stored = {
            let _one = guard.lock().await;
            credentials::store(&self.control, &account, &tokens).await
        };
        let mut logins = lock(&self.logins);
        let Some(login) = logins.get_mut(login_id) else {
            return;
        };
        login.storing = false;
        match stored {
            Ok(()) => {
                login.status = OAuthLoginStatus::Completed;
                login.secret_name = Some(SECRET_NAME.to_owned());
                login.finished_at = Some(now);
                drop(logins);
                self.notify(&account);
            }
            Err(e) => login.fail(&e.to_string(), now),
        }
    }

    async fn exchange_code(&self, verifier: &str, code: &str) -> Result<flow::Credentials, String> {
        let body = flow::form(&[
            ("grant_type", "authorization_code"),
            ("client_id", flow::CLIENT_ID),
            ("code", code),
            ("code_verifier", verifier),
            ("redirect_uri", flow::REDIRECT_URI),
        ]);
        let failed = "Token exchange failed";
        let (status, answer) = self.post_token(body).await.map_err(|_| failed.to_owned())?;
        if !(200..300).contains(&status) {
            tracing::warn!(status, "a subscription sign-in's code was refused");
            return Err(failed.to_owned());
        }
        flow::credentials(
            &answer,
            agentos_base::clock::unix_ms(),
            "Token response missing fields",
        )
    }

    /// One form POST to the token endpoint: its status and (bounded) body.
    async fn post_token(&self, body: String) -> Result<(u16, Vec<u8>), reqwest::Error> {
        let url = format!(
            "{}/oauth/token",
            self.endpoints.issuer.trim_end_matches('/')
        );
        let mut response = self
            .client
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await?;
        let status = response.status().as_u16();
        let mut answer = Vec::new();
        while let Some(piece) = response.chunk().await? {
            if answer.len() + piece.len() > MAX_ISSUER_ANSWER_BYTES {
                break;
            }
            answer.extend_from_slice(&piece);
        }
        Ok((status, answer))
    }

    /// Does `then` with the account's login, settled at `now`; another
    /// account's is not found.
    fn with_login<T>(
        &self,
        account: &str,
        login_id: &str,
        now: i64,
        then: impl FnOnce(&mut Login) -> T,
    ) -> Result<T, OAuthError> {
        let mut logins = lock(&self.logins);
        let login = logins
            .get_mut(login_id)
            .filter(|l| l.account_id == account)
            .ok_or_else(OAuthError::not_found)?;
        login.settle(now);
        Ok(then(login))
    }

    pub fn status(
        &self,
        account: &str,
        login_id: &str,
        now: i64,
    ) -> Result<LoginStatus, OAuthError> {
        self.with_login(account, login_id, now, |login| LoginStatus {
            status: login.status,
            secret_name: login.secret_name.clone(),
            error: login.error.clone(),
        })
    }

    /// Ends a pending login (`Sign-in canceled`); a finished one stays.
    pub fn cancel(&self, account: &str, login_id: &str, now: i64) -> Result<(), OAuthError> {
        self.with_login(account, login_id, now, |login| {
            login.fail("Sign-in canceled", now)
        })
    }

    /// Logins kept now (for tests of the bound).
    pub fn logins(&self) -> usize {
        lock(&self.logins).len()
    }
}

#[cfg(test)]
mod tests;
