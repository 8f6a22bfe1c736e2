//! What the signed API (`api/`) and its live feed (`ws/`) share, below
//! both so that neither imports the other for it: the signed door's one
//! error shape (`error.rs`, `ApiError`), domain values as the reference's
//! records (`render.rs`), and the check every envelope passes before its
//! action is looked at, over HTTP or on a socket (`verify.rs`, with the
//! replay cache `replay.rs` and the decompressed keys `keys.rs`). It
//! imports neither `api/` nor `ws/`.

mod error;
mod keys;
pub mod render;
mod replay;
mod verify;

pub use error::ApiError;
pub use replay::ReplayCache;
pub use verify::{Caller, Verifier};
