//! The journal as the engine reads and writes it: content keys, entry
//! shapes, the replay index (each effect of a rerun takes the oldest
//! not-yet-consumed group with its key) and the run's entry and byte caps.
//!
//! A group is the entries of one effect: the same `callSeq` and the same key
//! (a step's two phases share a group, so its key is compared without the
//! phase). A rerun that resumes a group writes its missing entries under the
//! group's `callSeq`, so the group stays whole for the next rerun.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::{json, Map, Value};

use super::{EffectError, JournalEntry, ScriptError};

/// JSON with object keys sorted at every level, so a key computed from the
/// same value always reads the same whatever order the script built it in.
pub(crate) fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

pub(crate) fn tool_key(tool: &str, input: &Value) -> String {
    format!("tool|{tool}|{}", canonical(input))
}

pub(crate) fn agent_key(spec: &Value) -> String {
    format!("agent|{}", canonical(spec))
}

pub(crate) fn sleep_key(ms: u64) -> String {
    format!("sleep|{ms}")
}

pub(crate) fn wait_key(match_: &Value) -> String {
    format!("wait|{}", canonical(match_))
}

pub(crate) const NOW_KEY: &str = "now";
pub(crate) const CONTINUE_KEY: &str = "continueAsNew";

/// A step's group key; its entries' keys add `|start` or `|end`.
pub(crate) fn step_key(label: &str) -> String {
    format!("step|{label}")
}

pub(crate) fn plan_key(plan: &Value) -> String {
    format!("plan|{}", canonical(plan))
}

/// Builds one entry: `kind`, `callSeq`, `key`, then the kind's own fields.
pub(crate) fn entry(kind: &str, call_seq: u64, key: &str, fields: Value) -> Value {
    let mut map = Map::new();
    map.insert("kind".into(), Value::from(kind));
    map.insert("callSeq".into(), Value::from(call_seq));
    map.insert("key".into(), Value::from(key));
    if let Value::Object(fields) = fields {
        map.extend(fields);
    }
    Value::Object(map)
}

pub(crate) fn result_entry(call_seq: u64, key: &str, result: &Result<Value, EffectError>) -> Value {
    match result {
        Ok(value) => entry("result", call_seq, key, json!({"ok": true, "value": value})),
        Err(e) => entry(
            "result",
            call_seq,
            key,
            json!({"error": {"code": e.code, "message": e.message}}),
        ),
    }
}

/// What a `result` entry delivers.
pub(crate) fn result_of(entry: &Value) -> Result<Value, EffectError> {
    match entry.get("error") {
        Some(error) => Err(EffectError::new(
            error
                .get("code")
                .and_then(Value::as_str)
                .unwrap_or("effect_failed"),
            error.get("message").and_then(Value::as_str).unwrap_or(""),
        )),
        None => Ok(entry.get("value").cloned().unwrap_or(Value::Null)),
    }
}

/// The entries of one effect from an earlier execution.
#[derive(Debug)]
pub(crate) struct Group {
    pub call_seq: u64,
    pub entries: Vec<Value>,
}

impl Group {
    /// The first entry of `kind`.
    pub fn find(&self, kind: &str) -> Option<&Value> {
        self.entries
            .iter()
            .find(|e| e.get("kind").and_then(Value::as_str) == Some(kind))
    }

    /// The first `step` entry of `phase`.
    pub fn step_phase(&self, phase: &str) -> Option<&Value> {
        self.entries.iter().find(|e| {
            e.get("kind").and_then(Value::as_str) == Some("step")
                && e.get("phase").and_then(Value::as_str) == Some(phase)
        })
    }
}

/// The journal of earlier executions, indexed for a rerun.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    /// Per group key, the groups not yet consumed, oldest first.
    by_key: HashMap<String, VecDeque<Group>>,
    /// `event` entries by `waitId`; the store writes them without `callSeq`
    /// or key, so a wait finds its event by id. The first one wins.
    events: HashMap<String, Value>,
}

impl Replay {
    pub fn new(journal: &[JournalEntry]) -> Replay {
        let mut replay = Replay::default();
        // Where each (callSeq, group key) group sits in its key's queue.
        let mut slots: HashMap<(u64, String), usize> = HashMap::new();
        for stored in journal {
            let e = &stored.entry;
            let kind = e.get("kind").and_then(Value::as_str).unwrap_or("");
            if kind == "event" {
                if let Some(wait_id) = e.get("waitId").and_then(Value::as_str) {
                    replay
                        .events
                        .entry(wait_id.to_owned())
                        .or_insert_with(|| e.clone());
                }
                continue;
            }
            let (Some(call_seq), Some(key)) = (
                e.get("callSeq").and_then(Value::as_u64),
                e.get("key").and_then(Value::as_str),
            ) else {
                continue;
            };
            let group_key = if kind == "step" {
                key.strip_suffix("|start")
                    .or_else(|| key.strip_suffix("|end"))
                    .unwrap_or(key)
                    .to_owned()
            } else {
                key.to_owned()
            };
            let queue = replay.by_key.entry(group_key.clone()).or_default();
            match slots.get(&(call_seq, group_key.clone())) {
                Some(&i) => queue[i].entries.push(e.clone()),
                None => {
                    slots.insert((call_seq, group_key), queue.len());
                    queue.push_back(Group {
                        call_seq,
                        entries: vec![e.clone()],
                    });
                }
            }
        }
        replay
    }

    /// Consumes the oldest group with this key.
    pub fn take(&mut self, group_key: &str) -> Option<Group> {
        let queue = self.by_key.get_mut(group_key)?;
        let group = queue.pop_front();
        if queue.is_empty() {
            self.by_key.remove(group_key);
        }
        group
    }

    pub fn event(&self, wait_id: &str) -> Option<&Value> {
        self.events.get(wait_id)
    }

    /// Groups no effect of this execution asked for (the script changed
    /// course, or it ended before reaching them).
    pub fn unconsumed(&self) -> usize {
        self.by_key.values().map(VecDeque::len).sum()
    }
}

/// The run's journal size so far, against its caps. Shared by every effect
/// task of the run, so concurrent appends cannot both slip under a cap.
#[derive(Debug)]
pub(crate) struct Budget {
    inner: Mutex<Used>,
    max_entries: usize,
    max_bytes: usize,
}

#[derive(Debug)]
struct Used {
    entries: usize,
    bytes: usize,
}

impl Budget {
    pub fn new(journal: &[JournalEntry], max_entries: usize, max_bytes: usize) -> Budget {
        let bytes = journal.iter().map(|e| e.entry.to_string().len()).sum();
        Budget {
            inner: Mutex::new(Used {
                entries: journal.len(),
                bytes,
            }),
            max_entries,
            max_bytes,
        }
    }

    /// Reserves room for `entries`, or fails the run.
    pub fn reserve(&self, entries: &[Value]) -> Result<(), ScriptError> {
        let bytes: usize = entries.iter().map(|e| e.to_string().len()).sum();
        let mut used = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if used.entries + entries.len() > self.max_entries {
            return Err(ScriptError::JournalCap {
                setting: "max_journal_entries",
                limit: self.max_entries as u64,
            });
        }
        if used.bytes + bytes > self.max_bytes {
            return Err(ScriptError::JournalCap {
                setting: "max_journal_bytes",
                limit: self.max_bytes as u64,
            });
        }
        used.entries += entries.len();
        used.bytes += bytes;
        Ok(())
    }
}
