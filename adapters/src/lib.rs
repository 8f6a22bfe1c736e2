//! The ACP client side of an adapter process: spawn it, speak newline-delimited
//! JSON-RPC over its stdio, negotiate capabilities, and hand requests from the
//! agent back to the caller. Knows nothing of SQLite.

pub mod client;

pub use agentos_protocol::acp::SessionUpdate;
pub use client::{
    AdapterCommand, AdapterConnection, AdapterError, AdapterEvent, AdapterOptions,
    IncomingRequestId, InitializeResult, RpcError,
};
