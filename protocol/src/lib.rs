//! Wire types and codecs, and nothing else: no tokio, no SQL, no I/O.
//!
//! This crate is an API boundary. Every byte the sidecar exchanges with the
//! outside world is described here: the Actor Runtime Socket v1 frames
//! (`ars`), the length-delimited JSON-RPC host protocol (`host`), and the
//! line-delimited JSON-RPC spoken with ACP adapters (`acp`), the Seed Agents
//! signed control plane (`seed`: DAG-CBOR envelopes, actions, responses and
//! WebSocket events); the MCP client side (`mcp`); the runs and session vocabularies both doors share (`runs`,
//! `session`); and
//! the one list of application error codes
//! (`ErrorCode`).

pub mod acp;
pub mod agent_ext;
pub mod ars;
mod error_code;
pub mod host;
pub mod json_text;
pub mod mcp;
pub mod runs;
pub mod seed;
pub mod session;

pub use error_code::ErrorCode;
