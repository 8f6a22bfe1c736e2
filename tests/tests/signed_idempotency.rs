//! Idempotency of the signed API, end to end: a client id is keyed by
//! (account, action, id) over the request without `ts`. The same request
//! again replays the stored answer byte for byte and does nothing more;
//! another request with the same id is 409; concurrent duplicates run once;
//! the records outlive a restart. `MessageSession` is counted in the turns
//! the agent actually received.

mod common;

use agentos_protocol::seed::Ipld;
use agentos_tests::http::Target;
use agentos_tests::seed::{call, post, Answer, Signer};
use common::{Backend, Options, Sidecar};
use serde_json::{json, Value};

fn options() -> Options {
    Options {
        config: json!({"http": {"listen": "127.0.0.1:0"}}),
        ..Options::default()
    }
}

fn definition(name: &str) -> Value {
    json!({"name": name, "systemPrompt": "p", "modelProvider": "openai",
           "model": "gpt-5-mini", "adapter": "echo"})
}

async fn ok(t: &Target, who: &Signer, action: Value) -> Answer {
    let answer = call(t, who, action.clone()).await;
    assert_eq!(answer.status, 200, "{action}: {:?}", answer.body);
    answer
}

async fn conflict(t: &Target, who: &Signer, action: Value, code: &str) {
    let answer = call(t, who, action.clone()).await;
    assert_eq!(
        (answer.status, answer.code()),
        (409, code.to_owned()),
        "{action}: {:?}",
        answer.body
    );
}

fn count(answer: &Answer, list: &str) -> usize {
    match answer.field(list) {
        Ipld::List(items) => items.len(),
        other => panic!("{list}: {other:?}"),
    }
}

fn message(session: &str, text: &str, id: &str) -> Value {
    json!({"_": "MessageSession", "sessionId": session, "clientMessageId": id,
           "content": [{"type": "text", "text": text}]})
}

/// Two requests sent at once (signed apart: each has its own `ts`).
async fn at_once(t: &Target, who: &Signer, action: Value) -> (Answer, Answer) {
    let (first, second) = (who.sign(&action), who.sign(&action));
    let (a, b) = tokio::join!(post(t, &first), post(t, &second));
    (a, b)
}

async fn create_agent_and_session(backend: Backend) {
    let sc = Sidecar::start_with(backend, options()).await;
    let t = sc.api();
    let owner = Signer::new();
    let create = |name: &str, id: &str| json!({"_": "CreateAgent", "definition": definition(name), "clientRequestId": id});

    let first = ok(&t, &owner, create("A", "req-1")).await;
    let again = ok(&t, &owner, create("A", "req-1")).await;
    assert_eq!(
        again.raw.body, first.raw.body,
        "the stored answer, byte for byte"
    );
    let agent = first.text("agentId");
    conflict(&t, &owner, create("B", "req-1"), "conflict").await;
    assert_eq!(
        count(&ok(&t, &owner, json!({"_": "ListAgents"})).await, "agents"),
        1
    );
    // A key acting for the account shares its ids; another account does not.
    let delegate = Signer::delegate_of(owner.account);
    ok(
        &t,
        &owner,
        json!({"_": "AuthorizeSigner", "signer": delegate.key_id(), "role": "AGENT"}),
    )
    .await;
    assert_eq!(
        ok(&t, &delegate, create("A", "req-1"))
            .await
            .text("agentId"),
        agent
    );
    let stranger = Signer::new();
    let theirs = ok(&t, &stranger, create("A", "req-1")).await;
    assert_ne!(theirs.text("agentId"), agent);
    // A new id is a new agent.
    let other = ok(&t, &owner, create("A", "req-2")).await.text("agentId");
    assert_ne!(other, agent);

    // Sessions: keyed by {agentId, title}; the same id on CreateAgent is
    // another action's.
    let session = |agent: &str, title: &str, id: &str| json!({"_": "CreateSession", "agentId": agent, "title": title, "clientRequestId": id});
    let first = ok(&t, &owner, session(&agent, "t", "req-1")).await;
    let again = ok(&t, &owner, session(&agent, "t", "req-1")).await;
    assert_eq!(again.raw.body, first.raw.body);
    let session_id = first.text("sessionId");
    conflict(&t, &owner, session(&agent, "other", "req-1"), "conflict").await;
    conflict(&t, &owner, session(&other, "t", "req-1"), "conflict").await;
    let listed = ok(&t, &owner, json!({"_": "ListSessions", "agentId": agent})).await;
    assert_eq!(count(&listed, "sessions"), 1);
    let listed = ok(&t, &owner, json!({"_": "ListSessions", "agentId": other})).await;
    assert_eq!(count(&listed, "sessions"), 0);

    // Concurrent duplicates run once and both get the one answer.
    let (a, b) = at_once(&t, &owner, create("C", "req-3")).await;
    assert_eq!(
        (a.status, b.status),
        (200, 200),
        "{:?} {:?}",
        a.body,
        b.body
    );
    assert_eq!(a.text("agentId"), b.text("agentId"));
    assert_eq!(
        count(&ok(&t, &owner, json!({"_": "ListAgents"})).await, "agents"),
        3
    );
    let (a, b) = at_once(&t, &owner, session(&agent, "u", "req-4")).await;
    assert_eq!(
        (a.status, b.status),
        (200, 200),
        "{:?} {:?}",
        a.body,
        b.body
    );
    assert_eq!(a.text("sessionId"), b.text("sessionId"));
    let listed = ok(&t, &owner, json!({"_": "ListSessions", "agentId": agent})).await;
    assert_eq!(count(&listed, "sessions"), 2);

    // A failed action records nothing: after its cause is gone, the same
    // id runs.
    let missing = "00000000-0000-4000-8000-000000000000";
    let refused = call(&t, &owner, session(missing, "t", "req-5")).await;
    assert_eq!(refused.status, 404);
    ok(&t, &owner, session(&agent, "t", "req-5")).await;

    // The records are durable.
    let sc = sc.restart(options()).await;
    let t = sc.api();
    assert_eq!(
        ok(&t, &owner, create("A", "req-1")).await.text("agentId"),
        agent
    );
    conflict(&t, &owner, create("B", "req-1"), "conflict").await;
    let again = ok(&t, &owner, session(&agent, "t", "req-1")).await;
    assert_eq!(again.text("sessionId"), session_id);
}

both_backends!(create_agent_and_session);

async fn message_session(backend: Backend) {
    let sc = Sidecar::start_with(backend, options()).await;
    let t = sc.api();
    let owner = Signer::new();
    let agent = ok(
        &t,
        &owner,
        json!({"_": "CreateAgent", "definition": definition("A")}),
    )
    .await
    .text("agentId");
    let session = ok(&t, &owner, json!({"_": "CreateSession", "agentId": agent}))
        .await
        .text("sessionId");

    let first = ok(&t, &owner, message(&session, "echo one", "m-1")).await;
    assert!(!first.text("assistantEventId").is_empty());
    assert_eq!(sc.delivered_prompts().len(), 1);
    let again = ok(&t, &owner, message(&session, "echo one", "m-1")).await;
    assert_eq!(again.raw.body, first.raw.body);
    assert_eq!(sc.delivered_prompts().len(), 1, "no second turn");
    conflict(
        &t,
        &owner,
        message(&session, "echo two", "m-1"),
        "idempotency_conflict",
    )
    .await;
    assert_eq!(sc.delivered_prompts().len(), 1);
    // The id may ride on the text part instead, as Seed's client sends it.
    let on_part = json!({"_": "MessageSession", "sessionId": session,
        "content": [{"type": "text", "text": "echo three", "clientMessageId": "m-2"}]});
    let first = ok(&t, &owner, on_part.clone()).await;
    let again = ok(&t, &owner, on_part).await;
    assert_eq!(again.raw.body, first.raw.body);
    assert_eq!(sc.delivered_prompts().len(), 2);

    // Keyed by the acting account: a writer's m-1 is its own message.
    let writer = Signer::new();
    ok(
        &t,
        &owner,
        json!({"_": "InviteAgentCollaborator", "agentId": agent,
               "accountId": writer.id(), "role": "writer"}),
    )
    .await;
    ok(
        &t,
        &writer,
        json!({"_": "AcceptAgentInvite", "agentId": agent}),
    )
    .await;
    let theirs = ok(&t, &writer, message(&session, "echo two", "m-1")).await;
    assert_ne!(
        theirs.text("assistantEventId"),
        first.text("assistantEventId")
    );
    assert_eq!(sc.delivered_prompts().len(), 3);

    // Concurrent duplicates of a slow turn: one turn, one answer.
    let (a, b) = at_once(&t, &owner, message(&session, "sleep 400", "m-3")).await;
    assert_eq!(
        (a.status, b.status),
        (200, 200),
        "{:?} {:?}",
        a.body,
        b.body
    );
    assert_eq!(a.raw.body, b.raw.body);
    assert_eq!(sc.delivered_prompts().len(), 4);

    let got = ok(&t, &owner, json!({"_": "GetSession", "sessionId": session})).await;
    assert_eq!(count(&got, "events"), 8, "four turns of two events");

    // The turn's record outlives a restart: replayed, not run again.
    let prompts = sc.delivered_prompts().len();
    let sc = sc.restart(options()).await;
    let t = sc.api();
    let again = ok(&t, &owner, message(&session, "echo one", "m-1")).await;
    assert!(!again.text("assistantEventId").is_empty());
    assert_eq!(sc.delivered_prompts().len(), prompts);
    conflict(
        &t,
        &owner,
        message(&session, "echo other", "m-1"),
        "idempotency_conflict",
    )
    .await;
}

both_backends!(message_session);
