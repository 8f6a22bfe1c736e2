//! The session service against real adapters (the fake agent binary) on both
//! database backends: the restore ladder in every capability mode, crash
//! recovery at bootstrap, history/prompt/outcome retention, hard limits, and
//! the statement counts that keep appends and pages O(1).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentos_protocol::host::{Actor, ListSessionsParams, OpenSessionParams, PermissionPolicy};
use agentos_schema::{migrate_all, SharedDatabase, SqlValue, Statement};
use agentos_sidecar::config::{AcpLimits, AgentSpec, SqliteLimits};
use agentos_sidecar::db::ars_server::ArsServerOptions;
use agentos_sidecar::db::testing::{
    actor_uds_with, all_backends, CapturedLog, CountingDatabase, FaultyDatabase,
};
use agentos_sidecar::sessions::{
    CancelStatus, NotPendingReason, PermissionAnswer, PromptOutcome, SessionError, SessionInfo,
    SessionState, SessionStore, Sessions,
};
use serde_json::{json, Value};

/// Generous bound for anything that should happen; only to avoid hangs.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

fn fake_agent() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join("agentos-fake-agent");
    assert!(
        path.exists(),
        "{} is missing: build the workspace binaries first (scripts/test does)",
        path.display()
    );
    path
}

struct Env {
    sessions: Sessions,
    state: tempfile::TempDir,
}

fn agents(state: &Path) -> BTreeMap<String, AgentSpec> {
    let bin = fake_agent().display().to_string();
    let log = state.join("prompts.log").display().to_string();
    let spec = |args: &[&str]| AgentSpec {
        command: bin.clone(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::from([("AGENTOS_FAKE_AGENT_LOG".to_owned(), log.clone())]),
        sandbox: Default::default(),
    };
    let dir = state.join("agent-state").display().to_string();
    BTreeMap::from([
        ("echo".to_owned(), spec(&[])),
        (
            "resumer".to_owned(),
            spec(&["--resume", "--state-dir", &dir]),
        ),
        (
            "loader".to_owned(),
            spec(&["--load-session", "--state-dir", &dir]),
        ),
        (
            "broken".to_owned(),
            spec(&["--load-session", "--restore-error", "--state-dir", &dir]),
        ),
        (
            "forgetful-32002".to_owned(),
            spec(&[
                "--resume",
                "--unknown-session-error",
                "resource-not-found",
                "--state-dir",
                &dir,
            ]),
        ),
        (
            "forgetful-32603".to_owned(),
            spec(&[
                "--load-session",
                "--unknown-session-error",
                "not-found-error",
                "--state-dir",
                &dir,
            ]),
        ),
        (
            "replaying-resumer".to_owned(),
            spec(&["--resume", "--resume-replays", "--state-dir", &dir]),
        ),
    ])
}

async fn env_with(db: SharedDatabase, limits: AcpLimits) -> Env {
    migrate_all(&*db).await.expect("migrate");
    let state = tempfile::tempdir().expect("state dir");
    let sessions = Sessions::new(SessionStore::new(db), agents(state.path()), limits, None);
    sessions.bootstrap().await.expect("bootstrap");
    Env { sessions, state }
}

fn open(id: &str, agent: &str) -> OpenSessionParams {
    OpenSessionParams {
        session_id: Some(id.into()),
        agent: agent.into(),
        ..Default::default()
    }
}

fn user() -> Actor {
    Actor::User {
        account: None,
        signer: None,
    }
}

fn text(t: &str) -> Vec<Value> {
    vec![json!({"type": "text", "text": t})]
}

async fn prompt(env: &Env, sid: &str, t: &str) -> Result<PromptOutcome, SessionError> {
    env.sessions.prompt(sid, text(t), None, user()).await
}

async fn history(env: &Env, sid: &str) -> Vec<Value> {
    let page = env
        .sessions
        .history(sid, None, Some(0), Some(10_000))
        .await
        .expect("history");
    page.events.iter().map(|e| e.to_public()).collect()
}

/// The first pending permission request of a waiting session.
fn pending_request(info: &SessionInfo) -> Option<&str> {
    match &info.state {
        SessionState::Waiting {
            requests: Some(requests),
            ..
        } => requests.first().map(String::as_str),
        _ => None,
    }
}

fn prompt_log(env: &Env) -> Vec<Value> {
    std::fs::read_to_string(env.state.path().join("prompts.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("log line"))
        .collect()
}

fn inspected_blocks(result: &PromptOutcome) -> Vec<Value> {
    let text = result.message.content[0]["text"]
        .as_str()
        .expect("inspect text");
    serde_json::from_str(text).expect("inspect json")
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
async fn simulate_crash(db: &SharedDatabase, sid: &str) {
    db.transaction(vec![
        Statement::new(
            "UPDATE agentos_core_sessions SET state = 'waiting', state_prompt_id = 'p1', \
             state_started_at_ms = 1, retained_event_count = 999, prompt_count = prompt_count + 1, \
             pending_permission_count = 1 WHERE session_id = ?1",
            vec![sid.into()],
        ),
        Statement::new(
            "INSERT INTO agentos_core_prompts (session_id, prompt_id, idempotency_key, input_hash, \
             state, created_at_ms, updated_at_ms) VALUES (?1, 'p1', 'key-1', ?2, 'accepted', 1, 1)",
            vec![
                sid.into(),
                SqlValue::Blob(agentos_sidecar::sessions::input_hash(&text("echo lost"))),
            ],
        ),
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
        assert_eq!(recovered.prompts_failed, 1, "{}", backend.name);
        assert_eq!(recovered.permissions_terminated, 1);
        assert_eq!(recovered.sessions_failed, 1);
        assert!(recovered.counters_repaired >= 1);

        let info = sessions.get("crashed").await.expect("get");
        assert_eq!(info.state.status(), "failed");
        assert_eq!(info.retained_event_count, 2, "counters repaired from rows");
        // The same key returns the stored uncertain-delivery error.
        let err = sessions
            .prompt("crashed", text("echo lost"), Some("key-1".into()), user())
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
            .prompt("crashed", text("echo again"), None, user())
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
        let err = env
            .sessions
            .prompt("h", blocks, None, user())
            .await
            .unwrap_err();
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
                .prompt("b", small.clone(), None, user())
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
        let mut ids = Vec::new();
        for i in 0..5 {
            let r = env
                .sessions
                .prompt(
                    "p",
                    text(&format!("echo {i}")),
                    Some(format!("k{i}")),
                    user(),
                )
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
        let kept = env
            .sessions
            .prompt("p", text("echo 4"), Some("k4".into()), user())
            .await
            .unwrap();
        assert_eq!(kept.prompt_id, ids[4]);
        let forgotten = env
            .sessions
            .prompt("p", text("echo 0"), Some("k0".into()), user())
            .await
            .unwrap();
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
            let turn = tokio::spawn(async move {
                sessions
                    .prompt("perm", text("permission"), None, user())
                    .await
            });
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
        let err = env
            .sessions
            .prompt("a", three, None, user())
            .await
            .unwrap_err();
        assert_eq!(err.setting(), Some("limits.acp.maxPromptBlocks"));
        let err = env
            .sessions
            .prompt("a", text(&"y".repeat(300)), None, user())
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
        // One session read for validation; per append (accept, terminal
        // commit): one retention read and one transaction.
        assert_eq!(counts.transactions, 2, "{}: {counts:?}", backend.name);
        assert_eq!(counts.queries, 3, "{}: {counts:?}", backend.name);
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
        let page = env
            .sessions
            .list(ListSessionsParams {
                cursor: None,
                limit: Some(10_000),
            })
            .await
            .unwrap();
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
        let running = tokio::spawn(async move {
            sessions
                .prompt("a", text("wait_for_cancel"), None, user())
                .await
        });
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
        let keyed = |t: &'static str| {
            env.sessions
                .prompt("l", text(t), Some("lost-key".into()), user())
        };
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
        let replay = env
            .sessions
            .prompt("l", text(command), Some("lost-key".into()), user())
            .await
            .unwrap_err();
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
        let err = env
            .sessions
            .prompt("t", text("echo lost"), Some("k1".into()), user())
            .await
            .unwrap_err();
        assert!(faulty.fired(), "{}", backend.name);
        assert_eq!(
            err.code().as_str(),
            "session_storage_error",
            "{}: {err}",
            backend.name
        );
        let ok = prompt(&env, "t", "echo next").await.unwrap();
        assert_eq!(ok.stop_reason, "end_turn", "{}", backend.name);
        let replay = env
            .sessions
            .prompt("t", text("echo lost"), Some("k1".into()), user())
            .await
            .unwrap_err();
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
                    "INSERT INTO agentos_core_prompts (session_id, prompt_id, idempotency_key, \
                     input_hash, state, created_at_ms, updated_at_ms) \
                     VALUES ('mid', 'p1', 'key-1', ?1, 'accepted', 1, 1)",
                    vec![SqlValue::Blob(agentos_sidecar::sessions::input_hash(
                        &text("echo lost"),
                    ))],
                ),
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
        let err = env
            .sessions
            .prompt("mid", text("echo lost"), Some("key-1".into()), user())
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
