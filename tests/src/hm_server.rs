//! A scripted Seed hypermedia server on loopback, for the hypermedia
//! tests: `GET /api/<Key>?…` answers from what the test put in (resources
//! by their packed id, accounts by uid, any key's answer by its exact
//! query string) in superjson, as Seed's server sends them (a document's
//! `generationInfo.generation` is a bigint). A key can be made to fail: an
//! HTTP status with an `{error}` body, a body that is not JSON, an answer
//! larger than the client takes, or one that comes too late. As an IPFS
//! gateway it serves files at `/ipfs/<cid>`. Every request is recorded as
//! `<Key>?<query>` (`ipfs/<cid>` for the gateway's).
//!
//! `POST /api/PublishBlobs` takes a DAG-CBOR `{blobs: [{cid?, data}]}` as
//! Seed's server does, and checks what a Seed node would: a named blob's
//! hash is its name's, and a signed blob (one with `signer` and `sig`)
//! verifies, re-encoded with `sig` zeroed, under its signer's key. A
//! request with one bad blob is refused whole (400 `{error}`); a good one
//! is kept, in order, for the test to read ([`HmServer::published`]).
//!
//! What is published becomes readable, as on a Seed node: a version `Ref`
//! makes its document (its changes applied: attributes, replaced, moved
//! and deleted blocks) the `Resource` at its space and path, and its
//! changes the answer of `ListChanges`; a `Comment` is the answer of
//! `Comment` for its record id.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::{json, Value};
use sha2::Digest as _;

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
    /// Publish requests taken, each its blobs in order.
    published: Vec<Vec<Published>>,
    /// Every DAG-CBOR blob published, as DAG-JSON, by CID.
    blobs: HashMap<String, Value>,
    /// `ListChanges` answers of published documents, by bare id.
    changes: HashMap<String, Value>,
    /// Published comments, by record id.
    comments: HashMap<String, Value>,
    /// Slow answers being waited out now, and the most at once.
    slow_now: usize,
    slow_most: usize,
}

/// A blob a publish request carried, checked.
#[derive(Clone, Debug)]
pub struct Published {
    /// The name the request gave it, if any.
    pub named: Option<String>,
    /// Its CID: dag-cbor when it decodes as DAG-CBOR, else raw.
    pub cid: String,
    pub data: Vec<u8>,
    /// The blob as DAG-JSON, when it is DAG-CBOR.
    pub value: Option<Value>,
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

    /// The publish requests taken so far, each its blobs in order.
    pub fn published(&self) -> Vec<Vec<Published>> {
        lock(&self.state).published.clone()
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
    if key == "PublishBlobs" {
        use http_body_util::BodyExt;
        let body = match request.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(e) => return reply(400, json!({"error": e.to_string()}).to_string()),
        };
        return match check_publish(&body) {
            Ok(blobs) => {
                let cids: Vec<String> = blobs
                    .iter()
                    .map(|b| b.named.clone().unwrap_or_else(|| b.cid.clone()))
                    .collect();
                let mut state = lock(state);
                for blob in &blobs {
                    if let Some(value) = &blob.value {
                        state.blobs.insert(blob.cid.clone(), value.clone());
                    }
                }
                for blob in &blobs {
                    match blob.value.as_ref().map(|v| &v["type"]) {
                        Some(kind) if kind == "Ref" => apply_ref(&mut state, blob),
                        Some(kind) if kind == "Comment" => apply_comment(&mut state, blob),
                        _ => {}
                    }
                }
                state.published.push(blobs);
                reply(200, json!({"json": {"cids": cids}}).to_string())
            }
            Err(error) => reply(400, json!({"error": error}).to_string()),
        };
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
        "ListChanges" => {
            let id = query_param(&query, "targetId").unwrap_or_default();
            let bare = id.split(['?', '#']).next().unwrap_or_default();
            state
                .changes
                .get(bare)
                .cloned()
                .unwrap_or_else(|| json!({"changes": [], "latestVersion": ""}))
        }
        "Comment" => {
            let id = query_param(&query, "__value").unwrap_or_default();
            match state.comments.get(&id) {
                Some(comment) => comment.clone(),
                None => {
                    return reply(
                        500,
                        json!({"error": format!("comment {id} not found")}).to_string(),
                    )
                }
            }
        }
        _ => {
            return reply(
                404,
                json!({"error": format!("Unknown query key: {key}")}).to_string(),
            )
        }
    };
    reply(200, superjson(answer))
}

/// Largest publish request taken.
const MAX_PUBLISH_BYTES: usize = 64 << 20;

/// The blobs of a `PublishBlobs` body, each checked as a Seed node checks
/// it.
fn check_publish(body: &[u8]) -> Result<Vec<Published>, String> {
    use agentos_protocol::seed::{cbor, ipld_to_json, Ipld, JsonForm};
    let input: Ipld = cbor::from_slice(body, MAX_PUBLISH_BYTES).map_err(|e| e.to_string())?;
    let Some(Ipld::List(entries)) = (match &input {
        Ipld::Map(fields) if fields.len() == 1 => fields.get("blobs"),
        _ => None,
    }) else {
        return Err("input must be {blobs: [...]}".into());
    };
    let mut out = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let Ipld::Map(fields) = entry else {
            return Err(format!("blob {i} is not a map"));
        };
        if fields.keys().any(|k| k != "cid" && k != "data") {
            return Err(format!("blob {i} has a key other than cid and data"));
        }
        let Some(Ipld::Bytes(data)) = fields.get("data") else {
            return Err(format!("blob {i} has no data bytes"));
        };
        let named = match fields.get("cid") {
            None => None,
            Some(Ipld::String(cid)) => Some(cid.clone()),
            Some(_) => return Err(format!("blob {i}'s cid is not a string")),
        };
        let digest = sha2::Sha256::digest(data);
        if let Some(named) = &named {
            let cid: ipld_core::cid::Cid = named
                .parse()
                .map_err(|e| format!("blob {i}'s cid {named}: {e}"))?;
            if cid.hash().code() != 0x12 || cid.hash().digest() != digest.as_slice() {
                return Err(format!("blob {i}'s cid {named} is not its hash"));
            }
        }
        let decoded: Option<Ipld> = cbor::from_slice(data, MAX_PUBLISH_BYTES).ok();
        let codec = if decoded.is_some() { 0x71 } else { 0x55 };
        if let Some(Ipld::Map(blob)) = &decoded {
            if blob.contains_key("sig") || blob.contains_key("signer") {
                verify_blob(blob).map_err(|e| format!("blob {i}: {e}"))?;
            }
        }
        let hash = ipld_core::cid::multihash::Multihash::<64>::wrap(0x12, &digest)
            .map_err(|e| e.to_string())?;
        out.push(Published {
            named,
            cid: ipld_core::cid::Cid::new_v1(codec, hash).to_string(),
            data: data.clone(),
            value: decoded
                .as_ref()
                .and_then(|v| ipld_to_json(v, JsonForm::DagJson).ok()),
        });
    }
    Ok(out)
}

/// A signed blob's signature, over its encoding with `sig` zeroed.
fn verify_blob(
    blob: &std::collections::BTreeMap<String, agentos_protocol::seed::Ipld>,
) -> Result<(), String> {
    use agentos_protocol::seed::{cbor, Ipld, Principal, VerifyingKey};
    let (Some(Ipld::Bytes(signer)), Some(Ipld::Bytes(sig))) = (blob.get("signer"), blob.get("sig"))
    else {
        return Err("signer and sig must be bytes".into());
    };
    let signer = Principal::from_bytes(signer).map_err(|e| e.to_string())?;
    let sig: [u8; 64] = sig
        .as_slice()
        .try_into()
        .map_err(|_| "sig is not 64 bytes".to_owned())?;
    let mut zeroed = blob.clone();
    zeroed.insert("sig".into(), Ipld::Bytes(vec![0; 64]));
    let bytes = cbor::to_canonical(&Ipld::Map(zeroed)).map_err(|e| e.to_string())?;
    let key = VerifyingKey::from_bytes(&signer.public_key()).map_err(|e| e.to_string())?;
    key.verify_strict(&bytes, &ed25519_dalek::Signature::from_bytes(&sig))
        .map_err(|_| "invalid signature".to_owned())
}

/// The text of a DAG-JSON link (`{"/": cid}`).
fn link(value: &Value) -> Option<String> {
    value["/"].as_str().map(str::to_owned)
}

/// The principal of DAG-JSON bytes (`{"/": {"bytes": …}}`).
fn principal_of(value: &Value) -> Option<String> {
    use base64::Engine as _;
    let encoded = value["/"]["bytes"].as_str()?;
    let raw = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(encoded)
        .ok()?;
    agentos_protocol::seed::Principal::from_bytes(&raw)
        .ok()
        .map(|p| p.to_string())
}

/// A block as a change's `ReplaceBlock` carries it (attributes inlined),
/// as a document's content holds it.
fn stored_block(block: &Value) -> Value {
    let mut out = serde_json::Map::new();
    let mut attributes = serde_json::Map::new();
    for (key, value) in block.as_object().into_iter().flatten() {
        match key.as_str() {
            "type" | "id" | "text" | "annotations" | "link" | "revision" => {
                out.insert(key.clone(), value.clone());
            }
            "children" => {}
            _ => {
                attributes.insert(key.clone(), value.clone());
            }
        }
    }
    out.insert("attributes".into(), Value::Object(attributes));
    Value::Object(out)
}

/// A version ref: its document rebuilt from its changes.
fn apply_ref(state: &mut State, blob: &Published) {
    let Some(value) = &blob.value else { return };
    let heads: Vec<String> = value["heads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(link)
        .collect();
    if heads.is_empty() {
        return;
    }
    let Some(signer) = principal_of(&value["signer"]) else {
        return;
    };
    let space = principal_of(&value["space"]).unwrap_or_else(|| signer.clone());
    let path = value["path"].as_str().unwrap_or("").to_owned();
    // Every change under the heads, deepest last.
    let mut seen: Vec<String> = Vec::new();
    let mut stack = heads.clone();
    while let Some(cid) = stack.pop() {
        if seen.contains(&cid) {
            continue;
        }
        let Some(change) = state.blobs.get(&cid) else {
            continue;
        };
        for dep in change["deps"].as_array().into_iter().flatten() {
            if let Some(dep) = link(dep) {
                stack.push(dep);
            }
        }
        seen.push(cid);
    }
    let order = |cid: &String| {
        let change = &state.blobs[cid];
        (
            change["depth"].as_u64().unwrap_or(0),
            change["ts"].as_u64().unwrap_or(0),
        )
    };
    seen.sort_by_key(order);
    let mut metadata = serde_json::Map::new();
    let mut blocks: HashMap<String, Value> = HashMap::new();
    let mut children: HashMap<String, Vec<String>> = HashMap::new();
    let mut listed = Vec::new();
    for cid in &seen {
        let change = &state.blobs[cid];
        let deps: Vec<String> = change["deps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(link)
            .collect();
        let mut entry = json!({"id": cid, "author": principal_of(&change["signer"]),
                               "createTime": "2026-01-01T00:00:00Z"});
        if !deps.is_empty() {
            entry["deps"] = json!(deps);
        }
        listed.push(entry);
        for op in change["body"]["ops"].as_array().into_iter().flatten() {
            match op["type"].as_str() {
                Some("SetAttributes") => {
                    for attr in op["attrs"].as_array().into_iter().flatten() {
                        if let Some(key) = attr["key"][0].as_str() {
                            metadata.insert(key.to_owned(), attr["value"].clone());
                        }
                    }
                }
                Some("ReplaceBlock") => {
                    if let Some(id) = op["block"]["id"].as_str() {
                        blocks.insert(id.to_owned(), stored_block(&op["block"]));
                    }
                }
                Some("MoveBlocks") => {
                    let parent = op["parent"].as_str().unwrap_or("").to_owned();
                    for id in op["blocks"].as_array().into_iter().flatten() {
                        let Some(id) = id.as_str() else { continue };
                        for list in children.values_mut() {
                            list.retain(|c| c != id);
                        }
                        children
                            .entry(parent.clone())
                            .or_default()
                            .push(id.to_owned());
                    }
                }
                Some("DeleteBlocks") => {
                    for id in op["blocks"].as_array().into_iter().flatten() {
                        let Some(id) = id.as_str() else { continue };
                        blocks.remove(id);
                        for list in children.values_mut() {
                            list.retain(|c| c != id);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    fn tree(
        parent: &str,
        blocks: &HashMap<String, Value>,
        children: &HashMap<String, Vec<String>>,
    ) -> Vec<Value> {
        children
            .get(parent)
            .into_iter()
            .flatten()
            .filter_map(|id| {
                let block = blocks.get(id)?;
                Some(json!({"block": block, "children": tree(id, blocks, children)}))
            })
            .collect()
    }
    let version = heads.join(".");
    let genesis = link(&value["genesisBlob"]).unwrap_or_default();
    let generation = value["generation"].as_u64().unwrap_or(0).to_string();
    let id = format!("hm://{space}{path}");
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let resource = json!({
        "type": "document",
        "document": {
            "content": tree("", &blocks, &children), "version": version, "account": space,
            "authors": [signer], "path": path,
            "createTime": "2026-01-01T00:00:00Z", "updateTime": "2026-01-02T00:00:00Z",
            "metadata": metadata, "genesis": genesis,
            "generationInfo": {"genesis": genesis, "generation": generation},
            "visibility": "PUBLIC"
        },
        "id": {"id": id, "uid": space, "path": segments, "version": null, "blockRef": null,
               "blockRange": null, "hostname": null, "scheme": "hm", "latest": true}
    });
    state.resources.insert(id.clone(), resource);
    state
        .changes
        .insert(id, json!({"changes": listed, "latestVersion": version}));
}

/// A publishable block as a document's content holds it.
fn block_node(block: &Value) -> Value {
    let children: Vec<Value> = block["children"]
        .as_array()
        .into_iter()
        .flatten()
        .map(block_node)
        .collect();
    json!({"block": stored_block(block), "children": children})
}

/// A new comment: readable by its record id.
fn apply_comment(state: &mut State, blob: &Published) {
    let Some(value) = &blob.value else { return };
    let Some(author) = principal_of(&value["signer"]) else {
        return;
    };
    let tsid = match value["id"].as_str() {
        Some(id) => id.to_owned(),
        None => agentos_protocol::seed::blobs::record_tsid(
            value["ts"].as_u64().unwrap_or(0),
            &blob.data,
        ),
    };
    let id = format!("{author}/{tsid}");
    let target_version: Vec<String> = value["version"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(link)
        .collect();
    let content: Vec<Value> = value["body"]
        .as_array()
        .into_iter()
        .flatten()
        .map(block_node)
        .collect();
    let mut comment = json!({
        "id": id, "version": blob.cid, "author": author,
        "targetAccount": principal_of(&value["space"]),
        "targetPath": value["path"], "targetVersion": target_version.join("."),
        "content": content, "createTime": "2026-01-01T00:00:00Z",
        "updateTime": "2026-01-01T00:00:00Z", "visibility": "PUBLIC"
    });
    if let Some(parent) = link(&value["replyParent"]) {
        comment["replyParentVersion"] = json!(parent);
    }
    if let Some(root) = link(&value["threadRoot"]) {
        comment["threadRootVersion"] = json!(root);
    }
    state.comments.insert(id, comment);
}
