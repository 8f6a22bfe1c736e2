//! The builtin model agent: an ACP agent that runs inside this crate and
//! answers prompts by calling an LLM provider over HTTP, rather than
//! spawning a third-party agent. `provider` is its client for the
//! providers' APIs.

pub mod provider;
