//! Drives the real fake-agent binary through the adapter client over real
//! pipes: the happy paths, the agent's requests back to us, and every kind of
//! misbehaviour (garbage, oversize lines, dying mid-turn).

use std::time::Duration;

use agentos_adapters::{
    AdapterCommand, AdapterConnection, AdapterError, AdapterEvent, AdapterEvents, AdapterOptions,
    RpcError,
};
use agentos_protocol::acp::methods;
use serde_json::{json, Value};

const FAKE_AGENT: &str = env!("CARGO_BIN_EXE_agentos-fake-agent");
/// Generous bound so a stuck test fails instead of hanging; never asserted on.
const PATIENCE: Duration = Duration::from_secs(30);

fn fake(args: &[&str]) -> AdapterCommand {
    AdapterCommand {
        program: FAKE_AGENT.to_owned(),
        args: args.iter().map(|a| a.to_string()).collect(),
        ..AdapterCommand::default()
    }
}

async fn start_with(args: &[&str], options: AdapterOptions) -> (AdapterConnection, AdapterEvents) {
    let (conn, events) = AdapterConnection::spawn(&fake(args), options)
        .await
        .expect("fake agent spawns");
    let init = conn
        .initialize(
            json!({"name": "adapter-tests", "version": "0"}),
            json!({"fs": {"readTextFile": true, "writeTextFile": true}}),
        )
        .await
        .expect("initialize succeeds");
    assert_eq!(init.protocol_version, 1);
    (conn, events)
}

async fn start(args: &[&str]) -> (AdapterConnection, AdapterEvents) {
    start_with(args, AdapterOptions::default()).await
}

async fn new_session(conn: &AdapterConnection) -> String {
    let result = conn
        .request(methods::SESSION_NEW, json!({"cwd": "/", "mcpServers": []}))
        .await
        .expect("session/new succeeds");
    result["sessionId"]
        .as_str()
        .expect("session id is a string")
        .to_owned()
}

fn prompt_params(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

async fn next_event(events: &mut AdapterEvents) -> AdapterEvent {
    tokio::time::timeout(PATIENCE, events.recv())
        .await
        .expect("an event arrives")
        .expect("event channel open")
}

/// Runs a prompt while draining events, answering agent requests with
/// `answer`; returns the prompt's result and every `session/update` payload.
async fn run_prompt(
    conn: &AdapterConnection,
    events: &mut AdapterEvents,
    session: &str,
    text: &str,
    mut answer: impl FnMut(&str, &Value) -> Result<Value, RpcError>,
) -> (Result<Value, AdapterError>, Vec<Value>, Vec<AdapterEvent>) {
    let request = conn.request(methods::SESSION_PROMPT, prompt_params(session, text));
    tokio::pin!(request);
    let mut updates = Vec::new();
    let mut others = Vec::new();
    let result = loop {
        tokio::select! {
            result = &mut request => break result,
            event = events.recv() => match event {
                Some(AdapterEvent::SessionUpdate(update)) => updates.push(update.update()),
                Some(AdapterEvent::Request { id, method, params }) => {
                    conn.respond(&id, answer(&method, &params)).expect("respond");
                }
                Some(other) => others.push(other),
                // The process is gone; the request resolves with its fate.
                None => break (&mut request).await,
            },
        }
    };
    // Updates sent before the answer may still sit in the channel.
    while let Ok(event) = events.try_recv() {
        match event {
            AdapterEvent::SessionUpdate(update) => updates.push(update.update()),
            other => others.push(other),
        }
    }
    (result, updates, others)
}

fn no_requests(method: &str, _: &Value) -> Result<Value, RpcError> {
    panic!("unexpected agent request {method}");
}

fn texts(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn initialize_reports_capabilities_and_agent_info() {
    let (conn, _events) = AdapterConnection::spawn(
        &fake(&["--resume", "--agent-name", "probe"]),
        AdapterOptions::default(),
    )
    .await
    .unwrap();
    let init = conn.initialize(Value::Null, json!({})).await.unwrap();
    assert!(init.supports_resume());
    assert!(!init.supports_load());
    assert_eq!(init.agent_info.unwrap()["name"], "probe");
    assert!(conn.pid().is_some());
    assert!(conn.is_alive());
    conn.shutdown().await;
    assert!(!conn.is_alive());
    conn.shutdown().await;
    assert_eq!(
        conn.notify(methods::SESSION_CANCEL, json!({})),
        Err(AdapterError::Closed)
    );
}

#[tokio::test]
async fn echo_and_config_options() {
    let (conn, mut events) = start(&[]).await;
    let session = new_session(&conn).await;
    let (result, updates, _) = run_prompt(
        &conn,
        &mut events,
        &session,
        "echo hello there",
        no_requests,
    )
    .await;
    assert_eq!(result.unwrap()["stopReason"], "end_turn");
    assert_eq!(texts(&updates), vec!["hello there"]);

    let options = conn
        .request(
            methods::SESSION_SET_CONFIG_OPTION,
            json!({"sessionId": session, "configId": "mode", "value": "careful"}),
        )
        .await
        .unwrap();
    assert_eq!(options["configOptions"][0]["currentValue"], "careful");
    let bad = conn
        .request(
            methods::SESSION_SET_CONFIG_OPTION,
            json!({"sessionId": session, "configId": "mode", "value": "reckless"}),
        )
        .await
        .unwrap_err();
    assert_eq!(bad.code().as_str(), "adapter_rpc_error");
    conn.shutdown().await;
}

#[tokio::test]
async fn stream_keeps_order_and_message_id() {
    let (conn, mut events) = start(&[]).await;
    let session = new_session(&conn).await;
    let (result, updates, _) =
        run_prompt(&conn, &mut events, &session, "stream 50", no_requests).await;
    assert_eq!(result.unwrap()["stopReason"], "end_turn");
    let expected: Vec<String> = (0..50).map(|i| format!("c{i} ")).collect();
    assert_eq!(texts(&updates), expected);
    let first_id = &updates[0]["messageId"];
    assert!(first_id.is_string());
    assert!(updates.iter().all(|u| &u["messageId"] == first_id));
    conn.shutdown().await;
}

#[tokio::test]
async fn permission_round_trip() {
    let (conn, mut events) = start(&[]).await;
    let session = new_session(&conn).await;
    for (option, status) in [("allow", "completed"), ("reject", "failed")] {
        let (result, updates, _) = run_prompt(
            &conn,
            &mut events,
            &session,
            "permission",
            |method, params| {
                assert_eq!(method, methods::SESSION_REQUEST_PERMISSION);
                // Choose by kind, never by position.
                let kind = if option == "allow" {
                    "allow_once"
                } else {
                    "reject_once"
                };
                let chosen = params["options"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|o| o["kind"] == kind)
                    .unwrap();
                Ok(json!({"outcome": {"outcome": "selected", "optionId": chosen["optionId"]}}))
            },
        )
        .await;
        assert_eq!(result.unwrap()["stopReason"], "end_turn");
        assert_eq!(updates[0]["sessionUpdate"], "tool_call");
        assert_eq!(updates[1]["status"], status);
        assert_eq!(texts(&updates), vec![format!("chose {option}")]);
    }
    let (result, _, _) = run_prompt(&conn, &mut events, &session, "permission", |_, _| {
        Ok(json!({"outcome": {"outcome": "cancelled"}}))
    })
    .await;
    assert_eq!(result.unwrap()["stopReason"], "cancelled");
    conn.shutdown().await;
}

#[tokio::test]
async fn cancel_ends_a_waiting_turn() {
    let (conn, mut events) = start(&[]).await;
    let session = new_session(&conn).await;
    let turn = {
        let conn = conn.clone();
        let params = prompt_params(&session, "wait_for_cancel");
        tokio::spawn(async move { conn.request(methods::SESSION_PROMPT, params).await })
    };
    match next_event(&mut events).await {
        AdapterEvent::SessionUpdate(update) => {
            assert_eq!(update.update()["content"]["text"], "waiting")
        }
        other => panic!("expected the waiting chunk, got {other:?}"),
    }
    conn.notify(methods::SESSION_CANCEL, json!({"sessionId": session}))
        .unwrap();
    let result = tokio::time::timeout(PATIENCE, turn)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(result["stopReason"], "cancelled");
    conn.shutdown().await;
}

#[tokio::test]
async fn exit_mid_turn_fails_the_request_and_reports_the_status() {
    let (conn, mut events) = start(&[]).await;
    let session = new_session(&conn).await;
    let (result, updates, others) =
        run_prompt(&conn, &mut events, &session, "exit_mid_turn", no_requests).await;
    assert_eq!(result.unwrap_err(), AdapterError::Exited);
    assert_eq!(texts(&updates), vec!["about to exit"]);
    let exited = match others.last() {
        Some(event @ AdapterEvent::Exited { .. }) => event.clone(),
        _ => next_event(&mut events).await,
    };
    assert_eq!(
        exited,
        AdapterEvent::Exited {
            code: Some(3),
            signal: None
        }
    );
    assert!(events.recv().await.is_none(), "Exited is the last event");
    assert!(!conn.is_alive());
    let late = conn
        .request(methods::SESSION_NEW, json!({}))
        .await
        .unwrap_err();
    assert_eq!(late.code().as_str(), "adapter_exited");
}

#[tokio::test]
async fn garbage_line_is_reported_and_the_turn_completes() {
    let (conn, mut events) = start(&[]).await;
    let session = new_session(&conn).await;
    let (result, updates, others) =
        run_prompt(&conn, &mut events, &session, "garbage", no_requests).await;
    assert_eq!(result.unwrap()["stopReason"], "end_turn");
    assert_eq!(texts(&updates), vec!["after garbage"]);
    assert!(matches!(
        others.as_slice(),
        [AdapterEvent::ProtocolError(AdapterError::InvalidJson(_))]
    ));
    conn.shutdown().await;
}

#[tokio::test]
async fn oversize_line_is_skipped_and_the_stream_resynchronises() {
    let options = AdapterOptions {
        max_read_line_bytes: 4096,
        ..AdapterOptions::default()
    };
    let (conn, mut events) = start_with(&[], options).await;
    let session = new_session(&conn).await;
    let (result, updates, others) =
        run_prompt(&conn, &mut events, &session, "oversize 100000", no_requests).await;
    assert_eq!(result.unwrap()["stopReason"], "end_turn");
    assert!(updates.is_empty());
    assert_eq!(
        others,
        vec![AdapterEvent::ProtocolError(AdapterError::LineTooLong {
            limit: 4096
        })]
    );
    // A line just under the limit still gets through.
    let (result, updates, others) =
        run_prompt(&conn, &mut events, &session, "oversize 4000", no_requests).await;
    assert_eq!(result.unwrap()["stopReason"], "end_turn");
    assert_eq!(updates.len(), 1);
    assert!(others.is_empty());
    conn.shutdown().await;
}

#[tokio::test]
async fn caller_answers_unknown_and_fs_requests() {
    let (conn, mut events) = start(&[]).await;
    let session = new_session(&conn).await;
    let (result, updates, _) = run_prompt(
        &conn,
        &mut events,
        &session,
        "fs_read /notes.md",
        |method, params| {
            assert_eq!(method, methods::FS_READ_TEXT_FILE);
            assert_eq!(params["path"], "/notes.md");
            Ok(json!({"content": "remember the milk"}))
        },
    )
    .await;
    assert_eq!(result.unwrap()["stopReason"], "end_turn");
    assert_eq!(texts(&updates), vec!["remember the milk"]);

    // The caller does not implement the method and says so.
    let (result, updates, _) = run_prompt(
        &conn,
        &mut events,
        &session,
        "fs_write /out.txt some text",
        |method, _| Err(RpcError::method_not_found(method)),
    )
    .await;
    assert_eq!(result.unwrap()["stopReason"], "end_turn");
    assert_eq!(texts(&updates), vec!["Method not found"]);
    conn.shutdown().await;
}

#[tokio::test]
async fn agent_answers_unknown_methods_with_method_not_found() {
    let (conn, _events) = start(&[]).await;
    let error = conn.request("_sidecar/ping", json!({})).await.unwrap_err();
    match error {
        AdapterError::Rpc(rpc) => assert_eq!(rpc.code, -32601),
        other => panic!("expected an rpc error, got {other:?}"),
    }
    // The agent does not advertise load, so it does not implement it.
    let error = conn
        .request(methods::SESSION_LOAD, json!({"sessionId": "x"}))
        .await
        .unwrap_err();
    assert!(!error.is_unknown_session());
    conn.shutdown().await;
}

#[tokio::test]
async fn concurrent_requests_from_several_tasks() {
    let (conn, mut events) = start(&[]).await;
    let mut sessions = Vec::new();
    for _ in 0..4 {
        sessions.push(new_session(&conn).await);
    }
    let drain = tokio::spawn(async move { while events.recv().await.is_some() {} });
    let mut turns = Vec::new();
    for (i, session) in sessions.iter().enumerate() {
        let conn = conn.clone();
        let params = prompt_params(session, &format!("sleep {}", 50 * (4 - i)));
        turns.push(tokio::spawn(async move {
            conn.request(methods::SESSION_PROMPT, params).await
        }));
    }
    let news: Vec<_> = (0..8)
        .map(|_| {
            let conn = conn.clone();
            tokio::spawn(async move { new_session(&conn).await })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for task in news {
        assert!(ids.insert(task.await.unwrap()));
    }
    for turn in turns {
        assert_eq!(turn.await.unwrap().unwrap()["stopReason"], "end_turn");
    }
    conn.shutdown().await;
    drain.await.unwrap();
}

#[tokio::test]
async fn request_timeout_is_typed_and_the_connection_survives() {
    let (conn, mut events) = start(&[]).await;
    let session = new_session(&conn).await;
    let drain = tokio::spawn(async move { while events.recv().await.is_some() {} });
    let error = conn
        .request_timeout(
            methods::SESSION_PROMPT,
            prompt_params(&session, "never_answer"),
            Duration::from_millis(100),
        )
        .await
        .unwrap_err();
    assert_eq!(
        error,
        AdapterError::Timeout {
            method: methods::SESSION_PROMPT.into()
        }
    );
    // The late cancelled answer is ignored; new requests still work.
    conn.notify(methods::SESSION_CANCEL, json!({"sessionId": session}))
        .unwrap();
    new_session(&conn).await;
    conn.shutdown().await;
    drain.await.unwrap();
}

#[tokio::test]
async fn missing_binary_is_a_spawn_error() {
    let cmd = AdapterCommand::new("/nonexistent/definitely-not-an-agent");
    let error = AdapterConnection::spawn(&cmd, AdapterOptions::default())
        .await
        .err()
        .expect("spawn fails");
    assert_eq!(error.code().as_str(), "adapter_spawn_failed");
    assert!(error.to_string().contains("definitely-not-an-agent"));
}

#[tokio::test]
async fn stderr_is_surfaced() {
    let (conn, mut events) =
        AdapterConnection::spawn(&fake(&["--no-such-flag"]), AdapterOptions::default())
            .await
            .unwrap();
    let mut stderr = Vec::new();
    loop {
        match next_event(&mut events).await {
            AdapterEvent::Stderr(line) => stderr.push(line),
            AdapterEvent::Exited { code, .. } => {
                assert_eq!(code, Some(2));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(stderr
        .iter()
        .any(|l| l.contains("unknown flag --no-such-flag")));
    let error = conn.initialize(Value::Null, json!({})).await.unwrap_err();
    assert_eq!(error, AdapterError::Exited);
}

async fn restore_across_restart(flag: &str, method: &str) -> (Vec<Value>, Vec<Value>) {
    let dir = std::env::temp_dir().join(format!(
        "agentos-fake-agent-{}-{}",
        std::process::id(),
        method.replace('/', "-")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_arg = dir.to_string_lossy().into_owned();
    let args = [flag, "--state-dir", dir_arg.as_str()];

    let (conn, mut events) = start(&args).await;
    let session = new_session(&conn).await;
    let (_, first_updates, _) =
        run_prompt(&conn, &mut events, &session, "stream 3", no_requests).await;
    conn.shutdown().await;

    let (conn, mut events) = start(&args).await;
    let restored = conn.request(
        method,
        json!({"sessionId": session, "cwd": "/", "mcpServers": []}),
    );
    tokio::pin!(restored);
    let mut replayed = Vec::new();
    let result = loop {
        tokio::select! {
            result = &mut restored => break result,
            Some(event) = events.recv() => if let AdapterEvent::SessionUpdate(update) = event {
                replayed.push(update.update());
            },
        }
    };
    while let Ok(AdapterEvent::SessionUpdate(update)) = events.try_recv() {
        replayed.push(update.update());
    }
    assert!(result.unwrap()["configOptions"].is_array());
    let (result, updates, _) =
        run_prompt(&conn, &mut events, &session, "echo again", no_requests).await;
    assert_eq!(result.unwrap()["stopReason"], "end_turn");
    assert_eq!(texts(&updates), vec!["again"]);

    let unknown = conn
        .request(
            method,
            json!({"sessionId": "0123456789abcdef", "cwd": "/", "mcpServers": []}),
        )
        .await
        .unwrap_err();
    assert!(unknown.is_unknown_session());
    conn.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    (first_updates, replayed)
}

#[tokio::test]
async fn load_replays_across_processes() {
    let (sent, replayed) = restore_across_restart("--load-session", methods::SESSION_LOAD).await;
    assert_eq!(replayed[0]["sessionUpdate"], "user_message_chunk");
    assert_eq!(replayed[0]["content"]["text"], "stream 3");
    assert_eq!(&replayed[1..], sent.as_slice());
}

#[tokio::test]
async fn resume_works_across_processes_without_replay() {
    let (_, replayed) = restore_across_restart("--resume", methods::SESSION_RESUME).await;
    assert!(replayed.is_empty());
}

#[tokio::test]
async fn restore_error_is_not_an_unknown_session() {
    let (conn, _events) = start(&["--resume", "--restore-error"]).await;
    let error = conn
        .request(
            methods::SESSION_RESUME,
            json!({"sessionId": "abc", "cwd": "/"}),
        )
        .await
        .unwrap_err();
    assert_eq!(error.code().as_str(), "adapter_rpc_error");
    assert!(!error.is_unknown_session());
    conn.shutdown().await;
}

#[tokio::test]
async fn flood_of_ten_thousand_updates_arrives_complete_and_in_order() {
    let options = AdapterOptions {
        event_buffer: 64,
        ..AdapterOptions::default()
    };
    let (conn, mut events) = start_with(&[], options).await;
    let session = new_session(&conn).await;
    let (result, updates, others) =
        run_prompt(&conn, &mut events, &session, "flood 10000", no_requests).await;
    assert_eq!(result.unwrap()["stopReason"], "end_turn");
    assert!(others.is_empty());
    assert_eq!(updates.len(), 10_000);
    for (i, update) in updates.iter().enumerate() {
        let text = update["content"][0]["content"]["text"].as_str().unwrap();
        assert!(text.starts_with(&format!("{i:08} ")));
    }
    conn.shutdown().await;
}

#[tokio::test]
async fn unread_stdout_is_bounded_and_the_reader_waits_instead_of_growing() {
    let options = AdapterOptions {
        // Room for thousands of events: only the byte bound can stop the
        // reader.
        event_buffer: 100_000,
        stdout_buffer_bytes: 16 * 1024,
        ..AdapterOptions::default()
    };
    let (conn, mut events) = start_with(&[], options).await;
    let session = new_session(&conn).await;
    let limit = events.buffer_limit();
    assert!(limit <= 16 * 1024, "{limit}");
    // ~600 KB of updates: far more than the pipe and the bound hold.
    let request = tokio::spawn({
        let conn = conn.clone();
        async move {
            conn.request(
                methods::SESSION_PROMPT,
                prompt_params(&session, "flood 2000"),
            )
            .await
        }
    });
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while events.buffered_bytes() * 5 < limit * 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the buffer never filled: {} of {limit}",
            events.buffered_bytes()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(events.buffered_bytes() <= limit);
    // Nothing is read past the bound, so the agent is still writing.
    assert!(!request.is_finished(), "the whole flood was read");
    let mut updates = 0;
    loop {
        let event = next_event(&mut events).await;
        assert!(events.buffered_bytes() <= limit);
        if let AdapterEvent::SessionUpdate(update) = event {
            let text = update.update()["content"][0]["content"]["text"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_default();
            assert!(text.starts_with(&format!("{updates:08} ")), "{text}");
            updates += 1;
            if updates == 2000 {
                break;
            }
        }
    }
    let answer = request.await.expect("request task").expect("answered");
    assert_eq!(answer["stopReason"], "end_turn");
    conn.shutdown().await;
}
