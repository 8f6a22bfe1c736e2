//! The operator CLI (`agentos-sidecar ctl`): a host-protocol client with
//! human output by default and `--json` for scripts.

mod client;
mod fs;

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

pub use client::{ClientError, HostClient, Notification};
pub use fs::FsCommand;

#[derive(Debug, Args)]
pub struct CtlArgs {
    /// The sidecar's host socket.
    #[arg(long, default_value = "agentos-data/sidecar.sock")]
    pub socket: PathBuf,
    /// Print raw JSON results instead of human output.
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub command: CtlCommand,
}

#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// VM status: counts, limits, live adapters.
    Status,
    /// Manage sessions.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Send a prompt and stream the reply as it arrives.
    Prompt {
        session: String,
        text: String,
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Print a session's history; `--follow` keeps printing new events.
    History {
        session: String,
        #[arg(long)]
        follow: bool,
        #[arg(long)]
        after: Option<u64>,
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Answer pending permission requests.
    #[command(subcommand)]
    Permissions(PermissionsCommand),
    /// The VM's file system: ls, cat, put, get, rm, mv, mkdir, import, export.
    #[command(subcommand)]
    Fs(FsCommand),
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    List {
        #[arg(long)]
        limit: Option<u64>,
        #[arg(long)]
        cursor: Option<String>,
    },
    Open {
        session: String,
        #[arg(long, default_value = "echo")]
        agent: String,
        #[arg(long)]
        cwd: Option<String>,
        /// allow_all, reject_all or ask.
        #[arg(long)]
        permission_policy: Option<String>,
    },
    Get {
        session: String,
    },
    Delete {
        session: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PermissionsCommand {
    Respond {
        session: String,
        request_id: String,
        option_id: String,
    },
}

/// Runs one CLI command; returns the process exit code.
pub async fn run(args: CtlArgs) -> i32 {
    match execute(&args).await {
        Ok(()) => 0,
        Err(e) => {
            if args.json {
                let error = match &e {
                    ClientError::Rpc(obj) => json!(obj),
                    other => json!({"code": other.code(), "message": other.to_string()}),
                };
                println!("{}", json!({ "error": error }));
            } else {
                eprintln!("error: {e} [{}]", e.code());
            }
            1
        }
    }
}

fn print(json_mode: bool, value: &Value, human: impl FnOnce(&Value) -> String) {
    if json_mode {
        println!("{value}");
    } else {
        println!("{}", human(value));
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("-")
}

fn session_line(s: &Value) -> String {
    format!(
        "{:<24} {:<12} {:<8} seq={:<6} updated {}",
        str_of(s, "sessionId"),
        str_of(s, "agent"),
        s.pointer("/state/status")
            .and_then(Value::as_str)
            .unwrap_or("-"),
        s.get("latestSequence").and_then(Value::as_u64).unwrap_or(0),
        str_of(s, "updatedAt"),
    )
}

/// One line for a public event.
pub fn event_line(e: &Value) -> String {
    let seq = e.get("sequence").and_then(Value::as_u64).unwrap_or(0);
    let ty = str_of(e, "type");
    let detail = match ty {
        "user_message_chunk" | "agent_message_chunk" | "agent_thought_chunk" => e
            .pointer("/content/text")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| e.get("content").map(Value::to_string).unwrap_or_default()),
        "tool_call" | "tool_call_update" => format!(
            "{} {}",
            str_of(e, "toolCallId"),
            e.get("status").and_then(Value::as_str).unwrap_or("")
        ),
        "permission_request" => {
            let options: Vec<String> = e
                .get("options")
                .and_then(Value::as_array)
                .map(|o| {
                    o.iter()
                        .map(|o| format!("{}({})", str_of(o, "optionId"), str_of(o, "kind")))
                        .collect()
                })
                .unwrap_or_default();
            format!("{} options: {}", str_of(e, "requestId"), options.join(", "))
        }
        "permission_response" => format!(
            "{} {} {}",
            str_of(e, "requestId"),
            str_of(e, "status"),
            e.get("reason").and_then(Value::as_str).unwrap_or("")
        ),
        _ => String::new(),
    };
    format!("#{seq:<6} {ty:<22} {detail}")
}

async fn execute(args: &CtlArgs) -> Result<(), ClientError> {
    let (client, mut notes) = HostClient::connect(&args.socket).await?;
    let j = args.json;
    match &args.command {
        CtlCommand::Status => {
            let v = client.call("vm/status", json!({})).await?;
            print(j, &v, |v| {
                let line = |k: &str| {
                    let u = &v[k];
                    format!(
                        "{k:<20} {} / {}{}",
                        u["used"],
                        u["limit"],
                        if u["nearLimit"] == json!(true) {
                            "  (above 80%)"
                        } else {
                            ""
                        }
                    )
                };
                [
                    format!(
                        "database             {}",
                        v.pointer("/database/type")
                            .and_then(Value::as_str)
                            .unwrap_or("-")
                    ),
                    line("sessions"),
                    line("prompts"),
                    line("pendingPermissions"),
                    line("permissionOutcomes"),
                    format!("live adapters        {}", v["liveAdapters"]),
                    format!("keep-awake holders   {}", v["keepAwakeHolders"]),
                ]
                .join("\n")
            });
        }
        CtlCommand::Sessions(cmd) => match cmd {
            SessionsCommand::List { limit, cursor } => {
                let v = client
                    .call("sessions/list", json!({"limit": limit, "cursor": cursor}))
                    .await?;
                print(j, &v, |v| {
                    let mut lines: Vec<String> = v["sessions"]
                        .as_array()
                        .map(|a| a.iter().map(session_line).collect())
                        .unwrap_or_default();
                    if lines.is_empty() {
                        lines.push("no sessions".into());
                    }
                    if let Some(next) = v.get("nextCursor").and_then(Value::as_str) {
                        lines.push(format!("more: --cursor {next}"));
                    }
                    lines.join("\n")
                });
            }
            SessionsCommand::Open {
                session,
                agent,
                cwd,
                permission_policy,
            } => {
                let v = client
                    .call(
                        "sessions/open",
                        json!({"sessionId": session, "agent": agent, "cwd": cwd, "permissionPolicy": permission_policy}),
                    )
                    .await?;
                print(j, &v, session_line);
            }
            SessionsCommand::Get { session } => {
                let v = client
                    .call("sessions/get", json!({ "sessionId": session }))
                    .await?;
                print(j, &v, |v| {
                    serde_json::to_string_pretty(&v["session"]).unwrap_or_default()
                });
            }
            SessionsCommand::Delete { session } => {
                let v = client
                    .call("sessions/delete", json!({ "sessionId": session }))
                    .await?;
                print(j, &v, |_| format!("deleted {session}"));
            }
        },
        CtlCommand::Prompt {
            session,
            text,
            idempotency_key,
        } => {
            client
                .call("sessions/subscribe", json!({ "sessionId": session }))
                .await?;
            let prompt = {
                let client = client.clone();
                let params = json!({
                    "sessionId": session,
                    "content": [{"type": "text", "text": text}],
                    "idempotencyKey": idempotency_key,
                });
                tokio::spawn(async move { client.call("sessions/prompt", params).await })
            };
            tokio::pin!(prompt);
            let result = loop {
                tokio::select! {
                    done = &mut prompt => break done.map_err(|_| ClientError::Closed)?,
                    Some((method, params)) = notes.recv() => {
                        if j {
                            println!("{}", json!({"method": method, "params": params}));
                        } else if method == "sessions/update" {
                            if let Some(text) = params.pointer("/update/content/text").and_then(Value::as_str) {
                                use std::io::Write;
                                print!("{text}");
                                let _ = std::io::stdout().flush();
                            }
                        } else if method == "sessions/event" {
                            let ty = params.pointer("/event/type").and_then(Value::as_str).unwrap_or("");
                            if !ty.ends_with("_chunk") {
                                eprintln!("\n{}", event_line(&params["event"]));
                            }
                        }
                    }
                }
            };
            let v = result?;
            print(j, &v, |v| format!("\n[{}]", str_of(v, "stopReason")));
        }
        CtlCommand::History {
            session,
            follow,
            after,
            limit,
        } => {
            let mut cursor = *after;
            loop {
                let v = client
                    .call(
                        "sessions/history",
                        json!({"sessionId": session, "after": cursor.unwrap_or(0), "limit": limit}),
                    )
                    .await?;
                let events = v["events"].as_array().cloned().unwrap_or_default();
                for e in &events {
                    print(j, e, event_line);
                }
                if let Some(last) = events.last().and_then(|e| e["sequence"].as_u64()) {
                    cursor = Some(last);
                }
                if v["hasMoreAfter"] != json!(true) {
                    break;
                }
            }
            if *follow {
                client
                    .call(
                        "sessions/subscribe",
                        json!({"sessionId": session, "after": cursor.unwrap_or(0)}),
                    )
                    .await?;
                while let Some((method, params)) = notes.recv().await {
                    if method == "sessions/event" {
                        print(j, &params["event"], event_line);
                    } else if method == agentos_protocol::host::methods::SUBSCRIPTION_ENDED {
                        break;
                    }
                }
            }
        }
        CtlCommand::Fs(command) => fs::run(&client, command, j).await?,
        CtlCommand::Permissions(PermissionsCommand::Respond {
            session,
            request_id,
            option_id,
        }) => {
            let v = client
                .call(
                    "sessions/respondPermission",
                    json!({"sessionId": session, "requestId": request_id, "optionId": option_id}),
                )
                .await?;
            print(j, &v, |v| match v.get("reason").and_then(Value::as_str) {
                Some(reason) => format!("not pending: {reason}"),
                None => "accepted".into(),
            });
        }
    }
    Ok(())
}
