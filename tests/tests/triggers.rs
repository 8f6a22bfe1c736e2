//! Triggers end to end through the real binary: the five signed actions
//! with the reference's shapes, checks and words; who may do which; what a
//! firing creates (a session, its first words and its background run, the
//! trigger context a client reads back) on both backends; schedules looked
//! at on a clock the test chooses (`triggers/tick`); run-completed chains
//! and their loop guard; a wake into a parked script run; the account
//! changes a WebSocket hears; and exactly once across SIGKILLs.

#[path = "common/builtin.rs"]
mod builtin;
#[path = "signed_ws/client.rs"]
#[allow(dead_code)]
mod client;
mod common;

use std::time::Duration;

use agentos_tests::provider_server::{Flavor, Reply};
use agentos_tests::seed::{call, Answer, Signer};
use builtin::{json_of, World};
use common::{eventually, Backend, PATIENCE};
use serde_json::{json, Value};

const MINUTE: i64 = 60_000;

fn message(a: &Answer) -> String {
    json_of(&a.body)["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn trigger_of(a: &Answer) -> Value {
    builtin::ok(a);
    json_of(&a.body)["trigger"].clone()
}

async fn create(w: &World, trigger: Value) -> Value {
    trigger_of(
        &w.act(json!({"_": "CreateAgentTrigger", "agentId": w.agent_id, "trigger": trigger}))
            .await,
    )
}

fn interval(name: &str, every: u64) -> Value {
    json!({"name": name, "source": {"type": "schedule",
           "schedule": {"kind": "interval", "every": every, "unit": "minutes"}},
           "prompt": "Summarize **today's** news"})
}

/// One look of the schedule monitor as of `at`.
async fn tick(w: &World, at: i64) -> Value {
    w.sc.ok("triggers/tick", json!({"at": at})).await
}

async fn firings(w: &World, trigger_id: &str) -> Vec<Value> {
    w.sc.stored(&format!(
        "SELECT firing_id, activity_key, session_id, status, error \
         FROM agentos_core_trigger_firings WHERE trigger_id = '{trigger_id}' \
         ORDER BY created_at_ms"
    ))
    .await
}

async fn runs_of_firings(w: &World) -> Vec<Value> {
    w.sc.stored(
        "SELECT run_id, origin, queue, max_attempts, trigger_firing_id, session_id, status \
         FROM agentos_core_runs WHERE trigger_firing_id IS NOT NULL ORDER BY created_at_ms",
    )
    .await
}

async fn crud_and_checks(backend: Backend) {
    let w = builtin::world_on(Flavor::OpenAi, backend).await;
    let created = create(&w, interval("Daily digest", 60)).await;
    let id = created["id"].as_str().expect("an id").to_owned();
    assert_eq!(created["account"], w.owner.id());
    assert_eq!(created["agentId"], w.agent_id);
    assert_eq!(created["enabled"], true);
    assert_eq!(created["createdAt"], created["updatedAt"]);
    assert!(created.get("continuation").is_none());
    assert!(created.get("lastFiredAt").is_none());
    // A string prompt comes back as blocks.
    let block = &created["prompt"][0]["block"];
    assert_eq!(block["type"], "Paragraph");
    assert_eq!(block["text"], "Summarize today's news");
    assert_eq!(block["annotations"][0]["type"], "Bold");

    // Checks answer 400 with the reference's words.
    for (trigger, words) in [
        (json!("x"), "Agent trigger is required"),
        (
            json!({"name": "n", "prompt": "p"}),
            "Trigger source is required",
        ),
        (
            json!({"name": "n", "prompt": "p", "source": {"type": "sometimes"}}),
            "Trigger source type is unsupported",
        ),
        (
            json!({"name": " ", "prompt": "p", "source": {"type": "run-completed"}}),
            "Trigger name is required",
        ),
        (
            json!({"name": "n", "prompt": "p", "source": {"type": "run-completed", "status": "queued"}}),
            "Trigger run status must be succeeded, failed, or canceled",
        ),
        (
            json!({"name": "n", "prompt": "p", "source": {"type": "schedule",
                   "schedule": {"kind": "weekly", "daysOfWeek": [1], "timeOfDay": "24:00", "timezone": "UTC"}}}),
            "Schedule time of day is invalid",
        ),
        (
            json!({"name": "n", "prompt": "p", "source": {"type": "schedule",
                   "schedule": {"kind": "weekly", "daysOfWeek": [1], "timeOfDay": "09:00", "timezone": "Mars/Base"}}}),
            "Schedule timezone is invalid",
        ),
        (
            json!({"name": "n", "prompt": "   ", "source": {"type": "run-completed"}}),
            "Trigger prompt is required",
        ),
        (
            json!({"name": "n", "prompt": "x".repeat(64 * 1024 + 1), "source": {"type": "run-completed"}}),
            "Trigger prompt is too large",
        ),
        (
            json!({"name": "n", "prompt": 5, "source": {"type": "run-completed"}}),
            "Trigger prompt must be blocks",
        ),
        (
            json!({"name": "n", "prompt": "p", "source": {"type": "run-completed"},
                   "continuation": {"kind": "fork"}}),
            "Trigger continuation kind is unsupported",
        ),
    ] {
        let refused = w
            .act(json!({"_": "CreateAgentTrigger", "agentId": w.agent_id, "trigger": trigger}))
            .await;
        assert_eq!(refused.status, 400, "{words}: {:?}", refused.body);
        assert_eq!(message(&refused), words);
    }

    // A second trigger lists first (newest edit first); an update moves
    // the first back on top and replaces the parts it names.
    let second = create(
        &w,
        json!({"name": "On success", "source": {"type": "run-completed", "status": "succeeded"},
               "prompt": "Say thanks", "continuation": {"kind": "newThread"}}),
    )
    .await;
    assert_eq!(second["continuation"], json!({"kind": "newThread"}));
    let listed = w
        .act(json!({"_": "ListAgentTriggers", "agentId": w.agent_id}))
        .await;
    builtin::ok(&listed);
    let names: Vec<Value> = json_of(&listed.body)["triggers"]
        .as_array()
        .expect("triggers")
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(names, [json!("On success"), json!("Daily digest")]);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let updated = trigger_of(
        &w.act(json!({"_": "UpdateAgentTrigger", "triggerId": id,
                      "patch": {"enabled": false, "name": " Weekly digest "}}))
            .await,
    );
    assert_eq!(updated["name"], "Weekly digest");
    assert_eq!(updated["enabled"], false);
    assert_eq!(updated["source"], created["source"]);
    assert!(updated["updatedAt"].as_i64() > created["updatedAt"].as_i64());
    let empty = w
        .act(json!({"_": "UpdateAgentTrigger", "triggerId": id, "patch": {}}))
        .await;
    assert_eq!(empty.status, 400);
    assert_eq!(message(&empty), "Agent trigger patch is empty");
    let listed = w
        .act(json!({"_": "ListAgentTriggers", "agentId": w.agent_id}))
        .await;
    assert_eq!(json_of(&listed.body)["triggers"][0]["id"], id.as_str());

    // Get: the trigger and the sessions it started (none yet).
    let got = w
        .act(json!({"_": "GetAgentTrigger", "triggerId": id}))
        .await;
    builtin::ok(&got);
    assert_eq!(json_of(&got.body)["trigger"]["name"], "Weekly digest");
    assert_eq!(json_of(&got.body)["sessions"], json!([]));

    // A client request id makes a create idempotent.
    let keyed = |name: &str| {
        json!({"_": "CreateAgentTrigger", "agentId": w.agent_id, "clientRequestId": "req-1",
               "trigger": interval(name, 5)})
    };
    let first = trigger_of(&w.act(keyed("Keyed")).await);
    let again = trigger_of(&w.act(keyed("Keyed")).await);
    assert_eq!(first["id"], again["id"]);
    let other = w.act(keyed("Other")).await;
    assert_eq!(other.status, 409, "{:?}", other.body);

    // Delete: gone, and a second delete is 404 with the reference's words.
    let deleted = w
        .act(json!({"_": "DeleteAgentTrigger", "triggerId": id}))
        .await;
    builtin::ok(&deleted);
    assert_eq!(json_of(&deleted.body)["triggerId"], id.as_str());
    let gone = w
        .act(json!({"_": "GetAgentTrigger", "triggerId": id}))
        .await;
    assert_eq!(gone.status, 404);
    assert_eq!(message(&gone), "Agent trigger not found");
    // The sidecar is still up and the other triggers are intact.
    let listed = w
        .act(json!({"_": "ListAgentTriggers", "agentId": w.agent_id}))
        .await;
    assert_eq!(
        json_of(&listed.body)["triggers"].as_array().map(Vec::len),
        Some(2)
    );
}

both_backends!(crud_and_checks);

async fn strangers_readers_and_writers(backend: Backend) {
    let w = builtin::world_on(Flavor::OpenAi, backend).await;
    let made = create(&w, interval("Owned", 60)).await;
    let id = made["id"].as_str().expect("id").to_owned();
    let stranger = Signer::new();
    let reader = w.collaborator("reader").await;
    let writer = w.collaborator("writer").await;
    let actions = |id: &str| {
        [
            json!({"_": "ListAgentTriggers", "agentId": w.agent_id}),
            json!({"_": "GetAgentTrigger", "triggerId": id}),
            json!({"_": "CreateAgentTrigger", "agentId": w.agent_id, "trigger": interval("New", 5)}),
            json!({"_": "UpdateAgentTrigger", "triggerId": id, "patch": {"name": "Renamed"}}),
            json!({"_": "DeleteAgentTrigger", "triggerId": id}),
        ]
    };
    for (i, action) in actions(&id).into_iter().enumerate() {
        let a = call(&w.target, &stranger, action).await;
        assert_eq!(a.status, 404, "stranger, action {i}: {:?}", a.body);
        let expected = if i == 0 || i == 2 {
            "Agent not found"
        } else {
            "Agent trigger not found"
        };
        assert_eq!(message(&a), expected);
    }
    for (i, action) in actions(&id).into_iter().enumerate() {
        let a = call(&w.target, &reader, action).await;
        let want = if i < 2 { 200 } else { 403 };
        assert_eq!(a.status, want, "reader, action {i}: {:?}", a.body);
    }
    for (i, action) in actions(&id).into_iter().enumerate() {
        let a = call(&w.target, &writer, action).await;
        assert_eq!(a.status, 200, "writer, action {i}: {:?}", a.body);
        if i == 2 {
            // A writer's trigger belongs to the owner's account.
            assert_eq!(json_of(&a.body)["trigger"]["account"], w.owner.id());
        }
    }
}

both_backends!(strangers_readers_and_writers);

async fn a_schedule_fires_once(backend: Backend) {
    let w = builtin::world_on(Flavor::OpenAi, backend).await;
    w.provider
        .set_default(Reply::Text(vec!["Here is the digest.".to_owned()]));
    let made = create(&w, interval("Digest", 1)).await;
    let id = made["id"].as_str().expect("id").to_owned();
    let created = made["createdAt"].as_i64().expect("createdAt");

    // Not yet due: looked at, nothing fires.
    let early = tick(&w, created + 30_000).await;
    assert_eq!(early["fired"], 0, "{early}");
    assert!(firings(&w, &id).await.is_empty());

    // Due: one firing, one session, one run; the same look again and a
    // look a moment later fire nothing more.
    let due = created + MINUTE + 1_000;
    let fired = tick(&w, due).await;
    assert_eq!(fired["fired"], 1, "{fired}");
    let again = tick(&w, due).await;
    assert_eq!(again["fired"], 0, "{again}");
    let later = tick(&w, due + 1_000).await;
    assert_eq!(later["fired"], 0, "{later}");
    let rows = firings(&w, &id).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let key = format!("schedule:{id}:{}", created + MINUTE);
    assert_eq!(rows[0]["activity_key"], key.as_str());
    let session = rows[0]["session_id"]
        .as_str()
        .expect("a session")
        .to_owned();
    let runs = runs_of_firings(&w).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["origin"], "trigger");
    assert_eq!(runs[0]["queue"], "background");
    assert_eq!(runs[0]["max_attempts"], 3);
    assert_eq!(runs[0]["session_id"], session.as_str());
    let run_id = runs[0]["run_id"].as_str().expect("run").to_owned();
    assert_eq!(
        run_id,
        format!("firing-{}", rows[0]["firing_id"].as_str().unwrap())
    );
    builtin::until_status(&w, &run_id, "succeeded").await;

    // What a client reads back: the title, the trigger context, and the
    // first words (prompt, context, instructions).
    let got = w.get_session(&session).await;
    let body = json_of(&got.body);
    let title = body["session"]["title"].as_str().expect("a title");
    assert!(
        title.starts_with("Digest — Scheduled interval at "),
        "{title}"
    );
    let started = &body["session"]["startedByTrigger"];
    assert_eq!(started["triggerId"], id.as_str());
    assert_eq!(started["triggerName"], "Digest");
    assert_eq!(started["activityKey"], key.as_str());
    assert!(started["activitySummary"]
        .as_str()
        .unwrap_or_default()
        .starts_with("Scheduled interval at "));
    let context = &body["triggerContext"];
    assert_eq!(context["status"], "created");
    assert_eq!(context["prompt"], "Summarize **today's** news");
    assert_eq!(context["activity"]["type"], "schedule");
    assert_eq!(context["activity"]["scheduledAt"], created + MINUTE);
    let words = w.provider.requests()[0].body.to_string();
    assert!(words.contains("Summarize **today's** news"), "{words}");
    assert!(words.contains("<trigger_context>"), "{words}");
    assert!(words.contains("<trigger_instructions>"), "{words}");

    // The trigger says when it fired, and lists its session.
    let got = w
        .act(json!({"_": "GetAgentTrigger", "triggerId": id}))
        .await;
    let body = json_of(&got.body);
    assert_eq!(body["trigger"]["lastFiredAt"], due);
    assert!(body["trigger"]["lastCheckedAt"].as_i64().is_some());
    assert_eq!(body["sessions"][0]["id"], session.as_str());
    assert_eq!(
        body["sessions"][0]["startedByTrigger"]["triggerId"],
        id.as_str()
    );

    // The next interval counts from that firing.
    let next = tick(&w, due + MINUTE - 1).await;
    assert_eq!(next["fired"], 0, "{next}");
    let next = tick(&w, due + MINUTE).await;
    assert_eq!(next["fired"], 1, "{next}");
    assert_eq!(firings(&w, &id).await.len(), 2);

    // Deleting the trigger keeps its sessions, without attribution.
    builtin::ok(
        &w.act(json!({"_": "DeleteAgentTrigger", "triggerId": id}))
            .await,
    );
    assert!(firings(&w, &id).await.is_empty());
    let got = w.get_session(&session).await;
    let body = json_of(&got.body);
    assert!(body["session"].get("startedByTrigger").is_none(), "{body}");
    assert!(body.get("triggerContext").is_none());
}

both_backends!(a_schedule_fires_once);

async fn a_once_schedule_disables_itself_and_is_not_fired_again(backend: Backend) {
    let w = builtin::world_on(Flavor::OpenAi, backend).await;
    w.provider
        .set_default(Reply::Text(vec!["Done.".to_owned()]));
    let run_at = agentos_tests::seed::now_ms() + 10 * MINUTE;
    let made = create(
        &w,
        json!({"name": "Reminder", "prompt": "Remind me",
               "source": {"type": "schedule", "schedule": {"kind": "once", "runAt": run_at,
                                                           "timezone": "Europe/Berlin"}}}),
    )
    .await;
    assert_eq!(made["source"]["schedule"]["timezone"], "Europe/Berlin");
    let id = made["id"].as_str().expect("id").to_owned();
    assert_eq!(tick(&w, run_at - 1).await["fired"], 0);
    assert_eq!(tick(&w, run_at + 5).await["fired"], 1);
    let got = w
        .act(json!({"_": "GetAgentTrigger", "triggerId": id}))
        .await;
    assert_eq!(json_of(&got.body)["trigger"]["enabled"], false);
    let enabled = trigger_of(
        &w.act(json!({"_": "UpdateAgentTrigger", "triggerId": id, "patch": {"enabled": true}}))
            .await,
    );
    assert_eq!(enabled["enabled"], true);
    assert_eq!(tick(&w, run_at + MINUTE).await["fired"], 0);
    assert_eq!(firings(&w, &id).await.len(), 1);
    let rows = firings(&w, &id).await;
    let session = rows[0]["session_id"].as_str().expect("session");
    let got = w.get_session(session).await;
    let title = json_of(&got.body)["session"]["title"].clone();
    assert_eq!(
        title,
        format!("Reminder — One-time schedule at {}", chrono_iso(run_at))
    );
}

both_backends!(a_once_schedule_disables_itself_and_is_not_fired_again);

/// An instant as `toISOString` writes it.
fn chrono_iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("an instant")
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

async fn a_finished_run_fires_the_next_agent_and_a_trigger_never_feeds_itself(backend: Backend) {
    let w = builtin::world_on(Flavor::OpenAi, backend).await;
    w.provider.set_default(Reply::Text(vec!["Ok.".to_owned()]));
    // Agent Y, started whenever one of X's runs succeeds.
    let y = w
        .act(json!({"_": "CreateAgent", "definition": builtin::definition(None)}))
        .await;
    builtin::ok(&y);
    let y = y.text("agentId");
    let chain = trigger_of(
        &w.act(json!({"_": "CreateAgentTrigger", "agentId": y, "trigger": {
            "name": "Follow up", "prompt": "Follow up on X's work",
            "source": {"type": "run-completed", "agentId": w.agent_id, "status": "succeeded"}}}))
            .await,
    );
    // And one on X that fires on every run of X, its own included.
    let own = create(
        &w,
        json!({"name": "Echo", "prompt": "Again",
               "source": {"type": "run-completed", "agentId": w.agent_id}}),
    )
    .await;

    let session = w.session().await;
    builtin::ok(&w.message(&session, "do the work").await);

    // X's turn fires both; the echo's own run (on X) ends and fires the
    // follow-up again, but never the echo itself.
    eventually("the chain settles", || async {
        let runs = runs_of_firings(&w).await;
        runs.len() == 3 && runs.iter().all(|r| r["status"] == "succeeded")
    })
    .await;
    let own_id = own["id"].as_str().expect("id");
    let chain_id = chain["id"].as_str().expect("id");
    assert_eq!(firings(&w, own_id).await.len(), 1);
    assert_eq!(firings(&w, chain_id).await.len(), 2);
    // The follow-up's sessions belong to Y and say which run ended.
    let rows = firings(&w, chain_id).await;
    let session = rows[0]["session_id"].as_str().expect("session");
    let got = w.get_session(session).await;
    let body = json_of(&got.body);
    assert_eq!(body["session"]["agentId"], y.as_str());
    assert_eq!(body["triggerContext"]["activity"]["type"], "run-completed");
    assert_eq!(body["triggerContext"]["activity"]["runStatus"], "succeeded");
    assert!(rows[0]["activity_key"]
        .as_str()
        .unwrap_or_default()
        .starts_with("run:"));
    // A short pause shows nothing else fires.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(runs_of_firings(&w).await.len(), 3);
}

both_backends!(a_finished_run_fires_the_next_agent_and_a_trigger_never_feeds_itself);

async fn a_wake_reaches_a_parked_script_run_once(backend: Backend) {
    let w = builtin::world_on(Flavor::OpenAi, backend).await;
    let waits = "export default async function (input, ctx) {\n\
                 const e = await ctx.waitForEvent({signal: 'approve'}, {label: 'approval'});\n\
                 return {source: e.source, signal: e.signal, payload: e.payload};\n\
                 }";
    let session = w.session().await;
    w.provider.push(Reply::ToolCalls(vec![(
        "w1".to_owned(),
        "delegate".to_owned(),
        json!({"script": waits, "title": "approval gate"}),
    )]));
    w.provider.push(Reply::Text(vec!["approved".to_owned()]));
    builtin::ok(&w.message(&session, "wait for approval").await);
    let listed = w.sc.ok("runs/list", json!({ "sessionId": session })).await;
    let parent = listed["runs"][0]["id"].as_str().expect("run").to_owned();
    let tree = eventually_tree(&w, &parent).await;
    let child = tree.as_str();

    // A wake with nobody listening on its signal is recorded, not lost.
    let nobody = create(
        &w,
        json!({"name": "Nobody", "prompt": "x", "continuation": {"kind": "wake", "signal": "other"},
               "source": {"type": "schedule", "schedule": {"kind": "once", "runAt": 1}}}),
    )
    .await;
    let at = agentos_tests::seed::now_ms();
    assert_eq!(tick(&w, at).await["fired"], 0);
    let rows = firings(&w, nobody["id"].as_str().unwrap()).await;
    assert_eq!(rows[0]["status"], "no-listener");
    let got = w
        .act(json!({"_": "GetAgentTrigger", "triggerId": nobody["id"]}))
        .await;
    assert!(json_of(&got.body)["trigger"].get("lastFiredAt").is_none());

    // The approving one wakes the parked child with its payload.
    let approve = create(
        &w,
        json!({"name": "Approve", "prompt": "x",
               "continuation": {"kind": "wake", "signal": "approve", "payload": {"ok": true}},
               "source": {"type": "schedule", "schedule": {"kind": "once", "runAt": 1}}}),
    )
    .await;
    assert_eq!(tick(&w, at + 1).await["fired"], 1);
    builtin::until_status(&w, child, "succeeded").await;
    let done = w.sc.ok("runs/get", json!({"runId": child})).await;
    assert_eq!(
        done["run"]["output"],
        json!({"source": "trigger", "signal": "approve", "payload": {"ok": true}})
    );
    let rows = firings(&w, approve["id"].as_str().unwrap()).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], "delivered");
    assert_eq!(rows[0]["session_id"], Value::Null);
    let events: Vec<Value> = builtin::journal(&w, child)
        .await
        .into_iter()
        .filter(|e| e["entry"]["kind"] == "event")
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    // No session was made for a wake.
    assert!(runs_of_firings(&w).await.is_empty());
}

both_backends!(a_wake_reaches_a_parked_script_run_once);

/// The delegated child of `parent`, once it waits.
async fn eventually_tree(w: &World, parent: &str) -> String {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let tree = w.sc.ok("runs/list", json!({ "rootRunId": parent })).await;
        if let Some(child) = tree["runs"].as_array().and_then(|r| r.get(1)) {
            if child["status"] == "waiting" {
                return child["id"].as_str().expect("id").to_owned();
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no waiting child");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn account_changes_reach_a_websocket(backend: Backend) {
    let w = builtin::world_on(Flavor::OpenAi, backend).await;
    let addr = w.sc.ready["http"].as_str().expect("http").to_owned();
    let mut ws = client::Ws::open(&addr).await;
    let key = format!("account/{}", w.owner.id());
    ws.subscribed(&w.owner, &key, None).await;
    let made = create(&w, interval("Watched", 60)).await;
    let change = ws.next_where(|e| e["key"] == key.as_str()).await;
    assert_eq!(change["value"]["reason"], "trigger-created");
    assert_eq!(change["value"]["agentId"], w.agent_id.as_str());
    builtin::ok(
        &w.act(json!({"_": "UpdateAgentTrigger", "triggerId": made["id"], "patch": {"name": "W"}}))
            .await,
    );
    let change = ws.next_where(|e| e["key"] == key.as_str()).await;
    assert_eq!(change["value"]["reason"], "trigger-updated");
    // A firing's session is announced like any new session.
    w.provider.set_default(Reply::Text(vec!["Ok.".to_owned()]));
    let created = made["createdAt"].as_i64().unwrap();
    assert_eq!(tick(&w, created + 61 * MINUTE).await["fired"], 1);
    let change = ws
        .next_where(|e| e["key"] == key.as_str() && e["value"]["reason"] == "session-created")
        .await;
    assert_eq!(change["value"]["agentId"], w.agent_id.as_str());
    builtin::ok(
        &w.act(json!({"_": "DeleteAgentTrigger", "triggerId": made["id"]}))
            .await,
    );
    let change = ws
        .next_where(|e| e["key"] == key.as_str() && e["value"]["reason"] == "trigger-deleted")
        .await;
    assert_eq!(change["value"]["agentId"], w.agent_id.as_str());
}

both_backends!(account_changes_reach_a_websocket);

async fn killed_at_any_moment_a_key_fires_once_and_no_due_firing_is_lost(backend: Backend) {
    let mut w = builtin::world_on(Flavor::OpenAi, backend).await;
    w.provider.set_default(Reply::Text(vec!["Ok.".to_owned()]));
    let mut ids = Vec::new();
    let mut wakes = Vec::new();
    let mut rng = 7u64;
    for round in 0..6 {
        // A few due once-triggers, then a look, killed after a varying
        // moment (before, during or after the claims).
        for i in 0..4 {
            let made = create(
                &w,
                json!({"name": format!("R{round}-{i}"), "prompt": "Go",
                       "source": {"type": "schedule", "schedule": {"kind": "once", "runAt": 1}}}),
            )
            .await;
            ids.push(made["id"].as_str().expect("id").to_owned());
        }
        // And a wake nobody listens for: its claim commits with its
        // outcome, never alone.
        let wake = create(
            &w,
            json!({"name": format!("W{round}"), "prompt": "Go",
                   "continuation": {"kind": "wake", "signal": "nobody"},
                   "source": {"type": "schedule", "schedule": {"kind": "once", "runAt": 1}}}),
        )
        .await;
        wakes.push(wake["id"].as_str().expect("id").to_owned());
        let client = w.sc.socket.clone();
        let look = tokio::spawn(async move {
            let c = agentos_client::ctl::HostClient::connect(&client).await;
            if let Ok((c, _notes)) = c {
                let _ = c.call("triggers/tick", json!({})).await;
            }
        });
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        tokio::time::sleep(Duration::from_millis((rng >> 33) % 40)).await;
        w = w.crash().await;
        look.abort();
    }
    // After the last start, every trigger fired exactly once.
    tick(&w, agentos_tests::seed::now_ms()).await;
    for id in &ids {
        let rows = firings(&w, id).await;
        assert_eq!(rows.len(), 1, "{id}: {rows:?}");
    }
    for id in &wakes {
        let rows = firings(&w, id).await;
        assert_eq!(rows.len(), 1, "{id}: {rows:?}");
        assert_eq!(rows[0]["status"], "no-listener");
    }
    let runs = runs_of_firings(&w).await;
    assert_eq!(runs.len(), ids.len(), "{runs:?}");
    let sessions =
        w.sc.stored(
            "SELECT count(*) AS n FROM agentos_core_trigger_firings f \
             JOIN agentos_core_sessions s ON s.session_id = f.session_id",
        )
        .await;
    assert_eq!(sessions[0]["n"], ids.len());
    // Each run ends: a turn a kill cut short fails as uncertain (never
    // resent), the others succeed.
    eventually("every firing's run ends", || async {
        runs_of_firings(&w)
            .await
            .iter()
            .all(|r| r["status"] == "succeeded" || r["status"] == "failed")
    })
    .await;
    // A firing whose run a kill cut short says so, like any failed one.
    eventually("failed runs mark their firings", || async {
        let unsettled =
            w.sc.stored(
                "SELECT count(*) AS n FROM agentos_core_trigger_firings f \
                 JOIN agentos_core_runs r ON r.trigger_firing_id = f.firing_id \
                 WHERE r.status = 'failed' AND f.status <> 'error'",
            )
            .await;
        unsettled[0]["n"] == 0
    })
    .await;
}

both_backends!(killed_at_any_moment_a_key_fires_once_and_no_due_firing_is_lost);

async fn a_failed_firing_says_why_and_the_agent_reads_its_triggers(backend: Backend) {
    let w = builtin::world_on(Flavor::OpenAi, backend).await;
    w.provider.set_default(Reply::Status(
        400,
        json!({"error": {"message": "bad request", "type": "invalid_request_error"}}).to_string(),
    ));
    let made = create(&w, interval("Failing", 1)).await;
    let id = made["id"].as_str().expect("id").to_owned();
    let created = made["createdAt"].as_i64().unwrap();
    assert_eq!(tick(&w, created + MINUTE).await["fired"], 1);
    let run = runs_of_firings(&w).await[0]["run_id"]
        .as_str()
        .expect("run")
        .to_owned();
    builtin::until_status(&w, &run, "failed").await;
    eventually("the firing says it failed", || async {
        firings(&w, &id).await[0]["status"] == "error"
    })
    .await;
    let got = w
        .act(json!({"_": "GetAgentTrigger", "triggerId": id}))
        .await;
    let error = json_of(&got.body)["trigger"]["lastError"].clone();
    assert!(error.as_str().is_some_and(|e| !e.is_empty()), "{error}");
    // An edit clears it.
    let edited = trigger_of(
        &w.act(json!({"_": "UpdateAgentTrigger", "triggerId": id, "patch": {"enabled": false}}))
            .await,
    );
    assert!(edited.get("lastError").is_none(), "{edited}");

    // A hypermedia source is kept as written, without an error, and the
    // agent reads that it does not fire here yet.
    let mention = create(
        &w,
        json!({"name": "Mentions", "prompt": [{"block": {"id": "b1", "type": "Paragraph",
                   "text": "Reply to the mention", "annotations": [], "attributes": {}}}],
               "source": {"type": "user-mention", "mentionedAccounts": ["z6Mkme", "z6Mkme"]}}),
    )
    .await;
    assert_eq!(mention["source"]["mentionedAccounts"], json!(["z6Mkme"]));
    assert_eq!(mention["prompt"][0]["block"]["id"], "b1");
    assert!(mention.get("lastError").is_none());
    let session = w.session().await;
    let listing = w
        .invoke(&session, "read", json!({"address": "~/triggers/"}))
        .await;
    builtin::ok(&listing);
    let output = json_of(&listing.body)["output"].clone();
    assert_eq!(
        output["triggers"].as_array().map(Vec::len),
        Some(2),
        "{output}"
    );
    let entry = output["triggers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Mentions")
        .cloned()
        .expect("the mention trigger");
    assert_eq!(entry["when"], "mentions of z6Mkme");
    assert!(
        entry.get("note").is_none(),
        "hypermedia triggers fire: {entry}"
    );
    let one = w
        .invoke(&session, "read", json!({"address": "~/triggers/Failing"}))
        .await;
    let output = json_of(&one.body)["output"].clone();
    assert_eq!(output["id"], id.as_str());
    assert_eq!(output["prompt"], "Summarize **today's** news");
    assert_eq!(output["recentFirings"][0]["status"], "error");
    assert!(output["recentFirings"][0]["thread"]
        .as_str()
        .is_some_and(|t| t.starts_with("thread:")));
}

both_backends!(a_failed_firing_says_why_and_the_agent_reads_its_triggers);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_hold_and_an_agent_takes_its_triggers_with_it() {
    let w = builtin::world_with(
        Flavor::OpenAi,
        Backend::SqliteFile,
        json!({"control": {"maxTriggersPerAgent": 2, "maxFiringsPerTrigger": 2}}),
    )
    .await;
    w.provider.set_default(Reply::Text(vec!["Ok.".to_owned()]));
    let made = create(&w, interval("One", 1)).await;
    create(&w, interval("Two", 1)).await;
    let third = w
        .act(json!({"_": "CreateAgentTrigger", "agentId": w.agent_id, "trigger": interval("Three", 1)}))
        .await;
    assert_eq!(third.status, 409, "{:?}", third.body);
    assert!(message(&third).contains("limits.control.maxTriggersPerAgent"));
    // A trigger keeps its newest two firings, and any whose run has not
    // ended (the loop guard walks back through it).
    let id = made["id"].as_str().unwrap();
    let mut at = made["createdAt"].as_i64().unwrap();
    for _ in 0..3 {
        at += MINUTE;
        tick(&w, at).await;
    }
    eventually("the firings' runs end", || async {
        runs_of_firings(&w)
            .await
            .iter()
            .all(|r| r["status"] == "succeeded")
    })
    .await;
    at += MINUTE;
    tick(&w, at).await;
    let kept = firings(&w, id).await;
    assert_eq!(kept.len(), 2, "{kept:?}");
    let keys: Vec<&str> = kept
        .iter()
        .filter_map(|f| f["activity_key"].as_str())
        .collect();
    assert!(
        keys.iter().any(|k| k.ends_with(&format!(":{at}"))),
        "{keys:?}"
    );
    // Deleting the agent deletes its triggers and their firings.
    builtin::ok(
        &w.act(json!({"_": "DeleteAgent", "agentId": w.agent_id}))
            .await,
    );
    let left = w
        .sc
        .stored("SELECT (SELECT count(*) FROM agentos_core_triggers) AS t, (SELECT count(*) FROM agentos_core_trigger_firings) AS f")
        .await;
    assert_eq!(left[0]["t"], 0);
    assert_eq!(left[0]["f"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_keep_triggers_over_the_host_socket() {
    let w = builtin::world(Flavor::OpenAi).await;
    let made =
        w.sc.ok(
            "triggers/create",
            json!({"agentId": w.agent_id, "trigger": interval("Ops", 30)}),
        )
        .await;
    let trigger = &made["trigger"];
    assert_eq!(trigger["account"], w.owner.id());
    let id = trigger["id"].as_str().expect("id").to_owned();
    let listed =
        w.sc.ok("triggers/list", json!({"agentId": w.agent_id}))
            .await;
    assert_eq!(listed["triggers"][0]["id"], id.as_str());
    let updated =
        w.sc.ok(
            "triggers/update",
            json!({"triggerId": id, "patch": {"name": "Ops 2"}}),
        )
        .await;
    assert_eq!(updated["trigger"]["name"], "Ops 2");
    let bad =
        w.sc.err("triggers/update", json!({"triggerId": id, "patch": {}}))
            .await;
    assert!(
        bad.message.contains("Agent trigger patch is empty"),
        "{bad:?}"
    );
    let missing = w.sc.err("triggers/get", json!({"triggerId": "nope"})).await;
    assert_eq!(missing.data_code(), Some("control_not_found"));
    let got = w.sc.ok("triggers/get", json!({"triggerId": id})).await;
    assert_eq!(got["sessionIds"], json!([]));
    w.sc.ok("triggers/delete", json!({"triggerId": id})).await;
    let listed =
        w.sc.ok("triggers/list", json!({"agentId": w.agent_id}))
            .await;
    assert_eq!(listed["triggers"], json!([]));
    // Unknown fields are refused, not ignored.
    let odd = w.sc.err("triggers/tick", json!({"when": 1})).await;
    assert_eq!(odd.code, -32602);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_triggers_keeps_and_ticks_them() {
    let w = builtin::world(Flavor::OpenAi).await;
    w.provider.set_default(Reply::Text(vec!["Ok.".to_owned()]));
    let s = &w.sc.socket;
    let trigger = interval("From the shell", 1).to_string();
    let out = common::ctl(s, &["triggers", "create", &w.agent_id, &trigger]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("active   schedule       From the shell"),
        "{}",
        out.stdout
    );
    let out = common::ctl(s, &["--json", "triggers", "list", &w.agent_id]).await;
    let listed: Value = serde_json::from_str(&out.stdout).expect("json");
    let made = &listed["triggers"][0];
    let id = made["id"].as_str().expect("id").to_owned();
    let at = (made["createdAt"].as_i64().unwrap() + MINUTE).to_string();
    let out = common::ctl(s, &["triggers", "tick", "--at", &at]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("1 fired"), "{}", out.stdout);
    let out = common::ctl(s, &["triggers", "update", &id, "{\"enabled\": false}"]).await;
    assert!(out.stdout.contains("disabled"), "{}", out.stdout);
    // Bad arguments: not JSON exits 2 before connecting; a refused patch
    // exits 1 with the sidecar's words.
    let out = common::ctl(s, &["triggers", "update", &id, "{nope"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    let out = common::ctl(s, &["triggers", "update", &id, "{}"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("Agent trigger patch is empty"),
        "{}",
        out.stderr
    );
    let out = common::ctl(s, &["triggers", "delete", &id]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = common::ctl(s, &["triggers", "list", &w.agent_id]).await;
    assert_eq!(out.stdout.trim(), "no triggers");
}

/// Milliseconds of an RFC 3339 instant.
fn ms(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .expect("an instant")
        .timestamp_millis()
}

async fn a_weekly_schedule_keeps_berlin_time_across_both_changes(backend: Backend) {
    let w = builtin::world_on(Flavor::OpenAi, backend).await;
    w.provider.set_default(Reply::Text(vec!["Ok.".to_owned()]));
    let made = create(
        &w,
        json!({"name": "Sunday", "prompt": "Weekly review",
               "source": {"type": "schedule", "schedule": {"kind": "weekly", "daysOfWeek": [0, 0],
                          "timeOfDay": " 02:30 ", "timezone": "Europe/Berlin"}}}),
    )
    .await;
    assert_eq!(made["source"]["schedule"]["daysOfWeek"], json!([0]));
    assert_eq!(made["source"]["schedule"]["timeOfDay"], "02:30");
    let id = made["id"].as_str().expect("id").to_owned();
    let key = |at: &str| format!("schedule:{id}:{}", ms(at));
    // The Sunday before: 02:30 CET.
    assert_eq!(tick(&w, ms("2027-03-27T12:00:00Z")).await["fired"], 1);
    // Spring forward: 02:30 does not exist; it fires at 01:30 CET, as
    // Seed's service computes it.
    assert_eq!(tick(&w, ms("2027-03-28T00:29:59Z")).await["fired"], 0);
    assert_eq!(tick(&w, ms("2027-03-28T00:30:00Z")).await["fired"], 1);
    // The Sunday before fall back: 02:30 CEST.
    assert_eq!(tick(&w, ms("2027-10-30T12:00:00Z")).await["fired"], 1);
    // Fall back: 02:30 happens twice; it fires at the later (CET) one.
    assert_eq!(tick(&w, ms("2027-10-31T01:29:59Z")).await["fired"], 0);
    assert_eq!(tick(&w, ms("2027-10-31T01:30:00Z")).await["fired"], 1);
    let keys: Vec<String> = firings(&w, &id)
        .await
        .iter()
        .filter_map(|f| f["activity_key"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        keys,
        [
            key("2027-03-21T01:30:00Z"),
            key("2027-03-28T00:30:00Z"),
            key("2027-10-24T00:30:00Z"),
            key("2027-10-31T01:30:00Z"),
        ]
    );
}

both_backends!(a_weekly_schedule_keeps_berlin_time_across_both_changes);

async fn a_trigger_never_catches_up_on_runs_from_before_it_was_enabled(backend: Backend) {
    let w = builtin::world_on(Flavor::OpenAi, backend).await;
    w.provider.set_default(Reply::Text(vec!["Ok.".to_owned()]));
    let made = create(
        &w,
        json!({"name": "Later", "prompt": "Follow up", "enabled": false,
               "source": {"type": "run-completed", "agentId": w.agent_id}}),
    )
    .await;
    let id = made["id"].as_str().expect("id").to_owned();
    let session = w.session().await;
    builtin::ok(&w.message(&session, "while it is off").await);
    builtin::ok(
        &w.act(json!({"_": "UpdateAgentTrigger", "triggerId": id, "patch": {"enabled": true}}))
            .await,
    );
    // A start catches up on what ended while nobody listened, but not on
    // what ended before the trigger was enabled.
    let w = w.restart().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(firings(&w, &id).await.is_empty());
    // A run that ends now fires it, once.
    builtin::ok(&w.message(&session, "now it is on").await);
    eventually("the trigger fires", || async {
        firings(&w, &id).await.len() == 1
    })
    .await;
    let w = w.restart().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(firings(&w, &id).await.len(), 1);
}

both_backends!(a_trigger_never_catches_up_on_runs_from_before_it_was_enabled);
