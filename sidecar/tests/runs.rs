//! The runs queue on both backends: every transition of the state machine
//! through the store (claim order, one live turn per session, per-kind
//! caps, finish and sticky cancel, retry, release, park and wake, signals
//! delivered exactly once under concurrency, cancellation of a deep tree,
//! journal caps, recovery guarded by the lease), and the dispatcher with a
//! scripted executor (outcomes applied, foreign lapsed leases recovered,
//! parents of a canceled subtree told).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentos_schema::migrate_all;
use agentos_sidecar::runs::{
    Caps, EventWait, Executor, Executors, Finish, LiveRun, NewRun, Origin, Outcome, ParentLink,
    Queue, Run, RunKind, RunScope, RunStatus, RunStore, RunWait, Runs, RunsConfig, WaitReason,
};
use agentos_storage::testing::all_backends;
use serde_json::{json, Value};

const CAPS: Caps = Caps {
    agent: 8,
    script: 32,
};
const LEASE: i64 = 60_000;

fn script(id: &str, queue: Queue, created_offset: i64) -> NewRun {
    let mut run = NewRun::root(RunKind::Script, Origin::User, queue, json!({"n": id}));
    run.run_id = id.to_owned();
    run.not_before_ms = 0;
    run.title = Some(format!("t{created_offset}"));
    run
}

fn turn(id: &str, session: &str) -> NewRun {
    let mut run = NewRun::root(
        RunKind::Agent,
        Origin::User,
        Queue::Interactive,
        json!({"content": [], "inputAt": 1}),
    );
    run.run_id = id.to_owned();
    run.session_id = Some(session.to_owned());
    run
}

fn child(id: &str, parent: &Run) -> NewRun {
    let mut run = script(id, Queue::Background, 0);
    run.parent = Some(ParentLink {
        run_id: parent.run_id.clone(),
        root_run_id: parent.root_run_id.clone(),
        tool_call_id: Some(format!("call-{id}")),
        depth: parent.depth + 1,
        awaits: true,
    });
    run
}

async fn claim(store: &RunStore, now: i64) -> Option<Run> {
    store.claim("me", now, LEASE, CAPS).await.expect("claim")
}

async fn status(store: &RunStore, id: &str) -> RunStatus {
    store.get(id).await.expect("get").expect("exists").status
}

#[tokio::test]
async fn claims_go_interactive_first_then_by_age_one_turn_per_session_within_caps() {
    for b in all_backends().await {
        migrate_all(&*b.db).await.expect("migrate");
        let store = RunStore::new(b.db.clone());
        store
            .insert(&script("bg-old", Queue::Background, 0), 1)
            .await
            .expect("insert");
        store
            .insert(&script("int-new", Queue::Interactive, 0), 3)
            .await
            .expect("insert");
        store
            .insert(&script("int-old", Queue::Interactive, 0), 2)
            .await
            .expect("insert");
        let mut late = script("later", Queue::Interactive, 0);
        late.not_before_ms = 1_000;
        store.insert(&late, 4).await.expect("insert");
        let order: Vec<String> = [
            claim(&store, 10).await,
            claim(&store, 10).await,
            claim(&store, 10).await,
        ]
        .into_iter()
        .map(|r| r.expect("a run").run_id)
        .collect();
        assert_eq!(order, ["int-old", "int-new", "bg-old"], "{}", b.name);
        assert!(claim(&store, 10).await.is_none(), "not before its time");
        let later = claim(&store, 1_000).await.expect("due now");
        assert_eq!(later.run_id, "later");
        assert_eq!(later.status, RunStatus::Claimed);
        assert_eq!(later.attempt, 1);
        assert_eq!(later.lease_owner.as_deref(), Some("me"));
        assert_eq!(later.lease_expires_at_ms, Some(1_000 + LEASE));

        // Two turns of one session: the second waits for the first.
        store.insert(&turn("s1-a", "s1"), 20).await.expect("insert");
        store.insert(&turn("s1-b", "s1"), 21).await.expect("insert");
        store.insert(&turn("s2-a", "s2"), 22).await.expect("insert");
        let a = claim(&store, 30).await.expect("s1-a");
        assert_eq!(a.run_id, "s1-a");
        assert_eq!(claim(&store, 30).await.expect("s2-a").run_id, "s2-a");
        assert!(claim(&store, 30).await.is_none(), "{}: s1 is busy", b.name);
        assert!(store.start(&a.run_id, 31).await.expect("start"));
        assert_eq!(status(&store, "s1-a").await, RunStatus::Running);
        store
            .finish(
                "s1-a",
                &Finish::Succeeded(json!({"ok": true})),
                None,
                vec![],
                32,
            )
            .await
            .expect("finish")
            .expect("it was live");
        assert_eq!(claim(&store, 33).await.expect("now").run_id, "s1-b");

        // The caps: one live turn at most, one script at most.
        let tight = Caps {
            agent: 1,
            script: 1,
        };
        store.insert(&turn("s3-a", "s3"), 40).await.expect("insert");
        store
            .insert(&script("sc-x", Queue::Background, 0), 41)
            .await
            .expect("insert");
        assert!(
            store
                .claim("me", 50, LEASE, tight)
                .await
                .expect("claim")
                .is_none(),
            "{}: four scripts and two turns are live",
            b.name
        );
        b.shutdown().await;
    }
}

#[tokio::test]
async fn one_live_turn_per_session_is_an_invariant_of_the_table() {
    for b in all_backends().await {
        migrate_all(&*b.db).await.expect("migrate");
        let store = RunStore::new(b.db.clone());
        let first =
            RunStore::insert_statements(&turn("a", "s"), RunStatus::Running, Some(("me", 100)), 1);
        b.db.transaction(first).await.expect("the first live turn");
        let second =
            RunStore::insert_statements(&turn("b", "s"), RunStatus::Running, Some(("me", 100)), 2);
        let e = b.db.transaction(second).await.expect_err("a second one");
        assert!(e.is_constraint(), "{}: {e}", b.name);
        assert!(store.get("b").await.expect("get").is_none());
        b.shutdown().await;
    }
}

#[tokio::test]
async fn a_finish_a_retry_and_a_release_leave_only_live_rows_and_cancel_is_sticky() {
    for b in all_backends().await {
        migrate_all(&*b.db).await.expect("migrate");
        let store = RunStore::new(b.db.clone());
        for id in ["f", "r", "l", "c"] {
            store
                .insert(&script(id, Queue::Interactive, 0), 1)
                .await
                .expect("insert");
        }
        for _ in 0..4 {
            claim(&store, 2).await.expect("claim");
        }
        let done = store
            .finish("f", &Finish::Succeeded(json!(7)), None, vec![], 3)
            .await
            .expect("finish")
            .expect("live");
        assert_eq!(done.status, RunStatus::Succeeded);
        assert_eq!(done.output, Some(json!(7)));
        assert_eq!(done.finished_at_ms, Some(3));
        assert_eq!(done.lease_owner, None);
        // Not live any more: a second finish changes nothing.
        assert!(store
            .finish("f", &Finish::Failed(json!({"code": "x"})), None, vec![], 4)
            .await
            .expect("finish")
            .is_none());
        assert_eq!(status(&store, "f").await, RunStatus::Succeeded);

        let error = json!({"code": "provider_unavailable", "retryable": true});
        store
            .finish("r", &Finish::Failed(error.clone()), Some(5_000), vec![], 4)
            .await
            .expect("finish");
        let r = store.get("r").await.expect("get").expect("r");
        assert_eq!(r.status, RunStatus::Queued, "{}", b.name);
        assert_eq!(r.not_before_ms, 5_000);
        assert_eq!(r.error, Some(error));
        assert_eq!(r.finished_at_ms, None);
        assert_eq!(r.attempt, 1);
        let again = claim(&store, 5_000).await.expect("the retry");
        assert_eq!((again.run_id.as_str(), again.attempt), ("r", 2));

        assert!(store.release("l", 6).await.expect("release"));
        let l = store.get("l").await.expect("get").expect("l");
        assert_eq!((l.status, l.attempt), (RunStatus::Queued, 0));

        let canceled = store.cancel_tree("c", 7).await.expect("cancel");
        assert!(canceled.changed);
        assert_eq!(canceled.live.len(), 1, "{}", b.name);
        assert!(
            !store.start("c", 8).await.expect("start"),
            "no start once asked to stop"
        );
        let c = store
            .finish("c", &Finish::Succeeded(json!("late")), None, vec![], 9)
            .await
            .expect("finish")
            .expect("live");
        assert_eq!(c.status, RunStatus::Canceled, "{}: sticky", b.name);
        assert_eq!(c.output, None);
        let twice = store.cancel_tree("c", 10).await.expect("cancel");
        assert!(!twice.changed, "{}: false the second time", b.name);
        b.shutdown().await;
    }
}

#[tokio::test]
async fn a_parked_run_holds_no_slot_and_wakes_on_its_clock() {
    for b in all_backends().await {
        migrate_all(&*b.db).await.expect("migrate");
        let store = RunStore::new(b.db.clone());
        store
            .insert(&script("p", Queue::Background, 0), 1)
            .await
            .expect("insert");
        claim(&store, 2).await.expect("claim");
        let wait = RunWait {
            reason: WaitReason::Timer,
            wake_at: Some(100),
            tool_call_ids: vec![],
            wait_id: None,
            label: None,
            answer_with: None,
        };
        assert!(store
            .park("p", &wait, &[], 3)
            .await
            .expect("park")
            .is_some());
        let p = store.get("p").await.expect("get").expect("p");
        assert_eq!(p.status, RunStatus::Waiting);
        assert_eq!(p.wait, Some(wait));
        assert_eq!(p.lease_owner, None);
        assert_eq!(store.live_counts().await.expect("counts"), (0, 0));
        assert_eq!(store.next_timer().await.expect("timer"), Some(100));
        assert_eq!(store.wake_due(99).await.expect("wake"), 0);
        assert_eq!(store.wake_due(100).await.expect("wake"), 1, "{}", b.name);
        let p = store.get("p").await.expect("get").expect("p");
        assert_eq!((p.status, p.wait), (RunStatus::Queued, None));
        b.shutdown().await;
    }
}

#[tokio::test]
async fn a_signal_is_delivered_exactly_once_under_concurrent_signals() {
    for b in all_backends().await {
        migrate_all(&*b.db).await.expect("migrate");
        let store = RunStore::new(b.db.clone());
        store
            .insert(&script("w", Queue::Background, 0), 1)
            .await
            .expect("insert");
        claim(&store, 2).await.expect("claim");
        let wait = RunWait {
            reason: WaitReason::Event,
            wake_at: None,
            tool_call_ids: vec![],
            wait_id: Some("wait-1".into()),
            label: Some("approval".into()),
            answer_with: Some("approve".into()),
        };
        let events = [EventWait {
            wait_id: "wait-1".into(),
            signal: Some("approve".into()),
            match_json: Some(json!({"signal": "approve"})),
        }];
        assert!(store
            .park("w", &wait, &events, 3)
            .await
            .expect("park")
            .is_some());
        assert!(
            !store
                .signal("w", "reject", &json!(null), 4)
                .await
                .expect("signal"),
            "{}: another signal is not delivered",
            b.name
        );
        let mut tasks = Vec::new();
        for i in 0..16 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .signal("w", "approve", &json!({"i": i}), 5)
                    .await
                    .expect("signal")
            }));
        }
        let mut delivered = 0;
        for task in tasks {
            if task.await.expect("join") {
                delivered += 1;
            }
        }
        assert_eq!(delivered, 1, "{}", b.name);
        let w = store.get("w").await.expect("get").expect("w");
        assert_eq!(w.status, RunStatus::Queued);
        assert_eq!(w.journal_seq, 1);
        let journal = store.journal("w", 0, 100).await.expect("journal");
        assert_eq!(journal.len(), 1, "{}", b.name);
        assert_eq!(journal[0].entry["kind"], "event");
        assert_eq!(journal[0].entry["waitId"], "wait-1");
        assert_eq!(journal[0].entry["signal"], "approve");
        assert!(journal[0].entry["payload"]["i"].is_number());
        assert_eq!(w.journal_bytes, journal[0].entry.to_string().len() as u64);
        // The waits went with the wake: the clock cannot wake it again.
        assert!(!store
            .signal("w", "approve", &json!(null), 6)
            .await
            .expect("signal"));
        b.shutdown().await;
    }
}

#[tokio::test]
async fn a_budget_pause_takes_any_signal_and_drops_the_wall_budget() {
    for b in all_backends().await {
        migrate_all(&*b.db).await.expect("migrate");
        let store = RunStore::new(b.db.clone());
        let mut run = script("bp", Queue::Background, 0);
        run.budget = Some(json!({"maxWallMs": 10, "maxChildren": 2}));
        store.insert(&run, 1).await.expect("insert");
        claim(&store, 2).await.expect("claim");
        let wait = RunWait {
            reason: WaitReason::BudgetPause,
            wake_at: None,
            tool_call_ids: vec![],
            wait_id: Some("bp-wait".into()),
            label: None,
            answer_with: None,
        };
        let events = [EventWait {
            wait_id: "bp-wait".into(),
            signal: None,
            match_json: None,
        }];
        assert!(store
            .park("bp", &wait, &events, 3)
            .await
            .expect("park")
            .is_some());
        assert!(store
            .signal("bp", "anything", &json!("go on"), 4)
            .await
            .expect("signal"));
        let bp = store.get("bp").await.expect("get").expect("bp");
        assert_eq!(bp.status, RunStatus::Queued, "{}", b.name);
        assert_eq!(bp.budget, Some(json!({"maxChildren": 2})));
        b.shutdown().await;
    }
}

#[tokio::test]
async fn canceling_a_deep_tree_settles_the_idle_and_asks_the_live_to_stop() {
    for b in all_backends().await {
        migrate_all(&*b.db).await.expect("migrate");
        let store = RunStore::new(b.db.clone());
        store
            .insert(&script("root", Queue::Interactive, 0), 1)
            .await
            .expect("insert");
        let root = claim(&store, 2).await.expect("root");
        let mut parent = root.clone();
        let mut ids = vec![];
        // A chain four deep, each level with a queued sibling.
        for level in 0..4 {
            let id = format!("c{level}");
            store.insert(&child(&id, &parent), 3).await.expect("child");
            let sibling = format!("s{level}");
            store
                .insert(&child(&sibling, &parent), 3)
                .await
                .expect("sibling");
            ids.push(sibling);
            parent = store.get(&id).await.expect("get").expect("child");
        }
        assert_eq!(
            store
                .get("root")
                .await
                .expect("get")
                .expect("root")
                .child_count,
            2
        );
        // c0 is working, c1 waits on a signal, the rest are queued.
        let c0 = loop {
            let run = claim(&store, 4).await.expect("something queued");
            if run.run_id == "c0" {
                break run;
            }
            store.release(&run.run_id, 4).await.expect("release");
        };
        let _ = c0;
        claim_exact(&store, "c1").await;
        let wait = RunWait {
            reason: WaitReason::Event,
            wake_at: None,
            tool_call_ids: vec![],
            wait_id: Some("c1-w".into()),
            label: None,
            answer_with: None,
        };
        let events = [EventWait {
            wait_id: "c1-w".into(),
            signal: Some("go".into()),
            match_json: None,
        }];
        assert!(store
            .park("c1", &wait, &events, 5)
            .await
            .expect("park")
            .is_some());
        let canceled = store.cancel_tree("root", 6).await.expect("cancel");
        assert!(canceled.changed);
        let mut live: Vec<String> = canceled.live.iter().map(|r| r.run_id.clone()).collect();
        live.sort();
        assert_eq!(live, ["c0", "root"], "{}", b.name);
        assert_eq!(
            canceled.settled.len(),
            7,
            "{}: c1..c3 and four siblings",
            b.name
        );
        for id in ids
            .iter()
            .chain(["c1".to_owned(), "c2".to_owned(), "c3".to_owned()].iter())
        {
            assert_eq!(status(&store, id).await, RunStatus::Canceled, "{id}");
        }
        assert!(!store
            .signal("c1", "go", &json!(null), 7)
            .await
            .expect("signal"));
        for id in ["c0", "root"] {
            let ended = store
                .finish(id, &Finish::Succeeded(json!(1)), None, vec![], 8)
                .await
                .expect("finish")
                .expect("live");
            assert_eq!(ended.status, RunStatus::Canceled, "{id}");
        }
        let tree = store
            .list(&RunScope::Root("root".into()), None, 1_000)
            .await
            .expect("tree");
        assert_eq!(tree.len(), 9);
        assert_eq!(tree[0].run_id, "root", "oldest first");
        assert!(tree.iter().all(|r| r.status == RunStatus::Canceled));
        assert!(tree.iter().all(|r| r.root_run_id == "root"));
        b.shutdown().await;
    }
}

/// Claims until `id` is claimed, putting the others back.
async fn claim_exact(store: &RunStore, id: &str) {
    let mut others = vec![];
    loop {
        let run = claim(store, 4).await.expect("queued");
        if run.run_id == id {
            break;
        }
        others.push(run.run_id);
    }
    for other in others {
        store.release(&other, 4).await.expect("release");
    }
}

#[tokio::test]
async fn the_journal_is_capped_on_the_runs_row() {
    for b in all_backends().await {
        migrate_all(&*b.db).await.expect("migrate");
        let store = RunStore::new(b.db.clone());
        store
            .insert(&script("j", Queue::Background, 0), 1)
            .await
            .expect("insert");
        let entries: Vec<Value> = (0..3).map(|i| json!({"kind": "now", "value": i})).collect();
        let seqs = store
            .journal_append("j", &entries, 5, 1_000, 2)
            .await
            .expect("append")
            .expect("within the caps");
        assert_eq!(seqs, [1, 2, 3]);
        assert!(
            store
                .journal_append("j", &entries, 5, 1_000, 3)
                .await
                .expect("append")
                .is_none(),
            "{}: past 5 entries",
            b.name
        );
        let big = [json!({"kind": "log", "text": "x".repeat(2_000)})];
        assert!(
            store
                .journal_append("j", &big, 5, 1_000, 3)
                .await
                .expect("append")
                .is_none(),
            "{}: past the bytes",
            b.name
        );
        let rows = store.journal("j", 1, 10).await.expect("journal");
        let seqs: Vec<u64> = rows.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [2, 3]);
        assert_eq!(rows[1].entry["value"], 2);
        let j = store.get("j").await.expect("get").expect("j");
        assert_eq!(j.journal_seq, 3);
        b.shutdown().await;
    }
}

#[tokio::test]
async fn a_continuation_requeues_the_run_with_its_new_input_and_a_result_lands_only_while_live() {
    for b in all_backends().await {
        migrate_all(&*b.db).await.expect("migrate");
        let store = RunStore::new(b.db.clone());
        store.insert(&turn("c", "s"), 1).await.expect("insert");
        assert!(
            !store
                .set_result("c", &json!({"n": 1}), 2)
                .await
                .expect("set"),
            "{}: not while queued",
            b.name
        );
        claim(&store, 2).await.expect("claim");
        assert!(store.start("c", 3).await.expect("start"));
        assert!(store
            .set_result("c", &json!({"n": 1}), 4)
            .await
            .expect("set"));
        assert!(store
            .set_result("c", &json!({"n": 2}), 4)
            .await
            .expect("set"));
        let next = json!({"content": [{"type": "text", "text": "go on"}], "inputAt": 9,
                          "continuations": 1});
        let after = store
            .finish("c", &Finish::Continue(next.clone()), None, vec![], 5)
            .await
            .expect("finish")
            .expect("it was live");
        assert_eq!(after.status, RunStatus::Queued, "{}", b.name);
        assert_eq!(after.input, next);
        assert_eq!(after.result, Some(json!({"n": 2})));
        assert_eq!((after.attempt, after.finished_at_ms), (1, None));
        // The continuation's claim does not spend the retry budget.
        assert_eq!(after.max_attempts, 2);
        assert!(after.lease_owner.is_none());
        // Claimed again at once, as its next attempt.
        let again = claim(&store, 6).await.expect("claimed again");
        assert_eq!((again.run_id.as_str(), again.attempt), ("c", 2));
        // A run asked to stop is canceled instead of continued.
        store.cancel_tree("c", 7).await.expect("cancel");
        let canceled = store
            .finish("c", &Finish::Continue(next), None, vec![], 8)
            .await
            .expect("finish")
            .expect("it was live");
        assert_eq!(canceled.status, RunStatus::Canceled, "{}", b.name);
        b.shutdown().await;
    }
}

#[tokio::test]
async fn retention_prunes_the_oldest_finished_trees_whole_and_never_a_live_one() {
    for b in all_backends().await {
        migrate_all(&*b.db).await.expect("migrate");
        let store = RunStore::new(b.db.clone());
        let done = |id: &str, at: i64| {
            let store = store.clone();
            let id = id.to_owned();
            async move {
                claim_exact(&store, &id).await;
                store
                    .finish(&id, &Finish::Succeeded(json!(null)), None, vec![], at)
                    .await
                    .expect("finish")
                    .expect("live");
            }
        };
        // Tree a (a root and its child, with a journal) ended first, then b;
        // tree c is live with an ended child; d ended last.
        store
            .insert(&script("a", Queue::Background, 0), 1)
            .await
            .expect("insert");
        let a = store.get("a").await.expect("get").expect("a");
        store.insert(&child("a1", &a), 1).await.expect("insert");
        store
            .journal_append("a1", &[json!({"kind": "now", "value": 1})], 10, 1_000, 2)
            .await
            .expect("append")
            .expect("within caps");
        done("a1", 10).await;
        done("a", 11).await;
        store
            .insert(&script("b", Queue::Background, 0), 2)
            .await
            .expect("insert");
        done("b", 12).await;
        store
            .insert(&script("c", Queue::Background, 0), 3)
            .await
            .expect("insert");
        let c = store.get("c").await.expect("get").expect("c");
        store.insert(&child("c1", &c), 3).await.expect("insert");
        done("c1", 5).await;
        store
            .insert(&script("d", Queue::Background, 0), 4)
            .await
            .expect("insert");
        done("d", 13).await;

        assert_eq!(
            store.prune(10, 100).await.expect("prune"),
            0,
            "under the cap"
        );
        // Three rows over a cap of three: a (two rows) and b go, oldest
        // first; c is live and stays whole however old its child is.
        assert_eq!(store.prune(3, 100).await.expect("prune"), 3, "{}", b.name);
        for gone in ["a", "a1", "b"] {
            assert!(store.get(gone).await.expect("get").is_none(), "{gone}");
        }
        for kept in ["c", "c1", "d"] {
            assert!(store.get(kept).await.expect("get").is_some(), "{kept}");
        }
        assert!(store
            .journal("a1", 0, 10)
            .await
            .expect("journal")
            .is_empty());
        // Still over a cap of one, but only a live tree and d are left:
        // d goes, c stays.
        assert_eq!(store.prune(1, 100).await.expect("prune"), 1);
        assert!(store.get("d").await.expect("get").is_none());
        assert!(store.get("c1").await.expect("get").is_some());
        b.shutdown().await;
    }
}

#[tokio::test]
async fn recovery_requeues_claims_and_scripts_fails_started_turns_and_respects_the_lease() {
    for b in all_backends().await {
        migrate_all(&*b.db).await.expect("migrate");
        let store = RunStore::new(b.db.clone());
        store
            .insert(&script("sc", Queue::Background, 0), 1)
            .await
            .expect("insert");
        store
            .insert(&turn("claimed", "a"), 2)
            .await
            .expect("insert");
        store
            .insert(&turn("started", "b"), 3)
            .await
            .expect("insert");
        for _ in 0..3 {
            claim(&store, 4).await.expect("claim");
        }
        store.start("started", 5).await.expect("start");
        let error = json!({"code": "prompt_delivery_uncertain", "message": "m"});
        let live = store.lapsed(i64::MAX).await.expect("lapsed");
        assert_eq!(live.len(), 3);
        // Read with a lease that was renewed since: nothing changes.
        let mut stale = live[0].clone();
        stale.lease_expires_at_ms = Some(1);
        assert!(!store.recover(&stale, &error, 6).await.expect("recover"));
        for run in &live {
            assert!(store.recover(run, &error, 6).await.expect("recover"));
        }
        assert_eq!(status(&store, "sc").await, RunStatus::Queued, "{}", b.name);
        assert_eq!(status(&store, "claimed").await, RunStatus::Queued);
        let started = store.get("started").await.expect("get").expect("started");
        assert_eq!(started.status, RunStatus::Failed, "{}", b.name);
        assert_eq!(started.error, Some(error));
        b.shutdown().await;
    }
}

/// An executor that answers what the test scripted, per run title, and
/// records what it was given.
#[derive(Default)]
struct Scripted {
    seen: Mutex<Vec<String>>,
    stops: AtomicUsize,
}

#[async_trait::async_trait]
impl Executor for Scripted {
    async fn execute(&self, _runs: &Runs, run: Run, live: Arc<LiveRun>) -> Outcome {
        self.seen.lock().expect("seen").push(run.run_id.clone());
        if run.journal_seq > 0 {
            // Woken by a signal.
            return Outcome::Finished(Finish::Succeeded(json!("woken")));
        }
        match run.title.as_deref() {
            Some("park") => Outcome::Park {
                wait: RunWait {
                    reason: WaitReason::Event,
                    wake_at: None,
                    tool_call_ids: vec![],
                    wait_id: Some(format!("{}-w", run.run_id)),
                    label: None,
                    answer_with: Some("go".into()),
                },
                events: vec![EventWait {
                    wait_id: format!("{}-w", run.run_id),
                    signal: Some("go".into()),
                    match_json: None,
                }],
            },
            Some("flaky") => Outcome::FailedEarly {
                error: json!({"code": "flaky", "message": "again"}),
                retryable: true,
            },
            Some("hang") => {
                live.stopped().await;
                Outcome::Finished(Finish::Canceled)
            }
            _ => Outcome::Finished(Finish::Succeeded(run.input.clone())),
        }
    }

    async fn stop(&self, _run: &Run) {
        self.stops.fetch_add(1, Ordering::SeqCst);
    }
}

fn runs_over(db: agentos_schema::SharedDatabase, executor: Arc<Scripted>) -> Runs {
    let runs = Runs::new(
        db,
        RunsConfig {
            lease_ms: 300,
            ..RunsConfig::default()
        },
    );
    runs.set_executors(Executors {
        agent: executor.clone(),
        script: Some(executor),
    });
    runs
}

async fn until(runs: &Runs, id: &str, want: RunStatus) -> Run {
    match tokio::time::timeout(
        Duration::from_secs(30),
        runs.wait_for(id, |r| r.status == want),
    )
    .await
    {
        Ok(run) => run.expect("the run"),
        Err(_) => panic!("{id} never became {want:?}: {:?}", runs.get(id).await),
    }
}

#[tokio::test]
async fn the_dispatcher_applies_outcomes_and_recovers_foreign_lapsed_leases() {
    for b in all_backends().await {
        migrate_all(&*b.db).await.expect("migrate");
        let executor = Arc::new(Scripted::default());
        let runs = runs_over(b.db.clone(), executor.clone());
        // A row an earlier process claimed, its lease long over.
        let store = runs.store().clone();
        let mut orphan = script("orphan", Queue::Background, 0);
        orphan.title = Some("plain".into());
        store.insert(&orphan, 1).await.expect("insert");
        store
            .claim("another-process", 2, 10, CAPS)
            .await
            .expect("claim")
            .expect("orphan");
        runs.start();
        let done = until(&runs, "orphan", RunStatus::Succeeded).await;
        assert_eq!(done.output, Some(json!({"n": "orphan"})), "{}", b.name);
        assert_eq!(done.attempt, 2, "claimed again after the recovery");

        let mut park = script("parked", Queue::Interactive, 0);
        park.title = Some("park".into());
        runs.submit(&park).await.expect("submit");
        let waiting = until(&runs, "parked", RunStatus::Waiting).await;
        assert_eq!(waiting.wait.and_then(|w| w.answer_with), Some("go".into()));
        assert!(!runs
            .signal("parked", "stop", &json!(null))
            .await
            .expect("signal"));
        assert!(runs
            .signal("parked", "go", &json!(1))
            .await
            .expect("signal"));
        let woken = until(&runs, "parked", RunStatus::Succeeded).await;
        assert_eq!(woken.output, Some(json!("woken")), "{}", b.name);

        let mut flaky = script("flaky", Queue::Background, 0);
        flaky.title = Some("flaky".into());
        flaky.max_attempts = 3;
        runs.submit(&flaky).await.expect("submit");
        let retried = tokio::time::timeout(
            Duration::from_secs(30),
            runs.wait_for("flaky", |r| r.status == RunStatus::Queued && r.attempt == 1),
        )
        .await
        .expect("in time")
        .expect("run");
        assert!(
            retried.not_before_ms >= retried.updated_at_ms + 5_000,
            "{}",
            b.name
        );
        assert_eq!(
            retried.error.as_ref().map(|e| e["code"].clone()),
            Some(json!("flaky"))
        );
        let mut once = script("once", Queue::Interactive, 0);
        once.title = Some("flaky".into());
        runs.submit(&once).await.expect("submit");
        let failed = until(&runs, "once", RunStatus::Failed).await;
        assert_eq!(
            failed.error.map(|e| e["code"].clone()),
            Some(json!("flaky"))
        );

        let mut hang = script("hang", Queue::Interactive, 0);
        hang.title = Some("hang".into());
        runs.submit(&hang).await.expect("submit");
        until(&runs, "hang", RunStatus::Claimed).await;
        assert!(runs.cancel("hang").await.expect("cancel"));
        let canceled = until(&runs, "hang", RunStatus::Canceled).await;
        assert!(canceled.finished_at_ms.is_some());
        assert_eq!(executor.stops.load(Ordering::SeqCst), 1);
        assert!(
            !runs.cancel("hang").await.expect("cancel"),
            "false the second time"
        );
        // The lease of what this process works is kept while it works.
        assert_eq!(runs.working(), 0);
        runs.shutdown();
        b.shutdown().await;
    }
}
