//! Logins on a clock the test turns: one pending per account, expiry at
//! its edge, finished logins kept ten minutes, another account's login
//! not found, and the VM-wide bound.

use agentos_schema::migrate_all;
use agentos_storage::testing::{sqlite_file, TestDb};

use super::*;
use crate::config::ControlLimits;
use crate::control::{SecretBox, SecretKey};

const T0: i64 = 1_700_000_000_000;

async fn oauth(enabled: bool) -> (TestDb, Arc<OAuth>) {
    let test = sqlite_file().await;
    migrate_all(test.db.as_ref()).await.expect("migrate");
    let control = Control::new(
        test.db.clone(),
        ControlLimits::default(),
        SecretBox::new(SecretKey::generate()),
    );
    let endpoints = OAuthEndpoints {
        issuer: "http://127.0.0.1:9".into(),
        codex: "http://127.0.0.1:9".into(),
    };
    let oauth = OAuth::new(control, enabled, endpoints).expect("client");
    (test, Arc::new(oauth))
}

fn failed(why: &str) -> LoginStatus {
    LoginStatus {
        status: OAuthLoginStatus::Failed,
        secret_name: None,
        error: Some(why.to_owned()),
    }
}

#[tokio::test]
async fn a_start_needs_sign_in_on_and_a_known_provider_type() {
    let (_db, off) = oauth(false).await;
    assert_eq!(
        off.start("a", "openai", T0).unwrap_err(),
        OAuthError::new(403, "Subscription sign-in is not enabled on this server")
    );
    let (_db, on) = oauth(true).await;
    assert_eq!(
        on.start("a", "anthropic", T0).unwrap_err(),
        OAuthError::new(
            400,
            "Provider type does not support subscription sign-in: anthropic"
        )
    );
    let started = on.start("a", "openai", T0).unwrap();
    assert_eq!(started.expires_at, T0 + LOGIN_TTL_MS);
    assert!(started
        .auth_url
        .starts_with("http://127.0.0.1:9/oauth/authorize?response_type=code&"));
    assert!(uuid::Uuid::parse_str(&started.login_id).is_ok());
}

#[tokio::test]
async fn one_pending_login_per_account_and_each_account_its_own() {
    let (_db, oauth) = oauth(true).await;
    let first = oauth.start("a", "openai", T0).unwrap().login_id;
    let theirs = oauth.start("b", "openai", T0).unwrap().login_id;
    let second = oauth.start("a", "openai", T0 + 1).unwrap().login_id;
    assert_eq!(
        oauth.status("a", &first, T0 + 1).unwrap(),
        failed("Replaced by a new sign-in")
    );
    assert_eq!(
        oauth.status("a", &second, T0 + 1).unwrap().status,
        OAuthLoginStatus::Pending
    );
    assert_eq!(
        oauth.status("b", &theirs, T0 + 1).unwrap().status,
        OAuthLoginStatus::Pending
    );
    // Another account's login is not found, whatever is asked of it.
    assert_eq!(
        oauth.status("a", &theirs, T0).unwrap_err(),
        OAuthError::not_found()
    );
    assert_eq!(
        oauth.cancel("a", &theirs, T0).unwrap_err(),
        OAuthError::not_found()
    );
    assert_eq!(
        oauth.submit("a", &theirs, "code", T0).unwrap_err(),
        OAuthError::new(400, "Sign-in not found")
    );
}

#[tokio::test]
async fn a_pending_login_times_out_and_a_finished_one_is_kept_ten_minutes() {
    let (_db, oauth) = oauth(true).await;
    let id = oauth.start("a", "openai", T0).unwrap().login_id;
    let edge = T0 + LOGIN_TTL_MS;
    assert_eq!(
        oauth.status("a", &id, edge - 1).unwrap().status,
        OAuthLoginStatus::Pending
    );
    assert_eq!(
        oauth.status("a", &id, edge).unwrap(),
        failed("Sign-in timed out")
    );
    assert_eq!(
        oauth.submit("a", &id, "code", edge).unwrap_err(),
        OAuthError::new(400, "Sign-in is no longer pending")
    );
    // Kept until ten minutes after it finished, swept by the next start.
    oauth
        .start("b", "openai", edge + FINISHED_TTL_MS - 1)
        .unwrap();
    assert!(oauth.status("a", &id, edge + FINISHED_TTL_MS - 1).is_ok());
    oauth.start("b", "openai", edge + FINISHED_TTL_MS).unwrap();
    assert_eq!(
        oauth.status("a", &id, edge + FINISHED_TTL_MS).unwrap_err(),
        OAuthError::not_found()
    );
}

#[tokio::test]
async fn a_canceled_login_fails_and_a_bad_paste_fails_it_too() {
    let (_db, oauth) = oauth(true).await;
    let id = oauth.start("a", "openai", T0).unwrap().login_id;
    oauth.cancel("a", &id, T0).unwrap();
    assert_eq!(
        oauth.status("a", &id, T0).unwrap(),
        failed("Sign-in canceled")
    );
    // Canceling a finished login changes nothing and succeeds.
    oauth.cancel("a", &id, T0).unwrap();
    let id = oauth.start("a", "openai", T0).unwrap().login_id;
    oauth.submit("a", &id, "code=abc&state=wrong", T0).unwrap();
    assert_eq!(
        oauth.status("a", &id, T0).unwrap(),
        failed("State mismatch")
    );
    let id = oauth.start("a", "openai", T0).unwrap().login_id;
    oauth
        .submit("a", &id, "http://localhost:1455/auth/callback?state=x", T0)
        .unwrap();
    assert_eq!(
        oauth.status("a", &id, T0).unwrap().error.as_deref(),
        Some("State mismatch")
    );
}

#[tokio::test]
async fn logins_are_bounded_in_the_vm() {
    let (_db, oauth) = oauth(true).await;
    for n in 0..MAX_LOGINS {
        oauth.start(&format!("acct-{n}"), "openai", T0).unwrap();
    }
    assert_eq!(
        oauth.start("one-more", "openai", T0).unwrap_err().status,
        503
    );
    // A finished login makes room.
    let id = oauth.start("acct-0", "openai", T0).unwrap().login_id;
    assert_eq!(oauth.logins(), MAX_LOGINS);
    oauth.cancel("acct-0", &id, T0).unwrap();
    oauth.start("one-more", "openai", T0).unwrap();
    assert_eq!(oauth.logins(), MAX_LOGINS);
}

#[tokio::test]
async fn an_empty_state_is_not_checked() {
    let (_db, oauth) = oauth(true).await;
    let id = oauth.start("a", "openai", T0).unwrap().login_id;
    oauth.submit("a", &id, "abc#", T0).unwrap();
    // Taken for the exchange (which fails later, the issuer being away),
    // not refused for its state.
    let now = oauth.status("a", &id, T0).unwrap();
    assert_ne!(now.error.as_deref(), Some("State mismatch"));
}
