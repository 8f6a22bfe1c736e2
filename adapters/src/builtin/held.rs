//! What the builtin agent keeps of a session's conversation between turns
//! when its client is the sidecar, so that a turn does not convert, copy
//! or (for chat completions) write again what the session said before.
//! The request still carries the whole conversation to the provider.
//!
//! The sidecar's context says which leading transcript items read the same
//! at every later turn (`TranscriptBasis::stable`). The agent keeps them as
//! the provider messages they make (`Held`), under the conversation's id;
//! the next context then sends only the items after them
//! (`TranscriptBasis::keep`), and the turn folds those onto the held
//! messages rather than converting the whole conversation again. Once a
//! model call goes to a chat completions endpoint, the held messages but
//! the last, which a later item may still extend, are also kept in its
//! written form (`Rendered`), so later calls copy them instead of writing
//! them again; the other families write every message at each call.
//!
//! The turn's own messages (the prompt, the answers, the tool results) go
//! after the held ones in the same list; when the turn returns, whatever
//! its outcome, the list is cut back to the held part for the next turn (a
//! turn that panics loses it, and the next one is sent everything).
//!
//! What is held is counted (the messages' text and inputs, and their
//! written form) against a budget the agents of a process share
//! ([`HELD_BYTES`]); a conversation that does not fit is not held, and its
//! next turn is sent the whole of it.

use std::sync::Arc;

use agentos_base::budget::{ByteBudget, Held as Share};
use agentos_protocol::agent_ext::{value_bytes, TranscriptBasis, TranscriptItem};

use super::provider::{Message, Rendered, ToolCall};

/// Bytes the conversations held by the builtin agents sharing one
/// `AgentOptions` (every in-process agent of a sidecar) take together, at
/// most: about twice what the sidecar keeps of its sessions'
/// conversations, since a chat completions conversation is held both as
/// messages and as written.
pub const HELD_BYTES: usize = 64 * 1024 * 1024;

/// One session's conversation as the agent holds it between turns.
pub(super) struct Held {
    /// The conversation's id (`TranscriptBasis::id`).
    id: String,
    /// Transcript items these messages were made of.
    items: usize,
    messages: Vec<Message>,
    /// The written form of `messages[..rendered.len()]`, never of the
    /// last message.
    rendered: Rendered,
    /// About what `messages` take (see [`item_bytes`]).
    bytes: usize,
    /// Their share of the budget, with the written form's.
    _share: Share,
}

impl Held {
    /// What to tell the client this agent holds.
    pub(super) fn basis(&self) -> (String, usize) {
        (self.id.clone(), self.items)
    }
}

/// A turn's conversation, and what of it to hold when the turn ends.
pub(super) struct Turn {
    pub(super) messages: Vec<Message>,
    pub(super) rendered: Rendered,
    /// Leading messages that stay as they are through this turn and every
    /// later one: they may be written once.
    pub(super) settled: usize,
    hold: Option<Hold>,
}

/// Where the held part of a turn's conversation ends.
struct Hold {
    id: String,
    items: usize,
    /// About what the held items' messages take.
    bytes: usize,
    /// Messages the held items make, and the last of them as they made it
    /// (the turn's own items may have extended it since).
    len: usize,
    last: Option<Message>,
}

impl Turn {
    /// The conversation of a turn whose client sent `items` on `basis`:
    /// the items it says this agent keeps of `held`, then those. Fails
    /// when it keeps anything but none or all of what this agent holds.
    pub(super) fn of(
        held: Option<Held>,
        items: Vec<TranscriptItem>,
        basis: Option<&TranscriptBasis>,
    ) -> Result<Turn, String> {
        let Some(basis) = basis else {
            let mut messages = Vec::new();
            fold(&mut messages, items);
            return Ok(Turn {
                messages,
                rendered: Rendered::default(),
                settled: 0,
                hold: None,
            });
        };
        let keep = basis.keep as usize;
        let (mut messages, mut rendered, bytes) = match held {
            _ if keep == 0 => (Vec::new(), Rendered::default(), 0),
            Some(held) if held.id == basis.id && held.items == keep => {
                (held.messages, held.rendered, held.bytes)
            }
            held => {
                let holds = held
                    .filter(|held| held.id == basis.id)
                    .map_or(0, |held| held.items);
                return Err(format!(
                    "the client's transcript follows {keep} items of {:?}, and this agent holds {holds} of it",
                    basis.id
                ));
            }
        };
        // The items that stay for later turns, then this turn's own.
        let stable = (basis.stable as usize).clamp(keep, keep + items.len());
        let mut items = items.into_iter();
        let mut bytes = bytes;
        fold(
            &mut messages,
            items
                .by_ref()
                .take(stable - keep)
                .inspect(|item| bytes += item_bytes(item)),
        );
        let len = messages.len();
        let settled = len.saturating_sub(1);
        rendered.truncate(settled);
        let hold = Hold {
            id: basis.id.clone(),
            items: stable,
            bytes,
            len,
            last: messages.last().cloned(),
        };
        fold(&mut messages, items);
        Ok(Turn {
            messages,
            rendered,
            settled,
            hold: Some(hold),
        })
    }

    /// The conversation of a turn whose client keeps none for it.
    pub(super) fn plain(messages: Vec<Message>) -> Turn {
        Turn {
            messages,
            rendered: Rendered::default(),
            settled: 0,
            hold: None,
        }
    }

    /// What to hold for the next turn, from the conversation as the turn
    /// left it: cut back to the held items' messages, if they fit in
    /// `budget`.
    pub(super) fn held(
        self,
        mut messages: Vec<Message>,
        mut rendered: Rendered,
        budget: &Arc<ByteBudget>,
    ) -> Option<Held> {
        let hold = self.hold?;
        rendered.truncate(hold.len.saturating_sub(1));
        let bytes = hold.bytes.saturating_add(rendered.bytes());
        // More than the whole budget is never held.
        let share = budget
            .try_take(bytes)
            .filter(|share| share.bytes() == bytes)?;
        messages.truncate(hold.len);
        if let (Some(slot), Some(last)) = (messages.last_mut(), hold.last) {
            *slot = last;
        }
        Some(Held {
            id: hold.id,
            items: hold.items,
            messages,
            rendered,
            bytes: hold.bytes,
            _share: share,
        })
    }
}

/// About what an item takes once folded into a message: its text, its
/// ids and names, its input as a parsed value, and a slot for it.
fn item_bytes(item: &TranscriptItem) -> usize {
    const SLOT: usize = 64;
    SLOT + match item {
        TranscriptItem::User { text } | TranscriptItem::Assistant { text } => text.len(),
        TranscriptItem::ToolCall {
            id,
            name,
            input,
            signature,
        } => id.len() + name.len() + value_bytes(input) + signature.as_ref().map_or(0, String::len),
        TranscriptItem::ToolResult {
            id, name, output, ..
        } => id.len() + name.len() + output.len(),
    }
}

/// Folds transcript items onto provider messages: an assistant's text and
/// the tool calls that follow it form one message, as do user texts in a
/// row. Each step looks only at the last message, so folding a list in
/// parts gives what folding it whole does.
pub(super) fn fold(out: &mut Vec<Message>, items: impl IntoIterator<Item = TranscriptItem>) {
    for item in items {
        match item {
            TranscriptItem::User { text } => match out.last_mut() {
                Some(Message::User { text: last }) => {
                    last.push_str("\n\n");
                    last.push_str(&text);
                }
                _ => out.push(Message::User { text }),
            },
            TranscriptItem::Assistant { text } => match out.last_mut() {
                Some(Message::Assistant {
                    text: last,
                    tool_calls,
                    ..
                }) if tool_calls.is_empty() => last.push_str(&text),
                _ => out.push(Message::Assistant {
                    text,
                    tool_calls: Vec::new(),
                    signature: None,
                }),
            },
            TranscriptItem::ToolCall {
                id,
                name,
                input,
                signature,
            } => {
                let call = ToolCall {
                    id,
                    name,
                    arguments: input,
                    signature,
                };
                match out.last_mut() {
                    Some(Message::Assistant { tool_calls, .. }) => tool_calls.push(call),
                    _ => out.push(Message::Assistant {
                        text: String::new(),
                        tool_calls: vec![call],
                        signature: None,
                    }),
                }
            }
            TranscriptItem::ToolResult {
                id,
                name,
                output,
                is_error,
            } => out.push(Message::ToolResult {
                call_id: id,
                name,
                content: output,
                is_error,
                images: Vec::new(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Held across turns, the conversation must be at every turn what the
    //! whole transcript folds to, however the turn extended it.

    use serde_json::json;

    use super::*;
    use crate::builtin::provider::Rendered;

    fn user(text: &str) -> TranscriptItem {
        TranscriptItem::User { text: text.into() }
    }

    fn said(text: &str) -> TranscriptItem {
        TranscriptItem::Assistant { text: text.into() }
    }

    fn call(id: &str) -> TranscriptItem {
        TranscriptItem::ToolCall {
            id: id.into(),
            name: "read".into(),
            input: json!({"address": id}),
            signature: None,
        }
    }

    fn result(id: &str) -> TranscriptItem {
        TranscriptItem::ToolResult {
            id: id.into(),
            name: "read".into(),
            output: format!("result of {id}"),
            is_error: false,
        }
    }

    fn whole(items: &[TranscriptItem]) -> Vec<Message> {
        let mut messages = Vec::new();
        fold(&mut messages, items.to_vec());
        messages
    }

    fn basis(keep: usize, stable: usize) -> TranscriptBasis {
        TranscriptBasis {
            id: "conversation".into(),
            keep: keep as u32,
            stable: stable as u32,
        }
    }

    #[test]
    fn folding_in_parts_is_folding_whole() {
        let items = vec![
            user("a"),
            user("b"),
            said("look"),
            said("ing"),
            call("c1"),
            call("c2"),
            result("c1"),
            result("c2"),
            said("done"),
            user("c"),
        ];
        for cut in 0..=items.len() {
            let mut parts = Vec::new();
            fold(&mut parts, items[..cut].to_vec());
            fold(&mut parts, items[cut..].to_vec());
            assert_eq!(parts, whole(&items), "cut at {cut}");
        }
    }

    /// Three turns: each is sent what follows what the agent holds, and
    /// each turn's own messages and its extending the last held message
    /// are undone before the next.
    #[test]
    fn a_held_conversation_reads_as_the_whole_transcript_at_every_turn() {
        let mut log = vec![user("one"), said("first")];
        let mut held = None;
        let mut kept = 0;
        for turn in 0..3 {
            // The client says all but the last item stay.
            let stable = log.len() - 1;
            let sent = log[kept..].to_vec();
            let mut conversation =
                Turn::of(held.take(), sent, Some(&basis(kept, stable))).expect("held");
            assert_eq!(conversation.messages, whole(&log), "turn {turn}");
            // Only messages no later item changes may be written once.
            assert_eq!(conversation.settled, whole(&log[..stable]).len() - 1);
            let mut messages = std::mem::take(&mut conversation.messages);
            let mut rendered = std::mem::take(&mut conversation.rendered);
            rendered.extend(&messages[..conversation.settled]);
            assert_eq!(rendered.len(), conversation.settled);
            // The turn extends the last message and adds its own.
            if let Some(Message::Assistant { text, .. }) = messages.last_mut() {
                text.push_str(" (extended by the turn)");
            }
            messages.push(Message::User {
                text: "the prompt".into(),
            });
            held = conversation.held(messages, rendered, &ByteBudget::new(HELD_BYTES));
            kept = stable;
            log.extend([said(" more"), call("c"), result("c"), user("next")]);
        }
        let held = held.expect("held");
        assert_eq!(held.basis(), ("conversation".to_owned(), kept));
        assert_eq!(held.messages, whole(&log[..kept]));
        assert!(held.rendered.len() < held.messages.len());
    }

    #[test]
    fn a_client_that_keeps_what_is_not_held_is_refused() {
        let items = vec![user("one"), said("first")];
        let turn = Turn::of(None, items.clone(), Some(&basis(0, 1))).expect("fresh");
        let budget = ByteBudget::new(HELD_BYTES);
        let held = turn.held(whole(&items), Rendered::default(), &budget);
        let mut other = basis(2, 2);
        other.id = "another".into();
        assert!(Turn::of(held, Vec::new(), Some(&other)).is_err());
        assert!(Turn::of(None, Vec::new(), Some(&basis(1, 1))).is_err());
        // Without a basis the conversation is the items sent, not held.
        let turn = Turn::of(None, items.clone(), None).expect("whole");
        assert_eq!(turn.messages, whole(&items));
        assert!(turn
            .held(whole(&items), Rendered::default(), &budget)
            .is_none());
    }

    /// What is held is counted against the budget the agents share, and
    /// given back when it is let go; what does not fit is not held.
    #[test]
    fn a_conversation_past_the_budget_is_not_held() {
        let items = vec![user(&"words ".repeat(100)), said("first"), user("again")];
        let hold = |budget: &Arc<ByteBudget>| {
            let turn = Turn::of(None, items.clone(), Some(&basis(0, 2))).expect("fresh");
            let mut rendered = Rendered::default();
            rendered.extend(&whole(&items)[..turn.settled]);
            turn.held(whole(&items), rendered, budget)
        };
        let budget = ByteBudget::new(HELD_BYTES);
        let held = hold(&budget).expect("it fits");
        let used = budget.used();
        // The two items' text and slots, and the first one written.
        assert!(used > 600 + 5 + 600, "{used}");
        let other = hold(&budget).expect("so does another");
        assert_eq!(budget.used(), 2 * used);
        drop((held, other));
        assert_eq!(budget.used(), 0);
        let small = ByteBudget::new(used - 1);
        assert!(hold(&small).is_none());
        assert_eq!(small.used(), 0);
    }
}
