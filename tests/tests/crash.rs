//! The short crash-recovery proof of the test suite: a few SIGKILL trials
//! per backend (Rivet's real runtime among them) against the debug
//! binaries, asserting zero violations. The long run is `scripts/crash-test`.

use agentos_tests::crash::{profile_dir, run, Backend, CrashOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_and_repeats_nothing() {
    let bin_dir = profile_dir().expect("the test executable has a profile directory");
    let mut options = CrashOptions::new(&bin_dir);
    options.trials = 6;
    options.backends = vec![Backend::SqliteFile, Backend::ActorUds, Backend::Rivet];
    options.seed = 7;
    let summary = run(&options).await.expect("the driver runs");
    println!("{}", summary.render());
    assert_eq!(summary.trials, 18);
    assert_eq!(summary.sidecar_kills + summary.socket_server_kills, 18);
    assert!(summary.prompts_sent > 0, "the trials drove no prompts");
    // Turns that all fail (an agent that cannot start) leave nothing to
    // check: the trials must have seen committed events.
    assert!(
        summary.events_seen > 0,
        "subscribers saw no events:\n{}",
        summary.render()
    );
    assert!(
        summary.violations.is_empty(),
        "crash-recovery violations:\n{}",
        summary.render()
    );
}
