//! The signed API's table of open connections, which bounds them
//! (`http.maxConnections`) without letting idle ones lock a real client
//! out. Each connection is idle or inside a request (its service was
//! called and has not answered). At the bound, a new connection takes the
//! place of an idle one: first one that never sent a request head (oldest
//! first), then the one idle longest between requests. Only when every
//! connection is inside a request does the listener wait for one to end.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::Notify;

struct Conn {
    /// Requests begun on it so far.
    requests: u64,
    /// Requests it is inside (HTTP/1.1: at most one, but a future may
    /// outlive its response by a moment).
    busy: u32,
    /// Since when it has been idle (its opening, before any request).
    idle_since: Instant,
    /// Told to close when its place is taken.
    evict: Arc<Notify>,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    live: HashMap<u64, Conn>,
}

/// The open connections and their bound.
pub(super) struct Conns {
    table: Mutex<Table>,
    /// Woken whenever a connection ends or goes idle.
    changed: Notify,
    max: usize,
}

/// One connection's place in the table; leaving it (drop) frees it.
pub(super) struct Place {
    conns: Arc<Conns>,
    id: u64,
    /// Notified when another connection took this one's place.
    pub(super) evicted: Arc<Notify>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.conns.lock().live.remove(&self.id);
        self.conns.changed.notify_waiters();
    }
}

impl Conns {
    pub(super) fn new(max: u32) -> Arc<Conns> {
        Arc::new(Conns {
            table: Mutex::default(),
            changed: Notify::new(),
            max: max.max(1) as usize,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table holds no invariant a panic could break halfway.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns once no connection is open.
    pub(super) async fn drained(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.lock().live.is_empty() {
                return;
            }
            changed.await;
        }
    }

    /// A place for a connection just accepted: a free one, or an idle
    /// connection's (that connection is told to close), or, when every
    /// connection is inside a request, the first to free up.
    pub(super) async fn admit(self: &Arc<Self>) -> Place {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut table = self.lock();
                if table.live.len() >= self.max {
                    if let Some(victim) = idlest(&table.live) {
                        if let Some(conn) = table.live.remove(&victim) {
                            conn.evict.notify_one();
                        }
                    }
                }
                if table.live.len() < self.max {
                    table.next_id += 1;
                    let id = table.next_id;
                    let evicted = Arc::new(Notify::new());
                    table.live.insert(
                        id,
                        Conn {
                            requests: 0,
                            busy: 0,
                            idle_since: Instant::now(),
                            evict: evicted.clone(),
                        },
                    );
                    return Place {
                        conns: self.clone(),
                        id,
                        evicted,
                    };
                }
            }
            changed.await;
        }
    }

    fn begin_request(&self, id: u64) {
        if let Some(conn) = self.lock().live.get_mut(&id) {
            conn.requests += 1;
            conn.busy += 1;
        }
    }

    fn end_request(&self, id: u64) {
        let idle = match self.lock().live.get_mut(&id) {
            Some(conn) => {
                conn.busy = conn.busy.saturating_sub(1);
                if conn.busy == 0 {
                    conn.idle_since = Instant::now();
                }
                conn.busy == 0
            }
            None => false,
        };
        if idle {
            self.changed.notify_waiters();
        }
    }
}

/// The idle connection to close first: one that never sent a request
/// head, oldest first, else the one idle longest.
fn idlest(live: &HashMap<u64, Conn>) -> Option<u64> {
    live.iter()
        .filter(|(_, conn)| conn.busy == 0)
        .min_by_key(|(_, conn)| (conn.requests > 0, conn.idle_since))
        .map(|(id, _)| *id)
}

/// The connection's service: the router's, marking the connection inside
/// a request from the moment its head is parsed until its answer is
/// ready. A switch to a WebSocket (101) is not idle: the connection is
/// handed over to the socket, and must not be closed on the way.
#[derive(Clone)]
pub(super) struct Tracked<S> {
    pub(super) inner: S,
    pub(super) conns: Arc<Conns>,
    pub(super) id: u64,
}

impl Place {
    pub(super) fn track<S>(&self, inner: S) -> Tracked<S> {
        Tracked {
            inner,
            conns: self.conns.clone(),
            id: self.id,
        }
    }
}

/// Ends its request when dropped, however the future ended.
struct InRequest {
    conns: Arc<Conns>,
    id: u64,
    upgraded: bool,
}

impl Drop for InRequest {
    fn drop(&mut self) {
        if !self.upgraded {
            self.conns.end_request(self.id);
        }
    }
}

impl<S, B> hyper::service::Service<hyper::Request<B>> for Tracked<S>
where
    S: hyper::service::Service<hyper::Request<B>, Response = axum::response::Response>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn call(&self, request: hyper::Request<B>) -> Self::Future {
        self.conns.begin_request(self.id);
        let mut guard = InRequest {
            conns: self.conns.clone(),
            id: self.id,
            upgraded: false,
        };
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            if let Ok(response) = &answer {
                guard.upgraded = response.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS;
            }
            drop(guard);
            answer
        })
    }
}
