//! What an agent reads of its own triggers: `read ~/triggers/` lists them
//! (name, id, status, source type, when it fires, last firing and error)
//! and `read ~/triggers/<name>` shows one (by name, else by id) with its
//! prompt as markdown and its five latest firings, in the reference's
//! shapes.

use serde_json::{json, Map, Value};

use super::prompt;
use super::schedule::iso;
use super::store::TriggerRow;
use super::{TriggerError, Triggers};

/// Firings `read ~/triggers/<name>` shows.
const RECENT_FIRINGS: u64 = 5;

/// One line saying when a trigger fires.
pub fn when(source: &Value) -> String {
    let text = |key: &str| source[key].as_str().unwrap_or_default().to_owned();
    match source["type"].as_str().unwrap_or_default() {
        "schedule" => {
            let schedule = &source["schedule"];
            match schedule["kind"].as_str().unwrap_or_default() {
                "interval" => format!(
                    "every {} {}",
                    schedule["every"],
                    schedule["unit"].as_str().unwrap_or_default()
                ),
                "weekly" => {
                    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
                    let days: Vec<String> = schedule["daysOfWeek"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .map(|d| match d.as_u64().and_then(|d| DAYS.get(d as usize)) {
                            Some(day) => (*day).to_owned(),
                            None => d.to_string(),
                        })
                        .collect();
                    format!(
                        "weekly on {} at {} ({})",
                        days.join(", "),
                        schedule["timeOfDay"].as_str().unwrap_or_default(),
                        schedule["timezone"].as_str().unwrap_or_default()
                    )
                }
                _ => format!("once at {}", iso(schedule["runAt"].as_i64().unwrap_or(0))),
            }
        }
        "document-comment" => format!("new comments on {}", text("resource")),
        "user-mention" => {
            let accounts: Vec<&str> = source["mentionedAccounts"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            format!("mentions of {}", accounts.join(", "))
        }
        "site-update" => format!("activity under {}", text("resourcePrefix")),
        "run-completed" => {
            let mut out = "when a run finishes".to_owned();
            if let Some(status) = source["status"].as_str() {
                out.push_str(&format!(" ({status})"));
            }
            if let Some(title) = source["titleMatch"].as_str() {
                out.push_str(&format!(" titled ~\"{title}\""));
            }
            out
        }
        _ => "unknown source".to_owned(),
    }
}

fn entry(row: &TriggerRow) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), json!(row.name));
    out.insert("id".into(), json!(row.trigger_id));
    out.insert(
        "status".into(),
        json!(if row.enabled { "active" } else { "disabled" }),
    );
    out.insert("type".into(), json!(row.source_type()));
    out.insert("when".into(), json!(when(&row.source)));
    last(row, &mut out);
    Value::Object(out)
}

/// The last firing and error, when there are.
fn last(row: &TriggerRow, out: &mut Map<String, Value>) {
    if let Some(at) = row.last_fired_at_ms {
        out.insert("lastFiredAt".into(), json!(at));
    }
    if let Some(e) = &row.last_error {
        out.insert("lastError".into(), json!(e));
    }
}

fn listing(rows: &[TriggerRow]) -> Value {
    let n = rows.len();
    json!({
        "summary": format!(
            "{n} trigger{}. Read ~/triggers/<name> for one; they are created and edited in the automations tab (CreateAgentTrigger, UpdateAgentTrigger).",
            if n == 1 { "" } else { "s" }
        ),
        "triggers": rows.iter().map(entry).collect::<Vec<_>>(),
    })
}

impl Triggers {
    /// `read ~/triggers/`: the agent's triggers, the latest edited first.
    pub async fn read_listing(&self, agent_id: &str) -> Result<Value, TriggerError> {
        Ok(listing(&self.list(agent_id).await?))
    }

    /// `read ~/triggers/<name>`: one trigger by name (else by id) with its
    /// latest firings; several of that name is an `Invalid` naming their ids.
    pub async fn read_one(&self, agent_id: &str, name: &str) -> Result<Value, TriggerError> {
        let rows = self.list(agent_id).await?;
        let mut named: Vec<&TriggerRow> = rows.iter().filter(|r| r.name == name).collect();
        if named.is_empty() {
            named = rows.iter().filter(|r| r.trigger_id == name).collect();
        }
        let row = match named.as_slice() {
            [] => {
                let mut out = listing(&rows);
                out["summary"] = json!(format!("No trigger named {name}."));
                return Ok(out);
            }
            [row] => *row,
            several => {
                let ids: Vec<String> = several
                    .iter()
                    .map(|r| format!("~/triggers/{}", r.trigger_id))
                    .collect();
                return Err(TriggerError::Invalid(format!(
                    "{} triggers are named \"{name}\" — read one by id instead: {}",
                    several.len(),
                    ids.join(", ")
                )));
            }
        };
        let firings = self
            .store()
            .recent_firings(&row.trigger_id, RECENT_FIRINGS)
            .await?;
        let mut out = Map::new();
        out.insert(
            "summary".into(),
            json!(format!(
                "Trigger \"{}\" is {}: {}.",
                row.name,
                if row.enabled { "active" } else { "disabled" },
                when(&row.source)
            )),
        );
        out.insert("id".into(), json!(row.trigger_id));
        out.insert("name".into(), json!(row.name));
        out.insert("enabled".into(), json!(row.enabled));
        out.insert("source".into(), row.source.clone());
        out.insert(
            "prompt".into(),
            json!(prompt::to_markdown(&prompt::from_stored(&row.prompt))),
        );
        if let Some(c) = &row.continuation {
            out.insert("continuation".into(), c.clone());
        }
        out.insert("createdAt".into(), json!(row.created_at_ms));
        out.insert("updatedAt".into(), json!(row.updated_at_ms));
        last(row, &mut out);
        let recent: Vec<Value> = firings
            .iter()
            .map(|f| {
                let mut firing = Map::new();
                firing.insert("firingId".into(), json!(f.firing_id));
                if let Some(session) = &f.session_id {
                    firing.insert("sessionId".into(), json!(session));
                    firing.insert("thread".into(), json!(format!("thread:{session}")));
                }
                firing.insert("status".into(), json!(f.status));
                if let Some(e) = &f.error {
                    firing.insert("error".into(), json!(e));
                }
                firing.insert("firedAt".into(), json!(f.created_at_ms));
                Value::Object(firing)
            })
            .collect();
        out.insert("recentFirings".into(), Value::Array(recent));
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_read_as_one_line() {
        let weekly = json!({"type": "schedule", "schedule": {"kind": "weekly",
            "daysOfWeek": [1, 3], "timeOfDay": "09:30", "timezone": "Europe/Berlin"}});
        assert_eq!(when(&weekly), "weekly on Mon, Wed at 09:30 (Europe/Berlin)");
        let every = json!({"type": "schedule", "schedule": {"kind": "interval", "every": 5, "unit": "hours"}});
        assert_eq!(when(&every), "every 5 hours");
        let once = json!({"type": "schedule", "schedule": {"kind": "once", "runAt": 0}});
        assert_eq!(when(&once), "once at 1970-01-01T00:00:00.000Z");
        let done = json!({"type": "run-completed", "status": "failed", "titleMatch": "crawl"});
        assert_eq!(
            when(&done),
            "when a run finishes (failed) titled ~\"crawl\""
        );
        let mention = json!({"type": "user-mention", "mentionedAccounts": ["z1", "z2"]});
        assert_eq!(when(&mention), "mentions of z1, z2");
    }
}
