//! The crash-recovery proof, runnable: `crash_test [--trials N]
//! [--backend sqlite_file|actor_uds|rivet|both|all] [--seed S] [--max-kill-delay-ms MS]
//! [--bin-dir DIR] [--quiet]`. Prints the figures and exits non-zero on any
//! violation. `scripts/crash-test` builds the release binaries and runs it.

use std::path::PathBuf;
use std::process::ExitCode;

use agentos_tests::crash::{profile_dir, run, Backend, CrashOptions};

fn usage(problem: &str) -> ExitCode {
    eprintln!("crash_test: {problem}");
    eprintln!(
        "usage: crash_test [--trials N] [--backend sqlite_file|actor_uds|rivet|both|all] [--seed S] \
         [--max-kill-delay-ms MS] [--bin-dir DIR] [--quiet]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut bin_dir: Option<PathBuf> = profile_dir();
    let mut trials = 200u32;
    let mut backends = vec![Backend::SqliteFile, Backend::ActorUds];
    let mut seed: Option<u64> = None;
    let mut max_kill_delay_ms = 1500u64;
    let mut progress = true;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--quiet" {
            progress = false;
            continue;
        }
        let Some(value) = args.next() else {
            return usage(&format!("{flag} needs a value"));
        };
        match flag.as_str() {
            "--trials" => match value.parse() {
                Ok(n) => trials = n,
                Err(_) => return usage("--trials takes a number"),
            },
            "--backend" => match Backend::parse_list(&value) {
                Some(list) => backends = list,
                None => return usage("--backend is sqlite_file, actor_uds, rivet, both or all"),
            },
            "--seed" => match value.parse() {
                Ok(s) => seed = Some(s),
                Err(_) => return usage("--seed takes a number"),
            },
            "--max-kill-delay-ms" => match value.parse() {
                Ok(ms) => max_kill_delay_ms = ms,
                Err(_) => return usage("--max-kill-delay-ms takes a number"),
            },
            // Agent commands must be absolute (adapters run in their
            // session's directory).
            "--bin-dir" => match std::fs::canonicalize(&value) {
                Ok(dir) => bin_dir = Some(dir),
                Err(e) => return usage(&format!("--bin-dir {value}: {e}")),
            },
            other => return usage(&format!("unknown flag {other}")),
        }
    }
    let Some(bin_dir) = bin_dir else {
        return usage("cannot locate the binaries; pass --bin-dir");
    };
    let seed = seed.unwrap_or_else(rand::random);
    let mut options = CrashOptions::new(&bin_dir);
    options.trials = trials;
    options.backends = backends;
    options.seed = seed;
    options.max_kill_delay_ms = max_kill_delay_ms;
    options.progress = progress;
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("crash_test: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let started = std::time::Instant::now();
    let summary = match runtime.block_on(run(&options)) {
        Ok(summary) => summary,
        Err(e) => {
            eprintln!("crash_test: {e}");
            return ExitCode::FAILURE;
        }
    };
    let names: Vec<&str> = options.backends.iter().map(|b| b.name()).collect();
    println!(
        "crash-test: seed {seed}, {} trials per backend ({}), {:.1} s",
        options.trials,
        names.join(", "),
        started.elapsed().as_secs_f64()
    );
    print!("{}", summary.render());
    if summary.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
