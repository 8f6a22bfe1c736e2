//! The ACP client side of an adapter process: spawn it, speak newline-delimited
//! JSON-RPC over its stdio, negotiate capabilities, and hand requests from the
//! agent back to the caller. Knows nothing of SQLite.

pub mod builtin;
pub mod client;
mod seccomp;

pub use agentos_protocol::acp::SessionUpdate;
pub use client::{
    AdapterCommand, AdapterConnection, AdapterError, AdapterEvent, AdapterEvents, AdapterOptions,
    Confinement, IncomingRequestId, InitializeResult, RpcError, DEFAULT_STDOUT_BUFFER_BYTES,
    INHERITED_ENV, STDOUT_BUFFER_SETTING,
};
