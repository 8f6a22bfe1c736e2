//! `agentos-sidecar`: the command line. Parsing only; everything else lives in
//! the library.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentos_sidecar::config::Config;
use agentos_sidecar::ctl::CtlArgs;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "agentos-sidecar", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve one VM. Without --config: a SQLite file and a socket under
    /// ./agentos-data and the bundled `echo` agent.
    Serve {
        /// The VM config (JSON); `-` reads it from standard input.
        #[arg(long)]
        config: Option<String>,
    },
    /// Serve a SQLite file over the Actor Runtime Socket v1 (reference server).
    ArsServe {
        #[arg(long)]
        db: PathBuf,
        #[arg(long)]
        socket: PathBuf,
    },
    /// Operate a running sidecar through its host socket.
    Ctl(CtlArgs),
    /// The key that seals provider secrets.
    #[command(subcommand)]
    Secrets(SecretsCommand),
}

#[derive(Subcommand)]
enum SecretsCommand {
    /// Re-seal every secret under a fresh key, in one transaction, while no
    /// sidecar serves the store. The old key is kept as <keyFile>.old.
    RotateKey {
        /// The VM config (JSON); `-` reads it from standard input. Without
        /// it, the embedded default's store under ./agentos-data.
        #[arg(long)]
        config: Option<String>,
    },
}

fn load_config(arg: Option<&str>) -> Result<Config, String> {
    match arg {
        Some("-") => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| format!("config: cannot read standard input: {e}"))?;
            Config::from_json(&text).map_err(|e| e.to_string())
        }
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("config: cannot read {path}: {e}"))?;
            Config::from_json(&text).map_err(|e| e.to_string())
        }
        None => {
            let dir = std::env::current_dir()
                .map_err(|e| format!("cannot resolve the current directory: {e}"))?
                .join("agentos-data");
            agentos_sidecar::private::create_private_dir(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let exe =
                std::env::current_exe().map_err(|e| format!("cannot locate this binary: {e}"))?;
            let fake = exe
                .parent()
                .unwrap_or(Path::new("."))
                .join("agentos-fake-agent");
            if !fake.exists() {
                return Err(format!(
                    "the bundled echo agent is missing at {} (build the whole workspace: cargo build --release)",
                    fake.display()
                ));
            }
            Ok(Config::embedded_default(&dir, &fake))
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AGENTOS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Serve { config } => match load_config(config.as_deref()) {
            Ok(config) => runtime
                .block_on(agentos_sidecar::serve::serve(config))
                .map_err(|e| format!("{}: {e}", e.code())),
            Err(message) => Err(format!("invalid_config: {message}")),
        },
        Command::ArsServe { db, socket } => runtime
            .block_on(agentos_sidecar::db::ars_server::run_cli(&db, &socket))
            .map_err(|e| format!("{}: {e}", e.code())),
        Command::Secrets(SecretsCommand::RotateKey { config }) => {
            match load_config(config.as_deref()) {
                Ok(config) => runtime
                    .block_on(agentos_sidecar::maintenance::rotate_secrets_key(&config))
                    .map(|report| println!("{report}"))
                    .map_err(|e| format!("{}: {e}", e.code())),
                Err(message) => Err(format!("invalid_config: {message}")),
            }
        }
        Command::Ctl(args) => {
            let code = runtime.block_on(agentos_sidecar::ctl::run(args));
            return ExitCode::from(code as u8);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}
