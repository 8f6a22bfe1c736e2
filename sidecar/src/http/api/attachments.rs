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
use crate::builtin::download::DownloadError;
use crate::control::{authz, AccessRole, ControlError};
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

fn download_error(e: DownloadError) -> ApiError {
    let (status, code) = match e {
        DownloadError::Invalid(_) => (400, ApiCode::InvalidArgument),
        DownloadError::Upstream(_) => (502, ApiCode::DownloadFailed),
        DownloadError::TooLarge => (413, ApiCode::DownloadTooLarge),
        DownloadError::Busy => (429, ApiCode::DownloadsBusy),
        DownloadError::Memory(e) => return e.into(),
    };
    ApiError::new(status, code, e.to_string())
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

    /// `DownloadAgentMemoryFile`, for a writer of the agent.
    async fn download(
        &self,
        account: &str,
        agent_id: String,
        url: &str,
        path: Option<String>,
    ) -> Result<Vec<u8>, ApiError> {
        self.agent_owner(account, &agent_id).await?;
        let saved = self
            .downloader
            .into_memory(&self.space.uploads, &agent_id, url, path.as_deref())
            .await
            .map_err(download_error)?;
        self.announce_agent(&agent_id, reason::MEMORY_CHANGED, &[])
            .await;
        ok(&DownloadAgentMemoryFileResponse {
            agent_id,
            entry: render::memory_entry(&saved.entry),
            final_url: saved.final_url,
            content_type: saved.content_type,
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
