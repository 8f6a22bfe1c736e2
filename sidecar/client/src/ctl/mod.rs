//! The operator CLI (`agentos-sidecar ctl`): a host-protocol client with
//! human output by default and `--json` for scripts (`fs.rs`: `ctl fs`;
//! `runs.rs`: `ctl runs`, with the tree view; `triggers.rs`: `ctl triggers`). Arguments clap refuses exit
//! 2; a failed call exits 1.

mod client;
mod fs;
mod runs;
mod triggers;

use std::path::PathBuf;

use agentos_protocol::host::methods;
use clap::{Args, Subcommand};
use serde_json::{json, Value};

pub use client::{ClientError, HostClient, Notification};
pub use fs::FsCommand;
pub use runs::RunsCommand;
pub use triggers::TriggersCommand;

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
    /// Runs: list, get, tree, cancel, signal, journal.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Triggers: list, get, create, update, delete, tick.
    #[command(subcommand)]
    Triggers(TriggersCommand),
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
    /// Stops the session's adapter; its history stays.
    Unload {
        session: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PermissionsCommand {
    /// The session's pending permission requests with their options.
    List { session: String },
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
            SessionsCommand::Unload { session } => {
                let v = client
                    .call("sessions/unload", json!({ "sessionId": session }))
                    .await?;
                print(j, &v, |_| format!("unloaded {session}"));
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
            let mut streamed = String::new();
            let result = loop {
                tokio::select! {
                    // Notifications first: those that arrived before the
                    // answer are shown before it.
                    biased;
                    Some((method, params)) = notes.recv() => {
                        show_prompt_note(j, &method, &params, &mut streamed);
                    }
                    done = &mut prompt => break done.map_err(|_| ClientError::Closed)?,
                }
            };
            while let Ok((method, params)) = notes.try_recv() {
                show_prompt_note(j, &method, &params, &mut streamed);
            }
            let v = result?;
            if !j {
                // Live deltas are best effort; the answer holds the whole
                // reply, so whatever they missed is printed from it.
                let rest = rest_of_reply(&streamed, &v);
                print!("{rest}");
            }
            print(j, &v, |v| format!("\n[{}]", str_of(v, "stopReason")));
        }
        CtlCommand::History {
            session,
            follow,
            after,
            limit,
        } => {
            // From the earliest retained event unless told otherwise.
            let mut cursor = match after {
                Some(after) => *after,
                None => {
                    let v = client
                        .call("sessions/get", json!({ "sessionId": session }))
                        .await?;
                    v.pointer("/session/oldestRetainedSequence")
                        .and_then(Value::as_u64)
                        .unwrap_or(1)
                        .saturating_sub(1)
                }
            };
            loop {
                let page = client
                    .call(
                        "sessions/history",
                        json!({"sessionId": session, "after": cursor, "limit": limit}),
                    )
                    .await;
                let v = match page {
                    Err(e) => match pruned_past(&e, cursor) {
                        Some(earliest) => {
                            note_pruned(j, cursor, earliest);
                            cursor = earliest - 1;
                            continue;
                        }
                        None => return Err(e),
                    },
                    Ok(v) => v,
                };
                let events = v["events"].as_array().cloned().unwrap_or_default();
                for e in &events {
                    print(j, e, event_line);
                }
                if let Some(last) = events.last().and_then(|e| e["sequence"].as_u64()) {
                    cursor = last;
                }
                if v["hasMoreAfter"] != json!(true) {
                    break;
                }
            }
            if *follow {
                follow_history(&client, &mut notes, session, cursor, j).await?;
            }
        }
        CtlCommand::Fs(command) => fs::run(&client, command, j).await?,
        CtlCommand::Runs(command) => runs::run(&client, command, j).await?,
        CtlCommand::Triggers(command) => triggers::run(&client, command, j).await?,
        CtlCommand::Permissions(PermissionsCommand::List { session }) => {
            let pending = pending_permissions(&client, session).await?;
            let v = json!({ "requests": pending });
            print(j, &v, |v| {
                let requests = v["requests"].as_array().cloned().unwrap_or_default();
                if requests.is_empty() {
                    return "no pending permission requests".into();
                }
                requests
                    .iter()
                    .map(|r| {
                        let options: Vec<String> = r["options"]
                            .as_array()
                            .map(|o| {
                                o.iter()
                                    .map(|o| {
                                        format!(
                                            "{} ({}: {})",
                                            str_of(o, "optionId"),
                                            str_of(o, "kind"),
                                            str_of(o, "name")
                                        )
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        format!(
                            "{}  {}\n  options: {}",
                            str_of(r, "requestId"),
                            r.pointer("/toolCall/title")
                                .and_then(Value::as_str)
                                .unwrap_or(""),
                            options.join(", ")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
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

/// Shows one notification that arrived while a prompt runs; the text of
/// live deltas is accumulated in `streamed`.
fn show_prompt_note(json_mode: bool, method: &str, params: &Value, streamed: &mut String) {
    if json_mode {
        println!("{}", json!({"method": method, "params": params}));
    } else if method == methods::UPDATE {
        let update = &params["update"];
        let is_message =
            update.get("sessionUpdate").and_then(Value::as_str) == Some("agent_message_chunk");
        if let Some(text) = update.pointer("/content/text").and_then(Value::as_str) {
            use std::io::Write;
            print!("{text}");
            let _ = std::io::stdout().flush();
            if is_message {
                streamed.push_str(text);
            }
        }
    } else if method == methods::EVENT {
        let ty = params
            .pointer("/event/type")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !ty.ends_with("_chunk") {
            eprintln!("\n{}", event_line(&params["event"]));
        }
    }
}

/// What the reply in a prompt's answer holds beyond the text already
/// printed from live deltas: the rest when the deltas are its beginning,
/// else the whole reply on a line of its own.
pub fn rest_of_reply(streamed: &str, answer: &Value) -> String {
    let whole: String = answer
        .pointer("/message/content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    match whole.strip_prefix(streamed) {
        Some(rest) => rest.to_owned(),
        None => format!("\n{whole}"),
    }
}

/// The oldest retained sequence when `e` says a cursor fell behind pruning.
fn pruned_past(e: &ClientError, cursor: u64) -> Option<u64> {
    let ClientError::Rpc(obj) = e else {
        return None;
    };
    if obj.data_code() != Some(agentos_protocol::ErrorCode::HistoryCursorExpired.as_str()) {
        return None;
    }
    let earliest = obj
        .data
        .as_ref()?
        .get("earliestAvailableSequence")?
        .as_u64()?;
    (earliest > cursor + 1).then_some(earliest)
}

fn note_pruned(json_mode: bool, cursor: u64, earliest: u64) {
    if json_mode {
        println!(
            "{}",
            json!({"pruned": {"after": cursor, "earliestAvailableSequence": earliest}})
        );
    } else {
        eprintln!(
            "[events {}..{} were pruned; continuing from #{earliest}]",
            cursor + 1,
            earliest - 1
        );
    }
}

/// Follows a session live from `cursor`, subscribing again wherever a
/// subscription ends early (a follower that fell behind is ended with
/// `overflow`; one whose place was pruned meanwhile continues from the
/// earliest retained event). Ends when the session is deleted.
async fn follow_history(
    client: &HostClient,
    notes: &mut tokio::sync::mpsc::UnboundedReceiver<Notification>,
    session: &str,
    mut cursor: u64,
    json_mode: bool,
) -> Result<(), ClientError> {
    'subscribe: loop {
        let subscribed = client
            .call(
                "sessions/subscribe",
                json!({"sessionId": session, "after": cursor}),
            )
            .await;
        if let Err(e) = &subscribed {
            if let Some(earliest) = pruned_past(e, cursor) {
                note_pruned(json_mode, cursor, earliest);
                cursor = earliest - 1;
                continue;
            }
        }
        let subscription = subscribed?;
        let id = subscription["subscriptionId"].clone();
        while let Some((method, params)) = notes.recv().await {
            if params["subscriptionId"] != id {
                continue;
            }
            if method == methods::EVENT {
                if let Some(sequence) = params.pointer("/event/sequence").and_then(Value::as_u64) {
                    cursor = sequence;
                }
                print(json_mode, &params["event"], event_line);
            } else if method == methods::SUBSCRIPTION_ENDED {
                if params["reason"] == "session_deleted" {
                    return Ok(());
                }
                if let Some(last) = params["lastSequence"].as_u64() {
                    cursor = cursor.max(last);
                }
                continue 'subscribe;
            }
        }
        return Err(ClientError::Closed);
    }
}

/// The pending permission requests of a session, each with the options the
/// agent offered (read from its `permission_request` event).
async fn pending_permissions(
    client: &HostClient,
    session: &str,
) -> Result<Vec<Value>, ClientError> {
    let v = client
        .call("sessions/get", json!({ "sessionId": session }))
        .await?;
    let ids: Vec<String> = v
        .pointer("/session/state/requests")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut found: Vec<Value> = Vec::new();
    let mut cursor = v
        .pointer("/session/oldestRetainedSequence")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .saturating_sub(1);
    loop {
        let page = client
            .call(
                "sessions/history",
                json!({"sessionId": session, "after": cursor, "limit": 1000}),
            )
            .await?;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        for e in &events {
            if e["type"] == "permission_request"
                && e["requestId"]
                    .as_str()
                    .is_some_and(|id| ids.iter().any(|x| x == id))
            {
                found.push(e.clone());
            }
        }
        match events.last().and_then(|e| e["sequence"].as_u64()) {
            Some(last) if page["hasMoreAfter"] == json!(true) => cursor = last,
            _ => break,
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::rest_of_reply;
    use serde_json::json;

    #[test]
    fn the_answer_completes_what_the_deltas_missed() {
        let answer = json!({"message": {"content": [{"type": "text", "text": "c0 c1 c2 c3 c4"}]}});
        assert_eq!(rest_of_reply("c0 c1 c2 c3 c4", &answer), "");
        assert_eq!(rest_of_reply("c0 c1 c2 c3 ", &answer), "c4");
        assert_eq!(rest_of_reply("", &answer), "c0 c1 c2 c3 c4");
        assert_eq!(rest_of_reply("zz", &answer), "\nc0 c1 c2 c3 c4");
    }
}
