//! Agent triggers: what wakes an agent without a message. `activity.rs`
//! is the hypermedia activity matcher, `validate.rs`
//! checks and normalizes a trigger's parts as clients send them,
//! `prompt/` turns prompts into blocks and back into markdown,
//! `schedule.rs` says when a schedule is due, `store.rs` holds all their
//! SQL and `service/` keeps triggers and fires them: the schedule monitor
//! on the sidecar's clock, run-completed firings from run finalization,
//! each firing claimed once in the transaction that starts its work, and
//! `view.rs` what an agent reads of its triggers (`~/triggers/`).

pub mod activity;
pub mod error;
pub mod prompt;
pub mod schedule;
pub mod service;
pub mod store;
pub mod validate;
pub mod view;

pub use error::TriggerError;
pub use service::{SessionOpened, TickReport, Triggers};
