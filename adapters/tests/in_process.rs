//! The builtin agent served as a task of the client's process: the same
//! connection as to a child (requests, events, bounds), and the agent's end
//! (a clean end, a panic, a stop) reported as a process's exit.

use std::time::Duration;

use agentos_adapters::builtin::agent::serve;
use agentos_adapters::{AdapterConnection, AdapterEvent, AdapterEvents, AdapterOptions};
use agentos_protocol::acp::methods;
use serde_json::json;

/// Generous bound so a stuck test fails instead of hanging; never asserted on.
const PATIENCE: Duration = Duration::from_secs(30);
const SIGKILL: i32 = 9;

async fn last_event(events: &mut AdapterEvents) -> AdapterEvent {
    let mut last = None;
    while let Some(event) = tokio::time::timeout(PATIENCE, events.recv())
        .await
        .expect("the connection reports its end")
    {
        last = Some(event);
    }
    last.expect("at least the exit")
}

#[tokio::test]
async fn the_builtin_agent_answers_over_the_in_memory_pipe_and_ends_cleanly() {
    let (conn, mut events) = AdapterConnection::in_process(
        |input, output| serve(input, output, Default::default()),
        4096,
        AdapterOptions::default(),
    );
    assert_eq!(conn.pid(), None);
    let init = conn
        .initialize(json!({"name": "t", "version": "0"}), json!({}))
        .await
        .expect("initialize");
    assert_eq!(init.protocol_version, 1);
    // A request larger than the pipe still goes through: the writer waits
    // for the agent to read.
    let cwd = format!("/{}", "w".repeat(20_000));
    let new = conn
        .request(methods::SESSION_NEW, json!({"cwd": cwd, "mcpServers": []}))
        .await
        .expect("session/new");
    assert!(new["sessionId"].is_string(), "{new}");
    assert!(conn.is_alive());
    // Closing its input ends the agent's loop: a clean exit.
    conn.shutdown().await;
    assert!(!conn.is_alive());
    match last_event(&mut events).await {
        AdapterEvent::Exited { code, signal } => assert_eq!((code, signal), (Some(0), None)),
        other => panic!("expected the exit, got {other:?}"),
    }
}

#[tokio::test]
async fn an_agent_that_panics_exits_as_a_crashed_process() {
    let (conn, mut events) = AdapterConnection::in_process(
        |_input, _output| async {
            tokio::task::yield_now().await;
            panic!("the agent broke");
        },
        4096,
        AdapterOptions::default(),
    );
    match last_event(&mut events).await {
        AdapterEvent::Exited { code, signal } => assert_eq!((code, signal), (Some(101), None)),
        other => panic!("expected the exit, got {other:?}"),
    }
    assert!(!conn.is_alive());
    let refused = conn
        .request(methods::SESSION_NEW, json!({"cwd": "/", "mcpServers": []}))
        .await;
    assert!(refused.is_err(), "a request to an ended agent fails");
}

#[tokio::test]
async fn an_agent_that_never_reads_is_stopped_and_reported_killed() {
    let (conn, mut events) = AdapterConnection::in_process(
        |input, _output| async move {
            // Holds its input open and never reads it.
            let _input = input;
            std::future::pending::<std::io::Result<()>>().await
        },
        1024,
        AdapterOptions::default(),
    );
    // Its input closes, it goes on: the grace runs out and the task ends.
    conn.shutdown().await;
    match last_event(&mut events).await {
        AdapterEvent::Exited { code, signal } => {
            assert_eq!((code, signal), (None, Some(SIGKILL)))
        }
        other => panic!("expected the exit, got {other:?}"),
    }
}
