//! The three owners' append-only migration ladders. A shipped rung is never
//! edited; a change is a new rung.

pub mod actor;
pub mod core;
pub mod fs;
