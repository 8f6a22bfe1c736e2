//! The checks through the restarted sidecar's host protocol: every event
//! seen before the kill is still there and identical, answers equal the
//! terminal commits, interrupted prompts are `prompt_delivery_uncertain`
//! (also on retry), completed turns have all their events, and no prompt
//! reached an adapter twice.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use agentos_client::ctl::HostClient;
use serde_json::{json, Value};

use super::checks::{prompt_rows, row_key, stored_answer, stored_events, PromptRow};
use super::drive::{call, data_code, CallError, Outcome, Record, SentPrompt};
use super::trial::Trial;
use super::{Summary, MARKER};

impl Trial<'_> {
    /// The protocol-side checks with the restarted sidecar; returns the
    /// prompt rows for the delivery checks.
    pub(super) async fn verify_after_restart(
        &mut self,
        socket: &Path,
        record: &Record,
        summary: &mut Summary,
    ) -> Option<HashMap<String, PromptRow>> {
        let Some(conn) = self.store().await else {
            if record
                .prompts
                .iter()
                .any(|p| matches!(p.outcome, Outcome::Ok(_)))
            {
                self.violation(
                    "database_missing",
                    "answers were given but no database exists",
                );
            }
            return None;
        };
        let client = match HostClient::connect(socket).await {
            Ok((client, _notes)) => client,
            Err(e) => {
                self.violation("restart_failed", format!("cannot connect: {e}"));
                return None;
            }
        };
        if call(&client, "initialize", json!({"protocolVersion": 1}))
            .await
            .is_err()
        {
            self.violation("restart_failed", "initialize failed");
            return None;
        }
        let sessions: Vec<String> = match conn
            .prepare("SELECT session_id FROM agentos_core_sessions ORDER BY session_id")
            .and_then(|mut s| {
                s.query_map([], |r| r.get(0))?
                    .collect::<Result<Vec<String>, _>>()
            }) {
            Ok(s) => s,
            Err(e) => {
                self.violation("unreadable", e.to_string());
                return None;
            }
        };
        let mut stored: HashMap<String, BTreeMap<u64, Value>> = HashMap::new();
        for sid in &sessions {
            let rows = match stored_events(&conn, sid) {
                Ok(rows) => rows,
                Err(e) => {
                    self.violation("unreadable", e.to_string());
                    continue;
                }
            };
            // History through the protocol equals the rows.
            let mut history = BTreeMap::new();
            let mut after = rows.keys().next().map_or(0, |first| first - 1);
            loop {
                let page = call(
                    &client,
                    "sessions/history",
                    json!({"sessionId": sid, "after": after, "limit": 1000}),
                )
                .await;
                let Ok(page) = page else {
                    self.violation("history_failed", format!("{sid}: history after {after}"));
                    break;
                };
                let events = page["events"].as_array().cloned().unwrap_or_default();
                for e in &events {
                    if let Some(seq) = e["sequence"].as_u64() {
                        history.insert(seq, e.clone());
                        after = seq;
                    }
                }
                if events.is_empty() || page["hasMoreAfter"] != true {
                    break;
                }
            }
            if history != rows {
                let differing = rows
                    .iter()
                    .find(|(seq, v)| history.get(seq) != Some(v))
                    .map(|(seq, _)| *seq);
                self.violation(
                    "history_mismatch",
                    format!(
                        "{sid}: history has {} events, rows {}; first difference at {differing:?}",
                        history.len(),
                        rows.len()
                    ),
                );
            }
            stored.insert(sid.clone(), rows);
        }

        // What subscribers saw before the kill is there, unchanged.
        for (sid, seen) in &record.seen {
            let rows = stored.get(sid);
            let mut previous: Option<u64> = None;
            for params in &seen.events {
                let event = &params["event"];
                let Some(seq) = event["sequence"].as_u64() else {
                    self.violation("bad_event", format!("{sid}: event without sequence"));
                    continue;
                };
                if seen.subscription.is_some()
                    && params["subscriptionId"].as_str() != seen.subscription.as_deref()
                {
                    self.violation(
                        "bad_event",
                        format!("{sid}: event for another subscription"),
                    );
                }
                let expected_next = previous.map_or(1, |p| p + 1);
                if seq != expected_next {
                    self.violation(
                        "subscription_gap",
                        format!("{sid}: subscriber saw {seq} after {previous:?}"),
                    );
                }
                previous = Some(seq);
                match rows.and_then(|r| r.get(&seq)) {
                    None => self.violation(
                        "seen_event_lost",
                        format!(
                            "{sid}: sequence {seq} ({}) was seen but is gone",
                            event["type"]
                        ),
                    ),
                    Some(stored) if stored != event => self.violation(
                        "seen_event_changed",
                        format!("{sid}: sequence {seq}: seen {event} stored {stored}"),
                    ),
                    Some(_) => {}
                }
            }
        }

        // Prompts: answers equal commits; interruptions are uncertain.
        let rows = match prompt_rows(&conn) {
            Ok(rows) => rows,
            Err(e) => {
                self.violation("unreadable", e.to_string());
                return None;
            }
        };
        for p in &record.prompts {
            let row = rows.get(&row_key(&p.session, &p.key));
            let tag = format!("{} {} ({})", p.session, p.key, p.command);
            // Sends are sequential per session, so only the other send of
            // the same key can make a session busy: that is in progress.
            if let Outcome::Err(e) = &p.outcome {
                if data_code(e) == "session_busy" {
                    self.violation(
                        "same_key_not_in_progress",
                        format!("{tag}: a concurrent send of the same key answered {e}"),
                    );
                }
            }
            if p.duplicate {
                if let (Outcome::Ok(v), Some(r)) = (&p.outcome, row) {
                    if *v != stored_answer(r) {
                        self.violation(
                            "duplicate_answer_differs",
                            format!("{tag}: duplicate got {v}, stored {}", stored_answer(r)),
                        );
                    }
                }
                continue;
            }
            let Some(r) = row else {
                if let Outcome::Ok(v) = &p.outcome {
                    self.violation(
                        "answered_without_commit",
                        format!("{tag}: answered {v} but no prompt row exists"),
                    );
                }
                continue;
            };
            match r.state.as_str() {
                "accepted" => {
                    self.violation("accepted_after_restart", tag.clone());
                    continue;
                }
                "failed" => {
                    let code = r
                        .error
                        .as_ref()
                        .map_or("", |e| e["code"].as_str().unwrap_or(""));
                    if code == "prompt_delivery_uncertain" {
                        summary.uncertain_prompts += 1;
                        if r.error.as_ref().map(|e| &e["retryable"]) != Some(&json!(true)) {
                            self.violation("uncertain_not_retryable", tag.clone());
                        }
                    }
                    // An answer that the commit's outcome is unknown
                    // explains any stored state; the retry below must then
                    // replay what was stored.
                    let explained = matches!(&p.outcome, Outcome::Err(e)
                        if data_code(e) == code || data_code(e) == "commit_outcome_unknown");
                    if code != "prompt_delivery_uncertain" && !explained {
                        self.violation(
                            "unexpected_failure",
                            format!("{tag}: failed with {:?}", r.error),
                        );
                    }
                    if let Outcome::Ok(v) = &p.outcome {
                        self.violation(
                            "answer_differs_from_commit",
                            format!("{tag}: answered {v} but stored failed {:?}", r.error),
                        );
                    }
                }
                _ => {
                    let answer = stored_answer(r);
                    if let Outcome::Ok(v) = &p.outcome {
                        if *v != answer {
                            self.violation(
                                "answer_differs_from_commit",
                                format!("{tag}: answered {v}, stored {answer}"),
                            );
                        }
                    }
                    if let Outcome::Err(e) = &p.outcome {
                        // `prompt_in_progress` honestly names a concurrent
                        // send of the same key that went first.
                        if r.state == "completed"
                            && data_code(e) != "prompt_in_progress"
                            && data_code(e) != "commit_outcome_unknown"
                        {
                            self.violation(
                                "answer_differs_from_commit",
                                format!("{tag}: answered error {e}, stored completed {answer}"),
                            );
                        }
                    }
                    if let Some(events) = stored.get(&p.session) {
                        self.check_turn_events(&tag, p, r, events);
                    }
                }
            }
            // The retry replays the stored outcome and delivers nothing.
            let params =
                json!({"sessionId": p.session, "content": p.content, "idempotencyKey": p.key});
            let retry = call(&client, "sessions/prompt", params).await;
            summary.retries_checked += 1;
            match (r.state.as_str(), retry) {
                ("failed", Err(CallError::Rpc(e))) => {
                    let code = r
                        .error
                        .as_ref()
                        .map_or("", |e| e["code"].as_str().unwrap_or(""));
                    if data_code(&e) != code
                        || (code == "prompt_delivery_uncertain" && e["data"]["retryable"] != true)
                    {
                        self.violation(
                            "retry_mismatch",
                            format!("{tag}: stored failure {code}, retry answered {e}"),
                        );
                    }
                }
                ("completed" | "cancelled", Ok(v)) if v == stored_answer(r) => {}
                (state, Ok(v)) => self.violation(
                    "retry_mismatch",
                    format!("{tag}: stored {state}, retry answered {v}"),
                ),
                (state, Err(CallError::Rpc(e))) => self.violation(
                    "retry_mismatch",
                    format!("{tag}: stored {state}, retry failed {e}"),
                ),
                (_, Err(CallError::Closed)) => {
                    self.violation("restart_failed", format!("{tag}: no answer to the retry"))
                }
            }
        }
        Some(rows)
    }

    /// A completed turn's events are all there: its input, and for a
    /// finished stream every chunk in order.
    pub(super) fn check_turn_events(
        &mut self,
        tag: &str,
        p: &SentPrompt,
        r: &PromptRow,
        events: &BTreeMap<u64, Value>,
    ) {
        let (Some(first), Some(last)) = (r.first_input, r.last_output) else {
            self.violation(
                "completed_without_events",
                format!("{tag}: {} without input/output sequences", r.state),
            );
            return;
        };
        let turn: Vec<&Value> = events.range(first..=last).map(|(_, v)| v).collect();
        if turn.len() as u64 != last + 1 - first {
            self.violation(
                "completed_without_events",
                format!("{tag}: sequences {first}..={last} are not all stored"),
            );
            return;
        }
        let marker = format!("{MARKER}{}", p.marker);
        if !turn
            .iter()
            .any(|e| e["type"] == "user_message_chunk" && e["content"]["text"] == marker.as_str())
        {
            self.violation(
                "completed_without_events",
                format!("{tag}: its input is not among sequences {first}..={last}"),
            );
        }
        let ended = r
            .result
            .as_ref()
            .is_some_and(|v| v["stopReason"] == "end_turn");
        if let Some(n) = p.command.strip_prefix("stream ") {
            let n: u64 = n.parse().unwrap_or(0);
            if ended {
                let text: String = turn
                    .iter()
                    .filter(|e| e["type"] == "agent_message_chunk")
                    .filter_map(|e| e["content"]["text"].as_str())
                    .collect();
                let expected: String = (0..n).map(|i| format!("c{i} ")).collect();
                if text != expected {
                    self.violation(
                        "completed_output_mismatch",
                        format!("{tag}: stored text {text:?}, streamed {expected:?}"),
                    );
                }
            }
        }
        if p.command == "tools" && ended {
            let done = turn
                .iter()
                .any(|e| e["type"] == "tool_call_update" && e["status"] == "completed");
            if !done {
                self.violation(
                    "completed_output_mismatch",
                    format!("{tag}: completed tools turn without its completed tool call"),
                );
            }
        }
    }
}
