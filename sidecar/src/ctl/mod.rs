//! The operator CLI (`agentos-sidecar ctl`): a host-protocol client.
