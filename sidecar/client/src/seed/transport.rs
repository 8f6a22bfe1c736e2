//! How a client's HTTP request reaches the signed API: HTTP/1.1 over TCP or
//! over a Unix socket (the sidecar's `http.listen`), or forwarded through
//! the host socket's `http/request` when the sidecar has no listener. The
//! three answer the same bytes, so everything above this module is the
//! same whichever is used.

use std::path::PathBuf;

use agentos_protocol::host::{methods, HttpRequestParams, HttpResponseResult};
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

use super::ClientError;
use crate::ctl::{ClientError as HostError, HostClient};

/// Where the signed API is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// An HTTP listener at `host:port`.
    Http { addr: String },
    /// An HTTP listener on a Unix socket (`http.listen: "unix:/path"`).
    HttpUnix { path: PathBuf },
    /// The host socket, through `http/request`.
    HostSocket { path: PathBuf },
}

impl Transport {
    /// Reads `--url`: `http://host:port`, `host:port`, or `unix:/abs/path`.
    /// TLS is not spoken: the listener is loopback or a private socket.
    pub fn from_url(url: &str) -> Result<Transport, ClientError> {
        if let Some(path) = url.strip_prefix("unix:") {
            let path = PathBuf::from(path);
            if !path.is_absolute() {
                return Err(ClientError::InvalidUrl(format!(
                    "{url}: a Unix socket URL is unix:/absolute/path"
                )));
            }
            return Ok(Transport::HttpUnix { path });
        }
        if url.starts_with("https://") || url.starts_with("wss://") {
            return Err(ClientError::InvalidUrl(format!(
                "{url}: TLS is not supported; use http:// (loopback) or unix:/path"
            )));
        }
        let rest = url.strip_prefix("http://").unwrap_or(url);
        let addr = rest.strip_suffix('/').unwrap_or(rest);
        let valid = match addr.rsplit_once(':') {
            Some((host, port)) => {
                !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok()
            }
            None => false,
        };
        if !valid {
            return Err(ClientError::InvalidUrl(format!(
                "{url}: expected http://host:port or unix:/absolute/path"
            )));
        }
        Ok(Transport::Http {
            addr: addr.to_string(),
        })
    }

    /// The `Host` header: the address for TCP, a placeholder for a socket
    /// file (HTTP/1.1 requires one; the sidecar does not route on it).
    pub(crate) fn host_header(&self) -> &str {
        match self {
            Transport::Http { addr } => addr,
            _ => "localhost",
        }
    }
}

/// An HTTP answer as it arrived.
pub(crate) struct RawResponse {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// One request: method, path and query, extra headers, body.
pub(crate) struct RawRequest<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: Vec<u8>,
}

/// Sends one request and reads at most `max_bytes` of the answer's body.
pub(crate) async fn send(
    transport: &Transport,
    request: RawRequest<'_>,
    max_bytes: usize,
) -> Result<RawResponse, ClientError> {
    match transport {
        Transport::Http { addr } => {
            let stream = TcpStream::connect(addr.as_str())
                .await
                .map_err(|e| ClientError::io(format!("cannot connect to {addr}"), e))?;
            send_http1(stream, transport.host_header(), request, max_bytes).await
        }
        Transport::HttpUnix { path } => {
            let stream = UnixStream::connect(path)
                .await
                .map_err(|e| ClientError::io(format!("cannot connect to {}", path.display()), e))?;
            send_http1(stream, transport.host_header(), request, max_bytes).await
        }
        Transport::HostSocket { path } => forward(path, request, max_bytes).await,
    }
}

/// One request over a fresh connection: HTTP/1.1 needs no pooling for a
/// CLI, and a fresh connection cannot inherit a half-read answer.
async fn send_http1<S>(
    stream: S,
    host: &str,
    request: RawRequest<'_>,
    max_bytes: usize,
) -> Result<RawResponse, ClientError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let http = |e: hyper::Error| ClientError::Http(e.to_string());
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(http)?;
    // The connection task ends when the sender is dropped after the answer.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut builder = hyper::Request::builder()
        .method(request.method)
        .uri(request.path)
        .header(HOST, host);
    for (name, value) in request.headers {
        builder = builder.header(*name, *value);
    }
    let outgoing = builder
        .body(Full::new(Bytes::from(request.body)))
        .map_err(|e| ClientError::Http(e.to_string()))?;
    let response = sender.send_request(outgoing).await.map_err(http)?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let declared = response
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > max_bytes as u64) {
        return Err(ClientError::ResponseTooLarge { limit: max_bytes });
    }
    let body = Limited::new(response.into_body(), max_bytes)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<LengthLimitError>().is_some() {
                ClientError::ResponseTooLarge { limit: max_bytes }
            } else {
                ClientError::Http(e.to_string())
            }
        })?
        .to_bytes()
        .to_vec();
    Ok(RawResponse {
        status,
        content_type,
        body,
    })
}

/// The same request through the host socket's `http/request`.
async fn forward(
    path: &std::path::Path,
    request: RawRequest<'_>,
    max_bytes: usize,
) -> Result<RawResponse, ClientError> {
    let (client, _notifications) = HostClient::connect(path).await.map_err(host_error)?;
    let params = HttpRequestParams {
        method: request.method.to_string(),
        path: request.path.to_string(),
        headers: request
            .headers
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect(),
        body_base64: Some(base64::engine::general_purpose::STANDARD.encode(&request.body)),
    };
    let params = serde_json::to_value(params).map_err(|e| ClientError::Http(e.to_string()))?;
    let answer = client
        .call(methods::HTTP_REQUEST, params)
        .await
        .map_err(host_error)?;
    let answer: HttpResponseResult = serde_json::from_value(answer).map_err(|e| {
        ClientError::BadResponse(format!("the answer to http/request is malformed: {e}"))
    })?;
    // Base64 holds 3 bytes in 4 characters; refuse before decoding more.
    if answer.body_base64.len() / 4 * 3 > max_bytes.saturating_add(3) {
        return Err(ClientError::ResponseTooLarge { limit: max_bytes });
    }
    let body = base64::engine::general_purpose::STANDARD
        .decode(&answer.body_base64)
        .map_err(|e| ClientError::BadResponse(format!("bodyBase64 is not base64: {e}")))?;
    if body.len() > max_bytes {
        return Err(ClientError::ResponseTooLarge { limit: max_bytes });
    }
    let content_type = answer
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
        .map(|(_, value)| value.clone());
    Ok(RawResponse {
        status: answer.status,
        content_type,
        body,
    })
}

fn host_error(error: HostError) -> ClientError {
    match error {
        HostError::Rpc(_) => ClientError::Host {
            code: error.code(),
            message: error.to_string(),
        },
        other => ClientError::Io(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let tcp = |addr: &str| Transport::Http {
            addr: addr.to_string(),
        };
        assert_eq!(
            Transport::from_url("http://127.0.0.1:7878").unwrap(),
            tcp("127.0.0.1:7878")
        );
        assert_eq!(
            Transport::from_url("http://localhost:80/").unwrap(),
            tcp("localhost:80")
        );
        assert_eq!(Transport::from_url("[::1]:9").unwrap(), tcp("[::1]:9"));
        assert_eq!(
            Transport::from_url("unix:/run/agentos/http.sock").unwrap(),
            Transport::HttpUnix {
                path: "/run/agentos/http.sock".into()
            }
        );
        for bad in [
            "unix:relative.sock",
            "https://example.com:443",
            "http://127.0.0.1",
            "http://127.0.0.1:99999",
            "http://127.0.0.1:7878/api",
            ":7878",
            "",
        ] {
            assert_eq!(
                Transport::from_url(bad).unwrap_err().code(),
                "invalid_url",
                "{bad}"
            );
        }
    }
}
