//! Shared scaffolding of the session service tests: the fake agent's
//! registry, a service over a migrated database, and small helpers. Each
//! test file uses part of it.
#![allow(dead_code, unused_imports)]

pub use std::collections::BTreeMap;
pub use std::path::{Path, PathBuf};
pub use std::sync::Arc;

pub use agentos_protocol::session::{Actor, PermissionPolicy};
pub use agentos_schema::{migrate_all, SharedDatabase, SqlValue, Statement};
pub use agentos_sidecar::config::{AcpLimits, AgentSpec, SqliteLimits};
pub use agentos_sidecar::runs::{Executors, Runs, RunsConfig};
pub use agentos_sidecar::sessions::OpenSession;
pub use agentos_sidecar::sessions::{
    CancelStatus, NotPendingReason, PermissionAnswer, PromptOutcome, SessionError, SessionInfo,
    SessionState, SessionStore, Sessions,
};
pub use agentos_sidecar::work::{TurnError, TurnExecutor, TurnOwner, TurnRequest, Turns, WhenBusy};
pub use agentos_storage::ars_server::ArsServerOptions;
pub use agentos_storage::testing::{
    actor_uds_with, all_backends, CapturedLog, CountingDatabase, FaultyDatabase,
};
pub use serde_json::{json, Value};

/// Generous bound for anything that should happen; only to avoid hangs.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

pub fn fake_agent() -> PathBuf {
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

pub struct Env {
    pub sessions: Sessions,
    pub state: tempfile::TempDir,
    pub db: SharedDatabase,
}

pub fn agents(state: &Path) -> BTreeMap<String, AgentSpec> {
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

pub async fn env_with(db: SharedDatabase, limits: AcpLimits) -> Env {
    migrate_all(&*db).await.expect("migrate");
    let state = tempfile::tempdir().expect("state dir");
    let sessions = Sessions::new(
        SessionStore::new(db.clone()),
        agents(state.path()),
        limits,
        None,
    );
    sessions.bootstrap().await.expect("bootstrap");
    Env {
        sessions,
        state,
        db,
    }
}

/// The one turn entry over `sessions`, with the run queue it records turns
/// in (its dispatcher not started: these turns start at once or not at all).
pub fn turns_over(sessions: &Sessions, db: &SharedDatabase) -> Turns {
    let runs = Runs::new(db.clone(), RunsConfig::default());
    runs.set_executors(Executors {
        agent: TurnExecutor::new(sessions.clone()),
        script: None,
    });
    Turns::new(runs, sessions.clone())
}

/// A keyed host prompt through the one turn entry (refused while busy), as
/// the session service's error.
pub async fn keyed(
    turns: &Turns,
    sid: &str,
    t: &str,
    key: &str,
) -> Result<PromptOutcome, SessionError> {
    let request = TurnRequest {
        content: text(t),
        key: Some(key.into()),
        actor: user(),
        owner: TurnOwner::default(),
        when_busy: WhenBusy::Refuse,
    };
    let session_error = |e: TurnError| match e {
        TurnError::Session(e) => e,
        other => panic!("a queue error: {other}"),
    };
    let answer = turns.submit(sid, request).await.map_err(session_error)?;
    turns.outcome(answer).await.map_err(session_error)
}

pub fn open(id: &str, agent: &str) -> OpenSession {
    OpenSession {
        session_id: Some(id.into()),
        agent: agent.into(),
        ..Default::default()
    }
}

pub fn user() -> Actor {
    Actor::User {
        account: None,
        signer: None,
    }
}

pub fn text(t: &str) -> Vec<Value> {
    vec![json!({"type": "text", "text": t})]
}

pub async fn prompt(env: &Env, sid: &str, t: &str) -> Result<PromptOutcome, SessionError> {
    env.sessions.prompt(sid, text(t), user()).await
}

pub async fn history(env: &Env, sid: &str) -> Vec<Value> {
    let page = env
        .sessions
        .history(sid, None, Some(0), Some(10_000))
        .await
        .expect("history");
    page.events.iter().map(|e| e.to_public()).collect()
}

/// The first pending permission request of a waiting session.
pub fn pending_request(info: &SessionInfo) -> Option<&str> {
    match &info.state {
        SessionState::Waiting {
            requests: Some(requests),
            ..
        } => requests.first().map(String::as_str),
        _ => None,
    }
}

pub fn prompt_log(env: &Env) -> Vec<Value> {
    std::fs::read_to_string(env.state.path().join("prompts.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("log line"))
        .collect()
}

pub fn inspected_blocks(result: &PromptOutcome) -> Vec<Value> {
    let text = result.message.content[0]["text"]
        .as_str()
        .expect("inspect text");
    serde_json::from_str(text).expect("inspect json")
}
