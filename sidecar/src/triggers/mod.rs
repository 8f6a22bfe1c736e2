//! Agent triggers: what wakes an agent without a message. So far, when a
//! schedule is due (`schedule.rs`) and a trigger's parts checked and
//! normalized as clients send them (`validate.rs`); the store, the monitor
//! that ticks on the sidecar's clock, run-completed firings and the
//! actions of both doors are built on them.

pub mod schedule;
pub mod validate;
