//! Bad input at the signed API's door, end to end: what is not a well-formed
//! envelope is 400 (bad CBOR, a nesting bomb, an unknown key, a principal
//! that is not Ed25519, a `ts` that is missing or not an integer, an empty
//! body), what does not verify is 401, and the server stays up after each.
//! The host socket's `http/request` proxy answers the same bytes exactly as
//! the listener does.

mod common;

use agentos_protocol::seed::{cbor, Envelope, Ipld};
use agentos_tests::http::request;
use agentos_tests::seed::{call, fresh_ts, now_ms, post, Answer, Signer};
use base64::Engine;
use common::{Backend, Options, Sidecar};
use serde_json::json;

async fn start() -> Sidecar {
    Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            config: json!({"http": {"listen": "127.0.0.1:0"}}),
            ..Options::default()
        },
    )
    .await
}

/// A signed envelope of `ListAgents` before encoding, to be spoiled.
fn list_agents(me: &Signer) -> Envelope {
    me.envelope_at(&json!({"_": "ListAgents"}), fresh_ts())
}

/// The envelope's wire map, to add or change keys the type cannot hold.
fn wire_map(envelope: &Envelope) -> std::collections::BTreeMap<String, Ipld> {
    let bytes = envelope.encode().expect("encode");
    match cbor::from_slice::<Ipld>(&bytes, 1 << 20).expect("decode") {
        Ipld::Map(map) => map,
        other => panic!("not a map: {other:?}"),
    }
}

/// Every malformed body and the status and code it must get.
fn bad_bodies(me: &Signer) -> Vec<(&'static str, Vec<u8>, u16, &'static str)> {
    let mut cases = Vec::new();

    cases.push(("empty body", Vec::new(), 400, "bad_cbor"));
    cases.push(("not CBOR", b"\xff\x00garbage".to_vec(), 400, "bad_cbor"));
    cases.push((
        "a CBOR list, not a map",
        cbor::to_canonical(&Ipld::List(vec![])).expect("encode"),
        400,
        "bad_envelope",
    ));

    // 10,000 nested arrays where an action field would be.
    let envelope = me.envelope_at(&json!({"_": "ListAgents", "x": 0}), fresh_ts());
    let bytes = envelope.encode().expect("encode");
    let at = bytes
        .windows(3)
        .position(|w| w == b"\x61x\x00")
        .expect("the field x")
        + 2;
    let mut bomb = bytes[..at].to_vec();
    bomb.extend(std::iter::repeat_n(0x81u8, 10_000));
    bomb.push(0x00);
    bomb.extend_from_slice(&bytes[at + 1..]);
    cases.push(("a nesting bomb", bomb, 400, "too_deep"));

    // An extra top-level key nobody knows.
    let mut map = wire_map(&list_agents(me));
    map.insert("extra".into(), Ipld::Integer(1));
    cases.push((
        "an unknown envelope key",
        cbor::to_canonical(&Ipld::Map(map)).expect("encode"),
        400,
        "bad_envelope",
    ));

    // A signer with another key type's prefix (secp256k1's 0xe7 0x01).
    let mut map = wire_map(&list_agents(me));
    let Some(Ipld::Bytes(signer)) = map.get_mut("signer") else {
        panic!("signer bytes")
    };
    signer[0] = 0xe7;
    cases.push((
        "a signer that is not Ed25519",
        cbor::to_canonical(&Ipld::Map(map)).expect("encode"),
        401,
        "bad_principal",
    ));
    // A signer one byte short: it cannot be verified either.
    let mut map = wire_map(&list_agents(me));
    let Some(Ipld::Bytes(signer)) = map.get_mut("signer") else {
        panic!("signer bytes")
    };
    signer.pop();
    cases.push((
        "a signer of the wrong length",
        cbor::to_canonical(&Ipld::Map(map)).expect("encode"),
        401,
        "bad_principal",
    ));

    // Signed properly, but `ts` is a float, or missing.
    for (what, ts) in [
        ("a float ts", Some(Ipld::Float(now_ms() as f64 + 0.5))),
        ("a whole float ts", Some(Ipld::Float(now_ms() as f64))),
        ("a text ts", Some(Ipld::String(now_ms().to_string()))),
        ("no ts", None),
    ] {
        let mut envelope = list_agents(me);
        match ts {
            Some(ts) => envelope.action.insert("ts".into(), ts),
            None => envelope.action.remove("ts"),
        };
        envelope.sign_with(&me.key).expect("sign");
        cases.push((
            what,
            envelope.encode().expect("encode"),
            400,
            "bad_timestamp",
        ));
    }

    // Signed properly at timestamps where `now - ts` overflows an i64.
    for (what, ts) in [
        ("a ts at the bottom of i64", i64::MIN + 1),
        ("a ts at the top of i64", i64::MAX),
    ] {
        let envelope = me.envelope_at(&json!({"_": "ListAgents"}), ts);
        cases.push((
            what,
            envelope.encode().expect("encode"),
            401,
            "timestamp_out_of_window",
        ));
    }

    // Signed by one key, claiming another as its signer (and account).
    let other = Signer::new();
    let mut envelope = list_agents(me);
    envelope.signer = other.principal();
    envelope.account = other.principal();
    cases.push((
        "a signature by another key",
        envelope.encode().expect("encode"),
        401,
        "bad_signature",
    ));

    cases
}

fn check(what: &str, answer: &Answer, status: u16, code: &str) {
    assert_eq!(answer.status, status, "{what}: {:?}", answer.body);
    assert_eq!(answer.code(), code, "{what}");
    assert_eq!(answer.text("_"), "Error", "{what}");
    assert_eq!(
        answer.raw.headers.get("content-type").map(String::as_str),
        Some("application/cbor"),
        "{what}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_envelopes_are_400_unverifiable_ones_401_and_the_server_stays_up() {
    let sc = start().await;
    let t = sc.api();
    let me = Signer::new();
    for (what, body, status, code) in bad_bodies(&me) {
        let answer = post(&t, &body).await;
        check(what, &answer, status, code);
        // Still serving, and a good request from the same key works.
        let fine = call(&t, &me, json!({"_": "ListAgents"})).await;
        assert_eq!(fine.status, 200, "after {what}: {:?}", fine.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_errors_are_typed() {
    let sc = start().await;
    let t = sc.api();
    let me = Signer::new();
    let body = me.sign(&json!({"_": "ListAgents"}));
    for (headers, status, code) in [
        (vec![], 415, "unsupported_media_type"),
        (
            vec![("content-type", "application/json")],
            415,
            "unsupported_media_type",
        ),
        (
            vec![("content-type", "application/cbor; charset=binary")],
            200,
            "",
        ),
    ] {
        let raw = request(&t, "POST", "/api/message", &headers, &body)
            .await
            .expect("POST");
        assert_eq!(raw.status, status, "{headers:?}");
        if !code.is_empty() {
            let body: Ipld = cbor::from_slice(&raw.body, 1 << 20).expect("CBOR error");
            assert_eq!(
                agentos_tests::seed::field(&body, "code"),
                &Ipld::String(code.into())
            );
        }
    }
    // Other paths and methods.
    let raw = request(&t, "GET", "/api/message", &[], b"")
        .await
        .expect("GET");
    assert_eq!(raw.status, 405);
    let raw = request(&t, "POST", "/api/nothing", &[], b"")
        .await
        .expect("404");
    assert_eq!(raw.status, 404);
    // A body over http.maxBodyBytes, then still serving.
    let big = vec![0u8; 17 * 1024 * 1024];
    check("oversize", &post(&t, &big).await, 413, "body_too_large");
    assert_eq!(call(&t, &me, json!({"_": "ListAgents"})).await.status, 200);
}

/// `http/request` on the host socket with the listener's request.
async fn through_host(sc: &Sidecar, body: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let answer = sc
        .ok(
            "http/request",
            json!({
                "method": "POST",
                "path": "/api/message",
                "headers": {"content-type": "application/cbor"},
                "bodyBase64": base64::engine::general_purpose::STANDARD.encode(body),
            }),
        )
        .await;
    let status = answer["status"].as_u64().expect("status") as u16;
    let headers = answer["headers"]
        .as_object()
        .expect("headers")
        .iter()
        .filter(|(name, _)| *name == "content-type" || *name == "x-agents-protocol")
        .map(|(k, v)| (k.clone(), v.as_str().expect("text").to_owned()))
        .collect();
    let body = base64::engine::general_purpose::STANDARD
        .decode(answer["bodyBase64"].as_str().expect("bodyBase64"))
        .expect("base64");
    (status, headers, body)
}

fn listener_view(answer: &Answer) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let headers = ["content-type", "x-agents-protocol"]
        .iter()
        .filter_map(|name| {
            answer
                .raw
                .headers
                .get(*name)
                .map(|v| (name.to_string(), v.clone()))
        })
        .collect();
    (answer.status, headers, answer.raw.body.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_proxy_answers_every_envelope_exactly_as_the_listener() {
    let sc = start().await;
    let t = sc.api();
    let me = Signer::new();
    // Refused bodies are refused before the replay cache: the same bytes
    // can go both ways.
    for (what, body, status, _) in bad_bodies(&me) {
        let direct = post(&t, &body).await;
        assert_eq!(direct.status, status, "{what}");
        assert_eq!(
            listener_view(&direct),
            through_host(&sc, &body).await,
            "{what}"
        );
    }
    // An accepted request is accepted once: the same bytes a second time
    // are a replay, whichever door they come through.
    let created = call(
        &t,
        &me,
        json!({"_": "CreateAgent", "definition": {"name": "A", "systemPrompt": "p",
               "modelProvider": "openai", "model": "m"}}),
    )
    .await;
    assert_eq!(created.status, 200);
    let once = me.sign(&json!({"_": "ListAgents"}));
    let (status, headers, body) = through_host(&sc, &once).await;
    assert_eq!(status, 200);
    let direct = call(&t, &me, json!({"_": "ListAgents"})).await;
    assert_eq!(listener_view(&direct), (status, headers, body));
    let replayed = post(&t, &once).await;
    assert_eq!((replayed.status, replayed.code()), (401, "replayed".into()));
    let (status, _, body) = through_host(&sc, &once).await;
    assert_eq!((status, body), (401, replayed.raw.body.clone()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_stored_document_is_500_without_details() {
    let sc = start().await;
    let t = sc.api();
    let me = Signer::new();
    let created = call(
        &t,
        &me,
        json!({"_": "CreateAgent", "definition": {"name": "A", "systemPrompt": "p",
               "modelProvider": "openai", "model": "m"}}),
    )
    .await;
    assert_eq!(created.status, 200);
    let agent = created.text("agentId");
    // Damage the stored definition behind the sidecar's back.
    let db = rusqlite::Connection::open(sc.dir.path().join("vm.sqlite")).expect("open");
    db.busy_timeout(std::time::Duration::from_secs(10))
        .expect("busy timeout");
    let changed = db
        .execute(
            "UPDATE agentos_core_agents SET definition = x'ff00' WHERE agent_id = ?1",
            [&agent],
        )
        .expect("update");
    assert_eq!(changed, 1);
    drop(db);
    for action in [
        json!({"_": "GetAgent", "agentId": agent}),
        json!({"_": "ListAgents"}),
    ] {
        let answer = call(&t, &me, action.clone()).await;
        check(&action.to_string(), &answer, 500, "corrupt_row");
        assert_eq!(answer.text("message"), "Internal server error");
    }
    // Everything else still works.
    let fine = call(&t, &me, json!({"_": "ListSecrets"})).await;
    assert_eq!(fine.status, 200);
}
