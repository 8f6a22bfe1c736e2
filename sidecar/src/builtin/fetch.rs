//! `https://` reads for the agent (`read` and `web_fetch`): one GET with a
//! deadline, at most [`MAX_PAGE_BYTES`] of the body kept (cut on a UTF-8
//! boundary with a notice), text only. Only public addresses are reached
//! (a model or a user chose the URL): names resolve through
//! `net::PublicOnly`, IP literals are checked, on every redirect hop, and
//! redirects stay on https. [`Downloader`] is the same for a file a user
//! saves into memory (`DownloadAgentMemoryFile`): `http://` too, the body
//! streamed a piece at a time within a bound, a minute at most between
//! pieces.

use std::time::Duration;

use agentos_adapters::builtin::net;
use agentos_protocol::agent_ext::cut_with_notice;
use futures_util::StreamExt;

/// Bytes of a page the agent receives.
pub const MAX_PAGE_BYTES: usize = 200 * 1024;
const DEADLINE: Duration = Duration::from_secs(30);
const MAX_REDIRECTS: usize = 5;

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
fn chain(e: &dyn std::error::Error) -> String {
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

/// How long a download may wait for its next bytes (not a total bound).
const DOWNLOAD_IDLE: Duration = Duration::from_secs(60);

/// Why a download failed, in the reference's words.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    /// The address itself (a 400).
    #[error("{0}")]
    Invalid(String),
    /// The upstream or the way there (a 502).
    #[error("{0}")]
    Upstream(String),
    /// Larger than the bound (a 413).
    #[error("Download exceeds the maximum file size")]
    TooLarge,
    /// Every download slot of the VM is taken (`limits.control.maxDownloads`;
    /// a 429).
    #[error("Too many downloads in progress; try again when one has finished")]
    Busy,
}

/// What a download answered before its body.
pub struct Download {
    /// After redirects.
    pub final_url: String,
    /// The raw header value, parameters included.
    pub content_type: Option<String>,
    response: reqwest::Response,
    url: String,
    received: u64,
    max_bytes: u64,
    /// The VM's download slot, held until the body is read or dropped.
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Download {
    /// The body's next piece, none at its end; each waits at most a minute.
    pub async fn next(&mut self) -> Result<Option<bytes::Bytes>, DownloadError> {
        let chunk = tokio::time::timeout(DOWNLOAD_IDLE, self.response.chunk())
            .await
            .map_err(|_| {
                DownloadError::Upstream(format!(
                    "Download of {} failed: no data for {} s",
                    self.url,
                    DOWNLOAD_IDLE.as_secs()
                ))
            })?
            .map_err(|e| {
                DownloadError::Upstream(format!(
                    "Download of {} failed: {}",
                    self.url,
                    chain(&e.without_url())
                ))
            })?;
        if let Some(chunk) = &chunk {
            self.received += chunk.len() as u64;
            if self.received > self.max_bytes {
                return Err(DownloadError::TooLarge);
            }
        }
        Ok(chunk)
    }
}

/// Downloads into memory files (`DownloadAgentMemoryFile`): `http://` or
/// `https://`, public addresses only (as page reads) unless the operator
/// allows private ones (`builtin.allowPrivateDownloads`).
#[derive(Clone)]
pub struct Downloader {
    client: reqwest::Client,
    allow_private: bool,
    /// Downloads at once in the whole VM.
    slots: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Downloader {
    /// At most `max_at_once` downloads run together.
    pub fn new(allow_private: bool, max_at_once: u64) -> Result<Downloader, FetchError> {
        let builder = reqwest::Client::builder()
            .connect_timeout(DEADLINE)
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                let scheme_ok = matches!(attempt.url().scheme(), "http" | "https");
                let public = allow_private || net::check_url(attempt.url()).is_ok();
                if attempt.previous().len() >= MAX_REDIRECTS || !scheme_ok || !public {
                    attempt.stop()
                } else {
                    attempt.follow()
                }
            }))
            .no_proxy()
            .user_agent(concat!("agentos-sidecar/", env!("CARGO_PKG_VERSION")));
        let builder = if allow_private {
            builder
        } else {
            builder.dns_resolver(std::sync::Arc::new(net::PublicOnly))
        };
        let client = builder
            .build()
            .map_err(|e| FetchError::Network(e.to_string()))?;
        let permits = usize::try_from(max_at_once)
            .unwrap_or(usize::MAX)
            .min(tokio::sync::Semaphore::MAX_PERMITS);
        Ok(Downloader {
            client,
            allow_private,
            slots: std::sync::Arc::new(tokio::sync::Semaphore::new(permits)),
        })
    }

    /// The address as a download takes it, or why not.
    pub fn check(url: &str) -> Result<reqwest::Url, DownloadError> {
        let trimmed = url.trim();
        if trimmed.is_empty() {
            return Err(DownloadError::Invalid("Download URL is required".into()));
        }
        let parsed = reqwest::Url::parse(trimmed)
            .map_err(|_| DownloadError::Invalid(format!("Invalid download URL: {url}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(DownloadError::Invalid(
                "Download URL must use http or https".into(),
            ));
        }
        Ok(parsed)
    }

    /// Starts a download; its body comes with [`Download::next`], at most
    /// `max_bytes` of it.
    pub async fn start(
        &self,
        url: reqwest::Url,
        max_bytes: u64,
    ) -> Result<Download, DownloadError> {
        let slot = self
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| DownloadError::Busy)?;
        let href = url.to_string();
        let upstream =
            |why: String| DownloadError::Upstream(format!("Could not download {href}: {why}"));
        if !self.allow_private {
            net::check_url(&url).map_err(upstream)?;
        }
        // The wait for the answer's head counts as idle too.
        let response = tokio::time::timeout(DOWNLOAD_IDLE, self.client.get(url).send())
            .await
            .map_err(|_| upstream(format!("no answer for {} s", DOWNLOAD_IDLE.as_secs())))?
            .map_err(|e| upstream(chain(&e.without_url())))?;
        if !response.status().is_success() {
            return Err(upstream(format!("HTTP {}", response.status().as_u16())));
        }
        if response
            .content_length()
            .is_some_and(|length| length > max_bytes)
        {
            return Err(DownloadError::TooLarge);
        }
        Ok(Download {
            final_url: response.url().to_string(),
            content_type: response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            response,
            url: href,
            received: 0,
            max_bytes,
            _slot: slot,
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
