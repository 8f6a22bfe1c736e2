//! The sidecar: composition of config, the one database handle, the domain
//! services and the front doors. `main.rs` only parses the command line.

pub mod builtin;
pub mod clock;
pub mod config;
pub mod control;
pub mod ctl;
pub mod db;
pub mod host;
pub mod http;
pub mod maintenance;
pub mod private;
pub mod runs;
pub mod sandbox;
pub mod scripts;
pub mod seed_client;
pub mod serve;
pub mod sessions;
pub mod space;
pub mod vfs;
pub mod vm;
