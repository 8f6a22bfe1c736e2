//! VM-wide counters of the bounded queues between the sidecar and its peers:
//! bytes waiting for host clients, and what was
//! dropped because a peer did not keep up (notices to a host connection over
//! its budget, adapter stderr over its rate). `vm/status` reports them, so a
//! host can see a bound being hit without reading logs.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters updated by the host door and the routes; read by `vm/status`.
#[derive(Debug, Default)]
pub struct MemoryCounters {
    host_queued_bytes: AtomicU64,
    host_notices_dropped: AtomicU64,
    host_connections_closed_stalled: AtomicU64,
    agent_stderr_dropped_bytes: AtomicU64,
}

/// A snapshot of [`MemoryCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemorySnapshot {
    pub host_queued_bytes: u64,
    pub host_notices_dropped: u64,
    pub host_connections_closed_stalled: u64,
    pub agent_stderr_dropped_bytes: u64,
}

impl MemoryCounters {
    pub fn host_queued(&self, added: u64) {
        self.host_queued_bytes.fetch_add(added, Ordering::Relaxed);
    }

    pub fn host_dequeued(&self, removed: u64) {
        self.host_queued_bytes.fetch_sub(removed, Ordering::Relaxed);
    }

    pub fn host_notice_dropped(&self) {
        self.host_notices_dropped.fetch_add(1, Ordering::Relaxed);
    }

    pub fn host_connection_stalled(&self) {
        self.host_connections_closed_stalled
            .fetch_add(1, Ordering::Relaxed);
    }

    pub fn agent_stderr_dropped(&self, bytes: u64) {
        self.agent_stderr_dropped_bytes
            .fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> MemorySnapshot {
        MemorySnapshot {
            host_queued_bytes: self.host_queued_bytes.load(Ordering::Relaxed),
            host_notices_dropped: self.host_notices_dropped.load(Ordering::Relaxed),
            host_connections_closed_stalled: self
                .host_connections_closed_stalled
                .load(Ordering::Relaxed),
            agent_stderr_dropped_bytes: self.agent_stderr_dropped_bytes.load(Ordering::Relaxed),
        }
    }
}
