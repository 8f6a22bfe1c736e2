//! `agentos-sidecar`: the command line. Parsing only; everything else lives in
//! the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "agentos-sidecar", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a SQLite file over the Actor Runtime Socket v1 (reference server).
    ArsServe {
        #[arg(long)]
        db: PathBuf,
        #[arg(long)]
        socket: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::ArsServe { db, socket } => runtime
            .block_on(agentos_sidecar::db::ars_server::run_cli(&db, &socket))
            .map_err(|e| format!("{}: {e}", e.code())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}
