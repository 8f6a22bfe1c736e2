//! `http/request` on the host socket: a host actor that receives HTTP itself
//! forwards it here and gets back exactly what the listener would have sent.
//! The request goes through the same router as the listener's, so there is
//! one implementation of the API whichever way it arrives.

use agentos_protocol::host::{HttpRequestParams, HttpResponseResult};
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Request};
use base64::Engine;
use tower::ServiceExt;

/// Why a forwarded request failed: it could not be built (the host's
/// mistake, -32602), or the answer is too large for a host frame.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("invalid forwarded request: {0}")]
    Invalid(String),
    #[error("the response is larger than {0} bytes")]
    TooLarge(usize),
}

/// Runs one forwarded request through `router`; `max_response_bytes` bounds
/// what is collected (the host frame must hold it).
pub async fn forward(
    router: axum::Router,
    params: HttpRequestParams,
    max_response_bytes: usize,
) -> Result<HttpResponseResult, ProxyError> {
    let invalid = |m: String| ProxyError::Invalid(m);
    let method = Method::from_bytes(params.method.as_bytes())
        .map_err(|_| invalid(format!("method {:?}", params.method)))?;
    if !params.path.starts_with('/') {
        return Err(invalid("path must start with /".into()));
    }
    let body = match params.body_base64.as_deref() {
        Some(text) => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| invalid(format!("bodyBase64: {e}")))?,
        None => Vec::new(),
    };
    let mut request = Request::builder()
        .method(method)
        .uri(&params.path)
        .body(Body::from(body))
        .map_err(|e| invalid(format!("path: {e}")))?;
    for (name, value) in &params.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| invalid(format!("header name {name:?}")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| invalid(format!("header {name} has an invalid value")))?;
        request.headers_mut().append(name, value);
    }
    let response = match router.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let status = response.status().as_u16();
    let mut headers = std::collections::BTreeMap::new();
    for (name, value) in response.headers() {
        if let Ok(value) = value.to_str() {
            headers.insert(name.as_str().to_owned(), value.to_owned());
        }
    }
    let bytes = axum::body::to_bytes(response.into_body(), max_response_bytes)
        .await
        .map_err(|_| ProxyError::TooLarge(max_response_bytes))?;
    Ok(HttpResponseResult {
        status,
        headers,
        body_base64: base64::engine::general_purpose::STANDARD.encode(&bytes),
    })
}
