//! The builtin agent's CPU goals, measured as the issue that set them
//! states them: replies of 50 small deltas, 20 sequential turns in each of
//! 1, 8 and 32 sessions at once (CPU per turn of the sidecar and its agent
//! processes, if any, goal at most 2 ms, read on the median of three
//! rounds), and one session of 300 turns (CPU per
//! turn over turns 290–300 against turns 1–10, goal at most 1.2×). CPU is
//! read from `schedstat`, to the nanosecond, so a window of ten turns is
//! measured, not rounded to clock ticks.

use std::time::{Duration, Instant};

use agentos_client::ctl::HostClient;
use agentos_tests::bench::{children_of, on_cpu};
use agentos_tests::provider_server::Reply;

use super::{host_turn_expecting, ms, Error, Turns, World, CONNECTIONS};

/// Deltas of every reply in these phases.
const DELTAS: usize = 50;
/// Sessions at once, and each one's sequential turns. A profile of one
/// level runs it alone with `AGENTOS_BENCH_AT=8` (a comma-separated list).
const CONCURRENCY: [usize; 3] = [1, 8, 32];
const TURNS_PER_SESSION: usize = 20;
/// Rounds at each level, each on sessions of its own; the goal is read on
/// their median (one session's 20 turns are 60 ms of CPU, which a stray
/// wake-up moves).
const ROUNDS: usize = 3;
/// At most this much CPU (sidecar and agents) per turn.
const CPU_GOAL_MS: f64 = 2.0;
/// The long session, its windows, and the most the last window may cost
/// against the first.
const LONG_TURNS: usize = 300;
const WINDOW: usize = 10;
/// Long sessions run one after another; the goal is read on their median,
/// since a window of ten turns is short enough for a stray wake-up to move.
const LONG_SESSIONS: usize = 3;
const FLAT_GOAL: f64 = 1.2;

fn reply() -> Reply {
    Reply::Text((0..DELTAS).map(|i| format!("w{i} ")).collect())
}

fn reply_text() -> String {
    (0..DELTAS).map(|i| format!("w{i} ")).collect()
}

/// CPU of the sidecar's live threads and of its live children's.
#[derive(Clone, Copy)]
struct Cpu {
    sidecar: Duration,
    agents: Duration,
}

fn cpu(pid: u32) -> Cpu {
    Cpu {
        sidecar: on_cpu(pid),
        agents: children_of(pid).into_iter().map(on_cpu).sum(),
    }
}

impl Cpu {
    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            sidecar: self.sidecar.saturating_sub(before.sidecar),
            agents: self.agents.saturating_sub(before.agents),
        }
    }

    fn per_turn_ms(self, turns: usize) -> (f64, f64, f64) {
        let n = turns.max(1) as f64;
        let (s, a) = (ms(self.sidecar) / n, ms(self.agents) / n);
        (s + a, s, a)
    }
}

pub fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT MET"
    }
}

/// (4) CPU per builtin turn at 1, 8 and 32 sessions at once.
pub async fn cpu_per_turn(world: &World) -> Result<(), Error> {
    world.provider.set_default(reply());
    let expected = reply_text();
    println!(
        "(4) CPU per builtin turn (sidecar + agents), {DELTAS}-delta replies, \
         {TURNS_PER_SESSION} sequential turns in each session"
    );
    for n in levels() {
        let mut rounds = Vec::with_capacity(ROUNDS);
        let mut failed = false;
        for round in 1..=ROUNDS {
            let (total, line, ok) = cpu_round(world, n, &expected).await?;
            println!("  {n:>2} at once, round {round} of {ROUNDS}: {line}");
            rounds.push(total);
            failed |= !ok;
        }
        rounds.sort_by(f64::total_cmp);
        let median = rounds[rounds.len() / 2];
        println!(
            "  {n:>2} at once: {median:.2} ms per turn, median of {ROUNDS} rounds — goal ≤ \
             {CPU_GOAL_MS} ms: {}",
            verdict(median <= CPU_GOAL_MS && !failed)
        );
    }
    world.provider.set_default(super::short_reply());
    Ok(())
}

/// The levels to run: `AGENTOS_BENCH_AT` when it names any, else all.
fn levels() -> Vec<usize> {
    let chosen: Vec<usize> = std::env::var("AGENTOS_BENCH_AT")
        .unwrap_or_default()
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .filter(|&n| n > 0)
        .collect();
    if chosen.is_empty() {
        CONCURRENCY.to_vec()
    } else {
        chosen
    }
}

/// One round at `n` sessions at once, on sessions of its own: CPU per turn,
/// the line that reports it, and whether every turn was right.
async fn cpu_round(world: &World, n: usize, expected: &str) -> Result<(f64, String, bool), Error> {
    let mut sessions = Vec::with_capacity(n);
    for _ in 0..n {
        sessions.push(world.session().await?);
    }
    let mut clients = Vec::new();
    for _ in 0..n.min(CONNECTIONS) {
        clients.push(world.host().await?);
    }
    // A first turn in each starts its agent; not measured.
    let warm = run(&clients, &sessions, 1, expected).await;
    if !warm.failures.is_empty() {
        return Err(format!("the first turns failed: {}", warm.problems()).into());
    }
    let before = cpu(world.pid);
    let started = Instant::now();
    let turns = run(&clients, &sessions, TURNS_PER_SESSION, expected).await;
    let wall = started.elapsed();
    let used = cpu(world.pid).since(before);
    let count = n * TURNS_PER_SESSION;
    let (total, sidecar, agents) = used.per_turn_ms(count);
    let line = format!(
        "{total:.2} ms per turn (sidecar {sidecar:.2}, agent processes {agents:.2}); \
         {:.0} turns/s; {}; {}",
        count as f64 / wall.as_secs_f64(),
        turns.summary(),
        turns.problems(),
    );
    Ok((total, line, turns.failures.is_empty()))
}

/// `turns` sequential turns in every session, the sessions at once.
async fn run(clients: &[HostClient], sessions: &[String], turns: usize, expected: &str) -> Turns {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, session) in sessions.iter().enumerate() {
        let client = clients[i % clients.len()].clone();
        let (session, expected) = (session.clone(), expected.to_owned());
        tasks.spawn(async move {
            let mut done = Turns::default();
            for t in 0..turns {
                let (latency, outcome) =
                    host_turn_expecting(&client, &session, &format!("turn {t}"), &expected).await;
                done.add(latency, outcome);
            }
            done
        });
    }
    let mut all = Turns::default();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(turns) => all.extend(turns),
            Err(e) => all.add(Duration::ZERO, Err(format!("task: {e}"))),
        }
    }
    all
}

/// (5) Sessions of `LONG_TURNS` turns, one after another: CPU per turn
/// over each one's last ten against its first ten, and their median.
pub async fn flat_in_length(world: &World) -> Result<(), Error> {
    world.provider.set_default(reply());
    let mut ratios = Vec::with_capacity(LONG_SESSIONS);
    let mut failed = false;
    for n in 1..=LONG_SESSIONS {
        let (first, last, turns) = long_session(world).await?;
        let (first_ms, first_sidecar, first_agents) = first.per_turn_ms(WINDOW);
        let (last_ms, last_sidecar, last_agents) = last.per_turn_ms(WINDOW);
        let ratio = last_ms / first_ms.max(1e-9);
        println!(
            "(5) session {n} of {LONG_SESSIONS}: {LONG_TURNS} turns after the one that starts its \
             agent, {DELTAS}-delta replies: CPU per turn {first_ms:.2} ms (sidecar \
             {first_sidecar:.2}, agent {first_agents:.2}) over turns 1–{WINDOW}, {last_ms:.2} ms \
             (sidecar {last_sidecar:.2}, agent {last_agents:.2}) over turns {}–{LONG_TURNS}, ratio \
             {ratio:.2}; {}; {}",
            LONG_TURNS - WINDOW + 1,
            turns.summary(),
            turns.problems(),
        );
        failed |= !turns.failures.is_empty();
        ratios.push(ratio);
    }
    world.provider.set_default(super::short_reply());
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    println!(
        "(5) late ÷ early CPU per turn, median of {LONG_SESSIONS} sessions: {median:.2} — goal ≤ \
         {FLAT_GOAL}×: {}",
        verdict(median <= FLAT_GOAL && !failed)
    );
    Ok(())
}

/// One long session: CPU over its first and its last `WINDOW` turns.
async fn long_session(world: &World) -> Result<(Cpu, Cpu, Turns), Error> {
    let expected = reply_text();
    let client = world.host().await?;
    let session = world.session().await?;
    // The turn that starts the agent comes before the counted ones.
    host_turn_expecting(&client, &session, "hello", &expected)
        .await
        .1
        .map_err(|code| format!("the first turn failed: {code}"))?;
    let mut turns = Turns::default();
    let mut first = None;
    let mut last = None;
    let mut mark = cpu(world.pid);
    for t in 1..=LONG_TURNS {
        if t == 1 || t == LONG_TURNS - WINDOW + 1 {
            mark = cpu(world.pid);
        }
        let (latency, outcome) =
            host_turn_expecting(&client, &session, &format!("turn {t}"), &expected).await;
        turns.add(latency, outcome);
        if t == WINDOW {
            first = Some(cpu(world.pid).since(mark));
        }
        if t == LONG_TURNS {
            last = Some(cpu(world.pid).since(mark));
        }
    }
    match (first, last) {
        (Some(first), Some(last)) => Ok((first, last, turns)),
        _ => Err("the long session's windows were not measured".into()),
    }
}
