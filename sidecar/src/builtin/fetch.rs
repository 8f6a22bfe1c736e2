//! `https://` reads for the agent (`read` and `web_fetch`): one GET with a
//! deadline, at most [`MAX_PAGE_BYTES`] of the body kept (cut on a UTF-8
//! boundary with a notice), text only. Only public addresses are reached
//! (a model or a user chose the URL): names resolve through
//! `net::PublicOnly`, IP literals are checked, on every redirect hop, and
//! redirects stay on https. Files saved into memory are `download.rs`'s.

use std::time::Duration;

use agentos_adapters::builtin::net;
use agentos_protocol::agent_ext::cut_with_notice;
use futures_util::StreamExt;

/// Bytes of a page the agent receives.
pub const MAX_PAGE_BYTES: usize = 200 * 1024;
pub(super) const DEADLINE: Duration = Duration::from_secs(30);
pub(super) const MAX_REDIRECTS: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("the page could not be fetched: {0}")]
    Network(String),
    #[error("the server answered {0}")]
    Status(u16),
    #[error("the page is not text ({0})")]
    NotText(String),
    #[error("the address is refused: {0}")]
    Refused(String),
}

impl FetchError {
    pub fn code(&self) -> &'static str {
        match self {
            FetchError::Network(_) => "fetch_failed",
            FetchError::Status(_) => "fetch_status",
            FetchError::NotText(_) => "fetch_not_text",
            FetchError::Refused(_) => "address_refused",
        }
    }
}

/// An error with its causes, which say why (a refused name, a reset).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A fetched page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// The URL fetched, after redirects.
    pub url: String,
    pub content_type: String,
    /// At most [`MAX_PAGE_BYTES`], cut with a notice.
    pub text: String,
}

#[derive(Clone)]
pub struct Fetcher {
    client: reqwest::Client,
}

impl Fetcher {
    pub fn new() -> Result<Fetcher, FetchError> {
        let client = reqwest::Client::builder()
            .timeout(DEADLINE)
            .redirect(reqwest::redirect::Policy::custom(|attempt| {
                if attempt.previous().len() >= MAX_REDIRECTS
                    || attempt.url().scheme() != "https"
                    || net::check_url(attempt.url()).is_err()
                {
                    attempt.stop()
                } else {
                    attempt.follow()
                }
            }))
            // A proxy would resolve names itself, past the address check.
            .no_proxy()
            .dns_resolver(std::sync::Arc::new(net::PublicOnly))
            .user_agent(concat!("agentos-sidecar/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FetchError::Network(e.to_string()))?;
        Ok(Fetcher { client })
    }

    /// The page at `url` as text, at most [`MAX_PAGE_BYTES`].
    pub async fn fetch(&self, url: &str) -> Result<Page, FetchError> {
        let parsed = reqwest::Url::parse(url).map_err(|e| FetchError::Refused(e.to_string()))?;
        if parsed.scheme() != "https" {
            return Err(FetchError::Refused(
                "only https:// pages can be read".into(),
            ));
        }
        net::check_url(&parsed).map_err(FetchError::Refused)?;
        let response = self
            .client
            .get(parsed)
            .send()
            .await
            .map_err(|e| FetchError::Network(chain(&e.without_url())))?;
        let final_url = response.url().to_string();
        let status = response.status();
        if !status.is_success() {
            return Err(FetchError::Status(status.as_u16()));
        }
        let kind = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("text/plain")
            .to_owned();
        let textual = kind.starts_with("text/")
            || kind.contains("json")
            || kind.contains("xml")
            || kind.contains("javascript");
        if !textual {
            return Err(FetchError::NotText(kind));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        let mut cut = false;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| FetchError::Network(chain(&e.without_url())))?;
            let room = MAX_PAGE_BYTES + 4 - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                cut = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        let mut text = String::from_utf8_lossy(&body).into_owned();
        if cut || text.len() > MAX_PAGE_BYTES {
            text = cut_with_notice(&text, MAX_PAGE_BYTES);
        }
        Ok(Page {
            url: final_url,
            content_type: kind,
            text,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn private_and_plain_addresses_are_refused_before_any_connection() {
        let fetcher = Fetcher::new().unwrap();
        for url in [
            "https://127.0.0.1/",
            "https://169.254.169.254/latest/meta-data",
            "https://[::1]:8443/",
            "https://localhost/",
            "http://example.com/",
        ] {
            let e = fetcher.fetch(url).await.unwrap_err();
            assert!(
                matches!(e, FetchError::Refused(_) | FetchError::Network(_)),
                "{url}: {e}"
            );
            if let FetchError::Network(message) = &e {
                assert!(message.contains("public address"), "{url}: {message}");
            }
        }
    }
}
