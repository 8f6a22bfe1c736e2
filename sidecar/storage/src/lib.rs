//! The storage floor: the two database backends behind the one `Database`
//! handle, the reference actor-SQLite server, the descriptor and bounds they
//! are opened with, and the function that resolves a descriptor into that
//! handle exactly once, and `watch`, the wrapper that counts writes to the
//! tables a service keeps in memory. Nothing here knows a domain table. `testing` (test
//! scaffolding) is compiled only for tests or with the `testing` feature.

pub mod actor_uds;
pub mod ars_server;
pub mod ars_values;
mod settings;
pub mod sqlite_checkpoint;
pub mod sqlite_conn;
pub mod sqlite_file;
pub mod sqlite_read;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod watch;

use std::sync::Arc;

use agentos_schema::{DbError, SharedDatabase};

pub use settings::{DatabaseDescriptor, SqliteLimits};

/// Resolves the descriptor into the VM's one handle.
pub async fn open(
    descriptor: &DatabaseDescriptor,
    limits: &SqliteLimits,
) -> Result<SharedDatabase, DbError> {
    match descriptor {
        DatabaseDescriptor::SqliteFile { path } => {
            let path = path.clone();
            let limits = limits.clone();
            let db = tokio::task::spawn_blocking(move || {
                sqlite_file::SqliteFileDatabase::open(&path, &limits)
            })
            .await
            .map_err(|e| DbError::Connect(e.to_string()))??;
            Ok(Arc::new(db))
        }
        DatabaseDescriptor::ActorUds { path } => {
            Ok(Arc::new(actor_uds::connect(path, limits).await?))
        }
    }
}
