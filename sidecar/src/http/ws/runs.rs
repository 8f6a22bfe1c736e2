//! A `runs/<rootRunId>` subscription's feed: once the subscription is
//! confirmed, one `change` per run of the tree as it stands, then each run's
//! journal after `afterSeq`, then, live, every transition of a run of the
//! tree, every journal entry committed and every progress patch. The feed
//! listens before it replays, so nothing falls between the two; a journal
//! entry already replayed is not sent again, and a feed that fell behind
//! the broadcast sends the tree's state and the entries it missed again.
//! It ends with its socket (it holds it weakly) or its hold.

use std::collections::HashMap;
use std::sync::Weak;

use agentos_protocol::seed::ws::RunWsEvent;
use tokio::sync::{broadcast, oneshot};

use super::socket::Socket;
use crate::http::common::render;
use crate::runs::{JournalPage, JournalRow, RunEvent, RunScope, Runs};

struct Feed {
    runs: Runs,
    socket: Weak<Socket>,
    key: String,
    root: String,
    /// The last journal seq sent, per run; `floor` for a run not seen yet
    /// (the subscription's `afterSeq`, which applies to every run).
    sent: HashMap<String, u64>,
    floor: u64,
}

impl Feed {
    /// Sends a frame; false when the socket is gone or closing.
    fn send(&self, event: RunWsEvent) -> bool {
        match self.socket.upgrade() {
            Some(socket) if socket.holds(&self.key) => socket.outbox.frame(event.to_json()),
            _ => false,
        }
    }

    fn entry(&mut self, row: JournalRow) -> bool {
        let last = self.sent.entry(row.run_id.clone()).or_insert(self.floor);
        if row.seq <= *last {
            return true;
        }
        *last = row.seq;
        self.send(RunWsEvent::Append {
            key: self.key.clone(),
            run_id: row.run_id,
            seq: row.seq,
            entry: row.entry,
            created_at: row.created_at_ms,
        })
    }

    /// The tree's state, and each run's journal after what was sent.
    async fn replay(&mut self) -> bool {
        let Ok(tree) = self
            .runs
            .list(&RunScope::Root(self.root.clone()), None, None)
            .await
        else {
            return true;
        };
        for run in &tree {
            let change = RunWsEvent::Change {
                key: self.key.clone(),
                value: Box::new(render::run(run)),
            };
            if !self.send(change) {
                return false;
            }
        }
        for run in tree {
            loop {
                let after = self.sent.get(&run.run_id).copied().unwrap_or(self.floor);
                let Ok(page) = JournalPage::new(Some(after), None) else {
                    break;
                };
                let Ok(rows) = self.runs.journal_page(&run, page).await else {
                    break;
                };
                let full = page.is_full(rows.len());
                for row in rows {
                    if !self.entry(row) {
                        return false;
                    }
                }
                if !full {
                    break;
                }
            }
        }
        true
    }
}

pub(super) async fn forward(
    runs: Runs,
    socket: Weak<Socket>,
    key: String,
    root: String,
    after_seq: Option<u64>,
    mut events: broadcast::Receiver<RunEvent>,
    start: oneshot::Receiver<()>,
) {
    if start.await.is_err() {
        return;
    }
    let mut feed = Feed {
        runs,
        socket,
        key,
        root,
        sent: HashMap::new(),
        floor: after_seq.unwrap_or(0),
    };
    if !feed.replay().await {
        return;
    }
    loop {
        let sent = match events.recv().await {
            Ok(event) if event.root_run_id() != feed.root => true,
            Ok(RunEvent::Changed(run)) => {
                let key = feed.key.clone();
                feed.send(RunWsEvent::Change {
                    key,
                    value: Box::new(render::run(&run)),
                })
            }
            Ok(RunEvent::Journal { row, .. }) => feed.entry(row),
            // Not one of a tree anybody may subscribe to; read it as after
            // a lag, were it one.
            Ok(RunEvent::Moved { .. }) => feed.replay().await,
            Ok(RunEvent::Partial { run_id, patch, .. }) => {
                let key = feed.key.clone();
                feed.send(RunWsEvent::AppendPartial {
                    key,
                    partial_id: format!("{run_id}:progress"),
                    run_id,
                    patch,
                })
            }
            Err(broadcast::error::RecvError::Lagged(_)) => feed.replay().await,
            Err(broadcast::error::RecvError::Closed) => false,
        };
        if !sent {
            return;
        }
    }
}
