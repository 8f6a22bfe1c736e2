//! The clients of the sidecar's two doors, on the protocol crate alone: the
//! host-protocol client and operator CLI (`ctl`), and the Seed Agents signed
//! client with its CLI rendering (`seed`). Nothing here knows the server's
//! code; the server's tests and tools drive it through these clients.

pub mod ctl;
pub mod seed;
