//! Session attachments: files a user gives a session, kept in the VM's own
//! file system (so in the shared database: an `actor_uds` VM needs no disk)
//! under `/.agentos/sessions/<sessionId>/attachments/`, each as its bytes
//! (`<id>.bin`) and its record (`<id>.json`, written last: the record is
//! what makes an attachment exist, so a crash between the two leaves
//! nothing visible).
//!
//! The rules and words are the Seed service's: the id is the lower-case
//! SHA-256 hex of the bytes, and the same bytes again answer the stored
//! record unchanged; a name keeps its last path segment without control
//! characters (empty becomes `file`, over 256 bytes keeps its last 64
//! UTF-16 units); a MIME type is the client's, trimmed, else the one the
//! reference's table gives the name's extension, else none; at most 100 MiB
//! per attachment and 200 per session. One session's saves are serialized,
//! so two uploads at once count and dedupe as one after the other would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use agentos_protocol::seed::text::js_trim;
use agentos_vfs::{FsError, Vfs, DEFAULT_DIR_MODE};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A name longer than this (UTF-8 bytes) keeps only its tail.
const MAX_NAME_BYTES: usize = 256;
/// UTF-16 units of a long name's tail.
const NAME_TAIL_UNITS: usize = 64;

/// One attachment's record, as the Seed wire and the stored `.json` carry
/// it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentInfo {
    pub id: String,
    pub session_id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    pub size: u64,
    pub created_at: i64,
}

/// Why an attachment was refused or not found, in the reference's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttachmentError {
    /// A 400.
    #[error("{0}")]
    Invalid(String),
    /// A 404.
    #[error("{0}")]
    NotFound(String),
    /// A 413.
    #[error("{0}")]
    TooLarge(String),
    /// A 409.
    #[error("{0}")]
    Conflict(String),
    /// A 429.
    #[error("{0}")]
    TooMany(String),
    /// The file system failed.
    #[error("storage failed: {0}")]
    Storage(String),
}

impl AttachmentError {
    pub fn code(&self) -> &'static str {
        match self {
            AttachmentError::Invalid(_) => "invalid_argument",
            AttachmentError::NotFound(_) => "not_found",
            AttachmentError::TooLarge(_) => "too_large",
            AttachmentError::Conflict(_) => "conflict",
            AttachmentError::TooMany(_) => "too_many",
            AttachmentError::Storage(_) => "storage",
        }
    }
}

/// A file-system failure: the VM's file bounds are a 413 naming the
/// setting, anything else the server's own failure.
pub(crate) fn storage(e: FsError) -> AttachmentError {
    match e {
        FsError::FileTooBig { setting, .. } | FsError::NoSpace { setting, .. } => {
            AttachmentError::TooLarge(format!("The file exceeds {setting}"))
        }
        other => AttachmentError::Storage(other.to_string()),
    }
}

/// Deleted sessions remembered, so that a save already past its access
/// check when its session went cannot bring the directory back.
const TOMBSTONES: usize = 4_096;

/// A client's file name as the attachment keeps it.
pub fn normalize_name(raw: Option<&str>) -> String {
    let base = raw
        .map(|raw| js_trim(raw).rsplit(['/', '\\']).next().unwrap_or_default())
        .unwrap_or_default();
    let cleaned: String = base
        .chars()
        .filter(|c| !matches!(*c, '\u{0}'..='\u{1f}' | '\u{7f}'))
        .collect();
    let cleaned = js_trim(&cleaned);
    if cleaned.is_empty() {
        return "file".to_owned();
    }
    if cleaned.len() <= MAX_NAME_BYTES {
        return cleaned.to_owned();
    }
    // The last 64 UTF-16 units; half a pair left at the cut reads as the
    // replacement character, as the wire would carry it.
    let units: Vec<u16> = cleaned.encode_utf16().collect();
    let tail = &units[units.len().saturating_sub(NAME_TAIL_UNITS)..];
    char::decode_utf16(tail.iter().copied())
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect()
}

/// The reference's extension table (its own keys only).
const MIME_TYPES: &[(&str, &str)] = &[
    ("md", "text/markdown"),
    ("txt", "text/plain"),
    ("csv", "text/csv"),
    ("json", "application/json"),
    ("html", "text/html"),
    ("css", "text/css"),
    ("js", "text/javascript"),
    ("ts", "text/plain"),
    ("xml", "application/xml"),
    ("yaml", "text/plain"),
    ("yml", "text/plain"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("avif", "image/avif"),
    ("svg", "image/svg+xml"),
    ("ico", "image/x-icon"),
    ("mp3", "audio/mpeg"),
    ("wav", "audio/wav"),
    ("ogg", "audio/ogg"),
    ("m4a", "audio/mp4"),
    ("flac", "audio/flac"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
    ("mov", "video/quicktime"),
    ("mkv", "video/x-matroska"),
    ("pdf", "application/pdf"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("tar", "application/x-tar"),
    ("wasm", "application/wasm"),
];

/// The extension the reference's table gives a type first (`image/jpeg`
/// is `jpg`), compared without its parameters and case.
pub fn extension_for(content_type: &str) -> Option<&'static str> {
    let bare = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    MIME_TYPES
        .iter()
        .find(|(_, mime)| *mime == bare)
        .map(|(ext, _)| *ext)
}

/// The type a name's extension suggests: what follows its last dot (a name
/// without a dot is its own extension, as in the reference), lower-cased.
pub fn infer_mime_type(name: &str) -> Option<&'static str> {
    let extension = name.rsplit('.').next()?.to_lowercase();
    MIME_TYPES
        .iter()
        .find(|(ext, _)| *ext == extension)
        .map(|(_, mime)| *mime)
}

/// The client's type, trimmed, else the inferred one.
fn pick_mime_type(given: Option<&str>, name: &str) -> Option<String> {
    match given.map(js_trim) {
        Some(mime) if !mime.is_empty() => Some(mime.to_owned()),
        _ => infer_mime_type(name).map(str::to_owned),
    }
}

/// A byte bound as the reference words it (`100 MiB`).
fn size_words(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// Whether `id` can name an attachment: 64 lower-case hex digits.
pub fn valid_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// An attachment about to be stored: whose, what the client called it,
/// and its bytes' size and SHA-256.
#[derive(Clone, Copy, Debug)]
pub struct NewAttachment<'a> {
    pub session_id: &'a str,
    pub name: Option<&'a str>,
    pub mime_type: Option<&'a str>,
    pub size: u64,
    pub digest: &'a [u8; 32],
}

/// Where a new attachment's bytes come from.
enum Bytes<'a> {
    Given(&'a [u8]),
    /// A file of the reserved view, moved into place.
    Moved(&'a str),
}

/// Attachments of every session. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SessionAttachments {
    reserved: Vfs,
    /// `limits.control.maxAttachmentBytes` (the reference's 100 MiB).
    max_bytes: u64,
    /// `limits.control.maxAttachmentsPerSession` (the reference's 200).
    max_count: u64,
    /// One save at a time per session.
    locks: Arc<Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>>,
    /// The latest deleted sessions, oldest first.
    deleted: Arc<Mutex<std::collections::VecDeque<String>>>,
}

impl SessionAttachments {
    pub fn new(vfs: &Vfs, max_bytes: u64, max_count: u64) -> SessionAttachments {
        SessionAttachments {
            reserved: vfs.reserved_view(),
            max_bytes,
            max_count,
            locks: Arc::default(),
            deleted: Arc::default(),
        }
    }

    /// Where a session's attachments live.
    fn dir(session_id: &str) -> Result<String, AttachmentError> {
        let valid = !session_id.is_empty()
            && session_id.len() <= 128
            && session_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            return Err(AttachmentError::Invalid("Invalid session id".into()));
        }
        Ok(agentos_vfs::session_attachments_dir(session_id))
    }

    fn session_lock(&self, session_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.retain(|_, lock| lock.strong_count() > 0);
        if let Some(lock) = locks.get(session_id).and_then(Weak::upgrade) {
            return lock;
        }
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(session_id.to_owned(), Arc::downgrade(&lock));
        lock
    }

    /// Stores `content` as an attachment of the session (or answers the
    /// record of the same bytes stored before, unchanged).
    pub async fn save(
        &self,
        session_id: &str,
        name: Option<&str>,
        mime_type: Option<&str>,
        content: &[u8],
        now: i64,
    ) -> Result<AttachmentInfo, AttachmentError> {
        if content.is_empty() {
            return Err(AttachmentError::Invalid(
                "Attachment content must be non-empty bytes".into(),
            ));
        }
        let digest: [u8; 32] = Sha256::digest(content).into();
        let new = NewAttachment {
            session_id,
            name,
            mime_type,
            size: content.len() as u64,
            digest: &digest,
        };
        self.store(new, Bytes::Given(content), now).await
    }

    /// Stores the bytes of the file at `from` (a committed upload's, `size`
    /// bytes whose SHA-256 is `digest`) as an attachment, moving them; with
    /// the same bytes stored before, answers that record and leaves `from`.
    pub async fn place(
        &self,
        new: NewAttachment<'_>,
        from: &str,
        now: i64,
    ) -> Result<AttachmentInfo, AttachmentError> {
        self.store(new, Bytes::Moved(from), now).await
    }

    /// One save, serialized with the session's others: the record of the
    /// same bytes if stored, else room for one more, the bytes, the record.
    async fn store(
        &self,
        new: NewAttachment<'_>,
        bytes: Bytes<'_>,
        now: i64,
    ) -> Result<AttachmentInfo, AttachmentError> {
        if new.size > self.max_bytes {
            return Err(AttachmentError::TooLarge(format!(
                "Attachment exceeds the {} limit",
                size_words(self.max_bytes)
            )));
        }
        let id = hex::encode(new.digest);
        let dir = Self::dir(new.session_id)?;
        let lock = self.session_lock(new.session_id);
        let _one = lock.lock().await;
        if self.was_deleted(new.session_id) {
            return Err(AttachmentError::NotFound("Session not found".into()));
        }
        if let Some(existing) = self.admit(&dir, &id).await? {
            return Ok(existing);
        }
        let path = format!("{dir}/{id}.bin");
        match bytes {
            Bytes::Given(content) => self.reserved.write_file(&path, content).await.map(drop),
            Bytes::Moved(from) => self.reserved.rename(from, &path).await,
        }
        .map_err(storage)?;
        let info = Self::info_of(new.session_id, new.name, new.mime_type, &id, new.size, now);
        self.write_record(&dir, &info).await?;
        Ok(info)
    }

    fn info_of(
        session_id: &str,
        name: Option<&str>,
        mime_type: Option<&str>,
        id: &str,
        size: u64,
        now: i64,
    ) -> AttachmentInfo {
        let name = normalize_name(name);
        let mime_type = pick_mime_type(mime_type, &name);
        AttachmentInfo {
            id: id.to_owned(),
            session_id: session_id.to_owned(),
            name,
            mime_type,
            size,
            created_at: now,
        }
    }

    /// With the session's lock held: the record of the same bytes stored
    /// before, or room for a new one (`Session already has … attachments`
    /// when there is none).
    async fn admit(&self, dir: &str, id: &str) -> Result<Option<AttachmentInfo>, AttachmentError> {
        if let Some(existing) = self.record(dir, id).await? {
            return Ok(Some(existing));
        }
        self.reserved
            .mkdir_p(dir, DEFAULT_DIR_MODE)
            .await
            .map_err(storage)?;
        let stored = self
            .reserved
            .readdir_all(dir)
            .await
            .map_err(storage)?
            .iter()
            .filter(|entry| entry.name.ends_with(".json"))
            .count();
        if stored as u64 >= self.max_count {
            return Err(AttachmentError::TooLarge(format!(
                "Session already has {} attachments",
                self.max_count
            )));
        }
        Ok(None)
    }

    /// Writes the record that makes an attachment exist.
    async fn write_record(&self, dir: &str, info: &AttachmentInfo) -> Result<(), AttachmentError> {
        let record = serde_json::to_vec(info)
            .map_err(|e| AttachmentError::Storage(format!("attachment record: {e}")))?;
        self.reserved
            .write_file(&format!("{dir}/{}.json", info.id), &record)
            .await
            .map_err(storage)
            .map(drop)
    }

    /// A stored record; a missing or unreadable one is none.
    async fn record(&self, dir: &str, id: &str) -> Result<Option<AttachmentInfo>, AttachmentError> {
        let path = format!("{dir}/{id}.json");
        match self.reserved.read(&path, 0, 64 * 1024).await {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
            Err(FsError::NotFound { .. }) => Ok(None),
            Err(e) => Err(storage(e)),
        }
    }

    /// The record of one attachment of the session (`Attachment not found`
    /// when it has none of that id).
    pub async fn info(
        &self,
        session_id: &str,
        id: &str,
    ) -> Result<AttachmentInfo, AttachmentError> {
        if !valid_id(id) {
            return Err(AttachmentError::Invalid(format!(
                "Invalid attachment id: {id}"
            )));
        }
        let dir = Self::dir(session_id)?;
        self.record(&dir, id)
            .await?
            .ok_or_else(|| AttachmentError::NotFound(format!("Attachment not found: {id}")))
    }

    /// One attachment's record and bytes.
    pub async fn read(
        &self,
        session_id: &str,
        id: &str,
    ) -> Result<(AttachmentInfo, Vec<u8>), AttachmentError> {
        let info = self.info(session_id, id).await?;
        let dir = Self::dir(session_id)?;
        let missing = || AttachmentError::NotFound(format!("Attachment content missing: {id}"));
        let data = match self
            .reserved
            .read(&format!("{dir}/{id}.bin"), 0, info.size.max(1))
            .await
        {
            Ok(data) => data,
            Err(FsError::NotFound { .. }) => return Err(missing()),
            Err(e) => return Err(storage(e)),
        };
        if data.len() as u64 != info.size {
            return Err(missing());
        }
        Ok((info, data))
    }

    /// Up to `len` bytes of one attachment's file from `offset`.
    pub async fn read_piece(
        &self,
        session_id: &str,
        id: &str,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, AttachmentError> {
        let dir = Self::dir(session_id)?;
        match self
            .reserved
            .read(&format!("{dir}/{id}.bin"), offset, len)
            .await
        {
            Ok(data) => Ok(data),
            Err(FsError::NotFound { .. }) => Err(AttachmentError::NotFound(format!(
                "Attachment content missing: {id}"
            ))),
            Err(e) => Err(storage(e)),
        }
    }

    fn was_deleted(&self, session_id: &str) -> bool {
        let deleted = self.deleted.lock().unwrap_or_else(|p| p.into_inner());
        deleted.iter().any(|s| s == session_id)
    }

    /// Removes every attachment of a deleted session, after any save of it
    /// in progress; a save that comes later finds the session gone.
    pub async fn delete_session(&self, session_id: &str) -> Result<(), AttachmentError> {
        let dir = Self::dir(session_id)?;
        let lock = self.session_lock(session_id);
        let _one = lock.lock().await;
        {
            let mut deleted = self.deleted.lock().unwrap_or_else(|p| p.into_inner());
            if deleted.len() >= TOMBSTONES {
                deleted.pop_front();
            }
            deleted.push_back(session_id.to_owned());
        }
        let session_dir = dir.trim_end_matches("/attachments");
        match self.reserved.remove(session_dir, true).await {
            Ok(()) | Err(FsError::NotFound { .. }) => Ok(()),
            Err(e) => Err(storage(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_their_last_segment_without_controls() {
        assert_eq!(normalize_name(Some("../../etc/passwd")), "passwd");
        assert_eq!(
            normalize_name(Some("C:\\Users\\me\\photo.png")),
            "photo.png"
        );
        assert_eq!(normalize_name(Some(" a\u{0}b\u{7f}c.txt ")), "abc.txt");
        assert_eq!(normalize_name(Some("dir/")), "file");
        assert_eq!(normalize_name(None), "file");
        assert_eq!(normalize_name(Some("\u{1}\u{2}")), "file");
        let exact = "a".repeat(256);
        assert_eq!(normalize_name(Some(&exact)), exact);
        let long = format!("{}{}", "b".repeat(300), "tail.txt");
        let kept = normalize_name(Some(&long));
        assert_eq!(kept.encode_utf16().count(), 64);
        assert!(kept.ends_with("tail.txt"));
        // A pair cut in half reads as the replacement character.
        let emoji = format!("{}{}", "c".repeat(250), "😀".repeat(40));
        let kept = normalize_name(Some(&emoji));
        assert_eq!(kept.chars().next(), Some('😀'));
        let odd = format!("{}x{}", "c".repeat(250), "😀".repeat(40));
        assert!(normalize_name(Some(&odd)).encode_utf16().count() <= 64);
    }

    #[test]
    fn types_come_from_the_client_else_the_references_table() {
        assert_eq!(
            pick_mime_type(Some(" image/png "), "x"),
            Some("image/png".into())
        );
        assert_eq!(
            pick_mime_type(Some("  "), "a.JSON"),
            Some("application/json".into())
        );
        assert_eq!(
            pick_mime_type(None, "notes.yaml"),
            Some("text/plain".into())
        );
        // A name without a dot is its own extension; a trailing dot none.
        assert_eq!(infer_mime_type("png"), Some("image/png"));
        assert_eq!(infer_mime_type("a."), None);
        // Inherited JavaScript names are not types here.
        assert_eq!(infer_mime_type("x.constructor"), None);
        assert_eq!(infer_mime_type("x.__proto__"), None);
    }

    #[test]
    fn ids_are_lower_case_sha256_hex() {
        let id = hex::encode(Sha256::digest(b"abc"));
        assert!(valid_id(&id));
        assert!(!valid_id(&id.to_uppercase()));
        assert!(!valid_id("abc"));
    }
}
