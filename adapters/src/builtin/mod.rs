//! The builtin model agent: an ACP agent that runs inside this crate and
//! answers prompts by calling an LLM provider over HTTP, rather than
//! spawning a third-party agent. `provider` is its client for the
//! providers' APIs; `agent` serves ACP (the request loop and sessions),
//! `state` is what that loop and its turns share, `turn` runs one prompt's
//! model loop, `held` is what it keeps of a conversation between turns,
//! `peer` is the JSON-RPC line connection, `local` the configuration and
//! file tools used under a client that is not the sidecar, and `net` which
//! addresses a client-chosen URL may reach.

pub mod agent;
mod held;
pub mod local;
pub mod net;
mod peer;
pub mod provider;
mod state;
mod turn;
