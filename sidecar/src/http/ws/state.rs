//! What `/agents/ws` is served with: the signed door's envelope check
//! (shared with `POST /api/message`, so one replay cache covers both), the
//! registry of open sockets, and the services a subscription reads (the
//! control plane for access, sessions, runs). Nothing else of the VM is
//! reachable from a socket.

use std::sync::Arc;

use super::sockets::Sockets;
use crate::control::Control;
use crate::http::common::Verifier;
use crate::runs::Runs;
use crate::sessions::Sessions;

pub struct WsState {
    pub(super) verifier: Arc<Verifier>,
    pub(super) sockets: Arc<Sockets>,
    pub(super) control: Control,
    pub(super) sessions: Sessions,
    pub(super) runs: Runs,
}

impl WsState {
    pub fn new(
        verifier: Arc<Verifier>,
        sockets: Arc<Sockets>,
        control: Control,
        sessions: Sessions,
        runs: Runs,
    ) -> Arc<WsState> {
        Arc::new(WsState {
            verifier,
            sockets,
            control,
            sessions,
            runs,
        })
    }
}
