//! Seed hypermedia: agents read `hm://` documents and comments from the
//! hypermedia server the VM's `hypermedia` config names, through the same
//! HTTP API Seed's own client uses (`client.rs`), and see them as the
//! reference shows them (`read.rs`: the resource, its markdown with
//! mentions, embeds and query blocks resolved, or its attributes;
//! `views.rs`: profiles, directories and the activity feed), and publish
//! signed blobs to it (`publish.rs`: accounts, profiles, files;
//! `write.rs`: the write commands of documents, comments and drafts,
//! whose rows `drafts.rs` keeps).

mod client;
pub mod drafts;
mod frontmatter;
pub mod publish;
mod read;
mod views;
pub mod write;

pub use client::{http_error_message, HmClient, Param, QueryInput};
pub use read::{ActivityPace, Format, Hypermedia};

/// The CID of `ipfs://<cid>` (or of a gateway's `…/ipfs/<cid>`), as the
/// reference reads it: up to the first `/`, `?` or `#`, at least 32
/// letters and digits.
pub fn ipfs_cid(address: &str) -> Result<String, HmError> {
    let trimmed = address.trim();
    if trimmed.is_empty() {
        return Err(HmError::InvalidAddress(
            "An IPFS CID or ipfs:// URL is required".into(),
        ));
    }
    let rest = match trimmed.strip_prefix("ipfs://") {
        Some(rest) => rest,
        None => match trimmed.find("/ipfs/") {
            Some(at) => &trimmed[at + "/ipfs/".len()..],
            None => trimmed,
        },
    };
    let cid = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if cid.len() < 32 || !cid.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(HmError::InvalidAddress(format!(
            "Not a valid IPFS CID: {trimmed}"
        )));
    }
    Ok(cid.to_owned())
}

/// Why a hypermedia read failed. The message is what the model reads.
#[derive(Debug, thiserror::Error)]
pub enum HmError {
    /// The address is not one this read takes.
    #[error("{0}")]
    InvalidAddress(String),
    /// Input the request cannot be made of.
    #[error("{0}")]
    InvalidInput(String),
    #[error("Network error fetching {key}: {message}")]
    Unreachable { key: String, message: String },
    #[error("Network error fetching {key}: no answer within {after_ms} ms")]
    Timeout { key: String, after_ms: u64 },
    /// A non-2xx answer, worded as the reference words it.
    #[error("{message}")]
    Status {
        key: String,
        status: u16,
        message: String,
    },
    /// An answer that is not what the request's schema promises.
    #[error("invalid answer from {key}: {message}")]
    Malformed { key: String, message: String },
    #[error("the answer from {key} passes hypermedia.maxResponseBytes ({limit} bytes)")]
    TooLarge { key: String, limit: usize },
}

impl HmError {
    /// The stable code a tool result carries.
    pub fn code(&self) -> &'static str {
        match self {
            HmError::InvalidAddress(_) => "invalid_address",
            HmError::InvalidInput(_) => "invalid_argument",
            HmError::Unreachable { .. } => "hm_unreachable",
            HmError::Timeout { .. } => "hm_timeout",
            HmError::Status { .. } => "hm_status",
            HmError::Malformed { .. } => "hm_malformed",
            HmError::TooLarge { .. } => "hm_too_large",
        }
    }
}
