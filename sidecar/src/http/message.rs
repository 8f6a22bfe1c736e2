//! The transport of `POST /api/message`: `application/cbor` or 415, the body
//! bounded by `http.maxBodyBytes` (413) and read within
//! `http.bodyReadTimeoutMs` (408), then the signed API; DAG-CBOR back,
//! with the protocol version we speak in `X-Agents-Protocol`. Before a body
//! is read it takes twice its length (its announced one, else the most it
//! may be) from the process-wide `http.maxBufferedBodyBytes`, and keeps it
//! until the answer is made: however many requests are served at once,
//! their bodies and what they decode to stay within it.

use agentos_protocol::seed::ApiCode;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::common::ApiError;
use super::HttpState;

const CBOR: &str = "application/cbor";

/// The process-wide budget of request bodies.
pub struct Bodies(Arc<agentos_base::budget::ByteBudget>);

impl Bodies {
    pub fn new(max_bytes: u64) -> Bodies {
        Bodies(agentos_base::budget::ByteBudget::new(
            usize::try_from(max_bytes).unwrap_or(usize::MAX).max(1),
        ))
    }

    /// What a body of at most `bytes` takes: twice it (within the budget,
    /// so one body as large as allowed always fits alone).
    fn bytes(bytes: u64) -> usize {
        usize::try_from(bytes.saturating_mul(2)).unwrap_or(usize::MAX)
    }
}

fn reply(status: u16, body: Vec<u8>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CBOR));
    headers.insert(
        "x-agents-protocol",
        HeaderValue::from(super::PROTOCOL_VERSION),
    );
    response
}

fn refuse(e: ApiError) -> Response {
    reply(e.status, e.body())
}

pub(super) async fn post(
    State(state): State<Arc<HttpState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let is_cbor = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(CBOR));
    if !is_cbor {
        return refuse(ApiError::new(
            415,
            ApiCode::UnsupportedMediaType,
            "Content-Type must be application/cbor",
        ));
    }
    let max = usize::try_from(state.config.max_body_bytes).unwrap_or(usize::MAX);
    let limit = std::time::Duration::from_millis(state.config.body_read_timeout_ms);
    // A body announced larger than allowed is refused by the read below
    // without taking more than the most a body may be.
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(state.config.max_body_bytes)
        .min(state.config.max_body_bytes);
    let taken = state.bodies.0.take(Bodies::bytes(announced));
    // Half the body's time for room, so a request that waited still has
    // time to be read.
    let Ok(_room) = tokio::time::timeout(limit / 2, taken).await else {
        return refuse(ApiError::new(
            503,
            ApiCode::Busy,
            "request bodies being served fill http.maxBufferedBodyBytes; try again",
        ));
    };
    let Ok(read) = tokio::time::timeout(limit, axum::body::to_bytes(body, max)).await else {
        return refuse(ApiError::new(
            408,
            ApiCode::BodyTimeout,
            format!(
                "the body was not received within http.bodyReadTimeoutMs ({} ms)",
                state.config.body_read_timeout_ms
            ),
        ));
    };
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(e)
            if std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>()) =>
        {
            return refuse(ApiError::new(
                413,
                ApiCode::BodyTooLarge,
                format!("the body exceeds http.maxBodyBytes ({max} bytes)"),
            ))
        }
        Err(_) => {
            return refuse(ApiError::bad_request(
                ApiCode::BadBody,
                "the request body could not be read",
            ))
        }
    };
    let answer = state.api.message(&bytes).await;
    reply(answer.status, answer.body)
}
