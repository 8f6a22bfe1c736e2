//! The ACP client connection to one adapter process.
