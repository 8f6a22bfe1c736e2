//! Graceful shutdown: on SIGTERM the sidecar stops accepting, tells every
//! connection, settles a turn in flight (its prompt fails as
//! `prompt_delivery_uncertain`, retryable, and is never resent), drains
//! what it owes its clients, closes the database and exits 0.

mod common;

use common::{data_code, eventually, next_note, Backend, Sidecar};
use serde_json::json;

async fn sigterm_mid_turn(backend: Backend) {
    let mut sc = Sidecar::start(backend).await;
    sc.open("s", "echo").await;
    let (subscriber, mut sub_notes) = sc.connect().await;
    let subscribed = subscriber
        .call("sessions/subscribe", json!({"sessionId": "s", "after": 0}))
        .await
        .expect("subscribe");
    assert!(subscribed["subscriptionId"].is_string());
    let (prompter, _prompter_notes) = sc.connect().await;
    let turn = tokio::spawn(async move {
        prompter
            .call(
                "sessions/prompt",
                json!({"sessionId": "s", "idempotencyKey": "k1",
                       "content": [{"type": "text", "text": "never_answer"}]}),
            )
            .await
    });
    // The prompt has reached the agent once the session runs and the
    // subscriber has seen the user's message.
    next_note(&mut sub_notes, |method, params| {
        method == "sessions/event" && params["event"]["type"] == "user_message_chunk"
    })
    .await;
    eventually("the session runs", || async {
        let info = sc.ok("sessions/get", json!({"sessionId": "s"})).await;
        info["session"]["state"]["status"] == "running"
    })
    .await;

    let status = sc.terminate().await;
    assert!(status.success(), "{backend:?}: exit status {status:?}");

    // Every connection was told, and the prompt in flight was answered.
    next_note(&mut sub_notes, |method, params| {
        method == "lifecycle/shutdown" && params["reason"] == "vm_shutdown"
    })
    .await;
    let answer = turn.await.expect("the prompt task");
    let error = match answer {
        Err(agentos_client::ctl::ClientError::Rpc(e)) => e,
        other => panic!("{backend:?}: expected an error answer, got {other:?}"),
    };
    assert_eq!(
        data_code(&error),
        "prompt_delivery_uncertain",
        "{backend:?}"
    );
    assert_eq!(error.data.as_ref().unwrap()["retryable"], true);
    assert!(
        !sc.socket.exists(),
        "{backend:?}: the socket file was removed"
    );

    // What was committed is intact and the turn is settled in the store.
    let prompt = sc
        .stored(
            // The turn's key is on its run, whose id its prompt takes.
            "SELECT p.state, json_extract(p.error_json, '$.code') AS code \
             FROM agentos_core_prompts p JOIN agentos_core_runs r ON r.run_id = p.prompt_id \
             WHERE p.session_id = 's' AND r.idempotency_key = 'k1'",
        )
        .await;
    assert_eq!(
        prompt,
        vec![json!({"state": "failed", "code": "prompt_delivery_uncertain"})]
    );
    let session = sc
        .stored("SELECT state FROM agentos_core_sessions WHERE session_id = 's'")
        .await;
    assert_eq!(session.len(), 1, "the session row");
    assert_ne!(session[0]["state"], "running", "{backend:?}");
    assert_eq!(
        sc.delivered_prompts().len(),
        1,
        "delivered once, never resent"
    );
}

all_backends!(sigterm_mid_turn);

/// At the descriptor limit `accept` fails for as long as a connection
/// waits in the backlog; the listener pauses (doubling up to a second)
/// instead of retrying at once, logs why, and serves again once
/// descriptors are free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_failures_back_off_and_recover() {
    let sc = Sidecar::start(Backend::SqliteFile).await;
    let pid = sc.pid() as libc::pid_t;
    let open_fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("list the sidecar's descriptors")
        .count() as u64;
    let mut current = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit64 with a null new limit only writes `current`.
    let rc = unsafe { libc::prlimit64(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut current) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    let set_limit = |soft: u64| {
        let limit = libc::rlimit64 {
            rlim_cur: soft,
            rlim_max: current.rlim_max,
        };
        // SAFETY: prlimit64 reads `limit` and writes nothing back (old is null).
        let rc = unsafe { libc::prlimit64(pid, libc::RLIMIT_NOFILE, &limit, std::ptr::null_mut()) };
        assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    };
    set_limit(open_fds + 2);
    let mut waiting = Vec::new();
    for _ in 0..8 {
        waiting.push(
            tokio::net::UnixStream::connect(&sc.socket)
                .await
                .expect("connect (queued in the backlog)"),
        );
    }
    let stderr = sc.dir.path().join("sidecar.stderr");
    let failures = || {
        std::fs::read_to_string(&stderr)
            .unwrap_or_default()
            .matches("accepting a host connection failed")
            .count()
    };
    eventually("an accept failure is logged", || async { failures() > 0 }).await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let logged = failures();
    // Without a pause the loop retries at once, thousands of times a second.
    assert!(
        logged <= 20,
        "{logged} accept failures logged in about 1.5 s: the loop does not back off"
    );
    drop(waiting);
    set_limit(current.rlim_cur);
    let (client, _notes) = sc.connect().await;
    let status = client
        .call("vm/status", json!({}))
        .await
        .expect("vm/status");
    assert_eq!(status["database"]["type"], "sqlite_file");
}
