//! Messages that wait behind a live turn (`Turns::submit` queueing, what the signed
//! API's `MessageSession` uses): their words are in the log as they arrive
//! and their turns are queued runs that run one after another in arrival
//! order, a plain prompt still answers `session_busy`, the queue is bounded,
//! a failed turn is retried without its input being appended again
//! (`RetrySession`), every turn from either door is a run, and a `builtin`
//! session (no builtin agent in a bare service) fails its turn with a typed
//! error.

mod common;

use std::time::Duration;

use agentos_protocol::ErrorCode;
use agentos_sidecar::runs::{Executors, RunScope, RunStatus, Runs, RunsConfig};
use agentos_sidecar::sessions::{PromptOutcome, SessionError};
use agentos_sidecar::work::TurnAnswer;
use common::*;

/// The runs queue over the env's database, working turns through its
/// session service.
fn turns(env: &Env) -> Turns {
    turns_with(env, RunsConfig::default())
}

fn turns_with(env: &Env, config: RunsConfig) -> Turns {
    let runs = Runs::new(env.sessions.store().db().clone(), config);
    runs.set_executors(Executors {
        agent: TurnExecutor::new(env.sessions.clone()),
        script: None,
    });
    runs.start();
    Turns::new(runs, env.sessions.clone())
}

async fn message(turns: &Turns, sid: &str, t: &str) -> Result<PromptOutcome, SessionError> {
    message_keyed(turns, sid, t, None).await
}

async fn message_keyed(
    turns: &Turns,
    sid: &str,
    t: &str,
    key: Option<&str>,
) -> Result<PromptOutcome, SessionError> {
    let request = TurnRequest {
        content: text(t),
        key: key.map(str::to_owned),
        actor: user(),
        owner: TurnOwner::default(),
        when_busy: WhenBusy::Queue,
    };
    match turns.submit(sid, request).await {
        Ok(TurnAnswer::Done(outcome)) => Ok(outcome),
        Ok(other) => panic!("the turn did not end: {other:?}"),
        Err(agentos_sidecar::work::TurnError::Session(e)) => Err(e),
        Err(e) => panic!("not a session failure: {e}"),
    }
}

/// A prompt as the host door sends it: the same entry, refused while the
/// session is busy.
async fn host_prompt(turns: &Turns, sid: &str, t: &str) -> Result<PromptOutcome, SessionError> {
    let request = TurnRequest {
        content: text(t),
        key: None,
        actor: user(),
        owner: TurnOwner::default(),
        when_busy: WhenBusy::Refuse,
    };
    let answer = match turns.submit(sid, request).await {
        Ok(answer) => answer,
        Err(agentos_sidecar::work::TurnError::Session(e)) => return Err(e),
        Err(e) => panic!("not a session failure: {e}"),
    };
    match turns.outcome(answer).await {
        Ok(outcome) => Ok(outcome),
        Err(agentos_sidecar::work::TurnError::Session(e)) => Err(e),
        Err(e) => panic!("not a session failure: {e}"),
    }
}

async fn running(env: &Env, sid: &str) {
    for _ in 0..500 {
        let info = env.sessions.get(sid).await.expect("get");
        if info.state.status() == "running" && !prompt_log(env).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the first turn never started");
}

#[tokio::test]
async fn queued_prompts_run_in_arrival_order_after_the_live_turn() {
    for backend in all_backends().await {
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        env.sessions.open(open("q", "echo")).await.expect("open");
        let turns = turns(&env);
        let first = {
            let turns = turns.clone();
            tokio::spawn(async move { message(&turns, "q", "sleep 1500").await })
        };
        running(&env, "q").await;
        let busy = host_prompt(&turns, "q", "echo not queued")
            .await
            .expect_err("busy");
        assert_eq!(busy.code(), ErrorCode::SessionBusy, "{}", backend.name);
        let mut queued = Vec::new();
        for word in ["one", "two", "three"] {
            let turns = turns.clone();
            queued.push(tokio::spawn(async move {
                message(&turns, "q", &format!("echo {word}")).await
            }));
            // Arrival order is what the test checks: each message is in the
            // log as it arrives, so the next is sent only after it.
            let said = format!("echo {word}");
            let mut arrived = false;
            for _ in 0..500 {
                arrived = history(&env, "q")
                    .await
                    .iter()
                    .any(|e| e["content"]["text"] == said.as_str());
                if arrived {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(arrived, "{said} reached the log");
        }
        first.await.expect("join").expect("the live turn");
        for handle in queued {
            let outcome = handle.await.expect("join").expect("a queued turn");
            assert_eq!(outcome.stop_reason, "end_turn");
        }
        let said: Vec<(String, String)> = history(&env, "q")
            .await
            .iter()
            .map(|e| {
                (
                    e["type"].as_str().unwrap_or_default().to_owned(),
                    e["content"]["text"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        // Each message is in the log as it arrives; the replies follow in
        // the same order.
        let expected: Vec<(String, String)> = [
            ("user_message_chunk", "sleep 1500"),
            ("user_message_chunk", "echo one"),
            ("user_message_chunk", "echo two"),
            ("user_message_chunk", "echo three"),
            ("agent_message_chunk", "slept"),
            ("agent_message_chunk", "one"),
            ("agent_message_chunk", "two"),
            ("agent_message_chunk", "three"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(said, expected, "{}", backend.name);
        // Every turn is a run of the session, oldest first; the plain
        // prompt that was refused is none.
        let runs = turns
            .runs()
            .list(&RunScope::Session("q".into()), None, None)
            .await
            .expect("list");
        assert_eq!(runs.len(), 4, "{}", backend.name);
        assert!(runs.iter().all(|r| r.status == RunStatus::Succeeded));
        turns.runs().shutdown();
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn the_wait_behind_a_turn_is_bounded() {
    for backend in all_backends().await {
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        env.sessions.open(open("b", "echo")).await.expect("open");
        let turns = turns(&env);
        let first = {
            let turns = turns.clone();
            tokio::spawn(async move { host_prompt(&turns, "b", "wait_for_cancel").await })
        };
        running(&env, "b").await;
        // 40 arrive at once: 32 wait, 8 are refused at once, whatever the
        // order in which they arrive.
        let mut all = Vec::new();
        for i in 0..40 {
            let turns = turns.clone();
            all.push(tokio::spawn(async move {
                message(&turns, "b", &format!("echo {i}")).await
            }));
        }
        for _ in 0..1000 {
            if all.iter().filter(|h| h.is_finished()).count() >= 8 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        env.sessions.cancel("b").await.expect("cancel");
        first.await.expect("join").expect("cancelled is a result");
        let (mut ran, mut refused) = (0, 0);
        for handle in all {
            match handle.await.expect("join") {
                Ok(_) => ran += 1,
                Err(e) => {
                    assert_eq!(e.code(), ErrorCode::SessionBusy, "{}", backend.name);
                    assert_eq!(e.setting(), Some("limits.acp.maxQueuedPromptsPerSession"));
                    refused += 1;
                }
            }
        }
        assert_eq!((ran, refused), (32, 8), "{}", backend.name);
        assert_eq!(prompt_log(&env).len(), 33, "{}", backend.name);
        turns.runs().shutdown();
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn a_builtin_session_opens_but_its_turn_is_unavailable() {
    for backend in all_backends().await {
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        env.sessions.open(open("m", "builtin")).await.expect("open");
        let e = prompt(&env, "m", "hello")
            .await
            .expect_err("no builtin yet");
        assert_eq!(
            e.code(),
            ErrorCode::BuiltinAgentUnavailable,
            "{}",
            backend.name
        );
        let missing = env
            .sessions
            .open(open("x", "no-such-agent"))
            .await
            .expect_err("unknown agent");
        assert_eq!(missing.code(), ErrorCode::AgentNotFound);
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

#[tokio::test]
async fn a_failed_prompt_is_retried_without_appending_its_input_again() {
    for backend in all_backends().await {
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        env.sessions.open(open("r", "echo")).await.expect("open");
        let turns = turns(&env);
        let retry = |turns: Turns| async move {
            match turns.retry("r", TurnOwner::default()).await {
                Ok(TurnAnswer::Done(outcome)) => Ok(outcome),
                Ok(other) => panic!("the retry did not end: {other:?}"),
                Err(agentos_sidecar::work::TurnError::Session(e)) => Err(e),
                Err(e) => panic!("not a session failure: {e}"),
            }
        };
        let none = retry(turns.clone()).await.expect_err("no prompt yet");
        assert_eq!(none.code(), ErrorCode::NothingToRetry);
        host_prompt(&turns, "r", "fail_once back again")
            .await
            .expect_err("the first try fails");
        let outcome = retry(turns.clone()).await.expect("the retry");
        assert_eq!(outcome.stop_reason, "end_turn", "{}", backend.name);
        let types: Vec<String> = history(&env, "r")
            .await
            .iter()
            .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(
            types,
            ["user_message_chunk", "agent_message_chunk"],
            "{}: the input is in the log once",
            backend.name
        );
        let log = prompt_log(&env);
        assert_eq!(log.len(), 2, "the agent got the input twice");
        assert_eq!(log[1]["prompt"], log[0]["prompt"]);
        let again = retry(turns.clone()).await.expect_err("it succeeded");
        assert_eq!(again.code(), ErrorCode::NothingToRetry);
        // The host door's prompt and the retry are both runs: the first
        // failed, the second succeeded.
        let runs = turns
            .runs()
            .list(&RunScope::Session("r".into()), None, None)
            .await
            .expect("list");
        let statuses: Vec<RunStatus> = runs.iter().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [RunStatus::Succeeded, RunStatus::Failed],
            "{}: newest first",
            backend.name
        );
        turns.runs().shutdown();
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

/// The one entry's rules side by side: an idle session's turn starts at
/// once whichever door sends it; a queued one waits for the agent cap, a
/// host one is not held by it; a host prompt on a busy session is refused
/// and leaves nothing behind.
#[tokio::test]
async fn an_idle_turn_starts_at_once_and_a_capped_one_waits_for_a_slot() {
    for backend in all_backends().await {
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        for sid in ["a", "b", "c"] {
            env.sessions.open(open(sid, "echo")).await.expect("open");
        }
        let mut config = RunsConfig::default();
        config.caps.agent = 1;
        let turns = turns_with(&env, config);
        // A signed message on an idle session starts at once: the session
        // runs before any dispatcher pass could have claimed it.
        let long = {
            let turns = turns.clone();
            tokio::spawn(async move { message(&turns, "a", "wait_for_cancel").await })
        };
        running(&env, "a").await;
        let live = turns
            .runs()
            .list(&RunScope::Session("a".into()), None, None)
            .await
            .expect("list");
        assert_eq!(live.len(), 1, "{}", backend.name);
        assert_eq!(live[0].status, RunStatus::Running, "{}", backend.name);
        assert_eq!(turns.runs().working(), 1, "an adopted turn is worked here");
        // The cap (1) is taken: a message to another idle session queues.
        let capped = {
            let turns = turns.clone();
            tokio::spawn(async move { message(&turns, "b", "echo capped").await })
        };
        let mut queued = false;
        for _ in 0..500 {
            let runs = turns
                .runs()
                .list(&RunScope::Session("b".into()), None, None)
                .await
                .expect("list");
            if runs.first().is_some_and(|r| r.status == RunStatus::Queued) {
                queued = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(queued, "{}: the capped message queued", backend.name);
        // The host door is not held by the cap.
        let host = host_prompt(&turns, "c", "echo host").await.expect("host");
        assert_eq!(host.stop_reason, "end_turn", "{}", backend.name);
        // A host prompt on the busy session is refused; nothing is written.
        let busy = host_prompt(&turns, "a", "echo refused")
            .await
            .expect_err("busy");
        assert_eq!(busy.code(), ErrorCode::SessionBusy, "{}", backend.name);
        assert!(!history(&env, "a")
            .await
            .iter()
            .any(|e| e["content"]["text"] == "echo refused"));
        assert!(!capped.is_finished(), "{}: still waiting", backend.name);
        env.sessions.cancel("a").await.expect("cancel");
        let first = long.await.expect("join").expect("cancelled is a result");
        assert_eq!(first.stop_reason, "cancelled", "{}", backend.name);
        let after = capped.await.expect("join").expect("the capped turn");
        assert_eq!(after.stop_reason, "end_turn", "{}", backend.name);
        turns.runs().shutdown();
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}

/// A key sent again while its turn runs waits for that turn and hears its
/// answer; the agent got the words once. Canceling the run of a turn that
/// started at once stops its turn.
#[tokio::test]
async fn a_repeated_key_waits_for_its_turn_and_a_started_run_cancels() {
    for backend in all_backends().await {
        let env = env_with(backend.db.clone(), AcpLimits::default()).await;
        env.sessions.open(open("k", "echo")).await.expect("open");
        let turns = turns(&env);
        let send = |turns: &Turns| {
            let turns = turns.clone();
            tokio::spawn(async move { message_keyed(&turns, "k", "sleep 600", Some("m1")).await })
        };
        let first = send(&turns);
        running(&env, "k").await;
        let second = send(&turns);
        let (first, second) = (
            first.await.expect("join").expect("the turn"),
            second.await.expect("join").expect("the replay"),
        );
        assert_eq!(first, second, "{}", backend.name);
        assert_eq!(prompt_log(&env).len(), 1, "{}: sent once", backend.name);
        let conflict = message_keyed(&turns, "k", "echo other", Some("m1"))
            .await
            .expect_err("other words");
        assert_eq!(conflict.code(), ErrorCode::IdempotencyConflict);

        let waiting = {
            let turns = turns.clone();
            tokio::spawn(async move { message(&turns, "k", "wait_for_cancel").await })
        };
        let mut run = None;
        for _ in 0..500 {
            let runs = turns
                .runs()
                .list(
                    &RunScope::Session("k".into()),
                    Some(RunStatus::Running),
                    None,
                )
                .await
                .expect("list");
            if let Some(r) = runs.into_iter().next() {
                run = Some(r);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let run = run.expect("the turn's run runs");
        running(&env, "k").await;
        assert!(turns.runs().cancel(&run.run_id).await.expect("cancel"));
        let outcome = waiting.await.expect("join").expect("a result");
        assert_eq!(outcome.stop_reason, "cancelled", "{}", backend.name);
        let ended = turns.runs().get(&run.run_id).await.expect("get");
        assert_eq!(ended.status, RunStatus::Canceled, "{}", backend.name);
        assert_eq!(turns.runs().working(), 0, "{}", backend.name);
        turns.runs().shutdown();
        env.sessions.shutdown().await;
        backend.shutdown().await;
    }
}
