//! Seed session attachments: `UploadSessionAttachment` (a writer of the
//! session's agent) and `ReadSessionAttachment` (any reader). A session
//! the caller may not see is `Session not found`, whatever the reason; the
//! bytes and their rules are the Space's (`space::attachments`).

use agentos_protocol::seed::response::{
    ReadSessionAttachmentResponse, SessionAttachmentInfo, UploadSessionAttachmentResponse,
};
use agentos_protocol::seed::{Action, ApiCode};

use super::{ok, ApiError, Caller, SignedApi};
use crate::control::{authz, AccessRole, ControlError};
use crate::space::AttachmentInfo;

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
            other => Err(ApiError::bad_request(
                ApiCode::UnsupportedAction,
                format!("{} is not an attachment action", other.name()),
            )),
        }
    }
}
