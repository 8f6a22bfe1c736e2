//! Runs over the host socket and `ctl runs`, through the real binary and
//! the fake agent: a host prompt is a run of its own that ends with the
//! turn; `runs/list`, `runs/get`, `runs/journal`, `runs/cancel` and
//! `runs/signal` answer for it; an unknown run is `run_not_found` and bad
//! arguments are invalid params; `ctl runs list`, `tree` and `get` print
//! it, and `ctl` refuses bad arguments with exit 2. Then a real tree (the
//! builtin agent delegating to a script that waits on a signal): the host
//! lists it whole from any of its runs, `ctl runs tree` draws it with why
//! each run waits, `ctl runs signal` answers the child once, and
//! `ctl runs cancel` ends a second tree whole.

#[path = "common/builtin.rs"]
mod builtin;
mod common;

use agentos_tests::provider_server::{Flavor, Reply};
use common::{ctl, data_code, eventually, Backend, Sidecar};
use serde_json::{json, Value};

/// Opens `session` with the echo agent and runs one turn; answers the
/// session's only run.
async fn one_turn(sc: &Sidecar, session: &str) -> Value {
    sc.open(session, "echo").await;
    let answer = sc
        .prompt(session, "echo hi")
        .await
        .expect("the prompt succeeds");
    assert_eq!(answer["stopReason"], "end_turn");
    let listed = sc.ok("runs/list", json!({ "sessionId": session })).await;
    let runs = listed["runs"].as_array().expect("runs").clone();
    assert_eq!(runs.len(), 1, "{listed}");
    runs[0].clone()
}

async fn host_runs_methods_answer_for_a_prompt_turn(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    let run = one_turn(&sc, "r1").await;
    assert_eq!(run["kind"], "agent");
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["sessionId"], "r1");
    assert_eq!(run["rootRunId"], run["id"]);
    assert_eq!(run["depth"], 0);
    assert_eq!(run["childRunCount"], 0);
    assert!(run.get("parentRunId").is_none());
    assert!(run.get("wait").is_none());
    assert!(run["createdAt"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert!(run["finishedAt"].is_string());
    let id = run["id"].as_str().expect("id").to_owned();

    let got = sc.ok("runs/get", json!({ "runId": id })).await;
    assert_eq!(got["run"], run);

    // The tree, named by its root, is that one run; so is the filtered
    // session listing, and another status finds nothing.
    let tree = sc.ok("runs/list", json!({ "rootRunId": id })).await;
    assert_eq!(tree["runs"], json!([run]));
    let done = sc
        .ok(
            "runs/list",
            json!({"sessionId": "r1", "status": "succeeded", "limit": 5}),
        )
        .await;
    assert_eq!(done["runs"].as_array().map(Vec::len), Some(1));
    let queued = sc
        .ok("runs/list", json!({"sessionId": "r1", "status": "queued"}))
        .await;
    assert_eq!(queued["runs"], json!([]));
    let none = sc.ok("runs/list", json!({ "agentId": "nobody" })).await;
    assert_eq!(none["runs"], json!([]));

    let journal = sc.ok("runs/journal", json!({ "runId": id })).await;
    assert_eq!(journal, json!({"runId": id, "entries": []}));
    let journal = sc
        .ok(
            "runs/journal",
            json!({"runId": id, "afterSeq": 3, "limit": 10}),
        )
        .await;
    assert_eq!(journal["entries"], json!([]));

    // A finished run has nothing to cancel and waits on no signal.
    let canceled = sc.ok("runs/cancel", json!({ "runId": id })).await;
    assert_eq!(canceled, json!({"runId": id, "canceled": false}));
    let signaled = sc
        .ok(
            "runs/signal",
            json!({"runId": id, "signal": "go", "payload": {"n": 1}}),
        )
        .await;
    assert_eq!(signaled, json!({"runId": id, "delivered": false}));
    let after = sc.ok("runs/get", json!({ "runId": id })).await;
    assert_eq!(after["run"]["status"], "succeeded");

    // A second turn is a second run, listed newest first.
    sc.prompt("r1", "echo again").await.expect("second prompt");
    let listed = sc.ok("runs/list", json!({ "sessionId": "r1" })).await;
    let runs = listed["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1]["id"], json!(id));
    assert_ne!(runs[0]["id"], json!(id));
    let one = sc
        .ok("runs/list", json!({"sessionId": "r1", "limit": 1}))
        .await;
    assert_eq!(one["runs"].as_array().map(Vec::len), Some(1));
    assert_eq!(one["runs"][0]["id"], runs[0]["id"]);

    // Unknown runs.
    for (method, params) in [
        ("runs/get", json!({"runId": "no-such-run"})),
        ("runs/list", json!({"rootRunId": "no-such-run"})),
        ("runs/cancel", json!({"runId": "no-such-run"})),
        (
            "runs/signal",
            json!({"runId": "no-such-run", "signal": "go"}),
        ),
        ("runs/journal", json!({"runId": "no-such-run"})),
    ] {
        let e = sc.err(method, params).await;
        assert_eq!(
            (e.code, data_code(&e)),
            (-32000, "run_not_found"),
            "{method}"
        );
    }

    // Bad arguments are invalid params, and the connection stays usable.
    let big = "x".repeat(64 * 1024);
    for (method, params) in [
        ("runs/list", json!({})),
        ("runs/list", json!({"sessionId": "r1", "agentId": "echo"})),
        ("runs/list", json!({"sessionId": "r1", "rootRunId": id})),
        (
            "runs/list",
            json!({"sessionId": "r1", "status": "sleeping"}),
        ),
        ("runs/list", json!({"sessionId": "r1", "limit": 0})),
        ("runs/list", json!({"sessionId": "r1", "extra": 1})),
        ("runs/get", json!({})),
        ("runs/signal", json!({"runId": id, "signal": ""})),
        (
            "runs/signal",
            json!({"runId": id, "signal": "s".repeat(257)}),
        ),
        (
            "runs/signal",
            json!({"runId": id, "signal": "go", "payload": big}),
        ),
        ("runs/journal", json!({"runId": id, "limit": 0})),
    ] {
        let e = sc.err(method, params.clone()).await;
        assert_eq!(e.code, -32602, "{method} {params}: {e:?}");
    }
    let e = sc.err("runs/nothing", json!({})).await;
    assert_eq!(e.code, -32601);
    sc.ok("runs/get", json!({ "runId": id })).await;
}

both_backends!(host_runs_methods_answer_for_a_prompt_turn);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_runs_prints_a_session_s_runs() {
    let sc = Sidecar::start(Backend::SqliteFile).await;
    let s = &sc.socket;
    let run = one_turn(&sc, "c1").await;
    let id = run["id"].as_str().expect("id");

    let out = ctl(s, &["runs", "list", "--session", "c1"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.stdout);
    assert!(lines[0].contains(id), "{}", out.stdout);
    assert!(lines[0].contains("agent"), "{}", out.stdout);
    assert!(lines[0].contains("succeeded"), "{}", out.stdout);

    let out = ctl(s, &["--json", "runs", "list", "--session", "c1"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let listed: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON line");
    assert_eq!(listed["runs"], json!([run]));

    let out = ctl(s, &["runs", "list", "--agent", "nobody"]).await;
    assert_eq!(
        (out.code, out.stdout.trim()),
        (0, "no runs"),
        "{}",
        out.stderr
    );

    // The tree of a lone run is its one line, at the left.
    let out = ctl(s, &["runs", "tree", id]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.stdout);
    assert!(lines[0].starts_with(id), "{}", out.stdout);
    assert!(lines[0].contains("succeeded"), "{}", out.stdout);

    let out = ctl(s, &["runs", "get", id]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let shown: Value = serde_json::from_str(&out.stdout).expect("the run as JSON");
    assert_eq!(shown, run);
    let out = ctl(s, &["--json", "runs", "get", id]).await;
    let got: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON line");
    assert_eq!(got["run"], run);

    let out = ctl(s, &["runs", "journal", id]).await;
    assert_eq!((out.code, out.stdout.trim()), (0, "no journal entries"));
    let out = ctl(s, &["runs", "cancel", id]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("nothing left to cancel"),
        "{}",
        out.stdout
    );
    let out = ctl(s, &["runs", "signal", id, "go", "--payload", "{\"n\":1}"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("not delivered"), "{}", out.stdout);

    // A failed call exits 1 and names the code.
    let out = ctl(s, &["runs", "get", "no-such-run"]).await;
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("run_not_found"), "{}", out.stderr);
    let out = ctl(s, &["--json", "runs", "get", "no-such-run"]).await;
    assert_eq!(out.code, 1);
    let error: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON line");
    assert_eq!(error["error"]["data"]["code"], "run_not_found");

    // Bad arguments exit 2 with a message, before any call.
    for args in [
        &["runs", "list"][..],
        &["runs", "list", "--session", "c1", "--agent", "echo"],
        &["runs", "list", "--session", "c1", "--status", "sleeping"],
        &["runs", "list", "--session", "c1", "--limit", "0"],
        &["runs", "signal", id, "go", "--payload", "{not json"],
        &["runs", "signal", id, ""],
        &["runs", "journal", id, "--after", "-1"],
        &["runs", "tree"],
    ] {
        let out = ctl(s, args).await;
        assert_eq!(out.code, 2, "{args:?}: {}", out.stdout);
        assert!(out.stderr.contains("error"), "{args:?}: {}", out.stderr);
    }
}

/// The run a host `runs/get` answers.
async fn host_run(sc: &Sidecar, run_id: &str) -> Value {
    sc.ok("runs/get", json!({ "runId": run_id })).await["run"].clone()
}

/// Waits (polling, bounded by the harness's patience) until the run has
/// `status`.
async fn until_host_status(sc: &Sidecar, run_id: &str, status: &str) -> Value {
    eventually(&format!("{run_id} is {status}"), || async {
        host_run(sc, run_id).await["status"] == status
    })
    .await;
    host_run(sc, run_id).await
}

/// A builtin session whose turn delegates to a script waiting on
/// `approve`; answers the parent's and the child's run ids once both wait.
async fn waiting_tree(w: &builtin::World, call_id: &str) -> (String, String) {
    let waits = "export default async function (input, ctx) {\n\
                 const e = await ctx.waitForEvent({signal: 'approve'}, {label: 'approval'});\n\
                 return e.payload;\n\
                 }";
    let session = w.session().await;
    w.provider.push(Reply::ToolCalls(vec![(
        call_id.to_owned(),
        "delegate".to_owned(),
        json!({"script": waits, "title": "approval gate"}),
    )]));
    w.provider.push(Reply::Text(vec!["approved".to_owned()]));
    builtin::ok(&w.message(&session, "wait for approval").await);
    let listed = w.sc.ok("runs/list", json!({ "sessionId": session })).await;
    let parent = listed["runs"][0]["id"]
        .as_str()
        .expect("a turn run")
        .to_owned();
    until_host_status(&w.sc, &parent, "waiting").await;
    let tree = w.sc.ok("runs/list", json!({ "rootRunId": parent })).await;
    let child = tree["runs"][1]["id"].as_str().expect("a child").to_owned();
    until_host_status(&w.sc, &child, "waiting").await;
    (parent, child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_runs_draws_a_waiting_tree_signals_and_cancels_it() {
    let w = builtin::world(Flavor::OpenAi).await;
    let s = &w.sc.socket;
    let (parent, child) = waiting_tree(&w, "w1").await;

    // Named by its child, the tree is still answered whole, oldest first.
    let tree = w.sc.ok("runs/list", json!({ "rootRunId": child })).await;
    let runs = tree["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{tree}");
    assert_eq!(runs[0]["id"], json!(parent));
    assert_eq!(runs[0]["wait"]["reason"], "children");
    assert_eq!(runs[0]["wait"]["pendingChildren"], 1);
    assert_eq!(runs[0]["childRunCount"], 1);
    assert_eq!(runs[1]["id"], json!(child));
    assert_eq!(runs[1]["kind"], "script");
    assert_eq!(runs[1]["parentRunId"], json!(parent));
    assert_eq!(runs[1]["parentToolCallId"], "w1");
    assert_eq!(runs[1]["depth"], 1);
    assert_eq!(runs[1]["wait"]["reason"], "event");
    assert_eq!(runs[1]["wait"]["answerWith"], "approve");

    let out = ctl(s, &["runs", "tree", &child]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    assert!(lines[0].starts_with(&parent), "{}", out.stdout);
    assert!(lines[0].contains("waiting"), "{}", out.stdout);
    assert!(
        lines[0].ends_with("[waiting on children (1)]"),
        "{}",
        out.stdout
    );
    assert!(
        lines[1].starts_with(&format!("  {child}")),
        "{}",
        out.stdout
    );
    assert!(lines[1].contains("script"), "{}", out.stdout);
    assert!(lines[1].contains("approval gate"), "{}", out.stdout);
    assert!(
        lines[1].ends_with("[waiting on event: approval, signal approve]"),
        "{}",
        out.stdout
    );
    let out = ctl(s, &["--json", "runs", "tree", &parent]).await;
    let raw: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON line");
    assert_eq!(raw["runs"].as_array().map(Vec::len), Some(2));

    // The wrong signal is not delivered; the right one once.
    let out = ctl(s, &["runs", "signal", &child, "reject"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.starts_with("not delivered"), "{}", out.stdout);
    let out = ctl(
        s,
        &[
            "--json",
            "runs",
            "signal",
            &child,
            "approve",
            "--payload",
            "{\"by\":\"ops\"}",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let answer: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON line");
    assert_eq!(answer, json!({"runId": child, "delivered": true}));
    let again =
        w.sc.ok("runs/signal", json!({"runId": child, "signal": "approve"}))
            .await;
    assert_eq!(again["delivered"], false);
    let done = until_host_status(&w.sc, &parent, "succeeded").await;
    assert!(done.get("wait").is_none(), "{done}");
    let child_run = host_run(&w.sc, &child).await;
    assert_eq!(child_run["status"], "succeeded");
    assert_eq!(child_run["output"], json!({"by": "ops"}));

    // The host's journal is the signed API's, entry for entry.
    let journal = w.sc.ok("runs/journal", json!({ "runId": child })).await;
    let entries = journal["entries"].as_array().expect("entries").clone();
    let seed = w.act(json!({"_": "GetRunJournal", "runId": child})).await;
    builtin::ok(&seed);
    let seed_entries = builtin::json_of(&seed.body)["entries"].clone();
    let seqs = |list: &[Value]| -> Vec<u64> {
        list.iter()
            .map(|e| e["seq"].as_u64().expect("seq"))
            .collect()
    };
    assert_eq!(
        seqs(&entries),
        seqs(seed_entries.as_array().expect("entries"))
    );
    for entry in &entries {
        assert_eq!(entry["runId"], json!(child));
        assert!(entry["createdAt"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')));
    }
    let out = ctl(s, &["runs", "journal", &child]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    if entries.is_empty() {
        assert_eq!(out.stdout.trim(), "no journal entries");
    } else {
        assert_eq!(out.stdout.lines().count(), entries.len(), "{}", out.stdout);
        let last = entries.last().and_then(|e| e["seq"].as_u64()).expect("seq");
        let after =
            w.sc.ok("runs/journal", json!({"runId": child, "afterSeq": last}))
                .await;
        assert_eq!(after["entries"], json!([]));
    }

    // A second tree, canceled from the operator's shell while it waits.
    let (root, second_child) = waiting_tree(&w, "w2").await;
    let out = ctl(s, &["runs", "cancel", &root]).await;
    assert_eq!(
        (out.code, out.stdout.trim()),
        (0, format!("canceled {root}").as_str())
    );
    let tree =
        w.sc.ok("runs/list", json!({ "rootRunId": second_child }))
            .await;
    let statuses: Vec<&str> = tree["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["canceled", "canceled"], "{tree}");
    let again = w.sc.ok("runs/cancel", json!({ "runId": root })).await;
    assert_eq!(again, json!({"runId": root, "canceled": false}));
}
