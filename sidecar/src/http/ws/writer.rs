//! A socket's writer task: takes entries off the outbox in order, renders
//! session items as Seed events, sends them, pings every
//! `http.ws.pingIntervalMs`, and on a close request stops sending data,
//! drops what is still queued and sends the close frame.
//!
//! Session items are rendered here, not where they are published, so a
//! session's writer and the hub never wait on JSON; a durable event's frame
//! is rendered by the first socket that sends it and shared by the others
//! (`FrameCache`), as is a session's `change` frame (`Announced`), and
//! what a burst queued goes out in one vectored write
//! from those shared frames (`wire.rs`). Each session
//! subscription keeps its live-message state here too: agent text chunks
//! become `appendPartial` with one `partialId` per assistant message, and
//! the first durable event after them (the assistant message itself, in a
//! turn that completes) is preceded by `patch.done`. `patch.activity` says
//! what the agent is doing whenever that changes: `starting` when a turn
//! begins, `thinking` on thought chunks, `responding` with the first text,
//! `tool` (with its name and call id) after a tool call is stored; `usage`
//! is never sent (ACP reports none). A session's new state
//! is held back until the subscription has delivered the rows committed
//! before it, so `change` never overtakes the events it follows.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use super::outbox::{Announced, Close, Out, Queue, CLOSE_NORMAL};
use super::wire::{Framed, Wire, KEPT_FRAMES, OP_PING, OP_PONG};
use crate::control::SessionLink;
use crate::sessions::Item;
use agentos_protocol::seed::event::session_event;
use agentos_protocol::seed::ws::{PartialPatch, RunActivity, WsEvent};
use agentos_protocol::seed::Ipld;
use bytes::Bytes;
use serde_json::Value;
use tokio::io::AsyncWrite;
use tungstenite::Utf8Bytes;

/// A durable event's `append` frame, rendered once and shared by every
/// socket subscribed to its session (a clone is a reference count), with
/// the tool call the event records, as `(name, id)`.
struct AppendFrame {
    wire: Framed,
    tool: Option<(String, String)>,
}

/// What an entry becomes on the wire: a frame rendered for this socket, or
/// one framed once for every socket it goes to.
pub(super) enum Piece {
    Text(Utf8Bytes),
    Framed(Framed),
}

/// One session subscription as its frames are rendered.
struct SessionView {
    key: String,
    link: SessionLink,
    /// The assistant message being streamed, if any.
    partial: Option<String>,
    /// Whether text went out under `partial` (a patch that only said what
    /// the agent was doing opens no message, so it gets no `done`).
    partial_text: bool,
    /// The last durable sequence rendered.
    last_seq: u64,
    /// States to announce once `last_seq` reaches their sequences: the
    /// latest, after a turn's start that has not gone out yet (at most two,
    /// so that a turn that ends before its events are out is still seen to
    /// start).
    pending: VecDeque<Arc<Announced>>,
    /// What the agent was last said to be doing (`activity`), with the
    /// tool call it runs when that is `tool`.
    activity: Option<RunActivity>,
}

impl SessionView {
    fn done(&mut self, out: &mut Vec<Piece>) {
        let had_text = std::mem::take(&mut self.partial_text);
        if let Some(partial_id) = self.partial.take().filter(|_| had_text) {
            out.push(Piece::Text(
                WsEvent::AppendPartial {
                    key: self.key.clone(),
                    partial_id,
                    patch: PartialPatch {
                        done: Some(true),
                        ..PartialPatch::default()
                    },
                }
                .to_json()
                .into(),
            ));
        }
    }

    /// A patch that says what the agent is doing now, when that changed;
    /// the text of `delta` rides along.
    fn activity(&mut self, now: RunActivity, text_delta: Option<String>, out: &mut Vec<Piece>) {
        let changed = self.activity.as_ref() != Some(&now);
        if !changed && text_delta.is_none() {
            return;
        }
        let partial_id = self
            .partial
            .get_or_insert_with(|| uuid::Uuid::new_v4().to_string())
            .clone();
        self.partial_text |= text_delta.is_some();
        out.push(Piece::Text(
            WsEvent::AppendPartial {
                key: self.key.clone(),
                partial_id,
                patch: PartialPatch {
                    text_delta,
                    activity: changed.then(|| now.clone()),
                    ..PartialPatch::default()
                },
            }
            .to_json()
            .into(),
        ));
        self.activity = Some(now);
    }

    fn change(&mut self, state: &Announced, out: &mut Vec<Piece>) {
        if !state.info.state.is_live() {
            // A turn that ended without its message leaves none open.
            self.done(out);
            self.activity = None;
        } else if self.activity.is_none() {
            self.activity(phase("starting"), None, out);
        }
        out.push(Piece::Framed(state.frame(&self.key, &self.link)));
    }

    fn state(&mut self, state: Arc<Announced>, out: &mut Vec<Piece>) {
        let keeps_start =
            |held: &Announced| held.info.state.is_live() && !state.info.state.is_live();
        match self.pending.back() {
            Some(held) if keeps_start(held) && self.pending.len() == 1 => {}
            Some(_) => {
                self.pending.pop_back();
            }
            None => {}
        }
        self.pending.push_back(state);
        self.flush(out);
    }

    /// Announces the pending states whose sequences have gone out.
    fn flush(&mut self, out: &mut Vec<Piece>) {
        while let Some(state) = self
            .pending
            .front()
            .filter(|state| state.info.latest_sequence <= self.last_seq)
            .cloned()
        {
            self.pending.pop_front();
            self.change(&state, out);
        }
    }

    fn item(&mut self, item: &Item, out: &mut Vec<Piece>) {
        match item {
            Item::Durable(event, _, cache) => {
                self.done(out);
                self.last_seq = event.sequence;
                // Rendered once for every subscriber of this session.
                let render = || {
                    let rendered = session_event(event);
                    let tool = tool_call(&rendered.event);
                    AppendFrame {
                        wire: Framed::text(
                            &WsEvent::Append {
                                key: self.key.clone(),
                                event: rendered,
                            }
                            .to_json(),
                        ),
                        tool,
                    }
                };
                let tool = cache.with(&self.key, render, |frame: &AppendFrame| {
                    out.push(Piece::Framed(frame.wire.clone()));
                    frame.tool.clone()
                });
                if let Some((name, id)) = tool {
                    let mut now = phase("tool");
                    now.tool_name = Some(name);
                    now.tool_call_id = Some(id);
                    self.activity(now, None, out);
                }
                self.flush(out);
            }
            Item::Ephemeral { update, .. } => {
                if let Some(text) = agent_text(update) {
                    self.activity(phase("responding"), Some(text.to_owned()), out);
                } else if is_thought(update) {
                    self.activity(phase("thinking"), None, out);
                } else if let Some(now) = agent_activity(update) {
                    self.activity(now, None, out);
                }
            }
        }
    }
}

fn phase(name: &str) -> RunActivity {
    RunActivity {
        phase: name.to_owned(),
        tool_name: None,
        tool_call_id: None,
        detail: None,
        output_tail: None,
    }
}

/// The name and id of a rendered `tool_call` event.
fn tool_call(event: &Ipld) -> Option<(String, String)> {
    let Ipld::Map(map) = event else { return None };
    if map.get("type") != Some(&Ipld::String("tool_call".into())) {
        return None;
    }
    match (map.get("name"), map.get("id")) {
        (Some(Ipld::String(name)), Some(Ipld::String(id))) => Some((name.clone(), id.clone())),
        _ => None,
    }
}

/// The builtin agent's word on what it is doing (`_agentos/activity`,
/// e.g. waiting out a busy provider), as a Seed activity.
fn agent_activity(update: &Value) -> Option<RunActivity> {
    if update.get("sessionUpdate").and_then(Value::as_str)
        != Some(agentos_protocol::agent_ext::ACTIVITY_UPDATE)
    {
        return None;
    }
    let mut now = phase(
        update
            .get("phase")
            .and_then(Value::as_str)
            .unwrap_or("thinking"),
    );
    now.detail = update
        .get("detail")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Some(now)
}

fn is_thought(update: &Value) -> bool {
    update.get("sessionUpdate").and_then(Value::as_str) == Some("agent_thought_chunk")
}

/// The text of a live agent message chunk.
fn agent_text(update: &Value) -> Option<&str> {
    if update.get("sessionUpdate").and_then(Value::as_str) != Some("agent_message_chunk") {
        return None;
    }
    let content = update.get("content")?;
    if content.get("type").and_then(Value::as_str) != Some("text") {
        return None;
    }
    // A chunk with no text (one closing its message) says nothing live.
    content
        .get("text")
        .and_then(Value::as_str)
        .filter(|text| !text.is_empty())
}

/// The session subscriptions of one socket, by hub subscription id: a
/// list, since a socket holds a few (at most
/// `http.ws.maxSubscriptionsPerSocket`) and every item looks its own up.
#[derive(Default)]
pub(super) struct Render {
    views: Vec<(Arc<str>, SessionView)>,
}

impl Render {
    /// Adds to `out` the frames one entry becomes.
    pub(super) fn frames(&mut self, entry: Out, out: &mut Vec<Piece>) {
        match entry {
            Out::Frame(text) => out.push(Piece::Text(text)),
            Out::Framed(frame) => out.push(Piece::Framed(frame)),
            Out::Open {
                sub_id,
                key,
                link,
                after,
            } => {
                self.views.retain(|(id, _)| *id != sub_id);
                self.views.push((
                    sub_id,
                    SessionView {
                        key,
                        link,
                        partial: None,
                        partial_text: false,
                        last_seq: after,
                        pending: VecDeque::new(),
                        activity: None,
                    },
                ));
            }
            Out::Item { sub_id, item } => {
                if let Some(view) = self.view(&sub_id) {
                    view.item(&item, out);
                }
            }
            Out::Items { sub_id, items } => {
                if let Some(view) = self.view(&sub_id) {
                    for item in items.items() {
                        view.item(item, out);
                    }
                }
            }
            Out::State(state) => {
                for (_, view) in &mut self.views {
                    if view.link.session_id == state.info.session_id {
                        view.state(state.clone(), out);
                    }
                }
            }
            Out::End { sub_id, frame } => {
                if let Some(at) = self.views.iter().position(|(id, _)| *id == sub_id) {
                    self.views.swap_remove(at).1.done(out);
                }
                out.extend(frame.map(|f| Piece::Text(f.into())));
            }
            // A control frame: the writer adds it to the batch itself.
            Out::Pong(_) => {}
        }
    }

    fn view(&mut self, sub_id: &Arc<str>) -> Option<&mut SessionView> {
        self.views
            .iter_mut()
            .find(|(id, _)| Arc::ptr_eq(id, sub_id) || id == sub_id)
            .map(|(_, view)| view)
    }
}

/// Frames written together at most: one `writev` of a header and a
/// payload each.
const MAX_BATCH_FRAMES: usize = 512;
/// Queued bytes (as the outbox counts them) taken into one batch at most.
/// They leave the queue's count when taken, as a frame in a socket's own
/// write buffer did: the outbox's rule that one entry larger than the
/// whole bound passes when nothing else waits must not meet a write under
/// way. So a socket's write holds at most this (and one entry) outside the
/// bounds, mostly frames shared with other sockets.
const MAX_BATCH_BYTES: usize = 64 * 1024;

/// Adds what one entry becomes to the batch (through `pieces`, kept empty
/// between calls, and given back when a large entry grew it, as the wire's
/// own list is: an idle socket holds room for a few frames, no more).
fn take<W: AsyncWrite + Unpin>(
    entry: Out,
    render: &mut Render,
    wire: &mut Wire<W>,
    pieces: &mut Vec<Piece>,
) {
    match entry {
        Out::Pong(payload) => wire.control(OP_PONG, payload),
        entry => {
            render.frames(entry, pieces);
            for piece in pieces.drain(..) {
                match piece {
                    Piece::Text(text) => wire.text(text),
                    Piece::Framed(frame) => wire.framed(frame),
                }
            }
            if pieces.capacity() > KEPT_FRAMES {
                *pieces = Vec::new();
            }
        }
    }
}

/// Runs until the socket closes; returns once the close frame is sent (or
/// could not be, within `close_wait`).
pub(super) async fn run<W: AsyncWrite + Unpin>(
    mut wire: Wire<W>,
    mut queue: Queue,
    ping_every: Duration,
    close_wait: Duration,
) {
    let mut closing = queue.closing();
    let mut render = Render::default();
    let mut pieces = Vec::new();
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent_ok = true;
    'run: loop {
        if closing.borrow_and_update().is_some() {
            break;
        }
        tokio::select! {
            biased;
            _ = closing.changed() => continue,
            entry = queue.recv() => match entry {
                Some((entry, n)) => {
                    queue.release(n);
                    take(entry, &mut render, &mut wire, &mut pieces);
                    // What else is queued goes out in the same write.
                    let mut taken = n;
                    while wire.pending() < MAX_BATCH_FRAMES && taken < MAX_BATCH_BYTES {
                        let Ok((entry, n)) = queue.try_recv() else { break };
                        queue.release(n);
                        taken += n;
                        take(entry, &mut render, &mut wire, &mut pieces);
                    }
                }
                None => break,
            },
            _ = ping.tick() => wire.control(OP_PING, Bytes::new()),
        }
        // A send to a client that does not read waits; a close request
        // (its queue overflowing, shutdown) cuts the wait short, and the
        // close then finishes only the frame the cut write was in.
        let sent = tokio::select! {
            biased;
            _ = closing.changed() => continue 'run,
            sent = wire.send() => sent,
        };
        if sent.is_err() {
            sent_ok = false;
            break 'run;
        }
    }
    // Nothing queued is sent once the socket closes.
    queue.close();
    while let Ok((_, n)) = queue.try_recv() {
        queue.release(n);
    }
    if !sent_ok {
        queue.close_with(CLOSE_NORMAL);
        return;
    }
    let Close { code, reason } = closing.borrow().clone().unwrap_or(CLOSE_NORMAL);
    let _ = tokio::time::timeout(close_wait, wire.close(code, reason)).await;
}

#[cfg(test)]
mod tests {
    use agentos_protocol::host::{Actor, EventKind, StoredEvent};
    use serde_json::json;

    use super::*;
    use crate::sessions::{SessionInfo, SessionState};

    fn link() -> SessionLink {
        SessionLink {
            parent_session_id: None,
            run_id: None,
            session_id: "s".into(),
            agent_id: "a".into(),
            account_id: "z".into(),
            created_at_ms: 1,
        }
    }

    fn durable(seq: u64, payload: Value) -> Item {
        Item::durable(StoredEvent {
            session_id: "s".into(),
            sequence: seq,
            timestamp_ms: 5,
            kind: EventKind::SessionUpdate,
            correlation_id: None,
            outcome_status: None,
            terminal_reason: None,
            actor: Actor::Agent,
            payload_json: payload.to_string(),
        })
    }

    fn chunk(text: &str) -> Item {
        Item::Ephemeral {
            session_id: Arc::from("s"),
            after_sequence: 1,
            update: Arc::new(json!({"sessionUpdate": "agent_message_chunk",
                                    "content": {"type": "text", "text": text}})),
        }
    }

    fn info(seq: u64, state: SessionState) -> Arc<Announced> {
        Announced::new(SessionInfo {
            session_id: "s".into(),
            agent: "echo".into(),
            cwd: "/".into(),
            additional_directories: vec![],
            permission_policy: agentos_protocol::host::PermissionPolicy::Ask,
            state,
            latest_sequence: seq,
            oldest_retained_sequence: 1,
            retained_event_count: seq,
            retained_event_bytes: 0,
            title: None,
            description: None,
            plan: None,
            metadata: None,
            created_at_ms: 1,
            updated_at_ms: 2,
        })
    }

    /// A renderer with one session subscription open after row 1.
    fn opened() -> (Arc<str>, Render) {
        let sub: Arc<str> = Arc::from("sub");
        let mut render = Render::default();
        render.all(Out::Open {
            sub_id: sub.clone(),
            key: "sessions/s".into(),
            link: link(),
            after: 1,
        });
        (sub, render)
    }

    impl Piece {
        fn text(&self) -> &str {
            match self {
                Piece::Text(text) => text.as_str(),
                Piece::Framed(frame) => frame.payload(),
            }
        }
    }

    impl Render {
        /// The frames one entry becomes.
        fn all(&mut self, entry: Out) -> Vec<Piece> {
            let mut out = Vec::new();
            self.frames(entry, &mut out);
            out
        }
    }

    fn parse(frames: Vec<Piece>) -> Vec<Value> {
        frames
            .iter()
            .map(|f| serde_json::from_str(f.text()).unwrap())
            .collect()
    }

    #[test]
    fn partials_close_before_the_message_and_states_wait_for_their_rows() {
        let sub: Arc<str> = Arc::from("sub");
        let mut render = Render::default();
        let key = "sessions/s".to_string();
        assert!(render
            .all(Out::Open {
                sub_id: sub.clone(),
                key,
                link: link(),
                after: 1,
            })
            .is_empty());
        let item = |item| Out::Item {
            sub_id: sub.clone(),
            item,
        };
        let a = parse(render.all(item(chunk("Hel"))));
        let b = parse(render.all(item(chunk("lo"))));
        assert_eq!(a[0]["_"], "appendPartial");
        assert_eq!(a[0]["patch"]["textDelta"], "Hel");
        assert_eq!(a[0]["patch"]["activity"]["phase"], "responding");
        assert_eq!(a[0]["partialId"], b[0]["partialId"]);
        // The phase is said when it changes, not with every delta.
        assert!(b[0]["patch"].get("activity").is_none());
        // The state after the turn names row 2, not rendered yet: held.
        assert!(render
            .all(Out::State(info(2, SessionState::Idle)))
            .is_empty());
        let frames = parse(render.all(item(durable(
            2,
            json!({"sessionUpdate": "agent_message_chunk",
                   "content": {"type": "text", "text": "Hello"}}),
        ))));
        assert_eq!(frames.len(), 3, "{frames:?}");
        assert_eq!(frames[0]["patch"]["done"], true);
        assert_eq!(frames[0]["partialId"], a[0]["partialId"]);
        assert_eq!(frames[1]["_"], "append");
        assert_eq!(frames[1]["event"]["seq"], 2);
        assert_eq!(frames[1]["event"]["event"]["role"], "assistant");
        assert_eq!(frames[2]["_"], "change");
        assert_eq!(frames[2]["value"]["status"], "idle");
        // The next message has a new id.
        let c = parse(render.all(item(chunk("again"))));
        assert_ne!(c[0]["partialId"], a[0]["partialId"]);
        // A turn that ends without its message still closes the partial.
        let frames = parse(render.all(Out::State(info(2, SessionState::Idle))));
        assert_eq!(frames[0]["patch"]["done"], true);
        assert_eq!(frames[1]["_"], "change");
        // Items of a subscription that ended are not rendered.
        let end = render.all(Out::End {
            sub_id: sub.clone(),
            frame: Some("bye".into()),
        });
        assert_eq!(end.len(), 1);
        assert_eq!(end[0].text(), "bye");
        assert!(render.all(item(chunk("late"))).is_empty());
    }

    #[test]
    fn a_large_commit_leaves_no_room_held_once_it_is_taken() {
        let (sub, mut render) = opened();
        let items: Vec<Item> = (2..=300)
            .map(|seq| durable(seq, json!({"sessionUpdate": "plan", "entries": []})))
            .collect();
        let (_client, server) = tokio::io::duplex(1 << 16);
        let mut wire = Wire::new(server);
        let mut pieces = Vec::new();
        take(
            Out::Items {
                sub_id: sub,
                items: items.into(),
            },
            &mut render,
            &mut wire,
            &mut pieces,
        );
        assert_eq!(wire.pending(), 299);
        assert!(pieces.is_empty());
        assert!(pieces.capacity() <= KEPT_FRAMES, "{}", pieces.capacity());
    }

    #[test]
    fn a_state_is_rendered_once_for_every_socket_it_goes_to() {
        let (_, mut one) = opened();
        let (_, mut other) = opened();
        let state = info(1, SessionState::Idle);
        let a = one.all(Out::State(state.clone()));
        let b = other.all(Out::State(state));
        assert_eq!(a.len(), 1);
        assert_eq!(b.len(), 1);
        // One buffer, not two renderings of the same text.
        assert_eq!(a[0].text().as_ptr(), b[0].text().as_ptr());
        let change = &parse(a)[0];
        assert_eq!(change["_"], "change");
        assert_eq!(change["key"], "sessions/s");
        assert_eq!(change["value"]["status"], "idle");
        assert_eq!(change["value"]["agentId"], "a");
    }

    #[test]
    fn a_turn_that_ends_before_its_start_went_out_is_still_seen_to_start() {
        let (sub, mut render) = opened();
        let running = || SessionState::Running {
            prompt_id: Some("p".into()),
            started_at_ms: None,
        };
        // Both states name row 3, not out yet: held, in order, and a later
        // state replaces the end, never the start.
        assert!(render.all(Out::State(info(3, running()))).is_empty());
        assert!(render
            .all(Out::State(info(3, SessionState::Idle)))
            .is_empty());
        assert!(render
            .all(Out::State(info(3, SessionState::Idle)))
            .is_empty());
        let row = |seq| Out::Item {
            sub_id: sub.clone(),
            item: durable(
                seq,
                json!({"sessionUpdate": "user_message_chunk",
                                      "content": {"type": "text", "text": "hi"}}),
            ),
        };
        assert_eq!(parse(render.all(row(2))).len(), 1);
        let frames = parse(render.all(row(3)));
        let states: Vec<&Value> = frames
            .iter()
            .filter(|f| f["_"] == "change")
            .map(|f| &f["value"]["status"])
            .collect();
        assert_eq!(states, [&json!("streaming"), &json!("idle")], "{frames:?}");
        // A live state replaces a live one: only the latest start is held.
        assert!(render.all(Out::State(info(5, running()))).is_empty());
        assert!(render.all(Out::State(info(5, running()))).is_empty());
        render.all(row(4));
        let frames = parse(render.all(row(5)));
        assert_eq!(
            frames.iter().filter(|f| f["_"] == "change").count(),
            1,
            "{frames:?}"
        );
    }

    #[test]
    fn activity_follows_the_turn_start_thoughts_and_tool_calls() {
        let (sub, mut render) = opened();
        let item = |item| Out::Item {
            sub_id: sub.clone(),
            item,
        };
        let running = SessionState::Running {
            prompt_id: Some("p".into()),
            started_at_ms: Some(1),
        };
        let started = parse(render.all(Out::State(info(1, running))));
        assert_eq!(started[0]["patch"]["activity"]["phase"], "starting");
        assert_eq!(started[1]["_"], "change");
        let thought = parse(render.all(item(Item::Ephemeral {
            session_id: Arc::from("s"),
            after_sequence: 1,
            update: Arc::new(json!({"sessionUpdate": "agent_thought_chunk",
                                    "content": {"type": "text", "text": "hmm"}})),
        })));
        assert_eq!(thought[0]["patch"]["activity"]["phase"], "thinking");
        assert!(thought[0]["patch"].get("textDelta").is_none());
        // The agent waiting out a busy provider says so, with its detail.
        let waiting = parse(render.all(item(Item::Ephemeral {
            session_id: Arc::from("s"),
            after_sequence: 1,
            update: Arc::new(
                json!({"sessionUpdate": agentos_protocol::agent_ext::ACTIVITY_UPDATE,
                                    "phase": "thinking", "detail": "busy; again in 1 s"}),
            ),
        })));
        assert_eq!(waiting[0]["patch"]["activity"]["phase"], "thinking");
        assert_eq!(
            waiting[0]["patch"]["activity"]["detail"],
            "busy; again in 1 s"
        );
        let tool = parse(render.all(item(durable(
            2,
            json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "read"}),
        ))));
        // No text went out, so no message is closed: the call, then the
        // new activity.
        assert_eq!(tool.len(), 2, "{tool:?}");
        assert_eq!(tool[0]["_"], "append");
        assert_eq!(tool[1]["patch"]["activity"]["phase"], "tool");
        assert_eq!(tool[1]["patch"]["activity"]["toolName"], "read");
        assert_eq!(tool[1]["patch"]["activity"]["toolCallId"], "t1");
    }
}
