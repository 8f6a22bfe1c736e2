//! The storage contract every durable part of the sidecar is written against.
//!
//! One [`Database`] handle is resolved per VM and injected into every store. It
//! offers exactly two operations: a single [`Database::query`] and an atomic
//! [`Database::transaction`] of [`Statement`]s, each of which may carry an
//! expected change count (compare-and-set). That narrow shape is what lets the
//! local-file backend and the actor runtime socket backend serve the same
//! stores. This crate also owns all DDL: the migration runner and the three
//! independent ladders (`agentos_fs_*`, `agentos_core_*`, `agentos_actor_*`),
//! and [`row::Row`], the checked reader every store decodes rows with.

mod db;
pub mod ladders;
mod migrate;
pub mod row;

pub use db::{
    blob_range_of, blob_range_query, Database, DatabaseKind, DbError, Rows, SharedDatabase,
    SqlValue, Statement,
};
pub use migrate::{
    check_sqlite_version, migrate, migrate_all, Migration, MigrationError, MigrationOutcome, Owner,
    MIN_SQLITE_VERSION,
};
