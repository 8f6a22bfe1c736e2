//! Agents are untrusted code: each test plays a hostile agent (the fake
//! agent's probe commands) against the real binary and checks the refusal,
//! with the sidecar up and its committed history intact afterwards.

mod common;

use std::path::{Path, PathBuf};

use common::{text_of, Backend, Options, Sidecar};
use serde_json::{json, Value};

/// The text of the last agent message of `session`.
async fn last_text(sc: &Sidecar, session: &str) -> String {
    let history = sc.history(session).await;
    let last = history
        .iter()
        .rev()
        .find(|e| e["type"] == "agent_message_chunk")
        .expect("an agent message");
    text_of(last).to_owned()
}

/// Runs one probe turn and answers the agent's text.
async fn probe(sc: &Sidecar, session: &str, text: &str) -> String {
    sc.prompt(session, text).await.expect("the probe turn");
    last_text(sc, session).await
}

/// Committed data is intact and the sidecar answers: the whole history of
/// `session` reads back and a new turn still works.
async fn still_serving(sc: &mut Sidecar, session: &str, turns_before: usize) {
    assert!(sc.is_running(), "the sidecar is up");
    sc.prompt(session, "echo after")
        .await
        .expect("a later turn");
    let history = sc.history(session).await;
    let users = history
        .iter()
        .filter(|e| e["type"] == "user_message_chunk")
        .count();
    assert_eq!(users, turns_before + 1, "every committed turn is kept");
    assert_eq!(last_text(sc, session).await, "after");
}

/// Whether `pid` names a live (not zombie) process.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

fn background_pid(text: &str) -> u32 {
    text.strip_prefix("background ")
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("the agent started no background child: {text}"))
}

async fn eventually_dead(pid: u32) {
    common::eventually(
        &format!("process {pid} is gone"),
        || async move { !alive(pid) },
    )
    .await;
}

#[tokio::test]
async fn the_agent_gets_an_allowlisted_environment() {
    let options = Options {
        env: vec![
            ("AWS_SECRET_ACCESS_KEY".into(), "sidecar-secret".into()),
            ("LANG".into(), "C.UTF-8".into()),
        ],
        agents: json!({"echo": {"env": {"REGISTRY_VAR": "r"}}}),
        ..Options::default()
    };
    let mut sc = Sidecar::start_with(Backend::SqliteFile, options).await;
    sc.ok(
        "sessions/open",
        json!({"sessionId": "s", "agent": "echo", "env": {"SESSION_VAR": "s"}}),
    )
    .await;
    let env: Value = serde_json::from_str(&probe(&sc, "s", "env").await).expect("env JSON");
    let names: Vec<&str> = env
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert!(
        env.get("AWS_SECRET_ACCESS_KEY").is_none(),
        "the sidecar's secret reached the agent: {names:?}"
    );
    for name in &names {
        assert!(
            [
                "PATH",
                "HOME",
                "LANG",
                "TERM",
                "TMPDIR",
                "AGENTOS_FAKE_AGENT_LOG",
                "REGISTRY_VAR",
                "SESSION_VAR"
            ]
            .contains(name),
            "{name} is not on the allowlist"
        );
    }
    assert_eq!(env["LANG"], "C.UTF-8");
    assert_eq!(env["REGISTRY_VAR"], "r");
    assert_eq!(env["SESSION_VAR"], "s");
    // agents/list names the registry's variables but never their values.
    let agents = sc.ok("agents/list", json!({})).await;
    let echo = agents["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .find(|a| a["id"] == "echo")
        .expect("echo")
        .clone();
    assert!(echo.get("env").is_none(), "{echo}");
    let listed: Vec<&str> = echo["envNames"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(listed.contains(&"REGISTRY_VAR"), "{listed:?}");
    assert!(!agents.to_string().contains("sidecar-secret"));
    still_serving(&mut sc, "s", 1).await;
}

#[tokio::test]
async fn each_session_runs_in_its_own_directory() {
    let mut sc = Sidecar::start(Backend::SqliteFile).await;
    let a = sc.open("a/..", "echo").await;
    let b = sc.open("b", "echo").await;
    // Opened without cwd: each gets its own VFS directory.
    assert_eq!(a["cwd"], "/home/agentos/sessions/a%2F%2E%2E");
    assert_eq!(b["cwd"], "/home/agentos/sessions/b");
    let cwd_a = PathBuf::from(probe(&sc, "a/..", "cwd").await);
    let cwd_b = PathBuf::from(probe(&sc, "b", "cwd").await);
    let sessions = sc.sessions_dir();
    assert_eq!(sessions, sc.dir.path().join("sessions"));
    assert_eq!(cwd_a, sessions.join("a%2F%2E%2E/work"));
    assert_eq!(cwd_b, sessions.join("b/work"));
    assert_ne!(cwd_a, std::env::current_dir().expect("our cwd"));
    // In the VFS too: what one writes in its default cwd the other cannot read.
    let vfs_note = "/home/agentos/sessions/a%2F%2E%2E/n.txt";
    assert_eq!(
        probe(&sc, "a/..", &format!("fs_write {vfs_note} mine")).await,
        "wrote"
    );
    let from_b = probe(&sc, "b", &format!("fs_read {vfs_note}")).await;
    assert!(from_b.contains("EACCES"), "{from_b}");
    // What one session writes in its directory the other does not see.
    let note = cwd_a.join("note.txt");
    assert_eq!(
        probe(&sc, "a/..", &format!("host_write {} mine", note.display())).await,
        "wrote"
    );
    let from_b = probe(&sc, "b", &format!("host_read {}", note.display())).await;
    assert!(from_b.starts_with("error:"), "{from_b}");
    still_serving(&mut sc, "b", 3).await;
    // Deleting a session removes what its adapter left on the host; the
    // other session's directory stays.
    let dir_a = cwd_a.parent().expect("session dir").to_path_buf();
    assert!(note.exists());
    sc.ok("sessions/delete", json!({"sessionId": "a/.."})).await;
    assert!(!dir_a.exists(), "{} is left behind", dir_a.display());
    assert!(sessions.join("b/work").exists());
}

/// Files a hostile agent goes for: the database, the config, a secret
/// outside every session directory; and a write into the data directory.
async fn hostile_agent_reaches_nothing(backend: Backend) {
    let mut sc = Sidecar::start(backend).await;
    let status = sc.ok("vm/status", json!({})).await;
    assert_eq!(status["confinement"]["active"], true, "{status}");
    assert_eq!(status["confinement"]["mechanism"], "landlock");
    let root = sc.dir.path().to_path_buf();
    let secret = root.join("secret/key");
    std::fs::create_dir_all(secret.parent().expect("parent")).expect("secret dir");
    std::fs::write(&secret, "top secret").expect("secret");
    std::fs::write(root.join("config.json"), "{}").expect("config");
    sc.open("h", "echo").await;
    let mut turns = 0;
    let targets: [&Path; 4] = [
        &root.join("vm.sqlite"),
        &root.join("config.json"),
        &secret,
        &root.join("sidecar.stderr"),
    ];
    for target in targets {
        let text = probe(&sc, "h", &format!("host_read {}", target.display())).await;
        turns += 1;
        assert!(
            text.contains("Permission denied"),
            "{} was readable: {text}",
            target.display()
        );
    }
    let planted = root.join("planted");
    let text = probe(&sc, "h", &format!("host_write {} x", planted.display())).await;
    turns += 1;
    assert!(text.contains("Permission denied"), "{text}");
    assert!(!planted.exists());
    // The sockets are out of reach: no Unix socket can be made at all.
    let text = probe(&sc, "h", &format!("host_connect {}", sc.socket.display())).await;
    turns += 1;
    assert!(
        text.contains("Permission denied"),
        "the host socket: {text}"
    );
    // The sidecar's own environment is out of reach through /proc too.
    let text = probe(&sc, "h", &format!("host_read /proc/{}/environ", sc.pid())).await;
    turns += 1;
    assert!(text.starts_with("error:"), "{text}");
    // Its own directory works.
    let text = probe(&sc, "h", "host_write own.txt fine").await;
    turns += 1;
    assert_eq!(text, "wrote");
    assert_eq!(
        std::fs::read_to_string(sc.sessions_dir().join("h/work/own.txt")).expect("own file"),
        "fine"
    );
    assert_eq!(
        std::fs::read_to_string(&secret).expect("secret"),
        "top secret"
    );
    still_serving(&mut sc, "h", turns).await;
}

both_backends!(hostile_agent_reaches_nothing);

/// The published example agent, from its npm install, under the default
/// policy.
async fn example_agent_works_confined(backend: Backend) {
    let mut sc = Sidecar::start(backend).await;
    let status = sc.ok("vm/status", json!({})).await;
    assert_eq!(status["confinement"]["active"], true, "{status}");
    assert_eq!(status["confinement"]["unconfinedAgents"], json!([]));
    sc.open("ex", "example").await;
    let result = sc.prompt("ex", "hello").await.expect("the example turn");
    assert_eq!(result["stopReason"], "end_turn", "{result}");
    assert!(sc.is_running());
}

both_backends!(example_agent_works_confined);

#[tokio::test]
async fn a_registry_entry_may_turn_confinement_off() {
    let options = Options {
        agents: json!({"free": {"command": common::binary("agentos-fake-agent"),
                                "sandbox": {"enabled": false}}}),
        ..Options::default()
    };
    let mut sc = Sidecar::start_with(Backend::SqliteFile, options).await;
    let status = sc.ok("vm/status", json!({})).await;
    assert_eq!(status["confinement"]["unconfinedAgents"], json!(["free"]));
    let stderr = std::fs::read_to_string(sc.dir.path().join("sidecar.stderr")).expect("stderr");
    assert!(stderr.contains("runs unconfined"), "{stderr}");
    sc.open("f", "free").await;
    let config = sc.dir.path().join("config.json");
    std::fs::write(&config, "readable").expect("file");
    let text = probe(&sc, "f", &format!("host_read {}", config.display())).await;
    assert_eq!(text, "readable");
    still_serving(&mut sc, "f", 1).await;
}

#[tokio::test]
async fn a_background_child_dies_with_its_agent_on_unload() {
    let mut sc = Sidecar::start(Backend::SqliteFile).await;
    sc.open("bg", "echo").await;
    let pid = background_pid(&probe(&sc, "bg", "background").await);
    assert!(alive(pid), "the background child runs while its agent does");
    sc.ok("sessions/unload", json!({"sessionId": "bg"})).await;
    eventually_dead(pid).await;
    still_serving(&mut sc, "bg", 1).await;
}

#[tokio::test]
async fn a_background_child_dies_after_a_failed_turn() {
    let mut sc = Sidecar::start(Backend::SqliteFile).await;
    sc.open("bg", "echo").await;
    let pid = background_pid(&probe(&sc, "bg", "background").await);
    // The agent exits mid-turn: the turn fails and its group goes.
    let failed = sc.prompt("bg", "exit_mid_turn").await;
    assert!(failed.is_err(), "{failed:?}");
    eventually_dead(pid).await;
    assert!(sc.is_running());
}

#[tokio::test]
async fn a_background_child_dies_when_the_sidecar_is_terminated() {
    let mut sc = Sidecar::start(Backend::SqliteFile).await;
    sc.open("bg", "echo").await;
    let pid = background_pid(&probe(&sc, "bg", "background").await);
    let status = sc.terminate().await;
    assert!(status.success(), "{status:?}");
    eventually_dead(pid).await;
}

#[tokio::test]
async fn a_uid_outside_the_allow_list_is_refused() {
    // The test runs under one uid; allowing only another refuses it.
    let options = Options {
        config: json!({"allowedUids": [4242]}),
        ..Options::default()
    };
    let mut sc = Sidecar::start_with(Backend::SqliteFile, options).await;
    let refused = sc.call("vm/status", json!({})).await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(sc.is_running(), "a refused peer does not stop the sidecar");
    let stderr = std::fs::read_to_string(sc.dir.path().join("sidecar.stderr")).expect("stderr");
    assert!(stderr.contains("allowedUids"), "{stderr}");
}
