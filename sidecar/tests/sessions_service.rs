//! The session service against real adapters (the fake agent binary) on both
//! database backends: the restore ladder in every capability mode, crash
//! recovery at bootstrap, config options across a restore, and what storage
//! failures and lost commits leave behind. Retention and limits are in
//! `sessions_limits.rs`.

mod common;

use common::*;

/// The service keeps its routes on the runtime it was made on, whichever
/// runtime asks for them (the HTTP door has a runtime of its own): a route
/// started from a runtime that then ends still serves its session, with
/// the same adapter process.
#[test]
fn routes_live_on_the_services_runtime_not_the_callers() {
    let runtime = |threads: Option<usize>| {
        let mut builder = match threads {
            Some(n) => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(n);
                b
            }
            None => tokio::runtime::Builder::new_current_thread(),
        };
        builder.enable_all().build().expect("runtime")
    };
    let own = runtime(Some(1));
    let (backend, env) = own.block_on(async {
        let backend = agentos_storage::testing::sqlite_file().await;
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        (backend, env)
    });
    let caller = runtime(None);
    caller.block_on(async {
        env.sessions
            .open(open("elsewhere", "loader"))
            .await
            .expect("open");
        prompt(&env, "elsewhere", "echo first")
            .await
            .expect("first");
    });
    // Every task spawned on it ends with it.
    drop(caller);
    runtime(None).block_on(async {
        let second = prompt(&env, "elsewhere", "echo second")
            .await
            .expect("second");
        assert_eq!(second.stop_reason, "end_turn");
    });
    let log = prompt_log(&env);
    assert_eq!(log.len(), 2);
    assert_eq!(
        log[0]["pid"], log[1]["pid"],
        "the route and its adapter outlived the runtime that asked for them"
    );
    own.block_on(async {
        env.sessions.shutdown().await;
        backend.shutdown().await;
    });
}

#[tokio::test]
async fn resume_and_load_restore_natively_without_duplicating_history() {
    for backend in all_backends().await {
        for agent in ["resumer", "loader"] {
            let env = env_with(backend.db.clone(), AcpLimits::default()).await;
            let sid = format!("native-{agent}");
            env.sessions.open(open(&sid, agent)).await.expect("open");
            prompt(&env, &sid, "echo first").await.expect("first");
            env.sessions.unload(&sid).await.expect("unload");
            let second = prompt(&env, &sid, "echo second").await.expect("second");
            assert_eq!(second.stop_reason, "end_turn", "{}", backend.name);
            let events = history(&env, &sid).await;
            let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
            assert_eq!(
                types,
                [
                    "user_message_chunk",
                    "agent_message_chunk",
                    "user_message_chunk",
                    "agent_message_chunk"
                ],
                "{} {agent}: replay must not be imported",
                backend.name
            );
            let log = prompt_log(&env);
            assert_eq!(log.len(), 2);
            assert_eq!(
                log[0]["sessionId"], log[1]["sessionId"],
                "{} {agent}: the adapter session must be the restored one",
                backend.name
            );
            assert_ne!(log[0]["pid"], log[1]["pid"], "a new process was started");
            // The restored turn has no continuation block.
            assert_eq!(log[1]["prompt"].as_array().unwrap().len(), 1);
            env.sessions.shutdown().await;
        }
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn without_native_restore_a_continuation_is_prepended_once() {
    for backend in all_backends().await {
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        env.sessions.open(open("cont", "echo")).await.expect("open");
        prompt(&env, "cont", "echo remember the walrus")
            .await
            .expect("first");
        env.sessions.unload("cont").await.expect("unload");
        let inspected = prompt(&env, "cont", "inspect").await.expect("inspect");
        let blocks = inspected_blocks(&inspected);
        assert_eq!(blocks.len(), 2, "{}: preamble + prompt", backend.name);
        let preamble = blocks[0]["text"].as_str().unwrap();
        assert!(preamble.starts_with("[agentos continuation]"));
        assert!(preamble.contains("must not") || preamble.contains("Do not repeat"));
        assert!(preamble.contains("remember the walrus"));
        // Oldest first: the user chunk precedes the agent chunk.
        let user_at = preamble.find("user_message_chunk").unwrap();
        let agent_at = preamble.find("agent_message_chunk").unwrap();
        assert!(user_at < agent_at);
        assert_eq!(blocks[1]["text"], "inspect");
        let again = prompt(&env, "cont", "inspect").await.expect("again");
        assert_eq!(
            inspected_blocks(&again).len(),
            1,
            "the continuation is sent once"
        );
        let log = prompt_log(&env);
        assert_ne!(
            log[0]["sessionId"], log[1]["sessionId"],
            "session/new was used"
        );
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn unknown_session_falls_back_and_other_errors_fail_the_restore() {
    for backend in all_backends().await {
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        env.sessions
            .open(open("gone", "loader"))
            .await
            .expect("open");
        prompt(&env, "gone", "echo before").await.expect("first");
        env.sessions.unload("gone").await.expect("unload");
        // The agent forgets every session: load answers -32002.
        std::fs::remove_dir_all(env.state.path().join("agent-state")).expect("forget");
        let inspected = prompt(&env, "gone", "inspect").await.expect("fallback");
        let blocks = inspected_blocks(&inspected);
        assert_eq!(blocks.len(), 2, "{}", backend.name);
        assert!(blocks[0]["text"].as_str().unwrap().contains("echo before"));

        env.sessions
            .open(open("bad", "broken"))
            .await
            .expect("open");
        prompt(&env, "bad", "echo one")
            .await
            .expect("first turn needs no restore");
        env.sessions.unload("bad").await.expect("unload");
        let err = prompt(&env, "bad", "echo two").await.unwrap_err();
        assert_eq!(
            err.code().as_str(),
            "session_restore_failed",
            "{}: {err}",
            backend.name
        );
        // History is intact and the public id never changed.
        assert_eq!(history(&env, "bad").await.len(), 2);
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn both_unknown_session_forms_fall_through_to_a_continuation() {
    for backend in all_backends().await {
        // -32002 from `session/resume`, and -32603 with
        // `data.details == "NotFoundError"` from `session/load`.
        for agent in ["forgetful-32002", "forgetful-32603"] {
            let env = env_with(backend.db.clone(), AcpLimits::default()).await;
            let sid = format!("unknown-{agent}");
            env.sessions.open(open(&sid, agent)).await.expect("open");
            prompt(&env, &sid, "echo before").await.expect("first");
            env.sessions.unload(&sid).await.expect("unload");
            let inspected = prompt(&env, &sid, "inspect")
                .await
                .unwrap_or_else(|e| panic!("{} {agent}: fallback: {e}", backend.name));
            let blocks = inspected_blocks(&inspected);
            assert_eq!(blocks.len(), 2, "{} {agent}: {blocks:?}", backend.name);
            assert!(
                blocks[0]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("echo before")),
                "{} {agent}: the continuation holds the history",
                backend.name
            );
            // And the session stays usable.
            let third = prompt(&env, &sid, "echo third").await.expect("third");
            assert_eq!(third.stop_reason, "end_turn");
            env.sessions.shutdown().await;
        }
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn a_replay_on_resume_is_discarded() {
    for backend in all_backends().await {
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        let sid = "replayed-resume";
        env.sessions
            .open(open(sid, "replaying-resumer"))
            .await
            .expect("open");
        prompt(&env, sid, "tools").await.expect("first");
        let before = history(&env, sid).await;
        env.sessions.unload(sid).await.expect("unload");
        // The restart resumes natively (no continuation) and the agent
        // replays every update of the first turn while resuming.
        let inspected = prompt(&env, sid, "inspect").await.expect("resumed");
        assert_eq!(inspected_blocks(&inspected).len(), 1, "{}", backend.name);
        let after = history(&env, sid).await;
        assert_eq!(
            &after[..before.len()],
            &before[..],
            "{}: the first turn's history is unchanged",
            backend.name
        );
        // Only the second turn was added: its user chunk and its reply.
        assert_eq!(after.len(), before.len() + 2, "{}: {after:?}", backend.name);
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

/// Writes the rows a crash mid-turn leaves behind: a running session, an
/// accepted prompt with a key, a pending permission, and drifted counters.
/// The run row of turn `p1` keyed `key` (the turn's idempotency record),
/// as `status` left it: `running` under a lease nobody renews, or `failed`
/// as this process settles a turn whose route ended without its terminal
/// commit.
fn turn_run(sid: &str, key: &str, status: &str) -> Statement {
    let hash = hex::encode(agentos_sidecar::sessions::input_hash(&text("echo lost")));
    let input = json!({"content": text("echo lost"), "inputHash": hash, "inputAt": 1});
    let (lease_owner, lease_until, finished) = match status {
        "running" => (SqlValue::from("gone"), SqlValue::Integer(2), SqlValue::Null),
        _ => (SqlValue::Null, SqlValue::Null, SqlValue::Integer(2)),
    };
    let error = json!({"code": "prompt_delivery_uncertain", "message": "lost"});
    Statement::new(
        "INSERT INTO agentos_core_runs (run_id, root_run_id, kind, session_id, origin, queue, \
         status, attempt, max_attempts, lease_owner, lease_expires_at_ms, idempotency_key, \
         input_json, error_json, created_at_ms, started_at_ms, finished_at_ms, updated_at_ms) \
         VALUES ('p1', 'p1', 'agent', ?1, 'user', 'interactive', ?2, 1, 1, ?3, ?4, ?5, ?6, \
         CASE WHEN ?2 = 'failed' THEN ?7 END, 1, 1, ?8, 2)",
        vec![
            sid.into(),
            status.into(),
            lease_owner,
            lease_until,
            key.into(),
            input.to_string().into(),
            error.to_string().into(),
            finished,
        ],
    )
}

async fn simulate_crash(db: &SharedDatabase, sid: &str) {
    db.transaction(vec![
        Statement::new(
            "UPDATE agentos_core_sessions SET state = 'waiting', state_prompt_id = 'p1', \
             state_started_at_ms = 1, retained_event_count = 999, prompt_count = prompt_count + 1, \
             pending_permission_count = 1 WHERE session_id = ?1",
            vec![sid.into()],
        ),
        Statement::new(
            "INSERT INTO agentos_core_prompts (session_id, prompt_id, input_hash, \
             state, created_at_ms, updated_at_ms) VALUES (?1, 'p1', ?2, 'accepted', 1, 1)",
            vec![
                sid.into(),
                SqlValue::Blob(agentos_sidecar::sessions::input_hash(&text("echo lost"))),
            ],
        ),
        turn_run(sid, "key-1", "running"),
        Statement::new(
            "INSERT INTO agentos_core_permission_records (session_id, request_id, prompt_id, state, \
             request_json, request_sequence, created_at_ms, updated_at_ms) \
             VALUES (?1, 'r1', 'p1', 'pending', '{}', 1, 1, 1)",
            vec![sid.into()],
        ),
        Statement::new(
            "UPDATE agentos_core_vm_counters SET prompt_count = prompt_count + 1, \
             pending_permission_count = pending_permission_count + 1",
            vec![],
        ),
    ])
    .await
    .expect("crash rows");
}

#[tokio::test]
async fn bootstrap_recovers_interrupted_turns_without_resending() {
    for backend in all_backends().await {
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        env.sessions
            .open(open("crashed", "echo"))
            .await
            .expect("open");
        prompt(&env, "crashed", "echo kept").await.expect("turn");
        env.sessions.shutdown().await;
        simulate_crash(&backend.db, "crashed").await;

        let state = env.state;
        let sessions = Sessions::new(
            SessionStore::new(backend.db.clone()),
            agents(state.path()),
            AcpLimits::default(),
            None,
        );
        let recovered = sessions.bootstrap().await.expect("bootstrap");
        let turns = turns_over(&sessions, &backend.db);
        assert_eq!(turns.runs().bootstrap().await.expect("runs bootstrap"), 1);
        assert_eq!(recovered.prompts_failed, 1, "{}", backend.name);
        assert_eq!(recovered.permissions_terminated, 1);
        assert_eq!(recovered.sessions_failed, 1);
        assert!(recovered.counters_repaired >= 1);

        let info = sessions.get("crashed").await.expect("get");
        assert_eq!(info.state.status(), "failed");
        assert_eq!(info.retained_event_count, 2, "counters repaired from rows");
        // The same key returns the stored uncertain-delivery error.
        let err = keyed(&turns, "crashed", "echo lost", "key-1")
            .await
            .unwrap_err();
        assert_eq!(err.code().as_str(), "prompt_delivery_uncertain");
        match &err {
            SessionError::PromptFailed { error } => assert_eq!(error["retryable"], true),
            other => panic!("unexpected {other:?}"),
        }
        let late = sessions
            .respond_permission("crashed", "r1", "allow")
            .await
            .expect("respond");
        assert_eq!(
            late,
            PermissionAnswer::NotPending(NotPendingReason::VmShutdown)
        );
        // Failed but usable; nothing was resent.
        let ok = sessions
            .prompt("crashed", text("echo again"), user())
            .await
            .expect("usable");
        assert_eq!(ok.stop_reason, "end_turn");
        let log: Vec<String> = std::fs::read_to_string(state.path().join("prompts.log"))
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(log.len(), 2, "only the two real prompts reached an adapter");
        assert!(!log.iter().any(|l| l.contains("echo lost")));
        let counters = sessions.store().vm_counters().await.unwrap();
        assert_eq!(counters, [1, 3, 0, 1]);
        sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn config_choices_survive_a_restore() {
    for backend in all_backends().await {
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        env.sessions.open(open("cfg", "echo")).await.unwrap();
        // Read-only calls answer from storage without an adapter.
        let before = env.sessions.get_config("cfg").await.unwrap();
        assert_eq!(before.options, Vec::<Value>::new());
        assert_eq!(env.sessions.live_routes(), 0);
        let set = env
            .sessions
            .set_config_option("cfg", "mode", json!("careful"))
            .await
            .expect("set");
        assert_eq!(
            set.options[0]["currentValue"], "careful",
            "{}",
            backend.name
        );
        let err = env
            .sessions
            .set_config_option("cfg", "mode", json!({"not": "scalar"}))
            .await
            .unwrap_err();
        assert_eq!(err.code().as_str(), "invalid_argument");
        env.sessions.unload("cfg").await.unwrap();
        // The fresh adapter starts at "fast"; the stored choice is replayed.
        prompt(&env, "cfg", "echo hi").await.unwrap();
        let after = env.sessions.get_config("cfg").await.unwrap();
        assert_eq!(after.options[0]["currentValue"], "careful");
        let caps = env.sessions.capabilities("cfg").await.unwrap();
        assert!(caps.as_ref().is_some_and(Value::is_object));
        let info = env.sessions.agent_info("cfg").await.unwrap();
        assert_eq!(
            info.as_ref().expect("agent info")["name"],
            "agentos-fake-agent"
        );
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

/// A group commit that fails mid-stream (with another possibly queued behind
/// it) fails the turn; nothing after the last good commit is kept or
/// published, the counters stay true, and the next turn carries on.
#[tokio::test]
async fn a_commit_failing_mid_flood_fails_the_turn_and_leaves_history_whole() {
    for backend in all_backends().await {
        let faulty = FaultyDatabase::new(backend.db.clone());
        let db: SharedDatabase = faulty.clone();
        let env = env_with(db, AcpLimits::default()).await;
        env.sessions.open(open("f", "echo")).await.unwrap();
        prompt(&env, "f", "echo warm").await.unwrap();
        // The accept commit and one batch pass; the next batch fails.
        faulty.fail_nth_transaction(3);
        let err = prompt(&env, "f", "flood 20000").await.unwrap_err();
        assert!(faulty.fired(), "{}", backend.name);
        assert_eq!(
            err.code().as_str(),
            "history_commit_failed",
            "{}: {err}",
            backend.name
        );
        let events = history(&env, "f").await;
        let sequences: Vec<u64> = events
            .iter()
            .map(|e| e["sequence"].as_u64().unwrap())
            .collect();
        let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
        assert_eq!(sequences, expected, "{}: no gap", backend.name);
        assert!(
            sequences.len() < 20_000,
            "{}: the failed batch is not there",
            backend.name
        );
        let info = env.sessions.get("f").await.unwrap();
        assert_eq!(
            info.latest_sequence,
            sequences.len() as u64,
            "{}",
            backend.name
        );
        assert_eq!(
            info.retained_event_count,
            sequences.len() as u64,
            "{}",
            backend.name
        );
        let ok = prompt(&env, "f", "echo after").await.unwrap();
        assert_eq!(ok.stop_reason, "end_turn", "{}", backend.name);
        let after = history(&env, "f").await;
        let sequences: Vec<u64> = after
            .iter()
            .map(|e| e["sequence"].as_u64().unwrap())
            .collect();
        let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
        assert_eq!(
            sequences, expected,
            "{}: the next turn follows on",
            backend.name
        );
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

/// A terminal commit that fails ends the route; the session is not left
/// busy: the next prompt settles the unfinished turn as a restart would
/// (`prompt_delivery_uncertain`, retryable) and runs.
/// Where the connection drops: the accept commit of a keyed prompt, the
/// first append of its turn, or the answer to its permission request.
#[derive(Clone, Copy, Debug)]
enum LostAt {
    Accept,
    Append,
    PermissionAnswer,
}

#[tokio::test]
async fn a_commit_lost_with_its_connection_does_not_wedge_the_session() {
    for at in [LostAt::Accept, LostAt::Append, LostAt::PermissionAnswer] {
        let countdown = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let options = ArsServerOptions {
            drop_connection_at_commit: Some(countdown.clone()),
            ..ArsServerOptions::default()
        };
        let backend = actor_uds_with(options, SqliteLimits::default()).await;
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        let mut params = open("l", "echo");
        params.permission_policy = Some(PermissionPolicy::Ask);
        env.sessions.open(params).await.unwrap();
        prompt(&env, "l", "echo warm").await.unwrap();
        let arm = |n| countdown.store(n, std::sync::atomic::Ordering::SeqCst);
        let turns = turns_over(&env.sessions, &env.db);
        let keyed = |t: &'static str| keyed(&turns, "l", t, "lost-key");
        let (command, err) = match at {
            // The next commit is the accept; the one after it, with the
            // tool updates queued before the answer, an append.
            LostAt::Accept | LostAt::Append => {
                arm(if matches!(at, LostAt::Accept) { 1 } else { 2 });
                ("tools", keyed("tools").await.unwrap_err())
            }
            LostAt::PermissionAnswer => {
                let turn = keyed("permission");
                tokio::pin!(turn);
                let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
                let request = loop {
                    tokio::select! {
                        done = &mut turn => panic!("the turn ended early: {done:?}"),
                        _ = tokio::time::sleep(std::time::Duration::from_millis(20)) => {}
                    }
                    let info = env.sessions.get("l").await.unwrap();
                    if let Some(request) = pending_request(&info) {
                        break request.to_owned();
                    }
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "no permission request"
                    );
                };
                arm(1);
                let _ = env
                    .sessions
                    .respond_permission("l", &request, "allow")
                    .await;
                ("permission", turn.await.unwrap_err())
            }
        };
        assert_eq!(
            countdown.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "{at:?}: the drop fired"
        );
        assert_eq!(
            err.code().as_str(),
            "commit_outcome_unknown",
            "{at:?}: {err}"
        );
        // Retrying the key settles the turn as a restart would: its
        // delivery is uncertain and it is not resent.
        let replay = keyed(command).await.unwrap_err();
        assert_eq!(
            replay.code().as_str(),
            "prompt_delivery_uncertain",
            "{at:?}: {replay}"
        );
        let info = env.sessions.get("l").await.unwrap();
        assert!(pending_request(&info).is_none(), "{at:?}: {info:?}");
        // And the session is usable: no session_busy.
        let ok = prompt(&env, "l", "echo after")
            .await
            .unwrap_or_else(|e| panic!("{at:?}: {e}"));
        assert_eq!(ok.stop_reason, "end_turn");
        let info = env.sessions.get("l").await.unwrap();
        assert_eq!(info.state.status(), "idle", "{at:?}");
        let page = env
            .sessions
            .history("l", None, Some(0), Some(10_000))
            .await
            .unwrap();
        assert_eq!(
            page.events.len() as u64,
            info.retained_event_count,
            "{at:?}"
        );
        let sent = prompt_log(&env)
            .iter()
            .filter(|l| {
                // The continuation of a later prompt quotes it; the prompt
                // itself is a block of its own.
                l["prompt"]
                    .as_array()
                    .is_some_and(|blocks| blocks.iter().any(|b| b["text"] == command))
            })
            .count();
        assert!(sent <= 1, "{at:?}: the lost prompt was resent");
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn a_failed_terminal_commit_does_not_leave_the_session_busy() {
    for backend in all_backends().await {
        let faulty = FaultyDatabase::new(backend.db.clone());
        let db: SharedDatabase = faulty.clone();
        let env = env_with(db, AcpLimits::default()).await;
        env.sessions.open(open("t", "echo")).await.unwrap();
        prompt(&env, "t", "echo warm").await.unwrap();
        // The accept commit passes; the terminal commit fails.
        faulty.fail_nth_transaction(2);
        let turns = turns_over(&env.sessions, &env.db);
        let err = keyed(&turns, "t", "echo lost", "k1").await.unwrap_err();
        assert!(faulty.fired(), "{}", backend.name);
        assert_eq!(
            err.code().as_str(),
            "session_storage_error",
            "{}: {err}",
            backend.name
        );
        let ok = prompt(&env, "t", "echo next").await.unwrap();
        assert_eq!(ok.stop_reason, "end_turn", "{}", backend.name);
        let replay = keyed(&turns, "t", "echo lost", "k1").await.unwrap_err();
        assert_eq!(
            replay.code().as_str(),
            "prompt_delivery_uncertain",
            "{}",
            backend.name
        );
        match replay {
            SessionError::PromptFailed { error } => {
                assert_eq!(error["retryable"], true, "{}", backend.name)
            }
            other => panic!("{}: {other:?}", backend.name),
        }
        let info = env.sessions.get("t").await.unwrap();
        assert_eq!(info.state.status(), "idle", "{}", backend.name);
        let status = env.sessions.status().await.unwrap();
        assert_eq!(status.prompts.used, 3, "{}: {status:?}", backend.name);
        let counters = env.sessions.store().vm_counters().await.unwrap();
        assert_eq!(counters, [1, 3, 0, 0], "{}", backend.name);
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

/// What a route that died mid-turn leaves while the process lives on: the
/// session waiting on a permission, its prompt accepted, counters true. The
/// next start settles exactly that session.
#[tokio::test]
async fn a_session_left_mid_turn_is_settled_when_next_started() {
    for backend in all_backends().await {
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        env.sessions.open(open("mid", "echo")).await.unwrap();
        env.sessions.open(open("other", "echo")).await.unwrap();
        backend
            .db
            .transaction(vec![
                Statement::new(
                    "UPDATE agentos_core_sessions SET state = 'waiting', state_prompt_id = 'p1', \
                     state_started_at_ms = 1, prompt_count = 1, pending_permission_count = 1 \
                     WHERE session_id = 'mid'",
                    vec![],
                ),
                Statement::new(
                    "INSERT INTO agentos_core_prompts (session_id, prompt_id, \
                     input_hash, state, created_at_ms, updated_at_ms) \
                     VALUES ('mid', 'p1', ?1, 'accepted', 1, 1)",
                    vec![SqlValue::Blob(agentos_sidecar::sessions::input_hash(
                        &text("echo lost"),
                    ))],
                ),
                turn_run("mid", "key-1", "failed"),
                Statement::new(
                    "INSERT INTO agentos_core_permission_records (session_id, request_id, \
                     prompt_id, state, request_json, request_sequence, created_at_ms, \
                     updated_at_ms) VALUES ('mid', 'r1', 'p1', 'pending', '{}', 1, 1, 1)",
                    vec![],
                ),
                Statement::new(
                    "UPDATE agentos_core_vm_counters SET prompt_count = prompt_count + 1, \
                     pending_permission_count = pending_permission_count + 1",
                    vec![],
                ),
            ])
            .await
            .expect("rows of an unfinished turn");
        // Another session's start leaves it alone.
        prompt(&env, "other", "echo unrelated").await.unwrap();
        assert_eq!(
            env.sessions.get("mid").await.unwrap().state.status(),
            "waiting"
        );

        let ok = prompt(&env, "mid", "echo again").await.unwrap();
        assert_eq!(ok.stop_reason, "end_turn", "{}", backend.name);
        let turns = turns_over(&env.sessions, &env.db);
        let err = keyed(&turns, "mid", "echo lost", "key-1")
            .await
            .unwrap_err();
        assert_eq!(
            err.code().as_str(),
            "prompt_delivery_uncertain",
            "{}",
            backend.name
        );
        let late = env
            .sessions
            .respond_permission("mid", "r1", "allow")
            .await
            .expect("respond");
        assert_eq!(
            late,
            PermissionAnswer::NotPending(NotPendingReason::AdapterExited),
            "{}",
            backend.name
        );
        let info = env.sessions.get("mid").await.unwrap();
        assert_eq!(info.state.status(), "idle", "{}", backend.name);
        // Sessions, prompts, pending permissions, outcomes.
        let counters = env.sessions.store().vm_counters().await.unwrap();
        assert_eq!(counters, [2, 3, 0, 1], "{}", backend.name);
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn titles_are_bounded_when_opened_and_when_renamed() {
    for backend in all_backends().await {
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        let mut params = open("t", "echo");
        params.title = Some("x".repeat(1025));
        let e = env.sessions.open(params).await.expect_err("too long");
        assert_eq!(e.code(), agentos_protocol::ErrorCode::InvalidArgument);
        let mut params = open("t", "echo");
        params.title = Some("x".repeat(1024));
        env.sessions.open(params).await.expect("at the bound");
        let e = env
            .sessions
            .set_title("t", &"y".repeat(1025))
            .await
            .expect_err("too long");
        assert_eq!(e.code(), agentos_protocol::ErrorCode::InvalidArgument);
        let renamed = env.sessions.set_title("t", "short").await.expect("rename");
        assert_eq!(renamed.title.as_deref(), Some("short"));
        backend.shutdown().await;
    }
}
