//! A scripted Seed hypermedia server on loopback, for the hypermedia
//! tests: `GET /api/<Key>?…` answers from what the test put in (resources
//! by their packed id, accounts by uid, any key's answer by its exact
//! query string) in superjson, as Seed's server sends them (a document's
//! `generationInfo.generation` is a bigint). A key can be made to fail: an
//! HTTP status with an `{error}` body, a body that is not JSON, an answer
//! larger than the client takes, or one that comes too late. As an IPFS
//! gateway it serves files at `/ipfs/<cid>`. Every request is recorded as
//! `<Key>?<query>` (`ipfs/<cid>` for the gateway's).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::{json, Value};

/// How a key misbehaves.
#[derive(Clone, Debug)]
pub enum Fault {
    /// This status, with `{"error": message}`.
    Status(u16, String),
    /// A 200 whose body is not JSON.
    NotJson,
    /// A 200 of this many bytes of JSON.
    Oversized(usize),
    /// The answer after this long.
    Slow(Duration),
}

#[derive(Default)]
struct State {
    resources: HashMap<String, Value>,
    accounts: HashMap<String, Value>,
    /// Answers by key and query string.
    answers: HashMap<(String, String), Value>,
    faults: HashMap<String, Fault>,
    /// Files the gateway serves at `/ipfs/<cid>`: type and bytes.
    files: HashMap<String, (String, Vec<u8>)>,
    seen: Vec<String>,
    /// Slow answers being waited out now, and the most at once.
    slow_now: usize,
    slow_most: usize,
}

pub struct HmServer {
    base_url: String,
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl HmServer {
    pub async fn start() -> HmServer {
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let (addr, _) = crate::loopback::serve("the scripted hypermedia server", move |request| {
            let state = shared.clone();
            async move { Ok::<_, Infallible>(serve(&state, request).await) }
        })
        .await;
        HmServer {
            base_url: format!("http://{addr}"),
            state,
        }
    }

    /// What `hypermedia.serverUrl` names.
    pub fn url(&self) -> String {
        self.base_url.clone()
    }

    /// `Resource` answers `resource` for the packed id `id`.
    pub fn resource(&self, id: &str, resource: Value) {
        lock(&self.state).resources.insert(id.to_owned(), resource);
    }

    /// `Account` answers an account named `name` for `uid`.
    pub fn account(&self, uid: &str, name: &str) {
        let account = json!({
            "type": "account",
            "id": {"id": format!("hm://{uid}"), "uid": uid, "path": [], "version": null,
                   "blockRef": null, "blockRange": null, "hostname": null, "scheme": "hm",
                   "latest": true},
            "metadata": {"name": name},
        });
        lock(&self.state).accounts.insert(uid.to_owned(), account);
    }

    /// `Query` answers `answer` to the query string `query`.
    pub fn query(&self, query: &str, answer: Value) {
        self.answer("Query", query, answer);
    }

    /// `key` answers `answer` to the query string `query`.
    pub fn answer(&self, key: &str, query: &str, answer: Value) {
        lock(&self.state)
            .answers
            .insert((key.to_owned(), query.to_owned()), answer);
    }

    /// The gateway serves `data` as `content_type` at `/ipfs/<cid>`.
    pub fn file(&self, cid: &str, content_type: &str, data: &[u8]) {
        lock(&self.state)
            .files
            .insert(cid.to_owned(), (content_type.to_owned(), data.to_vec()));
    }

    pub fn fault(&self, key: &str, fault: Fault) {
        lock(&self.state).faults.insert(key.to_owned(), fault);
    }

    pub fn heal(&self, key: &str) {
        lock(&self.state).faults.remove(key);
    }

    /// The most slow answers that were being waited out at once.
    pub fn most_slow_at_once(&self) -> usize {
        lock(&self.state).slow_most
    }

    /// Every request so far, as `<Key>?<query>`.
    pub fn seen(&self) -> Vec<String> {
        lock(&self.state).seen.clone()
    }
}

/// A document resource as Seed's server sends it.
pub fn document(id: &str, name: &str, content: Value) -> Value {
    let (uid, path) = id
        .trim_start_matches("hm://")
        .split_once('/')
        .unwrap_or((id.trim_start_matches("hm://"), ""));
    json!({
        "type": "document",
        "document": {
            "content": content, "version": "bafyV1", "account": uid,
            "authors": [uid], "path": format!("/{path}"),
            "createTime": "2026-01-01T00:00:00Z", "updateTime": "2026-01-02T00:00:00Z",
            "metadata": {"name": name, "summary": "A summary"},
            "genesis": "bafyG",
            "generationInfo": {"genesis": "bafyG", "generation": "1767225600000"},
            "visibility": "PUBLIC"
        },
        "id": {"id": id, "uid": uid, "path": path.split('/').collect::<Vec<_>>(),
               "version": null, "blockRef": null, "blockRange": null, "hostname": null,
               "scheme": "hm", "latest": true}
    })
}

fn reply(status: u16, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .unwrap_or_default()
}

/// The superjson answer: a document's generation carries its bigint
/// annotation.
fn superjson(value: Value) -> String {
    let mut values = serde_json::Map::new();
    if value["document"]["generationInfo"]["generation"].is_string() {
        values.insert(
            "document.generationInfo.generation".into(),
            json!(["bigint"]),
        );
    }
    if values.is_empty() {
        json!({"json": value}).to_string()
    } else {
        json!({"json": value, "meta": {"values": values}}).to_string()
    }
}

fn query_param(query: &str, name: &str) -> Option<String> {
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

async fn serve(state: &Mutex<State>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    if let Some(cid) = path.strip_prefix("/ipfs/") {
        let mut state = lock(state);
        state.seen.push(format!("ipfs/{cid}"));
        return match state.files.get(cid) {
            Some((content_type, data)) => Response::builder()
                .status(200)
                .header("content-type", content_type.as_str())
                .body(Full::new(Bytes::from(data.clone())))
                .unwrap_or_default(),
            None => reply(404, r#"{"error":"no such block"}"#),
        };
    }
    let Some(key) = path.strip_prefix("/api/") else {
        return reply(404, r#"{"error":"not found"}"#);
    };
    let key = key.to_owned();
    let fault = {
        let mut state = lock(state);
        state.seen.push(format!("{key}?{query}"));
        state.faults.get(&key).cloned()
    };
    match fault {
        Some(Fault::Status(status, message)) => {
            return reply(status, json!({"error": message}).to_string())
        }
        Some(Fault::NotJson) => return reply(200, "not json"),
        Some(Fault::Oversized(n)) => {
            return reply(200, format!("{{\"json\":\"{}\"}}", "x".repeat(n)))
        }
        Some(Fault::Slow(wait)) => {
            {
                let mut state = lock(state);
                state.slow_now += 1;
                state.slow_most = state.slow_most.max(state.slow_now);
            }
            tokio::time::sleep(wait).await;
            lock(state).slow_now -= 1;
        }
        None => {}
    }
    let state = lock(state);
    if let Some(answer) = state.answers.get(&(key.clone(), query.clone())) {
        return reply(200, superjson(answer.clone()));
    }
    let answer = match key.as_str() {
        "Resource" => {
            let id = query_param(&query, "id").unwrap_or_default();
            let bare = id.split(['?', '#']).next().unwrap_or_default().to_owned();
            state
                .resources
                .get(&id)
                .or_else(|| state.resources.get(&bare))
                .cloned()
                .unwrap_or_else(|| {
                    json!({"type": "not-found", "id": {"id": bare, "uid": "", "path": [],
                           "version": null, "blockRef": null, "blockRange": null,
                           "hostname": null, "scheme": "hm", "latest": true}})
                })
        }
        "Account" => {
            let uid = query_param(&query, "id").unwrap_or_default();
            state
                .accounts
                .get(&uid)
                .cloned()
                .unwrap_or_else(|| json!({"type": "account-not-found", "uid": uid}))
        }
        "Query" => Value::Null,
        _ => {
            return reply(
                404,
                json!({"error": format!("Unknown query key: {key}")}).to_string(),
            )
        }
    };
    reply(200, superjson(answer))
}
