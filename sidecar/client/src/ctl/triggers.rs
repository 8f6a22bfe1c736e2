//! `ctl triggers`: an agent's triggers from the operator's shell, over the
//! host socket's `triggers/*` methods: list, get, create and update (the
//! trigger or patch as JSON, checked by the sidecar with the signed door's
//! rules and words), delete, and `tick`, one look of the schedule monitor
//! now or as of a given instant. Text that is not JSON is refused here,
//! before connecting.

use agentos_protocol::host::methods;
use clap::Subcommand;
use serde_json::{json, Value};

use super::{print, str_of, ClientError, HostClient};

#[derive(Debug, Subcommand)]
pub enum TriggersCommand {
    /// An agent's triggers, the latest edited first.
    List { agent: String },
    /// One trigger and the sessions it started.
    Get { trigger: String },
    /// Create a trigger: `{name, source, prompt, enabled?, continuation?}`.
    Create {
        agent: String,
        #[arg(value_parser = json_value)]
        trigger: Value,
    },
    /// Change the parts a patch names (each replaces the stored one).
    Update {
        trigger: String,
        #[arg(value_parser = json_value)]
        patch: Value,
    },
    /// Delete a trigger; the sessions it started stay.
    Delete { trigger: String },
    /// Look at the schedules now (or as of `--at`, milliseconds since the
    /// epoch) and fire what is due.
    Tick {
        #[arg(long)]
        at: Option<i64>,
    },
}

fn json_value(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))
}

/// One trigger on one line: id, status, source type, name.
pub fn trigger_line(t: &Value) -> String {
    let status = if t["enabled"] == json!(true) {
        "active"
    } else {
        "disabled"
    };
    let mut line = format!(
        "{}  {:<8} {:<14} {}",
        str_of(t, "id"),
        status,
        t.pointer("/source/type")
            .and_then(Value::as_str)
            .unwrap_or("-"),
        str_of(t, "name")
    );
    if let Some(error) = t.get("lastError").and_then(Value::as_str) {
        line.push_str(&format!("  [error: {error}]"));
    }
    line
}

pub(super) async fn run(
    client: &HostClient,
    command: &TriggersCommand,
    j: bool,
) -> Result<(), ClientError> {
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    match command {
        TriggersCommand::List { agent } => {
            let v = client
                .call(methods::TRIGGERS_LIST, json!({ "agentId": agent }))
                .await?;
            print(j, &v, |v| {
                let triggers = v["triggers"].as_array().cloned().unwrap_or_default();
                if triggers.is_empty() {
                    return "no triggers".into();
                }
                triggers
                    .iter()
                    .map(trigger_line)
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        TriggersCommand::Get { trigger } => {
            let v = client
                .call(methods::TRIGGERS_GET, json!({ "triggerId": trigger }))
                .await?;
            print(j, &v, |v| pretty(v));
        }
        TriggersCommand::Create { agent, trigger } => {
            let v = client
                .call(
                    methods::TRIGGERS_CREATE,
                    json!({"agentId": agent, "trigger": trigger}),
                )
                .await?;
            print(j, &v, |v| trigger_line(&v["trigger"]));
        }
        TriggersCommand::Update { trigger, patch } => {
            let v = client
                .call(
                    methods::TRIGGERS_UPDATE,
                    json!({"triggerId": trigger, "patch": patch}),
                )
                .await?;
            print(j, &v, |v| trigger_line(&v["trigger"]));
        }
        TriggersCommand::Delete { trigger } => {
            let v = client
                .call(methods::TRIGGERS_DELETE, json!({ "triggerId": trigger }))
                .await?;
            print(j, &v, |_| format!("deleted {trigger}"));
        }
        TriggersCommand::Tick { at } => {
            let v = client
                .call(methods::TRIGGERS_TICK, json!({ "at": at }))
                .await?;
            print(j, &v, |v| {
                format!(
                    "looked at {} schedule trigger(s): {} due, {} fired, {} skipped, {} failed",
                    v["checked"], v["matched"], v["fired"], v["skipped"], v["errors"]
                )
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_reads_on_one_line() {
        let t = json!({"id": "t1", "enabled": false, "name": "Daily",
                       "source": {"type": "schedule"}, "lastError": "boom"});
        let line = trigger_line(&t);
        assert!(
            line.starts_with("t1  disabled schedule       Daily"),
            "{line}"
        );
        assert!(line.ends_with("[error: boom]"));
        assert!(json_value("{\"a\":1}").is_ok());
        assert!(json_value("{a").is_err());
    }
}
