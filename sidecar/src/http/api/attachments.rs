//! Seed session attachments and chunked uploads: `UploadSessionAttachment`
//! (a writer of the session's agent), `ReadSessionAttachment` (any
//! reader), and `BeginFileUpload`, `AppendFileUploadChunk`,
//! `CommitFileUpload`, `AbortFileUpload` to an attachment or a memory file
//! (a writer of the target's agent; an upload counts against the owner's
//! limit and is another account's to continue only with that access). A
//! session or agent the caller may not see is `Session not found` or
//! `Agent not found`, an upload it may not touch `Upload not found`; the
//! bytes and their rules are the Space's (`space::attachments`,
//! `space::uploads`).

use agentos_protocol::seed::response::{
    AbortFileUploadResponse, AppendFileUploadChunkResponse, BeginFileUploadResponse,
    CommitFileUploadResponse, DownloadAgentMemoryFileResponse, ReadSessionAttachmentResponse,
    SessionAttachmentInfo, UploadSessionAttachmentResponse,
};
use agentos_protocol::seed::{Action, ApiCode, FileUploadTarget};

use super::{ok, render, ApiError, Caller, SignedApi};
use crate::builtin::fetch::{DownloadError, Downloader};
use crate::control::{authz, AccessRole, ControlError};
use crate::space::attachments::extension_for;
use crate::space::memory;
use crate::space::uploads::{Committed, Upload, UploadTarget};
use crate::space::{reason, AttachmentInfo};

fn info(a: AttachmentInfo) -> SessionAttachmentInfo {
    SessionAttachmentInfo {
        id: a.id,
        session_id: a.session_id,
        name: a.name,
        mime_type: a.mime_type,
        size: a.size,
        created_at: a.created_at,
    }
}

/// Bytes of a download written to its staging file at once.
const STAGE_BYTES: usize = 1024 * 1024;

fn download_error(e: DownloadError) -> ApiError {
    let (status, code) = match e {
        DownloadError::Invalid(_) => (400, ApiCode::InvalidArgument),
        DownloadError::Upstream(_) => (502, ApiCode::DownloadFailed),
        DownloadError::TooLarge => (413, ApiCode::DownloadTooLarge),
        DownloadError::Busy => (429, ApiCode::DownloadsBusy),
    };
    ApiError::new(status, code, e.to_string())
}

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

impl SignedApi {
    /// The session, with `needed` access, as `Session not found` to
    /// whoever may not know of it.
    async fn attachment_session(
        &self,
        account: &str,
        session_id: &str,
        needed: AccessRole,
    ) -> Result<(), ApiError> {
        match authz::require_session(&self.control, account, session_id, needed).await {
            Ok(_) => Ok(()),
            Err(ControlError::NotFound(_)) => Err(ApiError::not_found("Session not found")),
            Err(e) => Err(e.into()),
        }
    }

    /// The owner account of a session the caller may write to.
    async fn session_owner(&self, account: &str, session_id: &str) -> Result<String, ApiError> {
        match authz::require_session(&self.control, account, session_id, AccessRole::Writer).await {
            Ok((link, _)) => Ok(link.account_id),
            Err(ControlError::NotFound(_)) => Err(ApiError::not_found("Session not found")),
            Err(e) => Err(e.into()),
        }
    }

    /// The owner account of an agent the caller may write to.
    async fn agent_owner(&self, account: &str, agent_id: &str) -> Result<String, ApiError> {
        match authz::require_write(&self.control, account, agent_id).await {
            Ok(access) => Ok(access.agent.account_id),
            Err(ControlError::NotFound(_)) => Err(ApiError::not_found("Agent not found")),
            Err(e) => Err(e.into()),
        }
    }

    /// An upload the caller may continue: its target still writable by the
    /// caller, and owned by that target's owner.
    async fn upload_of(
        &self,
        account: &str,
        upload_id: &str,
        now: i64,
    ) -> Result<Upload, ApiError> {
        let upload = self.space.uploads.get(upload_id, now).await?;
        let owner = match &upload.target {
            UploadTarget::SessionAttachment { session_id, .. } => {
                self.session_owner(account, session_id).await?
            }
            UploadTarget::Memory { agent_id, .. } => self.agent_owner(account, agent_id).await?,
        };
        if owner != upload.account_id {
            return Err(ApiError::not_found("Upload not found"));
        }
        Ok(upload)
    }

    /// `DownloadAgentMemoryFile`: the address and a given path checked
    /// before any byte is fetched (the reference checks the path after),
    /// the body streamed into a staging file a piece at a time, then moved
    /// into the agent's memory.
    async fn download(
        &self,
        account: &str,
        agent_id: String,
        url: &str,
        path: Option<String>,
    ) -> Result<Vec<u8>, ApiError> {
        self.agent_owner(account, &agent_id).await?;
        let parsed = Downloader::check(url).map_err(download_error)?;
        let given = match path.as_deref().filter(|p| !p.is_empty()) {
            Some(path) => {
                Some(memory::entry_path(path).map_err(crate::space::uploads::memory_error)?)
            }
            None => None,
        };
        let mut download = self
            .downloader
            .start(parsed.clone(), self.space.uploads.max_memory_bytes())
            .await
            .map_err(download_error)?;
        let mut path = given.unwrap_or_else(|| default_download_path(&parsed));
        if !has_extension(&path) {
            if let Some(ext) = download.content_type.as_deref().and_then(extension_for) {
                path = memory::entry_path(&format!("{path}.{ext}"))
                    .map_err(crate::space::uploads::memory_error)?;
            }
        }
        let uploads = &self.space.uploads;
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
                    return Err(download_error(e));
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
        let entry = uploads.stage_into_memory(&staged, &agent_id, &path).await?;
        self.announce_agent(&agent_id, reason::MEMORY_CHANGED, &[])
            .await;
        ok(&DownloadAgentMemoryFileResponse {
            agent_id,
            entry: render::memory_entry(&entry),
            final_url: download.final_url,
            content_type: download.content_type,
        })
    }

    pub(super) async fn attachment_action(
        &self,
        caller: &Caller,
        action: Action,
    ) -> Result<Vec<u8>, ApiError> {
        let account = caller.account.as_str();
        match action {
            Action::UploadSessionAttachment {
                session_id,
                name,
                mime_type,
                content,
            } => {
                self.attachment_session(account, &session_id, AccessRole::Writer)
                    .await?;
                let now = agentos_base::clock::unix_ms();
                let saved = self
                    .space
                    .attachments
                    .save(
                        &session_id,
                        name.as_deref(),
                        mime_type.as_deref(),
                        &content,
                        now,
                    )
                    .await?;
                ok(&UploadSessionAttachmentResponse {
                    attachment: info(saved),
                })
            }
            Action::ReadSessionAttachment {
                session_id,
                attachment_id,
            } => {
                self.attachment_session(account, &session_id, AccessRole::Reader)
                    .await?;
                let (found, data) = self
                    .space
                    .attachments
                    .read(&session_id, &attachment_id)
                    .await?;
                ok(&ReadSessionAttachmentResponse {
                    attachment: info(found),
                    data,
                })
            }
            Action::BeginFileUpload { target, size } => {
                let now = agentos_base::clock::unix_ms();
                let (owner, target) = match target {
                    FileUploadTarget::SessionAttachment {
                        session_id,
                        name,
                        mime_type,
                    } => (
                        self.session_owner(account, &session_id).await?,
                        UploadTarget::SessionAttachment {
                            session_id,
                            name,
                            mime_type,
                        },
                    ),
                    FileUploadTarget::Memory { agent_id, path } => (
                        self.agent_owner(account, &agent_id).await?,
                        UploadTarget::Memory { agent_id, path },
                    ),
                };
                let upload = self.space.uploads.begin(&owner, target, size, now).await?;
                ok(&BeginFileUploadResponse {
                    upload_id: upload.upload_id,
                    max_chunk_bytes: self.space.uploads.max_chunk_bytes(),
                })
            }
            Action::AppendFileUploadChunk {
                upload_id,
                offset,
                content,
            } => {
                let now = agentos_base::clock::unix_ms();
                self.upload_of(account, &upload_id, now).await?;
                let received = self
                    .space
                    .uploads
                    .append(&upload_id, offset, &content, now)
                    .await?;
                ok(&AppendFileUploadChunkResponse {
                    upload_id,
                    received,
                })
            }
            Action::CommitFileUpload { upload_id } => {
                let now = agentos_base::clock::unix_ms();
                self.upload_of(account, &upload_id, now).await?;
                match self.space.uploads.commit(&upload_id, now).await? {
                    Committed::Attachment(attachment) => ok(&CommitFileUploadResponse {
                        entry: None,
                        attachment: Some(info(attachment)),
                    }),
                    Committed::Memory { agent_id, entry } => {
                        self.announce_agent(&agent_id, reason::MEMORY_CHANGED, &[])
                            .await;
                        ok(&CommitFileUploadResponse {
                            entry: Some(render::memory_entry(&entry)),
                            attachment: None,
                        })
                    }
                }
            }
            Action::AbortFileUpload { upload_id } => {
                let now = agentos_base::clock::unix_ms();
                self.upload_of(account, &upload_id, now).await?;
                self.space.uploads.abort(&upload_id, now).await?;
                ok(&AbortFileUploadResponse { upload_id })
            }
            Action::DownloadAgentMemoryFile {
                agent_id,
                url,
                path,
            } => self.download(account, agent_id, &url, path).await,
            other => Err(ApiError::bad_request(
                ApiCode::UnsupportedAction,
                format!("{} is not an attachment action", other.name()),
            )),
        }
    }
}
