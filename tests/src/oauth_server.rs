//! A scripted ChatGPT sign-in issuer and Codex backend on loopback, for the
//! subscription tests: `/oauth/token` exchanges one-time codes (checking
//! PKCE, the client id and the redirect) and rotating refresh tokens (a
//! spent one is refused), handing out access tokens with or without the
//! ChatGPT account claim; `/codex/responses` checks the bearer token and
//! account header and streams the next queued reply as the Responses API's
//! server-sent events. Every request is recorded.

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The client id the issuer accepts (the reference's).
pub const CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
pub const REDIRECT_URI: &str = "http://localhost:1455/auth/callback";
/// The ChatGPT account tokens are issued for.
pub const ACCOUNT: &str = "chatgpt-acct-1";

/// One recorded request.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: String,
}

/// One answer of the Codex backend.
#[derive(Clone, Debug)]
pub enum CodexReply {
    /// Text deltas.
    Text(Vec<String>),
    /// `(call id, name, arguments)`.
    ToolCall(String, String, Value),
    /// This status with this JSON body.
    Status(u16, Value),
}

#[derive(Default)]
struct State {
    /// Code → (PKCE challenge, whether its access token has the claim).
    codes: HashMap<String, (String, bool)>,
    live_refresh: HashSet<String>,
    spent_refresh: HashSet<String>,
    live_access: HashSet<String>,
    issued: u64,
    expires_in: i64,
    replies: VecDeque<CodexReply>,
    seen: Vec<Seen>,
    /// Refreshes answered with a new pair.
    refreshed: u64,
    /// Refreshes refused (spent or unknown tokens).
    refused: u64,
}

/// The running server.
pub struct OAuthServer {
    base_url: String,
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl OAuthServer {
    pub async fn start() -> OAuthServer {
        let state = Arc::new(Mutex::new(State {
            expires_in: 3600,
            ..State::default()
        }));
        let shared = state.clone();
        let (addr, _) = crate::loopback::serve("the scripted issuer", move |request| {
            let state = shared.clone();
            async move { Ok::<_, Infallible>(serve(&state, request).await) }
        })
        .await;
        OAuthServer {
            base_url: format!("http://{addr}"),
            state,
        }
    }

    /// The issuer's base (what `providerEndpoints["openai-oauth"]` names).
    pub fn issuer(&self) -> String {
        self.base_url.clone()
    }

    /// The Codex base (what `providerEndpoints["openai-codex"]` names).
    pub fn codex(&self) -> String {
        format!("{}/backend-api", self.base_url)
    }

    /// What the browser would do at `auth_url`: sign the user in and
    /// answer a one-time code bound to the URL's PKCE challenge, with the
    /// URL's state: `(code, state)`.
    pub fn authorize(&self, auth_url: &str, with_claim: bool) -> (String, String) {
        let query = auth_url.split_once('?').map(|(_, q)| q).unwrap_or_default();
        let params: HashMap<String, String> = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), decode(v)))
            .collect();
        assert_eq!(params.get("client_id").map(String::as_str), Some(CLIENT_ID));
        assert_eq!(
            params.get("code_challenge_method").map(String::as_str),
            Some("S256")
        );
        let mut state = lock(&self.state);
        state.issued += 1;
        let code = format!("code-{}", state.issued);
        let challenge = params.get("code_challenge").cloned().unwrap_or_default();
        state.codes.insert(code.clone(), (challenge, with_claim));
        (code, params.get("state").cloned().unwrap_or_default())
    }

    /// Access tokens live this many seconds from now on.
    pub fn set_expires_in(&self, seconds: i64) {
        lock(&self.state).expires_in = seconds;
    }

    /// Refuses every refresh token issued so far (a revoked sign-in).
    pub fn revoke(&self) {
        let mut state = lock(&self.state);
        let live: Vec<String> = state.live_refresh.drain().collect();
        state.spent_refresh.extend(live);
    }

    pub fn push(&self, reply: CodexReply) {
        lock(&self.state).replies.push_back(reply);
    }

    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.state).seen.clone()
    }

    /// `(refreshes answered, refreshes refused)`.
    pub fn refreshes(&self) -> (u64, u64) {
        let state = lock(&self.state);
        (state.refreshed, state.refused)
    }

    /// Every token handed out so far (to check none is stored in clear).
    pub fn tokens(&self) -> Vec<String> {
        let state = lock(&self.state);
        state
            .live_access
            .iter()
            .chain(state.live_refresh.iter())
            .chain(state.spent_refresh.iter())
            .cloned()
            .collect()
    }
}

/// Form decoding: `+` is a space, `%XX` a byte.
fn decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%' && i + 3 <= bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (escaped, bytes[i]) {
            (Some(byte), _) => {
                out.push(byte);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, other) => {
                out.push(other);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn form(body: &str) -> HashMap<String, String> {
    body.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

fn answer(status: u16, body: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap_or_default()
}

/// A new token pair for the account (the access token with or without
/// the claim).
fn issue(state: &mut State, with_claim: bool) -> Value {
    state.issued += 1;
    let claims = if with_claim {
        json!({"https://api.openai.com/auth": {"chatgpt_account_id": ACCOUNT}, "n": state.issued})
    } else {
        json!({"n": state.issued})
    };
    let access = format!(
        "{}.{}.sig",
        b64url(b"{\"alg\":\"none\"}"),
        b64url(claims.to_string().as_bytes())
    );
    let refresh = format!("refresh-{}-{}", state.issued, uuid::Uuid::new_v4().simple());
    state.live_access.insert(access.clone());
    state.live_refresh.insert(refresh.clone());
    json!({"access_token": access, "refresh_token": refresh, "expires_in": state.expires_in,
           "token_type": "Bearer"})
}

async fn serve(state: &Mutex<State>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_owned();
    let headers: HashMap<String, String> = request
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let body = match request.into_body().collect().await {
        Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        Err(_) => String::new(),
    };
    let mut st = lock(state);
    st.seen.push(Seen {
        path: path.clone(),
        headers: headers.clone(),
        body: body.clone(),
    });
    match path.as_str() {
        "/oauth/token" => token(&mut st, &body),
        "/backend-api/codex/responses" => codex(&mut st, &headers),
        _ => answer(404, json!({"error": "not found"})),
    }
}

fn token(st: &mut State, body: &str) -> Response<Full<Bytes>> {
    let form = form(body);
    let field = |k: &str| form.get(k).cloned().unwrap_or_default();
    if field("client_id") != CLIENT_ID {
        return answer(401, json!({"error": "invalid_client"}));
    }
    match field("grant_type").as_str() {
        "authorization_code" => {
            let Some((challenge, with_claim)) = st.codes.remove(&field("code")) else {
                return answer(400, json!({"error": "invalid_grant"}));
            };
            let verified = b64url(&Sha256::digest(field("code_verifier").as_bytes()));
            if verified != challenge || field("redirect_uri") != REDIRECT_URI {
                return answer(400, json!({"error": "invalid_grant"}));
            }
            answer(200, issue(st, with_claim))
        }
        "refresh_token" => {
            let token = field("refresh_token");
            if !st.live_refresh.remove(&token) {
                st.refused += 1;
                return answer(
                    400,
                    json!({"error": "invalid_grant",
                                          "error_description": "refresh token already used"}),
                );
            }
            st.spent_refresh.insert(token);
            st.refreshed += 1;
            answer(200, issue(st, true))
        }
        _ => answer(400, json!({"error": "unsupported_grant_type"})),
    }
}

fn event(kind: &str, mut data: Value) -> String {
    data["type"] = json!(kind);
    format!("event: {kind}\ndata: {data}\n\n")
}

fn codex(st: &mut State, headers: &HashMap<String, String>) -> Response<Full<Bytes>> {
    let bearer = headers
        .get("authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !st.live_access.contains(bearer) {
        return answer(
            401,
            json!({"error": {"message": "invalid token", "code": "token_invalid"}}),
        );
    }
    if headers.get("chatgpt-account-id").map(String::as_str) != Some(ACCOUNT) {
        return answer(403, json!({"error": {"message": "wrong account"}}));
    }
    let reply = st
        .replies
        .pop_front()
        .unwrap_or_else(|| CodexReply::Text(vec!["ok".into()]));
    let usage = json!({"input_tokens": 17, "output_tokens": 3, "total_tokens": 20,
                       "input_tokens_details": {"cached_tokens": 0}});
    let mut out = event(
        "response.created",
        json!({"response": {"id": "resp_1", "status": "in_progress"}}),
    );
    match reply {
        CodexReply::Status(status, body) => return answer(status, body),
        CodexReply::Text(deltas) => {
            let text: String = deltas.concat();
            out.push_str(&event(
                "response.output_item.added",
                json!({"output_index": 0,
                "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
            ));
            out.push_str(&event(
                "response.content_part.added",
                json!({"output_index": 0,
                "part": {"type": "output_text", "text": ""}}),
            ));
            for delta in deltas {
                out.push_str(&event(
                    "response.output_text.delta",
                    json!({"output_index": 0, "delta": delta}),
                ));
            }
            out.push_str(&event("response.output_item.done", json!({"output_index": 0,
                "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                         "content": [{"type": "output_text", "text": text, "annotations": []}]}})));
        }
        CodexReply::ToolCall(call_id, name, arguments) => {
            let args = arguments.to_string();
            let (head, tail) = args.split_at(args.len() / 2);
            out.push_str(&event(
                "response.output_item.added",
                json!({"output_index": 0,
                "item": {"type": "function_call", "id": "fc_1", "call_id": call_id, "name": name,
                         "arguments": ""}}),
            ));
            for piece in [head, tail] {
                out.push_str(&event(
                    "response.function_call_arguments.delta",
                    json!({"output_index": 0, "delta": piece}),
                ));
            }
            out.push_str(&event(
                "response.function_call_arguments.done",
                json!({"output_index": 0, "arguments": args}),
            ));
            out.push_str(&event(
                "response.output_item.done",
                json!({"output_index": 0,
                "item": {"type": "function_call", "id": "fc_1", "call_id": call_id, "name": name,
                         "arguments": args, "status": "completed"}}),
            ));
        }
    }
    out.push_str(&event(
        "response.completed",
        json!({"response": {"id": "resp_1",
        "status": "completed", "usage": usage}}),
    ));
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Full::new(Bytes::from(out)))
        .unwrap_or_default()
}
