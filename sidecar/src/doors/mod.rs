//! The toolkit both front doors use: what the host door (`host/`) and the
//! signed door (`http/`) would otherwise each write for themselves. A door
//! decodes, authorizes, calls a service and renders; the pieces here are
//! the ones whose rule is the same on both sides, with what differs passed
//! in as configuration: `outbox.rs` the byte-bounded queue of outgoing
//! entries (one per connection, all counted in one process-wide pool), and
//! `runs.rs` what both wire forms of a run read from the domain row (each
//! door's renderer keeps its own shape on top of it).
//!
//! Nothing here knows a wire serialization or a socket, and nothing here
//! imports a door.

pub mod outbox;
pub mod runs;
