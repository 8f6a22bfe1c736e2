//! The sidecar: composition of config, the one database handle, the domain
//! services and the front doors. `main.rs` only parses the command line.

pub mod builtin;
pub mod config;
pub mod control;
pub mod doors;
pub mod host;
pub mod http;
pub mod hypermedia;
pub mod maintenance;
pub mod mcp;
pub mod runs;
pub mod sandbox;
pub mod serve;
pub mod sessions;
pub mod space;
pub mod triggers;
pub mod vm;
pub mod work;
