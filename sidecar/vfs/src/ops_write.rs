//! Operations on file contents and attributes: `create`, ranged `write`,
//! `truncate`, whole-file `write_file` (with its shared-lock fast path for new
//! names), `chmod`, `utimes` and ACP's `fs/write_text_file`. Small files keep
//! their bytes inline; larger ones are rewritten only in the chunks a range
//! overlaps. Each operation commits one transaction.

use super::resolve::Walk;
use super::store::{self, Entry, Kind, Tx};
use super::{now_ns, signed, FsError, Stat, Vfs, DEFAULT_FILE_MODE};

impl Vfs {
    /// Creates an empty regular file; EEXIST if the name exists.
    pub async fn create(&self, path: &str, mode: u32) -> Result<Stat, FsError> {
        let mode = Self::check_mode(path, mode)?;
        let _write = self.inner.lock.write().await;
        let (walk, name) = self.creation_point(path).await?;
        let now = now_ns();
        let row = self.new_row(Kind::File, mode, now);
        let mut tx = Tx::new();
        tx.insert_dentry(walk.parent(), &name, row.ino);
        tx.add_usage(1, 0, self.inner.limits.max_inodes, 0);
        tx.insert_inode(&row, Some(&[]));
        tx.touch_dir(walk.parent(), now, 0);
        self.commit(tx, &walk.path()).await?;
        self.remember(
            walk.parent(),
            &name,
            Entry {
                ino: row.ino,
                kind: Kind::File,
                target: None,
            },
        );
        Ok(Stat::from_row(&row))
    }

    /// Writes `data` at `offset` of an existing file, growing it as needed
    /// (a gap reads as zeros). Touches only the chunks the range overlaps.
    pub async fn write(&self, path: &str, offset: u64, data: &[u8]) -> Result<Stat, FsError> {
        let _write = self.inner.lock.write().await;
        let (walk, entry) = self.existing(path, true).await?;
        let resolved = walk.path();
        self.policy.check_write(&resolved)?;
        match entry.kind {
            Kind::Dir => return Err(FsError::IsDir { path: resolved }),
            Kind::Symlink => return Err(FsError::corrupt(&resolved, "unresolved symlink")),
            Kind::File => {}
        }
        let row = self.row(entry.ino, &resolved).await?;
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| FsError::invalid(&resolved, "offset + length overflows"))?;
        if data.is_empty() {
            return Ok(Stat::from_row(&row));
        }
        let new_size = row.size.max(end);
        self.check_size(&resolved, new_size)?;
        let now = now_ns();
        let mut tx = Tx::new();
        tx.add_usage(
            0,
            signed(new_size) - signed(row.size),
            0,
            self.inner.limits.max_total_bytes,
        );
        let threshold = self.inner.limits.inline_threshold_bytes;
        if row.inline && new_size <= threshold {
            let mut bytes = self.read_row(&row, 0, row.size).await?;
            bytes.resize(new_size as usize, 0);
            bytes[offset as usize..end as usize].copy_from_slice(data);
            tx.set_file(row.ino, row.generation, new_size, Some(bytes), 0, now);
        } else if row.inline {
            // Moves to chunks: the old bytes and the new range become chunks.
            let old = self.read_row(&row, 0, row.size).await?;
            let chunk = self.inner.limits.chunk_bytes;
            let mut indices: Vec<u64> = Vec::new();
            if row.size > 0 {
                indices.extend(0..=(row.size - 1) / chunk);
            }
            for index in offset / chunk..=(end - 1) / chunk {
                if !indices.contains(&index) {
                    indices.push(index);
                }
            }
            for index in indices {
                let start = index * chunk;
                let stop = (start + chunk).min(new_size);
                let mut content = vec![0u8; (stop - start) as usize];
                if start < row.size {
                    let n = (row.size.min(stop) - start) as usize;
                    content[..n].copy_from_slice(&old[start as usize..start as usize + n]);
                }
                overlay(&mut content, start, offset, data);
                tx.put_chunk(row.ino, index, content);
            }
            tx.set_file(row.ino, row.generation, new_size, None, chunk, now);
        } else {
            let chunk = row.chunk_bytes;
            let first = offset / chunk;
            let last = (end - 1) / chunk;
            for index in first..=last {
                let start = index * chunk;
                let covers_whole = offset <= start && end >= start + chunk;
                let mut content = if covers_whole {
                    vec![0u8; chunk as usize]
                } else {
                    store::chunk_range(self.db(), row.ino, index, index)
                        .await?
                        .pop()
                        .map(|(_, bytes)| bytes)
                        .unwrap_or_default()
                };
                let need = (end.min(start + chunk) - start) as usize;
                if content.len() < need {
                    content.resize(need, 0);
                }
                overlay(&mut content, start, offset, data);
                tx.put_chunk(row.ino, index, content);
            }
            tx.set_file(row.ino, row.generation, new_size, None, chunk, now);
        }
        self.commit(tx, &resolved).await?;
        Ok(Stat::from_row(&self.row(row.ino, &resolved).await?))
    }

    /// Sets the file's size; growth reads as zeros.
    pub async fn truncate(&self, path: &str, size: u64) -> Result<Stat, FsError> {
        let _write = self.inner.lock.write().await;
        let (walk, entry) = self.existing(path, true).await?;
        let resolved = walk.path();
        self.policy.check_write(&resolved)?;
        if entry.kind == Kind::Dir {
            return Err(FsError::IsDir { path: resolved });
        }
        let row = self.row(entry.ino, &resolved).await?;
        self.check_size(&resolved, size)?;
        let now = now_ns();
        let mut tx = Tx::new();
        tx.add_usage(
            0,
            signed(size) - signed(row.size),
            0,
            self.inner.limits.max_total_bytes,
        );
        let threshold = self.inner.limits.inline_threshold_bytes;
        if size <= threshold {
            let mut bytes = self.read_row(&row, 0, size.min(row.size)).await?;
            bytes.resize(size as usize, 0);
            if !row.inline {
                tx.drop_chunks_from(row.ino, 0);
            }
            tx.set_file(row.ino, row.generation, size, Some(bytes), 0, now);
        } else if row.inline {
            let old = self.read_row(&row, 0, row.size).await?;
            let chunk = self.inner.limits.chunk_bytes;
            for (index, piece) in old.chunks(chunk as usize).enumerate() {
                tx.put_chunk(row.ino, index as u64, piece.to_vec());
            }
            tx.set_file(row.ino, row.generation, size, None, chunk, now);
        } else {
            let chunk = row.chunk_bytes;
            if size < row.size {
                let keep = size.div_ceil(chunk);
                tx.drop_chunks_from(row.ino, keep);
                let tail = size % chunk;
                if tail != 0 {
                    let index = size / chunk;
                    if let Some((_, mut bytes)) =
                        store::chunk_range(self.db(), row.ino, index, index)
                            .await?
                            .pop()
                    {
                        if bytes.len() as u64 > tail {
                            bytes.truncate(tail as usize);
                            tx.put_chunk(row.ino, index, bytes);
                        }
                    }
                }
            }
            tx.set_file(row.ino, row.generation, size, None, chunk, now);
        }
        self.commit(tx, &resolved).await?;
        Ok(Stat::from_row(&self.row(row.ino, &resolved).await?))
    }

    /// Creates or replaces a whole file in one transaction (follows a final
    /// symlink, creating its target if missing).
    pub async fn write_file(&self, path: &str, data: &[u8]) -> Result<Stat, FsError> {
        // Most writes of a new path create it: try that in one transaction
        // and fall back to full resolution when the name turns out to exist.
        // A create of a new name changes no existing row but its parent's
        // times and the usage counters (both updated in SQL, not from values
        // read here), and the name's UNIQUE key settles a race for it; so it
        // runs under the shared lock, and concurrent creates meet in the
        // database queue and share one commit.
        {
            let _shared = self.inner.lock.read().await;
            match self.creation_point(path).await {
                Ok((walk, name)) if !self.is_cached(walk.parent(), &name) => {
                    match self.write_new_file(&walk, &name, data).await {
                        Err(FsError::Exists { .. }) => {}
                        other => return other,
                    }
                }
                Ok(_) | Err(FsError::Exists { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let _write = self.inner.lock.write().await;
        let walk = self.walk(path, true).await?;
        let resolved = walk.path();
        self.policy.check_write(&resolved)?;
        let size = data.len() as u64;
        self.check_size(&resolved, size)?;
        let now = now_ns();
        let limits = &self.inner.limits;
        let mut tx = Tx::new();
        let inline = size <= limits.inline_threshold_bytes;
        let chunk = if inline { 0 } else { limits.chunk_bytes };
        let put_chunks = |tx: &mut Tx, ino: i64| {
            if !inline {
                for (index, piece) in data.chunks(chunk as usize).enumerate() {
                    tx.put_chunk(ino, index as u64, piece.to_vec());
                }
            }
        };
        // The resulting row is computed here rather than read back: the
        // transaction either commits exactly these values or fails.
        let row = match walk.target() {
            Some(entry) if entry.kind == Kind::Dir => {
                return Err(FsError::IsDir { path: resolved })
            }
            Some(entry) => {
                let mut row = self.row(entry.ino, &resolved).await?;
                tx.add_usage(
                    0,
                    signed(size) - signed(row.size),
                    0,
                    limits.max_total_bytes,
                );
                if !row.inline {
                    tx.drop_chunks_from(row.ino, 0);
                }
                put_chunks(&mut tx, row.ino);
                tx.set_file(
                    row.ino,
                    row.generation,
                    size,
                    inline.then(|| data.to_vec()),
                    chunk,
                    now,
                );
                row.size = size;
                row.inline = inline;
                row.chunk_bytes = chunk;
                row.mtime_ns = now;
                row.ctime_ns = now;
                row.generation += 1;
                row
            }
            None => {
                let name = walk.name.clone().unwrap_or_default();
                return self.write_new_file(&walk, &name, data).await;
            }
        };
        self.commit(tx, &resolved).await?;
        Ok(Stat::from_row(&row))
    }

    /// Creates `name` in the walk's parent holding `data`; EEXIST if it exists.
    async fn write_new_file(&self, walk: &Walk, name: &str, data: &[u8]) -> Result<Stat, FsError> {
        let resolved = walk.path();
        let size = data.len() as u64;
        self.check_size(&resolved, size)?;
        let limits = &self.inner.limits;
        let inline = size <= limits.inline_threshold_bytes;
        let chunk = if inline { 0 } else { limits.chunk_bytes };
        let now = now_ns();
        let mut row = self.new_row(Kind::File, DEFAULT_FILE_MODE, now);
        row.size = size;
        row.inline = inline;
        row.chunk_bytes = chunk;
        let mut tx = Tx::new();
        tx.insert_dentry(walk.parent(), name, row.ino);
        tx.add_usage(1, signed(size), limits.max_inodes, limits.max_total_bytes);
        tx.insert_inode(&row, inline.then_some(data));
        tx.touch_dir(walk.parent(), now, 0);
        if !inline {
            for (index, piece) in data.chunks(chunk as usize).enumerate() {
                tx.put_chunk(row.ino, index as u64, piece.to_vec());
            }
        }
        self.commit(tx, &resolved).await?;
        self.remember(
            walk.parent(),
            name,
            Entry {
                ino: row.ino,
                kind: Kind::File,
                target: None,
            },
        );
        Ok(Stat::from_row(&row))
    }

    pub async fn chmod(&self, path: &str, mode: u32) -> Result<Stat, FsError> {
        let mode = Self::check_mode(path, mode)?;
        let _write = self.inner.lock.write().await;
        let (walk, entry) = self.existing(path, true).await?;
        let resolved = walk.path();
        self.policy.check_write(&resolved)?;
        let row = self.row(entry.ino, &resolved).await?;
        let mut tx = Tx::new();
        tx.set_mode(row.ino, row.generation, mode, now_ns());
        self.commit(tx, &resolved).await?;
        Ok(Stat::from_row(&self.row(row.ino, &resolved).await?))
    }

    /// Sets access and modification times (ns since the epoch); `None` keeps one.
    pub async fn utimes(
        &self,
        path: &str,
        atime_ns: Option<i64>,
        mtime_ns: Option<i64>,
    ) -> Result<Stat, FsError> {
        let _write = self.inner.lock.write().await;
        let (walk, entry) = self.existing(path, true).await?;
        let resolved = walk.path();
        self.policy.check_write(&resolved)?;
        let row = self.row(entry.ino, &resolved).await?;
        let mut tx = Tx::new();
        tx.set_times(
            row.ino,
            row.generation,
            atime_ns.unwrap_or(row.atime_ns),
            mtime_ns.unwrap_or(row.mtime_ns),
            now_ns(),
        );
        self.commit(tx, &resolved).await?;
        Ok(Stat::from_row(&self.row(row.ino, &resolved).await?))
    }

    /// ACP `fs/write_text_file`: creates or replaces the file.
    pub async fn write_text_file(&self, path: &str, content: &str) -> Result<(), FsError> {
        self.write_file(path, content.as_bytes()).await.map(|_| ())
    }
}

/// Copies the part of `data` (which starts at file offset `offset`) that falls
/// inside `content` (which starts at file offset `start`).
fn overlay(content: &mut [u8], start: u64, offset: u64, data: &[u8]) {
    let end = offset + data.len() as u64;
    let from = start.max(offset);
    let to = (start + content.len() as u64).min(end);
    if from >= to {
        return;
    }
    let src = &data[(from - offset) as usize..(to - offset) as usize];
    content[(from - start) as usize..(to - start) as usize].copy_from_slice(src);
}
