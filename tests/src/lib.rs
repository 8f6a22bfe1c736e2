//! End-to-end test support: drivers that run the real `agentos-sidecar`
//! binary, real adapters and a real socket server. `crash` is the
//! crash-recovery driver behind `scripts/crash-test` and `tests/crash.rs`.

pub mod bench;
pub mod crash;
pub mod http;
pub mod provider_server;
pub mod seed;
