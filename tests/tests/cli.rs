//! The operator CLI (`agentos-sidecar ctl`) against a running sidecar:
//! human and `--json` output of status, sessions, prompt and history, and a
//! clear failure when there is no socket.

mod common;

use std::path::Path;

use common::{binary, Backend, Sidecar};
use serde_json::Value;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn ctl(socket: &Path, args: &[&str]) -> Out {
    let out = tokio::time::timeout(
        common::PATIENCE,
        tokio::process::Command::new(binary("agentos-sidecar"))
            .arg("ctl")
            .arg("--socket")
            .arg(socket)
            .args(args)
            .output(),
    )
    .await
    .expect("ctl finishes in time")
    .expect("run ctl");
    Out {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8(out.stdout).expect("utf-8"),
        stderr: String::from_utf8(out.stderr).expect("utf-8"),
    }
}

fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[tokio::test]
async fn ctl_drives_a_running_sidecar() {
    let sc = Sidecar::start(Backend::SqliteFile).await;
    let s = &sc.socket;

    let out = ctl(s, &["status"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("sqlite_file"), "{}", out.stdout);
    let out = ctl(s, &["--json", "status"]).await;
    assert_eq!(out.code, 0);
    let status = &json_lines(&out.stdout)[0];
    assert_eq!(status["liveAdapters"], 0);

    let out = ctl(s, &["sessions", "open", "c1"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("c1"));
    let out = ctl(s, &["--json", "sessions", "get", "c1"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("\"c1\""), "{}", out.stdout);
    json_lines(&out.stdout);

    let out = ctl(s, &["prompt", "c1", "stream 3"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("c0 c1 c2"), "{}", out.stdout);
    assert!(out.stdout.contains("end_turn"), "{}", out.stdout);
    let out = ctl(s, &["--json", "prompt", "c1", "echo hi"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines = json_lines(&out.stdout);
    let last = lines.last().expect("a result line");
    assert_eq!(last["stopReason"], "end_turn");
    assert_eq!(last["sessionId"], "c1");

    let out = ctl(s, &["history", "c1"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("user_message_chunk"));
    assert!(out.stdout.contains("c0 c1 c2"));
    let out = ctl(s, &["--json", "history", "c1"]).await;
    let events = json_lines(&out.stdout);
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["sequence"].as_u64().expect("seq"))
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert_eq!(events[3]["content"]["text"], "hi");

    let out = ctl(s, &["--json", "sessions", "list"]).await;
    let list = &json_lines(&out.stdout)[0];
    assert_eq!(list["sessions"][0]["sessionId"], "c1");

    let out = ctl(s, &["sessions", "delete", "c1"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = ctl(s, &["sessions", "get", "c1"]).await;
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("session_not_found"), "{}", out.stderr);
    let out = ctl(s, &["--json", "sessions", "get", "c1"]).await;
    assert_eq!(out.code, 1);
    let error = &json_lines(&out.stdout)[0]["error"];
    assert_eq!(error["data"]["code"], "session_not_found");
}

#[tokio::test]
async fn ctl_without_a_socket_fails_clearly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("nothing.sock");
    let out = ctl(&missing, &["status"]).await;
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("no sidecar socket"), "{}", out.stderr);
    assert!(out.stderr.contains("nothing.sock"), "{}", out.stderr);
    let out = ctl(&missing, &["--json", "status"]).await;
    assert_eq!(out.code, 1);
    assert_eq!(json_lines(&out.stdout)[0]["error"]["code"], "no_socket");
}
