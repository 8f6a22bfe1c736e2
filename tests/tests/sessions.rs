//! Session lifecycle and turns through the real binary: initialize, open,
//! get/list/delete/unload, the agent registry, that read-only methods never
//! start an adapter, what a turn stores, idempotency keys, busy and cancel,
//! and history cursors. Storage tests run on both backends.

mod common;

use common::{data_code, kinds, text_of, Backend, Sidecar};
use serde_json::json;

async fn initialize_reports_identity_and_refuses_other_versions(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    let init = sc.ok("initialize", json!({"protocolVersion": 1})).await;
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["sidecar"]["name"], "agentos-sidecar");
    assert_eq!(init["database"]["type"], backend.type_name());
    assert!(init["limits"]["acp"]["maxHistoryPageEntries"].is_u64());
    assert!(init["limits"]["host"]["maxFrameBytes"].is_u64());
    let e = sc.err("initialize", json!({"protocolVersion": 2})).await;
    assert_eq!(e.code, -32000);
    assert_eq!(data_code(&e), "unsupported_protocol_version");
}

async fn open_is_idempotent_and_conflicts_are_typed(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    let a = sc
        .ok(
            "sessions/open",
            json!({"sessionId": "s1", "agent": "echo", "cwd": "/w"}),
        )
        .await;
    assert_eq!(a["sessionId"], "s1");
    assert_eq!(a["agent"], "echo");
    assert_eq!(a["cwd"], "/w");
    assert_eq!(a["state"]["status"], "idle");
    let b = sc
        .ok(
            "sessions/open",
            json!({"sessionId": "s1", "agent": "echo", "cwd": "/w"}),
        )
        .await;
    assert_eq!(a["createdAt"], b["createdAt"]);
    let e = sc
        .err(
            "sessions/open",
            json!({"sessionId": "s1", "agent": "loader"}),
        )
        .await;
    assert_eq!((e.code, data_code(&e)), (-32000, "session_conflict"));
    let e = sc
        .err(
            "sessions/open",
            json!({"sessionId": "s1", "agent": "echo", "cwd": "/other"}),
        )
        .await;
    assert_eq!((e.code, data_code(&e)), (-32000, "session_conflict"));
    let e = sc
        .err(
            "sessions/open",
            json!({"sessionId": "s2", "agent": "nobody"}),
        )
        .await;
    assert_eq!(data_code(&e), "agent_not_found");
    assert_eq!(
        sc.live_adapters().await,
        0,
        "open must not start an adapter"
    );
}

async fn get_list_delete_and_unload(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    for i in 0..5 {
        sc.open(&format!("s{i}"), "echo").await;
    }
    let got = sc.ok("sessions/get", json!({"sessionId": "s3"})).await;
    assert_eq!(got["session"]["sessionId"], "s3");
    // Keyset pages of two: every session exactly once, then no cursor.
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let mut params = json!({"limit": 2});
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let page = sc.ok("sessions/list", params).await;
        pages += 1;
        for s in page["sessions"].as_array().expect("sessions") {
            seen.push(s["sessionId"].as_str().expect("id").to_owned());
        }
        match page.get("nextCursor").and_then(|c| c.as_str()) {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
        assert!(pages < 10, "the list never ends");
    }
    seen.sort();
    assert_eq!(seen, ["s0", "s1", "s2", "s3", "s4"]);
    assert_eq!(pages, 3);

    sc.prompt("s1", "echo kept").await.expect("prompt");
    assert_eq!(sc.live_adapters().await, 1);
    sc.ok("sessions/unload", json!({"sessionId": "s1"})).await;
    assert_eq!(sc.live_adapters().await, 0);
    let history = sc.history("s1").await;
    assert_eq!(
        kinds(&history),
        ["user_message_chunk", "agent_message_chunk"]
    );
    assert_eq!(text_of(&history[1]), "kept");

    let before = sc.ok("vm/status", json!({})).await;
    assert_eq!(before["sessions"]["used"], 5);
    assert_eq!(before["prompts"]["used"], 1);
    // Every limit is listed, with its use where one is counted.
    let limits = before["limits"].as_array().expect("limits");
    let entry = |setting: &str| {
        limits
            .iter()
            .find(|l| l["setting"] == setting)
            .unwrap_or_else(|| panic!("{setting} is not listed: {limits:?}"))
            .clone()
    };
    for setting in [
        "limits.acp.maxReadLineBytes",
        "limits.acp.stdoutBufferByteLimit",
        "limits.acp.maxCompletedMessageBytes",
        "limits.acp.maxTurnOutputBytes",
        "limits.acp.maxPromptBytes",
        "limits.acp.maxPromptBlocks",
        "limits.acp.maxFallbackContinuationBytes",
        "limits.acp.maxSessionHistoryBytes",
        "limits.acp.maxSessionHistoryEvents",
        "limits.acp.maxHistoryPageEntries",
        "limits.acp.maxSessionListEntries",
        "limits.acp.maxPromptsPerSession",
        "limits.acp.maxPendingPermissionsPerSession",
        "limits.acp.maxPermissionOutcomesPerSession",
        "limits.sqlite.maxResultBytes",
        "limits.host.maxFrameBytes",
        "limits.host.maxConnections",
        "limits.host.maxQueuedBytesPerConnection",
        "limits.host.stalledWriteTimeoutMs",
        "limits.host.maxSubscriptionsPerConnection",
        "limits.sqlite.maxSocketFrameBytes",
        "limits.acp.maxQueuedStdinBytes",
        "limits.acp.stalledStdinTimeoutMs",
        "limits.acp.maxReadTextFileBytes",
        "limits.acp.maxStderrBytesPerSecond",
        "limits.fs.maxFileBytes",
    ] {
        let e = entry(setting);
        assert!(e["limit"].as_u64().is_some_and(|l| l > 0), "{e}");
    }
    assert_eq!(entry("limits.acp.maxTurnOutputBytes")["limit"], 256 << 20);
    assert_eq!(entry("limits.acp.maxSessionsPerVm")["used"], 5);
    assert_eq!(entry("limits.acp.maxPromptsPerVm")["used"], 1);
    assert_eq!(entry("limits.acp.maxPendingPermissionsPerVm")["used"], 0);
    assert_eq!(entry("limits.acp.maxPermissionOutcomesPerVm")["used"], 0);
    // The root and the sessions' directories.
    assert!(entry("limits.fs.maxInodes")["used"].as_u64() >= Some(1));
    assert!(entry("limits.fs.maxTotalBytes")["used"].is_u64());
    assert!(entry("limits.acp.maxTurnOutputBytes").get("used").is_none());
    sc.ok("sessions/delete", json!({"sessionId": "s1"})).await;
    let after = sc.ok("vm/status", json!({})).await;
    assert_eq!(after["sessions"]["used"], 4);
    assert_eq!(after["prompts"]["used"], 0);
    let e = sc.err("sessions/get", json!({"sessionId": "s1"})).await;
    assert_eq!(data_code(&e), "session_not_found");
    let e = sc.err("sessions/delete", json!({"sessionId": "s1"})).await;
    assert_eq!(data_code(&e), "session_not_found");
}

async fn read_only_methods_never_start_an_adapter(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    sc.open("s1", "echo").await;
    let id = json!({"sessionId": "s1"});
    sc.ok("sessions/get", id.clone()).await;
    sc.ok("sessions/list", json!({})).await;
    sc.ok("sessions/history", id.clone()).await;
    sc.ok("sessions/getConfig", id.clone()).await;
    sc.ok("sessions/capabilities", id.clone()).await;
    sc.ok("sessions/agentInfo", id.clone()).await;
    sc.ok("agents/list", json!({})).await;
    assert_eq!(sc.live_adapters().await, 0);
    assert!(sc.delivered_prompts().is_empty());
}

#[tokio::test]
async fn agents_list_returns_the_registry() {
    let sc = Sidecar::start(Backend::SqliteFile).await;
    let agents = sc.ok("agents/list", json!({})).await;
    let mut ids: Vec<&str> = agents["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| a["id"].as_str().expect("id"))
        .collect();
    ids.sort();
    assert_eq!(ids, ["echo", "example", "loader", "resumer"]);
    let loader = agents["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .find(|a| a["id"] == "loader")
        .expect("loader");
    assert_eq!(loader["args"][0], "--load-session");
}

async fn a_turn_answers_after_commit_and_stores_events(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    sc.open("s1", "echo").await;
    let r = sc.prompt("s1", "echo hello").await.expect("prompt");
    assert_eq!(r["sessionId"], "s1");
    assert_eq!(r["stopReason"], "end_turn");
    assert!(r["promptId"].as_str().is_some_and(|p| !p.is_empty()));
    assert_eq!(r["message"]["role"], "agent");
    assert_eq!(r["message"]["content"][0]["text"], "hello");
    // Answered after the terminal commit: history is complete right away.
    let h = sc.history("s1").await;
    assert_eq!(kinds(&h), ["user_message_chunk", "agent_message_chunk"]);
    assert_eq!(text_of(&h[0]), "echo hello");
    assert_eq!(h[0]["actor"]["kind"], "user");
    assert_eq!(text_of(&h[1]), "hello");
    assert_eq!(h[1]["actor"]["kind"], "agent");
    assert_eq!(h[0]["sequence"], 1);
    assert_eq!(h[1]["sequence"], 2);
    let s = sc.ok("sessions/get", json!({"sessionId": "s1"})).await;
    assert_eq!(s["session"]["latestSequence"], 2);
    assert_eq!(s["session"]["state"]["status"], "idle");
}

async fn stream_is_stored_as_one_coalesced_chunk(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    sc.open("s1", "echo").await;
    let r = sc.prompt("s1", "stream 5").await.expect("prompt");
    assert_eq!(r["message"]["content"][0]["text"], "c0 c1 c2 c3 c4 ");
    let h = sc.history("s1").await;
    assert_eq!(kinds(&h), ["user_message_chunk", "agent_message_chunk"]);
    assert_eq!(text_of(&h[1]), "c0 c1 c2 c3 c4 ");
}

async fn thought_tools_and_plan_are_stored(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    sc.open("s1", "echo").await;
    sc.prompt("s1", "thought pondering").await.expect("thought");
    let h = sc.history("s1").await;
    assert_eq!(
        kinds(&h),
        [
            "user_message_chunk",
            "agent_thought_chunk",
            "agent_message_chunk"
        ]
    );
    assert_eq!(text_of(&h[1]), "pondering");
    assert_eq!(text_of(&h[2]), "pondering");

    sc.open("s2", "echo").await;
    sc.prompt("s2", "tools").await.expect("tools");
    let h = sc.history("s2").await;
    assert_eq!(
        kinds(&h),
        [
            "user_message_chunk",
            "tool_call",
            "tool_call_update",
            "tool_call_update",
            "agent_message_chunk"
        ]
    );
    // Stored unchanged: every native field survives.
    assert_eq!(h[1]["toolCallId"], "call_1");
    assert_eq!(h[1]["title"], "Reading notes");
    assert_eq!(h[1]["kind"], "read");
    assert_eq!(h[1]["status"], "pending");
    assert_eq!(h[1]["locations"], json!([{"path": "/notes.md"}]));
    assert_eq!(h[1]["rawInput"], json!({"path": "/notes.md"}));
    assert_eq!(h[2]["status"], "in_progress");
    assert_eq!(h[3]["status"], "completed");
    assert_eq!(
        h[3]["content"],
        json!([{"type": "content", "content": {"type": "text", "text": "notes read"}}])
    );
    assert_eq!(text_of(&h[4]), "tools done");

    sc.open("s3", "echo").await;
    sc.prompt("s3", "plan").await.expect("plan");
    let h = sc.history("s3").await;
    assert_eq!(kinds(&h), ["user_message_chunk", "plan", "plan"]);
    assert_eq!(h[1]["entries"][0]["status"], "in_progress");
    assert_eq!(h[2]["entries"][0]["status"], "completed");
    assert_eq!(h[2]["entries"][1]["content"], "Report back");
}

fn keyed(text: &str, key: &str) -> serde_json::Value {
    json!({"sessionId": "s1", "content": [{"type": "text", "text": text}], "idempotencyKey": key})
}

async fn idempotency_keys_replay_and_conflict(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    sc.open("s1", "echo").await;
    let first = sc.ok("sessions/prompt", keyed("echo once", "k1")).await;
    let again = sc.ok("sessions/prompt", keyed("echo once", "k1")).await;
    assert_eq!(first["promptId"], again["promptId"]);
    assert_eq!(first["stopReason"], again["stopReason"]);
    assert_eq!(again["message"]["content"][0]["text"], "once");
    assert_eq!(sc.delivered_prompts().len(), 1, "replayed without dispatch");
    assert_eq!(sc.history("s1").await.len(), 2);

    let e = sc
        .err("sessions/prompt", keyed("echo something else", "k1"))
        .await;
    assert_eq!(data_code(&e), "idempotency_conflict");
    let e = sc.err("sessions/prompt", keyed("echo x", "")).await;
    assert_eq!(data_code(&e), "invalid_idempotency_key");
    let e = sc
        .err("sessions/prompt", keyed("echo x", &"k".repeat(257)))
        .await;
    assert_eq!(data_code(&e), "invalid_idempotency_key");
    sc.ok("sessions/prompt", keyed("echo x", &"k".repeat(256)))
        .await;

    let failed = sc.err("sessions/prompt", keyed("fail", "kf")).await;
    assert_eq!(failed.code, -32000);
    let replayed = sc.err("sessions/prompt", keyed("fail", "kf")).await;
    assert_eq!(data_code(&replayed), data_code(&failed));
    assert_eq!(data_code(&failed), "prompt_failed");
    let fails = sc
        .delivered_prompts()
        .iter()
        .filter(|p| p["prompt"][0]["text"] == "fail")
        .count();
    assert_eq!(fails, 1, "a failed keyed prompt is not dispatched again");
}

/// A repeated key while its turn runs waits for that turn and hears its
/// answer (the host door's runs are shown by no feed: the waiter reads the
/// run again when its end is published).
async fn a_repeated_key_waits_for_the_running_turn(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    sc.open("s1", "echo").await;
    let call = |client: agentos_client::ctl::HostClient| async move {
        client
            .call("sessions/prompt", keyed("wait_for_cancel", "kw"))
            .await
    };
    let first = tokio::spawn(call(sc.client.clone()));
    common::eventually("the first prompt is running", || async {
        !sc.delivered_prompts().is_empty()
    })
    .await;
    let second = tokio::spawn(call(sc.client.clone()));
    // The duplicate is waiting, not refused as busy, and not dispatched.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(!second.is_finished(), "the duplicate waits for the turn");
    let c = sc.ok("sessions/cancel", json!({"sessionId": "s1"})).await;
    assert_eq!(c["status"], "cancelled");
    type Call =
        tokio::task::JoinHandle<Result<serde_json::Value, agentos_client::ctl::ClientError>>;
    let answer = |h: Call| async move {
        tokio::time::timeout(common::PATIENCE, h)
            .await
            .expect("the prompt ends")
            .expect("join")
            .expect("a cancelled prompt is a result")
    };
    let (a, b) = (answer(first).await, answer(second).await);
    assert_eq!(a["stopReason"], "cancelled");
    assert_eq!(a["promptId"], b["promptId"]);
    assert_eq!(a["stopReason"], b["stopReason"]);
    assert_eq!(sc.delivered_prompts().len(), 1, "dispatched once");
}

async fn busy_and_cancel(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    sc.open("s1", "echo").await;
    let e = sc.ok("sessions/cancel", json!({"sessionId": "s1"})).await;
    assert_eq!(e["status"], "no_active_prompt");

    let client = sc.client.clone();
    let first = tokio::spawn(async move {
        client
            .call(
                "sessions/prompt",
                json!({"sessionId": "s1", "content": [{"type": "text", "text": "wait_for_cancel"}]}),
            )
            .await
    });
    common::eventually("the first prompt is running", || async {
        let s = sc.ok("sessions/get", json!({"sessionId": "s1"})).await;
        s["session"]["state"]["status"] == "running" && !sc.delivered_prompts().is_empty()
    })
    .await;
    let e = sc
        .prompt("s1", "echo second")
        .await
        .expect_err("second prompt");
    match e {
        agentos_client::ctl::ClientError::Rpc(obj) => assert_eq!(data_code(&obj), "session_busy"),
        other => panic!("unexpected {other}"),
    }
    let c = sc.ok("sessions/cancel", json!({"sessionId": "s1"})).await;
    assert_eq!(c["status"], "cancelled");
    let r = tokio::time::timeout(common::PATIENCE, first)
        .await
        .expect("the first prompt ends")
        .expect("join")
        .expect("a cancelled prompt is a result");
    assert_eq!(r["stopReason"], "cancelled");
    let h = sc.history("s1").await;
    assert_eq!(
        kinds(&h),
        ["user_message_chunk"],
        "the live-only 'waiting' chunk must not be stored"
    );
    let e = sc.ok("sessions/cancel", json!({"sessionId": "s1"})).await;
    assert_eq!(e["status"], "no_active_prompt");
    // The session is usable again.
    sc.prompt("s1", "echo after").await.expect("next prompt");
}

async fn history_cursors(backend: Backend) {
    let sc = Sidecar::start_with(
        backend,
        common::Options {
            limits: json!({"acp": {"maxHistoryPageEntries": 50}}),
            ..Default::default()
        },
    )
    .await;
    sc.open("s1", "echo").await;
    for i in 0..15 {
        sc.prompt("s1", &format!("echo n{i}"))
            .await
            .expect("prompt");
    }
    let e = sc
        .err(
            "sessions/history",
            json!({"sessionId": "s1", "before": 5, "after": 1}),
        )
        .await;
    assert_eq!(data_code(&e), "invalid_history_cursor");
    let e = sc
        .err("sessions/history", json!({"sessionId": "s1", "limit": 51}))
        .await;
    assert_eq!(data_code(&e), "history_limit");
    assert_eq!(
        e.data.as_ref().expect("data")["setting"],
        "limits.acp.maxHistoryPageEntries"
    );
    // Forward pages of ten over thirty events.
    let mut after = 0;
    let mut flags = Vec::new();
    let mut seqs = Vec::new();
    for _ in 0..3 {
        let p = sc
            .ok(
                "sessions/history",
                json!({"sessionId": "s1", "after": after, "limit": 10}),
            )
            .await;
        let events = p["events"].as_array().expect("events");
        assert_eq!(events.len(), 10);
        seqs.extend(events.iter().map(|e| e["sequence"].as_u64().expect("seq")));
        after = seqs[seqs.len() - 1];
        flags.push((p["hasMoreBefore"].clone(), p["hasMoreAfter"].clone()));
    }
    assert_eq!(seqs, (1..=30).collect::<Vec<u64>>());
    assert_eq!(
        flags,
        [
            (json!(false), json!(true)),
            (json!(true), json!(true)),
            (json!(true), json!(false))
        ]
    );
    // Backward from the end.
    let p = sc
        .ok(
            "sessions/history",
            json!({"sessionId": "s1", "before": 31, "limit": 10}),
        )
        .await;
    let seqs: Vec<u64> = p["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["sequence"].as_u64().expect("seq"))
        .collect();
    assert_eq!(seqs, (21..=30).collect::<Vec<u64>>());
    assert_eq!(p["hasMoreBefore"], true);
    assert_eq!(p["hasMoreAfter"], false);
    let p = sc
        .ok(
            "sessions/history",
            json!({"sessionId": "s1", "before": 11, "limit": 10}),
        )
        .await;
    assert_eq!(p["events"][0]["sequence"], 1);
    assert_eq!(p["hasMoreBefore"], false);
    assert_eq!(p["hasMoreAfter"], true);
}

all_backends!(
    initialize_reports_identity_and_refuses_other_versions,
    open_is_idempotent_and_conflicts_are_typed,
    get_list_delete_and_unload,
    read_only_methods_never_start_an_adapter,
    a_turn_answers_after_commit_and_stores_events,
    stream_is_stored_as_one_coalesced_chunk,
    thought_tools_and_plan_are_stored,
    idempotency_keys_replay_and_conflict,
    a_repeated_key_waits_for_the_running_turn,
    busy_and_cancel,
    history_cursors,
);
