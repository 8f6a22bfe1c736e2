//! Who may do what to an agent, on both backends: the owner, an accepted
//! writer and reader, any account on a public-read agent, a stranger and
//! a pending invitee, each asked for read, write and owner access; and
//! the collaborator lifecycle that moves an account between them.

mod control_common;

use control_common::*;

/// What each `require_*` answers: `Ok`, or the error code.
async fn answers(control: &Control, account: &str, agent_id: &str) -> [&'static str; 3] {
    let code = |r: Result<AgentAccess, ControlError>| match r {
        Ok(_) => "ok",
        Err(e) => e.code(),
    };
    [
        code(authz::require_read(control, account, agent_id).await),
        code(authz::require_write(control, account, agent_id).await),
        code(authz::require_owner(control, account, agent_id).await),
    ]
}

#[tokio::test]
async fn the_authorization_matrix() {
    for env in envs().await {
        let c = &env.control;
        let (owner, writer, reader, stranger, invitee) = (
            principal(1),
            principal(2),
            principal(3),
            principal(4),
            principal(5),
        );
        let agent = c
            .create_agent(&owner, new_agent("matrix"))
            .await
            .expect("agent");
        let id = agent.agent_id.as_str();
        for (who, role) in [
            (&writer, CollaboratorRole::Writer),
            (&reader, CollaboratorRole::Reader),
        ] {
            c.invite(id, who, role).await.expect("invite");
            c.accept_invite(id, who).await.expect("accept");
        }
        c.invite(id, &invitee, CollaboratorRole::Writer)
            .await
            .expect("pending invite");

        let private = [
            (&owner, ["ok", "ok", "ok"]),
            (&writer, ["ok", "ok", "forbidden"]),
            (&reader, ["ok", "forbidden", "forbidden"]),
            (&stranger, ["not_found", "not_found", "not_found"]),
            (&invitee, ["not_found", "not_found", "not_found"]),
        ];
        for (who, expected) in private {
            assert_eq!(answers(c, who, id).await, expected, "{}: {who}", env.name());
        }
        // A missing agent answers exactly as an inaccessible one.
        assert_eq!(
            answers(c, &owner, "no-such-agent").await,
            ["not_found"; 3],
            "{}",
            env.name()
        );

        c.set_public_read(id, true).await.expect("public");
        let public = [
            (&owner, ["ok", "ok", "ok"]),
            (&writer, ["ok", "ok", "forbidden"]),
            (&reader, ["ok", "forbidden", "forbidden"]),
            (&stranger, ["ok", "forbidden", "forbidden"]),
            (&invitee, ["ok", "forbidden", "forbidden"]),
        ];
        for (who, expected) in public {
            assert_eq!(answers(c, who, id).await, expected, "{}: {who}", env.name());
        }
        let seen = authz::access(c, &stranger, id).await.expect("access");
        assert_eq!(
            seen.map(|a| a.access_role),
            Some(AccessRole::Reader),
            "{}",
            env.name()
        );
        env.done().await;
    }
}

#[tokio::test]
async fn collaborator_lifecycle() {
    for env in envs().await {
        let c = &env.control;
        let (owner, friend) = (principal(10), principal(11));
        let agent = c
            .create_agent(&owner, new_agent("shared"))
            .await
            .expect("agent");
        let id = agent.agent_id.as_str();

        // Invited: pending, no access, listed as an invitation.
        let invited = c
            .invite(id, &friend, CollaboratorRole::Writer)
            .await
            .expect("invite");
        assert_eq!(invited.status, CollaboratorStatus::Pending);
        assert_eq!(invited.accepted_at_ms, None);
        assert!(authz::access(c, &friend, id)
            .await
            .expect("access")
            .is_none());
        assert!(c.list_agents_for(&friend).await.expect("list").is_empty());
        let invites = c.list_invites_for(&friend).await.expect("invites");
        assert_eq!(invites.len(), 1, "{}", env.name());
        assert_eq!(invites[0].agent_name, "shared");
        assert_eq!(invites[0].owner_account_id, owner);
        assert_eq!(invites[0].role, CollaboratorRole::Writer);

        // Accepted: writer access, listed among the account's agents.
        let reached = c.accept_invite(id, &friend).await.expect("accept");
        assert_eq!(reached.agent_id, id);
        let granted = authz::require_write(c, &friend, id).await.expect("write");
        assert_eq!(granted.access_role, AccessRole::Writer);
        let listed = c.list_agents_for(&friend).await.expect("list");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].access_role, AccessRole::Writer);
        assert!(c.list_invites_for(&friend).await.expect("none").is_empty());
        let collaborators = c.list_collaborators(id).await.expect("collaborators");
        assert_eq!(collaborators.len(), 1);
        assert_eq!(collaborators[0].status, CollaboratorStatus::Accepted);
        assert!(collaborators[0].accepted_at_ms.is_some());
        // Accepting again is harmless; declining an accepted one is not a
        // thing (there is no pending invitation).
        c.accept_invite(id, &friend).await.expect("accept again");
        assert_eq!(
            c.decline_invite(id, &friend)
                .await
                .expect_err("no invite")
                .code(),
            "not_found"
        );
        // A new role keeps the acceptance.
        let changed = c
            .invite(id, &friend, CollaboratorRole::Reader)
            .await
            .expect("change role");
        assert_eq!(changed.status, CollaboratorStatus::Accepted);
        assert_eq!(changed.role, CollaboratorRole::Reader);
        assert_eq!(
            authz::require_write(c, &friend, id)
                .await
                .expect_err("reader")
                .code(),
            "forbidden"
        );

        // Removed: no access at all.
        c.remove_collaborator(id, &friend).await.expect("remove");
        assert!(authz::access(c, &friend, id)
            .await
            .expect("access")
            .is_none());
        assert_eq!(
            c.remove_collaborator(id, &friend)
                .await
                .expect_err("twice")
                .code(),
            "not_found"
        );

        // Declined: the invitation is gone and gives nothing.
        c.invite(id, &friend, CollaboratorRole::Reader)
            .await
            .expect("invite");
        c.decline_invite(id, &friend).await.expect("decline");
        assert!(c.list_invites_for(&friend).await.expect("none").is_empty());
        assert_eq!(
            c.accept_invite(id, &friend)
                .await
                .expect_err("declined")
                .code(),
            "not_found"
        );

        // The owner cannot be invited; a missing agent is not found; a bad
        // principal is an invalid argument.
        assert_eq!(
            c.invite(id, &owner, CollaboratorRole::Writer)
                .await
                .expect_err("owner")
                .code(),
            "invalid_argument"
        );
        assert_eq!(
            c.invite("missing", &friend, CollaboratorRole::Writer)
                .await
                .expect_err("missing")
                .code(),
            "not_found"
        );
        assert_eq!(
            c.invite(id, "not a principal", CollaboratorRole::Writer)
                .await
                .expect_err("bad")
                .code(),
            "invalid_argument"
        );
        env.done().await;
    }
}

#[tokio::test]
async fn sessions_and_signers_follow_the_same_rules() {
    for env in envs().await {
        let c = &env.control;
        let (owner, reader, stranger, delegate) =
            (principal(20), principal(21), principal(22), principal(23));
        let agent = c.create_agent(&owner, new_agent("s")).await.expect("agent");
        let id = agent.agent_id.as_str();
        c.invite(id, &reader, CollaboratorRole::Reader)
            .await
            .expect("invite");
        c.accept_invite(id, &reader).await.expect("accept");
        insert_session(env.db(), "s1", 5).await;
        c.link_session("s1", id).await.expect("link");

        let (link, granted) = authz::require_session(c, &reader, "s1", AccessRole::Reader)
            .await
            .expect("read session");
        assert_eq!(link.agent_id, id);
        assert_eq!(link.account_id, owner);
        assert_eq!(granted.access_role, AccessRole::Reader);
        let code = |r: Result<(SessionLink, AgentAccess), ControlError>| {
            r.map(|_| "ok").unwrap_or_else(|e| e.code())
        };
        assert_eq!(
            code(authz::require_session(c, &reader, "s1", AccessRole::Writer).await),
            "forbidden"
        );
        assert_eq!(
            code(authz::require_session(c, &stranger, "s1", AccessRole::Reader).await),
            "not_found"
        );
        assert_eq!(
            code(authz::require_session(c, &owner, "unlinked", AccessRole::Reader).await),
            "not_found"
        );

        // Signers: the account itself, an authorized key, a stranger.
        assert_eq!(
            authz::require_signer(c, &owner, &owner)
                .await
                .expect("self"),
            SignerRole::Owner
        );
        assert_eq!(
            authz::require_signer(c, &owner, &delegate)
                .await
                .expect_err("unknown")
                .code(),
            "forbidden"
        );
        c.authorize_signer(&owner, &delegate, SignerRole::Agent)
            .await
            .expect("authorize");
        assert_eq!(
            authz::require_signer(c, &owner, &delegate)
                .await
                .expect("agent"),
            SignerRole::Agent
        );
        env.done().await;
    }
}
