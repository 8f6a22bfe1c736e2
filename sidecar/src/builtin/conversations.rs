//! The conversations of builtin sessions kept between turns, so that a turn
//! reads and parses only the events its session logged since the last one
//! instead of the whole log, and its cost stays flat as the session grows.
//!
//! What is kept of a session is what its events before the last turn's
//! floor made of the conversation: those read the same at every later
//! turn. It is used only while it still matches the log: the session's
//! oldest retained event is the one it was built from (retention has pruned
//! nothing since), the log still holds the last event it absorbed as it was
//! (a session deleted and opened again under its id does not), and nothing
//! from the new turn's floor on was absorbed (a resumed turn absorbs its
//! whole log; a turn after it whose words came earlier starts over). A session whose log passes the transcript's byte
//! window is not kept: its window moves at every turn.
//!
//! The kept conversations of all sessions together hold at most
//! [`CONVERSATIONS_BYTES`] (counted as the bytes of the events they were
//! made of, and of what the builder holds beyond them: the users' verbs as
//! framed for the model, the calls' inputs as parsed values); past that the least recently used are dropped (down to seven
//! eighths of it), and a dropped one is rebuilt from the log at its next
//! turn. A kept conversation is
//! taken out while a turn extends it, so two readers never share one.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use agentos_protocol::host::StoredEvent;

use super::transcript::{fingerprint, Builder, Floor};

/// Bytes all kept conversations hold, at most (see `Conversation::cost`).
pub const CONVERSATIONS_BYTES: usize = 16 * 1024 * 1024;
/// What an entry costs beside its events: the map slot, the builder.
const ENTRY_OVERHEAD: usize = 256;

/// One session's conversation up to a sequence.
#[derive(Default)]
pub struct Conversation {
    /// Names this conversation to the agent, which may hold its stable
    /// part (`TranscriptBasis`); a new one is built under a new id.
    pub(super) id: String,
    /// The session's oldest retained sequence when this was built.
    pub(super) oldest: u64,
    /// The last sequence absorbed (0 before any), and that event's
    /// fingerprint, which the log must still hold for this to go on.
    pub(super) through: u64,
    pub(super) last: Option<u64>,
    /// Payload bytes of the events absorbed.
    pub(super) bytes: usize,
    pub(super) builder: Builder,
    used: u64,
}

impl Conversation {
    pub(super) fn new(oldest: u64) -> Conversation {
        Conversation {
            id: uuid::Uuid::new_v4().simple().to_string(),
            oldest,
            ..Conversation::default()
        }
    }

    /// Leading items of every later turn's transcript that read as now.
    pub(super) fn stable(&self) -> u32 {
        u32::try_from(self.builder.stable()).unwrap_or(u32::MAX)
    }

    /// Adds an event read before every later turn's floor.
    pub(super) fn absorb(&mut self, event: &StoredEvent) {
        self.builder.absorb(event, Floor::default());
        self.through = event.sequence;
        self.last = Some(fingerprint(event));
        self.bytes += event.payload_json.len();
    }

    /// What this holds at most: the events' bytes, what the builder holds
    /// beyond them (the users' verbs as framed, inputs as parsed values),
    /// the key and the entry.
    fn cost(&self, session_id: &str) -> usize {
        self.bytes + self.builder.extra + session_id.len() + ENTRY_OVERHEAD
    }
}

/// The kept conversations of one VM's builtin sessions.
#[derive(Default)]
pub struct Conversations {
    inner: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    entries: HashMap<String, Conversation>,
    bytes: usize,
    clock: u64,
}

impl Conversations {
    /// Takes a session's kept conversation out, if there is one.
    pub fn take(&self, session_id: &str) -> Option<Conversation> {
        let mut kept = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let conversation = kept.entries.remove(session_id)?;
        kept.bytes -= conversation.cost(session_id);
        Some(conversation)
    }

    /// Keeps a session's conversation; when all of them would hold more
    /// than [`CONVERSATIONS_BYTES`], the least recently used are dropped
    /// until they hold seven eighths of it. One larger than the whole
    /// budget is not kept.
    pub fn keep(&self, session_id: &str, mut conversation: Conversation) {
        let cost = conversation.cost(session_id);
        if cost > CONVERSATIONS_BYTES {
            return;
        }
        let mut kept = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(replaced) = kept.entries.remove(session_id) {
            kept.bytes -= replaced.cost(session_id);
        }
        kept.clock += 1;
        conversation.used = kept.clock;
        if kept.bytes + cost > CONVERSATIONS_BYTES {
            // Down to seven eighths at once, so that a full budget is not
            // searched again at every turn.
            let mut by_use: Vec<(u64, String)> = kept
                .entries
                .iter()
                .map(|(id, c)| (c.used, id.clone()))
                .collect();
            by_use.sort_unstable();
            for (_, id) in by_use {
                if kept.bytes + cost <= CONVERSATIONS_BYTES / 8 * 7 {
                    break;
                }
                if let Some(dropped) = kept.entries.remove(&id) {
                    kept.bytes -= dropped.cost(&id);
                }
            }
        }
        kept.bytes += cost;
        kept.entries.insert(session_id.to_owned(), conversation);
    }

    /// Bytes the kept conversations are counted at.
    pub fn bytes(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bytes
    }
}

#[cfg(test)]
mod tests {
    //! A kept conversation must read exactly as the whole log does, at
    //! every turn of a session that queues, retries, resumes, prunes and
    //! runs users' verbs; and it must come from the kept state, reading
    //! only what was logged since.

    use agentos_protocol::agent_ext::{HeldTranscript, TranscriptItem};
    use agentos_protocol::host::Actor;
    use agentos_protocol::session::PermissionPolicy;
    use agentos_schema::migrate_all;
    use agentos_storage::testing::{sqlite_file, TestDb};
    use serde_json::{json, Value};

    use super::*;
    use crate::builtin::transcript::rebuild;
    use crate::sessions::store::{NewEvent, NewSession, Prune};
    use crate::sessions::SessionStore;

    struct Log {
        _test: TestDb,
        store: SessionStore,
        db: agentos_schema::SharedDatabase,
    }

    impl Log {
        async fn new() -> Log {
            let test = sqlite_file().await;
            migrate_all(test.db.as_ref()).await.expect("migrate");
            let store = SessionStore::new(test.db.clone());
            let new = NewSession {
                session_id: "s".into(),
                agent: "builtin".into(),
                cwd: "/".into(),
                permission_policy: PermissionPolicy::AllowAll,
                additional_directories: Vec::new(),
                env: Default::default(),
                mcp_servers: Vec::new(),
                title: None,
                metadata: None,
            };
            store.insert_session(&new, 100).await.expect("insert");
            Log {
                db: test.db.clone(),
                _test: test,
                store,
            }
        }

        /// Appends updates; returns the first one's sequence.
        async fn append(&self, updates: Vec<(Actor, Value)>, prune_before: Option<u64>) -> u64 {
            let row = self
                .store
                .get_session("s")
                .await
                .expect("read")
                .expect("row");
            let counters = crate::sessions::store::HistoryCounters {
                latest_sequence: row.latest_sequence,
                oldest_retained_sequence: row.oldest_retained_sequence,
                retained_event_count: row.retained_event_count,
                retained_event_bytes: row.retained_event_bytes,
            };
            let prune = match prune_before {
                Some(before) => {
                    let gone = self
                        .store
                        .events_between("s", 0, before - 1, 10_000)
                        .await
                        .expect("read");
                    Prune {
                        before_sequence: before,
                        events: gone.len() as u64,
                        bytes: gone.iter().map(|e| e.payload_json.len() as u64).sum(),
                    }
                }
                None => Prune::default(),
            };
            let events = updates
                .into_iter()
                .map(|(actor, update)| NewEvent::raw_update(actor, update.to_string()))
                .collect();
            let (statements, _) = SessionStore::append_statements("s", &counters, prune, events, 1);
            self.db.transaction(statements).await.expect("append");
            counters.latest_sequence + 1
        }

        /// The conversation at `floor` through `kept`, checked against one
        /// rebuilt from the whole log.
        async fn read(&self, kept: &Conversations, floor: Floor) -> Vec<TranscriptItem> {
            let fresh = rebuild(&self.store, &Conversations::default(), "s", floor, None)
                .await
                .expect("fresh");
            let through_kept = rebuild(&self.store, kept, "s", floor, None)
                .await
                .expect("kept");
            assert_eq!(
                serde_json::to_value(&through_kept.items).expect("json"),
                serde_json::to_value(&fresh.items).expect("json"),
                "at {floor:?}"
            );
            assert_eq!(through_kept.promoted, fresh.promoted, "at {floor:?}");
            through_kept.items
        }
    }

    fn user() -> Actor {
        Actor::User {
            account: None,
            signer: None,
        }
    }

    fn words(text: &str) -> (Actor, Value) {
        (
            user(),
            json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}),
        )
    }

    fn said(text: &str) -> (Actor, Value) {
        (
            Actor::Agent,
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}),
        )
    }

    fn call(actor: Actor, id: &str) -> (Actor, Value) {
        (
            actor,
            json!({"sessionUpdate": "tool_call", "toolCallId": id, "title": "read",
                   "rawInput": {"address": id}}),
        )
    }

    fn result(actor: Actor, id: &str) -> (Actor, Value) {
        (
            actor,
            json!({"sessionUpdate": "tool_call_update", "toolCallId": id, "status": "completed",
                   "rawOutput": format!("result of {id}")}),
        )
    }

    fn at(floor: u64) -> Floor {
        Floor {
            at: Some(floor),
            ..Floor::default()
        }
    }

    #[tokio::test]
    async fn a_kept_conversation_reads_as_the_whole_log_does() {
        let log = Log::new().await;
        let kept = Conversations::default();
        // An ordinary turn, then one that calls a verb while the user runs
        // one of their own.
        let floor = log.append(vec![words("one")], None).await;
        log.read(&kept, at(floor)).await;
        log.append(vec![said("first "), said("answer")], None).await;
        let floor = log.append(vec![words("two")], None).await;
        log.read(&kept, at(floor)).await;
        log.append(
            vec![
                call(Actor::Agent, "c1"),
                call(user(), "u1"),
                result(user(), "u1"),
                result(Actor::Agent, "c1"),
                said("done"),
            ],
            None,
        )
        .await;
        // A prompt queued while another ran: its words come before the
        // running one's answer.
        let running = log.append(vec![words("three")], None).await;
        log.read(&kept, at(running)).await;
        let queued = log.append(vec![words("four")], None).await;
        log.append(vec![said("answer to three")], None).await;
        let items = log.read(&kept, at(queued)).await;
        assert!(
            matches!(items.last(), Some(TranscriptItem::Assistant { text }) if text == "answer to three")
        );
        // A failed attempt and its retry at the same floor.
        let floor = log.append(vec![words("five")], None).await;
        log.read(&kept, at(floor)).await;
        log.append(vec![call(Actor::Agent, "c2")], None).await;
        let retry = Floor {
            at: Some(floor),
            retry: true,
            attempt_from: None,
        };
        log.read(&kept, retry).await;
        // A resumed turn reads the whole log; a prompt whose words came
        // before its end starts over.
        let early = log.append(vec![words("six")], None).await;
        log.append(vec![said("resumed")], None).await;
        log.read(&kept, Floor::default()).await;
        log.read(&kept, at(early)).await;
        // Retention prunes the oldest events: the kept conversation no
        // longer matches and is rebuilt.
        let floor = log.append(vec![words("seven")], Some(floor)).await;
        let items = log.read(&kept, at(floor)).await;
        assert!(!items
            .iter()
            .any(|item| matches!(item, TranscriptItem::User { text } if text == "one")));
        assert!(kept.bytes() > 0, "the conversation is kept");
    }

    /// The callables a conversation expanded are counted as its calls are
    /// read, kept with it, and the same whether the turn goes on from the
    /// kept conversation or reads the whole log.
    #[tokio::test]
    async fn reading_or_calling_a_tool_promotes_it_once() {
        let log = Log::new().await;
        let kept = Conversations::default();
        let used = |n: usize, name: &str, input: Value| {
            (
                Actor::Agent,
                json!({"sessionUpdate": "tool_call", "toolCallId": format!("c{n}"),
                       "title": name, "rawInput": input}),
            )
        };
        let promoted = |floor| {
            let (log, kept) = (&log, &kept);
            async move {
                log.read(kept, at(floor)).await;
                rebuild(&log.store, kept, "s", at(floor), None)
                    .await
                    .expect("read")
                    .promoted
            }
        };
        // Before the first user message: not sent, so not promoted.
        log.append(vec![used(0, "call", json!({"tool": "early"}))], None)
            .await;
        log.append(vec![words("hi")], None).await;
        log.append(
            vec![
                used(1, "read", json!({"address": "~/tools/search"})),
                used(2, "call", json!({"tool": "web_fetch", "input": {}})),
            ],
            None,
        )
        .await;
        let floor = log.append(vec![words("more")], None).await;
        assert_eq!(promoted(floor).await, vec!["web_fetch", "search"]);
        log.append(
            vec![
                used(3, "call", json!({"tool": "search"})),
                used(4, "read", json!({"address": "~/tools/"})),
                used(5, "read", json!({"address": "~/memory/x"})),
            ],
            None,
        )
        .await;
        let floor = log.append(vec![words("again")], None).await;
        assert_eq!(promoted(floor).await, vec!["search", "web_fetch"]);
        let many = (0..40)
            .map(|n| used(10 + n, "call", json!({"tool": format!("t{n}")})))
            .collect();
        log.append(many, None).await;
        let floor = log.append(vec![words("last")], None).await;
        let names = promoted(floor).await;
        assert_eq!(names.len(), crate::builtin::transcript::MAX_PROMOTED);
        assert_eq!(names[0], "t39");
        assert!(!names.iter().any(|name| name == "early"));
    }

    #[tokio::test]
    async fn a_turn_reads_only_what_was_logged_since_the_last() {
        let log = Log::new().await;
        let kept = Conversations::default();
        log.append(vec![words("one"), said("old text")], None).await;
        let floor = log.append(vec![words("two")], None).await;
        log.read(&kept, at(floor)).await;
        let rewrite = |sequence: u64, from: &str, to: &str| {
            log.db.transaction(vec![agentos_schema::Statement::new(
                "UPDATE agentos_core_events SET payload_json = replace(payload_json, ?2, ?3) \
                 WHERE session_id = 's' AND sequence = ?1",
                vec![
                    agentos_schema::SqlValue::Integer(sequence as i64),
                    from.into(),
                    to.into(),
                ],
            )])
        };
        // An older event changed behind the kept conversation's back is not
        // read again: the kept one still says what the log said.
        rewrite(1, "\"one\"", "\"ONE\"").await.expect("update");
        log.append(vec![said("answer")], None).await;
        let floor = log.append(vec![words("three")], None).await;
        let read = |floor| {
            let (log, kept) = (&log, &kept);
            async move {
                rebuild(&log.store, kept, "s", at(floor), None)
                    .await
                    .expect("read")
                    .items
            }
        };
        let items = read(floor).await;
        assert!(
            matches!(&items[0], TranscriptItem::User { text } if text == "one"),
            "{items:?}"
        );
        // The last event it absorbed changed (a log replaced under the same
        // id): it is not continued, the log is read again.
        rewrite(4, "answer", "ANSWER").await.expect("update");
        let items = read(floor).await;
        assert!(
            matches!(&items[0], TranscriptItem::User { text } if text == "ONE"),
            "{items:?}"
        );
    }

    /// The agent is sent only what follows the part it holds, and only
    /// when it holds a stable part of this very conversation.
    #[tokio::test]
    async fn the_agent_is_sent_what_follows_what_it_holds() {
        let log = Log::new().await;
        let kept = Conversations::default();
        log.append(vec![words("one"), said("first")], None).await;
        let floor = log.append(vec![words("two")], None).await;
        let first = rebuild(&log.store, &kept, "s", at(floor), None)
            .await
            .expect("read");
        let basis = first.basis.clone().expect("kept");
        // "one" stays; "first" may still grow.
        assert_eq!((basis.keep, basis.stable), (0, 1));
        log.append(vec![said("second")], None).await;
        let floor = log.append(vec![words("three")], None).await;
        let read = |held: Option<HeldTranscript>| {
            let log = &log;
            let kept = &kept;
            async move {
                rebuild(&log.store, kept, "s", at(floor), held.as_ref())
                    .await
                    .expect("read")
            }
        };
        let held = |id: &str, items| {
            Some(HeldTranscript {
                id: id.to_owned(),
                items,
            })
        };
        let whole = read(None).await;
        let (sent, basis) = read(held(&basis.id, 1)).await.for_agent();
        let basis = basis.expect("kept");
        assert_eq!(basis.keep, 1);
        assert_eq!(sent.as_slice(), &whole.items[1..]);
        // Another conversation's id, or more than stays: the whole of it.
        for other in [held("other", 1), held(&basis.id, basis.stable + 1)] {
            let (sent, basis) = read(other).await.for_agent();
            assert_eq!(basis.map(|b| b.keep), Some(0));
            assert_eq!(sent, whole.items);
        }
    }

    /// A call's input is held parsed, larger than its text: it is counted
    /// as held, so the budget bounds what is really kept.
    #[test]
    fn a_parsed_input_counts_as_what_it_holds() {
        let zeros = vec![0; 10_000];
        let payload = json!({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "write",
                             "rawInput": {"items": zeros}})
        .to_string();
        let mut conversation = Conversation::new(1);
        conversation.absorb(&agentos_protocol::host::StoredEvent {
            session_id: "s".into(),
            sequence: 1,
            timestamp_ms: 0,
            kind: agentos_protocol::host::EventKind::SessionUpdate,
            correlation_id: None,
            outcome_status: None,
            terminal_reason: None,
            actor: Actor::Agent,
            payload_json: payload.clone(),
        });
        let slot = std::mem::size_of::<Value>();
        assert!(payload.len() < 10_000 * 3);
        assert!(
            conversation.cost("s") >= 10_000 * slot,
            "{}",
            conversation.cost("s")
        );
    }

    #[test]
    fn the_least_recently_used_are_dropped_past_the_budget() {
        let kept = Conversations::default();
        let big = |oldest| Conversation {
            bytes: CONVERSATIONS_BYTES / 3,
            ..Conversation::new(oldest)
        };
        kept.keep("a", big(1));
        kept.keep("b", big(2));
        // Using `a` makes `b` the least recently used.
        let a = kept.take("a").expect("a");
        kept.keep("a", a);
        kept.keep("c", big(3));
        assert!(kept.bytes() <= CONVERSATIONS_BYTES);
        assert!(kept.take("b").is_none());
        assert_eq!(kept.take("a").map(|c| c.oldest), Some(1));
        assert_eq!(kept.take("c").map(|c| c.oldest), Some(3));
        assert_eq!(kept.bytes(), 0);
        // One larger than the whole budget is not kept.
        kept.keep(
            "d",
            Conversation {
                bytes: CONVERSATIONS_BYTES,
                ..Conversation::new(4)
            },
        );
        assert!(kept.take("d").is_none());
        // Many small ones: past the budget, the oldest go until seven
        // eighths of it are held, and the newest stay.
        let small = |oldest| Conversation {
            bytes: CONVERSATIONS_BYTES / 64 - ENTRY_OVERHEAD - 8,
            ..Conversation::new(oldest)
        };
        for n in 0..65u64 {
            kept.keep(&format!("s{n:07}"), small(n));
        }
        assert!(kept.bytes() <= CONVERSATIONS_BYTES / 8 * 7);
        assert!(kept.take("s0000000").is_none());
        assert_eq!(kept.take("s0000064").map(|c| c.oldest), Some(64));
        assert_eq!(kept.take("s0000063").map(|c| c.oldest), Some(63));
    }
}
