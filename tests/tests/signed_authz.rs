//! Who may do what, end to end: every agent- and session-scoped action of
//! the signed API, sent by every kind of caller, against a real sidecar.
//!
//! `MATRIX` is the rule as a table (caller × action → HTTP status): the
//! owner and any key acting for the owner's account may do everything; an
//! accepted writer may read, edit the agent and work in its sessions; an
//! accepted reader, or any account when the agent is public, may only
//! read; a stranger or a pending invitee hears 404, exactly as for an agent
//! that does not exist; a revoked signer is refused before anything (401),
//! whatever capability it shows. Each cell runs on a fresh agent, so a
//! destructive action never changes what the next cell sees, and a refused
//! action is checked to have changed nothing.

mod common;

use agentos_protocol::seed::{cid_of, Capability, Ipld, Role};
use agentos_tests::http::Target;
use agentos_tests::seed::{call, field, now_ms, Answer, Signer};
use common::{Backend, Options, Sidecar};
use serde_json::{json, Value};

/// Who sends the action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Caller {
    Owner,
    /// An accepted collaborator with role writer.
    Writer,
    /// An accepted collaborator with role reader.
    Reader,
    /// A stranger's own account, on an agent with public read on.
    PublicReader,
    /// A stranger's own account, on a private agent.
    Stranger,
    /// Invited as a writer, not yet accepted.
    PendingInvitee,
    /// A key the owner authorized (`AuthorizeSigner`, role AGENT), acting
    /// with `account` = the owner.
    DelegatedSigner,
    /// A key holding a WRITER Capability the owner issued, acting for the
    /// owner; its first envelope carried the blob, this one only the CID.
    CapabilitySigner,
    /// Authorized, then revoked; it still shows the owner's Capability.
    RevokedSigner,
}

/// What is sent (always about the cell's own agent or session).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Act {
    GetAgent,
    UpdateAgent,
    DeleteAgent,
    ListAgentCollaborators,
    InviteAgentCollaborator,
    RemoveAgentCollaborator,
    SetAgentPublicRead,
    CreateSession,
    GetSession,
    UpdateSession,
    DeleteSession,
    MessageSession,
    StopSession,
    ListSessions,
    /// `ListModelProviders{agentId}`: the owner's providers, redacted.
    ListModelProviders,
}

const ACTS: [Act; 15] = [
    Act::GetAgent,
    Act::UpdateAgent,
    Act::DeleteAgent,
    Act::ListAgentCollaborators,
    Act::InviteAgentCollaborator,
    Act::RemoveAgentCollaborator,
    Act::SetAgentPublicRead,
    Act::CreateSession,
    Act::GetSession,
    Act::UpdateSession,
    Act::DeleteSession,
    Act::MessageSession,
    Act::StopSession,
    Act::ListSessions,
    Act::ListModelProviders,
];

/// The rule. Columns follow `ACTS`.
#[rustfmt::skip]
const MATRIX: [(Caller, [u16; 15]); 9] = [
    //                          GetA  UpdA  DelA  LCol  Inv   RemC  PubR  NewS  GetS  UpdS  DelS  Msg   Stop  LstS  LPrv
    (Caller::Owner,           [200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200]),
    (Caller::Writer,          [200,  200,  403,  200,  403,  403,  403,  200,  200,  200,  200,  200,  200,  200,  200]),
    (Caller::Reader,          [200,  403,  403,  200,  403,  403,  403,  403,  200,  403,  403,  403,  403,  200,  200]),
    (Caller::PublicReader,    [200,  403,  403,  200,  403,  403,  403,  403,  200,  403,  403,  403,  403,  200,  200]),
    (Caller::Stranger,        [404,  404,  404,  404,  404,  404,  404,  404,  404,  404,  404,  404,  404,  404,  404]),
    (Caller::PendingInvitee,  [404,  404,  404,  404,  404,  404,  404,  404,  404,  404,  404,  404,  404,  404,  404]),
    (Caller::DelegatedSigner, [200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200]),
    (Caller::CapabilitySigner,[200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200,  200]),
    (Caller::RevokedSigner,   [401,  401,  401,  401,  401,  401,  401,  401,  401,  401,  401,  401,  401,  401,  401]),
];

async fn start(backend: Backend) -> Sidecar {
    Sidecar::start_with(
        backend,
        Options {
            config: json!({"http": {"listen": "127.0.0.1:0"}}),
            ..Options::default()
        },
    )
    .await
}

fn definition(name: &str) -> Value {
    json!({
        "name": name,
        "systemPrompt": "Be brief.",
        "modelProvider": "openai",
        "model": "gpt-5-mini",
        "adapter": "echo",
    })
}

async fn ok(t: &Target, who: &Signer, action: Value) -> Answer {
    let answer = call(t, who, action.clone()).await;
    assert_eq!(answer.status, 200, "{action}: {:?}", answer.body);
    answer
}

/// One agent (echo adapter) with a session, an accepted writer and
/// reader, and a pending invitee.
struct World {
    owner: Signer,
    writer: Signer,
    reader: Signer,
    pending: Signer,
    agent_id: String,
    session_id: String,
}

async fn world(t: &Target, public: bool) -> World {
    let owner = Signer::new();
    let created = ok(
        t,
        &owner,
        json!({"_": "CreateAgent", "definition": definition("Helper")}),
    )
    .await;
    let agent_id = created.text("agentId");
    let (writer, reader, pending) = (Signer::new(), Signer::new(), Signer::new());
    for (who, role) in [
        (&writer, "writer"),
        (&reader, "reader"),
        (&pending, "writer"),
    ] {
        ok(
            t,
            &owner,
            json!({"_": "InviteAgentCollaborator", "agentId": agent_id,
                   "accountId": who.id(), "role": role}),
        )
        .await;
    }
    for who in [&writer, &reader] {
        ok(
            t,
            who,
            json!({"_": "AcceptAgentInvite", "agentId": agent_id}),
        )
        .await;
    }
    if public {
        ok(
            t,
            &owner,
            json!({"_": "SetAgentPublicRead", "agentId": agent_id, "publicRead": true}),
        )
        .await;
    }
    ok(
        t,
        &owner,
        json!({"_": "SetModelProvider", "name": "openai", "provider": {"type": "openai"}}),
    )
    .await;
    let session = ok(
        t,
        &owner,
        json!({"_": "CreateSession", "agentId": agent_id, "title": "first"}),
    )
    .await;
    World {
        session_id: session.text("sessionId"),
        owner,
        writer,
        reader,
        pending,
        agent_id,
    }
}

/// A key authorized by the owner with `AuthorizeSigner`.
async fn authorized_signer(t: &Target, owner: &Signer) -> Signer {
    let delegate = Signer::delegate_of(owner.account);
    ok(
        t,
        owner,
        json!({"_": "AuthorizeSigner", "signer": delegate.key_id(), "role": "AGENT"}),
    )
    .await;
    delegate
}

/// The signer for `caller` in `w` (setting up its authority first).
async fn signer_for(t: &Target, caller: Caller, w: &World) -> Signer {
    match caller {
        Caller::Owner => w.owner.clone(),
        Caller::Writer => w.writer.clone(),
        Caller::Reader => w.reader.clone(),
        Caller::PendingInvitee => w.pending.clone(),
        Caller::PublicReader | Caller::Stranger => Signer::new(),
        Caller::DelegatedSigner => authorized_signer(t, &w.owner).await,
        Caller::CapabilitySigner => {
            let mut delegate = Signer::with_capability(&w.owner, Role::Writer);
            // The blob travels once; the CID alone is enough afterwards.
            ok(t, &delegate, json!({"_": "ListAgents"})).await;
            delegate.cid_only();
            delegate
        }
        Caller::RevokedSigner => {
            let delegate = authorized_signer(t, &w.owner).await;
            ok(t, &delegate, json!({"_": "ListAgents"})).await;
            ok(
                t,
                &w.owner,
                json!({"_": "RevokeSigner", "signer": delegate.key_id()}),
            )
            .await;
            // It shows a valid Capability from the owner, blob and all.
            delegate.holding_capability(&w.owner, Role::Writer)
        }
    }
}

fn action(act: Act, w: &World) -> Value {
    let (agent, session) = (&w.agent_id, &w.session_id);
    match act {
        Act::GetAgent => json!({"_": "GetAgent", "agentId": agent}),
        Act::UpdateAgent => {
            json!({"_": "UpdateAgent", "agentId": agent, "definition": definition("Renamed")})
        }
        Act::DeleteAgent => json!({"_": "DeleteAgent", "agentId": agent}),
        Act::ListAgentCollaborators => json!({"_": "ListAgentCollaborators", "agentId": agent}),
        Act::InviteAgentCollaborator => json!({"_": "InviteAgentCollaborator", "agentId": agent,
                                               "accountId": Signer::new().id(), "role": "reader"}),
        Act::RemoveAgentCollaborator => json!({"_": "RemoveAgentCollaborator", "agentId": agent,
                                               "accountId": w.reader.id()}),
        Act::SetAgentPublicRead => {
            json!({"_": "SetAgentPublicRead", "agentId": agent, "publicRead": true})
        }
        Act::CreateSession => json!({"_": "CreateSession", "agentId": agent}),
        Act::GetSession => json!({"_": "GetSession", "sessionId": session}),
        Act::UpdateSession => {
            json!({"_": "UpdateSession", "sessionId": session, "title": "renamed"})
        }
        Act::DeleteSession => json!({"_": "DeleteSession", "sessionId": session}),
        Act::MessageSession => json!({"_": "MessageSession", "sessionId": session,
                                      "content": [{"type": "text", "text": "echo hi"}]}),
        Act::StopSession => json!({"_": "StopSession", "sessionId": session}),
        Act::ListSessions => json!({"_": "ListSessions", "agentId": agent}),
        Act::ListModelProviders => json!({"_": "ListModelProviders", "agentId": agent}),
    }
}

fn expected_code(status: u16) -> &'static str {
    match status {
        401 => "signer_revoked",
        403 => "forbidden",
        404 => "not_found",
        other => panic!("no code expected for {other}"),
    }
}

/// After a refused action, the owner still sees everything as it was.
async fn unchanged(t: &Target, w: &World, what: &str) {
    let agent = ok(t, &w.owner, json!({"_": "GetAgent", "agentId": w.agent_id})).await;
    let agent = agent.field("agent");
    assert_eq!(
        field(field(agent, "definition"), "name"),
        &Ipld::String("Helper".into()),
        "{what}"
    );
    assert_eq!(field(agent, "publicRead"), &Ipld::Bool(false), "{what}");
    let session = ok(
        t,
        &w.owner,
        json!({"_": "GetSession", "sessionId": w.session_id}),
    )
    .await;
    assert_eq!(
        field(session.field("session"), "title"),
        &Ipld::String("first".into()),
        "{what}"
    );
    assert_eq!(session.field("events"), &Ipld::List(vec![]), "{what}");
    let collaborators = ok(
        t,
        &w.owner,
        json!({"_": "ListAgentCollaborators", "agentId": w.agent_id}),
    )
    .await;
    let Ipld::List(list) = collaborators.field("collaborators") else {
        panic!("{what}: collaborators")
    };
    // The owner, then the collaborators.
    assert_eq!(list.len(), 4, "{what}");
    assert_eq!(
        field(&list[0], "accountId"),
        &Ipld::String(w.owner.id()),
        "{what}"
    );
    assert_eq!(
        field(&list[0], "role"),
        &Ipld::String("owner".into()),
        "{what}"
    );
    assert_eq!(
        field(&list[0], "status"),
        &Ipld::String("accepted".into()),
        "{what}"
    );
    assert!(
        matches!(field(&list[0], "createdAt"), Ipld::Integer(_)),
        "{what}"
    );
    let sessions = ok(
        t,
        &w.owner,
        json!({"_": "ListSessions", "agentId": w.agent_id}),
    )
    .await;
    let Ipld::List(list) = sessions.field("sessions") else {
        panic!("{what}: sessions")
    };
    assert_eq!(list.len(), 1, "{what}");
}

fn list_len(answer: &Answer, name: &str, what: &str) -> usize {
    match answer.field(name) {
        Ipld::List(items) => items.len(),
        other => panic!("{what}: {name} is {other:?}"),
    }
}

/// What an accepted read shows: the owner's providers for the agent, and
/// pending invitations only to the owner's account.
fn sees_what_it_may(caller: Caller, act: Act, answer: &Answer, what: &str) {
    let owner_account = matches!(
        caller,
        Caller::Owner | Caller::DelegatedSigner | Caller::CapabilitySigner
    );
    match act {
        Act::ListModelProviders => {
            assert_eq!(list_len(answer, "providers", what), 1, "{what}");
        }
        Act::ListAgentCollaborators => {
            // The owner first, then who else the caller may see.
            let expected = if owner_account { 4 } else { 3 };
            assert_eq!(list_len(answer, "collaborators", what), expected, "{what}");
        }
        _ => {}
    }
}

async fn authorization_matrix(backend: Backend) {
    let sc = start(backend).await;
    let t = sc.api();
    for (caller, row) in MATRIX {
        for (act, expected) in ACTS.into_iter().zip(row) {
            let public = caller == Caller::PublicReader;
            let w = world(&t, public).await;
            let who = signer_for(&t, caller, &w).await;
            let sent = action(act, &w);
            let answer = call(&t, &who, sent.clone()).await;
            let what = format!("{caller:?} × {act:?}");
            assert_eq!(answer.status, expected, "{what}: {:?}", answer.body);
            if expected == 200 {
                // UpdateAgent answers as GetAgent does (the reference's shape).
                let name = match act {
                    Act::UpdateAgent => "GetAgentResponse".to_owned(),
                    other => format!("{other:?}Response"),
                };
                assert_eq!(answer.text("_"), name, "{what}");
                sees_what_it_may(caller, act, &answer, &what);
            } else {
                assert_eq!(answer.code(), expected_code(expected), "{what}");
                assert_eq!(answer.text("_"), "Error", "{what}");
                if !public {
                    unchanged(&t, &w, &what).await;
                }
            }
        }
    }
}

both_backends!(authorization_matrix);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_access_answers_exactly_as_no_such_agent() {
    let sc = start(Backend::SqliteFile).await;
    let t = sc.api();
    let w = world(&t, false).await;
    let stranger = Signer::new();
    let missing = "00000000-0000-4000-8000-000000000000";
    for (real, none) in [
        (
            json!({"_": "GetAgent", "agentId": w.agent_id}),
            json!({"_": "GetAgent", "agentId": missing}),
        ),
        (
            json!({"_": "GetSession", "sessionId": w.session_id}),
            json!({"_": "GetSession", "sessionId": missing}),
        ),
    ] {
        let a = call(&t, &stranger, real).await;
        let b = call(&t, &stranger, none).await;
        assert_eq!((a.status, a.code()), (b.status, b.code()));
        let real_id = [&w.agent_id, &w.session_id];
        let mut message = a.text("message");
        for id in real_id {
            message = message.replace(id.as_str(), missing);
        }
        assert_eq!(message, b.text("message"));
    }
    // A session of the host's own, serving no Seed agent, is no Seed
    // session for anyone.
    sc.open("host-only", "echo").await;
    for who in [&w.owner, &stranger] {
        for action in [
            json!({"_": "GetSession", "sessionId": "host-only"}),
            json!({"_": "MessageSession", "sessionId": "host-only",
                   "content": [{"type": "text", "text": "echo hi"}]}),
            json!({"_": "DeleteSession", "sessionId": "host-only"}),
        ] {
            let a = call(&t, who, action.clone()).await;
            assert_eq!((a.status, a.code()), (404, "not_found".into()), "{action}");
        }
    }
    assert!(sc.delivered_prompts().is_empty());
    sc.ok("sessions/get", json!({"sessionId": "host-only"}))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_account_key_manages_signers_and_capabilities_are_checked() {
    let sc = start(Backend::SqliteFile).await;
    let t = sc.api();
    let owner = Signer::new();
    let delegated = authorized_signer(&t, &owner).await;
    let mut capable = Signer::with_capability(&owner, Role::Writer);
    ok(&t, &capable, json!({"_": "ListAgents"})).await;
    capable.cid_only();
    let outsider = Signer::new();
    for who in [&delegated, &capable] {
        for action in [
            json!({"_": "AuthorizeSigner", "signer": outsider.id(), "role": "AGENT"}),
            json!({"_": "RevokeSigner", "signer": delegated.key_id()}),
            json!({"_": "ListSigners"}),
        ] {
            let a = call(&t, who, action.clone()).await;
            assert_eq!((a.status, a.code()), (403, "forbidden".into()), "{action}");
        }
    }
    // Both delegations are listed for the owner, the capability by CID.
    let listed = ok(&t, &owner, json!({"_": "ListSigners"})).await;
    let Ipld::List(signers) = listed.field("signers") else {
        panic!("{:?}", listed.body)
    };
    assert_eq!(signers.len(), 2);

    // A CID never seen, without its blob, is unknown: there is no fetch.
    let mut unknown = Signer::with_capability(&owner, Role::Writer);
    unknown.cid_only();
    let a = call(&t, &unknown, json!({"_": "ListAgents"})).await;
    assert_eq!((a.status, a.code()), (401, "capability_unknown".into()));
    // A capability another account issued, or with a role that is not
    // AGENT or WRITER, or whose CID is not its blob's, is refused.
    let foreign = Signer {
        account: owner.account,
        ..Signer::with_capability(&outsider, Role::Writer)
    };
    let a = call(&t, &foreign, json!({"_": "ListAgents"})).await;
    assert_eq!((a.status, a.code()), (401, "bad_capability".into()));
    let reader_role = Signer::with_capability(&owner, Role::Other("READER".into()));
    let a = call(&t, &reader_role, json!({"_": "ListAgents"})).await;
    assert_eq!((a.status, a.code()), (401, "bad_capability".into()));
    let mut mismatched = Signer::with_capability(&owner, Role::Writer);
    mismatched.capability = capable.capability.clone();
    let a = call(&t, &mismatched, json!({"_": "ListAgents"})).await;
    assert_eq!((a.status, a.code()), (401, "bad_capability".into()));
    // A capability scoped to one document does not delegate the account.
    let mut scoped = Signer::delegate_of(owner.account);
    let blob = Capability::issue(
        &owner.key,
        scoped.principal(),
        Role::Writer,
        now_ms(),
        Some("/notes"),
        None,
    )
    .expect("issue a capability");
    scoped.capability = Some(cid_of(&blob));
    scoped.capability_blob = Some(blob);
    let a = call(&t, &scoped, json!({"_": "ListAgents"})).await;
    assert_eq!((a.status, a.code()), (401, "bad_capability".into()));
    // A key with neither authorization nor capability is refused.
    let a = call(
        &t,
        &Signer::delegate_of(owner.account),
        json!({"_": "ListAgents"}),
    )
    .await;
    assert_eq!((a.status, a.code()), (401, "signer_not_authorized".into()));

    // Revoking the capability's key refuses it from its next request,
    // with the CID alone or with the blob again.
    ok(
        &t,
        &owner,
        json!({"_": "RevokeSigner", "signer": capable.key_id()}),
    )
    .await;
    let a = call(&t, &capable, json!({"_": "ListAgents"})).await;
    assert_eq!(a.status, 401, "{:?}", a.body);
    let again = capable.holding_capability(&owner, Role::Writer);
    let a = call(&t, &again, json!({"_": "ListAgents"})).await;
    assert_eq!((a.status, a.code()), (401, "signer_revoked".into()));
    // Authorizing it again lifts the revocation.
    ok(
        &t,
        &owner,
        json!({"_": "AuthorizeSigner", "signer": again.key_id(), "role": "AGENT"}),
    )
    .await;
    ok(&t, &again, json!({"_": "ListAgents"})).await;
}
