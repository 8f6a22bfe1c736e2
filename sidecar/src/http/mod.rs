//! The signed control plane's front door (the Seed Agents API): the HTTP
//! listener, `POST /api/message` (signed DAG-CBOR actions), the health
//! routes, `/agents/ws`, and the host socket's `http/request` proxy, which
//! runs the same router. Like the host door it decodes, verifies,
//! authorizes, calls the services and renders; it holds no SQL and no
//! domain rules.
//!
//! Its parts form layers: `common/` (the error shape, the renderers, the
//! envelope check) below `ws/` (the live feed) below `api/` (the
//! actions, which tell the feed what changed), with this file, the
//! transport (`message.rs`) and the listener above them all.

pub mod api;
pub mod common;
mod conns;
mod health;
mod message;
pub mod proxy;
mod server;
pub mod ws;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tower_http::cors::{Any, CorsLayer};

pub use message::Bodies;
pub use server::{HttpError, HttpServer, Running};

use crate::config::HttpConfig;

pub use agentos_protocol::seed::PROTOCOL_VERSION;

/// What the handlers share.
pub struct HttpState {
    pub config: HttpConfig,
    pub started: Instant,
    pub database_kind: &'static str,
    /// `builtin.subscriptionAuth`, as health reports it.
    pub subscription_auth: bool,
    pub api: api::SignedApi,
    /// What `/agents/ws` is served with.
    pub ws: Arc<ws::WsState>,
    /// `http.maxBufferedBodyBytes` in KiB, taken by each request body.
    pub bodies: message::Bodies,
}

/// The API's routes; everything else is 404. CORS is open (`*`), with
/// preflight, as the reference: authority comes from signatures, never from
/// an origin.
pub fn router(state: Arc<HttpState>) -> Router {
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods(Any)
        .allow_headers(Any)
        .expose_headers(Any);
    Router::new()
        .route("/api/message", post(message::post))
        .route("/agents/api/message", post(message::post))
        .route("/api/health", get(health::get))
        .route("/agents/api/health", get(health::get))
        .route("/agents/ws", get(websocket))
        .fallback(not_found)
        .layer(cors)
        // Global: a plain concurrency layer on a Router is cloned per route,
        // which would give each route its own pool.
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(
            state.config.max_concurrent_requests as usize,
        ))
        .with_state(state)
}

async fn websocket(State(state): State<Arc<HttpState>>, request: Request) -> Response {
    ws::get(state.ws.clone(), request).await
}

async fn not_found() -> impl IntoResponse {
    (StatusCode::NOT_FOUND, "not found")
}
