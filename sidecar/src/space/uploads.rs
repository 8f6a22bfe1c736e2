//! Chunked uploads: a large file sent in pieces (`BeginFileUpload`,
//! `AppendFileUploadChunk`, `CommitFileUpload`, `AbortFileUpload`) to
//! become a session attachment or a memory file. An upload is durable: its
//! state (`<id>.json`) and its bytes so far (`<id>.part`) live in the VM's
//! file system under `/.agentos/uploads/`, so a sidecar killed mid-upload
//! keeps it, and the client resumes at the offset it is told (or aborts).
//! Only one chunk of an upload is ever in memory. A commit moves the bytes
//! into place (no copy) and ends the upload; an attachment exists only once
//! its record is written, so a crash leaves no partial attachment.
//!
//! Rules and words are the Seed service's: chunks of at most 8 MiB, each at
//! exactly the offset received so far (409 otherwise) and never past the
//! declared size; a commit of an incomplete upload is 400 and leaves it
//! usable; anything after a commit or an abort is `Upload not found`; at
//! most 8 uploads in progress per owner account (429), and
//! `limits.control.maxUploads` in the whole VM. Unlike the
//! reference, an upload idle past `limits.control.uploadIdleMs` (an hour)
//! is gone at once, not at the next begin, and a deleted session's uploads
//! go with it.

use std::sync::Arc;

use agentos_vfs::{FsError, Vfs, DEFAULT_DIR_MODE, RESERVED_ROOT};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::attachments::{AttachmentError, AttachmentInfo, NewAttachment, SessionAttachments};
use super::memory::{self, AgentMemory, MemoryEntry};
use crate::config::ControlLimits;

/// Bytes hashed or moved per read when an upload is committed.
const COMMIT_READ_BYTES: u64 = 4 * 1024 * 1024;

/// Where an upload's bytes go.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum UploadTarget {
    #[serde(rename_all = "camelCase")]
    SessionAttachment {
        session_id: String,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Memory { agent_id: String, path: String },
}

/// An upload's durable state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Upload {
    pub upload_id: String,
    /// The owner account whose limit it counts against.
    pub account_id: String,
    pub target: UploadTarget,
    pub size: u64,
    pub received: u64,
    pub updated_at: i64,
}

/// What a commit made.
#[derive(Clone, Debug, PartialEq)]
pub enum Committed {
    Attachment(AttachmentInfo),
    Memory {
        agent_id: String,
        entry: MemoryEntry,
    },
}

use super::attachments::storage;

/// A memory write's refusal in the reference's terms: a bad path or a
/// directory in the way is a 400 with its words; a full file system a 413.
pub fn memory_error(e: super::SpaceError) -> AttachmentError {
    use super::SpaceError;
    match e {
        SpaceError::Conflict(message)
        | SpaceError::InvalidArgument(message)
        | SpaceError::MemoryPath(message) => AttachmentError::Invalid(message),
        SpaceError::InvalidPath { .. } | SpaceError::NotFound(_) => {
            AttachmentError::Invalid(e.to_string())
        }
        SpaceError::TooLarge { .. } | SpaceError::Limit { .. } => {
            AttachmentError::TooLarge(e.to_string())
        }
        other => AttachmentError::Storage(other.to_string()),
    }
}

fn not_found() -> AttachmentError {
    AttachmentError::NotFound("Upload not found".into())
}

/// Every upload in progress. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Uploads {
    reserved: Vfs,
    attachments: SessionAttachments,
    memory: AgentMemory,
    /// One change to the uploads at a time (they are few and small).
    lock: Arc<tokio::sync::Mutex<()>>,
    max_per_account: u64,
    /// Uploads in progress in the whole VM, at most.
    max_total: u64,
    idle_ms: i64,
    max_attachment_bytes: u64,
    max_chunk_bytes: u64,
    max_memory_bytes: u64,
}

const DIR: &str = "uploads";

impl Uploads {
    /// Uploads bounded by `limits.control`'s upload settings.
    pub fn new(
        vfs: &Vfs,
        attachments: SessionAttachments,
        memory: AgentMemory,
        limits: &ControlLimits,
    ) -> Uploads {
        Uploads {
            reserved: vfs.reserved_view(),
            attachments,
            memory,
            lock: Arc::default(),
            max_per_account: limits.max_uploads_per_account,
            max_total: limits.max_uploads,
            idle_ms: i64::try_from(limits.upload_idle_ms).unwrap_or(i64::MAX),
            max_attachment_bytes: limits.max_attachment_bytes,
            max_chunk_bytes: limits.max_upload_chunk_bytes,
            max_memory_bytes: limits.max_memory_upload_bytes,
        }
    }

    /// Bytes of one chunk, at most (what `maxChunkBytes` answers).
    pub fn max_chunk_bytes(&self) -> u64 {
        self.max_chunk_bytes
    }

    /// Bytes of one file into memory, uploaded or downloaded, at most.
    pub fn max_memory_bytes(&self) -> u64 {
        self.max_memory_bytes
    }

    fn dir() -> String {
        format!("{RESERVED_ROOT}/{DIR}")
    }

    fn state_path(id: &str) -> String {
        format!("{}/{id}.json", Self::dir())
    }

    fn part_path(id: &str) -> String {
        format!("{}/{id}.part", Self::dir())
    }

    /// Every live upload's state. With the lock held: idle or unreadable
    /// uploads are removed, and so are bytes no state names (a crash
    /// between the two writes) and staged downloads idle past the bound.
    async fn all(&self, now: i64) -> Result<Vec<Upload>, AttachmentError> {
        let entries = match self.reserved.readdir_all(&Self::dir()).await {
            Ok(entries) => entries,
            Err(FsError::NotFound { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(storage(e)),
        };
        let mut out = Vec::new();
        let mut live = std::collections::HashSet::new();
        for entry in &entries {
            let Some(id) = entry.name.strip_suffix(".json") else {
                continue;
            };
            match self.load(id, now).await? {
                Some(upload) => {
                    live.insert(id.to_owned());
                    out.push(upload);
                }
                None => self.forget(id).await?,
            }
        }
        for entry in &entries {
            let Some(id) = entry.name.strip_suffix(".part") else {
                continue;
            };
            let staged = id.starts_with("dl-");
            let idle = now.saturating_sub(entry.stat.mtime_ms) > self.idle_ms;
            if (!staged && !live.contains(id)) || (staged && idle) {
                self.stage_drop(&format!("{}/{}", Self::dir(), entry.name))
                    .await;
            }
        }
        Ok(out)
    }

    /// One upload's state: none for an id that is not an upload's (a
    /// UUID), a missing or unreadable state, or an idle upload (removed by
    /// the next look at them all, under the lock).
    async fn load(&self, id: &str, now: i64) -> Result<Option<Upload>, AttachmentError> {
        if uuid::Uuid::parse_str(id).is_err() {
            return Ok(None);
        }
        let bytes = match self
            .reserved
            .read(&Self::state_path(id), 0, 64 * 1024)
            .await
        {
            Ok(bytes) => bytes,
            Err(FsError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(storage(e)),
        };
        let Ok(upload) = serde_json::from_slice::<Upload>(&bytes) else {
            return Ok(None);
        };
        if now.saturating_sub(upload.updated_at) > self.idle_ms {
            return Ok(None);
        }
        Ok(Some(upload))
    }

    async fn save(&self, upload: &Upload) -> Result<(), AttachmentError> {
        let state = serde_json::to_vec(upload)
            .map_err(|e| AttachmentError::Storage(format!("upload state: {e}")))?;
        self.reserved
            .write_file(&Self::state_path(&upload.upload_id), &state)
            .await
            .map_err(storage)
            .map(drop)
    }

    /// Removes an upload's bytes, then its state (bytes without a state
    /// are swept; a state without bytes would not be).
    async fn forget(&self, id: &str) -> Result<(), AttachmentError> {
        for path in [Self::part_path(id), Self::state_path(id)] {
            match self.reserved.unlink(&path).await {
                Ok(()) | Err(FsError::NotFound { .. }) => {}
                Err(e) => return Err(storage(e)),
            }
        }
        Ok(())
    }

    /// An upload in progress, for the access check (which needs its
    /// target) and the calls after it.
    pub async fn get(&self, id: &str, now: i64) -> Result<Upload, AttachmentError> {
        self.load(id, now).await?.ok_or_else(not_found)
    }

    /// Begins an upload of `size` bytes to `target` for the owner
    /// `account_id` (its access checked by the caller).
    pub async fn begin(
        &self,
        account_id: &str,
        target: UploadTarget,
        size: i64,
        now: i64,
    ) -> Result<Upload, AttachmentError> {
        let size = u64::try_from(size).ok().filter(|s| *s > 0).ok_or_else(|| {
            AttachmentError::Invalid("Upload size must be a positive integer".into())
        })?;
        let target = match target {
            UploadTarget::Memory { agent_id, path } => {
                let path = memory::entry_path(&path)
                    .map_err(|e| AttachmentError::Invalid(e.to_string()))?;
                if size > self.max_memory_bytes {
                    return Err(AttachmentError::TooLarge(
                        "Upload exceeds the maximum file size".into(),
                    ));
                }
                UploadTarget::Memory { agent_id, path }
            }
            UploadTarget::SessionAttachment {
                session_id,
                name,
                mime_type,
            } => {
                if name.trim().is_empty() {
                    return Err(AttachmentError::Invalid(
                        "Attachment name is required".into(),
                    ));
                }
                if size > self.max_attachment_bytes {
                    return Err(AttachmentError::TooLarge(
                        "Upload exceeds the maximum attachment size".into(),
                    ));
                }
                UploadTarget::SessionAttachment {
                    session_id,
                    name,
                    mime_type,
                }
            }
        };
        let _one = self.lock.lock().await;
        let all = self.all(now).await?;
        let mine = all.iter().filter(|u| u.account_id == account_id).count() as u64;
        // Every account's own bound, and the VM's (many accounts at once).
        if mine >= self.max_per_account || all.len() as u64 >= self.max_total {
            return Err(AttachmentError::TooMany(
                "Too many uploads in progress".into(),
            ));
        }
        let upload = Upload {
            upload_id: uuid::Uuid::new_v4().to_string(),
            account_id: account_id.to_owned(),
            target,
            size,
            received: 0,
            updated_at: now,
        };
        self.reserved
            .mkdir_p(&Self::dir(), DEFAULT_DIR_MODE)
            .await
            .map_err(storage)?;
        self.reserved
            .write_file(&Self::part_path(&upload.upload_id), &[])
            .await
            .map_err(storage)?;
        self.save(&upload).await?;
        Ok(upload)
    }

    /// Appends one chunk at `offset`; answers the bytes received so far.
    pub async fn append(
        &self,
        id: &str,
        offset: i64,
        content: &[u8],
        now: i64,
    ) -> Result<u64, AttachmentError> {
        let _one = self.lock.lock().await;
        let mut upload = self.get(id, now).await?;
        if content.is_empty() {
            return Err(AttachmentError::Invalid(
                "Chunk content must be non-empty bytes".into(),
            ));
        }
        if content.len() as u64 > self.max_chunk_bytes {
            return Err(AttachmentError::TooLarge("Chunk is too large".into()));
        }
        if u64::try_from(offset).ok() != Some(upload.received) {
            return Err(AttachmentError::Conflict(format!(
                "Chunk offset {offset} does not match {} bytes received",
                upload.received
            )));
        }
        if upload.received + content.len() as u64 > upload.size {
            return Err(AttachmentError::Invalid(
                "Upload exceeds its declared size".into(),
            ));
        }
        let part = Self::part_path(id);
        // Bytes a crash left past what the state counts go first.
        self.reserved
            .truncate(&part, upload.received)
            .await
            .map_err(storage)?;
        self.reserved
            .write(&part, upload.received, content)
            .await
            .map_err(storage)?;
        upload.received += content.len() as u64;
        upload.updated_at = now;
        self.save(&upload).await?;
        Ok(upload.received)
    }

    /// Commits a complete upload: its bytes become the attachment or the
    /// memory file, and the upload ends (whatever the outcome, as the
    /// reference).
    pub async fn commit(&self, id: &str, now: i64) -> Result<Committed, AttachmentError> {
        let _one = self.lock.lock().await;
        let upload = self.get(id, now).await?;
        if upload.received != upload.size {
            return Err(AttachmentError::Invalid(format!(
                "Upload has {} of {} bytes; cannot commit",
                upload.received, upload.size
            )));
        }
        let part = Self::part_path(id);
        let made = match &upload.target {
            UploadTarget::SessionAttachment {
                session_id,
                name,
                mime_type,
            } => {
                // A crash after an earlier commit moved the bytes leaves
                // nothing to commit: the upload ends.
                let digest = match self.digest(&part, upload.size).await {
                    Ok(digest) => digest,
                    Err(AttachmentError::NotFound(_)) => {
                        self.forget(id).await?;
                        return Err(not_found());
                    }
                    Err(e) => return Err(e),
                };
                let new = NewAttachment {
                    session_id,
                    name: Some(name),
                    mime_type: mime_type.as_deref(),
                    size: upload.size,
                    digest: &digest,
                };
                self.attachments
                    .place(new, &part, now)
                    .await
                    .map(Committed::Attachment)
            }
            UploadTarget::Memory { agent_id, path } => self
                .memory
                .place(agent_id, path, &part)
                .await
                .map(|entry| Committed::Memory {
                    agent_id: agent_id.clone(),
                    entry,
                })
                .map_err(memory_error),
        };
        self.forget(id).await?;
        made
    }

    /// Ends an upload without committing it.
    pub async fn abort(&self, id: &str, now: i64) -> Result<(), AttachmentError> {
        let _one = self.lock.lock().await;
        self.get(id, now).await?;
        self.forget(id).await
    }

    /// Ends every upload to a deleted session.
    pub async fn delete_session(&self, session_id: &str, now: i64) -> Result<(), AttachmentError> {
        self.forget_where(now, |target| {
            matches!(target, UploadTarget::SessionAttachment { session_id: s, .. } if s == session_id)
        })
        .await
    }

    /// Ends every upload to a deleted agent's memory.
    pub async fn delete_agent(&self, agent_id: &str, now: i64) -> Result<(), AttachmentError> {
        self.forget_where(
            now,
            |target| matches!(target, UploadTarget::Memory { agent_id: a, .. } if a == agent_id),
        )
        .await
    }

    async fn forget_where(
        &self,
        now: i64,
        gone: impl Fn(&UploadTarget) -> bool,
    ) -> Result<(), AttachmentError> {
        let _one = self.lock.lock().await;
        for upload in self.all(now).await? {
            if gone(&upload.target) {
                self.forget(&upload.upload_id).await?;
            }
        }
        Ok(())
    }

    /// A new staging file for bytes that arrive in pieces from elsewhere (a
    /// download), outside any upload: written with [`Uploads::stage_write`],
    /// then moved into memory or dropped.
    pub async fn stage_new(&self) -> Result<String, AttachmentError> {
        self.reserved
            .mkdir_p(&Self::dir(), DEFAULT_DIR_MODE)
            .await
            .map_err(storage)?;
        let path = format!("{}/dl-{}.part", Self::dir(), uuid::Uuid::new_v4());
        self.reserved
            .write_file(&path, &[])
            .await
            .map_err(storage)?;
        Ok(path)
    }

    pub async fn stage_write(
        &self,
        staged: &str,
        offset: u64,
        piece: &[u8],
    ) -> Result<(), AttachmentError> {
        self.reserved
            .write(staged, offset, piece)
            .await
            .map(drop)
            .map_err(storage)
    }

    /// Moves a staged file to an agent's memory at `path`.
    pub async fn stage_into_memory(
        &self,
        staged: &str,
        agent_id: &str,
        path: &str,
    ) -> Result<MemoryEntry, AttachmentError> {
        let placed = self.memory.place(agent_id, path, staged).await;
        if placed.is_err() {
            self.stage_drop(staged).await;
        }
        placed.map_err(memory_error)
    }

    /// Copies one of a session's attachments into an agent's memory at
    /// `path` (by default `attachments/<its name>`), a bounded piece at a
    /// time through a staging file, so a large file never sits in memory.
    pub async fn attachment_into_memory(
        &self,
        session_id: &str,
        id: &str,
        agent_id: &str,
        path: Option<&str>,
    ) -> Result<(AttachmentInfo, MemoryEntry), AttachmentError> {
        let info = self.attachments.info(session_id, id).await?;
        if info.size > self.max_memory_bytes {
            return Err(AttachmentError::TooLarge(
                "Upload exceeds the maximum file size".into(),
            ));
        }
        let path = match path {
            Some(path) => path.to_owned(),
            None => format!("attachments/{}", info.name),
        };
        // A bad path is refused before any byte is copied.
        let path = memory::entry_path(&path).map_err(memory_error)?;
        let staged = self.stage_new().await?;
        let mut offset = 0;
        while offset < info.size {
            let piece = self
                .attachments
                .read_piece(session_id, id, offset, COMMIT_READ_BYTES)
                .await;
            // A file shorter than its record is as good as missing.
            let piece = match piece {
                Ok(piece) if !piece.is_empty() => piece,
                Ok(_) => {
                    self.stage_drop(&staged).await;
                    return Err(AttachmentError::NotFound(format!(
                        "Attachment content missing: {id}"
                    )));
                }
                Err(e) => {
                    self.stage_drop(&staged).await;
                    return Err(e);
                }
            };
            if let Err(e) = self.stage_write(&staged, offset, &piece).await {
                self.stage_drop(&staged).await;
                return Err(e);
            }
            offset += piece.len() as u64;
        }
        let entry = self.stage_into_memory(&staged, agent_id, &path).await?;
        Ok((info, entry))
    }

    /// Removes a staged file (best effort: what is left is swept with its
    /// directory's next listing of uploads).
    pub async fn stage_drop(&self, staged: &str) {
        if let Err(e) = self.reserved.unlink(staged).await {
            if !matches!(e, FsError::NotFound { .. }) {
                tracing::warn!(file = %staged, error = %e, "a staged download was not removed");
            }
        }
    }

    /// The SHA-256 of a part file, read a bounded piece at a time.
    async fn digest(&self, part: &str, size: u64) -> Result<[u8; 32], AttachmentError> {
        let mut hasher = Sha256::new();
        let mut offset = 0;
        while offset < size {
            let piece = match self
                .reserved
                .read(part, offset, COMMIT_READ_BYTES.min(size - offset))
                .await
            {
                Ok(piece) => piece,
                Err(FsError::NotFound { .. }) => return Err(not_found()),
                Err(e) => return Err(storage(e)),
            };
            if piece.is_empty() {
                return Err(AttachmentError::Storage(
                    "the upload's bytes are short".into(),
                ));
            }
            offset += piece.len() as u64;
            hasher.update(&piece);
        }
        Ok(hasher.finalize().into())
    }
}

#[cfg(test)]
mod tests;
