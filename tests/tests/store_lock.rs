//! A second sidecar on the same store is refused with a typed error, and the
//! first keeps serving with its committed history intact.

mod common;

use common::{text_of, Backend, Sidecar};
use serde_json::json;

async fn second_sidecar_is_refused(backend: Backend) {
    let mut sc = Sidecar::start(backend).await;
    sc.open("s", "echo").await;
    sc.prompt("s", "echo kept").await.expect("a committed turn");
    let root = sc.dir.path();
    let config = json!({
        "database": sc.database.clone(),
        "socket": root.join("second.sock"),
        "secrets": {"keyFile": root.join("secrets.key")},
    });
    let out = common::serve_until_exit(&config).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("store_locked"), "{stderr}");
    assert!(!root.join("second.sock").exists());
    assert!(sc.is_running());
    let history = sc.history("s").await;
    assert_eq!(text_of(&history[1]), "kept");
    sc.prompt("s", "echo still").await.expect("still serving");
}

all_backends!(second_sidecar_is_refused);

/// A descriptor limit below what `limits.host.maxConnections` needs is
/// warned about at start; the sidecar still serves.
#[tokio::test]
async fn a_low_descriptor_limit_is_warned_about() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes only into the struct we pass.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    let over = u32::try_from(limit.rlim_cur.saturating_add(1)).unwrap_or(u32::MAX);
    let options = common::Options {
        limits: json!({"host": {"maxConnections": over}}),
        ..Default::default()
    };
    let mut sc = Sidecar::start_with(Backend::SqliteFile, options).await;
    let stderr = std::fs::read_to_string(sc.dir.path().join("sidecar.stderr")).expect("stderr");
    assert!(stderr.contains("RLIMIT_NOFILE"), "{stderr}");
    assert!(sc.is_running());
    sc.ok("vm/status", json!({})).await;
}

/// Another process that opens and closes the database file while the
/// sidecar runs (an operator's `sqlite3`, a backup, this harness) never
/// takes the WAL away from it: every commit made meanwhile and after is
/// seen by the next reader and survives a kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_in_another_process_never_loses_later_commits() {
    let sc = Sidecar::start(Backend::SqliteFile).await;
    sc.open("s", "echo").await;
    sc.prompt("s", "echo before")
        .await
        .expect("a committed turn");
    // A start after a kill, as a host's restart would be.
    let sc = sc.crash(common::Options::default()).await;
    let sql = "SELECT count(*) AS n FROM agentos_core_prompts WHERE session_id = 's'";
    let count = |rows: Vec<serde_json::Value>| rows[0]["n"].as_i64().expect("a count");
    // Turns commit while another process opens, reads and closes the file.
    let (client, _notes) = sc.connect().await;
    let turns = tokio::spawn(async move {
        for i in 0..20 {
            let params = serde_json::json!({"sessionId": "s", "content": [{"type": "text", "text": format!("echo t{i}")}]});
            client
                .call("sessions/prompt", params)
                .await
                .expect("a committed turn");
        }
    });
    while !turns.is_finished() {
        sc.stored(sql).await;
    }
    turns.await.expect("the turns");
    assert_eq!(count(sc.stored(sql).await), 21);
    let sc = sc.crash(common::Options::default()).await;
    assert_eq!(count(sc.stored(sql).await), 21);
    let history = sc.history("s").await;
    let texts: Vec<&str> = history.iter().map(text_of).collect();
    assert!(texts.contains(&"t19"), "{texts:?}");
}
