//! Sessions named after their first turn, as the reference names them. A
//! session's title has a source: `none` while nobody named it (a client's
//! provisional title counts as none), `agent` once the agent or this module
//! named it, `user` once a user did. When a turn of a Seed session whose
//! title is still nobody's is queued or runs, one short call to the agent's
//! own model, with no tools, reads the start of the conversation and
//! answers a title and a description; the title is stored only while the
//! source is still `none` (never over a user's or the agent's), the
//! description only where there is none, and a session change follows
//! (`Sessions::announce_renamed`). A registry adapter runs its own model, so
//! its sessions are named after the first thing the user wrote. Each session
//! gets at most [`MAX_ATTEMPTS`] model calls per process, and at most
//! [`MAX_CALLS`] run at once (each answer bounded to 64 KiB); delegated children
//! keep the title their parent's brief gave them; `builtin.sessionTitles`
//! turns it all off.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use agentos_protocol::agent_ext::block_text;
use agentos_protocol::host::{EventKind, StoredEvent};
use serde_json::Value;
use tokio::sync::broadcast;

use super::host::Host;
use crate::control::Control;
use crate::runs::{RunEvent, RunKind};
use crate::sessions::{SessionStore, Sessions};

/// Model calls one session gets for its title, per process.
pub const MAX_ATTEMPTS: u32 = 3;
/// Title calls under way at once, in all; a session that finds none free
/// is named at one of its next turn's changes.
pub const MAX_CALLS: usize = 4;
/// Events read for the digest the model is shown, at most.
const DIGEST_EVENTS: u64 = 12;
/// Bytes of the digest, at most; a user's message gives at most 1,200 of
/// them, the agent's 600.
const DIGEST_BYTES: usize = 4000;
const USER_BYTES: usize = 1200;
const AGENT_BYTES: usize = 600;
/// A title is at most this many characters, and one taken from the user's
/// words at most [`TITLE_WORDS`] words.
const TITLE_CHARS: usize = 80;
const TITLE_WORDS: usize = 8;
/// A generated description's characters, at most.
const DESCRIPTION_CHARS: usize = 400;
/// Sessions whose attempts are remembered; past it the count starts over.
const REMEMBERED: usize = 16_384;

/// What the model is asked.
pub const TITLE_INSTRUCTIONS: &str = "You name conversations for a list of sessions. \
Answer with two lines only. First line: a short title, eight words at most, saying what \
this conversation is for; no quotes and no full stop at the end. Second line: one or two \
plain sentences on what the conversation is about and what is being done. Add nothing else.";

#[derive(Default)]
struct State {
    /// Sessions being named now.
    naming: HashSet<String>,
    /// Model calls made for each session's title.
    attempts: HashMap<String, u32>,
    /// Sessions found named (by anyone): not looked at again.
    named: HashSet<String>,
}

/// Names sessions; one per VM.
pub struct Titles {
    host: Arc<Host>,
    control: Control,
    sessions: Sessions,
    store: SessionStore,
    state: Mutex<State>,
    calls: Arc<tokio::sync::Semaphore>,
}

fn clip(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The start of a conversation as the model is shown it: `User: …` and
/// `Assistant: …` paragraphs, ambient context left out.
pub fn digest(events: &[StoredEvent]) -> String {
    let mut lines = Vec::new();
    for event in events {
        if event.kind != EventKind::SessionUpdate {
            continue;
        }
        let Ok(update) = serde_json::from_str::<Value>(&event.payload_json) else {
            continue;
        };
        let content = &update["content"];
        if content.pointer("/_meta/seed/kind").and_then(Value::as_str) == Some("context") {
            continue;
        }
        match update["sessionUpdate"].as_str() {
            Some("user_message_chunk") => {
                // The words as sent, without the context the model reads.
                let words = content
                    .pointer("/_meta/seed/text")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if let Some(text) = words.or_else(|| block_text(content)) {
                    lines.push(format!("User: {}", clip(&text, USER_BYTES)));
                }
            }
            Some("agent_message_chunk") => {
                if let Some(text) = content["text"].as_str().filter(|t| !t.is_empty()) {
                    lines.push(format!("Assistant: {}", clip(text, AGENT_BYTES)));
                }
            }
            _ => {}
        }
    }
    clip(&lines.join("\n\n"), DIGEST_BYTES).to_owned()
}

/// A line cleaned of a label, quotes and a trailing full stop.
fn cleaned(line: &str, label: &str) -> String {
    let mut line = line.trim();
    if line.len() > label.len()
        && line.is_char_boundary(label.len())
        && line[..label.len()].eq_ignore_ascii_case(label)
    {
        line = line[label.len()..].trim_start();
        line = line.strip_prefix(':').unwrap_or(line).trim_start();
    }
    let quotes: &[char] = &[
        '"', '\'', '\u{201c}', '\u{201d}', '\u{2018}', '\u{2019}', '*',
    ];
    line.trim_matches(quotes)
        .trim_end_matches('.')
        .trim()
        .to_owned()
}

fn chars(text: &str, max: usize) -> String {
    text.chars().take(max).collect::<String>().trim().to_owned()
}

/// The model's answer as a title and, when it gave one, a description.
pub fn parse_answer(answer: &str) -> Option<(String, Option<String>)> {
    let mut lines = answer.lines().map(str::trim).filter(|l| !l.is_empty());
    let title = chars(&cleaned(lines.next()?, "title"), TITLE_CHARS);
    if title.is_empty() {
        return None;
    }
    let rest: Vec<&str> = lines.collect();
    let description = chars(&cleaned(&rest.join(" "), "description"), DESCRIPTION_CHARS);
    Some((title, (!description.is_empty()).then_some(description)))
}

/// A title from the user's first words: the first line, at most
/// [`TITLE_WORDS`] words.
pub fn title_from_words(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let words: Vec<&str> = line.split_whitespace().take(TITLE_WORDS).collect();
    let title = chars(&words.join(" "), TITLE_CHARS);
    (!title.is_empty()).then_some(title)
}

impl Titles {
    pub fn new(
        host: Arc<Host>,
        control: Control,
        sessions: Sessions,
        store: SessionStore,
    ) -> Arc<Titles> {
        Arc::new(Titles {
            host,
            control,
            sessions,
            store,
            state: Mutex::default(),
            calls: Arc::new(tokio::sync::Semaphore::new(MAX_CALLS)),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Names sessions as their turns start running, until the runs end.
    pub fn spawn(self: &Arc<Self>, mut runs: broadcast::Receiver<RunEvent>) {
        let titles = self.clone();
        tokio::spawn(async move {
            loop {
                match runs.recv().await {
                    // Queued, claimed or running: the user's words are in
                    // the log from the moment the turn is queued. Only an
                    // agent's sessions are named (the host door's own keep
                    // what they were opened with).
                    Ok(RunEvent::Changed(run))
                        if run.kind == RunKind::Agent
                            && run.agent_id.is_some()
                            && !run.status.is_terminal() =>
                    {
                        if let Some(session_id) = run.session_id.clone() {
                            titles.ensure(session_id);
                        }
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }

    /// Names the session in the background unless it is being named or
    /// had its attempts.
    fn ensure(self: &Arc<Self>, session_id: String) {
        {
            let mut state = self.state();
            if state.naming.contains(&session_id)
                || state.named.contains(&session_id)
                || state.attempts.get(&session_id).copied().unwrap_or(0) >= MAX_ATTEMPTS
            {
                return;
            }
            state.naming.insert(session_id.clone());
        }
        let titles = self.clone();
        tokio::spawn(async move {
            let named = titles.name(&session_id).await;
            let mut state = titles.state();
            state.naming.remove(&session_id);
            match named {
                Ok(Named::Yes) => {
                    state.attempts.remove(&session_id);
                    remember(&mut state.named, session_id);
                }
                Ok(Named::Already) => remember(&mut state.named, session_id),
                Ok(Named::NotYet) => {}
                Err(e) => {
                    tracing::warn!(session = %session_id, error = %e, "naming a session failed");
                }
            }
        });
    }

    /// Counts a model call for the session's title.
    fn attempt(&self, session_id: &str) {
        let mut state = self.state();
        if state.attempts.len() >= REMEMBERED {
            state.attempts.clear();
        }
        *state.attempts.entry(session_id.to_owned()).or_default() += 1;
    }

    /// Names the session if nobody has.
    async fn name(&self, session_id: &str) -> Result<Named, String> {
        let source = self
            .store
            .title_source(session_id)
            .await
            .map_err(|e| e.to_string())?;
        if source.as_deref() != Some("none") {
            return Ok(Named::Already);
        }
        // The host door's own sessions keep what they were opened with; a
        // delegated child keeps the title its parent's brief gave it.
        let link = match self.control.session_agent(session_id).await {
            Ok(Some(link)) if link.parent_session_id.is_none() => link,
            Ok(_) => return Ok(Named::Already),
            Err(e) => return Err(e.to_string()),
        };
        let page = self
            .store
            .history(session_id, None, Some(0), DIGEST_EVENTS)
            .await
            .map_err(|e| e.to_string())?;
        let digest = digest(&page.events);
        if digest.is_empty() {
            return Ok(Named::NotYet);
        }
        let resolved = self
            .host
            .resolve_agent(&link.agent_id)
            .await
            .map_err(|e| e.message)?;
        let builtin = resolved
            .definition
            .adapter
            .as_deref()
            .is_none_or(|a| a == crate::config::BUILTIN_AGENT);
        let (title, description) = if builtin {
            let Ok(_call) = self.calls.clone().try_acquire_owned() else {
                return Ok(Named::NotYet);
            };
            self.attempt(session_id);
            let answer = self
                .host
                .ask_for_title(&resolved, TITLE_INSTRUCTIONS, &digest)
                .await?;
            parse_answer(&answer).ok_or("the model answered no title")?
        } else {
            let first = digest
                .split("\n\n")
                .find_map(|p| p.strip_prefix("User: "))
                .unwrap_or_default();
            match title_from_words(first) {
                Some(title) => (title, None),
                None => return Ok(Named::NotYet),
            }
        };
        let now = crate::sessions::store::clock_ms();
        let named = self
            .store
            .set_generated_title(session_id, &title, description.as_deref(), now)
            .await
            .map_err(|e| e.to_string())?;
        if !named {
            return Ok(Named::Already);
        }
        self.sessions.announce_renamed(session_id);
        Ok(Named::Yes)
    }
}

/// What naming a session came to.
enum Named {
    /// It is named now.
    Yes,
    /// Somebody named it, or it is not to be named.
    Already,
    /// Nothing to name it after yet.
    NotYet,
}

fn remember(named: &mut HashSet<String>, session_id: String) {
    if named.len() >= REMEMBERED {
        named.clear();
    }
    named.insert(session_id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_gives_a_title_and_a_description() {
        assert_eq!(
            parse_answer("Title: \"Plan the Lisbon trip.\"\nDescription: Dates and hotels.\n"),
            Some((
                "Plan the Lisbon trip".into(),
                Some("Dates and hotels".into())
            ))
        );
        assert_eq!(
            parse_answer("\n  Fix the build  \n"),
            Some(("Fix the build".into(), None))
        );
        assert_eq!(parse_answer("\n\n"), None);
        assert_eq!(parse_answer("\"\"\nonly a description"), None);
        let long = parse_answer(&"word ".repeat(100)).expect("a title");
        assert!(long.0.chars().count() <= TITLE_CHARS);
    }

    #[test]
    fn words_make_a_title_of_at_most_eight_words() {
        assert_eq!(
            title_from_words(
                "\nplease summarise the attached quarterly report for the board today\nthanks"
            ),
            Some("please summarise the attached quarterly report for the".into())
        );
        assert_eq!(title_from_words("  \n "), None);
    }

    #[test]
    fn the_digest_shows_the_words_not_the_context() {
        let event = |seq: u64, payload: Value| StoredEvent {
            session_id: "s".into(),
            sequence: seq,
            timestamp_ms: 1,
            kind: EventKind::SessionUpdate,
            correlation_id: None,
            outcome_status: None,
            terminal_reason: None,
            actor: agentos_protocol::host::Actor::Agent,
            payload_json: payload.to_string(),
        };
        let events = vec![
            event(
                1,
                serde_json::json!({"sessionUpdate": "user_message_chunk",
                    "content": {"type": "text", "text": "viewing hm://x", "_meta": {"seed": {"kind": "context"}}}}),
            ),
            event(
                2,
                serde_json::json!({"sessionUpdate": "user_message_chunk",
                    "content": {"type": "text", "text": "Book a table"}}),
            ),
            event(
                3,
                serde_json::json!({"sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "For how many?"}}),
            ),
            event(
                4,
                serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "read"}),
            ),
        ];
        assert_eq!(
            digest(&events),
            "User: Book a table\n\nAssistant: For how many?"
        );
    }
}
