//! Driving traffic: one worker per session sends prompts (streams, tools,
//! floods, permissions answered or left pending, cancels, duplicate
//! idempotent prompts) through the host protocol and records every answer
//! and every durable event its subscription sees, for the checks after the
//! kill.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agentos_client::ctl::{ClientError, HostClient};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::{KEY_PREFIX, MARKER, PATIENCE};

#[derive(Clone, Debug)]
pub(super) enum Outcome {
    /// No answer before the connection ended.
    None,
    Ok(Value),
    /// The JSON-RPC error object.
    Err(Value),
}

#[derive(Clone, Debug)]
pub(super) struct SentPrompt {
    pub(super) session: String,
    pub(super) key: String,
    pub(super) marker: String,
    pub(super) command: String,
    pub(super) content: Vec<Value>,
    /// A second, concurrent send of the same key and content.
    pub(super) duplicate: bool,
    pub(super) outcome: Outcome,
}

#[derive(Default)]
pub(super) struct Seen {
    pub(super) subscription: Option<String>,
    /// `sessions/event` params as received: `{subscriptionId, event}`.
    pub(super) events: Vec<Value>,
}

#[derive(Default)]
pub(super) struct Record {
    pub(super) seen: BTreeMap<String, Seen>,
    pub(super) prompts: Vec<SentPrompt>,
    pub(super) permissions_answered: u64,
    pub(super) cancels: u64,
}

pub(super) fn lock(record: &Mutex<Record>) -> MutexGuard<'_, Record> {
    record.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) enum CallError {
    Rpc(Value),
    Closed,
}

pub(super) async fn call(
    client: &HostClient,
    method: &str,
    params: Value,
) -> Result<Value, CallError> {
    match tokio::time::timeout(PATIENCE, client.call(method, params)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(ClientError::Rpc(e))) => Err(CallError::Rpc(
            serde_json::to_value(&e).unwrap_or_else(|_| json!({"message": e.message})),
        )),
        Ok(Err(_)) | Err(_) => Err(CallError::Closed),
    }
}

pub(super) fn data_code(error: &Value) -> &str {
    error["data"]["code"].as_str().unwrap_or("")
}

pub(super) fn pick_command(rng: &mut StdRng, policy: &str) -> String {
    let permission_weight = if policy == "ask" { 25 } else { 8 };
    let roll = rng.gen_range(0..100 + permission_weight);
    match roll {
        0..=24 => format!("stream {}", rng.gen_range(3..80)),
        25..=34 => "tools".to_owned(),
        35..=44 => "wait_for_cancel".to_owned(),
        45..=59 => format!("sleep {}", rng.gen_range(10..300)),
        60..=69 => format!("flood {}", rng.gen_range(10..150)),
        70..=79 => "plan".to_owned(),
        80..=89 => format!("thought t{}", rng.gen_range(0..1000)),
        90..=99 => format!("echo e{}", rng.gen_range(0..1000)),
        _ => "permission".to_owned(),
    }
}

/// One session's client: open, subscribe from the start, then prompts one
/// after another until the connection dies.
pub(super) async fn session_worker(
    socket: PathBuf,
    session: String,
    policy: &'static str,
    mut rng: StdRng,
    record: Arc<Mutex<Record>>,
) {
    let Ok((client, mut notes)) = HostClient::connect(&socket).await else {
        return;
    };
    let note_client = client.clone();
    let note_record = record.clone();
    let note_session = session.clone();
    let mut note_rng = StdRng::seed_from_u64(rng.gen());
    let notes_task = tokio::spawn(async move {
        while let Some((method, params)) = notes.recv().await {
            if method != "sessions/event" {
                continue;
            }
            let event = params["event"].clone();
            lock(&note_record)
                .seen
                .entry(note_session.clone())
                .or_default()
                .events
                .push(params);
            if event["type"] != "permission_request" {
                continue;
            }
            let request_id = event["requestId"].as_str().unwrap_or("").to_owned();
            let options: Vec<String> = event["options"]
                .as_array()
                .map(|o| {
                    o.iter()
                        .filter_map(|o| o["optionId"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let roll: f64 = note_rng.gen();
            let delay = Duration::from_millis(note_rng.gen_range(0..250));
            let client = note_client.clone();
            let record = note_record.clone();
            let session = note_session.clone();
            if roll < 0.6 && !options.is_empty() {
                let option = options[note_rng.gen_range(0..options.len())].clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let params =
                        json!({"sessionId": session, "requestId": request_id, "optionId": option});
                    if call(&client, "sessions/respondPermission", params)
                        .await
                        .is_ok()
                    {
                        lock(&record).permissions_answered += 1;
                    }
                });
            } else if roll < 0.8 {
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    if call(&client, "sessions/cancel", json!({"sessionId": session}))
                        .await
                        .is_ok()
                    {
                        lock(&record).cancels += 1;
                    }
                });
            }
        }
    });
    let ready = async {
        call(&client, "initialize", json!({"protocolVersion": 1})).await?;
        call(
            &client,
            "sessions/open",
            json!({"sessionId": session, "agent": "echo", "permissionPolicy": policy}),
        )
        .await?;
        call(
            &client,
            "sessions/subscribe",
            json!({"sessionId": session, "after": 0}),
        )
        .await
    };
    match ready.await {
        Ok(v) => {
            let id = v["subscriptionId"].as_str().map(str::to_owned);
            lock(&record)
                .seen
                .entry(session.clone())
                .or_default()
                .subscription = id;
        }
        Err(_) => {
            drop(client);
            let _ = tokio::time::timeout(PATIENCE, notes_task).await;
            return;
        }
    }
    loop {
        let command = pick_command(&mut rng, policy);
        let marker = uuid::Uuid::new_v4().to_string();
        let key = format!("{KEY_PREFIX}{marker}");
        let content = vec![
            json!({"type": "text", "text": format!("{MARKER}{marker}")}),
            json!({"type": "text", "text": command}),
        ];
        let params = json!({"sessionId": session, "content": content, "idempotencyKey": key});
        let sent = SentPrompt {
            session: session.clone(),
            key,
            marker,
            command: command.clone(),
            content,
            duplicate: false,
            outcome: Outcome::None,
        };
        let cancel_after = match command.split(' ').next().unwrap_or("") {
            "wait_for_cancel" => Some(rng.gen_range(0..400)),
            "sleep" | "permission" if rng.gen_bool(0.3) => Some(rng.gen_range(0..300)),
            "stream" | "flood" if rng.gen_bool(0.15) => Some(rng.gen_range(0..20)),
            _ => None,
        };
        if let Some(ms) = cancel_after {
            let client = client.clone();
            let session = session.clone();
            let record = record.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                if call(&client, "sessions/cancel", json!({"sessionId": session}))
                    .await
                    .is_ok()
                {
                    lock(&record).cancels += 1;
                }
            });
        }
        let duplicate = rng.gen_bool(0.1).then(|| rng.gen_range(0..40u64));
        let index = {
            let mut r = lock(&record);
            r.prompts.push(sent.clone());
            if duplicate.is_some() {
                r.prompts.push(SentPrompt {
                    duplicate: true,
                    ..sent
                });
            }
            r.prompts.len() - 1
        };
        let first = call(&client, "sessions/prompt", params.clone());
        let (first, second) = match duplicate {
            None => (first.await, None),
            Some(ms) => {
                let second = async {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    call(&client, "sessions/prompt", params.clone()).await
                };
                let (a, b) = tokio::join!(first, second);
                (a, Some(b))
            }
        };
        let to_outcome = |r: Result<Value, CallError>| match r {
            Ok(v) => (Outcome::Ok(v), false),
            Err(CallError::Rpc(e)) => (Outcome::Err(e), false),
            Err(CallError::Closed) => (Outcome::None, true),
        };
        let mut closed = false;
        {
            let mut r = lock(&record);
            match second {
                None => {
                    let (o, c) = to_outcome(first);
                    r.prompts[index].outcome = o;
                    closed |= c;
                }
                Some(second) => {
                    let (o, c) = to_outcome(first);
                    r.prompts[index - 1].outcome = o;
                    closed |= c;
                    let (o, c) = to_outcome(second);
                    r.prompts[index].outcome = o;
                    closed |= c;
                }
            }
        }
        if closed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..20))).await;
    }
    drop(client);
    let _ = tokio::time::timeout(PATIENCE, notes_task).await;
}
