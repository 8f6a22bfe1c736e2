//! `account/<id>` and `agents/<id>` as the reference serves them: a socket
//! holding `account/<self>` receives every frame of every agent the account
//! owns or collaborates on (each session's `append` and `appendPartial`,
//! its `change`, each run's `change`, `append` and `appendPartial`, under
//! their own `sessions/…` and `runs/…` keys), and a socket holding
//! `agents/<id>` receives the `change` of each of that agent's sessions.
//! Each appended session event is also an account `change` with reason
//! `session-event` (see `changes.rs`).
//!
//! The feed is one task, started when a socket first holds such a key. The
//! session hub hands it every committed event and live update (a tap, which
//! never waits), the session-state relay every new state, and the runs'
//! broadcast every run event; it resolves who may see each (the session's
//! agent, that agent's owner and accepted collaborators, read once and
//! kept until an agent's audience changes) and queues the frames to those
//! sockets. A socket that holds a session or run directly gets it from that
//! subscription alone. Sessions reach an account socket through views of
//! their own in its writer (the same rendering as a subscription, opened at
//! the first item), at most [`MAX_VIEWS`] per socket, the oldest closed
//! first. What waits for the feed is bounded (`feed.rs`): past its bound,
//! the sockets holding an `account/` key are closed as fallen behind
//! (1008), and their clients subscribe again.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use agentos_protocol::seed::ws::RunWsEvent;
use tokio::sync::broadcast;
use tungstenite::Utf8Bytes;

use super::changes::{audience, reason};
use super::feed::{self, FeedMsg, FeedReceiver, FEED_MESSAGES};
use super::outbox::{Announced, Out, CLOSE_OVERFLOW};
use super::socket::Socket;
use super::sockets::Sockets;
use crate::control::{Control, SessionLink};
use crate::http::common::render;
use crate::runs::{RunEvent, Runs};
use crate::sessions::{Item, Tap};

/// Sessions one socket sees through its account at once (each view is
/// about 700 bytes of render state in its writer; a closed one opens again
/// at the session's next item).
pub const MAX_VIEWS: usize = 64;
/// Sessions, agents and runs whose audience the feed keeps, each.
const CACHE_ENTRIES: usize = 16_384;
/// How long a session found linked to no agent is taken to have none.
const UNLINKED_FOR: Duration = Duration::from_secs(5);

impl Sockets {
    /// Starts the account-wide feed, once.
    pub(super) fn start_feed(self: &Arc<Self>, control: Control, runs: Runs) {
        if self.feed.get().is_some() {
            return;
        }
        let (sender, rx) = feed::channel(FEED_MESSAGES);
        if self.feed.set(sender).is_err() {
            return;
        }
        self.sessions
            .hub()
            .set_tap(Box::new(HubTap(Arc::downgrade(self))));
        let feed = Feed {
            sockets: Arc::downgrade(self),
            control,
            links: HashMap::new(),
            audiences: HashMap::new(),
            roots: HashMap::new(),
            epoch: self.audience_epoch(),
            views: HashMap::new(),
            handled: 0,
        };
        let run_events = runs.subscribe();
        tokio::spawn(feed.run(rx, run_events));
    }
}

/// What the session hub hands the feed: session items, and only while
/// some socket is account-wide (otherwise nothing is rendered for it).
struct HubTap(Weak<Sockets>);

impl Tap for HubTap {
    fn wants(&self) -> bool {
        self.0.upgrade().is_some_and(|s| s.holds_any_account())
    }

    fn see(&self, session_id: &str, item: &Item) {
        if let Some(sockets) = self.0.upgrade() {
            sockets.offer_feed(FeedMsg::Item {
                session_id: Arc::from(session_id),
                item: item.clone(),
            });
        }
    }
}

/// The sessions one socket sees through its account, oldest first.
#[derive(Default)]
struct Views {
    order: VecDeque<Arc<str>>,
}

struct Feed {
    sockets: Weak<Sockets>,
    control: Control,
    /// Each session's link (its agent), once read; `None`, read at that
    /// instant, for a session of no agent (the host door's own), asked
    /// again after [`UNLINKED_FOR`].
    links: HashMap<String, (Option<Arc<SessionLink>>, Instant)>,
    /// Each agent's audience, as of `epoch`.
    audiences: HashMap<String, Arc<Vec<String>>>,
    /// Each run tree's agent, learned from its runs' changes.
    roots: HashMap<String, String>,
    epoch: u64,
    /// Account views, by socket id.
    views: HashMap<u64, Views>,
    handled: u64,
}

fn view_id(session_id: &str) -> Arc<str> {
    Arc::from(format!("account:{session_id}"))
}

impl Feed {
    async fn run(mut self, mut rx: FeedReceiver, mut run_events: broadcast::Receiver<RunEvent>) {
        loop {
            tokio::select! {
                msg = rx.recv() => {
                    let Some(msg) = msg else { return };
                    let Some(sockets) = self.sockets.upgrade() else { return };
                    if rx.fell_behind() {
                        self.fell_behind(&sockets);
                    }
                    match msg {
                        FeedMsg::Item { session_id, item } => {
                            self.item(&sockets, &session_id, &item).await;
                        }
                        FeedMsg::State(info) => self.state(&sockets, &info).await,
                        FeedMsg::Renamed(session_id) => self.renamed(&sockets, &session_id).await,
                    }
                    self.tidy(&sockets);
                }
                event = run_events.recv() => match event {
                    Ok(event) => {
                        let Some(sockets) = self.sockets.upgrade() else { return };
                        self.run_event(&sockets, event).await;
                    }
                    Err(broadcast::error::RecvError::Lagged(skipped)) => {
                        tracing::warn!(skipped, "the account feed fell behind the run events");
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }

    /// What waited for the feed did not fit: every account-wide socket
    /// missed something, so each is closed and its client starts again.
    fn fell_behind(&mut self, sockets: &Sockets) {
        tracing::warn!("the account feed fell behind; closing the sockets that hold an account");
        for socket in sockets.account_holders() {
            socket.outbox.close(CLOSE_OVERFLOW);
        }
        self.views.clear();
    }

    /// Forgets audiences read before they last changed, and views of
    /// sockets that are gone.
    fn tidy(&mut self, sockets: &Sockets) {
        let epoch = sockets.audience_epoch();
        if epoch != self.epoch {
            self.epoch = epoch;
            self.audiences.clear();
        }
        self.handled += 1;
        if self.handled.is_multiple_of(1024) {
            self.views.retain(|id, _| sockets.is_open(*id));
        }
    }

    async fn link(&mut self, session_id: &str) -> Option<Arc<SessionLink>> {
        match self.links.get(session_id) {
            Some((Some(link), _)) => return Some(link.clone()),
            Some((None, at)) if at.elapsed() < UNLINKED_FOR => return None,
            _ => {}
        }
        let link = match self.control.session_agent(session_id).await {
            Ok(link) => link.map(Arc::new),
            Err(e) => {
                tracing::debug!(session = %session_id, error = %e, "no link for the account feed");
                return None;
            }
        };
        if self.links.len() >= CACHE_ENTRIES {
            self.links.clear();
        }
        // Not a Seed session (the host door's own), or gone: its events
        // are not looked up one by one.
        self.links
            .insert(session_id.to_owned(), (link.clone(), Instant::now()));
        link
    }

    async fn audience(&mut self, agent_id: &str) -> Option<Arc<Vec<String>>> {
        if let Some(accounts) = self.audiences.get(agent_id) {
            return Some(accounts.clone());
        }
        let read = async {
            let agent = self.control.get_agent(agent_id).await?;
            let collaborators = self.control.list_collaborators(agent_id).await?;
            Ok::<_, crate::control::ControlError>(agent.map(|a| audience(&a, &collaborators)))
        };
        let accounts = match read.await {
            Ok(Some(accounts)) => Arc::new(accounts),
            Ok(None) => return None,
            Err(e) => {
                tracing::debug!(agent = %agent_id, error = %e, "no audience for the account feed");
                return None;
            }
        };
        if self.audiences.len() >= CACHE_ENTRIES {
            self.audiences.clear();
        }
        self.audiences.insert(agent_id.to_owned(), accounts.clone());
        Some(accounts)
    }

    /// The sockets of `accounts` that hold their `account/` key.
    fn account_sockets(sockets: &Sockets, accounts: &[String]) -> Vec<Arc<Socket>> {
        accounts
            .iter()
            .flat_map(|account| sockets.holders(&format!("account/{account}")))
            .collect()
    }

    /// Opens the socket's view of `link`'s session unless it has one;
    /// answers its id. The oldest view goes when the socket has
    /// [`MAX_VIEWS`].
    fn view(&mut self, socket: &Socket, link: &SessionLink, after: u64) -> Arc<str> {
        let views = self.views.entry(socket.id).or_default();
        if let Some(id) = views
            .order
            .iter()
            .find(|id| id.strip_prefix("account:") == Some(link.session_id.as_str()))
        {
            return id.clone();
        }
        if views.order.len() >= MAX_VIEWS {
            if let Some(oldest) = views.order.pop_front() {
                let _ = socket.outbox.push(Out::End {
                    sub_id: oldest,
                    frame: None,
                });
            }
        }
        let id = view_id(&link.session_id);
        views.order.push_back(id.clone());
        let _ = socket.outbox.push(Out::Open {
            sub_id: id.clone(),
            key: format!("sessions/{}", link.session_id),
            link: link.clone(),
            after,
        });
        id
    }

    fn has_view(&self, socket: u64, session_id: &str) -> bool {
        self.views.get(&socket).is_some_and(|v| {
            v.order
                .iter()
                .any(|id| id.strip_prefix("account:") == Some(session_id))
        })
    }

    /// A socket now holding the session itself gets it from there alone.
    fn close_view(&mut self, socket: &Socket, session_id: &str) {
        let Some(views) = self.views.get_mut(&socket.id) else {
            return;
        };
        if let Some(at) = views
            .order
            .iter()
            .position(|id| id.strip_prefix("account:") == Some(session_id))
        {
            if let Some(id) = views.order.remove(at) {
                let _ = socket.outbox.push(Out::End {
                    sub_id: id,
                    frame: None,
                });
            }
        }
    }

    async fn item(&mut self, sockets: &Sockets, session_id: &str, item: &Item) {
        let Some(link) = self.link(session_id).await else {
            return;
        };
        let Some(accounts) = self.audience(&link.agent_id).await else {
            return;
        };
        let key = format!("sessions/{session_id}");
        let after = match item {
            Item::Durable(event, ..) => event.sequence.saturating_sub(1),
            Item::Ephemeral { after_sequence, .. } => *after_sequence,
        };
        for socket in Self::account_sockets(sockets, &accounts) {
            if socket.holds(&key) {
                self.close_view(&socket, session_id);
                continue;
            }
            let sub_id = self.view(&socket, &link, after);
            let _ = socket.outbox.push(Out::Item {
                sub_id,
                item: item.clone(),
            });
        }
        if let Item::Durable(..) = item {
            sockets.account_changed(
                &accounts,
                reason::SESSION_EVENT,
                Some(&link.agent_id),
                Some(session_id),
            );
        }
    }

    async fn state(&mut self, sockets: &Sockets, state: &Arc<Announced>) {
        let info = &state.info;
        let Some(link) = self.link(&info.session_id).await else {
            return;
        };
        let Some(accounts) = self.audience(&link.agent_id).await else {
            return;
        };
        let key = format!("sessions/{}", info.session_id);
        for socket in Self::account_sockets(sockets, &accounts) {
            if socket.holds(&key) {
                continue;
            }
            self.view(&socket, &link, info.latest_sequence);
            let _ = socket.outbox.push(Out::State(state.clone()));
        }
        // The agent's page: the session's state under its own key, as the
        // reference sends it there, in the frame its own subscribers get.
        for socket in sockets.holders(&format!("agents/{}", link.agent_id)) {
            let allowed = socket.account().is_some_and(|a| accounts.contains(&a));
            if !allowed || socket.holds(&key) || self.has_view(socket.id, &info.session_id) {
                continue;
            }
            let _ = socket.outbox.push(Out::Framed(state.frame(&key, &link)));
        }
    }

    async fn renamed(&mut self, sockets: &Sockets, session_id: &str) {
        let Some(link) = self.link(session_id).await else {
            return;
        };
        let Some(accounts) = self.audience(&link.agent_id).await else {
            return;
        };
        sockets.account_changed(
            &accounts,
            reason::SESSION_UPDATED,
            Some(&link.agent_id),
            Some(session_id),
        );
    }

    async fn run_event(&mut self, sockets: &Sockets, event: RunEvent) {
        // A run no feed shows is of no account.
        if !sockets.holds_any_account() || matches!(event, RunEvent::Moved { .. }) {
            return;
        }
        let root = event.root_run_id().to_owned();
        let agent_id = match &event {
            RunEvent::Changed(run) => {
                let Some(agent_id) = run.agent_id.clone() else {
                    return;
                };
                if self.roots.len() >= CACHE_ENTRIES {
                    self.roots.clear();
                }
                self.roots.insert(root.clone(), agent_id.clone());
                agent_id
            }
            _ => match self.roots.get(&root) {
                Some(agent_id) => agent_id.clone(),
                None => return,
            },
        };
        let Some(accounts) = self.audience(&agent_id).await else {
            return;
        };
        let key = format!("runs/{root}");
        let frame: Utf8Bytes = match event {
            RunEvent::Changed(run) => RunWsEvent::Change {
                key: key.clone(),
                value: Box::new(render::run(&run)),
            },
            RunEvent::Journal { row, .. } => RunWsEvent::Append {
                key: key.clone(),
                run_id: row.run_id,
                seq: row.seq,
                entry: row.entry,
                created_at: row.created_at_ms,
            },
            RunEvent::Partial { run_id, patch, .. } => RunWsEvent::AppendPartial {
                key: key.clone(),
                partial_id: format!("{run_id}:progress"),
                run_id,
                patch,
            },
            RunEvent::Moved { .. } => return,
        }
        .to_json()
        .into();
        for socket in Self::account_sockets(sockets, &accounts) {
            if !socket.holds(&key) {
                socket.outbox.frame(frame.clone());
            }
        }
    }
}
