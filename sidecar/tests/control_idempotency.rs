//! Idempotent actions on both backends: the same request replays its
//! stored response, a different one under the same client id conflicts,
//! concurrent duplicates run once, a failure records nothing, a create
//! and its record commit together, and the records stay bounded.

mod control_common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use control_common::*;

fn key(account: &str, client: &str, hash: u8) -> IdempotencyKey {
    IdempotencyKey {
        account_id: account.to_owned(),
        action: "CreateSession".to_owned(),
        client_id: client.to_owned(),
        request_hash: vec![hash; 32],
    }
}

/// Runs an action that counts its runs and answers `response`.
async fn run_counted(
    control: &Control,
    key: IdempotencyKey,
    runs: &Arc<AtomicU32>,
    response: &[u8],
) -> Result<Idempotent, ControlError> {
    let runs = runs.clone();
    let response = response.to_vec();
    control
        .idempotent(key, || async move {
            runs.fetch_add(1, Ordering::SeqCst);
            // Give a concurrent duplicate every chance to overlap.
            tokio::task::yield_now().await;
            Ok::<_, ControlError>(response)
        })
        .await
}

#[tokio::test]
async fn same_request_replays_a_different_one_conflicts() {
    for env in envs().await {
        let c = &env.control;
        let (a, b) = (principal(1), principal(2));
        let runs = Arc::new(AtomicU32::new(0));
        let first = run_counted(c, key(&a, "req-1", 1), &runs, b"answer")
            .await
            .expect("first");
        assert_eq!(first, Idempotent::Fresh(b"answer".to_vec()));
        let again = run_counted(c, key(&a, "req-1", 1), &runs, b"other")
            .await
            .expect("again");
        assert_eq!(
            again,
            Idempotent::Replayed(b"answer".to_vec()),
            "{}",
            env.name()
        );
        assert!(again.is_replayed());
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let err = run_counted(c, key(&a, "req-1", 2), &runs, b"x")
            .await
            .expect_err("conflict");
        assert_eq!(err.code(), "conflict");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // Client ids are per account (and per action).
        run_counted(c, key(&b, "req-1", 2), &runs, b"b")
            .await
            .expect("other account");
        let mut other_action = key(&a, "req-1", 2);
        other_action.action = "CreateAgentTrigger".into();
        run_counted(c, other_action, &runs, b"t")
            .await
            .expect("other action");
        assert_eq!(runs.load(Ordering::SeqCst), 3);

        // A failed run records nothing: the retry runs.
        let failed = c
            .idempotent(key(&a, "req-2", 1), || async {
                Err::<Vec<u8>, _>(ControlError::InvalidArgument("refused".into()))
            })
            .await
            .expect_err("failed");
        assert_eq!(failed.code(), "invalid_argument");
        let retried = run_counted(c, key(&a, "req-2", 1), &runs, b"ok")
            .await
            .expect("retry");
        assert_eq!(retried, Idempotent::Fresh(b"ok".to_vec()));

        // Bad keys are refused before anything runs.
        for bad in [key(&a, "", 1), key("nobody", "r", 1), {
            let mut k = key(&a, "r", 1);
            k.request_hash.clear();
            k
        }] {
            let err = run_counted(c, bad, &runs, b"x").await.expect_err("bad key");
            assert_eq!(err.code(), "invalid_argument");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 4);
        env.done().await;
    }
}

#[tokio::test]
async fn concurrent_duplicates_run_once() {
    for env in envs().await {
        let account = principal(3);
        let runs = Arc::new(AtomicU32::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (c, runs, account) = (env.control.clone(), runs.clone(), account.clone());
            tasks.push(tokio::spawn(async move {
                run_counted(&c, key(&account, "dup", 7), &runs, b"once").await
            }));
        }
        let mut fresh = 0;
        for task in tasks {
            let answer = task.await.expect("task").expect("answer");
            assert_eq!(answer.response(), b"once");
            fresh += usize::from(!answer.is_replayed());
        }
        assert_eq!(
            (runs.load(Ordering::SeqCst), fresh),
            (1, 1),
            "{}",
            env.name()
        );

        // The same for a create whose record commits with the agent.
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (c, account) = (env.control.clone(), account.clone());
            tasks.push(tokio::spawn(async move {
                let mut k = key(&account, "create", 9);
                k.action = "CreateAgent".into();
                c.create_agent_idempotent(&account, new_agent("dup"), k, |agent| {
                    agent.agent_id.clone().into_bytes()
                })
                .await
            }));
        }
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.expect("task").expect("create").into_response());
        }
        let agents = env.control.list_agents_for(&account).await.expect("agents");
        assert_eq!(agents.len(), 1, "{}", env.name());
        assert!(answers
            .iter()
            .all(|a| a == agents[0].agent.agent_id.as_bytes()));
        env.done().await;
    }
}

/// Two services over one database share no in-process lock; the unique
/// record still lets only one create commit.
#[tokio::test]
async fn duplicates_through_two_services_create_one_agent() {
    for env in envs().await {
        let account = principal(7);
        let services = [env.control.clone(), env.reopen(control_common::key(1))];
        let mut tasks = Vec::new();
        for n in 0..8 {
            let (c, account) = (services[n % 2].clone(), account.clone());
            tasks.push(tokio::spawn(async move {
                let mut k = key(&account, "twice", 3);
                k.action = "CreateAgent".into();
                c.create_agent_idempotent(&account, new_agent("one"), k, |agent| {
                    agent.agent_id.clone().into_bytes()
                })
                .await
            }));
        }
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.expect("task").expect("create").into_response());
        }
        let agents = env.control.list_agents_for(&account).await.expect("agents");
        assert_eq!(agents.len(), 1, "{}", env.name());
        assert!(answers
            .iter()
            .all(|a| a == agents[0].agent.agent_id.as_bytes()));
        env.done().await;
    }
}

#[tokio::test]
async fn an_idempotent_create_commits_with_its_record() {
    let limits = ControlLimits {
        max_agents_per_account: 1,
        ..ControlLimits::default()
    };
    for env in envs_with(limits).await {
        let c = &env.control;
        let owner = principal(4);
        let create_key = |client: &str, hash: u8| {
            let mut k = key(&owner, client, hash);
            k.action = "CreateAgent".into();
            k
        };
        let render = |agent: &AgentRecord| format!("created {}", agent.agent_id).into_bytes();
        let first = c
            .create_agent_idempotent(&owner, new_agent("a"), create_key("c1", 1), render)
            .await
            .expect("create");
        let agent = c
            .list_agents_for(&owner)
            .await
            .expect("list")
            .remove(0)
            .agent;
        assert_eq!(
            first,
            Idempotent::Fresh(format!("created {}", agent.agent_id).into_bytes())
        );
        let replay = c
            .create_agent_idempotent(&owner, new_agent("a"), create_key("c1", 1), render)
            .await
            .expect("replay");
        assert_eq!(
            replay,
            Idempotent::Replayed(first.response().to_vec()),
            "{}",
            env.name()
        );
        assert_eq!(
            c.create_agent_idempotent(&owner, new_agent("b"), create_key("c1", 2), render)
                .await
                .expect_err("conflict")
                .code(),
            "conflict"
        );
        // Refused by the limit: neither the agent nor the record exists,
        // so once there is room the same key creates.
        let err = c
            .create_agent_idempotent(&owner, new_agent("b"), create_key("c2", 1), render)
            .await
            .expect_err("full");
        assert_eq!(err.setting(), Some("limits.control.maxAgentsPerAccount"));
        c.delete_agent(&agent.agent_id).await.expect("delete");
        let second = c
            .create_agent_idempotent(&owner, new_agent("b"), create_key("c2", 1), render)
            .await
            .expect("room now");
        assert!(!second.is_replayed());
        assert_eq!(
            c.create_agent_idempotent(&principal(5), new_agent("x"), create_key("c3", 1), render)
                .await
                .expect_err("another account's key")
                .code(),
            "invalid_argument"
        );
        env.done().await;
    }
}

#[tokio::test]
async fn records_beyond_the_bound_are_pruned_oldest_first() {
    let limits = ControlLimits {
        max_idempotency_records: 3,
        ..ControlLimits::default()
    };
    for env in envs_with(limits).await {
        let c = &env.control;
        let account = principal(6);
        let runs = Arc::new(AtomicU32::new(0));
        for n in 0..5 {
            run_counted(c, key(&account, &format!("r{n}"), 1), &runs, b"v")
                .await
                .expect("record");
        }
        let kept = count_rows(env.db(), "agentos_core_action_idempotency", "1 = 1", vec![]).await;
        assert_eq!(kept, 3, "{}", env.name());
        // The newest replay; the oldest run again.
        for n in 2..5 {
            let again = run_counted(c, key(&account, &format!("r{n}"), 1), &runs, b"v")
                .await
                .expect("replay");
            assert!(again.is_replayed(), "r{n}");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 5);
        let again = run_counted(c, key(&account, "r0", 1), &runs, b"v")
            .await
            .expect("r0");
        assert!(!again.is_replayed());
        assert_eq!(runs.load(Ordering::SeqCst), 6);
        env.done().await;
    }
}

#[tokio::test]
async fn a_session_link_commits_with_its_record() {
    for env in envs().await {
        let c = &env.control;
        let owner = principal(8);
        let agent = c
            .create_agent(&owner, new_agent("linked"))
            .await
            .expect("agent");
        let k = key(&owner, "s", 1);
        // No session row: no link, and no record either.
        let err = c
            .link_session_recorded("s1", &agent.agent_id, &k, b"s1")
            .await
            .expect_err("no session");
        assert_eq!(err.code(), "not_found");
        assert_eq!(c.stored_answer(&k).await.expect("read"), None);
        insert_session(env.db(), "s1", 10).await;
        c.link_session_recorded("s1", &agent.agent_id, &k, b"s1")
            .await
            .expect("link");
        assert_eq!(
            c.stored_answer(&k).await.expect("read"),
            Some(b"s1".to_vec()),
            "{}",
            env.name()
        );
        assert_eq!(
            c.stored_answer(&key(&owner, "s", 2))
                .await
                .expect_err("another request")
                .code(),
            "conflict"
        );
        // A second session under the recorded key is not linked: the
        // record it would duplicate rolls the link back.
        insert_session(env.db(), "s2", 20).await;
        c.link_session_recorded("s2", &agent.agent_id, &k, b"s2")
            .await
            .expect_err("recorded already");
        assert_eq!(c.session_agent("s2").await.expect("read"), None);
        assert_eq!(c.session_count(&agent.agent_id).await.expect("count"), 1);
        env.done().await;
    }
}
