//! The reference server's outboxes: what a connection's writer task is
//! sent, and the queue that carries it, bounded in bytes for each
//! connection and for all of them together. Connection tasks and the
//! SQLite thread both answer through an outbox; going over a bound tells
//! the connection (or, over the total, the one with the most unread) to
//! close rather than buffer for a client that stopped reading.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use agentos_protocol::ars::{self, GoAwayReason, ResponsePayload};
use tokio::sync::mpsc as tmpsc;

/// What a connection's writer task sends.
pub(super) enum Outgoing {
    Response(u32, ResponsePayload),
    /// Responses the SQLite thread produced in one pass, in order.
    Responses(Vec<(u32, ResponsePayload)>),
    GoAway(GoAwayReason),
    /// The reader is done; stop once everything before this is written.
    Close,
}

impl Outgoing {
    /// About what this costs once encoded: what bounds an outbox.
    pub(super) fn approx_bytes(&self) -> usize {
        match self {
            Outgoing::Response(_, payload) => payload_bytes(payload),
            Outgoing::Responses(all) => all.iter().map(|(_, p)| payload_bytes(p)).sum(),
            Outgoing::GoAway(_) | Outgoing::Close => 16,
        }
    }
}

/// An estimate of a response's encoded size (never below its real size by
/// more than the per-frame header slack).
fn payload_bytes(payload: &ResponsePayload) -> usize {
    const FRAME: usize = 16;
    match payload {
        ResponsePayload::SqliteQueryOk(ok) => {
            let columns: usize = ok.columns.iter().map(|c| c.len() + 4).sum();
            let values: usize = ok
                .rows
                .iter()
                .flatten()
                .map(|v| match v {
                    ars::SqlValue::SqlText(t) => t.len() + 4,
                    ars::SqlValue::SqlBlob(b) => b.len() + 4,
                    _ => 9,
                })
                .sum();
            FRAME + columns + values + ok.rows.len() * 4
        }
        ResponsePayload::SqlError(e) => FRAME + e.message.len(),
        ResponsePayload::InvalidLeaseKey(e) => FRAME + e.message.len(),
        ResponsePayload::LeaseExpired(e) => FRAME + e.message.len(),
        ResponsePayload::QueueFull(q) => FRAME + q.limit.len(),
        _ => FRAME,
    }
}

/// One connection's unread responses, and how it is told it must close.
#[derive(Default)]
pub(super) struct Unread {
    bytes: AtomicUsize,
    pub(super) overflow: tokio::sync::Notify,
}

/// Every connection's unread responses together, against
/// `max_outbox_bytes_total`: over it, the connection with the most unread
/// is told to close.
pub(super) struct Outboxes {
    max: usize,
    total: AtomicUsize,
    members: Mutex<HashMap<u64, Weak<Unread>>>,
}

impl Outboxes {
    pub(super) fn new(max: usize) -> Arc<Outboxes> {
        Arc::new(Outboxes {
            max,
            total: AtomicUsize::new(0),
            members: Mutex::default(),
        })
    }

    /// Connection `conn`'s outbox: what is sent on it goes to its writer
    /// task through `tx`, and more than `limit` bytes unread closes it.
    pub(super) fn open(
        self: &Arc<Self>,
        conn: u64,
        tx: tmpsc::UnboundedSender<Outgoing>,
        limit: usize,
    ) -> Outbox {
        Outbox {
            tx,
            unread: self.join(conn),
            all: self.clone(),
            limit,
        }
    }

    fn join(&self, conn: u64) -> Arc<Unread> {
        let unread = Arc::new(Unread::default());
        if let Ok(mut members) = self.members.lock() {
            members.insert(conn, Arc::downgrade(&unread));
        }
        unread
    }

    /// The connection is gone: what it had unread leaves the total.
    pub(super) fn leave(&self, conn: u64, unread: &Unread) {
        if let Ok(mut members) = self.members.lock() {
            members.remove(&conn);
        }
        let left = unread.bytes.swap(0, Ordering::AcqRel);
        self.total.fetch_sub(left, Ordering::AcqRel);
    }

    fn added(&self, n: usize) {
        if self.total.fetch_add(n, Ordering::AcqRel) + n <= self.max {
            return;
        }
        let Ok(members) = self.members.lock() else {
            return;
        };
        let furthest = members
            .values()
            .filter_map(Weak::upgrade)
            .max_by_key(|unread| unread.bytes.load(Ordering::Acquire));
        drop(members);
        if let Some(unread) = furthest {
            unread.overflow.notify_one();
        }
    }

    /// The writer task wrote `n` bytes of what `unread` counts.
    pub(super) fn taken(&self, unread: &Unread, n: usize) {
        // A connection that left already gave its bytes back.
        let taken = unread
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                Some(b.saturating_sub(n))
            })
            .map_or(0, |before| before.min(n));
        self.total.fetch_sub(taken, Ordering::AcqRel);
    }
}

/// A connection's outbox: a queue for its writer task, bounded in bytes,
/// alone and with every other connection's. Going over a bound marks the
/// connection (or, over the total, the one with the most unread) for
/// closing.
#[derive(Clone)]
pub(super) struct Outbox {
    tx: tmpsc::UnboundedSender<Outgoing>,
    pub(super) unread: Arc<Unread>,
    pub(super) all: Arc<Outboxes>,
    limit: usize,
}

impl Outbox {
    pub(super) fn send(&self, message: Outgoing) {
        let size = message.approx_bytes();
        if self.tx.send(message).is_err() {
            return;
        }
        let mine = self.unread.bytes.fetch_add(size, Ordering::AcqRel) + size;
        self.all.added(size);
        if mine > self.limit {
            self.unread.overflow.notify_one();
        }
    }
}
