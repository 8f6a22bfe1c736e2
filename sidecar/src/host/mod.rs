//! The host front door: length-delimited JSON-RPC on a Unix socket.
