//! ACP JSON-RPC 2.0 line messages exchanged with adapter processes.
