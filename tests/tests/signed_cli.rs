//! The signed API's command line against a real sidecar: `keys new`, `call`
//! over the listener and over the host socket, and `secrets rotate-key`,
//! which refuses to run beside a serving sidecar and re-seals every secret
//! under a new key once it is stopped.

mod common;

use std::path::Path;

use common::{binary, Backend, Options, Sidecar, PATIENCE};
use serde_json::{json, Value};
use tokio::process::Command;

async fn run(args: &[&str]) -> (bool, Value, String) {
    let out = tokio::time::timeout(
        PATIENCE,
        Command::new(binary("agentos-sidecar")).args(args).output(),
    )
    .await
    .expect("in time")
    .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (
        out.status.success(),
        value,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[tokio::test]
async fn keys_call_and_rotate_key() {
    let mut sc = Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            config: json!({"http": {"listen": "127.0.0.1:0"}}),
            ..Options::default()
        },
    )
    .await;
    let url = format!("http://{}", sc.ready["http"].as_str().expect("http"));
    let key = sc.dir.path().join("me.key");
    let (ok, made, _) = run(&["keys", "new", "--out", s(&key)]).await;
    assert!(ok);
    let principal = made["principal"].as_str().expect("principal").to_owned();
    assert!(principal.starts_with("z6Mk"), "{principal}");
    // An existing key file is never overwritten.
    let (ok, _, _) = run(&["keys", "new", "--out", s(&key)]).await;
    assert!(!ok);

    let (ok, answer, _) = run(&[
        "call",
        "SetSecret",
        "--key",
        s(&key),
        "--url",
        &url,
        "--json",
        r#"{"name": "apiKey", "value": {"/": {"bytes": "c2VjcmV0LXZhbHVl"}}}"#,
    ])
    .await;
    assert!(ok, "{answer}");
    assert_eq!(answer["status"], 200);
    assert_eq!(answer["response"]["secret"]["hasValue"], true);
    // The same API through the host socket.
    let (ok, answer, _) = run(&[
        "call",
        "ListSecrets",
        "--key",
        s(&key),
        "--socket",
        s(&sc.socket),
    ])
    .await;
    assert!(ok, "{answer}");
    assert_eq!(answer["response"]["secrets"][0]["name"], "apiKey");
    // A refused action exits 1 and still prints the answer.
    let (ok, answer, _) = run(&[
        "call",
        "GetAgent",
        "--key",
        s(&key),
        "--url",
        &url,
        "--json",
        r#"{"agentId": "nope"}"#,
    ])
    .await;
    assert!(!ok);
    assert_eq!(answer["status"], 404);
    assert_eq!(answer["response"]["_"], "Error");

    let config = sc.dir.path().join("vm.json");
    let db = sc.dir.path().join("vm.sqlite");
    let key_file = sc.dir.path().join("secrets.key");
    std::fs::write(
        &config,
        json!({
            "database": {"type": "sqlite_file", "path": db},
            "secrets": {"keyFile": key_file},
        })
        .to_string(),
    )
    .expect("config");
    // Not while the store is served.
    let (ok, _, stderr) = run(&["secrets", "rotate-key", "--config", s(&config)]).await;
    assert!(!ok);
    assert!(stderr.contains("store_locked"), "{stderr}");
    let old_key = std::fs::read(&key_file).expect("key");
    sc.terminate().await;
    let (ok, report, stderr) = run(&["secrets", "rotate-key", "--config", s(&config)]).await;
    assert!(ok, "{stderr}");
    assert_eq!(report["resealed"], 1);
    assert_ne!(report["oldKeyId"], report["newKeyId"]);
    let new_key = std::fs::read(&key_file).expect("key");
    assert_ne!(old_key, new_key);
    assert_eq!(
        std::fs::read(sc.dir.path().join("secrets.key.old")).expect("old"),
        old_key
    );
    let conn = rusqlite::Connection::open(&db).expect("db");
    let ids: Vec<String> = conn
        .prepare("SELECT key_id FROM agentos_core_secrets")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(
        ids,
        vec![report["newKeyId"].as_str().expect("id").to_owned()]
    );
}
