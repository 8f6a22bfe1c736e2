//! The floor under every other crate of the sidecar: owner-only files,
//! directories and sockets and the store lock (`private`), the byte budget
//! that bounds every queue (`budget`), and the one wall clock (`clock`).
//! Nothing here knows a protocol, a table or a service.

pub mod budget;
pub mod clock;
pub mod private;
