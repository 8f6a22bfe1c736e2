//! Every open `/agents/ws` socket: how many there may be
//! (`http.ws.maxSockets`), which keys each holds (so the change feed
//! reaches only the sockets that asked), the close of the sockets a revoked
//! signer used, and the graceful close of all of them at shutdown.
//!
//! The index is one lock held only for lookups and inserts; nothing is
//! sent while it is held, and no other lock is taken under it. Each
//! account's open sockets are counted under another lock
//! (`http.ws.maxSocketsPerAccount`), taken when a socket binds its account
//! and when it goes.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;

use super::error::WsError;
use super::feed::{FeedMsg, FeedSender};
use super::outbox::{budget, Budget, CLOSE_REVOKED, CLOSE_SHUTDOWN};
use super::socket::{Index as SocketIndex, Socket};
use crate::config::WsLimits;
use crate::sessions::Sessions;

#[derive(Default)]
struct Index {
    sockets: HashMap<u64, Arc<Socket>>,
    /// Sockets holding each key.
    by_key: HashMap<String, HashSet<u64>>,
    /// Sockets holding keys that depend on each agent, with how many.
    by_agent: HashMap<String, HashMap<u64, usize>>,
    /// `account/` keys held by some socket.
    account_keys: usize,
}

/// The registry of open sockets; also the change feed (`changes.rs`).
pub struct Sockets {
    pub(super) limits: WsLimits,
    pub(super) sessions: Sessions,
    open: AtomicUsize,
    next_id: AtomicU64,
    shutting_down: AtomicBool,
    closed_all: Notify,
    index: Mutex<Index>,
    /// Whether the task relaying session states to sockets runs.
    pub(super) relaying: AtomicBool,
    /// What every socket's queue counts against (`http.ws.maxQueuedBytes`).
    pub(super) budget: Arc<Budget>,
    /// Open sockets bound to each account (`http.ws.maxSocketsPerAccount`).
    /// Taken on its own, or with one socket's state lock inside it.
    accounts: Mutex<HashMap<String, usize>>,
    /// The account-wide feed (`account.rs`), once a socket held an
    /// `account/` or `agents/` key.
    pub(super) feed: OnceLock<FeedSender>,
    /// Bumped whenever who may see an agent changes: the feed forgets the
    /// audiences it read.
    audience_epoch: AtomicU64,
    /// `Index::account_keys`, readable without the index's lock (the hub's
    /// tap asks under the hub's).
    account_keys: AtomicUsize,
}

/// A socket's place under `http.ws.maxSockets`, released on drop.
pub struct Permit {
    sockets: Arc<Sockets>,
    pub(super) id: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.sockets.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.sockets.closed_all.notify_waiters();
        }
    }
}

impl Sockets {
    pub fn new(limits: WsLimits, sessions: Sessions) -> Sockets {
        Sockets {
            sessions,
            open: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            shutting_down: AtomicBool::new(false),
            closed_all: Notify::new(),
            index: Mutex::new(Index::default()),
            relaying: AtomicBool::new(false),
            budget: budget(limits.max_queued_bytes),
            accounts: Mutex::default(),
            feed: OnceLock::new(),
            audience_epoch: AtomicU64::new(0),
            account_keys: AtomicUsize::new(0),
            limits,
        }
    }

    fn index_lock(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for one more socket, unless the server is shutting down or
    /// `http.ws.maxSockets` are open.
    pub fn try_open(self: &Arc<Self>) -> Option<Permit> {
        if self.shutting_down.load(Ordering::Acquire) {
            return None;
        }
        let max = self.limits.max_sockets as usize;
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            })
            .ok()?;
        Some(Permit {
            sockets: self.clone(),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Sockets open now.
    pub fn open_sockets(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    pub(super) fn register(&self, socket: Arc<Socket>) {
        let mut index = self.index_lock();
        index.sockets.insert(socket.id, socket.clone());
        drop(index);
        // A socket that opened as shutdown began closes with the others.
        if self.shutting_down.load(Ordering::Acquire) {
            socket.outbox.close(CLOSE_SHUTDOWN);
        }
    }

    fn accounts(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.accounts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Binds `socket` to `account` (its first verified frame's), within
    /// `http.ws.maxSocketsPerAccount`; a socket already bound to it passes.
    pub(super) fn bind(&self, socket: &Socket, account: &str) -> Result<(), WsError> {
        let mut accounts = self.accounts();
        socket.bind_account(account, || {
            let max = self.limits.max_sockets_per_account;
            let open = accounts.entry(account.to_owned()).or_default();
            if *open >= max as usize {
                return Err(WsError::AccountSocketsLimit(max));
            }
            *open += 1;
            Ok(())
        })
    }

    /// Forgets a closed socket and every key it held.
    pub(super) fn unregister(&self, socket: &Socket) {
        if let Some(account) = socket.account() {
            let mut accounts = self.accounts();
            if let Some(open) = accounts.get_mut(&account) {
                *open = open.saturating_sub(1);
                if *open == 0 {
                    accounts.remove(&account);
                }
            }
        }
        let keys = socket.keys();
        let mut index = self.index_lock();
        index.sockets.remove(&socket.id);
        for (key, hold) in keys {
            index.remove(socket.id, &key, hold.agent());
        }
        self.account_keys
            .store(index.account_keys, Ordering::Release);
    }

    pub(super) fn index(&self, socket: u64, key: &str, agent: Option<&str>) {
        let mut index = self.index_lock();
        let holders = index.by_key.entry(key.to_owned()).or_default();
        let first = holders.is_empty();
        holders.insert(socket);
        if first && key.starts_with("account/") {
            index.account_keys += 1;
            self.account_keys
                .store(index.account_keys, Ordering::Release);
        }
        if let Some(agent) = agent {
            *index
                .by_agent
                .entry(agent.to_owned())
                .or_default()
                .entry(socket)
                .or_default() += 1;
        }
    }

    pub(super) fn unindex(&self, socket: u64, key: &str, agent: Option<&str>) {
        let mut index = self.index_lock();
        index.remove(socket, key, agent);
        self.account_keys
            .store(index.account_keys, Ordering::Release);
    }

    /// Hands the account-wide feed (`account.rs`) a message, if it runs.
    pub(super) fn offer_feed(&self, msg: FeedMsg) {
        if let Some(feed) = self.feed.get() {
            feed.offer(msg);
        }
    }

    /// The sockets indexed under `key` (each still checks that it holds
    /// it).
    pub(super) fn holders(&self, key: &str) -> Vec<Arc<Socket>> {
        let index = self.index_lock();
        index
            .by_key
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|id| index.sockets.get(id).cloned())
            .collect()
    }

    /// The sockets holding any key that depends on `agent_id`.
    pub(super) fn watchers(&self, agent_id: &str) -> Vec<Arc<Socket>> {
        let index = self.index_lock();
        index
            .by_agent
            .get(agent_id)
            .into_iter()
            .flat_map(HashMap::keys)
            .filter_map(|id| index.sockets.get(id).cloned())
            .collect()
    }

    /// Whether some socket holds an `account/` key; takes no lock.
    pub(super) fn holds_any_account(&self) -> bool {
        self.account_keys.load(Ordering::Acquire) > 0
    }

    /// Every socket holding an `account/` key.
    pub(super) fn account_holders(&self) -> Vec<Arc<Socket>> {
        let index = self.index_lock();
        index
            .by_key
            .iter()
            .filter(|(key, _)| key.starts_with("account/"))
            .flat_map(|(_, ids)| ids.iter())
            .filter_map(|id| index.sockets.get(id).cloned())
            .collect()
    }

    /// Whether socket `id` is still open.
    pub(super) fn is_open(&self, id: u64) -> bool {
        self.index_lock().sockets.contains_key(&id)
    }

    pub(super) fn audience_epoch(&self) -> u64 {
        self.audience_epoch.load(Ordering::Acquire)
    }

    /// Who may see some agent changed (a collaborator came or went, its
    /// public read was set, it was deleted).
    pub fn audiences_changed(&self) {
        self.audience_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// True when no socket holds any key: the change feed has nobody to
    /// tell.
    pub fn is_quiet(&self) -> bool {
        self.index_lock().by_key.is_empty()
    }

    /// Closes, with 1008 "signer revoked", every socket on which `signer`
    /// signed a frame for `account`; answers how many. Called after the
    /// revocation committed: a frame verified before it and noted after this
    /// scan is caught by the check `frames.rs` makes after noting a signer.
    pub fn close_signer(&self, account: &str, signer: &str) -> usize {
        // Revocations are rare; a scan keeps the hot index free of signers.
        let sockets: Vec<Arc<Socket>> = self.index_lock().sockets.values().cloned().collect();
        let mut closed = 0;
        for socket in sockets {
            if socket.used_by(account, signer) {
                socket.outbox.close(CLOSE_REVOKED);
                closed += 1;
            }
        }
        closed
    }

    /// Closes every socket with 1001 "server shutting down", refuses new
    /// ones, and waits (at most `deadline`) until all are gone. True when
    /// they all closed in time.
    pub async fn close_all(&self, deadline: Duration) -> bool {
        self.shutting_down.store(true, Ordering::Release);
        let sockets: Vec<Arc<Socket>> = self.index_lock().sockets.values().cloned().collect();
        for socket in &sockets {
            socket.outbox.close(CLOSE_SHUTDOWN);
        }
        drop(sockets);
        let all_closed = async {
            loop {
                let closed = self.closed_all.notified();
                tokio::pin!(closed);
                closed.as_mut().enable();
                if self.open.load(Ordering::Acquire) == 0 {
                    return;
                }
                closed.await;
            }
        };
        tokio::time::timeout(deadline, all_closed).await.is_ok()
    }
}

impl SocketIndex for Sockets {
    fn unindex(&self, socket: u64, key: &str, agent: Option<&str>) {
        Sockets::unindex(self, socket, key, agent);
    }
}

impl Index {
    fn remove(&mut self, socket: u64, key: &str, agent: Option<&str>) {
        if let Some(ids) = self.by_key.get_mut(key) {
            ids.remove(&socket);
            if ids.is_empty() {
                self.by_key.remove(key);
                if key.starts_with("account/") {
                    self.account_keys = self.account_keys.saturating_sub(1);
                }
            }
        }
        let Some(agent) = agent else {
            return;
        };
        let Some(counts) = self.by_agent.get_mut(agent) else {
            return;
        };
        if let Some(count) = counts.get_mut(&socket) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&socket);
            }
        }
        if counts.is_empty() {
            self.by_agent.remove(agent);
        }
    }
}
