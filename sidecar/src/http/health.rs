//! `GET /api/health` and `/agents/api/health`: JSON, unauthenticated, and
//! holding nothing private (the reference's `status`, `uptime`, `version`
//! and `subscriptionAuth`, which says whether the server offers provider
//! sign-in by OAuth (`builtin.subscriptionAuth`), plus what a client needs to talk
//! to us under names of our own: the protocol, how WebSocket subscriptions
//! are authorized, the window).

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::HttpState;

pub(super) async fn get(State(state): State<Arc<HttpState>>) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "uptime": state.started.elapsed().as_secs_f64(),
        "version": env!("CARGO_PKG_VERSION"),
        "service": "agentos-sidecar",
        "protocol": super::PROTOCOL_VERSION,
        "subscriptionAuth": state.subscription_auth,
        "socketAuth": "signed",
        "timestampWindowMs": state.config.timestamp_window_ms,
        "database": state.database_kind,
    }))
}
