//! The storage layer's own settings: which database the VM uses (the one
//! descriptor it is launched with) and the bounds of both backends
//! (`limits.sqlite` in the config).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

const MIB: u64 = 1024 * 1024;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum DatabaseDescriptor {
    SqliteFile { path: PathBuf },
    ActorUds { path: PathBuf },
}

impl DatabaseDescriptor {
    pub fn path(&self) -> &Path {
        match self {
            DatabaseDescriptor::SqliteFile { path } | DatabaseDescriptor::ActorUds { path } => path,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            DatabaseDescriptor::SqliteFile { .. } => "sqlite_file",
            DatabaseDescriptor::ActorUds { .. } => "actor_uds",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct SqliteLimits {
    /// Largest materialized result of one statement (`sqlite_result_limit`).
    pub max_result_bytes: u64,
    /// Requests in flight on the actor socket at once.
    pub max_in_flight_requests: u32,
    /// Bytes of encoded requests waiting to be written to the actor socket.
    pub max_queued_request_bytes: u64,
    /// Leases begun on one actor socket connection before the next
    /// transaction opens a fresh one. A server remembers every lease key a
    /// connection used (Rivet's does, to refuse a reused key) until that
    /// connection closes; this bounds what one long-lived connection makes
    /// it hold.
    pub max_leases_per_connection: u32,
    /// Jobs waiting for the local-file executor thread.
    pub max_queued_jobs: u32,
    /// The largest `maxFrameBytes` an actor socket may announce; a larger
    /// announcement is refused at connect.
    pub max_socket_frame_bytes: u32,
}

impl Default for SqliteLimits {
    fn default() -> Self {
        SqliteLimits {
            max_result_bytes: 128 * MIB,
            max_in_flight_requests: 64,
            max_queued_request_bytes: 64 * MIB,
            max_leases_per_connection: 65_536,
            max_queued_jobs: 4096,
            max_socket_frame_bytes: 256 * MIB as u32,
        }
    }
}
