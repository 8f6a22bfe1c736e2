//! Files saved into an agent's memory from an address (`DownloadAgentMemoryFile`
//! and `write ~/memory/…` with `{fromUrl}`): `http://` or `https://`, public
//! addresses only (as page reads) unless the operator allows private ones
//! (`builtin.allowPrivateDownloads`), at most `limits.control.maxDownloads`
//! at once in the VM, the body streamed into a staging file a piece at a
//! time within the memory upload bound and a minute at most between pieces,
//! then moved into place. Named as the reference names a download.

use std::time::Duration;

use agentos_adapters::builtin::net;

use super::fetch::{chain, FetchError, DEADLINE, MAX_REDIRECTS};
use crate::space::attachments::extension_for;
use crate::space::memory::{self, MemoryEntry};
use crate::space::uploads::{memory_error, Uploads};
use crate::space::AttachmentError;

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
    /// The memory path, or writing the file there.
    #[error("{0}")]
    Memory(#[from] AttachmentError),
}

impl DownloadError {
    pub fn code(&self) -> &'static str {
        match self {
            DownloadError::Invalid(_) => "invalid_argument",
            DownloadError::Upstream(_) => "download_failed",
            DownloadError::TooLarge => "download_too_large",
            DownloadError::Busy => "downloads_busy",
            DownloadError::Memory(e) => e.code(),
        }
    }
}

/// A file saved from an address.
pub struct Downloaded {
    pub entry: MemoryEntry,
    /// After redirects.
    pub final_url: String,
    /// The raw header value, parameters included.
    pub content_type: Option<String>,
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

/// Downloads into memory files.
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

    /// A downloader for addresses the operator named (the IPFS gateway):
    /// private addresses allowed, the same VM-wide slots.
    pub fn for_operator(&self) -> Result<Downloader, FetchError> {
        let mut operator = Downloader::new(true, 1)?;
        operator.slots = self.slots.clone();
        Ok(operator)
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

/// Bytes of a download written to its staging file at once.
const STAGE_BYTES: usize = 1024 * 1024;

/// `downloads/<the URL's last segment>`, as the reference names a download:
/// percent-decoded, `\` and `..` made `-`, at most 128 UTF-16 units,
/// `download-<ms>` when empty.
fn default_download_path(url: &reqwest::Url) -> String {
    let last = url
        .path_segments()
        .and_then(|mut segments| segments.rfind(|s| !s.is_empty()))
        .unwrap_or_default();
    let decoded = percent_encoding::percent_decode_str(last).decode_utf8_lossy();
    let cleaned = decoded.replace('\\', "-").replace("..", "-");
    let units: Vec<u16> = cleaned.encode_utf16().take(128).collect();
    let name = String::from_utf16_lossy(&units);
    let name = if name.trim().is_empty() {
        format!("download-{}", agentos_base::clock::unix_ms())
    } else {
        name
    };
    format!("downloads/{name}")
}

/// Whether a path ends in `.` and one to eight letters or digits.
fn has_extension(path: &str) -> bool {
    path.rsplit_once('.').is_some_and(|(_, ext)| {
        (1..=8).contains(&ext.len()) && ext.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

impl Downloader {
    /// Saves the file at `url` in `agent_id`'s memory at `path` (by default
    /// `downloads/<the URL's last segment>`, with an extension from the
    /// content type when the path has none). The address and a given path
    /// are checked before any byte is fetched (the reference checks the
    /// path after).
    pub async fn into_memory(
        &self,
        uploads: &Uploads,
        agent_id: &str,
        url: &str,
        path: Option<&str>,
    ) -> Result<Downloaded, DownloadError> {
        let parsed = Downloader::check(url)?;
        let given = match path.filter(|p| !p.is_empty()) {
            Some(path) => Some(memory::entry_path(path).map_err(memory_error)?),
            None => None,
        };
        let mut download = self
            .start(parsed.clone(), uploads.max_memory_bytes())
            .await?;
        let mut path = given.unwrap_or_else(|| default_download_path(&parsed));
        if !has_extension(&path) {
            if let Some(ext) = download.content_type.as_deref().and_then(extension_for) {
                path = memory::entry_path(&format!("{path}.{ext}")).map_err(memory_error)?;
            }
        }
        let staged = uploads.stage_new().await?;
        // Written in pieces of about a megabyte, not one per network read.
        let mut buffer: Vec<u8> = Vec::with_capacity(STAGE_BYTES);
        let mut offset = 0u64;
        loop {
            let next = download.next().await;
            let end = matches!(next, Ok(None));
            match next {
                Ok(Some(piece)) => buffer.extend_from_slice(&piece),
                Ok(None) => {}
                Err(e) => {
                    uploads.stage_drop(&staged).await;
                    return Err(e);
                }
            }
            if buffer.len() >= STAGE_BYTES || (end && !buffer.is_empty()) {
                if let Err(e) = uploads.stage_write(&staged, offset, &buffer).await {
                    uploads.stage_drop(&staged).await;
                    return Err(e.into());
                }
                offset += buffer.len() as u64;
                buffer.clear();
            }
            if end {
                break;
            }
        }
        let entry = uploads.stage_into_memory(&staged, agent_id, &path).await?;
        Ok(Downloaded {
            entry,
            final_url: download.final_url,
            content_type: download.content_type,
        })
    }
}
