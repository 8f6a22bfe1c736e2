//! Replay: what a rerun takes from the journal (a crash, an interrupted
//! call, FIFO per key, `now`, steps), and the waits, sleeps, children,
//! caps and cancellation that make a script rerun.

use super::*;

const THREE_CALLS: &str = "export default async function (input, ctx) {
  const a = await ctx.call('echo', 'first');
  const b = await ctx.call('count', 'second');
  const c = await ctx.call('echo', 'third');
  return [a, b, c];
}";

#[tokio::test]
async fn a_rerun_after_a_crash_does_not_repeat_a_journaled_call() {
    // The store dies after the first call's two entries are committed.
    let host = Arc::new(Host {
        fail_journal_after: Some(2),
        ..Host::new()
    });
    let e = failed(run(&host, THREE_CALLS).await);
    assert_eq!(e.code(), "journal_failed");
    assert_eq!(host.entries().len(), 2);
    // Back up, the run is rerun from the top with what was committed.
    let host = Arc::new(Host {
        journal: Mutex::new(host.journal.lock().unwrap().clone()),
        calls: Mutex::new(host.calls.lock().unwrap().clone()),
        ..Host::new()
    });
    assert_eq!(
        succeeded(run(&host, THREE_CALLS).await),
        json!(["first", 1, "third"])
    );
    assert_eq!(host.calls_of("echo"), vec![json!("first"), json!("third")]);
    // The second call was never journaled and ran in the rerun only.
    assert_eq!(host.calls_of("count").len(), 1);
    // A third run replays everything and calls nothing.
    let before = host.calls.lock().unwrap().len();
    assert_eq!(
        succeeded(run(&host, THREE_CALLS).await),
        json!(["first", 1, "third"])
    );
    assert_eq!(host.calls.lock().unwrap().len(), before);
}

#[tokio::test]
async fn a_call_in_flight_when_the_host_panicked_reruns_once_under_its_call_seq() {
    let host = Arc::new(Host {
        explode: true,
        ..Host::new()
    });
    let source = script("const a = await ctx.call('echo', 1);\nconst b = await ctx.call('flaky', 2);\nreturn [a, b];");
    let e = failed(run(&host, &source).await);
    assert_eq!(e.code(), "host_panic");
    // The call entry of the interrupted call is journaled, its result not.
    assert_eq!(host.kinds(), ["call", "result", "call"]);
    let host = Arc::new(Host {
        journal: Mutex::new(host.journal.lock().unwrap().clone()),
        ..Host::new()
    });
    // The finished call replays; the interrupted one runs again, once, and
    // its result joins its group.
    assert_eq!(succeeded(run(&host, &source).await), json!([1, 2]));
    assert!(host.calls_of("echo").is_empty());
    assert_eq!(host.calls_of("flaky"), vec![json!(2)]);
    let entries = host.entries();
    assert_eq!(host.kinds(), ["call", "result", "call", "result"]);
    assert_eq!(entries[3]["callSeq"], 2);
    assert_eq!(entries[3]["key"], entries[2]["key"]);
    assert_eq!(succeeded(run(&host, &source).await), json!([1, 2]));
    assert_eq!(host.calls_of("flaky").len(), 1);
}

#[tokio::test]
async fn the_same_call_twice_replays_first_in_first_out() {
    let host = Arc::new(Host::new());
    let source = script("const a = await ctx.call('count', 'same');\nconst b = await ctx.call('count', 'same');\nreturn [a, b];");
    assert_eq!(succeeded(run(&host, &source).await), json!([1, 2]));
    assert_eq!(succeeded(run(&host, &source).await), json!([1, 2]));
    assert_eq!(host.calls_of("count").len(), 2);
    // A rerun that stopped between the two resumes the second group.
    let host2 = Arc::new(Host::new());
    for e in host.entries().into_iter().take(3) {
        host2.push(e);
    }
    assert_eq!(succeeded(run(&host2, &source).await), json!([1, 1]));
    assert_eq!(host2.kinds(), ["call", "result", "call", "result"]);
    assert_eq!(host2.entries()[3]["callSeq"], 2);
}

#[tokio::test]
async fn now_is_journaled_and_replayed_in_order() {
    let host = Arc::new(Host {
        now_step: 10,
        ..Host::new()
    });
    let source = script("const a = await ctx.now();\nconst b = await ctx.now();\nreturn [a, b];");
    let first = succeeded(run(&host, &source).await);
    assert_eq!(first, json!([1_000_000, 1_000_010]));
    host.now.store(5_000_000, Ordering::SeqCst);
    assert_eq!(succeeded(run(&host, &source).await), first);
    assert_eq!(host.kinds(), ["now", "now"]);
}

#[tokio::test]
async fn a_finished_step_is_skipped_on_replay() {
    let host = Arc::new(Host::new());
    let source = script(
        "const v = await ctx.step('load', async () => { await ctx.call('count', null); return {got: 42}; });
         return v;",
    );
    assert_eq!(succeeded(run(&host, &source).await), json!({"got": 42}));
    assert_eq!(host.kinds(), ["step", "call", "result", "step"]);
    assert_eq!(host.entries()[0]["key"], "step|load|start");
    assert_eq!(host.entries()[3]["key"], "step|load|end");
    assert_eq!(succeeded(run(&host, &source).await), json!({"got": 42}));
    assert_eq!(host.calls_of("count").len(), 1);
    assert_eq!(host.entries().len(), 4);
}

#[tokio::test]
async fn a_short_sleep_stays_resident_and_is_journaled() {
    let host = Arc::new(Host::new());
    assert_eq!(
        succeeded(run(&host, &script("await ctx.sleep(1); return 'woke';")).await),
        json!("woke")
    );
    let entries = host.entries();
    assert_eq!(host.kinds(), ["timer", "fired"]);
    assert_eq!(entries[0]["key"], "sleep|1");
    assert_eq!(entries[0]["ms"], 1);
    assert_eq!(entries[0]["wakeAt"], 1_000_001);
}

#[tokio::test]
async fn a_long_sleep_parks_and_a_rerun_after_the_wake_completes() {
    let host = Arc::new(Host::new());
    let source = script(
        "const a = await ctx.call('count', null);\nawait ctx.sleep(ctx.minutes(5));\nreturn a;",
    );
    match run(&host, &source).await {
        ScriptOutcome::Park(Park::Timer { wake_at_ms }) => {
            assert_eq!(wake_at_ms, 1_000_000 + 300_000)
        }
        other => panic!("{other:?}"),
    }
    // Too early: it parks again at the same time.
    match run(&host, &source).await {
        ScriptOutcome::Park(Park::Timer { wake_at_ms }) => assert_eq!(wake_at_ms, 1_300_000),
        other => panic!("{other:?}"),
    }
    host.now.store(1_300_000, Ordering::SeqCst);
    assert_eq!(succeeded(run(&host, &source).await), json!(1));
    assert_eq!(host.kinds(), ["call", "result", "timer", "fired"]);
    assert_eq!(host.calls_of("count").len(), 1);
}

#[tokio::test]
async fn wait_for_event_parks_and_resolves_with_the_delivered_event() {
    let host = Arc::new(Host::new());
    let source = script(
        "const e = await ctx.waitForEvent({signal: 'approve'}, {label: 'approval'});\nreturn e;",
    );
    let wait_id = match run(&host, &source).await {
        ScriptOutcome::Park(Park::Event {
            wait_id,
            match_,
            timeout_at_ms,
            label,
        }) => {
            assert_eq!(match_, json!({"signal": "approve"}));
            assert_eq!(timeout_at_ms, None);
            assert_eq!(label.as_deref(), Some("approval"));
            wait_id
        }
        other => panic!("{other:?}"),
    };
    // A rerun before the signal parks again with the same wait id.
    match run(&host, &source).await {
        ScriptOutcome::Park(Park::Event { wait_id: again, .. }) => assert_eq!(again, wait_id),
        other => panic!("{other:?}"),
    }
    assert_eq!(host.kinds(), ["wait"]);
    host.push(
        json!({"kind": "event", "waitId": wait_id, "signal": "approve", "payload": {"ok": 1}}),
    );
    assert_eq!(
        succeeded(run(&host, &source).await),
        json!({"signal": "approve", "payload": {"ok": 1}})
    );
}

#[tokio::test]
async fn a_timed_out_wait_resolves_null() {
    let host = Arc::new(Host::new());
    let source = script("return await ctx.waitForEvent({signal: 'go'}, {timeoutMs: 1000});");
    match run(&host, &source).await {
        ScriptOutcome::Park(Park::Event { timeout_at_ms, .. }) => {
            assert_eq!(timeout_at_ms, Some(1_001_000))
        }
        other => panic!("{other:?}"),
    }
    host.now.store(1_001_000, Ordering::SeqCst);
    assert_eq!(succeeded(run(&host, &source).await), json!(null));
    let entries = host.entries();
    assert_eq!(host.kinds(), ["wait", "event"]);
    assert_eq!(entries[1]["timedOut"], true);
    assert_eq!(entries[1]["waitId"], entries[0]["waitId"]);
    // And stays timed out.
    assert_eq!(succeeded(run(&host, &source).await), json!(null));
    assert_eq!(host.entries().len(), 2);
}

#[tokio::test]
async fn the_journal_cap_fails_the_run() {
    let host = Arc::new(Host::new());
    let engine = ScriptEngine::new(ScriptLimits {
        max_journal_entries: 5,
        ..ScriptLimits::default()
    });
    let source = script("for (let i = 0; i < 10; i++) await ctx.call('echo', i);");
    let e = failed(run_on(&engine, &host, &source, json!(null)).await);
    assert_eq!(e.code(), "journal_cap");
    assert_eq!(e.setting(), Some("max_journal_entries"));
    assert!(host.entries().len() <= 5);
    let engine = ScriptEngine::new(ScriptLimits {
        max_journal_bytes: 300,
        ..ScriptLimits::default()
    });
    let host = Arc::new(Host::new());
    let e = failed(run_on(&engine, &host, &source, json!(null)).await);
    assert_eq!(e.setting(), Some("max_journal_bytes"));
}

#[tokio::test]
async fn cancel_interrupts_compute_and_awaits() {
    for (body, cue) in [
        ("ctx.log('spinning');\nwhile (true) {}", "spinning"),
        ("await ctx.call('hang', null);", "hang"),
    ] {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let host = Arc::new(Host {
            signal: Some(tx),
            ..Host::new()
        });
        let engine = ScriptEngine::new(ScriptLimits {
            compute_between_awaits: Duration::from_secs(3600),
            ..ScriptLimits::default()
        });
        let cancel = Arc::new(AtomicBool::new(false));
        let run = ScriptRun {
            run_id: "r".into(),
            source: script(body),
            input: json!(null),
            journal: vec![],
            wall_deadline_ms: None,
        };
        let running = tokio::spawn({
            let host = host.clone();
            let cancel = cancel.clone();
            async move { engine.run(run, host, cancel).await }
        });
        assert_eq!(rx.recv().await.as_deref(), Some(cue));
        cancel.store(true, Ordering::SeqCst);
        assert!(
            matches!(running.await.unwrap(), ScriptOutcome::Canceled),
            "{body}"
        );
    }
}

#[tokio::test]
async fn continue_as_new_ends_the_run_with_its_state() {
    let host = Arc::new(Host::new());
    let out = run(
        &host,
        &script("await ctx.call('echo', 1);\nreturn ctx.continueAsNew({page: 2});"),
    )
    .await;
    match out {
        ScriptOutcome::ContinueAsNew(state) => assert_eq!(state, json!({"page": 2})),
        other => panic!("{other:?}"),
    }
    assert_eq!(host.kinds(), ["call", "result", "continueAsNew"]);
}

#[tokio::test]
async fn delegate_starts_a_child_and_a_rerun_reconnects_to_it() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let host = Arc::new(Host {
        children_finish: false,
        signal: Some(tx),
        ..Host::new()
    });
    let source = script("const out = await ctx.delegate({brief: 'summarise'});\nreturn out;");
    let cancel = Arc::new(AtomicBool::new(false));
    let running = tokio::spawn({
        let host = host.clone();
        let cancel = cancel.clone();
        let run = ScriptRun {
            run_id: "r".into(),
            source: source.clone(),
            input: json!(null),
            journal: vec![],
            wall_deadline_ms: None,
        };
        async move { engine().run(run, host, cancel).await }
    });
    assert_eq!(rx.recv().await.as_deref(), Some("awaiting child"));
    cancel.store(true, Ordering::SeqCst);
    assert!(matches!(running.await.unwrap(), ScriptOutcome::Canceled));
    let entries = host.entries();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["kind"], "call");
    assert_eq!(entries[0]["key"], r#"agent|{"brief":"summarise"}"#);
    assert_eq!(entries[0]["childRunId"], "child-1");
    assert_eq!(
        *host.started_children.lock().unwrap(),
        vec![(1, json!({"brief": "summarise"}))]
    );

    let host = Arc::new(Host {
        journal: Mutex::new(host.journal.lock().unwrap().clone()),
        ..Host::new()
    });
    assert_eq!(
        succeeded(run(&host, &source).await),
        json!({"from": "child-1"})
    );
    assert!(host.started_children.lock().unwrap().is_empty());
    assert_eq!(
        *host.awaited_children.lock().unwrap(),
        vec!["child-1".to_owned()]
    );
    assert_eq!(host.kinds(), ["call", "result"]);
}

#[tokio::test]
async fn plan_log_and_progress_reach_the_host() {
    let host = Arc::new(Host::new());
    let source = script(
        "await ctx.plan({steps: [{id: 'a', label: 'A', status: 'pending'}]});
         ctx.log('hello');
         ctx.log('warn', {n: 1});
         ctx.progress(0.5, 'half');
         return 'ok';",
    );
    assert_eq!(succeeded(run(&host, &source).await), json!("ok"));
    assert_eq!(host.plans.lock().unwrap().len(), 1);
    assert_eq!(
        *host.logs.lock().unwrap(),
        vec![
            ("info".to_owned(), "hello".to_owned()),
            ("warn".to_owned(), r#"{"n":1}"#.to_owned())
        ]
    );
    assert_eq!(host.kinds(), ["plan"]);
    // The plan is not set again on replay.
    assert_eq!(succeeded(run(&host, &source).await), json!("ok"));
    assert_eq!(host.plans.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn awaiting_what_nothing_settles_is_a_stall() {
    let host = Arc::new(Host::new());
    let e = failed(run(&host, &script("await new Promise(() => {});")).await);
    assert_eq!(e.code(), "script_stalled");
}

#[tokio::test]
async fn a_panic_on_the_script_thread_fails_the_run() {
    let host = Arc::new(Host {
        panic_on_log: true,
        ..Host::new()
    });
    let e = failed(run(&host, &script("ctx.log('boom');\nreturn 1;")).await);
    assert_eq!(e.code(), "engine_panic");
}

#[tokio::test]
async fn two_hundred_sequential_runs() {
    let engine = engine();
    let source = script("const v = await ctx.call('echo', input);\nreturn v * 2;");
    for i in 0..200 {
        let host = Arc::new(Host::new());
        let out = run_on(&engine, &host, &source, json!(i)).await;
        assert_eq!(succeeded(out), json!(i * 2));
    }
}

#[test]
fn canonical_json_sorts_keys_at_every_level() {
    let v = json!({"b": 1, "a": {"d": [1, {"z": 0, "y": "s"}], "c": null}});
    assert_eq!(
        canonical(&v),
        r#"{"a":{"c":null,"d":[1,{"y":"s","z":0}]},"b":1}"#
    );
}

#[test]
fn codes_are_stable() {
    assert_eq!(ScriptError::invalid("x").code(), "invalid_script");
    assert_eq!(
        ScriptError::JournalCap {
            setting: "max_journal_bytes",
            limit: 1
        }
        .code(),
        "journal_cap"
    );
    assert_eq!(ScriptError::EnginePanic("p".into()).code(), "engine_panic");
}

#[tokio::test]
async fn dropping_the_run_stops_the_script_thread() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let host = Arc::new(Host {
        signal: Some(tx),
        ..Host::new()
    });
    let run = ScriptRun {
        run_id: "r".into(),
        source: script("await ctx.call('hang', null);"),
        input: json!(null),
        journal: vec![],
        wall_deadline_ms: None,
    };
    let running = tokio::spawn({
        let host: Arc<dyn ScriptHost> = host.clone();
        async move {
            engine()
                .run(run, host, Arc::new(AtomicBool::new(false)))
                .await
        }
    });
    assert_eq!(rx.recv().await.as_deref(), Some("hang"));
    running.abort();
    let _ = running.await;
    // The thread notices, aborts the hanging effect and lets go of the host.
    for _ in 0..500 {
        if Arc::strong_count(&host) == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the script thread still holds the host");
}

#[tokio::test]
async fn a_live_delegate_journals_its_call_and_result() {
    let host = Arc::new(Host::new());
    let out = run(
        &host,
        &script("await ctx.now();\nreturn await ctx.delegate({a: 1});"),
    )
    .await;
    assert_eq!(succeeded(out), json!({"from": "child-1"}));
    assert_eq!(host.kinds(), ["now", "call", "result"]);
    assert_eq!(
        *host.started_children.lock().unwrap(),
        vec![(2, json!({"a": 1}))]
    );
}

/// Runs `source` with the journal so far and a wall deadline.
async fn run_until(host: &Arc<Host>, source: &str, deadline: Option<i64>) -> ScriptOutcome {
    let journal = host.journal.lock().unwrap().clone();
    let run = ScriptRun {
        run_id: "run-1".into(),
        source: source.to_owned(),
        input: json!(null),
        journal,
        wall_deadline_ms: deadline,
    };
    engine()
        .run(run, host.clone(), Arc::new(AtomicBool::new(false)))
        .await
}

#[tokio::test]
async fn past_its_wall_deadline_a_rerun_replays_then_pauses_before_a_new_effect() {
    // Within the budget the first call runs; the store then dies.
    let host = Arc::new(Host {
        fail_journal_after: Some(2),
        ..Host::new()
    });
    let now = host.now.load(Ordering::SeqCst);
    failed(run_until(&host, THREE_CALLS, Some(now + 1_000_000)).await);
    assert_eq!(host.calls_of("echo"), vec![json!("first")]);
    // The rerun after the deadline takes the journaled call and pauses at
    // the first effect the journal does not hold, which does not run.
    let host = Arc::new(Host {
        journal: Mutex::new(host.journal.lock().unwrap().clone()),
        ..Host::new()
    });
    let now = host.now.load(Ordering::SeqCst);
    match run_until(&host, THREE_CALLS, Some(now)).await {
        ScriptOutcome::Park(Park::Budget) => {}
        other => panic!("expected a budget pause, got {other:?}"),
    }
    assert!(host.calls.lock().unwrap().is_empty(), "nothing new ran");
    assert_eq!(host.kinds(), ["call", "result"]);
    // Resumed without a budget, it goes on from there.
    assert_eq!(
        succeeded(run_until(&host, THREE_CALLS, None).await),
        json!(["first", 1, "third"])
    );
    assert_eq!(host.calls_of("echo"), vec![json!("third")]);
}

#[tokio::test]
async fn a_budget_pause_wins_over_a_timer_parked_with_it() {
    // The clock moves on every read: the sleep starts within the budget,
    // the call after it does not.
    let host = Arc::new(Host {
        now_step: 1,
        ..Host::new()
    });
    let now = host.now.load(Ordering::SeqCst) + 1;
    // A long sleep and a call at once: the call pauses the run, and the
    // sleep parks again when the resumed run replays.
    let source = script(
        "const [a] = await Promise.all([ctx.sleep(3600000), ctx.call('echo', 1)]);\nreturn a;",
    );
    match run_until(&host, &source, Some(now)).await {
        ScriptOutcome::Park(Park::Budget) => {}
        other => panic!("expected a budget pause, got {other:?}"),
    }
}
