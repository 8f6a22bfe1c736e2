//! The operator CLI (`agentos-sidecar ctl`) against a running sidecar:
//! human and `--json` output of status, sessions, prompt and history, and a
//! clear failure when there is no socket.

mod common;

use common::{binary, ctl, Backend, Sidecar};
use serde_json::Value;

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

/// The whole reply is printed even when a live delta arrives after the
/// answer or not at all.
#[tokio::test]
async fn ctl_prompt_prints_the_whole_reply() {
    let sc = Sidecar::start(Backend::SqliteFile).await;
    let s = &sc.socket;
    assert_eq!(ctl(s, &["sessions", "open", "p"]).await.code, 0);
    for _ in 0..10 {
        let out = ctl(s, &["prompt", "p", "stream 5"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.contains("c0 c1 c2 c3 c4"), "{}", out.stdout);
        assert!(out.stdout.contains("[end_turn]"), "{}", out.stdout);
    }
}

/// `history` starts from the earliest retained event once older ones were
/// pruned, and `--follow` keeps following while history is pruned under it;
/// it ends when the session is deleted.
#[tokio::test]
async fn ctl_history_follows_across_pruning() {
    let sc = Sidecar::start_with(
        Backend::SqliteFile,
        common::Options {
            limits: serde_json::json!({"acp": {"maxSessionHistoryEvents": 6}}),
            ..Default::default()
        },
    )
    .await;
    let s = &sc.socket;
    assert_eq!(ctl(s, &["sessions", "open", "h"]).await.code, 0);
    for i in 0..4 {
        sc.prompt("h", &format!("echo first {i}"))
            .await
            .expect("prompt");
    }
    let out = ctl(s, &["--json", "history", "h"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let events = json_lines(&out.stdout);
    assert!(!events.is_empty() && events.len() <= 6, "{events:?}");
    assert!(events[0]["sequence"].as_u64().expect("seq") > 1, "pruned");
    assert!(out.stdout.contains("echo first 3"), "{}", out.stdout);

    let mut follower = tokio::process::Command::new(binary("agentos-sidecar"))
        .arg("ctl")
        .arg("--socket")
        .arg(s)
        .args(["--json", "history", "h", "--follow"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the follower");
    let stdout = follower.stdout.take().expect("stdout");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let mut seen = Vec::new();
    // The follower prints the retained events, then new ones as they come,
    // while every turn prunes older ones.
    for i in 0..6 {
        sc.prompt("h", &format!("echo later {i}"))
            .await
            .expect("prompt");
    }
    let wanted = "echo later 5";
    let found = tokio::time::timeout(common::PATIENCE, async {
        while let Some(line) = lines.next_line().await.expect("read") {
            let event: Value = serde_json::from_str(&line).expect("JSON line");
            let done = event["content"]["text"] == wanted;
            seen.push(event);
            if done {
                return true;
            }
        }
        false
    })
    .await
    .expect("the follower printed the last turn in time");
    assert!(found, "the follower stopped early: {seen:?}");
    let sequences: Vec<u64> = seen.iter().filter_map(|e| e["sequence"].as_u64()).collect();
    assert!(
        sequences.windows(2).all(|w| w[0] < w[1]),
        "in order, no duplicates: {sequences:?}"
    );
    assert_eq!(ctl(s, &["sessions", "delete", "h"]).await.code, 0);
    let status = tokio::time::timeout(common::PATIENCE, follower.wait())
        .await
        .expect("the follower ends with the session")
        .expect("wait");
    assert!(status.success(), "{status:?}");
}

/// `sessions unload` stops the adapter; `permissions list` shows pending
/// requests with their options.
#[tokio::test]
async fn ctl_unloads_and_lists_pending_permissions() {
    let mut sc = Sidecar::start(Backend::SqliteFile).await;
    let s = sc.socket.clone();
    sc.open("u", "echo").await;
    sc.prompt("u", "echo hi").await.expect("prompt");
    assert_eq!(sc.live_adapters().await, 1);
    let out = ctl(&s, &["sessions", "unload", "u"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("unloaded u"), "{}", out.stdout);
    assert_eq!(sc.live_adapters().await, 0);

    let out = ctl(&s, &["permissions", "list", "u"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("no pending"), "{}", out.stdout);

    sc.open_with_policy("w", "echo", "ask").await;
    sc.ok(
        "sessions/subscribe",
        serde_json::json!({"sessionId": "w", "after": 0}),
    )
    .await;
    let client = sc.client.clone();
    let turn = tokio::spawn(async move {
        client
            .call(
                "sessions/prompt",
                serde_json::json!({"sessionId": "w", "content": [{"type": "text", "text": "permission"}]}),
            )
            .await
    });
    let (_, note) = sc
        .next_note(|m, p| m == "sessions/event" && p["event"]["type"] == "permission_request")
        .await;
    let request_id = note["event"]["requestId"].as_str().expect("id").to_owned();
    let out = ctl(&s, &["--json", "permissions", "list", "w"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let listed = &json_lines(&out.stdout)[0]["requests"];
    assert_eq!(listed[0]["requestId"], request_id.as_str());
    let options: Vec<&str> = listed[0]["options"]
        .as_array()
        .expect("options")
        .iter()
        .filter_map(|o| o["optionId"].as_str())
        .collect();
    assert!(!options.is_empty(), "{listed}");
    let out = ctl(&s, &["permissions", "list", "w"]).await;
    assert!(out.stdout.contains(&request_id), "{}", out.stdout);
    assert!(out.stdout.contains(options[0]), "{}", out.stdout);
    let out = ctl(
        &s,
        &["permissions", "respond", "w", &request_id, options[0]],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    tokio::time::timeout(common::PATIENCE, turn)
        .await
        .expect("the turn ends")
        .expect("join")
        .expect("the turn succeeds");
}
