//! `ctl runs`: the VM's runs from the operator's shell, over the host
//! socket's `runs/*` methods: a session's, an agent's or a tree's listing,
//! one run, a tree drawn by its parent links, cancel, signal and a run's
//! journal. Arguments the socket would refuse anyway (two scopes, an unknown
//! status, an empty signal, a payload that is not JSON) are refused here,
//! before connecting.

use std::collections::{HashMap, HashSet};

use agentos_protocol::host::methods;
use clap::{ArgGroup, Subcommand};
use serde_json::{json, Value};

use super::{print, str_of, ClientError, HostClient};
use agentos_protocol::runs::{RunStatus, MAX_LIST};

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// A session's or an agent's runs (newest first), or a whole tree
    /// (oldest first).
    #[command(group(ArgGroup::new("scope").required(true).args(["session", "agent", "root"])))]
    List {
        #[arg(long)]
        session: Option<String>,
        #[arg(long)]
        agent: Option<String>,
        /// Any run of the tree.
        #[arg(long)]
        root: Option<String>,
        /// queued, claimed, running, waiting, succeeded, failed or canceled.
        #[arg(long, value_parser = run_status)]
        status: Option<String>,
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_LIST))]
        limit: Option<u64>,
    },
    /// One run, whole.
    Get { run: String },
    /// The tree a run belongs to, one line per run, indented by depth.
    Tree { run: String },
    /// Cancel a run and its unfinished children.
    Cancel { run: String },
    /// Deliver a signal to a run waiting on it.
    Signal {
        run: String,
        #[arg(value_parser = signal_name)]
        signal: String,
        /// Any JSON value.
        #[arg(long, value_parser = json_value)]
        payload: Option<Value>,
    },
    /// A run's journal entries after `--after` (a page of at most 1,000).
    Journal {
        run: String,
        #[arg(long)]
        after: Option<u64>,
    },
}

fn run_status(text: &str) -> Result<String, String> {
    match RunStatus::parse(text) {
        Some(status) => Ok(status.as_str().to_owned()),
        None => Err(format!(
            "not a run status (one of {})",
            RunStatus::ALL.map(RunStatus::as_str).join(", ")
        )),
    }
}

/// The socket takes a signal name of 1..=256 bytes.
fn signal_name(text: &str) -> Result<String, String> {
    if text.is_empty() || text.len() > 256 {
        return Err("a signal name is 1 to 256 bytes".into());
    }
    Ok(text.to_owned())
}

fn json_value(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))
}

/// Why a waiting run waits, for a human: ` [waiting on children (2)]`.
fn wait_note(run: &Value) -> String {
    if run["status"] != "waiting" {
        return String::new();
    }
    let wait = &run["wait"];
    let mut note = format!("waiting on {}", str_of(wait, "reason"));
    if let Some(n) = wait.get("pendingChildren").and_then(Value::as_u64) {
        note.push_str(&format!(" ({n})"));
    }
    if let Some(label) = wait.get("label").and_then(Value::as_str) {
        note.push_str(&format!(": {label}"));
    }
    if let Some(signal) = wait.get("answerWith").and_then(Value::as_str) {
        note.push_str(&format!(", signal {signal}"));
    }
    if let Some(at) = wait.get("wakeAt").and_then(Value::as_str) {
        note.push_str(&format!(", wakes {at}"));
    }
    format!("  [{note}]")
}

/// One run on one line: id, kind, status, title, and why it waits.
pub fn run_line(run: &Value) -> String {
    format!(
        "{}  {:<6} {:<9} {}{}",
        str_of(run, "id"),
        str_of(run, "kind"),
        str_of(run, "status"),
        str_of(run, "title"),
        wait_note(run)
    )
}

/// The runs of one tree (as `runs/list` answers it, oldest first) drawn by
/// their parent links, each line indented two spaces per level. A run whose
/// parent is not in the list starts a line of its own at the left.
pub fn tree_lines(runs: &[Value]) -> Vec<String> {
    let ids: HashSet<&str> = runs.iter().filter_map(|r| r["id"].as_str()).collect();
    let mut children: HashMap<&str, Vec<&Value>> = HashMap::new();
    let mut tops = Vec::new();
    for run in runs {
        match run["parentRunId"].as_str() {
            Some(parent) if ids.contains(parent) => children.entry(parent).or_default().push(run),
            _ => tops.push(run),
        }
    }
    let mut lines = Vec::new();
    let mut seen = HashSet::new();
    // Depth first, children in the order they were created.
    let mut stack: Vec<(&Value, usize)> = tops.into_iter().rev().map(|r| (r, 0)).collect();
    while let Some((run, level)) = stack.pop() {
        let id = run["id"].as_str().unwrap_or("");
        if !seen.insert(id) {
            continue;
        }
        lines.push(format!("{}{}", "  ".repeat(level), run_line(run)));
        if let Some(kids) = children.get(id) {
            stack.extend(kids.iter().rev().map(|kid| (*kid, level + 1)));
        }
    }
    lines
}

fn journal_line(entry: &Value) -> String {
    format!(
        "#{:<6} {} {}",
        entry["seq"].as_u64().unwrap_or(0),
        str_of(entry, "createdAt"),
        entry["entry"]
    )
}

pub(super) async fn run(
    client: &HostClient,
    command: &RunsCommand,
    j: bool,
) -> Result<(), ClientError> {
    match command {
        RunsCommand::List {
            session,
            agent,
            root,
            status,
            limit,
        } => {
            let v = client
                .call(
                    methods::RUNS_LIST,
                    json!({"sessionId": session, "agentId": agent, "rootRunId": root,
                           "status": status, "limit": limit}),
                )
                .await?;
            print(j, &v, |v| {
                let runs = v["runs"].as_array().cloned().unwrap_or_default();
                if runs.is_empty() {
                    return "no runs".into();
                }
                runs.iter()
                    .map(|r| format!("{}  {}", str_of(r, "createdAt"), run_line(r)))
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        RunsCommand::Get { run } => {
            let v = client
                .call(methods::RUNS_GET, json!({ "runId": run }))
                .await?;
            print(j, &v, |v| {
                serde_json::to_string_pretty(&v["run"]).unwrap_or_default()
            });
        }
        RunsCommand::Tree { run } => {
            let v = client
                .call(methods::RUNS_LIST, json!({ "rootRunId": run }))
                .await?;
            print(j, &v, |v| {
                let runs = v["runs"].as_array().cloned().unwrap_or_default();
                tree_lines(&runs).join("\n")
            });
        }
        RunsCommand::Cancel { run } => {
            let v = client
                .call(methods::RUNS_CANCEL, json!({ "runId": run }))
                .await?;
            print(j, &v, |v| {
                if v["canceled"] == json!(true) {
                    format!("canceled {run}")
                } else {
                    format!("{run}: nothing left to cancel")
                }
            });
        }
        RunsCommand::Signal {
            run,
            signal,
            payload,
        } => {
            let v = client
                .call(
                    methods::RUNS_SIGNAL,
                    json!({"runId": run, "signal": signal, "payload": payload}),
                )
                .await?;
            print(j, &v, |v| {
                if v["delivered"] == json!(true) {
                    format!("delivered {signal} to {run}")
                } else {
                    format!("not delivered: {run} is not waiting on {signal}")
                }
            });
        }
        RunsCommand::Journal { run, after } => {
            let v = client
                .call(
                    methods::RUNS_JOURNAL,
                    json!({"runId": run, "afterSeq": after}),
                )
                .await?;
            print(j, &v, |v| {
                let entries = v["entries"].as_array().cloned().unwrap_or_default();
                let mut lines: Vec<String> = entries.iter().map(journal_line).collect();
                match entries.last().and_then(|e| e["seq"].as_u64()) {
                    None => lines.push("no journal entries".into()),
                    Some(last) if entries.len() >= 1_000 => {
                        lines.push(format!("more: --after {last}"))
                    }
                    Some(_) => {}
                }
                lines.join("\n")
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, parent: Option<&str>, status: &str) -> Value {
        let mut run = json!({"id": id, "kind": "agent", "status": status, "title": id});
        if let Some(parent) = parent {
            run["parentRunId"] = json!(parent);
        }
        run
    }

    #[test]
    fn a_tree_is_drawn_by_its_parent_links() {
        let mut waiting = run("root", None, "waiting");
        waiting["wait"] = json!({"reason": "children", "pendingChildren": 2});
        let runs = [
            waiting,
            run("a", Some("root"), "running"),
            run("b", Some("root"), "queued"),
            run("a1", Some("a"), "succeeded"),
        ];
        let lines = tree_lines(&runs);
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("root  agent  waiting   root"));
        assert!(
            lines[0].ends_with("[waiting on children (2)]"),
            "{}",
            lines[0]
        );
        assert!(lines[1].starts_with("  a  "), "{}", lines[1]);
        assert!(lines[2].starts_with("    a1  "), "{}", lines[2]);
        assert!(lines[3].starts_with("  b  "), "{}", lines[3]);
    }

    #[test]
    fn bad_arguments_are_refused_before_connecting() {
        assert!(run_status("waiting").is_ok());
        assert!(run_status("sleeping").unwrap_err().contains("queued"));
        assert_eq!(json_value("{\"a\":1}").unwrap(), json!({"a": 1}));
        assert!(json_value("{a").is_err());
        assert!(signal_name("go").is_ok());
        assert!(signal_name("").is_err());
        assert!(signal_name(&"s".repeat(257)).is_err());
    }
}
