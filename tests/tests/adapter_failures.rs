//! Adapter failures through the real binary: an agent that exits mid-turn,
//! writes garbage or an oversize line, answers with an invalid stop reason,
//! or cannot be started. Each fails the turn with a typed error while the
//! sidecar stays up and committed history stays intact.

mod common;

use common::{data_code, kinds, text_of, Backend, Options, Sidecar};
use serde_json::json;

fn options() -> Options {
    Options {
        limits: json!({"acp": {"maxReadLineBytes": 65536}}),
        agents: json!({"missing": {"command": "agentos-no-such-agent-command"}}),
        ..Options::default()
    }
}

async fn prompt_err(
    sc: &Sidecar,
    session: &str,
    text: &str,
) -> agentos_protocol::host::ErrorObject {
    match sc.prompt(session, text).await {
        Ok(v) => panic!("{text} unexpectedly succeeded: {v}"),
        Err(agentos_client::ctl::ClientError::Rpc(e)) => e,
        Err(e) => panic!("{text} failed without an RPC error: {e}"),
    }
}

async fn exit_mid_turn_then_restore(backend: Backend) {
    let mut sc = Sidecar::start_with(backend, options()).await;
    for agent in ["echo", "loader", "resumer"] {
        sc.open(agent, agent).await;
        sc.prompt(agent, "echo first").await.expect("prompt");
        let e = prompt_err(&sc, agent, "exit_mid_turn").await;
        assert_eq!(e.code, -32000);
        assert_eq!(data_code(&e), "adapter_exited", "{agent}: {e:?}");
        let (_, exited) = sc
            .next_note(|m, p| m == "sessions/agentExited" && p["sessionId"] == agent)
            .await;
        assert_eq!(exited["exitCode"], 3);
        let r = sc.prompt(agent, "echo again").await.expect("restored");
        assert_eq!(r["stopReason"], "end_turn");
        let h = sc.history(agent).await;
        let texts: Vec<&str> = h.iter().map(text_of).collect();
        assert!(texts.contains(&"first"), "{agent}: {texts:?}");
        assert!(
            !texts.contains(&"about to exit"),
            "{agent}: partial text stored"
        );
        assert_eq!(texts.last(), Some(&"again"), "{agent}");
    }
}

async fn protocol_errors_fail_the_turn_only(backend: Backend) {
    let mut sc = Sidecar::start_with(backend, options()).await;
    sc.open("s1", "echo").await;
    sc.prompt("s1", "echo kept").await.expect("prompt");
    let e = prompt_err(&sc, "s1", "garbage").await;
    assert_eq!(data_code(&e), "acp_protocol_error", "{e:?}");
    sc.prompt("s1", "echo between").await.expect("usable again");
    let e = prompt_err(&sc, "s1", "oversize 200000").await;
    assert_eq!(data_code(&e), "acp_protocol_error", "{e:?}");
    assert_eq!(
        e.data.as_ref().map(|d| d["setting"].clone()),
        Some(serde_json::json!("limits.acp.maxReadLineBytes")),
        "{e:?}"
    );
    let e = prompt_err(&sc, "s1", "bad_stop").await;
    assert_eq!(data_code(&e), "invalid_stop_reason", "{e:?}");
    assert!(sc.is_running());
    let r = sc.prompt("s1", "echo last").await.expect("usable again");
    assert_eq!(r["stopReason"], "end_turn");
    let h = sc.history("s1").await;
    let agent_texts: Vec<&str> = h
        .iter()
        .filter(|e| e["type"] == "agent_message_chunk")
        .map(text_of)
        .collect();
    assert_eq!(agent_texts, ["kept", "between", "last"]);
    let user: Vec<&str> = h
        .iter()
        .filter(|e| e["type"] == "user_message_chunk")
        .map(text_of)
        .collect();
    assert_eq!(
        user,
        [
            "echo kept",
            "garbage",
            "echo between",
            "oversize 200000",
            "bad_stop",
            "echo last"
        ]
    );
}

async fn an_agent_that_cannot_start(backend: Backend) {
    let sc = Sidecar::start_with(backend, options()).await;
    sc.open("s1", "missing").await;
    let e = prompt_err(&sc, "s1", "echo hi").await;
    assert_eq!(e.code, -32000);
    assert_eq!(data_code(&e), "adapter_spawn_failed", "{e:?}");
    assert_eq!(sc.live_adapters().await, 0);
    // The session itself is intact and the sidecar keeps serving.
    let s = sc.ok("sessions/get", json!({"sessionId": "s1"})).await;
    assert_eq!(s["session"]["sessionId"], "s1");
    assert!(
        kinds(&sc.history("s1").await).is_empty(),
        "nothing is stored for a prompt that never started"
    );
    sc.open("s2", "echo").await;
    sc.prompt("s2", "echo fine")
        .await
        .expect("other sessions work");
}

both_backends!(
    exit_mid_turn_then_restore,
    protocol_errors_fail_the_turn_only,
    an_agent_that_cannot_start,
);
