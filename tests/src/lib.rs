//! End-to-end test support: drivers that run the real `agentos-sidecar`
//! binary, real adapters and a real socket server. `crash` is the
//! crash-recovery driver behind `scripts/crash-test` and `tests/crash.rs`;
//! `rivet` runs Rivet's published actor runtime as the `actor_uds` peer.

pub mod bench;
pub mod crash;
pub mod hm_server;
pub mod http;
pub mod loopback;
pub mod mcp_server;
pub mod oauth_server;
pub mod provider_server;
pub mod rivet;
pub mod seed;
