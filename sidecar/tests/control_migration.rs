//! Core migration 4 on both backends: a store at version 3 with sessions in
//! it moves to 4, keeps its rows, and the control tables work at once.

mod control_common;

use agentos_schema::{ladders, migrate, Owner};
use control_common::*;

#[tokio::test]
async fn a_version_3_store_migrates_to_4_and_keeps_its_rows() {
    for backend in all_backends().await {
        let db = backend.db.clone();
        let core = ladders::core::MIGRATIONS;
        let at_3 = migrate(db.as_ref(), Owner::Core, &core[..3])
            .await
            .expect("to 3");
        assert_eq!(at_3.to, 3, "{}", backend.name);
        insert_session(&db, "kept", 42).await;

        let core_outcome = migrate(db.as_ref(), Owner::Core, &core[..4])
            .await
            .expect("to 4");
        assert_eq!(
            (core_outcome.from, core_outcome.to),
            (3, 4),
            "{}",
            backend.name
        );
        let version = db
            .query(
                "SELECT schema_version FROM agentos_core_schema_version",
                vec![],
            )
            .await
            .expect("version");
        assert_eq!(version.scalar_i64(), Some(4), "{}", backend.name);
        assert_eq!(
            count_rows(&db, "agentos_core_sessions", "session_id = 'kept'", vec![]).await,
            1
        );
        for table in [
            "agentos_core_accounts",
            "agentos_core_signers",
            "agentos_core_agents",
            "agentos_core_agent_collaborators",
            "agentos_core_agent_sessions",
            "agentos_core_model_providers",
            "agentos_core_provider_secret_refs",
            "agentos_core_secrets",
            "agentos_core_action_idempotency",
        ] {
            let sql = db
                .query(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1",
                    vec![table.into()],
                )
                .await
                .expect("schema");
            let text = match sql.scalar() {
                Some(SqlValue::Text(t)) => t.clone(),
                other => panic!("{table}: {other:?}"),
            };
            assert!(text.trim_end().ends_with("STRICT"), "{table}");
        }

        // Today's control plane runs on the whole ladder.
        migrate(db.as_ref(), Owner::Core, core)
            .await
            .expect("to the latest");
        let control = Control::new(db.clone(), ControlLimits::default(), SecretBox::new(key(1)));
        let agent = control
            .create_agent(&principal(1), new_agent("after"))
            .await
            .expect("agent");
        control
            .link_session("kept", &agent.agent_id)
            .await
            .expect("link");
        // Running the ladder again changes nothing.
        let again = migrate(db.as_ref(), Owner::Core, core)
            .await
            .expect("again");
        assert_eq!(again.from, again.to, "{}", backend.name);
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn the_tables_refuse_what_their_checks_forbid() {
    for env in envs().await {
        let refused = |sql: &'static str| {
            let db = env.db().clone();
            async move {
                let err = db
                    .transaction(vec![Statement::new(sql, vec![])])
                    .await
                    .expect_err(sql);
                assert!(err.is_constraint(), "{sql}: {err:?}");
            }
        };
        refused(
            "INSERT INTO agentos_core_agents (agent_id, account_id, definition, name, adapter, \
               status, created_at_ms, updated_at_ms) VALUES ('a', 'z1', x'01', 'n', 'builtin', \
               'busy', 1, 1)",
        )
        .await;
        refused(
            "INSERT INTO agentos_core_agents (agent_id, account_id, definition, name, adapter, \
               created_at_ms, updated_at_ms) VALUES ('a', 'z1', 'text', 'n', 'builtin', 1, 1)",
        )
        .await;
        refused(
            "INSERT INTO agentos_core_agent_collaborators (agent_id, account_id, role, status, \
               created_at_ms, updated_at_ms) VALUES ('a', 'z1', 'reader', 'accepted', 1, 1)",
        )
        .await;
        refused(
            "INSERT INTO agentos_core_signers (account_id, signer, role, created_at_ms, \
               updated_at_ms) VALUES ('z1', 'z2', NULL, 1, 1)",
        )
        .await;
        refused(
            "INSERT INTO agentos_core_secrets (secret_id, account_id, name, key_id, ciphertext, \
               created_at_ms, updated_at_ms) VALUES ('s', 'z1', 'n', 'k', x'0102', 1, 1)",
        )
        .await;
        refused(
            "INSERT INTO agentos_core_model_providers (provider_id, account_id, name, type, \
               config, auth_mode, created_at_ms, updated_at_ms) \
             VALUES ('p', 'z1', 'n', 'openai', x'01', 'password', 1, 1)",
        )
        .await;
        env.done().await;
    }
}
