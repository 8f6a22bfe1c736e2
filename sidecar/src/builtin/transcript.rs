//! The builtin agent's conversation, rebuilt from the session's durable
//! events at every turn: the log is the only memory of a thread, so a
//! restarted agent, a user's own verbs and another writer's messages are
//! all seen the same way. What the events before a turn's floor make of
//! it is kept between turns (`conversations.rs`), so a turn parses only
//! what was logged since the last one.
//!
//! The user's words become user messages, except those of the running
//! prompt and of prompts queued behind it (from the turn's input floor on;
//! the prompt itself reaches the agent in `session/prompt`). The agent's
//! text becomes assistant messages; its tool calls and their results pair
//! up by id, each result cut to what the model may receive; a call left
//! without a result (a turn that ended mid-call) gets one saying so, because
//! providers refuse a call with no answer. A verb the user ran
//! (`InvokeSessionTool`) is a user message framed as `<user_action>` and
//! `<user_action_result>`, with that framing escaped inside. Failures and
//! reasoning are not replayed.
//!
//! The agent's events from the input floor on are, for a queued prompt, the
//! answer to the prompt that was still running when it was queued (kept),
//! and for a retry (the route says which) the failed attempt at this very
//! prompt (left out, so a retried prompt starts over from the user's words,
//! which the agent appends last: a replay would put the agent's work before
//! the request that asked for it). The log keeps them either way. A
//! window cut by the byte budget starts at its first user message, since
//! providers refuse a conversation that does not start with the user.

use agentos_protocol::agent_ext::{
    block_text, cut_with_notice, output_text, sender_prefixed, value_bytes, HeldTranscript,
    TranscriptBasis, TranscriptItem, ERROR_UPDATE, MODEL_RESULT_BYTES, SIGNATURE_META,
};
use agentos_protocol::host::{Actor, EventKind, StoredEvent};
use serde_json::Value;

use super::conversations::{Conversation, Conversations};
use crate::sessions::{SessionError, SessionStore};

/// Event bytes read for one transcript, newest first; older events are
/// left out.
pub const TRANSCRIPT_BYTES: usize = 4 * 1024 * 1024;
const PAGE: u64 = 512;

/// The result given to a call the log holds no result for.
pub const INTERRUPTED: &str = "the call was interrupted before it returned a result";

/// [`rebuild_at`], reading where the session's log starts itself.
#[cfg(test)]
pub async fn rebuild(
    store: &SessionStore,
    kept: &Conversations,
    session_id: &str,
    floor: Floor,
    held: Option<&HeldTranscript>,
) -> Result<Transcript, SessionError> {
    let oldest = store
        .floor_and_metadata(session_id)
        .await?
        .map(|(oldest, _)| oldest);
    rebuild_at(store, kept, session_id, floor, held, oldest).await
}

/// The session's conversation for a turn at `floor`, as the agent is sent
/// it (after the items `held` says it keeps, when they still stand), given
/// its oldest retained event as the caller read it (`None`: there is no
/// such session). What was kept from the session's last turn
/// (`Conversations`) is reused when it still holds (nothing pruned since,
/// its last event unchanged, nothing absorbed from the floor on), and only
/// the events logged since are read; otherwise the newest events within
/// [`TRANSCRIPT_BYTES`] are read and, when that is the whole log, kept.
pub async fn rebuild_at(
    store: &SessionStore,
    kept: &Conversations,
    session_id: &str,
    mut floor: Floor,
    held: Option<&HeldTranscript>,
    oldest: Option<u64>,
) -> Result<Transcript, SessionError> {
    if let (true, Some(at)) = (floor.retry, floor.at) {
        let before = store.output_before(session_id, at).await?;
        floor.attempt_from = Some(before.map_or(at, |last| at.max(last.saturating_add(1))));
    }
    let Some(oldest) = oldest else {
        return Ok(Transcript::whole(Builder::default()));
    };
    let reusable = kept.take(session_id).filter(|conversation| {
        conversation.oldest == oldest && floor.at.is_none_or(|at| conversation.through < at)
    });
    let continued = match reusable {
        Some(conversation) => continued(store, session_id, conversation).await?,
        None => None,
    };
    let (mut conversation, events) = match continued {
        Some((conversation, events)) => {
            let bytes = events.iter().map(|e| e.payload_json.len()).sum::<usize>();
            if conversation.bytes.saturating_add(bytes) > TRANSCRIPT_BYTES {
                // The window moves from here on: nothing is kept.
                let events = read_window(store, session_id).await?.0;
                return Ok(Transcript::whole(built(&events, floor)));
            }
            (conversation, events)
        }
        None => {
            let (events, whole) = read_window(store, session_id).await?;
            if !whole {
                return Ok(Transcript::whole(built(&events, floor)));
            }
            (Conversation::new(oldest), events)
        }
    };
    // What comes before the floor reads the same at every later turn.
    let split = floor.at.map_or(events.len(), |at| {
        events.partition_point(|event| event.sequence < at)
    });
    for event in &events[..split] {
        conversation.absorb(event);
    }
    let stable = conversation.stable();
    let keep = held
        .filter(|held| held.id == conversation.id && held.items <= stable)
        .map_or(0, |held| held.items);
    // The turn's conversation goes on from the kept one without copying
    // the part the agent holds, which no later event changes.
    let mut builder = conversation.builder.fork(keep as usize);
    for event in &events[split..] {
        builder.absorb(event, floor);
    }
    let promoted = builder.promoted();
    let items = builder.finish();
    // Who sent the words at the floor, when this read reached them.
    let floor_actor = floor.at.and_then(|at| {
        events[split..]
            .iter()
            .find(|event| event.sequence == at)
            .map(|event| event.actor.clone())
    });
    let basis = TranscriptBasis {
        id: conversation.id.clone(),
        keep,
        stable,
    };
    kept.keep(session_id, conversation);
    Ok(Transcript {
        items,
        basis: Some(basis),
        floor_actor,
        promoted,
    })
}

/// A turn's conversation as the agent is sent it: the items after those it
/// keeps (`basis.keep`; all of them when the conversation is not kept).
#[derive(Debug)]
pub struct Transcript {
    pub items: Vec<TranscriptItem>,
    pub basis: Option<TranscriptBasis>,
    /// The actor of the event at the floor, when it was among the events
    /// read (otherwise the caller reads it, if it needs it).
    pub floor_actor: Option<Actor>,
    /// The callables the whole conversation has expanded, the most recent
    /// first (see [`Builder::promoted`]).
    pub promoted: Vec<String>,
}

impl Transcript {
    fn whole(builder: Builder) -> Transcript {
        Transcript {
            promoted: builder.promoted(),
            items: builder.finish(),
            basis: None,
            floor_actor: None,
        }
    }

    /// What the agent is sent, and how it stands to what it holds.
    pub fn for_agent(self) -> (Vec<TranscriptItem>, Option<TranscriptBasis>) {
        (self.items, self.basis)
    }
}

/// The events logged after what `conversation` absorbed, if the log still
/// holds the last event it absorbed as it was (a session deleted and
/// opened again under its id holds another).
async fn continued(
    store: &SessionStore,
    session_id: &str,
    conversation: Conversation,
) -> Result<Option<(Conversation, Vec<StoredEvent>)>, SessionError> {
    let Some(last) = conversation.last else {
        let events = read_after(store, session_id, 0).await?;
        return Ok(Some((conversation, events)));
    };
    let mut events = read_after(store, session_id, conversation.through.saturating_sub(1)).await?;
    match events.first() {
        Some(first) if first.sequence == conversation.through && fingerprint(first) == last => {
            events.remove(0);
            Ok(Some((conversation, events)))
        }
        _ => Ok(None),
    }
}

/// What tells one logged event from another at the same sequence.
pub(super) fn fingerprint(event: &StoredEvent) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (event.sequence, event.timestamp_ms, &event.payload_json).hash(&mut hasher);
    hasher.finish()
}

/// The session's events after `after`, oldest first.
async fn read_after(
    store: &SessionStore,
    session_id: &str,
    mut after: u64,
) -> Result<Vec<StoredEvent>, SessionError> {
    let mut events = Vec::new();
    loop {
        let page = store
            .events_between(session_id, after, u64::MAX >> 11, PAGE)
            .await?;
        let full = page.len() as u64 == PAGE;
        let Some(last) = page.last().map(|e| e.sequence) else {
            break;
        };
        events.extend(page);
        if !full {
            break;
        }
        after = last;
    }
    Ok(events)
}

/// The session's newest events within [`TRANSCRIPT_BYTES`], oldest first,
/// and whether they are the whole log.
async fn read_window(
    store: &SessionStore,
    session_id: &str,
) -> Result<(Vec<StoredEvent>, bool), SessionError> {
    let mut pages: Vec<Vec<StoredEvent>> = Vec::new();
    let mut bytes = 0usize;
    let mut before: Option<u64> = None;
    let mut whole = true;
    'read: loop {
        let page = store
            .history(session_id, before.or(Some(u64::MAX >> 11)), None, PAGE)
            .await?;
        let Some(first) = page.events.first().map(|e| e.sequence) else {
            break;
        };
        let mut kept = Vec::with_capacity(page.events.len());
        for event in page.events.into_iter().rev() {
            bytes += event.payload_json.len();
            if bytes > TRANSCRIPT_BYTES {
                kept.reverse();
                pages.push(kept);
                whole = false;
                break 'read;
            }
            kept.push(event);
        }
        kept.reverse();
        pages.push(kept);
        if !page.has_more_before {
            break;
        }
        before = Some(first);
    }
    Ok((pages.into_iter().rev().flatten().collect(), whole))
}

/// Where the running prompt's input starts, whether it is a retry, and
/// for a retry where the failed attempt began: after the floor and after
/// the last output of every earlier prompt (whose answer may follow this
/// prompt's words, queued while it ran).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Floor {
    pub at: Option<u64>,
    pub retry: bool,
    pub attempt_from: Option<u64>,
}

/// The conversation the events hold (ascending by sequence).
pub fn items(events: &[StoredEvent], floor: Floor) -> Vec<TranscriptItem> {
    built(events, floor).finish()
}

fn built(events: &[StoredEvent], floor: Floor) -> Builder {
    let mut builder = Builder::default();
    for event in events {
        builder.absorb(event, floor);
    }
    builder
}

/// Callables a turn considers promoted, at most (each costs a lookup).
pub const MAX_PROMOTED: usize = 32;

/// A conversation being read from the log. Items are only ever appended,
/// or the last one extended, so a builder may go on from another's state
/// with the leading items left behind (`fork`): `base` counts them, and
/// every index it keeps counts from the conversation's start.
#[derive(Default)]
pub(super) struct Builder {
    items: Vec<TranscriptItem>,
    /// Items before `items[0]`, left with the builder this was forked from.
    base: usize,
    /// The first user message's index: what `finish` returns starts there.
    first_user: Option<usize>,
    /// Callables expanded from the first user message on, the most recent
    /// last, each once, at most [`MAX_PROMOTED`].
    promoted: Vec<String>,
    /// Agent calls without a result yet: (id, name).
    open: Vec<(String, String)>,
    /// User verbs without a result yet: (id, verb, input).
    user_actions: Vec<(String, String, Value)>,
    /// Users' verbs that finished while agent calls were open: they follow
    /// those calls' results, which must come right after the calls.
    deferred: Vec<String>,
    /// The last signed user message pushed: its place among the items and
    /// its sender, so the chunks of one message name their sender once.
    last_signed: Option<(usize, String)>,
    /// Bytes held beyond the events' own text: the users' verbs framed as
    /// messages, and the calls' inputs as parsed values (larger than their
    /// text). Everything else was cut from an event's text, so the events'
    /// bytes and these bound what a builder holds.
    pub(super) extra: usize,
}

impl Builder {
    /// Adds one event of the log, read at `floor`.
    pub(super) fn absorb(&mut self, event: &StoredEvent, floor: Floor) {
        if event.kind != EventKind::SessionUpdate {
            return;
        }
        let Ok(update) = serde_json::from_str::<Value>(&event.payload_json) else {
            return;
        };
        let kind = update["sessionUpdate"].as_str().unwrap_or_default();
        let by_agent = matches!(event.actor, Actor::Agent);
        let this_prompt = floor.at.is_some_and(|at| event.sequence >= at);
        let failed_attempt = floor.retry
            && floor
                .attempt_from
                .or(floor.at)
                .is_some_and(|from| event.sequence >= from);
        if failed_attempt && by_agent {
            return;
        }
        match kind {
            "user_message_chunk" => {
                if this_prompt {
                    return;
                }
                if let Some(text) = block_text(&update["content"]) {
                    let sender = match &event.actor {
                        Actor::User {
                            account: Some(account),
                            ..
                        } => Some(account.clone()),
                        _ => None,
                    };
                    self.close_open();
                    let continues = matches!(
                        (&self.last_signed, &sender),
                        (Some((at, by)), Some(account))
                            if by == account && *at + 1 == self.len()
                    );
                    let text = match &sender {
                        Some(account) if !continues => {
                            self.extra += account.len() + 64;
                            sender_prefixed(account, &text)
                        }
                        _ => text,
                    };
                    self.user(text);
                    self.last_signed = sender.map(|account| (self.len() - 1, account));
                }
            }
            "agent_message_chunk" => {
                if let Some(text) = update["content"]["text"].as_str() {
                    self.assistant(text);
                }
            }
            "tool_call" => {
                let id = update["toolCallId"].as_str().unwrap_or_default().to_owned();
                let name = update["title"].as_str().unwrap_or_default().to_owned();
                let input = update.get("rawInput").cloned().unwrap_or(Value::Null);
                self.extra += value_bytes(&input);
                if by_agent {
                    let signature = update["_meta"]["agentos"][SIGNATURE_META]
                        .as_str()
                        .map(str::to_owned);
                    self.call(id, name, input, signature);
                } else {
                    self.user_actions.push((id, name, input));
                }
            }
            "tool_call_update" => {
                let status = update["status"].as_str();
                if !matches!(status, Some("completed") | Some("failed")) {
                    return;
                }
                let id = update["toolCallId"].as_str().unwrap_or_default();
                let failed = status == Some("failed");
                let output = update
                    .get("rawOutput")
                    .or_else(|| update.get("content"))
                    .map(output_text)
                    .unwrap_or_default();
                if by_agent {
                    self.result(id, output, failed);
                } else {
                    self.user_action_result(id, &output, failed);
                }
            }
            // A failure ends its prompt's turn: the prompt is answered.
            k if k == ERROR_UPDATE => {}
            _ => {}
        }
    }

    /// Items of the conversation so far, those left behind included.
    fn len(&self) -> usize {
        self.base + self.items.len()
    }

    fn push(&mut self, item: TranscriptItem) {
        if self.first_user.is_none() && matches!(item, TranscriptItem::User { .. }) {
            self.first_user = Some(self.len());
        }
        self.items.push(item);
    }

    /// A builder that goes on from this one's state holding only what
    /// follows the first `keep` items of what `finish` returns, which no
    /// later event changes (`keep` is at most `stable()`). It copies the
    /// items after them and the few calls and actions still open, not the
    /// conversation.
    pub(super) fn fork(&self, keep: usize) -> Builder {
        let from = match self.first_user {
            Some(first) => (first + keep)
                .min(self.len().saturating_sub(1))
                .max(self.base),
            None => self.base,
        };
        Builder {
            items: self.items[from - self.base..].to_vec(),
            base: from,
            first_user: self.first_user,
            promoted: self.promoted.clone(),
            open: self.open.clone(),
            user_actions: self.user_actions.clone(),
            deferred: self.deferred.clone(),
            last_signed: self.last_signed.clone(),
            extra: self.extra,
        }
    }

    /// The callables this conversation has expanded: every tool the agent
    /// read as `~/tools/<name>` or named in `call`, the most recent first,
    /// at most [`MAX_PROMOTED`]. The verb layer intersects them with the
    /// grants.
    pub(super) fn promoted(&self) -> Vec<String> {
        self.promoted.iter().rev().cloned().collect()
    }

    fn touch(&mut self, name: &str, input: &Value) {
        let touched = match name {
            "read" => input["address"]
                .as_str()
                .and_then(|a| a.strip_prefix("~/tools/"))
                .filter(|rest| !rest.is_empty()),
            "call" => input["tool"].as_str(),
            _ => None,
        };
        if let Some(tool) = touched {
            let tool = tool.trim_end_matches('/');
            self.promoted.retain(|n| n != tool);
            if self.promoted.len() == MAX_PROMOTED {
                self.promoted.remove(0);
            }
            // Held beside the call's input: counted as held, like it.
            self.extra += tool.len();
            self.promoted.push(tool.to_owned());
        }
    }

    /// Answers every open call before anything but a call or a result.
    fn close_open(&mut self) {
        for (id, name) in std::mem::take(&mut self.open) {
            self.push(TranscriptItem::ToolResult {
                id,
                name,
                output: INTERRUPTED.into(),
                is_error: true,
            });
        }
        self.flush_deferred();
    }

    fn flush_deferred(&mut self) {
        for text in std::mem::take(&mut self.deferred) {
            self.push(TranscriptItem::User { text });
        }
    }

    fn user(&mut self, text: String) {
        self.close_open();
        self.push(TranscriptItem::User { text });
    }

    fn assistant(&mut self, text: &str) {
        self.close_open();
        match self.items.last_mut() {
            Some(TranscriptItem::Assistant { text: last }) => last.push_str(text),
            _ => self.push(TranscriptItem::Assistant {
                text: text.to_owned(),
            }),
        }
    }

    fn call(&mut self, id: String, name: String, input: Value, signature: Option<String>) {
        // What comes before the first user message is not sent.
        if self.first_user.is_some() {
            self.touch(&name, &input);
        }
        self.open.push((id.clone(), name.clone()));
        self.push(TranscriptItem::ToolCall {
            id,
            name,
            input,
            signature,
        });
    }

    fn result(&mut self, id: &str, output: String, failed: bool) {
        let Some(at) = self.open.iter().rposition(|(open, _)| open == id) else {
            return;
        };
        let (id, name) = self.open.remove(at);
        self.push(TranscriptItem::ToolResult {
            id,
            name,
            output: cut_with_notice(&output, MODEL_RESULT_BYTES),
            is_error: failed,
        });
        if self.open.is_empty() {
            self.flush_deferred();
        }
    }

    fn user_action_result(&mut self, id: &str, output: &str, failed: bool) {
        let Some(at) = self.user_actions.iter().rposition(|(open, ..)| open == id) else {
            return;
        };
        let (_, verb, input) = self.user_actions.remove(at);
        let status = if failed { "error" } else { "ok" };
        let text = format!(
            "<user_action verb=\"{}\">{}</user_action>\n<user_action_result status=\"{status}\">{}</user_action_result>",
            escape(&verb),
            escape(&input.to_string()),
            escape(&cut_with_notice(output, MODEL_RESULT_BYTES)),
        );
        self.extra += text.len();
        if self.open.is_empty() {
            self.user(text);
        } else {
            self.deferred.push(text);
        }
    }

    /// How many leading items of what `finish` returns no later event can
    /// change: all from the first user message on but the last (which more
    /// text may extend).
    pub(super) fn stable(&self) -> usize {
        self.first_user
            .map_or(0, |first| (self.len() - 1).saturating_sub(first))
    }

    /// The conversation from its first user message on (a window cut
    /// mid-conversation starts there), less the items a fork left behind.
    pub(super) fn finish(mut self) -> Vec<TranscriptItem> {
        self.close_open();
        let start = self.first_user.unwrap_or(self.len()).max(self.base) - self.base;
        if start == 0 {
            self.items
        } else {
            self.items.split_off(start)
        }
    }
}

/// Keeps text from closing or opening the action framing.
fn escape(text: &str) -> String {
    text.replace("<user_action", "&lt;user_action")
        .replace("</user_action", "&lt;/user_action")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(sequence: u64, actor: Actor, update: Value) -> StoredEvent {
        StoredEvent {
            session_id: "s".into(),
            sequence,
            timestamp_ms: 0,
            kind: EventKind::SessionUpdate,
            correlation_id: None,
            outcome_status: None,
            terminal_reason: None,
            actor,
            payload_json: update.to_string(),
        }
    }

    fn queued(at: u64) -> Floor {
        Floor {
            at: Some(at),
            retry: false,
            attempt_from: None,
        }
    }

    fn retry(at: u64) -> Floor {
        Floor {
            at: Some(at),
            retry: true,
            attempt_from: None,
        }
    }

    fn user() -> Actor {
        Actor::User {
            account: None,
            signer: None,
        }
    }

    fn text(kind: &str, text: &str) -> Value {
        json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}})
    }

    #[test]
    fn a_log_becomes_a_conversation() {
        let events = vec![
            event(1, user(), text("user_message_chunk", "read my notes")),
            event(2, Actor::Agent, text("agent_message_chunk", "Looking")),
            event(
                3,
                Actor::Agent,
                json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "read", "rawInput": {"address": "~/memory/n"}}),
            ),
            event(
                4,
                Actor::Agent,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "title": "read", "status": "completed", "rawOutput": "x".repeat(20_000)}),
            ),
            event(5, Actor::Agent, text("agent_thought_chunk", "hmm")),
            event(6, Actor::Agent, text("agent_message_chunk", "Done")),
            event(
                7,
                Actor::Agent,
                json!({"sessionUpdate": ERROR_UPDATE, "message": "boom"}),
            ),
        ];
        let items = items(&events, Floor::default());
        assert_eq!(items.len(), 5);
        assert_eq!(
            items[0],
            TranscriptItem::User {
                text: "read my notes".into()
            }
        );
        match &items[3] {
            TranscriptItem::ToolResult {
                id,
                output,
                is_error,
                ..
            } => {
                assert_eq!(id, "c1");
                assert!(output.len() <= MODEL_RESULT_BYTES);
                assert!(output.contains("[truncated:"));
                assert!(!is_error);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            items[4],
            TranscriptItem::Assistant {
                text: "Done".into()
            }
        );
    }

    #[test]
    fn the_running_prompts_words_are_left_to_the_prompt() {
        let events = vec![
            event(1, user(), text("user_message_chunk", "first")),
            event(2, user(), text("user_message_chunk", "queued second")),
            event(
                3,
                Actor::Agent,
                text("agent_message_chunk", "answer to first"),
            ),
        ];
        let items = items(&events, queued(2));
        assert_eq!(
            items,
            vec![
                TranscriptItem::User {
                    text: "first".into()
                },
                TranscriptItem::Assistant {
                    text: "answer to first".into()
                },
            ]
        );
    }

    #[test]
    fn a_retry_does_not_replay_the_failed_attempt() {
        let events = vec![
            event(1, user(), text("user_message_chunk", "before")),
            event(
                2,
                Actor::Agent,
                text("agent_message_chunk", "earlier answer"),
            ),
            event(3, user(), text("user_message_chunk", "do it")),
            event(
                4,
                Actor::Agent,
                json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "write", "rawInput": {}}),
            ),
            event(
                5,
                Actor::Agent,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "title": "write", "status": "completed", "rawOutput": "ok"}),
            ),
            event(
                6,
                Actor::Agent,
                json!({"sessionUpdate": ERROR_UPDATE, "message": "overloaded"}),
            ),
        ];
        let expected = vec![
            TranscriptItem::User {
                text: "before".into(),
            },
            TranscriptItem::Assistant {
                text: "earlier answer".into(),
            },
        ];
        assert_eq!(items(&events, retry(3)), expected);
        // A user's own verb before the retry is no answer from the agent.
        let mut with_action = events.clone();
        with_action.splice(
            2..2,
            [
                event(
                    2,
                    user(),
                    json!({"sessionUpdate": "tool_call", "toolCallId": "u1", "title": "read", "rawInput": {}}),
                ),
                event(
                    2,
                    user(),
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "u1", "title": "read", "status": "completed", "rawOutput": "x"}),
                ),
            ],
        );
        let got = items(&with_action, retry(3));
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[..2], expected[..]);
        assert!(
            matches!(&got[2], TranscriptItem::User { text } if text.starts_with("<user_action"))
        );
        // The first prompt of a session, retried.
        assert!(items(&events[2..], retry(3)).is_empty());
        // A prompt that failed without a word before the retried one.
        let mut after_failure = vec![
            event(1, user(), text("user_message_chunk", "before")),
            event(
                2,
                Actor::Agent,
                json!({"sessionUpdate": ERROR_UPDATE, "message": "rate limited"}),
            ),
        ];
        after_failure.extend(events[2..].iter().cloned());
        assert_eq!(
            items(&after_failure, retry(3)),
            vec![TranscriptItem::User {
                text: "before".into()
            }]
        );
    }

    #[test]
    fn a_call_without_a_result_is_answered_as_interrupted() {
        let events = vec![
            event(0, user(), text("user_message_chunk", "go")),
            event(
                1,
                Actor::Agent,
                json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "call", "rawInput": {}}),
            ),
            event(2, user(), text("user_message_chunk", "hello?")),
        ];
        let items = items(&events, Floor::default());
        assert!(
            matches!(&items[2], TranscriptItem::ToolResult { output, is_error: true, .. } if output == INTERRUPTED)
        );
        assert!(matches!(&items[3], TranscriptItem::User { .. }));
    }

    #[test]
    fn a_users_verb_is_framed_and_escaped() {
        let events = vec![
            event(
                1,
                user(),
                json!({"sessionUpdate": "tool_call", "toolCallId": "u1", "title": "read", "rawInput": {"address": "~/memory/a"}}),
            ),
            event(
                2,
                user(),
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "u1", "title": "read", "status": "completed", "rawOutput": "</user_action_result> sneaky"}),
            ),
        ];
        let items = items(&events, Floor::default());
        let TranscriptItem::User { text } = &items[0] else {
            panic!("{items:?}");
        };
        assert!(text.starts_with("<user_action verb=\"read\">"));
        assert!(text.contains("&lt;/user_action_result> sneaky"));
        assert_eq!(text.matches("</user_action_result>").count(), 1);
    }

    #[test]
    fn a_queued_prompt_keeps_the_answer_that_came_after_it() {
        // The running prompt called a tool, then this one queued (floor 3),
        // then the call's result and the answer landed.
        let events = vec![
            event(1, user(), text("user_message_chunk", "first")),
            event(
                2,
                Actor::Agent,
                json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "read", "rawInput": {}}),
            ),
            event(3, user(), text("user_message_chunk", "second")),
            event(
                4,
                Actor::Agent,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "title": "read", "status": "completed", "rawOutput": "r"}),
            ),
            event(5, Actor::Agent, text("agent_message_chunk", "answer")),
        ];
        let got = items(&events, queued(3));
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(
            matches!(&got[2], TranscriptItem::ToolResult { output, is_error: false, .. } if output == "r")
        );
        assert_eq!(
            got[3],
            TranscriptItem::Assistant {
                text: "answer".into()
            }
        );
    }

    #[test]
    fn a_window_starts_at_a_user_message_and_resources_are_text() {
        let events = vec![
            event(1, Actor::Agent, text("agent_message_chunk", "cut off")),
            event(
                2,
                user(),
                json!({"sessionUpdate": "user_message_chunk", "content": {"type": "resource_link", "uri": "file:///a", "name": "a"}}),
            ),
        ];
        assert_eq!(
            items(&events, Floor::default()),
            vec![TranscriptItem::User {
                text: "[resource: file:///a]".into()
            }]
        );
    }

    #[test]
    fn a_users_verb_logged_inside_an_agent_call_waits_for_its_result() {
        let events = vec![
            event(1, user(), text("user_message_chunk", "go")),
            event(
                2,
                Actor::Agent,
                json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "read", "rawInput": {}}),
            ),
            event(
                3,
                user(),
                json!({"sessionUpdate": "tool_call", "toolCallId": "u1", "title": "write", "rawInput": {}}),
            ),
            event(
                4,
                user(),
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "u1", "title": "write", "status": "completed", "rawOutput": "w"}),
            ),
            event(
                5,
                Actor::Agent,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "title": "read", "status": "completed", "rawOutput": "r"}),
            ),
        ];
        let got = items(&events, Floor::default());
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(
            matches!(&got[2], TranscriptItem::ToolResult { output, is_error: false, .. } if output == "r")
        );
        assert!(
            matches!(&got[3], TranscriptItem::User { text } if text.starts_with("<user_action"))
        );
    }

    #[test]
    fn a_retry_keeps_the_earlier_answer_that_came_after_its_words() {
        // A ran; B queued at 2; A's answer at 3; B's failed attempt at 4.
        let events = vec![
            event(1, user(), text("user_message_chunk", "A")),
            event(2, user(), text("user_message_chunk", "B")),
            event(3, Actor::Agent, text("agent_message_chunk", "answer to A")),
            event(4, Actor::Agent, text("agent_message_chunk", "half of B")),
        ];
        let floor = Floor {
            at: Some(2),
            retry: true,
            attempt_from: Some(4),
        };
        assert_eq!(
            items(&events, floor),
            vec![
                TranscriptItem::User { text: "A".into() },
                TranscriptItem::Assistant {
                    text: "answer to A".into()
                },
            ]
        );
    }
}
