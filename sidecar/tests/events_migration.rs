//! Core migration 13 on both backends: an event log at version 12 moves to
//! 13 (the table rebuilt without a `json_valid` CHECK on its payloads) with
//! every row as it was, and the table still refuses what its other rules
//! forbid.

use agentos_schema::{ladders, migrate, Owner, SqlValue, Statement};
use agentos_storage::testing::all_backends;

const INSERT: &str = "INSERT INTO agentos_core_events (session_id, sequence, occurred_at_ms, \
     acp_protocol_version, event_kind, correlation_id, payload_json, payload_bytes, \
     outcome_status, terminal_reason, actor_kind, actor_account, actor_signer) \
     VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, length(CAST(?6 AS BLOB)), ?7, ?8, ?9, ?10, ?11)";

#[allow(clippy::too_many_arguments)]
fn event(
    session: &str,
    sequence: i64,
    kind: &str,
    correlation: Option<&str>,
    payload: &str,
    outcome: Option<&str>,
    reason: Option<&str>,
    actor: (&str, Option<&str>, Option<&str>),
) -> Statement {
    let text = |t: Option<&str>| t.map_or(SqlValue::Null, SqlValue::from);
    Statement::new(
        INSERT,
        vec![
            session.into(),
            SqlValue::Integer(sequence),
            SqlValue::Integer(1_700_000_000_000 + sequence),
            kind.into(),
            text(correlation),
            payload.into(),
            text(outcome),
            text(reason),
            actor.0.into(),
            text(actor.1),
            text(actor.2),
        ],
    )
}

const ALL_ROWS: &str = "SELECT * FROM agentos_core_events ORDER BY session_id, sequence";

#[tokio::test]
async fn a_version_12_event_log_migrates_to_13_and_keeps_its_rows() {
    for backend in all_backends().await {
        let db = backend.db.clone();
        let core = ladders::core::MIGRATIONS;
        let at_12 = migrate(db.as_ref(), Owner::Core, &core[..12])
            .await
            .expect("to 12");
        assert_eq!(at_12.to, 12, "{}", backend.name);
        db.transaction(vec![
            event(
                "a",
                1,
                "session_update",
                None,
                r#"{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"é \u00e9"}}"#,
                None,
                None,
                ("user", Some("z6Mkacct"), Some("z6Mksigner")),
            ),
            event(
                "a",
                2,
                "permission_request",
                Some("req-1"),
                r#"{"toolCall":{"toolCallId":"t"},"options":[]}"#,
                None,
                None,
                ("agent", None, None),
            ),
            event(
                "a",
                3,
                "permission_response",
                Some("req-1"),
                r#"{"outcome":{"outcome":"cancelled"}}"#,
                Some("not_pending"),
                Some("prompt_cancelled"),
                ("system", None, None),
            ),
            event(
                "a",
                4,
                "permission_response",
                Some("req-2"),
                r#"{"outcome":{"outcome":"selected","optionId":"allow"}}"#,
                Some("accepted"),
                None,
                ("user", Some("z6Mkacct"), None),
            ),
            event(
                "b",
                1,
                "session_update",
                None,
                r#"{"sessionUpdate":"plan","entries":[]}"#,
                None,
                None,
                ("agent", None, None),
            ),
        ])
        .await
        .expect("events at 12");
        let before = db.query(ALL_ROWS, vec![]).await.expect("rows at 12");
        assert_eq!(before.rows.len(), 5, "{}", backend.name);

        let outcome = migrate(db.as_ref(), Owner::Core, &core[..13])
            .await
            .expect("to 13");
        assert_eq!((outcome.from, outcome.to), (12, 13), "{}", backend.name);
        let after = db.query(ALL_ROWS, vec![]).await.expect("rows at 13");
        assert_eq!(after.columns, before.columns, "{}", backend.name);
        assert_eq!(after.rows, before.rows, "{}", backend.name);

        let sql = db
            .query(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'agentos_core_events'",
                vec![],
            )
            .await
            .expect("schema");
        let Some(SqlValue::Text(sql)) = sql.scalar() else {
            panic!("{}: no event log", backend.name);
        };
        assert!(!sql.contains("json_valid"), "{sql}");
        assert!(sql.trim_end().ends_with("STRICT"), "{sql}");
        let left = db
            .query(
                "SELECT count(*) FROM sqlite_master WHERE name LIKE 'agentos_core_events_%'",
                vec![],
            )
            .await
            .expect("tables");
        assert_eq!(left.scalar_i64(), Some(0), "{}", backend.name);

        // The other rules hold: a kind outside the list, an update with a
        // correlation id, a request without one, a system actor with an
        // account, a repeated sequence, a wrong byte count.
        type Rule = (
            &'static str,
            i64,
            &'static str,
            Option<&'static str>,
            (&'static str, Option<&'static str>),
        );
        let rules: [Rule; 5] = [
            ("c", 1, "note", None, ("agent", None)),
            ("c", 1, "session_update", Some("x"), ("agent", None)),
            ("c", 1, "permission_request", None, ("agent", None)),
            ("c", 1, "session_update", None, ("system", Some("z6Mkacct"))),
            ("a", 3, "session_update", None, ("agent", None)),
        ];
        let mut refused: Vec<Statement> = rules
            .into_iter()
            .map(|(session, sequence, kind, correlation, (actor, account))| {
                let actor = (actor, account, None);
                event(
                    session,
                    sequence,
                    kind,
                    correlation,
                    "{}",
                    None,
                    None,
                    actor,
                )
            })
            .collect();
        refused.push(Statement::new(
            "INSERT INTO agentos_core_events (session_id, sequence, occurred_at_ms, \
             acp_protocol_version, event_kind, payload_json, payload_bytes, actor_kind) \
             VALUES ('c', 1, 1, 1, 'session_update', '{}', 3, 'agent')",
            vec![],
        ));
        for (i, statement) in refused.into_iter().enumerate() {
            let sql = format!("{i}: {:?}", statement.params);
            let Err(err) = db.transaction(vec![statement]).await else {
                panic!("{}: accepted {sql}", backend.name);
            };
            assert!(err.is_constraint(), "{}: {sql}: {err:?}", backend.name);
        }
        let unchanged = db.query(ALL_ROWS, vec![]).await.expect("rows");
        assert_eq!(unchanged.rows, before.rows, "{}", backend.name);
        // What the table no longer checks: the store checks it first.
        db.transaction(vec![event(
            "c",
            1,
            "session_update",
            None,
            "not json",
            None,
            None,
            ("agent", None, None),
        )])
        .await
        .expect("the table takes text the store has checked");

        // The whole ladder runs on, and again changes nothing.
        migrate(db.as_ref(), Owner::Core, core)
            .await
            .expect("to the latest");
        let again = migrate(db.as_ref(), Owner::Core, core)
            .await
            .expect("again");
        assert_eq!(again.from, again.to, "{}", backend.name);
        backend.shutdown().await;
    }
}
