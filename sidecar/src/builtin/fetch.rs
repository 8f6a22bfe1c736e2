//! `https://` reads for the agent (`read` and `web_fetch`): one GET with a
//! deadline, at most [`MAX_PAGE_BYTES`] of the body kept (cut on a UTF-8
//! boundary with a notice), text only. Redirects stay on https.

use std::time::Duration;

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
}

impl FetchError {
    pub fn code(&self) -> &'static str {
        match self {
            FetchError::Network(_) => "fetch_failed",
            FetchError::Status(_) => "fetch_status",
            FetchError::NotText(_) => "fetch_not_text",
        }
    }
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
                if attempt.previous().len() >= MAX_REDIRECTS || attempt.url().scheme() != "https" {
                    attempt.stop()
                } else {
                    attempt.follow()
                }
            }))
            .user_agent(concat!("agentos-sidecar/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FetchError::Network(e.to_string()))?;
        Ok(Fetcher { client })
    }

    /// The page at `url` as text, at most [`MAX_PAGE_BYTES`].
    pub async fn fetch(&self, url: &str) -> Result<String, FetchError> {
        let response = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| FetchError::Network(e.without_url().to_string()))?;
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
            let chunk = chunk.map_err(|e| FetchError::Network(e.without_url().to_string()))?;
            let room = MAX_PAGE_BYTES + 4 - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                cut = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        if cut || text.len() > MAX_PAGE_BYTES {
            return Ok(cut_with_notice(&text, MAX_PAGE_BYTES));
        }
        Ok(text)
    }
}
