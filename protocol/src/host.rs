//! The host protocol (v1): length-delimited JSON-RPC 2.0 frames, methods and error codes.
