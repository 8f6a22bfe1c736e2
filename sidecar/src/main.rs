//! `agentos-sidecar`: the command line. Parsing only; everything else lives in
//! the library.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentos_client::ctl::CtlArgs;
use agentos_client::seed::cli::{self as seed_cli, CallOptions, SubscribeOptions, Target};
use agentos_sidecar::config::Config;
use clap::{Args, Parser, Subcommand};

/// mimalloc, built without transparent huge pages: more durable events per
/// second end to end than the system allocator, whose arena locks the SQLite
/// thread and the async workers meet on as one frees what the other
/// allocated, at the system allocator's resident size (with huge pages an
/// idle sidecar would hold twice as much).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long the HTTP door's runtime waits, at exit, for its last tasks.
const HTTP_RUNTIME_LINGER: std::time::Duration = std::time::Duration::from_secs(1);

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
    /// Run the builtin model agent as an ACP agent on standard input and
    /// output. Under the sidecar it asks its client for everything; under
    /// any other ACP client it uses the provider named here.
    Agent(AgentArgs),
    /// The key that seals provider secrets.
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// Signing keys for the signed API.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Sign one action and send it to the signed API; prints
    /// {"status", "response"} and exits 0 only on a 2xx answer.
    Call {
        /// The action's name, e.g. ListAgents.
        action: String,
        /// The key file (`keys new`).
        #[arg(long = "key", value_name = "FILE")]
        key_file: PathBuf,
        #[command(flatten)]
        target: TargetArgs,
        /// The account to act as (z6Mk…); by default the key's own.
        #[arg(long)]
        account: Option<String>,
        /// The action's fields as a JSON object (DAG-JSON: bytes are
        /// {"/": {"bytes": "<base64>"}}); `-` reads standard input.
        #[arg(long)]
        json: Option<String>,
    },
    /// Subscribe on the signed API's WebSocket and print each event as a
    /// JSON line.
    Subscribe {
        /// account/<id>, agents/<id> or sessions/<id>.
        #[arg(value_name = "KEY")]
        subscription: String,
        /// The key file (`keys new`).
        #[arg(long = "key", value_name = "FILE")]
        key_file: PathBuf,
        /// The listener: http://host:port or unix:/path.
        #[arg(long)]
        url: String,
        /// The account to act as (z6Mk…); by default the key's own.
        #[arg(long)]
        account: Option<String>,
        /// Replay durable events after this sequence number.
        #[arg(long)]
        after_seq: Option<u64>,
        /// Stop after this many events.
        #[arg(long)]
        count: Option<u64>,
    },
}

#[derive(Args)]
struct AgentArgs {
    /// The provider's type for a plain ACP client: openai, anthropic,
    /// google, or an OpenAI-compatible one (custom, ollama, …).
    #[arg(long)]
    provider_type: Option<String>,
    /// The provider's endpoint; required for a type without a default.
    #[arg(long)]
    base_url: Option<String>,
    #[arg(long)]
    model: Option<String>,
    /// A file holding the API key, read at each call (a key is never taken
    /// from the command line or the environment).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Instructions prepended to the system prompt.
    #[arg(long)]
    instructions: Option<String>,
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

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key file (mode 0600; an existing file is never
    /// overwritten) and print its principal.
    New {
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

/// Where the signed API is.
#[derive(Args)]
#[group(required = true, multiple = false)]
struct TargetArgs {
    /// The listener: http://host:port or unix:/path.
    #[arg(long)]
    url: Option<String>,
    /// A sidecar's host socket, when it has no listener.
    #[arg(long, value_name = "HOST_SOCKET")]
    socket: Option<PathBuf>,
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
            agentos_base::private::create_private_dir(&dir)
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

/// Prints a signed-API command's JSON result (or its error) on standard
/// output; success means a 2xx answer.
fn print_outcome(
    outcome: Result<(serde_json::Value, bool), agentos_client::seed::ClientError>,
) -> ExitCode {
    match outcome {
        Ok((value, success)) => {
            println!("{value}");
            if success {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            println!("{}", seed_cli::error_json(&error));
            ExitCode::FAILURE
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
    let command = match cli.command {
        Command::Agent(args) => return run_agent(args),
        other => other,
    };
    // Its threads are named for the sidecar, apart from the SQLite and reader
    // threads and from any other tokio program's, in `top` and in profiles.
    // Serving, it has one worker: the sessions and every other service run
    // there, and the HTTP door on a runtime of its own (ARCHITECTURE.md,
    // "Threads").
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if matches!(command, Command::Serve { .. }) {
        builder.worker_threads(1);
    }
    let runtime = match builder.enable_all().thread_name("agentos-async").build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match command {
        // Served above, on its own runtime.
        Command::Agent(_) => Ok(()),
        Command::Serve { config } => match load_config(config.as_deref()) {
            Ok(config) => {
                // The HTTP door's runtime: a worker per core.
                let http = match tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .thread_name("agentos-http")
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        eprintln!("cannot start the HTTP runtime: {e}");
                        return ExitCode::FAILURE;
                    }
                };
                let served = runtime
                    .block_on(agentos_sidecar::serve::serve(config, http.handle().clone()))
                    .map_err(|e| format!("{}: {e}", e.code()));
                // Its requests were drained in `serve`; what is left (a
                // WebSocket task closing) is not waited for long.
                http.shutdown_timeout(HTTP_RUNTIME_LINGER);
                served
            }
            Err(message) => Err(format!("invalid_config: {message}")),
        },
        Command::ArsServe { db, socket } => runtime
            .block_on(agentos_storage::ars_server::run_cli(&db, &socket))
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
            let code = runtime.block_on(agentos_client::ctl::run(args));
            return ExitCode::from(code as u8);
        }
        Command::Keys(KeysCommand::New { out }) => {
            return print_outcome(seed_cli::keys_new(&out).map(|value| (value, true)));
        }
        Command::Call {
            action,
            key_file,
            target,
            account,
            json,
        } => {
            let target = match (target.url, target.socket) {
                (Some(url), _) => Target::Url(url),
                (None, Some(socket)) => Target::Socket(socket),
                // clap's group requires exactly one of the two.
                (None, None) => return ExitCode::from(2),
            };
            let options = CallOptions {
                action,
                key_file,
                target,
                account,
                json,
            };
            return print_outcome(runtime.block_on(seed_cli::call(&options)));
        }
        Command::Subscribe {
            subscription,
            key_file,
            url,
            account,
            after_seq,
            count,
        } => {
            let options = SubscribeOptions {
                key: subscription,
                key_file,
                url,
                account,
                after_seq,
                count,
            };
            let outcome = {
                let mut stdout = std::io::stdout().lock();
                runtime.block_on(seed_cli::subscribe(&options, &mut stdout))
            };
            return match outcome {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    println!("{}", seed_cli::error_json(&error));
                    ExitCode::FAILURE
                }
            };
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

/// The builtin agent on stdio, on a single-threaded runtime: one process
/// per session, so it stays small.
fn run_agent(args: AgentArgs) -> ExitCode {
    use agentos_adapters::builtin::agent::{serve, AgentOptions};
    use agentos_adapters::builtin::local::LocalConfig;
    let local = match (args.provider_type, args.model) {
        (Some(provider_type), Some(model)) => match LocalConfig::new(
            &provider_type,
            args.base_url,
            &model,
            args.key_file,
            args.instructions,
        ) {
            Ok(config) => Some(config),
            Err(message) => {
                eprintln!("invalid_argument: {message}");
                return ExitCode::from(2);
            }
        },
        (None, None) => None,
        _ => {
            eprintln!("invalid_argument: --provider-type and --model go together");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = AgentOptions {
        local,
        ..AgentOptions::default()
    };
    match runtime.block_on(serve(tokio::io::stdin(), tokio::io::stdout(), options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agent: {e}");
            ExitCode::FAILURE
        }
    }
}
