//! Agents, signers and session links on both backends: what is stored and
//! read back, what deleting an agent takes with it, revocation, every
//! collection's bound, and keyset paging of an agent's sessions.

mod control_common;

use control_common::*;

#[tokio::test]
async fn agents_are_stored_listed_updated_and_deleted_with_what_hangs_off_them() {
    for env in envs().await {
        let c = &env.control;
        let (owner, friend) = (principal(1), principal(2));
        let created = c
            .create_agent(&owner, new_agent("first"))
            .await
            .expect("create");
        assert_eq!(created.account_id, owner);
        assert_eq!(created.status, AgentStatus::Idle);
        assert!(!created.public_read);
        assert_eq!(created.definition, b"definition of first");
        assert_eq!(
            c.get_agent(&created.agent_id).await.expect("get"),
            Some(created.clone()),
            "{}",
            env.name()
        );
        let second = c
            .create_agent(&owner, new_agent("second"))
            .await
            .expect("second");
        let listed = c.list_agents_for(&owner).await.expect("list");
        // Oldest first; two made in one millisecond go by id.
        let mut names: Vec<&str> = listed.iter().map(|a| a.agent.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["first", "second"], "{}", env.name());
        assert!(listed.iter().all(|a| a.access_role == AccessRole::Owner));

        let mut update = new_agent("renamed");
        update.adapter = "echo".into();
        let updated = c
            .update_agent(&created.agent_id, update)
            .await
            .expect("update");
        assert_eq!(updated.name, "renamed");
        assert_eq!(updated.adapter, "echo");
        assert_eq!(updated.created_at_ms, created.created_at_ms);
        assert!(updated.updated_at_ms >= created.updated_at_ms);
        let running = c
            .set_agent_status(&created.agent_id, AgentStatus::Running)
            .await
            .expect("status");
        assert_eq!(running.status, AgentStatus::Running);
        assert_eq!(
            c.update_agent("missing", new_agent("x"))
                .await
                .expect_err("missing")
                .code(),
            "not_found"
        );

        // Delete takes the collaborators and the session links, and names
        // the sessions so the caller can delete them.
        c.invite(&created.agent_id, &friend, CollaboratorRole::Reader)
            .await
            .expect("invite");
        for (session, at) in [("s-b", 10), ("s-a", 20)] {
            insert_session(env.db(), session, at).await;
            c.link_session(session, &created.agent_id)
                .await
                .expect("link");
        }
        // A linked session already deleted is not named.
        insert_session(env.db(), "s-gone", 15).await;
        c.link_session("s-gone", &created.agent_id)
            .await
            .expect("link gone");
        delete_session_row(env.db(), "s-gone").await;
        insert_session(env.db(), "s-other", 30).await;
        c.link_session("s-other", &second.agent_id)
            .await
            .expect("link other");
        assert_eq!(c.session_count(&created.agent_id).await.expect("count"), 2);

        let sessions = c.delete_agent(&created.agent_id).await.expect("delete");
        assert_eq!(sessions, ["s-a", "s-b"], "{}", env.name());
        assert_eq!(c.get_agent(&created.agent_id).await.expect("get"), None);
        assert!(c
            .list_invites_for(&friend)
            .await
            .expect("invites")
            .is_empty());
        let id = SqlValue::from(created.agent_id.as_str());
        for table in [
            "agentos_core_agent_collaborators",
            "agentos_core_agent_sessions",
        ] {
            assert_eq!(
                count_rows(env.db(), table, "agent_id = ?1", vec![id.clone()]).await,
                0,
                "{}: {table}",
                env.name()
            );
        }
        assert_eq!(c.session_agent("s-a").await.expect("link"), None);
        assert_eq!(
            c.session_agent("s-other")
                .await
                .expect("other")
                .map(|l| l.agent_id),
            Some(second.agent_id.clone())
        );
        assert_eq!(
            c.delete_agent(&created.agent_id)
                .await
                .expect_err("twice")
                .code(),
            "not_found"
        );
        env.done().await;
    }
}

#[tokio::test]
async fn bad_agent_input_is_refused_with_typed_errors() {
    for env in envs().await {
        let c = &env.control;
        let owner = principal(3);
        let mut empty = new_agent("x");
        empty.definition.clear();
        let mut no_adapter = new_agent("x");
        no_adapter.adapter.clear();
        let mut control_char = new_agent("a\u{7}b");
        control_char.adapter = "builtin".into();
        for bad in [empty, no_adapter, control_char] {
            assert_eq!(
                c.create_agent(&owner, bad).await.expect_err("bad").code(),
                "invalid_argument",
                "{}",
                env.name()
            );
        }
        assert_eq!(
            c.create_agent("owner", new_agent("x"))
                .await
                .expect_err("principal")
                .code(),
            "invalid_argument"
        );
        let mut huge = new_agent("huge");
        huge.definition = vec![0; c.limits().max_agent_definition_bytes as usize + 1];
        let err = c.create_agent(&owner, huge).await.expect_err("huge");
        assert_eq!(
            err.setting(),
            Some("limits.control.maxAgentDefinitionBytes")
        );
        assert!(c.list_agents_for(&owner).await.expect("list").is_empty());
        env.done().await;
    }
}

#[tokio::test]
async fn a_revoked_signer_stays_refused_until_the_account_authorizes_it() {
    for env in envs().await {
        let c = &env.control;
        let (account, signer, other) = (principal(4), principal(5), principal(6));
        let blob = b"capability blob".to_vec();
        let stored = c
            .store_delegation(
                &account,
                &signer,
                SignerRole::Writer,
                "bafy-cap-1",
                blob.clone(),
            )
            .await
            .expect("delegation");
        assert_eq!(stored.role, Some(SignerRole::Writer));
        assert_eq!(stored.capability_blob.as_deref(), Some(&blob[..]));
        assert_eq!(
            c.signer_role(&account, &signer).await.expect("role"),
            Some(SignerRole::Writer)
        );
        let known = c.known_capability("bafy-cap-1").await.expect("known");
        assert_eq!(
            known.map(|s| (s.account_id, s.signer)),
            Some((account.clone(), signer.clone()))
        );

        let revoked = c.revoke_signer(&account, &signer).await.expect("revoke");
        assert!(revoked.revoked_at_ms.is_some());
        assert_eq!(c.signer_role(&account, &signer).await.expect("role"), None);
        assert_eq!(c.known_capability("bafy-cap-1").await.expect("known"), None);
        // Replaying the capability (or a fresh one) does not re-admit it.
        for cid in ["bafy-cap-1", "bafy-cap-2"] {
            let err = c
                .store_delegation(&account, &signer, SignerRole::Writer, cid, blob.clone())
                .await
                .expect_err("revoked");
            assert_eq!(err.code(), "forbidden", "{}", env.name());
        }
        assert_eq!(c.signer_role(&account, &signer).await.expect("role"), None);

        // A signer revoked before it was ever seen is refused as well.
        c.revoke_signer(&account, &other)
            .await
            .expect("revoke unseen");
        assert_eq!(
            c.store_delegation(
                &account,
                &other,
                SignerRole::Agent,
                "bafy-cap-3",
                blob.clone()
            )
            .await
            .expect_err("revoked")
            .code(),
            "forbidden"
        );

        // The account's own act lifts the revocation.
        c.authorize_signer(&account, &signer, SignerRole::Agent)
            .await
            .expect("authorize");
        assert_eq!(
            c.signer_role(&account, &signer).await.expect("role"),
            Some(SignerRole::Agent)
        );
        c.store_delegation(
            &account,
            &signer,
            SignerRole::Writer,
            "bafy-cap-4",
            blob.clone(),
        )
        .await
        .expect("delegation again");
        let listed = c.list_signers(&account).await.expect("list");
        assert_eq!(listed.len(), 2, "{}", env.name());
        assert_eq!(
            c.signer_role(&account, &account).await.expect("self"),
            Some(SignerRole::Owner)
        );
        assert_eq!(
            c.authorize_signer(&account, &account, SignerRole::Owner)
                .await
                .expect_err("self row")
                .code(),
            "invalid_argument"
        );
        env.done().await;
    }
}

fn small_limits() -> ControlLimits {
    ControlLimits {
        max_accounts: 4,
        max_agents_per_account: 2,
        max_providers_per_account: 1,
        max_secrets_per_account: 1,
        max_collaborators_per_agent: 1,
        max_collaborations_per_account: 1,
        max_signers_per_account: 1,
        ..ControlLimits::default()
    }
}

fn setting_of<T: std::fmt::Debug>(result: Result<T, ControlError>) -> &'static str {
    match result {
        Err(e) => {
            assert_eq!(e.code(), "limit", "{e}");
            e.setting().unwrap_or("no setting")
        }
        Ok(v) => panic!("expected a limit error, got {v:?}"),
    }
}

#[tokio::test]
async fn full_collections_answer_a_limit_naming_the_setting() {
    for env in envs_with(small_limits()).await {
        let c = &env.control;
        let (a, b, x, y) = (principal(7), principal(8), principal(9), principal(10));
        let first = c.create_agent(&a, new_agent("1")).await.expect("1");
        c.create_agent(&a, new_agent("2")).await.expect("2");
        assert_eq!(
            setting_of(c.create_agent(&a, new_agent("3")).await),
            "limits.control.maxAgentsPerAccount"
        );
        assert_eq!(
            c.list_agents_for(&a).await.expect("list").len(),
            2,
            "{}",
            env.name()
        );
        // Another account has its own room.
        let other = c.create_agent(&b, new_agent("b1")).await.expect("b1");

        // Collaborators of one agent, and collaborations of one account.
        c.invite(&first.agent_id, &x, CollaboratorRole::Reader)
            .await
            .expect("x");
        assert_eq!(
            setting_of(
                c.invite(&first.agent_id, &y, CollaboratorRole::Reader)
                    .await
            ),
            "limits.control.maxCollaboratorsPerAgent"
        );
        // Changing an existing collaborator's role needs no room.
        c.invite(&first.agent_id, &x, CollaboratorRole::Writer)
            .await
            .expect("role");
        assert_eq!(
            setting_of(
                c.invite(&other.agent_id, &x, CollaboratorRole::Reader)
                    .await
            ),
            "limits.control.maxCollaborationsPerAccount"
        );

        // Signers, providers, secrets: a new name needs room, a known one
        // is replaced.
        c.authorize_signer(&a, &x, SignerRole::Agent)
            .await
            .expect("signer");
        c.authorize_signer(&a, &x, SignerRole::Writer)
            .await
            .expect("again");
        assert_eq!(
            setting_of(c.authorize_signer(&a, &y, SignerRole::Agent).await),
            "limits.control.maxSignersPerAccount"
        );
        assert_eq!(
            setting_of(
                c.store_delegation(&a, &y, SignerRole::Agent, "bafy", b"cap".to_vec())
                    .await
            ),
            "limits.control.maxSignersPerAccount"
        );
        let provider = |name: &str| NewProvider {
            name: name.into(),
            provider_type: "openai".into(),
            config: b"config".to_vec(),
            auth_mode: None,
            secret_refs: vec![],
        };
        c.set_provider(&a, provider("p1")).await.expect("p1");
        c.set_provider(&a, provider("p1")).await.expect("p1 again");
        assert_eq!(
            setting_of(c.set_provider(&a, provider("p2")).await),
            "limits.control.maxProvidersPerAccount"
        );
        c.set_secret(&a, "s1", b"v".to_vec().into(), None)
            .await
            .expect("s1");
        c.set_secret(&a, "s1", b"w".to_vec().into(), None)
            .await
            .expect("s1 again");
        assert_eq!(
            setting_of(c.set_secret(&a, "s2", b"v".to_vec().into(), None).await),
            "limits.control.maxSecretsPerAccount"
        );

        // Accounts VM-wide: a and b wrote (an invitee or a signer does not
        // make an account), so two more fit.
        c.ensure_account(&principal(11)).await.expect("third");
        c.ensure_account(&principal(12)).await.expect("fourth");
        assert_eq!(
            setting_of(c.ensure_account(&principal(13)).await),
            "limits.control.maxAccounts"
        );
        c.ensure_account(&a)
            .await
            .expect("an existing account is fine");
        env.done().await;
    }
}

#[tokio::test]
async fn session_links_and_keyset_pages_with_ties() {
    for env in envs().await {
        let c = &env.control;
        let (owner, friend, stranger) = (principal(14), principal(15), principal(16));
        let mine = c
            .create_agent(&owner, new_agent("mine"))
            .await
            .expect("mine");
        let theirs = c
            .create_agent(&stranger, new_agent("theirs"))
            .await
            .expect("theirs");
        c.invite(&mine.agent_id, &friend, CollaboratorRole::Reader)
            .await
            .expect("invite");
        c.accept_invite(&mine.agent_id, &friend)
            .await
            .expect("accept");

        // Seven sessions, four sharing one millisecond.
        let times = [
            ("s1", 100),
            ("s2", 200),
            ("s3", 200),
            ("s4", 200),
            ("s5", 200),
            ("s6", 300),
            ("s7", 50),
        ];
        for (id, at) in times {
            insert_session(env.db(), id, at).await;
            c.link_session(id, &mine.agent_id).await.expect("link");
        }
        insert_session(env.db(), "x1", 250).await;
        c.link_session("x1", &theirs.agent_id)
            .await
            .expect("link theirs");
        let expected = ["s6", "s5", "s4", "s3", "s2", "s1", "s7"];

        for scope in [
            SessionScope::Agent(mine.agent_id.clone()),
            SessionScope::Account(owner.clone()),
            SessionScope::Account(friend.clone()),
        ] {
            for page_size in [1u32, 2, 3, 7] {
                let mut seen = Vec::new();
                let mut cursor = None;
                loop {
                    let page = c
                        .list_sessions_page(&scope, cursor.as_ref(), page_size)
                        .await
                        .expect("page");
                    assert!(page.sessions.len() <= page_size as usize);
                    seen.extend(page.sessions.iter().map(|s| s.session_id.clone()));
                    match page.next_cursor {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                assert_eq!(seen, expected, "{}: {scope:?} by {page_size}", env.name());
            }
        }
        let all = c
            .list_sessions_page(&SessionScope::Agent(mine.agent_id.clone()), None, 500)
            .await
            .expect("all");
        assert_eq!(all.next_cursor, None);
        assert!(all
            .sessions
            .iter()
            .all(|s| s.account_id == owner && s.agent_id == mine.agent_id));
        let page = c
            .list_sessions_page(&SessionScope::Account(stranger.clone()), None, 10)
            .await
            .expect("stranger");
        assert_eq!(
            page.sessions
                .iter()
                .map(|s| s.session_id.as_str())
                .collect::<Vec<_>>(),
            ["x1"]
        );

        // Linking: twice to the same agent is harmless; to another is a
        // conflict; a missing session or agent is not found.
        c.link_session("s1", &mine.agent_id).await.expect("again");
        assert_eq!(
            c.link_session("s1", &theirs.agent_id)
                .await
                .expect_err("other")
                .code(),
            "conflict"
        );
        assert_eq!(
            c.link_session("nope", &mine.agent_id)
                .await
                .expect_err("no session")
                .code(),
            "not_found"
        );
        insert_session(env.db(), "s8", 10).await;
        assert_eq!(
            c.link_session("s8", "no-agent")
                .await
                .expect_err("no agent")
                .code(),
            "not_found"
        );
        // A deleted session drops out of reads at once, and its link goes
        // when the caller unlinks it (or with the agent's next link).
        delete_session_row(env.db(), "s6").await;
        assert_eq!(c.session_agent("s6").await.expect("gone"), None);
        let first = c
            .list_sessions_page(&SessionScope::Agent(mine.agent_id.clone()), None, 1)
            .await
            .expect("first");
        assert_eq!(first.sessions[0].session_id, "s5");
        delete_session_row(env.db(), "s5").await;
        assert!(c.unlink_session("s5").await.expect("unlink"));
        assert!(!c.unlink_session("s5").await.expect("unlink twice"));
        c.link_session("s8", &mine.agent_id).await.expect("link s8");
        let links = count_rows(
            env.db(),
            "agentos_core_agent_sessions",
            "agent_id = ?1",
            vec![mine.agent_id.as_str().into()],
        )
        .await;
        assert_eq!(links, 6, "{}: s1-s4, s7, s8", env.name());
        env.done().await;
    }
}

#[tokio::test]
async fn crossing_80_percent_warns_once_per_crossing() {
    let captured = CapturedLog::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let limits = ControlLimits {
        max_agents_per_account: 5,
        ..ControlLimits::default()
    };
    let warnings = || captured.count(&["80%", "limits.control.maxAgentsPerAccount"]);
    let mut expected = 0;
    for env in envs_with(limits).await {
        let c = &env.control;
        let owner = principal(17);
        let mut agents = Vec::new();
        for n in 0..5 {
            // Another test's thread may meet the warning's callsite first,
            // while this thread's subscriber is being registered, and cache
            // "never" for it: ask every callsite again.
            tracing::callsite::rebuild_interest_cache();
            agents.push(
                c.create_agent(&owner, new_agent(&n.to_string()))
                    .await
                    .expect("agent"),
            );
            // The fourth of five is the crossing; the fifth stays above.
            if n == 3 {
                expected += 1;
            }
            assert_eq!(warnings(), expected, "{} after {}", env.name(), n + 1);
        }
        // Back below, then across again: one more warning.
        for agent in &agents[..3] {
            c.delete_agent(&agent.agent_id).await.expect("delete");
        }
        c.create_agent(&owner, new_agent("below"))
            .await
            .expect("3 of 5");
        assert_eq!(warnings(), expected);
        tracing::callsite::rebuild_interest_cache();
        c.create_agent(&owner, new_agent("across"))
            .await
            .expect("4 of 5");
        expected += 1;
        assert_eq!(warnings(), expected, "{}", env.name());
        env.done().await;
    }
}
