//! Subscriptions through the real binary: replay then live in order, a
//! mid-flood subscribe with no gap and no duplicate, ephemeral updates with
//! `afterSequence`, unsubscribe, and keep-awake notifications around a turn.

mod common;

use std::collections::BTreeSet;

use common::{next_note, Backend, Sidecar};
use serde_json::{json, Value};

fn durable_seq(note: &(String, Value)) -> Option<u64> {
    (note.0 == "sessions/event").then(|| note.1["event"]["sequence"].as_u64().expect("seq"))
}

async fn replay_then_live(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    sc.open("s1", "echo").await;
    sc.prompt("s1", "echo one").await.expect("prompt");
    sc.prompt("s1", "tools").await.expect("prompt");
    let stored = sc.history("s1").await;
    assert_eq!(stored.len(), 7);
    let (client, mut notes) = sc.connect().await;
    let sub = client
        .call("sessions/subscribe", json!({"sessionId": "s1", "after": 0}))
        .await
        .expect("subscribe");
    let sub_id = sub["subscriptionId"].as_str().expect("id").to_owned();
    let mut replayed = Vec::new();
    while replayed.len() < stored.len() {
        let (_, p) = next_note(&mut notes, |m, _| m == "sessions/event").await;
        assert_eq!(p["subscriptionId"], json!(sub_id));
        replayed.push(p["event"].clone());
    }
    assert_eq!(replayed, stored, "replay is the stored history, in order");
    sc.prompt("s1", "echo live").await.expect("prompt");
    let (_, p) = next_note(&mut notes, |m, _| m == "sessions/event").await;
    assert_eq!(p["event"]["sequence"], 8);
    assert_eq!(p["event"]["type"], "user_message_chunk");
    let (_, p) = next_note(&mut notes, |m, _| m == "sessions/event").await;
    assert_eq!(p["event"]["sequence"], 9);
    assert_eq!(p["event"]["content"]["text"], "live");
}

async fn subscribe_mid_flood_has_no_gap_and_no_duplicate(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    sc.open("s1", "echo").await;
    let client = sc.client.clone();
    let turn = tokio::spawn(async move {
        client
            .call(
                "sessions/prompt",
                json!({"sessionId": "s1", "content": [{"type": "text", "text": "flood 20000"}]}),
            )
            .await
    });
    // Wait until part of the flood is committed, then subscribe from a
    // point inside it.
    let deadline = tokio::time::Instant::now() + common::PATIENCE;
    let latest = loop {
        let s = sc.ok("sessions/get", json!({"sessionId": "s1"})).await;
        let latest = s["session"]["latestSequence"].as_u64().expect("seq");
        if latest > 200 {
            break latest;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the flood never committed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    let after = latest / 2;
    let (client, mut notes) = sc.connect().await;
    client
        .call(
            "sessions/subscribe",
            json!({"sessionId": "s1", "after": after}),
        )
        .await
        .expect("subscribe");
    let result = tokio::time::timeout(common::PATIENCE, turn)
        .await
        .expect("the flood ends")
        .expect("join")
        .expect("the flood succeeds");
    assert_eq!(result["stopReason"], "end_turn");
    let last = sc.ok("sessions/get", json!({"sessionId": "s1"})).await["session"]["latestSequence"]
        .as_u64()
        .expect("seq");
    assert_eq!(last, 20_001, "one user chunk and 20000 updates");
    let mut got = Vec::new();
    while got.last().copied() != Some(last) {
        let note = next_note(&mut notes, |m, _| m == "sessions/event").await;
        got.push(durable_seq(&note).expect("durable"));
    }
    let expected: Vec<u64> = (after + 1..=last).collect();
    assert_eq!(got.len(), expected.len(), "no duplicate and no gap");
    assert_eq!(got, expected);
    assert_eq!(
        got.iter().collect::<BTreeSet<_>>().len(),
        got.len(),
        "no duplicate"
    );
}

async fn updates_carry_after_sequence_and_unsubscribe_stops(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    sc.open("s1", "echo").await;
    sc.prompt("s1", "echo before").await.expect("prompt");
    let (client, mut notes) = sc.connect().await;
    let sub = client
        .call("sessions/subscribe", json!({"sessionId": "s1"}))
        .await
        .expect("subscribe");
    sc.prompt("s1", "stream 3").await.expect("prompt");
    // The user chunk is durable (3); the streamed chunks are ephemeral
    // updates after it, before the coalesced durable chunk (4).
    let mut updates = Vec::new();
    let mut durable = Vec::new();
    while durable.len() < 2 {
        let (m, p) = next_note(&mut notes, |m, _| {
            m == "sessions/event" || m == "sessions/update"
        })
        .await;
        if m == "sessions/update" {
            updates.push(p);
        } else {
            durable.push(p["event"].clone());
        }
    }
    assert_eq!(durable[0]["sequence"], 3);
    assert_eq!(durable[1]["sequence"], 4);
    assert_eq!(durable[1]["content"]["text"], "c0 c1 c2 ");
    assert!(!updates.is_empty(), "streamed chunks are sent live");
    for u in &updates {
        assert_eq!(u["sessionId"], "s1");
        assert_eq!(u["afterSequence"], 3);
        assert_eq!(u["update"]["sessionUpdate"], "agent_message_chunk");
    }
    let live: String = updates
        .iter()
        .map(|u| u["update"]["content"]["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(live, "c0 c1 c2 ");

    let r = client
        .call(
            "sessions/unsubscribe",
            json!({"subscriptionId": sub["subscriptionId"]}),
        )
        .await
        .expect("unsubscribe");
    assert_eq!(r["unsubscribed"], true);
    sc.prompt("s1", "echo unseen").await.expect("prompt");
    // A marker on another session proves the connection has caught up.
    sc.open("marker", "echo").await;
    client
        .call("sessions/subscribe", json!({"sessionId": "marker"}))
        .await
        .expect("subscribe marker");
    sc.prompt("marker", "echo m").await.expect("prompt");
    let (_, p) = next_note(&mut notes, |m, p| {
        m == "sessions/event" && p["event"]["sessionId"] == "marker"
    })
    .await;
    assert_eq!(p["event"]["type"], "user_message_chunk");
    while let Ok(note) = notes.try_recv() {
        assert_ne!(
            note.1["event"]["sessionId"], "s1",
            "delivered after unsubscribe: {note:?}"
        );
        assert_ne!(note.1["sessionId"], "s1", "delivered after unsubscribe");
    }
}

/// A live update reaches a subscriber after every stored event before it,
/// whether the route publishes it itself (nothing left to publish) or
/// behind commits still being published: stored updates and live chunks
/// alternate, so both happen within one turn.
async fn live_updates_follow_the_events_before_them(backend: Backend) {
    const ROUNDS: u64 = 300;
    let sc = Sidecar::start(backend).await;
    sc.open("s1", "echo").await;
    let (client, mut notes) = sc.connect().await;
    client
        .call("sessions/subscribe", json!({"sessionId": "s1"}))
        .await
        .expect("subscribe");
    sc.prompt("s1", &format!("interleave {ROUNDS}"))
        .await
        .expect("prompt");
    let mut last_stored = 0;
    let mut live = Vec::new();
    let mut tool_updates = 0;
    // The user's chunk, then per round the tool update and the message
    // chunk the next round's update flushes; the last round's chunk is
    // stored at the end of the turn.
    while tool_updates < ROUNDS || live.len() < ROUNDS as usize || last_stored < 2 * ROUNDS + 1 {
        let (m, p) = next_note(&mut notes, |m, _| {
            m == "sessions/event" || m == "sessions/update"
        })
        .await;
        if m == "sessions/event" {
            let sequence = p["event"]["sequence"].as_u64().expect("sequence");
            assert_eq!(sequence, last_stored + 1, "stored events in order");
            last_stored = sequence;
            if p["event"]["type"] == "tool_call_update" {
                tool_updates += 1;
            }
        } else {
            assert_eq!(
                p["afterSequence"].as_u64(),
                Some(last_stored),
                "a live update comes after the events before it, and before the next: {p}"
            );
            live.push(p["update"]["content"]["text"].clone());
        }
    }
    let expected: Vec<Value> = (0..ROUNDS).map(|i| json!(format!("c{i}"))).collect();
    assert_eq!(live, expected, "every live chunk once, in order");
}

#[tokio::test]
async fn keep_awake_is_held_around_a_prompt() {
    let mut sc = Sidecar::start(Backend::SqliteFile).await;
    sc.open("s1", "echo").await;
    let r = sc.prompt("s1", "echo hi").await.expect("prompt");
    let (_, held) = sc.next_note(|m, _| m == "lifecycle/keepAwake").await;
    assert_eq!(held["held"], true);
    assert_eq!(held["sessionId"], "s1");
    assert_eq!(held["promptId"], r["promptId"]);
    let (_, released) = sc.next_note(|m, _| m == "lifecycle/keepAwake").await;
    assert_eq!(released["held"], false);
    assert_eq!(released["promptId"], r["promptId"]);
    assert_eq!(released["holders"], 0);
    let status = sc.ok("vm/status", json!({})).await;
    assert_eq!(status["keepAwakeHolders"], 0);
}

both_backends!(
    replay_then_live,
    subscribe_mid_flood_has_no_gap_and_no_duplicate,
    updates_carry_after_sequence_and_unsubscribe_stops,
    live_updates_follow_the_events_before_them,
);
