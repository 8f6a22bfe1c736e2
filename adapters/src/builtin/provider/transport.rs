//! The HTTP side of provider calls: one pooled client (rustls, bundled
//! roots, redirects refused), and the bounded reads every call goes
//! through. Each read waits at most the idle timeout, each body is cut at
//! its bound, and each failure becomes a classified `ProviderError` whose
//! message names the provider's origin but never a credential.

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};

use super::sse::{SseEvent, SseParser};
use super::{Endpoint, ProviderError, ProviderOptions};

/// The most of an error answer's body that is read for its message.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

#[derive(Clone, Debug)]
pub(crate) struct Transport {
    client: reqwest::Client,
    /// For endpoints a client chose: names resolve to public addresses
    /// only (`net::PublicOnly`).
    public_client: reqwest::Client,
    options: ProviderOptions,
}

/// A URL to call, and whether it must lead to a public address.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    url: reqwest::Url,
    public_only: bool,
}

impl Transport {
    pub(crate) fn new(options: ProviderOptions) -> Result<Transport, ProviderError> {
        let builder = || {
            reqwest::Client::builder()
                .connect_timeout(options.connect_timeout)
                // A redirect would carry the key to wherever it points.
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("agentos/", env!("CARGO_PKG_VERSION")))
        };
        let built = |result: Result<reqwest::Client, reqwest::Error>| {
            result.map_err(|e| {
                ProviderError::bad_request(format!(
                    "the HTTP client could not be built: {}",
                    error_chain(&e)
                ))
            })
        };
        let client = built(builder().build())?;
        // No proxy from the environment: a proxy would resolve the name
        // itself, past the address check.
        let public_client = built(
            builder()
                .no_proxy()
                .dns_resolver(std::sync::Arc::new(crate::builtin::net::PublicOnly))
                .build(),
        )?;
        Ok(Transport {
            client,
            public_client,
            options,
        })
    }

    pub(crate) fn options(&self) -> &ProviderOptions {
        &self.options
    }

    fn client(&self, target: &Target) -> &reqwest::Client {
        if target.public_only {
            &self.public_client
        } else {
            &self.client
        }
    }

    /// `{base}{path}`: `path` starts with `/`, the base may end with one.
    pub(crate) fn url(&self, endpoint: &Endpoint, path: &str) -> Result<Target, ProviderError> {
        let base = endpoint.base_url.trim_end_matches('/');
        let url = reqwest::Url::parse(&format!("{base}{path}")).map_err(|e| {
            ProviderError::bad_request(format!("the provider's base URL is not a URL ({e})"))
        })?;
        match url.scheme() {
            "http" | "https" => {}
            other => {
                return Err(ProviderError::bad_request(format!(
                    "the provider's base URL must be http or https, not {other}"
                )))
            }
        }
        if endpoint.public_only {
            crate::builtin::net::check_url(&url).map_err(|why| {
                ProviderError::bad_request(format!("the provider's base URL is refused: {why}"))
            })?;
        }
        Ok(Target {
            url,
            public_only: endpoint.public_only,
        })
    }

    /// Sends a JSON POST and returns its event stream once the provider
    /// has accepted the call.
    pub(crate) async fn post_stream(
        &self,
        target: Target,
        headers: HeaderMap,
        body: &impl serde::Serialize,
    ) -> Result<EventStream, ProviderError> {
        let body = serde_json::to_vec(body).map_err(|e| {
            ProviderError::bad_request(format!("the request could not be encoded ({e})"))
        })?;
        let origin = origin(&target.url);
        let request = self
            .client(&target)
            .post(target.url)
            .headers(headers)
            .header(CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .body(body);
        let response = self.send(request, &origin).await?;
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if is_json {
            // A server that ignored `stream: true`, or one reporting an
            // error with a success status: either way no stream follows.
            let body = self.read_error_body(response).await;
            let mut error = ProviderError::from_status(200, &body);
            error.code = super::PROVIDER_PROTOCOL;
            error.class = super::ErrorClass::Configuration;
            error.message = format!(
                "{origin} answered JSON where an event stream was expected ({})",
                error.message
            );
            return Err(error);
        }
        Ok(EventStream {
            response,
            parser: SseParser::new(self.options.max_event_bytes),
            events: Vec::new(),
            next: 0,
            idle: self.options.idle_timeout,
            origin,
            read: 0,
            limit: self.options.max_stream_bytes,
        })
    }

    /// GETs a JSON document no larger than `max_response_bytes`.
    pub(crate) async fn get_json(
        &self,
        target: Target,
        headers: HeaderMap,
    ) -> Result<serde_json::Value, ProviderError> {
        let origin = origin(&target.url);
        let request = self.client(&target).get(target.url).headers(headers);
        let mut response = self.send(request, &origin).await?;
        let limit = self.options.max_response_bytes;
        let mut body = Vec::new();
        while let Some(chunk) = self.read_chunk(&mut response, &origin).await? {
            if body.len() + chunk.len() > limit {
                return Err(ProviderError::too_large(format!(
                    "{origin} answered more than {limit} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|e| {
            ProviderError::protocol(format!("{origin} answered a body that is not JSON ({e})"))
        })
    }

    /// Sends, waits for the headers, and turns an error status into its
    /// classified error.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        origin: &str,
    ) -> Result<reqwest::Response, ProviderError> {
        let response = match tokio::time::timeout(self.options.idle_timeout, request.send()).await {
            Err(_) => {
                return Err(ProviderError::timeout(format!(
                    "{origin} did not answer within {:?}",
                    self.options.idle_timeout
                )))
            }
            Ok(Err(e)) => return Err(request_error(&e, origin)),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = super::retry_after(response.headers());
        let body = self.read_error_body(response).await;
        let mut error = ProviderError::from_status(status.as_u16(), &body);
        error.retry_after = retry_after;
        Err(error)
    }

    /// At most `MAX_ERROR_BODY_BYTES` of a body; what could be read when
    /// reading fails, since the status already says what went wrong.
    async fn read_error_body(&self, mut response: reqwest::Response) -> Vec<u8> {
        let mut body = Vec::new();
        while body.len() < MAX_ERROR_BODY_BYTES {
            match tokio::time::timeout(self.options.idle_timeout, response.chunk()).await {
                Ok(Ok(Some(chunk))) => {
                    let room = MAX_ERROR_BODY_BYTES - body.len();
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                _ => break,
            }
        }
        body
    }

    async fn read_chunk(
        &self,
        response: &mut reqwest::Response,
        origin: &str,
    ) -> Result<Option<bytes::Bytes>, ProviderError> {
        read_chunk(response, self.options.idle_timeout, origin).await
    }
}

async fn read_chunk(
    response: &mut reqwest::Response,
    idle: std::time::Duration,
    origin: &str,
) -> Result<Option<bytes::Bytes>, ProviderError> {
    match tokio::time::timeout(idle, response.chunk()).await {
        Err(_) => Err(ProviderError::timeout(format!(
            "{origin} sent nothing for {idle:?}"
        ))),
        Ok(Err(e)) => Err(request_error(&e, origin)),
        Ok(Ok(chunk)) => Ok(chunk),
    }
}

/// The events of one streamed answer, read as they are asked for.
pub(crate) struct EventStream {
    response: reqwest::Response,
    parser: SseParser,
    events: Vec<SseEvent>,
    next: usize,
    idle: std::time::Duration,
    origin: String,
    /// Body bytes read so far, against `limit` (`max_stream_bytes`): a
    /// provider cannot make one answer grow without end.
    read: usize,
    limit: usize,
}

impl EventStream {
    /// The next event, or `None` when the provider ended the body.
    pub(crate) async fn next(&mut self) -> Result<Option<SseEvent>, ProviderError> {
        loop {
            if self.next < self.events.len() {
                let event = std::mem::replace(
                    &mut self.events[self.next],
                    SseEvent {
                        event: String::new(),
                        data: String::new(),
                    },
                );
                self.next += 1;
                return Ok(Some(event));
            }
            self.events.clear();
            self.next = 0;
            match read_chunk(&mut self.response, self.idle, &self.origin).await? {
                None => return Ok(None),
                Some(chunk) => {
                    self.read = self.read.saturating_add(chunk.len());
                    if self.read > self.limit {
                        return Err(ProviderError::too_large(format!(
                            "{} streamed more than {} bytes in one answer",
                            self.origin, self.limit
                        )));
                    }
                    self.parser.push(&chunk, &mut self.events).map_err(|e| {
                        ProviderError::protocol(format!(
                            "{} sent a malformed stream: {e}",
                            self.origin
                        ))
                    })?
                }
            }
        }
    }

    /// The error for a body that ended before the provider said it was
    /// done: a dropped connection or a proxy cutting the stream.
    pub(crate) fn truncated(&self) -> ProviderError {
        let detail = if self.parser.has_partial() {
            " in the middle of an event"
        } else {
            ""
        };
        ProviderError::network(format!(
            "{} ended the stream{detail} before the answer was complete",
            self.origin
        ))
    }
}

/// A header carrying a credential: marked sensitive so it is never shown
/// by a `Debug` of the request.
pub(crate) fn secret_header(
    headers: &mut HeaderMap,
    name: &'static str,
    value: &str,
) -> Result<(), ProviderError> {
    let mut value = HeaderValue::from_str(value).map_err(|_| {
        ProviderError::bad_request(format!(
            "the API key has characters that cannot be sent in the {name} header"
        ))
    })?;
    value.set_sensitive(true);
    headers.insert(HeaderName::from_static(name), value);
    Ok(())
}

pub(crate) fn plain_header(headers: &mut HeaderMap, name: &'static str, value: &'static str) {
    headers.insert(
        HeaderName::from_static(name),
        HeaderValue::from_static(value),
    );
}

/// `scheme://host:port`: never the path (it may hold a model name the
/// caller already knows) nor user info (it may hold credentials).
fn origin(url: &reqwest::Url) -> String {
    url.origin().ascii_serialization()
}

fn request_error(error: &reqwest::Error, origin: &str) -> ProviderError {
    let chain = error_chain(error);
    if error.is_timeout() {
        ProviderError::timeout(format!("{origin} timed out: {chain}"))
    } else if error.is_builder() {
        ProviderError::bad_request(format!(
            "the request to {origin} could not be built: {chain}"
        ))
    } else if error.is_connect() {
        ProviderError::network(format!("could not connect to {origin}: {chain}"))
    } else {
        ProviderError::network(format!("the connection to {origin} failed: {chain}"))
    }
}

/// The error and its causes, the URL cut to its origin (the full URL may
/// carry user info).
fn error_chain(error: &reqwest::Error) -> String {
    let mut top = error.to_string();
    if let Some(url) = error.url() {
        top = top.replace(url.as_str(), &origin(url));
    }
    let mut parts = vec![top];
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}
