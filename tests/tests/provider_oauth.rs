//! "Sign in with ChatGPT" through the real binary against a scripted
//! issuer: the four actions with the reference's shapes, words and status
//! codes, the paste forms, PKCE checked by the issuer, the sealed secret
//! and its metadata, subscription providers (their rules, `authStatus`,
//! the static model list), sign-in off, and no token in clear in the
//! database file.

#[path = "signed_ws/client.rs"]
#[allow(dead_code)]
mod client;
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
                // Titles would be more Codex calls than a test counts.
                "builtin": {"subscriptionAuth": enabled, "sessionTitles": false,
                            "providerRetries": 0,
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

    // The account's feed hears of the sign-in.
    let addr = sc.ready["http"].as_str().expect("http").to_owned();
    let mut ws = client::Ws::open(&addr).await;
    let account = format!("account/{}", owner.id());
    ws.subscribed(&owner, &account, None).await;

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
    let changed = ws
        .next_where(|e| e["value"]["reason"] == "model-provider-changed")
        .await;
    assert_eq!(changed["key"], account.as_str());
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

    assert_no_token_in_clear(&sc, &server);
}

/// No token the issuer handed out is in any file of the sidecar (its
/// database, its write-ahead log, its log) in clear.
fn assert_no_token_in_clear(sc: &Sidecar, server: &OAuthServer) {
    let mut files = 0;
    for entry in std::fs::read_dir(sc.dir.path()).expect("dir") {
        let path = entry.expect("entry").path();
        if !path.is_file() {
            continue;
        }
        let stored = std::fs::read(&path).unwrap_or_default();
        files += 1;
        for token in server.tokens() {
            let found = stored.windows(token.len()).any(|w| w == token.as_bytes());
            assert!(!found, "a token is in {} in clear", path.display());
        }
    }
    assert!(files >= 2, "the database and the log were read");
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

    // A code that is not the issuer's fails the exchange.
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

    // A code is good once: the issuer refuses it to a second login.
    let s = start().await;
    let login = s.text("loginId");
    let (code, state) = server.authorize(&s.text("authUrl"), true);
    submit(login.clone(), format!("{code}#{state}")).await;
    settled(&sc, &owner, &login).await;
    assert_eq!(status(&sc, &owner, &login).await["status"], "completed");
    let s = start().await;
    let again = s.text("loginId");
    submit(again.clone(), code).await;
    settled(&sc, &owner, &again).await;
    assert_eq!(
        status(&sc, &owner, &again).await["error"],
        "Token exchange failed"
    );
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

/// A signed-in owner with a subscription provider and a builtin agent on
/// it: the agent's id.
async fn subscription_agent(sc: &Sidecar, server: &OAuthServer, owner: &Signer) -> String {
    let t = sc.api();
    sign_in(sc, server, owner).await;
    let made = call(
        &t,
        owner,
        json!({"_": "SetModelProvider", "name": "chatgpt",
               "provider": {"type": "openai", "authMode": "subscription",
                            "secretRefs": {"oauth": "openai-subscription-oauth"}}}),
    )
    .await;
    assert_eq!(made.status, 200, "{:?}", made.body);
    let agent = call(
        &t,
        owner,
        json!({"_": "CreateAgent", "definition": {"name": "Codex", "systemPrompt": "Be brief.",
               "modelProvider": "chatgpt", "model": "gpt-5.5"}}),
    )
    .await;
    assert_eq!(agent.status, 200, "{:?}", agent.body);
    agent.text("agentId")
}

async fn new_session(sc: &Sidecar, owner: &Signer, agent: &str) -> String {
    call(
        &sc.api(),
        owner,
        json!({"_": "CreateSession", "agentId": agent}),
    )
    .await
    .text("sessionId")
}

async fn say(sc: &Sidecar, owner: &Signer, session: &str, text: &str) -> Answer {
    call(
        &sc.api(),
        owner,
        json!({"_": "MessageSession", "sessionId": session,
               "content": [{"type": "text", "text": text}]}),
    )
    .await
}

fn codex_calls(server: &OAuthServer) -> Vec<agentos_tests::oauth_server::Seen> {
    server
        .seen()
        .into_iter()
        .filter(|s| s.path == "/backend-api/codex/responses")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_turn_speaks_to_the_codex_backend() {
    use agentos_tests::oauth_server::{CodexReply, ACCOUNT};
    let server = OAuthServer::start().await;
    let sc = sidecar(&server, true).await;
    let owner = Signer::new();
    let agent = subscription_agent(&sc, &server, &owner).await;
    let session = new_session(&sc, &owner, &agent).await;

    server.push(CodexReply::ToolCall(
        "call_1".into(),
        "read".into(),
        json!({"address": "~/self"}),
    ));
    server.push(CodexReply::Text(vec!["Hel".into(), "lo".into()]));
    let said = say(&sc, &owner, &session, "Who are you?").await;
    assert_eq!(said.status, 200, "{:?}", said.body);
    let calls = codex_calls(&server);
    assert_eq!(calls.len(), 2);
    let first = &calls[0];
    assert!(first.headers["authorization"].starts_with("Bearer "));
    assert_eq!(first.headers["chatgpt-account-id"], ACCOUNT);
    assert_eq!(first.headers["openai-beta"], "responses=experimental");
    assert_eq!(first.headers["originator"], "pi");
    // The agent's session keys the backend's cache, the same for each call.
    let cache_key = first.headers["session_id"].clone();
    assert!(!cache_key.is_empty());
    assert_eq!(calls[1].headers["session_id"], cache_key);
    let body: Value = serde_json::from_str(&first.body).expect("JSON body");
    assert_eq!(body["prompt_cache_key"], cache_key);
    assert_eq!(body["model"], "gpt-5.5");
    assert_eq!(
        (body["store"].clone(), body["stream"].clone()),
        (json!(false), json!(true))
    );
    assert!(body["instructions"].as_str().unwrap().contains("Be brief."));
    assert_eq!(
        body["input"][0],
        json!({"role": "user", "content": [{"type": "input_text", "text": format!(
            "<message_sender>\n{{\"accountId\":\"{}\"}}\n</message_sender>\n\nWho are you?",
            owner.id()
        )}]})
    );
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"read"), "{tools:?}");
    // The call's result went back as the Responses API takes it.
    let second: Value = serde_json::from_str(&calls[1].body).expect("JSON body");
    let input = second["input"].as_array().unwrap();
    assert!(input
        .iter()
        .any(|i| i["type"] == "function_call" && i["call_id"] == "call_1"));
    assert!(input
        .iter()
        .any(|i| i["type"] == "function_call_output" && i["call_id"] == "call_1"));
    // The reply is the session's.
    let got = call(
        &sc.api(),
        &owner,
        json!({"_": "GetSession", "sessionId": session}),
    )
    .await;
    let events = json_of(got.field("events"));
    let reply = events
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|e| e["event"]["type"] == "message" && e["event"]["role"] == "assistant")
        .expect("a reply");
    assert_eq!(reply["event"]["content"], "Hello");

    // The plan's limit, in the reference's words; a refused token is not
    // tried again.
    let resets_at = (agentos_base_now() / 1000) + 600;
    server.push(CodexReply::Status(
        429,
        json!({"error": {"code": "usage_limit_reached", "plan_type": "plus",
                         "resets_at": resets_at}}),
    ));
    say(&sc, &owner, &session, "more").await;
    let last_error = |events: &Value| {
        events
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|e| e["event"]["type"] == "error")
            .map(|e| {
                e["event"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .unwrap_or_default()
    };
    let got = call(
        &sc.api(),
        &owner,
        json!({"_": "GetSession", "sessionId": session}),
    )
    .await;
    let error = last_error(&json_of(got.field("events")));
    assert!(
        error.contains("You have hit your ChatGPT usage limit (plus plan). Try again in ~"),
        "{error}"
    );
    let before = codex_calls(&server).len();
    server.push(CodexReply::Status(
        401,
        json!({"error": {"message": "token revoked"}}),
    ));
    say(&sc, &owner, &session, "again").await;
    assert_eq!(codex_calls(&server).len(), before + 1);
}

fn agentos_base_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_tokens_are_refreshed_once_and_a_revoked_sign_in_asks_for_another() {
    use agentos_tests::oauth_server::CodexReply;
    let server = OAuthServer::start().await;
    let sc = sidecar(&server, true).await;
    let owner = Signer::new();
    // Tokens that expire in a second.
    server.set_expires_in(1);
    let agent = subscription_agent(&sc, &server, &owner).await;
    let first = new_session(&sc, &owner, &agent).await;
    let second = new_session(&sc, &owner, &agent).await;
    server.set_expires_in(3600);
    // Only more time can pass than this.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    server.push(CodexReply::Text(vec!["one".into()]));
    server.push(CodexReply::Text(vec!["two".into()]));
    let (a, b) = tokio::join!(
        say(&sc, &owner, &first, "first"),
        say(&sc, &owner, &second, "second")
    );
    assert_eq!(
        (a.status, b.status),
        (200, 200),
        "{:?} {:?}",
        a.body,
        b.body
    );
    // Two turns at once, one refresh: the rotating token was spent once.
    assert_eq!(server.refreshes(), (1, 0));
    assert_eq!(codex_calls(&server).len(), 2);

    // Revoked: the next refresh is refused. The message is refused 401,
    // logged, and the provider needs a sign-in.
    let sc2_owner = Signer::new();
    server.set_expires_in(1);
    let agent = subscription_agent(&sc, &server, &sc2_owner).await;
    let session = new_session(&sc, &sc2_owner, &agent).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    server.revoke();
    let calls_before = codex_calls(&server).len();
    let refused = say(&sc, &sc2_owner, &session, "hello?").await;
    assert_eq!(
        (refused.status, message(&refused)),
        (
            401,
            "Your OpenAI subscription sign-in has expired or was revoked. Open model provider \
             settings and sign in with ChatGPT again."
                .to_owned()
        )
    );
    assert_eq!(codex_calls(&server).len(), calls_before);
    let listed = json_of(
        &call(&sc.api(), &sc2_owner, json!({"_": "ListModelProviders"}))
            .await
            .body,
    );
    assert_eq!(listed["providers"][0]["authStatus"], "needs-login");
    let got = call(
        &sc.api(),
        &sc2_owner,
        json!({"_": "GetSession", "sessionId": session}),
    )
    .await;
    let events = json_of(got.field("events"));
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"]["type"] == "error"
                && e["event"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("sign in with ChatGPT again")),
        "{events}"
    );
    // Signing in again clears it.
    sign_in(&sc, &server, &sc2_owner).await;
    let listed = json_of(
        &call(&sc.api(), &sc2_owner, json!({"_": "ListModelProviders"}))
            .await
            .body,
    );
    assert_eq!(listed["providers"][0]["authStatus"], "ok");
    assert_no_token_in_clear(&sc, &server);
}
