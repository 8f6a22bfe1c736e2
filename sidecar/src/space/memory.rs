//! An agent's memory (`~/memory`): plain files in the VM's file system,
//! under `/.agentos/agents/<agentId>/memory/`, so they are stored, bounded
//! (`limits.fs.*`) and crash-safe like every other file.
//!
//! The sidecar reaches them through the VFS's reserved view
//! ([`Vfs::reserved_view`]), whatever roots the VM's config gives sessions.
//! Every operation on one agent's memory goes through a view narrowed to
//! that agent's memory root, so a path, or a symbolic link a trusted host
//! left inside, can never lead into another agent's memory or anywhere
//! else (EACCES, answered as `invalid_path`).
//!
//! Paths are the agent's, with the reference's rules: relative to its
//! memory root (a leading `/` is dropped), `/`- or `\`-separated,
//! normalised (empty and `.` segments dropped), never climbing (`..`), at
//! most [`MAX_PATH_BYTES`] bytes and [`MAX_PATH_DEPTH`] segments. Errors and
//! answers speak in these relative paths.

use agentos_vfs::{path::NAME_MAX, FileKind, FsError, Stat, Vfs, DEFAULT_DIR_MODE, RESERVED_ROOT};

use super::SpaceError;

/// Largest memory path, in bytes.
pub const MAX_PATH_BYTES: usize = 512;
/// Most segments of a memory path.
pub const MAX_PATH_DEPTH: usize = 16;
/// Most entries one [`AgentMemory::list`] answers; a larger memory is
/// listed one directory at a time ([`AgentMemory::list_dir`]).
pub const MAX_LISTED_ENTRIES: usize = 10_000;

/// One file or directory of an agent's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryEntry {
    /// Relative to the memory root.
    pub path: String,
    pub is_dir: bool,
    /// Bytes of a file; 0 for a directory.
    pub size: u64,
    pub updated_at_ms: u64,
}

/// One memory file's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryFile {
    pub path: String,
    pub size: u64,
    pub updated_at_ms: u64,
    pub data: Vec<u8>,
}

/// The normalised spelling of a memory path; `""` is the memory root. The
/// reference's rules and words: `\` separates like `/`, empty and `.`
/// segments (a leading `/` too) are dropped, `..` is refused, and the
/// result is at most [`MAX_PATH_DEPTH`] segments and [`MAX_PATH_BYTES`]
/// bytes (and no name longer than the file system takes).
pub fn normalize(path: &str) -> Result<String, SpaceError> {
    let refuse = |words: &str| Err(SpaceError::MemoryPath(words.to_owned()));
    if path.contains('\0') {
        return refuse("Memory path contains an invalid character");
    }
    let unified = path.replace('\\', "/");
    let segments: Vec<&str> = unified
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    if segments.len() > MAX_PATH_DEPTH {
        return refuse("Memory path is nested too deeply");
    }
    if segments.contains(&"..") {
        return refuse("Memory path cannot contain \"..\"");
    }
    let joined = segments.join("/");
    if joined.len() > MAX_PATH_BYTES || segments.iter().any(|s| s.len() > NAME_MAX) {
        return refuse("Memory path is too long");
    }
    Ok(joined)
}

/// A memory path that names a file or directory (not the root).
pub fn entry_path(path: &str) -> Result<String, SpaceError> {
    let normalized = normalize(path)?;
    if normalized.is_empty() {
        return Err(SpaceError::MemoryPath("Memory path is required".into()));
    }
    Ok(normalized)
}

/// The MIME type a memory path suggests, by the reference's one table
/// (the same as attachments'), when it is a known one.
pub fn mime_type(path: &str) -> Option<&'static str> {
    super::attachments::infer_mime_type(path)
}

fn ms(stat: &Stat) -> u64 {
    u64::try_from(stat.mtime_ms).unwrap_or(0)
}

fn entry(path: String, stat: &Stat) -> MemoryEntry {
    let is_dir = stat.kind == FileKind::Dir;
    MemoryEntry {
        path,
        is_dir,
        size: if is_dir { 0 } else { stat.size },
        updated_at_ms: ms(stat),
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// Agents' memory files.
#[derive(Clone, Debug)]
pub struct AgentMemory {
    reserved: Vfs,
}

impl AgentMemory {
    pub fn new(vfs: &Vfs) -> AgentMemory {
        AgentMemory {
            reserved: vfs.reserved_view(),
        }
    }

    /// Where an agent's memory lives in the VM's file system.
    pub fn root(agent_id: &str) -> Result<String, SpaceError> {
        let valid = !agent_id.is_empty()
            && agent_id.len() <= 64
            && agent_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            return Err(SpaceError::invalid(format!(
                "agent id {agent_id:?} cannot name a memory"
            )));
        }
        Ok(format!("{}/{agent_id}/memory", agents_dir()))
    }

    /// A view that reaches only this agent's memory.
    fn view(&self, agent_id: &str) -> Result<(Vfs, String), SpaceError> {
        let root = Self::root(agent_id)?;
        let view = self.reserved.scoped(std::slice::from_ref(&root))?;
        Ok((view, root))
    }

    /// Every file and directory, by path. Symbolic links are not memory
    /// entries and are left out.
    pub async fn list(&self, agent_id: &str) -> Result<Vec<MemoryEntry>, SpaceError> {
        let (view, root) = self.view(agent_id)?;
        let mut out = Vec::new();
        let mut pending = vec![String::new()];
        while let Some(dir) = pending.pop() {
            for (path, stat) in self.children(&view, &root, &dir).await? {
                if stat.kind == FileKind::Dir {
                    pending.push(path.clone());
                }
                out.push(entry(path, &stat));
                if out.len() > MAX_LISTED_ENTRIES {
                    return Err(SpaceError::TooLarge {
                        what: "the memory listing (list it one directory at a time)".into(),
                        size: out.len() as u64,
                        limit: MAX_LISTED_ENTRIES as u64,
                    });
                }
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// The files and directories directly inside `dir` (`""` is the root),
    /// by name. A missing memory root is empty; another missing directory
    /// is `not_found`.
    pub async fn list_dir(
        &self,
        agent_id: &str,
        dir: &str,
    ) -> Result<Vec<MemoryEntry>, SpaceError> {
        let dir = normalize(dir)?;
        let (view, root) = self.view(agent_id)?;
        let children = match self.children(&view, &root, &dir).await {
            Err(SpaceError::NotFound(_)) if dir.is_empty() => Vec::new(),
            other => other?,
        };
        Ok(children
            .into_iter()
            .map(|(path, stat)| entry(path, &stat))
            .collect())
    }

    /// The entries of `dir` with their paths, files and directories only;
    /// a missing root reads as empty.
    async fn children(
        &self,
        view: &Vfs,
        root: &str,
        dir: &str,
    ) -> Result<Vec<(String, Stat)>, SpaceError> {
        let absolute = absolute(root, dir);
        let entries = match view.readdir_all(&absolute).await {
            Ok(entries) => entries,
            Err(FsError::NotFound { .. }) if dir.is_empty() => return Ok(Vec::new()),
            Err(e) => return Err(relative(root, e)),
        };
        Ok(entries
            .into_iter()
            .filter(|e| e.stat.kind != FileKind::Symlink)
            .map(|e| (join(dir, &e.name), e.stat))
            .collect())
    }

    /// The entry at `path`, if there is one.
    pub async fn stat(
        &self,
        agent_id: &str,
        path: &str,
    ) -> Result<Option<MemoryEntry>, SpaceError> {
        let path = entry_path(path)?;
        let (view, root) = self.view(agent_id)?;
        match view.stat(&absolute(&root, &path)).await {
            Ok(stat) => Ok(Some(entry(path, &stat))),
            Err(FsError::NotFound { .. }) => Ok(None),
            Err(e) => Err(relative(&root, e)),
        }
    }

    /// A file's bytes; one larger than `max_bytes` is `too_large`.
    pub async fn read(
        &self,
        agent_id: &str,
        path: &str,
        max_bytes: u64,
    ) -> Result<MemoryFile, SpaceError> {
        let path = entry_path(path)?;
        let (view, root) = self.view(agent_id)?;
        let absolute = absolute(&root, &path);
        let stat = view.stat(&absolute).await.map_err(|e| relative(&root, e))?;
        if stat.kind == FileKind::Dir {
            return Err(SpaceError::Conflict(format!("{path} is a directory")));
        }
        // One byte past the bound tells a file that grew since the stat.
        let data = view
            .read(&absolute, 0, max_bytes.saturating_add(1))
            .await
            .map_err(|e| relative(&root, e))?;
        if data.len() as u64 > max_bytes || stat.size > max_bytes {
            return Err(SpaceError::TooLarge {
                what: format!("memory file {path}"),
                size: stat.size.max(data.len() as u64),
                limit: max_bytes,
            });
        }
        Ok(MemoryFile {
            size: data.len() as u64,
            updated_at_ms: ms(&stat),
            path,
            data,
        })
    }

    /// Creates or replaces the file at `path`, creating its directories.
    pub async fn write(
        &self,
        agent_id: &str,
        path: &str,
        data: &[u8],
    ) -> Result<MemoryEntry, SpaceError> {
        let path = entry_path(path)?;
        let (view, root) = self.view(agent_id)?;
        let parent = match path.rsplit_once('/') {
            Some((parent, _)) => absolute(&root, parent),
            None => root.clone(),
        };
        if !matches!(view.stat(&parent).await, Ok(stat) if stat.is_dir()) {
            // The memory root's own parents are outside the agent's view.
            self.reserved
                .mkdir_p(&root, DEFAULT_DIR_MODE)
                .await
                .map_err(|e| relative(&root, e))?;
            view.mkdir_p(&parent, DEFAULT_DIR_MODE)
                .await
                .map_err(|e| relative(&root, e))?;
        }
        let stat = view
            .write_file(&absolute(&root, &path), data)
            .await
            .map_err(|e| relative(&root, e))?;
        Ok(entry(path, &stat))
    }

    /// Moves the reserved file at `from` (a committed upload's bytes) to
    /// `path`, replacing a file there (a directory there is a conflict).
    pub async fn place(
        &self,
        agent_id: &str,
        path: &str,
        from: &str,
    ) -> Result<MemoryEntry, SpaceError> {
        let path = entry_path(path)?;
        let (view, root) = self.view(agent_id)?;
        let target = absolute(&root, &path);
        if matches!(view.stat(&target).await, Ok(stat) if stat.is_dir()) {
            return Err(SpaceError::Conflict(format!(
                "Memory path is a directory, not a file: {path}"
            )));
        }
        let parent = match path.rsplit_once('/') {
            Some((parent, _)) => absolute(&root, parent),
            None => root.clone(),
        };
        // The root through the reserved view (its parents are outside the
        // agent's), the rest through the agent's: a link inside memory
        // never leads the file elsewhere.
        self.reserved
            .mkdir_p(&root, DEFAULT_DIR_MODE)
            .await
            .map_err(|e| relative(&root, e))?;
        view.mkdir_p(&parent, DEFAULT_DIR_MODE)
            .await
            .map_err(|e| relative(&root, e))?;
        self.reserved
            .rename(from, &target)
            .await
            .map_err(|e| relative(&root, e))?;
        let stat = view.stat(&target).await.map_err(|e| relative(&root, e))?;
        Ok(entry(path, &stat))
    }

    /// Deletes the file, or the directory with everything in it, at
    /// `path`; false when nothing was there.
    pub async fn delete(&self, agent_id: &str, path: &str) -> Result<bool, SpaceError> {
        let path = entry_path(path)?;
        let (view, root) = self.view(agent_id)?;
        match view.remove(&absolute(&root, &path), true).await {
            Ok(()) => Ok(true),
            Err(FsError::NotFound { .. }) => Ok(false),
            Err(e) => Err(relative(&root, e)),
        }
    }

    /// Deletes all of an agent's memory (when the agent is deleted); false
    /// when it had none.
    pub async fn delete_agent(&self, agent_id: &str) -> Result<bool, SpaceError> {
        let root = Self::root(agent_id)?;
        let agent_dir = root.trim_end_matches("/memory").to_owned();
        match self.reserved.remove(&agent_dir, true).await {
            Ok(()) => Ok(true),
            Err(FsError::NotFound { .. }) => Ok(false),
            Err(e) => Err(relative(&root, e)),
        }
    }

    /// Bytes of every file together.
    pub async fn total_bytes(&self, agent_id: &str) -> Result<u64, SpaceError> {
        Ok(self
            .list(agent_id)
            .await?
            .iter()
            .filter(|e| !e.is_dir)
            .map(|e| e.size)
            .sum())
    }
}

fn agents_dir() -> String {
    format!("{RESERVED_ROOT}/agents")
}

fn absolute(root: &str, path: &str) -> String {
    if path.is_empty() {
        root.to_owned()
    } else {
        format!("{root}/{path}")
    }
}

/// A file-system error with its paths made relative to the memory root.
fn relative(root: &str, e: FsError) -> SpaceError {
    let strip = |text: String| text.replace(&format!("{root}/"), "").replace(root, ".");
    match SpaceError::from(e) {
        SpaceError::NotFound(path) => SpaceError::NotFound(strip(path)),
        SpaceError::Conflict(message) => SpaceError::Conflict(strip(message)),
        SpaceError::InvalidPath { path, reason } => SpaceError::InvalidPath {
            path: strip(path),
            reason,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests;
