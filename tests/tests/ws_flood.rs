//! `/agents/ws` under a flood, process-wide: many sockets that never read
//! while one account changes its agent as fast as it can. A change is
//! rendered once and shared by every socket it goes to; every socket's
//! queue counts against one budget (`http.ws.maxQueuedBytes`), and past it
//! the sockets furthest behind are closed, while a subscriber that reads
//! gets every change with no gap. An account may hold only so many
//! sockets (`http.ws.maxSocketsPerAccount`).

// Shared with `signed_ws.rs`, which uses all of it.
#[allow(dead_code)]
#[path = "signed_ws/client.rs"]
mod client;
mod common;

use agentos_tests::http::Target;
use agentos_tests::seed::{call, Signer};
use client::Ws;
use common::{Backend, Sidecar};
use serde_json::{json, Value};

const MIB: u64 = 1024 * 1024;

async fn start_with(ws: Value) -> (Sidecar, Target, String) {
    client::start_with(Backend::SqliteFile, ws).await
}

fn definition(prompt: &str) -> Value {
    json!({"name": "Helper", "systemPrompt": prompt, "modelProvider": "openai",
           "model": "gpt-5-mini", "adapter": "echo"})
}

/// 500 sockets subscribed to `account/<A>` and `agents/<X>` that never
/// read, while A sends 2,000 `UpdateAgent` with a 16 KB system prompt.
/// Before, each socket held its own copy of every frame, up to its own
/// 8 MiB: the sidecar went past 5 GiB. Now it stays under 512 MiB, the
/// silent sockets are closed as the ones furthest behind, and a reading
/// subscriber sees all 2,000 changes in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_sockets_and_a_flood_stay_bounded() {
    let (sc, t, addr) = start_with(json!({"maxSockets": 1024, "maxSocketsPerAccount": 1024})).await;
    let owner = Signer::new();
    let created = call(
        &t,
        &owner,
        json!({"_": "CreateAgent", "definition": definition("first")}),
    )
    .await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    let agent_id = created.text("agentId");
    let account_key = format!("account/{}", owner.id());
    let agent_key = format!("agents/{agent_id}");

    let mut silent = Vec::with_capacity(500);
    for _ in 0..500 {
        let mut ws = Ws::open_with(&addr, Some(4096)).await;
        ws.subscribed(&owner, &account_key, None).await;
        ws.subscribed(&owner, &agent_key, None).await;
        silent.push(ws);
    }
    let mut reader = Ws::open(&addr).await;
    reader.subscribed(&owner, &agent_key, None).await;
    const UPDATES: usize = 2000;
    let reading = tokio::spawn(async move {
        let mut seen = Vec::with_capacity(UPDATES);
        while seen.len() < UPDATES {
            let event = reader.next().await;
            if event["_"] != "change" || event["key"] != json!(agent_key) {
                continue;
            }
            let prompt = event["value"]["definition"]["systemPrompt"]
                .as_str()
                .unwrap_or_default();
            if let Some(n) = prompt
                .split(':')
                .next()
                .and_then(|n| n.parse::<usize>().ok())
            {
                seen.push(n);
            }
        }
        seen
    });

    let padding = "x".repeat(16 * 1024);
    for n in 0..UPDATES {
        let updated = call(
            &t,
            &owner,
            json!({"_": "UpdateAgent", "agentId": agent_id,
                   "definition": definition(&format!("{n}:{padding}"))}),
        )
        .await;
        assert_eq!(updated.status, 200, "update {n}: {:?}", updated.body);
    }
    let seen = tokio::time::timeout(common::PATIENCE, reading)
        .await
        .expect("the reader got every change in time")
        .expect("join");
    assert_eq!(seen, (0..UPDATES).collect::<Vec<_>>(), "a gap or a repeat");

    let (_, peak) = common::memory(sc.pid());
    eprintln!(
        "500 silent sockets and 2,000 16 KB changes: VmHWM {} MiB",
        peak / MIB
    );
    assert!(peak < 512 * MIB, "peak RSS {} MiB", peak / MIB);
    // The silent ones fell furthest behind and were closed, naming the
    // process-wide budget (or, had they been alone, their own bound).
    for ws in silent.iter_mut().take(5) {
        let (code, reason, _) = ws.closed().await;
        assert_eq!(code, 1008, "{reason}");
        assert!(reason.contains("http.ws.maxQueuedBytes"), "{reason}");
    }
}

/// The sockets one account may hold: past the cap a socket's first
/// subscription is refused with `account_sockets_limit` (the socket stays
/// open, bound to nobody), other accounts are not affected, and a place
/// frees when one of the account's sockets closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_holds_at_most_its_sockets() {
    let (_sc, _t, addr) = start_with(json!({"maxSocketsPerAccount": 2})).await;
    let owner = Signer::new();
    let key = format!("account/{}", owner.id());
    let mut first = Ws::open(&addr).await;
    first.subscribed(&owner, &key, None).await;
    let mut second = Ws::open(&addr).await;
    second.subscribed(&owner, &key, None).await;
    let mut third = Ws::open(&addr).await;
    let refused = third.subscribe(&owner, &key, None).await;
    assert_eq!(refused["_"], "error", "{refused}");
    assert_eq!(refused["code"], "account_sockets_limit");
    assert!(refused["message"]
        .as_str()
        .unwrap_or_default()
        .contains("http.ws.maxSocketsPerAccount"));
    // Another account is not counted against this one.
    let other = Signer::new();
    let mut theirs = Ws::open(&addr).await;
    theirs
        .subscribed(&other, &format!("account/{}", other.id()), None)
        .await;
    // One of the account's sockets closes: the refused one may bind now.
    first
        .send(tokio_tungstenite::tungstenite::Message::Close(None))
        .await;
    first.closed().await;
    common::eventually("a place frees up", || async {
        let mut again = Ws::open(&addr).await;
        again.subscribe(&owner, &key, None).await["_"] == "subscribed"
    })
    .await;
}
