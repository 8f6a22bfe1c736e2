//! The actor_uds backend: an Actor Runtime Socket v1 client.
