//! "Sign in with ChatGPT" through the real binary against a scripted
//! issuer: the four actions with the reference's shapes, words and status
//! codes, the paste forms, PKCE checked by the issuer, the sealed secret
//! and its metadata, subscription providers (their rules, `authStatus`,
//! the static model list), sign-in off, and no token in clear in the
//! database file.

mod common;

use agentos_protocol::seed::Ipld;
use agentos_tests::http::request;
use agentos_tests::oauth_server::OAuthServer;
use agentos_tests::seed::{call, Answer, Signer};
use common::{eventually, Backend, Options, Sidecar};
use serde_json::{json, Value};

fn json_of(v: &Ipld) -> Value {
    agentos_protocol::seed::ipld_to_json(v, agentos_protocol::seed::JsonForm::Plain)
        .unwrap_or(Value::Null)
}

fn message(a: &Answer) -> String {
    json_of(&a.body)["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn sidecar(server: &OAuthServer, enabled: bool) -> Sidecar {
    Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            config: json!({
                "http": {"listen": "127.0.0.1:0"},
                "builtin": {"subscriptionAuth": enabled,
                            "providerEndpoints": {"openai-oauth": server.issuer(),
                                                  "openai-codex": server.codex()}},
            }),
            ..Options::default()
        },
    )
    .await
}

/// Signs `who` in, the redirect address pasted back; the login id.
pub async fn sign_in(sc: &Sidecar, server: &OAuthServer, who: &Signer) -> String {
    let t = sc.api();
    let started = call(
        &t,
        who,
        json!({"_": "StartProviderOAuth", "providerType": "openai"}),
    )
    .await;
    assert_eq!(started.status, 200, "{:?}", started.body);
    let login = started.text("loginId");
    let (code, state) = server.authorize(&started.text("authUrl"), true);
    let pasted = format!("http://localhost:1455/auth/callback?code={code}&state={state}");
    let submitted = call(
        &t,
        who,
        json!({"_": "SubmitProviderOAuthCode", "loginId": login, "code": pasted}),
    )
    .await;
    assert_eq!(submitted.status, 200, "{:?}", submitted.body);
    settled(sc, who, &login).await
}

/// Waits until the login is no longer pending; its status.
async fn settled(sc: &Sidecar, who: &Signer, login: &str) -> String {
    let t = sc.api();
    eventually("the sign-in settles", || async {
        let status = call(
            &t,
            who,
            json!({"_": "GetProviderOAuthStatus", "loginId": login}),
        )
        .await;
        status.text("status") != "pending"
    })
    .await;
    login.to_owned()
}

async fn status(sc: &Sidecar, who: &Signer, login: &str) -> Value {
    let got = call(
        &sc.api(),
        who,
        json!({"_": "GetProviderOAuthStatus", "loginId": login}),
    )
    .await;
    assert_eq!(got.status, 200, "{:?}", got.body);
    json_of(&got.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_seals_the_tokens_and_a_subscription_provider_uses_them() {
    let server = OAuthServer::start().await;
    let sc = sidecar(&server, true).await;
    let t = sc.api();
    let owner = Signer::new();

    let health = request(&t, "GET", "/api/health", &[], b"")
        .await
        .expect("health");
    let health: Value = serde_json::from_slice(&health.body).expect("JSON");
    assert_eq!(health["subscriptionAuth"], true);

    for (action, status, words) in [
        (
            json!({"_": "StartProviderOAuth"}),
            400,
            "Provider type is required",
        ),
        (
            json!({"_": "StartProviderOAuth", "providerType": "  "}),
            400,
            "Provider type is required",
        ),
        (
            json!({"_": "StartProviderOAuth", "providerType": "anthropic"}),
            400,
            "Provider type does not support subscription sign-in: anthropic",
        ),
        (
            json!({"_": "GetProviderOAuthStatus", "loginId": "nope"}),
            404,
            "Sign-in not found",
        ),
        (
            json!({"_": "CancelProviderOAuth", "loginId": "nope"}),
            404,
            "Sign-in not found",
        ),
        (
            json!({"_": "GetProviderOAuthStatus"}),
            400,
            "Login id is required",
        ),
        (
            json!({"_": "SubmitProviderOAuthCode", "loginId": "nope", "code": "c"}),
            400,
            "Sign-in not found",
        ),
        (
            json!({"_": "SubmitProviderOAuthCode", "loginId": "nope", "code": "x".repeat(8193)}),
            400,
            "Authorization code is too large",
        ),
        (
            json!({"_": "SubmitProviderOAuthCode", "loginId": "nope", "code": " "}),
            400,
            "Authorization code is required",
        ),
    ] {
        let a = call(&t, &owner, action.clone()).await;
        assert_eq!(
            (a.status, message(&a)),
            (status, words.to_owned()),
            "{action}"
        );
    }

    // The whole flow: the issuer checks PKCE, the client and the redirect.
    let started = call(
        &t,
        &owner,
        json!({"_": "StartProviderOAuth", "providerType": "openai"}),
    )
    .await;
    let body = json_of(&started.body);
    assert_eq!(body["_"], "StartProviderOAuthResponse");
    assert!(body["authUrl"].as_str().unwrap().starts_with(&format!(
        "{}/oauth/authorize?response_type=code&",
        server.issuer()
    )));
    let login = started.text("loginId");
    let (code, state) = server.authorize(&started.text("authUrl"), true);
    let pending = status(&sc, &owner, &login).await;
    assert_eq!(
        pending,
        json!({"_": "ProviderOAuthStatusResponse", "loginId": login, "status": "pending"})
    );
    let submitted = call(
        &t,
        &owner,
        json!({"_": "SubmitProviderOAuthCode", "loginId": login, "code": format!("{code}#{state}")}),
    )
    .await;
    assert_eq!(
        json_of(&submitted.body),
        json!({"_": "SubmitProviderOAuthCodeResponse"})
    );
    settled(&sc, &owner, &login).await;
    assert_eq!(
        status(&sc, &owner, &login).await,
        json!({"_": "ProviderOAuthStatusResponse", "loginId": login, "status": "completed",
               "secretName": "openai-subscription-oauth"})
    );
    // Finished: another code is refused; another account cannot see it.
    let again = call(
        &t,
        &owner,
        json!({"_": "SubmitProviderOAuthCode", "loginId": login, "code": "more"}),
    )
    .await;
    assert_eq!(
        (again.status, message(&again)),
        (400, "Sign-in is no longer pending".into())
    );
    let stranger = Signer::new();
    let theirs = call(
        &t,
        &stranger,
        json!({"_": "GetProviderOAuthStatus", "loginId": login}),
    )
    .await;
    assert_eq!(
        (theirs.status, message(&theirs)),
        (404, "Sign-in not found".into())
    );

    // The tokens are a sealed secret with the reference's metadata.
    let secrets = json_of(&call(&t, &owner, json!({"_": "ListSecrets"})).await.body);
    let secret = &secrets["secrets"][0];
    assert_eq!(secret["name"], "openai-subscription-oauth");
    assert_eq!(
        secret["metadata"],
        json!({"provider": "openai", "kind": "provider-oauth"})
    );

    // Subscription providers: openai only, with an oauth secret.
    let set = |provider: Value| {
        call(
            &t,
            &owner,
            json!({"_": "SetModelProvider", "name": "chatgpt", "provider": provider}),
        )
    };
    for (provider, words) in [
        (
            json!({"type": "anthropic", "authMode": "subscription",
                   "secretRefs": {"oauth": "openai-subscription-oauth"}}),
            "Provider type does not support subscription auth: anthropic",
        ),
        (
            json!({"type": "openai", "authMode": "subscription"}),
            "Subscription providers require a secretRefs.oauth credential reference",
        ),
    ] {
        let a = set(provider).await;
        assert_eq!((a.status, message(&a)), (400, words.to_owned()));
    }
    let made = set(json!({"type": "openai", "authMode": "subscription",
                          "secretRefs": {"oauth": "openai-subscription-oauth"}}))
    .await;
    assert_eq!(made.status, 200, "{:?}", made.body);
    let provider = json_of(made.field("provider"));
    assert_eq!(provider["authMode"], "subscription");
    assert_eq!(provider["authStatus"], "ok");
    let listed = json_of(
        &call(&t, &owner, json!({"_": "ListModelProviders"}))
            .await
            .body,
    );
    assert_eq!(listed["providers"][0]["authStatus"], "ok");
    let models = json_of(
        &call(
            &t,
            &owner,
            json!({"_": "ListProviderModels", "provider": "chatgpt"}),
        )
        .await
        .body,
    );
    let ids: Vec<&str> = models["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "gpt-5.6-sol",
            "gpt-5.6-terra",
            "gpt-5.6-luna",
            "gpt-5.5",
            "gpt-5.4"
        ]
    );
    assert_eq!(
        models["models"][0],
        json!({"id": "gpt-5.6-sol", "name": "GPT-5.6 Sol"})
    );
    // An API-key provider carries no authStatus.
    let keyed = call(
        &t,
        &owner,
        json!({"_": "SetModelProvider", "name": "plain", "provider": {"type": "openai"}}),
    )
    .await;
    assert!(json_of(keyed.field("provider")).get("authStatus").is_none());
    // Without its secret the provider needs a sign-in.
    let gone = call(
        &t,
        &owner,
        json!({"_": "DeleteSecret", "name": "openai-subscription-oauth"}),
    )
    .await;
    assert_eq!(gone.status, 200);
    let listed = json_of(
        &call(&t, &owner, json!({"_": "ListModelProviders"}))
            .await
            .body,
    );
    let chatgpt = listed["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "chatgpt")
        .cloned()
        .unwrap();
    assert_eq!(chatgpt["authStatus"], "needs-login");

    // No token the issuer handed out is in the database file in clear.
    let mut stored = Vec::new();
    for entry in std::fs::read_dir(sc.dir.path()).expect("dir") {
        let path = entry.expect("entry").path();
        if path
            .extension()
            .is_some_and(|e| e == "sqlite" || e == "sqlite-wal")
        {
            stored.extend(std::fs::read(&path).unwrap_or_default());
        }
    }
    assert!(!stored.is_empty());
    for token in server.tokens() {
        let found = stored.windows(token.len()).any(|w| w == token.as_bytes());
        assert!(!found, "a token is stored in clear");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_paste_or_token_fails_the_sign_in_with_the_references_words() {
    let server = OAuthServer::start().await;
    let sc = sidecar(&server, true).await;
    let t = sc.api();
    let owner = Signer::new();
    let start = || {
        call(
            &t,
            &owner,
            json!({"_": "StartProviderOAuth", "providerType": "openai"}),
        )
    };
    let submit = |login: String, code: String| {
        call(
            &t,
            &owner,
            json!({"_": "SubmitProviderOAuthCode", "loginId": login, "code": code}),
        )
    };

    // The state must be this login's.
    let s = start().await;
    let login = s.text("loginId");
    let (code, _) = server.authorize(&s.text("authUrl"), true);
    submit(login.clone(), format!("code={code}&state=not-it")).await;
    assert_eq!(status(&sc, &owner, &login).await["error"], "State mismatch");

    // A token without the ChatGPT account claim is refused.
    let s = start().await;
    let login = s.text("loginId");
    let (code, _) = server.authorize(&s.text("authUrl"), false);
    submit(login.clone(), code).await;
    settled(&sc, &owner, &login).await;
    let failed = status(&sc, &owner, &login).await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"], "Failed to extract accountId from token");

    // A code used twice, or not the issuer's, fails the exchange.
    let s = start().await;
    let login = s.text("loginId");
    submit(login.clone(), "made-up".into()).await;
    settled(&sc, &owner, &login).await;
    assert_eq!(
        status(&sc, &owner, &login).await["error"],
        "Token exchange failed"
    );

    // A new start replaces the pending one; a cancel ends one.
    let first = start().await.text("loginId");
    let second = start().await.text("loginId");
    assert_eq!(
        status(&sc, &owner, &first).await["error"],
        "Replaced by a new sign-in"
    );
    let canceled = call(
        &t,
        &owner,
        json!({"_": "CancelProviderOAuth", "loginId": second}),
    )
    .await;
    assert_eq!(
        json_of(&canceled.body),
        json!({"_": "CancelProviderOAuthResponse", "loginId": second})
    );
    assert_eq!(
        status(&sc, &owner, &second).await["error"],
        "Sign-in canceled"
    );
    // Nothing was stored by any of them.
    let secrets = json_of(&call(&t, &owner, json!({"_": "ListSecrets"})).await.body);
    assert_eq!(secrets["secrets"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_is_off_unless_the_operator_turns_it_on() {
    let server = OAuthServer::start().await;
    let sc = sidecar(&server, false).await;
    let t = sc.api();
    let owner = Signer::new();
    let a = call(
        &t,
        &owner,
        json!({"_": "StartProviderOAuth", "providerType": "openai"}),
    )
    .await;
    assert_eq!(
        (a.status, message(&a)),
        (
            403,
            "Subscription sign-in is not enabled on this server".into()
        )
    );
    let health = request(&t, "GET", "/api/health", &[], b"")
        .await
        .expect("health");
    let health: Value = serde_json::from_slice(&health.body).expect("JSON");
    assert_eq!(health["subscriptionAuth"], false);
}
