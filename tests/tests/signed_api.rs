//! The signed API end to end: a real sidecar, a real listener, envelopes
//! signed by test keys. Agents, sessions driven by a registry adapter, the
//! builtin agent's typed refusal, and what bad input gets.

mod common;

use agentos_protocol::seed::Ipld;
use agentos_tests::http::Target;
use agentos_tests::seed::{call, field, post, Signer};
use common::{Backend, Options, Sidecar};
use serde_json::json;

async fn start(backend: Backend) -> (Sidecar, Target) {
    let sc = Sidecar::start_with(
        backend,
        Options {
            // Sessions keep the titles they were given: naming them after
            // their first turn is `session_titles.rs`'s.
            config: json!({"http": {"listen": "127.0.0.1:0"},
                           "builtin": {"sessionTitles": false}}),
            ..Options::default()
        },
    )
    .await;
    let target = Target::from_ready(sc.ready["http"].as_str().expect("http"));
    (sc, target)
}

fn definition(adapter: Option<&str>) -> serde_json::Value {
    let mut d = json!({
        "name": "Helper",
        "systemPrompt": "Be brief.",
        "modelProvider": "openai",
        "model": "gpt-5-mini",
    });
    if let Some(adapter) = adapter {
        d["adapter"] = json!(adapter);
    }
    d
}

async fn agents_sessions_and_turns(backend: Backend) {
    let (_sc, t) = start(backend).await;
    let owner = Signer::new();
    let created = call(
        &t,
        &owner,
        json!({"_": "CreateAgent", "definition": definition(Some("echo"))}),
    )
    .await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    assert_eq!(created.text("_"), "CreateAgentResponse");
    let agent_id = created.text("agentId");

    let got = call(&t, &owner, json!({"_": "GetAgent", "agentId": agent_id})).await;
    assert_eq!(got.status, 200);
    let agent = got.field("agent");
    assert_eq!(field(agent, "account"), &Ipld::String(owner.id()));
    assert_eq!(
        field(field(agent, "definition"), "name"),
        &Ipld::String("Helper".into())
    );
    assert_eq!(got.field("sessionCount"), &Ipld::Integer(0));

    let session = call(
        &t,
        &owner,
        json!({"_": "CreateSession", "agentId": agent_id, "title": "first"}),
    )
    .await;
    assert_eq!(session.status, 200, "{:?}", session.body);
    let session_id = session.text("sessionId");
    let said = call(
        &t,
        &owner,
        json!({"_": "MessageSession", "sessionId": session_id,
               "content": [{"type": "text", "text": "echo hello there"}]}),
    )
    .await;
    assert_eq!(said.status, 200, "{:?}", said.body);
    assert!(!said.text("assistantEventId").is_empty());

    let got = call(
        &t,
        &owner,
        json!({"_": "GetSession", "sessionId": session_id}),
    )
    .await;
    assert_eq!(got.status, 200, "{:?}", got.body);
    let Ipld::List(events) = got.field("events") else {
        panic!("events: {:?}", got.body)
    };
    assert_eq!(events.len(), 2);
    let user = field(&events[0], "event");
    assert_eq!(field(user, "type"), &Ipld::String("message".into()));
    assert_eq!(field(user, "role"), &Ipld::String("user".into()));
    assert_eq!(field(user, "actor"), &Ipld::String("user".into()));
    let meta = field(user, "meta");
    assert_eq!(field(meta, "accountId"), &Ipld::String(owner.id()));
    assert_eq!(field(meta, "signerId"), &Ipld::String(owner.id()));
    let reply = field(&events[1], "event");
    assert_eq!(field(reply, "role"), &Ipld::String("assistant".into()));
    assert_eq!(field(reply, "content"), &Ipld::String("hello there".into()));
    assert_eq!(
        field(&events[1], "id"),
        &Ipld::String(said.text("assistantEventId"))
    );
    assert_eq!(got.text("systemPromptMarkdown"), "Be brief.");

    let listed = call(&t, &owner, json!({"_": "ListSessions"})).await;
    assert_eq!(listed.status, 200);
    let Ipld::List(sessions) = listed.field("sessions") else {
        panic!()
    };
    assert_eq!(sessions.len(), 1);
    assert_eq!(field(&sessions[0], "title"), &Ipld::String("first".into()));
    let Ipld::List(agents) = listed.field("agents") else {
        panic!()
    };
    assert_eq!(agents.len(), 1);

    // A builtin agent (the default adapter) whose provider the account
    // never configured: the turn fails with a typed error, and the log says
    // why.
    let builtin = call(
        &t,
        &owner,
        json!({"_": "CreateAgent", "definition": definition(None)}),
    )
    .await;
    let builtin_id = builtin.text("agentId");
    let s = call(
        &t,
        &owner,
        json!({"_": "CreateSession", "agentId": builtin_id}),
    )
    .await;
    let said = call(
        &t,
        &owner,
        json!({"_": "MessageSession", "sessionId": s.text("sessionId"),
               "content": [{"type": "text", "text": "hi"}]}),
    )
    .await;
    assert_eq!(said.status, 502, "{:?}", said.body);
    assert_eq!(said.code(), "prompt_failed");
    let got = call(
        &t,
        &owner,
        json!({"_": "GetSession", "sessionId": s.text("sessionId")}),
    )
    .await;
    let Ipld::List(events) = got.field("events") else {
        panic!("events: {:?}", got.body);
    };
    let error = events
        .iter()
        .map(|e| field(e, "event"))
        .find(|e| field(e, "type") == &Ipld::String("error".into()))
        .expect("an error event");
    assert_eq!(
        field(error, "code"),
        &Ipld::String("provider_not_found".into())
    );

    // A definition never names a command: only builtin or a registry id.
    let bad = call(
        &t,
        &owner,
        json!({"_": "CreateAgent", "definition": definition(Some("/bin/sh"))}),
    )
    .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.code(), "unknown_adapter");

    // Deleting the agent leaves none of it reachable.
    let deleted = call(&t, &owner, json!({"_": "DeleteAgent", "agentId": agent_id})).await;
    assert_eq!(deleted.status, 200);
    let gone = call(
        &t,
        &owner,
        json!({"_": "GetSession", "sessionId": session_id}),
    )
    .await;
    assert_eq!(gone.status, 404);
    let gone = call(&t, &owner, json!({"_": "GetAgent", "agentId": agent_id})).await;
    assert_eq!(gone.status, 404);
}

both_backends!(agents_sessions_and_turns);

#[tokio::test]
async fn bad_requests_get_typed_errors_and_the_server_stays_up() {
    let (_sc, t) = start(Backend::SqliteFile).await;
    let me = Signer::new();
    let raw = agentos_tests::http::request(
        &t,
        "POST",
        "/api/message",
        &[("content-type", "application/json")],
        b"{}",
    )
    .await
    .expect("415");
    assert_eq!(raw.status, 415);
    let a = post(&t, b"\xff\x00garbage").await;
    assert_eq!((a.status, a.code().as_str()), (400, "bad_cbor"));
    // Tampered: one byte of the action flipped after signing.
    let mut bytes = me.sign(&json!({"_": "ListAgents"}));
    let at = bytes
        .windows(10)
        .position(|w| w == b"ListAgents")
        .expect("name");
    bytes[at] = b'M';
    let a = post(&t, &bytes).await;
    assert_eq!(a.status, 401, "{:?}", a.body);
    // Skewed clock.
    let old = me
        .envelope_at(
            &json!({"_": "ListAgents"}),
            agentos_tests::seed::now_ms() - 10 * 60 * 1000,
        )
        .encode()
        .expect("encode");
    let a = post(&t, &old).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (401, "timestamp_out_of_window")
    );
    // Replay.
    let once = me.sign(&json!({"_": "ListAgents"}));
    assert_eq!(post(&t, &once).await.status, 200);
    let a = post(&t, &once).await;
    assert_eq!((a.status, a.code().as_str()), (401, "replayed"));
    // Unknown and unsupported actions, extra and missing fields.
    for (action, code) in [
        (json!({"_": "NoSuchAction"}), "unsupported_action"),
        (
            json!({"_": "PrepareDocumentChange", "account": "x"}),
            "unsupported_action",
        ),
        (json!({"_": "GetAgent"}), "bad_request"),
        (
            json!({"_": "GetAgent", "agentId": "x", "extra": 1}),
            "bad_request",
        ),
        (json!({"_": "GetAgent", "agentId": 5}), "bad_request"),
        (
            json!({"_": "Subscribe", "key": "account/x"}),
            "websocket_only",
        ),
    ] {
        let a = call(&t, &me, action.clone()).await;
        assert_eq!((a.status, a.code()), (400, code.to_owned()), "{action}");
    }
    // Oversize.
    let big = vec![0u8; 17 * 1024 * 1024];
    let a = post(&t, &big).await;
    assert_eq!(a.status, 413);
    // Still serving.
    let a = call(&t, &me, json!({"_": "ListAgents"})).await;
    assert_eq!(a.status, 200);
}

#[tokio::test]
async fn an_operator_authorizes_and_revokes_signers_over_the_host_socket() {
    let (sc, t) = start(Backend::SqliteFile).await;
    let owner = Signer::new();
    let delegate = Signer::delegate_of(owner.account);
    let refused = call(&t, &delegate, json!({"_": "ListAgents"})).await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (401, "signer_not_authorized")
    );
    let entry = sc
        .call(
            "signers/authorize",
            json!({"account": owner.id(), "signer": delegate.principal().to_string(), "role": "WRITER"}),
        )
        .await
        .expect("authorize");
    assert_eq!(entry["role"], "WRITER");
    let ok = call(
        &t,
        &delegate,
        json!({"_": "CreateAgent", "definition": definition(Some("echo"))}),
    )
    .await;
    assert_eq!(ok.status, 200, "{:?}", ok.body);
    // The agent is the account's, not the delegate's.
    let listed = call(&t, &owner, json!({"_": "ListAgents"})).await;
    let Ipld::List(agents) = listed.field("agents") else {
        panic!()
    };
    assert_eq!(agents.len(), 1);
    let list = sc
        .call("signers/list", json!({"account": owner.id()}))
        .await
        .expect("list");
    assert_eq!(list["signers"].as_array().map(Vec::len), Some(1));
    sc.call(
        "signers/revoke",
        json!({"account": owner.id(), "signer": delegate.principal().to_string()}),
    )
    .await
    .expect("revoke");
    let refused = call(&t, &delegate, json!({"_": "ListAgents"})).await;
    assert_eq!(refused.status, 401);
    let bad = sc
        .call(
            "signers/authorize",
            json!({"account": owner.id(), "signer": "zNotAKey", "role": "WRITER"}),
        )
        .await
        .expect_err("bad principal");
    assert_eq!(bad.code(), "rpc_-32602");
    let bad = sc
        .call(
            "signers/authorize",
            json!({"account": owner.id(), "signer": delegate.principal().to_string(), "role": "OWNER"}),
        )
        .await
        .expect_err("bad role");
    assert_eq!(bad.code(), "rpc_-32602");
}

#[tokio::test]
async fn get_session_answers_one_bounded_page_at_a_time() {
    let sc = Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            config: json!({"http": {"listen": "127.0.0.1:0"}}),
            limits: json!({"acp": {"maxHistoryPageEntries": 3}}),
            ..Options::default()
        },
    )
    .await;
    let t = Target::from_ready(sc.ready["http"].as_str().expect("http"));
    let owner = Signer::new();
    let agent = call(
        &t,
        &owner,
        json!({"_": "CreateAgent", "definition": definition(Some("echo"))}),
    )
    .await
    .text("agentId");
    let session = call(&t, &owner, json!({"_": "CreateSession", "agentId": agent}))
        .await
        .text("sessionId");
    let said = call(
        &t,
        &owner,
        json!({"_": "MessageSession", "sessionId": session,
               "content": [{"type": "text", "text": "flood 7"}]}),
    )
    .await;
    assert_eq!(said.status, 200, "{:?}", said.body);
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let page = call(
            &t,
            &owner,
            json!({"_": "GetSession", "sessionId": session, "afterSeq": after}),
        )
        .await;
        assert_eq!(page.status, 200);
        let Ipld::List(events) = page.field("events") else {
            panic!()
        };
        assert!(events.len() <= 3);
        for event in events {
            let Ipld::Integer(seq) = field(event, "seq") else {
                panic!()
            };
            seen.push(*seq as u64);
            after = *seq as u64;
        }
        if page.field("hasMoreAfter") != &Ipld::Bool(true) {
            break;
        }
    }
    // The user's message and the agent's seven updates, each once, in order.
    assert_eq!(seen, (1..=8).collect::<Vec<u64>>());
}

/// A registry adapter runs its own model: its definition needs neither
/// `modelProvider` nor `model` (read back as empty), and a session of it
/// works. The builtin agent still needs both, as the reference requires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_adapter_needs_no_model() {
    let (_sc, t) = start(Backend::SqliteFile).await;
    let owner = Signer::new();
    let bare = |adapter: Option<&str>| {
        let mut d = json!({"name": "Bare", "systemPrompt": "Be brief."});
        if let Some(adapter) = adapter {
            d["adapter"] = json!(adapter);
        }
        d
    };
    let created = call(
        &t,
        &owner,
        json!({"_": "CreateAgent", "definition": bare(Some("echo"))}),
    )
    .await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    let agent_id = created.text("agentId");
    let got = call(&t, &owner, json!({"_": "GetAgent", "agentId": agent_id})).await;
    let definition = field(got.field("agent"), "definition");
    assert_eq!(field(definition, "model"), &Ipld::String(String::new()));
    assert_eq!(
        field(definition, "modelProvider"),
        &Ipld::String(String::new())
    );
    let session = call(
        &t,
        &owner,
        json!({"_": "CreateSession", "agentId": agent_id}),
    )
    .await;
    let said = call(
        &t,
        &owner,
        json!({"_": "MessageSession", "sessionId": session.text("sessionId"),
               "content": [{"type": "text", "text": "echo no model needed"}]}),
    )
    .await;
    assert_eq!(said.status, 200, "{:?}", said.body);
    for adapter in [None, Some("builtin")] {
        let refused = call(
            &t,
            &owner,
            json!({"_": "CreateAgent", "definition": bare(adapter)}),
        )
        .await;
        assert_eq!(
            (refused.status, refused.code()),
            (400, "bad_request".into()),
            "{adapter:?}"
        );
        assert!(
            refused.text("message").contains("modelProvider"),
            "{:?}",
            refused.body
        );
    }
    // Updating it to the builtin agent without a model is refused too.
    let refused = call(
        &t,
        &owner,
        json!({"_": "UpdateAgent", "agentId": agent_id, "definition": bare(None)}),
    )
    .await;
    assert_eq!(refused.status, 400, "{:?}", refused.body);
}

/// `RegisterSigner{capability}`, as the reference: a device key presents
/// the Capability its account issued to it and may then act as that
/// account with no capability on its envelopes. A capability for another
/// key, with a role that does not permit agent actions, or that does not
/// verify, is 400 `bad_capability`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_registers_itself_with_its_capability() {
    use agentos_protocol::seed::{ActionMap, Capability, Envelope, Role};
    let (_sc, t) = start(Backend::SqliteFile).await;
    let vault = Signer::new();
    let device = Signer::new();
    // The capability travels as a byte string, signed by `who` as itself.
    let register = |who: &Signer, blob: Vec<u8>| {
        let mut action = ActionMap::new();
        action.insert("_".into(), Ipld::String("RegisterSigner".into()));
        action.insert("capability".into(), Ipld::Bytes(blob));
        let mut envelope = Envelope::unsigned(
            action,
            who.account,
            who.principal(),
            agentos_tests::seed::fresh_ts(),
        );
        envelope.protocol = Some(2);
        envelope.sign_with(&who.key).expect("sign");
        envelope.encode().expect("encode")
    };
    let issue = |to: &Signer, role: Role| {
        Capability::issue(
            &vault.key,
            to.principal(),
            role,
            agentos_tests::seed::now_ms(),
            None,
            None,
        )
        .expect("issue")
    };
    // Before: the device may not act as the vault.
    let as_vault = Signer {
        key: device.key.clone(),
        ..Signer::delegate_of(vault.account)
    };
    let before = call(&t, &as_vault, json!({"_": "ListAgents"})).await;
    assert_eq!(before.status, 401, "{:?}", before.body);

    let registered = post(&t, &register(&device, issue(&device, Role::Agent))).await;
    assert_eq!(registered.status, 200, "{:?}", registered.body);
    assert_eq!(registered.text("_"), "RegisterSignerResponse");
    assert_eq!(registered.text("accountId"), vault.id());
    assert_eq!(registered.text("signerId"), device.key_id());
    let after = call(&t, &as_vault, json!({"_": "ListAgents"})).await;
    assert_eq!(after.status, 200, "{:?}", after.body);

    let stranger = Signer::new();
    for (who, blob, what) in [
        (
            &stranger,
            issue(&device, Role::Agent),
            "another key's capability",
        ),
        (
            &stranger,
            issue(&stranger, Role::Other("READER".into())),
            "a reader's role",
        ),
        (
            &stranger,
            b"not a capability".to_vec(),
            "bytes that are no blob",
        ),
    ] {
        let refused = post(&t, &register(who, blob)).await;
        assert_eq!(
            (refused.status, refused.code()),
            (400, "bad_capability".into()),
            "{what}: {:?}",
            refused.body
        );
    }
}
