//! `/agents/ws` end to end: a real sidecar, real sockets, envelopes signed
//! by test keys. Verification and scoping of subscriptions, replay then
//! live under a flood, live partial messages, unsubscribe, every bound
//! (subscriptions, idle, frame size, sockets, a slow consumer's queue),
//! shutdown, and the change feed a collaborator hears.

#[path = "signed_ws/client.rs"]
mod client;
mod common;

use agentos_tests::http::Target;
use agentos_tests::seed::{call, Signer};
use client::{start_with, Deaf, Ws};
use common::{Backend, Sidecar};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{self, Message};

async fn start() -> (Sidecar, Target, String) {
    start_with(Backend::SqliteFile, json!({})).await
}

/// An agent on the fake adapter and one session of it.
async fn agent_and_session(t: &Target, owner: &Signer) -> (String, String) {
    let created = call(
        t,
        owner,
        json!({"_": "CreateAgent", "definition": {
            "name": "Helper", "systemPrompt": "Be brief.", "modelProvider": "openai",
            "model": "gpt-5-mini", "adapter": "echo"}}),
    )
    .await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    let agent_id = created.text("agentId");
    let session = call(t, owner, json!({"_": "CreateSession", "agentId": agent_id})).await;
    assert_eq!(session.status, 200, "{:?}", session.body);
    (agent_id, session.text("sessionId"))
}

/// The owner renames the agent to "Renamed".
async fn rename_agent(t: &Target, owner: &Signer, agent_id: &str) {
    let updated = call(
        t,
        owner,
        json!({"_": "UpdateAgent", "agentId": agent_id, "definition": {
            "name": "Renamed", "systemPrompt": "Be brief.", "modelProvider": "openai",
            "model": "gpt-5-mini", "adapter": "echo"}}),
    )
    .await;
    assert_eq!(updated.status, 200, "{:?}", updated.body);
}

async fn say(t: &Target, signer: &Signer, session_id: &str, text: &str) {
    let said = call(
        t,
        signer,
        json!({"_": "MessageSession", "sessionId": session_id,
               "content": [{"type": "text", "text": text}]}),
    )
    .await;
    assert_eq!(said.status, 200, "{text}: {:?}", said.body);
}

async fn latest_sequence(sc: &Sidecar, session_id: &str) -> u64 {
    sc.ok("sessions/get", json!({"sessionId": session_id}))
        .await["session"]["latestSequence"]
        .as_u64()
        .expect("latestSequence")
}

fn is_append(event: &Value) -> bool {
    event["_"] == "append"
}

fn seq(event: &Value) -> u64 {
    event["event"]["seq"].as_u64().expect("seq")
}

/// Reads appends until `last`, returning every sequence seen.
async fn appends_until(ws: &mut Ws, last: u64, seen: &mut Vec<u64>) {
    while seen.last().is_none_or(|s| *s < last) {
        let event = ws.next_where(is_append).await;
        seen.push(seq(&event));
    }
}

fn assert_every_seq_once(seen: &[u64], after: u64, last: u64, who: &str) {
    let expected: Vec<u64> = (after + 1..=last).collect();
    assert_eq!(seen.len(), expected.len(), "{who}: a gap or a duplicate");
    assert!(seen == expected.as_slice(), "{who}: out of order");
}

#[tokio::test]
async fn subscriptions_are_verified_and_scoped() {
    let (sc, t, addr) = start().await;
    let owner = Signer::new();
    let stranger = Signer::new();
    let (agent_id, session_id) = agent_and_session(&t, &owner).await;

    let mut ws = Ws::open(&addr).await;
    ws.subscribed(&owner, &format!("account/{}", owner.id()), None)
        .await;
    for (key, code) in [
        (format!("account/{}", stranger.id()), "forbidden"),
        // A run that does not exist, like one the account cannot read.
        ("runs/r1".to_owned(), "not_found"),
        ("people/x".to_owned(), "bad_key"),
    ] {
        let refused = ws.subscribe(&owner, &key, None).await;
        assert_eq!(
            (refused["_"].as_str(), refused["code"].as_str()),
            (Some("error"), Some(code)),
            "{key}"
        );
    }
    ws.send_action(&owner, json!({"_": "ListAgents"})).await;
    assert_eq!(ws.next().await["code"], "unsupported_action");

    // The same signed frame twice: the second is a replay.
    let frame = owner.sign(&json!({"_": "Subscribe", "key": format!("agents/{agent_id}")}));
    ws.send_bytes(frame.clone()).await;
    assert_eq!(ws.next().await["_"], "subscribed");
    ws.send_bytes(frame).await;
    let replayed = ws.next().await;
    assert_eq!(
        (replayed["_"].as_str(), replayed["code"].as_str()),
        (Some("error"), Some("replayed"))
    );
    // Tampered after signing; then bytes that are no envelope at all.
    let mut tampered = owner.sign(&json!({"_": "Subscribe", "key": "account/zzzz"}));
    let at = tampered.windows(4).position(|w| w == b"zzzz").expect("key");
    tampered[at] = b'y';
    ws.send_bytes(tampered).await;
    assert_eq!(ws.next().await["_"], "error");
    ws.send(Message::Text("hello".into())).await;
    assert_eq!(ws.next().await["code"], "bad_frame");
    // The socket belongs to the first verified account.
    let switched = ws
        .subscribe(&stranger, &format!("account/{}", stranger.id()), None)
        .await;
    assert_eq!(switched["code"], "account_mismatch");

    // A JSON array of byte values in a text frame is accepted.
    let key = format!("sessions/{session_id}");
    let bytes = owner.sign(&json!({"_": "Subscribe", "key": key}));
    ws.send(Message::Text(serde_json::to_string(&bytes).unwrap().into()))
        .await;
    let subscribed = ws.next().await;
    assert_eq!(
        (subscribed["_"].as_str(), subscribed["key"].as_str()),
        (Some("subscribed"), Some(key.as_str()))
    );
    let change = ws.next().await;
    assert_eq!(change["_"], "change");
    assert_eq!(change["value"]["id"], session_id.as_str());
    assert_eq!(change["value"]["agentId"], agent_id.as_str());
    assert_eq!(change["value"]["status"], "idle");

    // A stranger hears `not_found` for what exists and for what does not.
    let mut other = Ws::open(&addr).await;
    let mut messages = Vec::new();
    for key in [
        format!("sessions/{session_id}"),
        format!("agents/{agent_id}"),
        "sessions/no-such-session".to_owned(),
        "agents/no-such-agent".to_owned(),
    ] {
        let refused = other.subscribe(&stranger, &key, None).await;
        assert_eq!(refused["code"], "not_found", "{key}: {refused}");
        messages.push(refused["message"].as_str().unwrap().replace(&key, "<key>"));
    }
    assert!(messages.iter().all(|m| *m == messages[0]), "{messages:?}");

    // A turn reaches the owner's socket and nothing of it the stranger's.
    say(&t, &owner, &session_id, "echo hello there").await;
    let last = latest_sequence(&sc, &session_id).await;
    let mut seen = Vec::new();
    appends_until(&mut ws, last, &mut seen).await;
    assert_every_seq_once(&seen, 0, last, "owner");
    let leaked = other.barrier(&stranger).await;
    assert!(leaked.is_empty(), "{leaked:?}");
}

async fn replay_then_live_under_a_flood(backend: Backend) {
    let (sc, t, addr) = start_with(backend, json!({})).await;
    let owner = Signer::new();
    let (_, session_id) = agent_and_session(&t, &owner).await;
    let key = format!("sessions/{session_id}");
    let mut first = Ws::open(&addr).await;
    first.subscribed(&owner, &key, None).await;

    let flood = {
        let (t, session_id) = (t.clone(), session_id.clone());
        let signer = owner.clone();
        tokio::spawn(async move { say(&t, &signer, &session_id, "flood 4000").await })
    };
    // Join mid-stream, from an earlier cursor.
    let mut seen_first = Vec::new();
    appends_until(&mut first, 600, &mut seen_first).await;
    let mut second = Ws::open(&addr).await;
    second.subscribed(&owner, &key, Some(250)).await;
    flood.await.expect("the flood turn");
    let last = latest_sequence(&sc, &session_id).await;
    assert!(last > 4000, "{last}");
    let mut seen_second = Vec::new();
    appends_until(&mut second, last, &mut seen_second).await;
    appends_until(&mut first, last, &mut seen_first).await;
    assert_every_seq_once(&seen_first, 0, last, "from the start");
    assert_every_seq_once(&seen_second, 250, last, "joined mid-stream");
}

both_backends!(replay_then_live_under_a_flood);

#[tokio::test]
async fn assistant_text_streams_as_partials_then_the_message() {
    let (_sc, t, addr) = start().await;
    let owner = Signer::new();
    let (_, session_id) = agent_and_session(&t, &owner).await;
    let mut ws = Ws::open(&addr).await;
    ws.subscribed(&owner, &format!("sessions/{session_id}"), None)
        .await;
    assert_eq!(ws.next().await["_"], "change");

    let mut partial_ids = Vec::new();
    for n in [5, 3] {
        say(&t, &owner, &session_id, &format!("stream {n}")).await;
        let user = ws.next_where(is_append).await;
        assert_eq!(user["event"]["event"]["role"], "user");
        let mut text = String::new();
        let mut partial_id = None;
        let done = loop {
            let event = ws.next().await;
            match event["_"].as_str() {
                Some("appendPartial") if event["patch"]["done"] == true => break event,
                Some("appendPartial") => {
                    let id = event["partialId"].as_str().unwrap().to_owned();
                    assert_eq!(partial_id.get_or_insert(id.clone()), &id);
                    // A patch may say only what the agent is doing.
                    if let Some(delta) = event["patch"]["textDelta"].as_str() {
                        text.push_str(delta);
                    } else {
                        assert!(event["patch"]["activity"]["phase"].is_string(), "{event}");
                    }
                }
                // States (the last one is current) may come between.
                Some("change") => {}
                _ => panic!("before the message: {event}"),
            }
        };
        let partial_id = partial_id.expect("partials during the turn");
        assert_eq!(done["partialId"], partial_id.as_str());
        let message = ws.next().await;
        assert_eq!(message["_"], "append", "done comes just before the message");
        assert_eq!(message["event"]["event"]["role"], "assistant");
        assert_eq!(message["event"]["event"]["content"], text.as_str());
        let expected: String = (0..n).map(|i| format!("c{i} ")).collect();
        assert_eq!(text, expected);
        ws.next_where(|e| e["_"] == "change" && e["value"]["status"] == "idle")
            .await;
        partial_ids.push(partial_id);
    }
    assert_ne!(
        partial_ids[0], partial_ids[1],
        "a new partialId per message"
    );
}

#[tokio::test]
async fn unsubscribe_stops_delivery() {
    let (sc, t, addr) = start().await;
    let owner = Signer::new();
    let (_, session_id) = agent_and_session(&t, &owner).await;
    let key = format!("sessions/{session_id}");
    let mut ws = Ws::open(&addr).await;
    ws.subscribed(&owner, &key, None).await;
    say(&t, &owner, &session_id, "echo one").await;
    let last = latest_sequence(&sc, &session_id).await;
    appends_until(&mut ws, last, &mut Vec::new()).await;

    ws.send_action(&owner, json!({"_": "Unsubscribe", "key": key}))
        .await;
    let gone = ws.next_where(|e| e["_"] == "unsubscribed").await;
    assert_eq!(gone["key"], key.as_str());
    say(&t, &owner, &session_id, "echo two").await;
    let after = ws.barrier(&owner).await;
    assert!(after.iter().all(|e| e["key"] != key.as_str()), "{after:?}");
}

#[tokio::test]
async fn a_socket_holds_at_most_its_subscriptions() {
    let (_sc, t, addr) =
        start_with(Backend::SqliteFile, json!({"maxSubscriptionsPerSocket": 2})).await;
    let owner = Signer::new();
    let (agent_id, session_id) = agent_and_session(&t, &owner).await;
    let mut ws = Ws::open(&addr).await;
    ws.subscribed(&owner, &format!("account/{}", owner.id()), None)
        .await;
    ws.subscribed(&owner, &format!("agents/{agent_id}"), None)
        .await;
    // Subscribing again to a held key replaces it.
    ws.subscribed(&owner, &format!("agents/{agent_id}"), None)
        .await;
    let refused = ws
        .subscribe(&owner, &format!("sessions/{session_id}"), None)
        .await;
    assert_eq!(refused["code"], "socket_subscriptions_limit");
    assert!(refused["message"]
        .as_str()
        .unwrap()
        .contains("http.ws.maxSubscriptionsPerSocket"));
    ws.send_action(
        &owner,
        json!({"_": "Unsubscribe", "key": format!("agents/{agent_id}")}),
    )
    .await;
    assert_eq!(ws.next().await["_"], "unsubscribed");
    ws.subscribed(&owner, &format!("sessions/{session_id}"), None)
        .await;
}

#[tokio::test]
async fn silent_sockets_are_closed_and_answering_ones_are_pinged() {
    let (_sc, _t, addr) = start_with(
        Backend::SqliteFile,
        json!({"pingIntervalMs": 100, "idleTimeoutMs": 500}),
    )
    .await;
    let mut deaf = Deaf::open(&addr).await;
    let (code, reason, _pings) = deaf.closed().await;
    assert_eq!(code, 1001);
    assert!(reason.contains("http.ws.idleTimeoutMs"), "{reason}");

    // A client that reads answers the pings and stays: it sees more
    // pings than fit in one idle timeout.
    let mut ws = Ws::open(&addr).await;
    ws.pinged(12).await;
    let owner = Signer::new();
    ws.subscribed(&owner, &format!("account/{}", owner.id()), None)
        .await;
}

#[tokio::test]
async fn the_upgrade_is_checked_pings_are_answered_and_broken_frames_close() {
    let (_sc, _t, addr) = start_with(Backend::SqliteFile, json!({})).await;
    let key = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let upgrade = "Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n";
    let version = "Sec-WebSocket-Version: 13\r\n";
    // Each header a WebSocket upgrade needs, missing or wrong, is refused
    // as a general server refuses it.
    for (method, headers, status) in [
        ("POST", format!("{upgrade}{version}{key}"), 405),
        ("GET", format!("Connection: Upgrade\r\n{version}{key}"), 400),
        ("GET", format!("Upgrade: websocket\r\n{version}{key}"), 400),
        (
            "GET",
            format!("{upgrade}Sec-WebSocket-Version: 12\r\n{key}"),
            400,
        ),
        ("GET", format!("{upgrade}{version}"), 400),
    ] {
        assert_eq!(
            client::upgrade_status(&addr, method, &headers).await,
            status,
            "{method} {headers}"
        );
    }
    // The handshake's answer is checked in `Deaf::open`.
    let _deaf = Deaf::open(&addr).await;

    // A ping is answered with its own payload, and the socket goes on.
    let mut ws = Ws::open(&addr).await;
    assert_eq!(ws.ping(b"are you there").await, b"are you there");
    let owner = Signer::new();
    ws.subscribed(&owner, &format!("account/{}", owner.id()), None)
        .await;
    assert_eq!(ws.ping(b"").await, b"");

    // A client frame that is not masked breaks the protocol: 1002.
    let mut raw = Deaf::open(&addr).await;
    raw.write_raw(&[0x82, 0x03, 1, 2, 3]).await;
    let (code, _, _) = raw.closed().await;
    assert_eq!(code, 1002);
}

#[tokio::test]
async fn a_client_that_pings_and_never_reads_is_closed_as_fallen_behind() {
    let (_sc, _t, addr) = start_with(
        Backend::SqliteFile,
        json!({"maxQueuedBytesPerSocket": 16384}),
    )
    .await;
    // Each pong waits in the socket's queue like any frame: a client that
    // only pings, with a small window and never reading, fills it.
    let mut raw = Deaf::open_with(&addr, Some(4096)).await;
    let ping = client::masked(0x9, &[7u8; 125]);
    for _ in 0..20 {
        raw.write_raw(&ping.repeat(1000)).await;
    }
    let (code, reason, _) = raw.closed().await;
    assert_eq!(code, 1008);
    assert!(
        reason.contains("http.ws.maxQueuedBytesPerSocket"),
        "{reason}"
    );
    // The server is up and answers another socket's ping.
    let mut ws = Ws::open(&addr).await;
    assert_eq!(ws.ping(b"still here").await, b"still here");
}

#[tokio::test]
async fn a_close_the_client_starts_is_answered_at_once() {
    // Neither a ping nor the idle timeout could end the socket within the
    // client's patience: only the answer to its close can.
    let (_sc, _t, addr) = start_with(
        Backend::SqliteFile,
        json!({"pingIntervalMs": 600_000, "idleTimeoutMs": 1_200_000}),
    )
    .await;
    let mut ws = Ws::open(&addr).await;
    ws.send(Message::Close(None)).await;
    let (code, _, _) = ws.closed().await;
    assert_eq!(code, 1000);
    // The server then ends the connection.
    assert!(ws.ended().await);
}

#[tokio::test]
async fn an_oversize_client_frame_closes_the_socket() {
    let (_sc, _t, addr) = start_with(Backend::SqliteFile, json!({"maxFrameBytes": 1024})).await;
    let mut ws = Ws::open(&addr).await;
    ws.send_bytes(vec![0xa1; 4096]).await;
    let (code, reason, _) = ws.closed().await;
    assert_eq!(code, 1009);
    assert!(reason.contains("http.ws.maxFrameBytes"), "{reason}");
}

#[tokio::test]
async fn sockets_past_the_limit_are_refused() {
    let (_sc, _t, addr) = start_with(Backend::SqliteFile, json!({"maxSockets": 2})).await;
    let _one = Ws::open(&addr).await;
    let mut two = Ws::open(&addr).await;
    match Ws::try_open(&addr, None).await {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), 503),
        Err(e) => panic!("refused otherwise: {e}"),
        Ok(_) => panic!("a third socket was accepted"),
    }
    // A closed socket frees its place.
    two.send(Message::Close(None)).await;
    two.closed().await;
    common::eventually("a place frees up", || async {
        Ws::try_open(&addr, None).await.is_ok()
    })
    .await;
}

#[tokio::test]
async fn a_consumer_that_stops_reading_is_closed_and_the_others_get_everything() {
    // Room for one turn's frames (about 2 MB), not for a dozen.
    let (sc, t, addr) = start_with(
        Backend::SqliteFile,
        json!({"maxQueuedBytesPerSocket": 3 << 20}),
    )
    .await;
    let owner = Signer::new();
    let (_, session_id) = agent_and_session(&t, &owner).await;
    let key = format!("sessions/{session_id}");
    // Its receive buffer is small: the server's queue fills soon after the
    // kernel's buffers.
    let mut slow = Ws::open_with(&addr, Some(4096)).await;
    slow.subscribed(&owner, &key, None).await;
    let mut reader = Ws::open(&addr).await;
    reader.subscribed(&owner, &key, None).await;
    // Each turn is a 1 MB message, as partial text and then as the
    // message; the reader takes each turn before the next starts.
    let mut seen = Vec::new();
    for _ in 0..12 {
        say(&t, &owner, &session_id, "oversize 1000000").await;
        let last = latest_sequence(&sc, &session_id).await;
        appends_until(&mut reader, last, &mut seen).await;
    }
    say(&t, &owner, &session_id, "echo last").await;
    let last = latest_sequence(&sc, &session_id).await;
    appends_until(&mut reader, last, &mut seen).await;
    assert_every_seq_once(&seen, 0, last, "the reading subscriber");
    let (code, reason, events) = slow.closed().await;
    assert_eq!(code, 1008);
    assert!(
        reason.contains("http.ws.maxQueuedBytesPerSocket"),
        "{reason}"
    );
    assert!(
        !events.iter().any(|e| e.contains(r#""content":"last""#)),
        "the slow socket got everything"
    );
}

#[tokio::test]
async fn shutdown_closes_every_socket_with_going_away() {
    let (mut sc, _t, addr) = start().await;
    let owner = Signer::new();
    let mut ws = Ws::open(&addr).await;
    ws.subscribed(&owner, &format!("account/{}", owner.id()), None)
        .await;
    let mut idle = Ws::open(&addr).await;
    let status = sc.terminate().await;
    assert!(status.success(), "{status:?}");
    for ws in [&mut ws, &mut idle] {
        let (code, reason, _) = ws.closed().await;
        assert_eq!((code, reason.as_str()), (1001, "server shutting down"));
    }
}

#[tokio::test]
async fn collaborators_hear_the_agents_changes() {
    let (_sc, t, addr) = start().await;
    let owner = Signer::new();
    let reader = Signer::new();
    let (agent_id, _) = agent_and_session(&t, &owner).await;
    let mut ws = Ws::open(&addr).await;
    let account = format!("account/{}", reader.id());
    ws.subscribed(&reader, &account, None).await;

    let invited = call(
        &t,
        &owner,
        json!({"_": "InviteAgentCollaborator", "agentId": agent_id,
               "accountId": reader.id(), "role": "reader"}),
    )
    .await;
    assert_eq!(invited.status, 200, "{:?}", invited.body);
    let change = ws.next().await;
    assert_eq!(change["key"], account.as_str());
    assert_eq!(change["value"]["reason"], "agent-invites-changed");
    assert_eq!(change["value"]["agentId"], agent_id.as_str());
    // Pending, the invitee reads nothing of the agent.
    let refused = ws
        .subscribe(&reader, &format!("agents/{agent_id}"), None)
        .await;
    assert_eq!(refused["code"], "not_found");

    let accepted = call(
        &t,
        &reader,
        json!({"_": "AcceptAgentInvite", "agentId": agent_id}),
    )
    .await;
    assert_eq!(accepted.status, 200, "{:?}", accepted.body);
    // Account-wide: the agent now shared with it, as it reads it, then why.
    let agent_key = format!("agents/{agent_id}");
    let shared = ws.next().await;
    assert_eq!(shared["key"], agent_key.as_str(), "{shared}");
    assert_eq!(shared["value"]["accessRole"], "reader");
    assert_eq!(
        ws.next().await["value"]["reason"],
        "agent-collaborators-changed"
    );
    ws.subscribed(&reader, &agent_key, None).await;

    rename_agent(&t, &owner, &agent_id).await;
    let agent = ws.next().await;
    assert_eq!(agent["key"], agent_key.as_str());
    assert_eq!(agent["value"]["definition"]["name"], "Renamed");
    assert_eq!(agent["value"]["accessRole"], "reader");
    let change = ws.next().await;
    assert_eq!(change["key"], account.as_str());
    assert_eq!(change["value"]["reason"], "agent-updated");

    let session = call(
        &t,
        &owner,
        json!({"_": "CreateSession", "agentId": agent_id}),
    )
    .await;
    let change = ws.next().await;
    assert_eq!(change["value"]["reason"], "session-created");
    assert_eq!(
        change["value"]["sessionId"],
        session.text("sessionId").as_str()
    );
    let session_key = format!("sessions/{}", session.text("sessionId"));
    // The account is account-wide: the new session's state follows, under
    // its own key.
    let state = ws.next().await;
    assert_eq!(
        (state["_"].clone(), state["key"].clone()),
        (json!("change"), json!(session_key)),
        "{state}"
    );
    ws.subscribed(&reader, &session_key, None).await;
    assert_eq!(ws.next().await["_"], "change");

    // Removed, the reader loses what it watched of the agent.
    let removed = call(
        &t,
        &owner,
        json!({"_": "RemoveAgentCollaborator", "agentId": agent_id, "accountId": reader.id()}),
    )
    .await;
    assert_eq!(removed.status, 200, "{:?}", removed.body);
    let mut revoked = Vec::new();
    while revoked.len() < 2 {
        let event = ws.next().await;
        if event["code"] == "access_revoked" {
            revoked.push(event["message"].as_str().unwrap().to_owned());
        } else {
            assert_eq!(event["value"]["reason"], "agent-invites-changed", "{event}");
        }
    }
    assert!(revoked.iter().any(|m| m.contains(&agent_key)));
    assert!(revoked.iter().any(|m| m.contains(&session_key)));
    call(
        &t,
        &owner,
        json!({"_": "SetAgentPublicRead", "agentId": agent_id, "publicRead": false}),
    )
    .await;
    let after = ws.barrier(&reader).await;
    assert!(
        after.iter().all(|e| e["key"] != agent_key.as_str()),
        "{after:?}"
    );
}

/// Subscribes `delegate` on a fresh socket to the account and the session.
async fn delegate_feed(addr: &str, delegate: &Signer, account_key: &str, session_key: &str) -> Ws {
    let mut feed = Ws::open(addr).await;
    feed.subscribed(delegate, account_key, None).await;
    feed.subscribed(delegate, session_key, None).await;
    feed
}

#[tokio::test]
async fn a_revoked_signer_loses_its_sockets_whichever_door_revokes_it() {
    let (sc, t, addr) = start().await;
    let owner = Signer::new();
    let (agent_id, session_id) = agent_and_session(&t, &owner).await;
    let account_key = format!("account/{}", owner.id());
    let session_key = format!("sessions/{session_id}");
    let mut own = Ws::open(&addr).await;
    own.subscribed(&owner, &account_key, None).await;

    // The account revokes its delegate over the signed API.
    let by_account = Signer::delegate_of(owner.account);
    let authorized = call(
        &t,
        &owner,
        json!({"_": "AuthorizeSigner", "signer": by_account.key_id(), "role": "AGENT"}),
    )
    .await;
    assert_eq!(authorized.status, 200, "{:?}", authorized.body);
    let mut feed = delegate_feed(&addr, &by_account, &account_key, &session_key).await;
    let revoked = call(
        &t,
        &owner,
        json!({"_": "RevokeSigner", "signer": by_account.key_id()}),
    )
    .await;
    assert_eq!(revoked.status, 200, "{:?}", revoked.body);
    let (code, reason, _) = feed.closed().await;
    assert_eq!((code, reason.as_str()), (1008, "signer revoked"));

    // The operator revokes another over the host socket.
    let by_operator = Signer::delegate_of(owner.account);
    let pair = json!({"account": owner.id(), "signer": by_operator.key_id()});
    let mut authorize = pair.clone();
    authorize["role"] = json!("WRITER");
    sc.ok("signers/authorize", authorize).await;
    let mut feed = delegate_feed(&addr, &by_operator, &account_key, &session_key).await;
    sc.ok("signers/revoke", pair).await;
    let (code, reason, _) = feed.closed().await;
    assert_eq!((code, reason.as_str()), (1008, "signer revoked"));

    // The account's own socket was never signed by either: it stays open
    // and keeps hearing its account.
    own.barrier(&owner).await;
    let created = call(
        &t,
        &owner,
        json!({"_": "CreateSession", "agentId": agent_id}),
    )
    .await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    let change = own
        .next_where(|e| e["_"] == "change" && e["value"]["reason"] == "session-created")
        .await;
    assert_eq!(change["key"], account_key.as_str());
}

/// `account/<self>` is account-wide, as the reference serves it: during a
/// turn the account's socket receives the session's appends, its partial
/// text and its state changes under the session's own key, and an account
/// change `session-event` for each appended event; a collaborator's account
/// socket receives the same. A socket on `agents/<id>` receives the
/// session's state changes under the session's key. A socket holding the
/// session itself gets each frame once.
#[tokio::test]
async fn account_and_agent_subscribers_follow_a_turn() {
    let (sc, t, addr) = start().await;
    let owner = Signer::new();
    let writer = Signer::new();
    let (agent_id, session_id) = agent_and_session(&t, &owner).await;
    for (signer, action) in [
        (
            &owner,
            json!({"_": "InviteAgentCollaborator", "agentId": agent_id,
                   "accountId": writer.id(), "role": "writer"}),
        ),
        (
            &writer,
            json!({"_": "AcceptAgentInvite", "agentId": agent_id}),
        ),
    ] {
        let answer = call(&t, signer, action).await;
        assert_eq!(answer.status, 200, "{:?}", answer.body);
    }
    let session_key = format!("sessions/{session_id}");
    let mut own = Ws::open(&addr).await;
    own.subscribed(&owner, &format!("account/{}", owner.id()), None)
        .await;
    let mut shared = Ws::open(&addr).await;
    shared
        .subscribed(&writer, &format!("account/{}", writer.id()), None)
        .await;
    let mut page = Ws::open(&addr).await;
    page.subscribed(&owner, &format!("agents/{agent_id}"), None)
        .await;
    // Holding the session and the account: each frame once.
    let mut both = Ws::open(&addr).await;
    both.subscribed(&owner, &format!("account/{}", owner.id()), None)
        .await;
    both.subscribed(&owner, &session_key, None).await;

    say(&t, &writer, &session_id, "stream 3").await;
    let last = latest_sequence(&sc, &session_id).await;
    for (ws, signer, who) in [
        (&mut own, &owner, "owner"),
        (&mut shared, &writer, "collaborator"),
        (&mut both, &owner, "session and account"),
    ] {
        let mut frames = Vec::new();
        // Until the turn's end state has come, then everything sent so far.
        loop {
            let frame = ws.next().await;
            let idle = frame["_"] == "change"
                && frame["key"] == session_key.as_str()
                && frame["value"]["status"] == "idle";
            frames.push(frame);
            if idle {
                break;
            }
        }
        frames.extend(ws.barrier(signer).await);
        let appends: Vec<u64> = frames
            .iter()
            .filter(|f| f["_"] == "append")
            .map(|f| {
                assert_eq!(f["key"], session_key.as_str(), "{who}: {f}");
                seq(f)
            })
            .collect();
        assert_every_seq_once(&appends, 0, last, who);
        let partial_text: String = frames
            .iter()
            .filter(|f| f["_"] == "appendPartial" && f["key"] == session_key.as_str())
            .filter_map(|f| f["patch"]["textDelta"].as_str())
            .collect();
        assert!(
            !partial_text.is_empty(),
            "{who}: no partial text in {frames:?}"
        );
        let events = frames
            .iter()
            .filter(|f| f["value"]["reason"] == "session-event")
            .inspect(|f| {
                assert!(f["key"].as_str().is_some_and(|k| k.starts_with("account/")));
                assert_eq!(f["value"]["sessionId"], session_id.as_str());
                assert_eq!(f["value"]["agentId"], agent_id.as_str());
            })
            .count();
        assert_eq!(events as u64, last, "{who}: one session-event per append");
        assert!(
            frames
                .iter()
                .any(|f| f["key"] == session_key.as_str() && f["value"]["status"] == "streaming"),
            "{who}: the turn's start state"
        );
    }
    // The agent's page: the session's states under the session's key, and
    // the account changes that name the agent.
    let mut frames = Vec::new();
    loop {
        let frame = page.next().await;
        let idle = frame["key"] == session_key.as_str() && frame["value"]["status"] == "idle";
        frames.push(frame);
        if idle {
            break;
        }
    }
    assert!(frames
        .iter()
        .all(|f| f["_"] == "change" && f["key"] != json!(format!("agents/{agent_id}"))));
    assert!(frames
        .iter()
        .any(|f| f["value"]["reason"] == "session-event"));
    assert!(!frames.iter().any(|f| f["_"] == "append"), "{frames:?}");

    // The agent's own changes reach its accounts' sockets, as each reads it.
    rename_agent(&t, &owner, &agent_id).await;
    let agent_key = format!("agents/{agent_id}");
    for (ws, role) in [(&mut own, "owner"), (&mut shared, "writer")] {
        let agent = ws.next_where(|f| f["key"] == agent_key.as_str()).await;
        assert_eq!(agent["_"], "change");
        assert_eq!(agent["value"]["definition"]["name"], "Renamed");
        assert_eq!(agent["value"]["accessRole"], role);
    }
}

/// An account socket sees at most 64 sessions at once (their render state
/// in its writer); past that the oldest view closes, and that session's
/// next frames open it again: nothing of it is lost.
#[tokio::test]
async fn an_account_socket_past_its_session_views_still_sees_every_session() {
    let (sc, t, addr) = start().await;
    let owner = Signer::new();
    let (agent_id, first) = agent_and_session(&t, &owner).await;
    let mut ws = Ws::open(&addr).await;
    ws.subscribed(&owner, &format!("account/{}", owner.id()), None)
        .await;
    // The first session's view opens with its first frame, then 64 more
    // sessions push it out.
    say(&t, &owner, &first, "echo one").await;
    let first_key = format!("sessions/{first}");
    ws.next_where(|f| f["key"] == first_key.as_str() && f["value"]["status"] == "idle")
        .await;
    for _ in 0..64 {
        let created = call(
            &t,
            &owner,
            json!({"_": "CreateSession", "agentId": agent_id}),
        )
        .await;
        assert_eq!(created.status, 200, "{:?}", created.body);
    }
    let before = latest_sequence(&sc, &first).await;
    say(&t, &owner, &first, "echo two").await;
    let last = latest_sequence(&sc, &first).await;
    let mut appends = Vec::new();
    while appends.last().is_none_or(|s| *s < last) {
        let frame = ws
            .next_where(|f| f["_"] == "append" && f["key"] == first_key.as_str())
            .await;
        appends.push(seq(&frame));
    }
    assert_every_seq_once(&appends, before, last, "after its view was closed");
}
