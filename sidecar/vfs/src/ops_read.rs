//! The read operations: `stat`/`lstat`, byte ranges of a file, paged
//! directory listings, `readlink`, the usage counters and ACP's
//! `fs/read_text_file`. Reads share the service's lock, so a read spanning
//! several statements sees one committed state.

use super::store::{self, InodeRow, Kind, Usage};
use super::{DirEntry, DirPage, FsError, Stat, Vfs, MAX_READDIR_PAGE};

/// How much of a file `read_text_file` reads at a time.
const TEXT_PIECE_BYTES: u64 = 1 << 20;

impl Vfs {
    /// `stat`: follows a final symlink.
    pub async fn stat(&self, path: &str) -> Result<Stat, FsError> {
        let _read = self.inner.lock.read().await;
        let (walk, entry) = self.existing(path, true).await?;
        Ok(Stat::from_row(&self.row(entry.ino, &walk.path()).await?))
    }

    /// `lstat`: reports a final symlink itself.
    pub async fn lstat(&self, path: &str) -> Result<Stat, FsError> {
        let _read = self.inner.lock.read().await;
        let (walk, entry) = self.existing(path, false).await?;
        Ok(Stat::from_row(&self.row(entry.ino, &walk.path()).await?))
    }

    /// True when `path` resolves to something (following symlinks).
    pub async fn exists(&self, path: &str) -> Result<bool, FsError> {
        match self.stat(path).await {
            Ok(_) => Ok(true),
            Err(FsError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads up to `len` bytes at `offset` (fewer at the end of the file).
    pub async fn read(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>, FsError> {
        let _read = self.inner.lock.read().await;
        let (walk, entry) = self.existing(path, true).await?;
        let resolved = walk.path();
        if entry.kind == Kind::Dir {
            return Err(FsError::IsDir { path: resolved });
        }
        let row = self.row(entry.ino, &resolved).await?;
        self.read_row(&row, offset, len).await
    }

    /// The whole file.
    pub async fn read_all(&self, path: &str) -> Result<Vec<u8>, FsError> {
        self.read(path, 0, u64::MAX).await
    }

    pub(super) async fn read_row(
        &self,
        row: &InodeRow,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, FsError> {
        if offset >= row.size {
            return Ok(Vec::new());
        }
        let len = len.min(row.size - offset);
        if row.inline {
            let mut bytes = store::read_inline(self.db(), row.ino, offset, len).await?;
            bytes.resize(usize::try_from(len).unwrap_or(usize::MAX), 0);
            Ok(bytes)
        } else {
            let chunk = row.chunk_bytes;
            let index = offset / chunk.max(1);
            let within = offset - index * chunk;
            if chunk > 0 && within + len <= chunk && store::small_range(within, len) {
                // A small read inside one chunk: its parts come from the
                // cache, and only the range's bytes from the database.
                let parts = self.chunk_parts(row.ino, index).await?;
                let mut out = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
                store::read_parts(self.db(), &parts, within, &mut out).await?;
                return Ok(out);
            }
            store::read_chunked(self.db(), row.ino, chunk, offset, len).await
        }
    }

    /// One page of a directory (following a final symlink), `limit` entries
    /// after `cursor`.
    pub async fn readdir(
        &self,
        path: &str,
        cursor: Option<&str>,
        limit: u64,
    ) -> Result<DirPage, FsError> {
        if limit == 0 || limit > MAX_READDIR_PAGE {
            return Err(FsError::invalid(
                path,
                format!("page size must be 1..={MAX_READDIR_PAGE}"),
            ));
        }
        let _read = self.inner.lock.read().await;
        let (walk, entry) = self.existing(path, true).await?;
        if entry.kind != Kind::Dir {
            return Err(FsError::NotDir { path: walk.path() });
        }
        let mut rows = store::readdir(self.db(), entry.ino, cursor, limit + 1).await?;
        let more = rows.len() as u64 > limit;
        rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        let next_cursor = if more {
            rows.last().map(|(name, _)| name.clone())
        } else {
            None
        };
        Ok(DirPage {
            entries: rows
                .iter()
                .map(|(name, row)| DirEntry {
                    name: name.clone(),
                    stat: Stat::from_row(row),
                })
                .collect(),
            next_cursor,
        })
    }

    /// Every entry of a directory, page by page.
    pub async fn readdir_all(&self, path: &str) -> Result<Vec<DirEntry>, FsError> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .readdir(path, cursor.as_deref(), MAX_READDIR_PAGE)
                .await?;
            out.extend(page.entries);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(out),
            }
        }
    }

    pub async fn readlink(&self, path: &str) -> Result<String, FsError> {
        let _read = self.inner.lock.read().await;
        let (walk, entry) = self.existing(path, false).await?;
        match entry.kind {
            Kind::Symlink => {
                let row = self.row(entry.ino, &walk.path()).await?;
                row.symlink_target
                    .ok_or_else(|| FsError::corrupt(&walk.path(), "symlink without a target"))
            }
            _ => Err(FsError::invalid(&walk.path(), "not a symbolic link")),
        }
    }

    /// The committed usage counters.
    pub async fn usage(&self) -> Result<Usage, FsError> {
        store::usage(self.db()).await
    }

    /// Deletes up to `batch` unreferenced blocks; returns how many were deleted.
    pub async fn collect_garbage(&self, batch: u32) -> Result<u64, FsError> {
        let _write = self.inner.lock.write().await;
        store::collect_garbage(self.db(), batch).await
    }

    /// ACP `fs/read_text_file`: the file as UTF-8, from 1-based `line`, at most
    /// `limit` lines (line terminators kept). The file is read in pieces and
    /// only the slice is kept; a slice over `max_bytes` is `EFBIG` naming
    /// `limits.acp.maxReadTextFileBytes`, so an agent is never answered more
    /// than that (it asks for fewer lines instead).
    pub async fn read_text_file(
        &self,
        path: &str,
        line: Option<u64>,
        limit: Option<u64>,
        max_bytes: u64,
    ) -> Result<String, FsError> {
        if line == Some(0) {
            return Err(FsError::invalid(path, "line is 1-based"));
        }
        let _read = self.inner.lock.read().await;
        let (walk, entry) = self.existing(path, true).await?;
        let resolved = walk.path();
        if entry.kind == Kind::Dir {
            return Err(FsError::IsDir { path: resolved });
        }
        let row = self.row(entry.ino, &resolved).await?;
        let skip = line.map_or(0, |l| l - 1);
        let end = skip.saturating_add(limit.unwrap_or(u64::MAX));
        let mut out = Vec::new();
        // Lines completed before the current piece's position.
        let mut line_no = 0u64;
        let mut offset = 0u64;
        'pieces: while offset < row.size && line_no < end {
            let piece = self.read_row(&row, offset, TEXT_PIECE_BYTES).await?;
            if piece.is_empty() {
                break;
            }
            offset += piece.len() as u64;
            for segment in piece.split_inclusive(|b| *b == b'\n') {
                if line_no >= end {
                    break 'pieces;
                }
                if line_no >= skip {
                    if (out.len() + segment.len()) as u64 > max_bytes {
                        return Err(FsError::FileTooBig {
                            path: resolved,
                            size: (out.len() + segment.len()) as u64,
                            limit: max_bytes,
                            setting: "limits.acp.maxReadTextFileBytes",
                        });
                    }
                    out.extend_from_slice(segment);
                }
                if segment.last() == Some(&b'\n') {
                    line_no += 1;
                }
            }
        }
        String::from_utf8(out).map_err(|_| FsError::invalid(path, "the file is not valid UTF-8"))
    }
}
