//! The session service's bounds on both database backends: history, prompt
//! and outcome retention, hard limits naming their settings, 80 % warnings,
//! turn output bounds, session tombstones, and the statement counts that
//! keep appends and pages O(1).

mod common;

use common::*;

#[tokio::test]
async fn history_is_pruned_to_its_budget_and_old_cursors_expire() {
    for backend in all_backends().await {
        let limits = AcpLimits {
            max_session_history_events: 10,
            ..AcpLimits::default()
        };
        let env = env_with(backend.db.clone(), limits).await;
        env.sessions.open(open("h", "echo")).await.expect("open");
        for i in 0..4 {
            prompt(&env, "h", "tools")
                .await
                .unwrap_or_else(|e| panic!("turn {i}: {e}"));
        }
        let info = env.sessions.get("h").await.unwrap();
        // Five events a turn: user chunk, tool_call, two updates, agent chunk.
        assert_eq!(info.latest_sequence, 20, "{}", backend.name);
        assert_eq!(info.retained_event_count, 10);
        let oldest = info.oldest_retained_sequence;
        assert_eq!(oldest, 11);
        let err = env
            .sessions
            .history("h", None, Some(0), None)
            .await
            .unwrap_err();
        assert_eq!(err.code().as_str(), "history_cursor_expired");
        assert!(matches!(
            err,
            SessionError::HistoryCursorExpired { earliest: 11 }
        ));
        let page = env
            .sessions
            .history("h", None, Some(oldest - 1), Some(100))
            .await
            .unwrap();
        let seqs: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
        assert_eq!(seqs, (11..=20).collect::<Vec<_>>());
        assert!(!page.has_more_before);
        // A single batch larger than the whole budget fails atomically.
        let blocks: Vec<Value> = (0..11)
            .map(|i| json!({"type":"text","text": format!("b{i}")}))
            .collect();
        let err = env.sessions.prompt("h", blocks, user()).await.unwrap_err();
        assert_eq!(err.code().as_str(), "acp_history_events_limit");
        assert_eq!(err.setting(), Some("limits.acp.maxSessionHistoryEvents"));
        let after = env.sessions.get("h").await.unwrap();
        assert_eq!(after.latest_sequence, 20, "nothing was committed");
        assert_eq!(after.state.status(), "idle");
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn the_byte_budget_holds_whatever_the_event_sizes() {
    for backend in all_backends().await {
        let max_bytes = 1_536 * 1024;
        let limits = AcpLimits {
            max_session_history_bytes: max_bytes,
            ..AcpLimits::default()
        };
        let env = env_with(backend.db.clone(), limits).await;
        env.sessions.open(open("b", "echo")).await.expect("open");
        let within_budget = |info: &SessionInfo, step: &str| {
            assert!(
                info.retained_event_bytes <= max_bytes,
                "{} {step}: {} retained bytes over a budget of {max_bytes}",
                backend.name,
                info.retained_event_bytes
            );
        };
        // Two turns of 400 user events of 1 KiB each.
        let mut small: Vec<Value> = (0..399)
            .map(|_| json!({"type": "text", "text": "k".repeat(1024)}))
            .collect();
        small.push(json!({"type": "text", "text": "echo ok"}));
        for turn in 0..2 {
            env.sessions
                .prompt("b", small.clone(), user())
                .await
                .unwrap_or_else(|e| panic!("small turn {turn}: {e}"));
            within_budget(&env.sessions.get("b").await.unwrap(), "small turn");
        }
        // Then events of 1 MiB: the first must push out more than 256 of the
        // small ones at once, the next ones the large ones before them.
        for turn in 0..3 {
            prompt(&env, "b", "oversize 1048576")
                .await
                .unwrap_or_else(|e| panic!("large turn {turn}: {e}"));
            let info = env.sessions.get("b").await.unwrap();
            within_budget(&info, "large turn");
            // The counters agree with the rows they count.
            let page = env
                .sessions
                .history(
                    "b",
                    None,
                    Some(info.oldest_retained_sequence - 1),
                    Some(10_000),
                )
                .await
                .expect("history");
            assert_eq!(page.events.len() as u64, info.retained_event_count);
        }
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn prompt_records_are_pruned_oldest_first_and_keys_forgotten() {
    for backend in all_backends().await {
        let limits = AcpLimits {
            max_prompts_per_session: 3,
            ..AcpLimits::default()
        };
        let env = env_with(backend.db.clone(), limits).await;
        env.sessions.open(open("p", "echo")).await.expect("open");
        let turns = turns_over(&env.sessions, &env.db);
        let mut ids = Vec::new();
        for i in 0..5 {
            let r = keyed(&turns, "p", &format!("echo {i}"), &format!("k{i}"))
                .await
                .expect("prompt");
            ids.push(r.prompt_id.clone());
        }
        let rows = backend
            .db
            .query(
                "SELECT count(*) FROM agentos_core_prompts WHERE session_id = 'p'",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(rows.scalar_i64(), Some(3), "{}", backend.name);
        assert_eq!(env.sessions.store().vm_counters().await.unwrap()[1], 3);
        // A retained key replays; a pruned one runs again as a new prompt.
        let kept = keyed(&turns, "p", "echo 4", "k4").await.unwrap();
        assert_eq!(kept.prompt_id, ids[4]);
        let forgotten = keyed(&turns, "p", "echo 0", "k0").await.unwrap();
        assert_ne!(forgotten.prompt_id, ids[0]);
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn permission_outcomes_are_bounded_and_late_answers_typed() {
    for backend in all_backends().await {
        let captured = CapturedLog::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let limits = AcpLimits {
            max_permission_outcomes_per_session: 2,
            ..AcpLimits::default()
        };
        let env = env_with(backend.db.clone(), limits).await;
        let mut params = open("perm", "echo");
        params.permission_policy = Some(PermissionPolicy::Ask);
        env.sessions.open(params).await.expect("open");
        let mut request_ids = Vec::new();
        for _ in 0..3 {
            let sessions = env.sessions.clone();
            let turn =
                tokio::spawn(
                    async move { sessions.prompt("perm", text("permission"), user()).await },
                );
            let deadline = std::time::Instant::now() + PATIENCE;
            let request_id = loop {
                let info = env.sessions.get("perm").await.unwrap();
                if let Some(id) = pending_request(&info) {
                    break id.to_owned();
                }
                assert!(std::time::Instant::now() < deadline, "never asked");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            };
            let bad = env
                .sessions
                .respond_permission("perm", &request_id, "nope")
                .await;
            assert_eq!(
                bad.unwrap_err().code().as_str(),
                "invalid_permission_option"
            );
            let ok = env
                .sessions
                .respond_permission("perm", &request_id, "allow")
                .await
                .unwrap();
            assert_eq!(ok, PermissionAnswer::Accepted);
            let result = turn.await.unwrap().expect("turn");
            assert_eq!(result.message.content[0]["text"], "chose allow");
            request_ids.push(request_id);
        }
        let counters = env.sessions.store().vm_counters().await.unwrap();
        assert_eq!(counters[3], 2, "{}: outcomes bounded", backend.name);
        let first = env
            .sessions
            .respond_permission("perm", &request_ids[0], "allow")
            .await
            .unwrap();
        assert_eq!(
            first,
            PermissionAnswer::NotPending(NotPendingReason::RequestNotFound)
        );
        let last = env
            .sessions
            .respond_permission("perm", &request_ids[2], "allow")
            .await
            .unwrap();
        assert_eq!(
            last,
            PermissionAnswer::NotPending(NotPendingReason::AlreadyResolved)
        );
        // The bounded outcome collection warned once on its way to 80 %.
        assert_eq!(
            captured.count(&["80%", "limits.acp.maxPermissionOutcomesPerSession"]),
            1,
            "{}",
            backend.name
        );
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn hard_limits_name_their_setting() {
    for backend in all_backends().await {
        let limits = AcpLimits {
            max_sessions_per_vm: 2,
            max_prompt_blocks: 2,
            max_prompt_bytes: 200,
            ..AcpLimits::default()
        };
        let env = env_with(backend.db.clone(), limits).await;
        env.sessions.open(open("a", "echo")).await.unwrap();
        env.sessions.open(open("b", "echo")).await.unwrap();
        let err = env.sessions.open(open("c", "echo")).await.unwrap_err();
        assert_eq!(
            err.code().as_str(),
            "acp_sessions_limit",
            "{}",
            backend.name
        );
        assert_eq!(err.setting(), Some("limits.acp.maxSessionsPerVm"));
        // Reopening an existing session is not a new admission.
        env.sessions.open(open("a", "echo")).await.unwrap();
        let three: Vec<Value> = (0..3).map(|_| json!({"type":"text","text":"x"})).collect();
        let err = env.sessions.prompt("a", three, user()).await.unwrap_err();
        assert_eq!(err.setting(), Some("limits.acp.maxPromptBlocks"));
        let err = env
            .sessions
            .prompt("a", text(&"y".repeat(300)), user())
            .await
            .unwrap_err();
        assert_eq!(err.code().as_str(), "acp_prompt_bytes_limit");
        let status = env.sessions.status().await.unwrap();
        assert_eq!(status.sessions.used, 2);
        assert!(status.sessions.near_limit());
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn appends_near_the_limit_cost_one_transaction_and_one_read() {
    for backend in all_backends().await {
        let counting = CountingDatabase::new(backend.db.clone());
        let db: SharedDatabase = counting.clone();
        let limits = AcpLimits {
            max_session_history_events: 20,
            ..AcpLimits::default()
        };
        let env = env_with(db, limits).await;
        env.sessions.open(open("c", "echo")).await.unwrap();
        for _ in 0..12 {
            prompt(&env, "c", "echo fill").await.unwrap();
        }
        let info = env.sessions.get("c").await.unwrap();
        assert_eq!(
            info.retained_event_count, 20,
            "{}: at the limit",
            backend.name
        );
        counting.take();
        prompt(&env, "c", "echo at the limit").await.unwrap();
        let counts = counting.take();
        // No session read (its route is live, so it exists); per append
        // (accept, terminal commit): one retention read and one
        // transaction.
        assert_eq!(counts.transactions, 2, "{}: {counts:?}", backend.name);
        assert_eq!(counts.queries, 2, "{}: {counts:?}", backend.name);
        for sql in &counts.sql {
            let upper = sql.to_ascii_uppercase();
            assert!(
                !upper.contains("COUNT(") && !upper.contains("SUM("),
                "{}: scan in the append path: {sql}",
                backend.name
            );
        }
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn a_ten_thousand_session_page_is_at_most_two_queries() {
    for backend in all_backends().await {
        let counting = CountingDatabase::new(backend.db.clone());
        let db: SharedDatabase = counting.clone();
        let env = env_with(db, AcpLimits::default()).await;
        let sessions = Arc::new(env.sessions.clone());
        let mut tasks = Vec::new();
        for chunk in 0..10 {
            let sessions = sessions.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..1000 {
                    sessions
                        .open(open(&format!("s{chunk}-{i:04}"), "echo"))
                        .await
                        .expect("open");
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        counting.take();
        let page = env.sessions.list(None, Some(10_000)).await.unwrap();
        let counts = counting.take();
        assert_eq!(page.sessions.len(), 10_000, "{}", backend.name);
        assert!(
            counts.queries + counts.transactions <= 2,
            "{}: {counts:?}",
            backend.name
        );
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn the_vm_prompt_bound_prunes_across_sessions_and_never_an_active_prompt() {
    for backend in all_backends().await {
        let limits = AcpLimits {
            max_prompts_per_vm: 2,
            ..AcpLimits::default()
        };
        let env = env_with(backend.db.clone(), limits).await;
        env.sessions.open(open("a", "echo")).await.unwrap();
        env.sessions.open(open("b", "echo")).await.unwrap();
        prompt(&env, "a", "echo 1").await.unwrap();
        prompt(&env, "a", "echo 2").await.unwrap();
        prompt(&env, "b", "echo 3").await.unwrap();
        let per_session = |sid: &'static str| {
            let db = backend.db.clone();
            async move {
                db.query(
                    "SELECT prompt_count FROM agentos_core_sessions WHERE session_id = ?1",
                    vec![sid.into()],
                )
                .await
                .unwrap()
                .scalar_i64()
                .unwrap()
            }
        };
        assert_eq!(
            per_session("a").await,
            1,
            "{}: a's oldest went",
            backend.name
        );
        assert_eq!(per_session("b").await, 1);
        assert_eq!(env.sessions.store().vm_counters().await.unwrap()[1], 2);

        // With one slot taken by a running prompt, nothing can be pruned.
        env.sessions.shutdown().await;
        let tight = env_with(
            backend.db.clone(),
            AcpLimits {
                max_prompts_per_vm: 1,
                ..AcpLimits::default()
            },
        )
        .await;
        let sessions = tight.sessions.clone();
        let running =
            tokio::spawn(
                async move { sessions.prompt("a", text("wait_for_cancel"), user()).await },
            );
        let deadline = std::time::Instant::now() + PATIENCE;
        while tight.sessions.get("a").await.unwrap().state.status() != "running" {
            assert!(std::time::Instant::now() < deadline, "never running");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(tight.sessions.store().vm_counters().await.unwrap()[1], 1);
        let err = prompt(&tight, "b", "echo 5").await.unwrap_err();
        assert_eq!(
            err.code().as_str(),
            "acp_prompts_per_vm_limit",
            "{}: {err}",
            backend.name
        );
        assert_eq!(err.setting(), Some("limits.acp.maxPromptsPerVm"));
        assert_eq!(
            tight.sessions.cancel("a").await.unwrap(),
            CancelStatus::Cancelled
        );
        running.await.unwrap().expect("cancelled turn answers");
        tight.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn crossing_eighty_percent_warns_once_and_shows_in_status() {
    for backend in all_backends().await {
        let captured = CapturedLog::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let warnings = |setting: &str| captured.count(&["80%", setting]);
        let limits = AcpLimits {
            max_session_history_events: 10,
            max_sessions_per_vm: 5,
            ..AcpLimits::default()
        };
        let env = env_with(backend.db.clone(), limits).await;
        for i in 0..3 {
            env.sessions
                .open(open(&format!("w{i}"), "echo"))
                .await
                .unwrap();
        }
        assert_eq!(
            warnings("limits.acp.maxSessionsPerVm"),
            0,
            "{}: 3 of 5",
            backend.name
        );
        env.sessions.open(open("w3", "echo")).await.unwrap();
        assert_eq!(
            warnings("limits.acp.maxSessionsPerVm"),
            1,
            "4 of 5 crosses 80%"
        );
        env.sessions.open(open("w4", "echo")).await.unwrap();
        assert_eq!(
            warnings("limits.acp.maxSessionsPerVm"),
            1,
            "no repeat while above"
        );
        let status = env.sessions.status().await.unwrap();
        assert!(status.sessions.near_limit());
        assert_eq!(status.sessions.setting, "limits.acp.maxSessionsPerVm");

        prompt(&env, "w0", "tools").await.unwrap();
        assert_eq!(
            warnings("limits.acp.maxSessionHistoryEvents"),
            0,
            "5 of 10 events"
        );
        prompt(&env, "w0", "tools").await.unwrap();
        assert_eq!(
            warnings("limits.acp.maxSessionHistoryEvents"),
            1,
            "10 of 10"
        );
        prompt(&env, "w0", "tools").await.unwrap();
        assert_eq!(
            warnings("limits.acp.maxSessionHistoryEvents"),
            1,
            "pruned back to the budget: still above, no repeat"
        );
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn turn_output_bounds_fail_the_turn_naming_their_setting() {
    // (the bound, the command that passes it, the code, the setting)
    let cases: [(AcpLimits, &str, &str, &str); 3] = [
        (
            AcpLimits {
                max_turn_output_bytes: 20_000,
                ..AcpLimits::default()
            },
            "stream 2000",
            "resource_limit",
            "limits.acp.maxTurnOutputBytes",
        ),
        (
            AcpLimits {
                max_completed_message_bytes: 10_000,
                ..AcpLimits::default()
            },
            "stream 3000",
            "resource_limit",
            "limits.acp.maxCompletedMessageBytes",
        ),
        (
            AcpLimits {
                max_read_line_bytes: 10_000,
                ..AcpLimits::default()
            },
            "oversize 20000",
            "acp_protocol_error",
            "limits.acp.maxReadLineBytes",
        ),
    ];
    for backend in all_backends().await {
        for (limits, command, code, setting) in cases.clone() {
            let captured = CapturedLog::default();
            let subscriber = tracing_subscriber::fmt()
                .with_writer(captured.clone())
                .with_ansi(false)
                .finish();
            let _guard = tracing::subscriber::set_default(subscriber);
            let env = env_with(backend.db.clone(), limits).await;
            let sid = format!("bound-{}", setting.rsplit('.').next().unwrap_or(setting));
            env.sessions.open(open(&sid, "echo")).await.unwrap();
            prompt(&env, &sid, "echo kept")
                .await
                .expect("within bounds");
            let err = prompt(&env, &sid, command).await.unwrap_err();
            assert_eq!(
                err.code().as_str(),
                code,
                "{} {setting}: {err}",
                backend.name
            );
            match &err {
                SessionError::PromptFailed { error } => {
                    assert_eq!(error["setting"], setting, "{} {error}", backend.name)
                }
                other => panic!("{}: {other:?}", backend.name),
            }
            if code == "resource_limit" {
                assert_eq!(
                    captured.count(&["80%", setting]),
                    1,
                    "{} {setting}: one warning on the way up",
                    backend.name
                );
            }
            // The failed turn kept no partial text, and the session carries on
            // with a new adapter.
            let after = prompt(&env, &sid, "echo after").await.expect("usable");
            assert_eq!(after.stop_reason, "end_turn");
            let texts: Vec<String> = history(&env, &sid)
                .await
                .iter()
                .filter(|e| e["type"] == "agent_message_chunk")
                .map(|e| e["content"]["text"].as_str().unwrap_or_default().to_owned())
                .collect();
            assert_eq!(texts, ["kept", "after"], "{} {setting}", backend.name);
            env.sessions.shutdown().await;
        }
        backend.shutdown().await;
    }
}

/// Deleted sessions leave tombstones, at most `limits.acp.maxSessionsPerVm`
/// of them, the oldest going first; reopening an id removes its tombstone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_sessions_are_remembered_within_a_bound() {
    for backend in all_backends().await {
        let limits = AcpLimits {
            max_sessions_per_vm: 2,
            ..AcpLimits::default()
        };
        let env = env_with(backend.db.clone(), limits).await;
        for id in ["a", "b", "c"] {
            env.sessions.open(open(id, "echo")).await.expect("open");
            env.sessions.delete(id).await.expect("delete");
        }
        let store = env.sessions.store();
        let remembered = [
            store.was_deleted("a").await.expect("a"),
            store.was_deleted("b").await.expect("b"),
            store.was_deleted("c").await.expect("c"),
        ];
        assert_eq!(remembered, [false, true, true], "{}", backend.name);
        env.sessions.open(open("c", "echo")).await.expect("reopen");
        assert!(
            !store.was_deleted("c").await.expect("c"),
            "{}",
            backend.name
        );
    }
}
