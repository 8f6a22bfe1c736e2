//! The VFS: a POSIX-like file system stored as rows in the shared database
//! (see the `agentos_fs_*` ladder). Metadata is one row per inode and per
//! directory entry, and file bytes are inline (small files) or
//! content-addressed chunks, so a mutation touches only the rows it names and
//! costs the same in a tree of ten files or a million.
//!
//! Every operation resolves paths with single-statement reads, then commits one
//! transaction guarded by compare-and-set (see `store`), so a crash leaves
//! either the old or the new state. Mutations are serialised inside the process
//! (one `Vfs` family is the only writer of these tables); reads share the lock,
//! so a read that spans several statements sees one committed state. The one
//! exception is creating a new file with `write_file`, which only adds rows and
//! bumps counters in SQL: it shares the lock too, so concurrent creates reach
//! the database together and are committed as a group.
//!
//! Directory lookups go through a bounded cache keyed by `(parent ino, name)`.
//! An entry's inode, kind and symlink target never change for the life of the
//! inode, so only removing or renaming a name invalidates it; a lookup that
//! raced with such a change never fills the cache (generation check).
//!
//! Limits (`limits.fs`): `maxTotalBytes` counts the logical sizes of regular
//! files (a sparse gap counts; shared blocks count once per file),
//! `maxInodes` counts inodes of every kind including the root, and
//! `maxFileBytes` bounds one file. Both counters live in one row updated in the
//! mutation's transaction with a guarded `UPDATE`, so a limit check costs O(1)
//! and a refused mutation changes nothing. Crossing 80 % logs one warning.
//!
//! A `Vfs` carries a `VfsPolicy`: the roots it may touch (EACCES outside) and
//! read-only subtrees (EROFS). `scoped` narrows it for one session; checks
//! apply to paths after symlink resolution.

pub mod acp;
pub mod error;
pub mod path;
pub mod policy;
pub mod store;
pub mod transfer;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use agentos_schema::SharedDatabase;
use serde::{Deserialize, Serialize};
use tokio::sync::RwLock;

pub use self::error::FsError;
use self::path::{components, is_within, join, PATH_MAX};
pub use self::policy::VfsPolicy;
use self::store::{Entry, Fail, InodeRow, Tx, TxError, ROOT_INO};
pub use self::store::{Kind, Usage};
pub use self::transfer::TreeReport;
use crate::config::FsLimits;

/// Symlinks followed while resolving one path before ELOOP (Linux's MAXSYMLINKS).
pub const MAX_SYMLINK_FOLLOWS: u32 = 40;
/// Largest `readdir` page.
pub const MAX_READDIR_PAGE: u64 = 10_000;
/// Entries held by the lookup cache before it is emptied.
const LOOKUP_CACHE_ENTRIES: usize = 262_144;
/// Unreferenced blocks deleted after a mutation that freed some.
const GC_BATCH_AFTER_MUTATION: u32 = 256;
/// Mode of files created without one (`write_file`, imports).
pub const DEFAULT_FILE_MODE: u32 = 0o644;
/// Mode callers use for directories when they have no other.
pub const DEFAULT_DIR_MODE: u32 = 0o755;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
}

impl From<Kind> for FileKind {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::File => FileKind::File,
            Kind::Dir => FileKind::Dir,
            Kind::Symlink => FileKind::Symlink,
        }
    }
}

/// What `stat` reports; serialises as the host protocol's JSON stat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stat {
    pub ino: u64,
    pub kind: FileKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub birthtime_ns: i64,
    pub atime_ms: i64,
    pub mtime_ms: i64,
    pub ctime_ms: i64,
    pub birthtime_ms: i64,
}

impl Stat {
    fn from_row(row: &InodeRow) -> Stat {
        Stat {
            ino: u64::try_from(row.ino).unwrap_or(0),
            kind: row.kind.into(),
            mode: row.mode,
            uid: row.uid,
            gid: row.gid,
            size: row.size,
            nlink: row.nlink,
            atime_ns: row.atime_ns,
            mtime_ns: row.mtime_ns,
            ctime_ns: row.ctime_ns,
            birthtime_ns: row.birthtime_ns,
            atime_ms: row.atime_ns.div_euclid(1_000_000),
            mtime_ms: row.mtime_ns.div_euclid(1_000_000),
            ctime_ms: row.ctime_ns.div_euclid(1_000_000),
            birthtime_ms: row.birthtime_ns.div_euclid(1_000_000),
        }
    }

    pub fn is_dir(&self) -> bool {
        self.kind == FileKind::Dir
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirEntry {
    pub name: String,
    pub stat: Stat,
}

/// One page of a directory listing; pass `next_cursor` back for the next page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirPage {
    pub entries: Vec<DirEntry>,
    pub next_cursor: Option<String>,
}

/// A path resolved to its parent chain and final entry.
struct Walk {
    /// Directories from the root (`(ROOT_INO, "")`) to the parent of `name`.
    dirs: Vec<(i64, String)>,
    /// The final name; `None` when the path is the directory `dirs.last()`.
    name: Option<String>,
    /// The final entry, when it exists.
    entry: Option<Entry>,
}

impl Walk {
    fn parent(&self) -> i64 {
        self.dirs.last().map_or(ROOT_INO, |d| d.0)
    }

    /// The resolved (symlink-free) path.
    fn path(&self) -> String {
        let mut parts: Vec<&str> = self.dirs.iter().skip(1).map(|d| d.1.as_str()).collect();
        if let Some(name) = &self.name {
            parts.push(name);
        }
        join(&parts)
    }

    /// The final object, when it exists.
    fn target(&self) -> Option<Entry> {
        match &self.name {
            None => Some(Entry {
                ino: self.parent(),
                kind: Kind::Dir,
                target: None,
            }),
            Some(_) => self.entry.clone(),
        }
    }
}

#[derive(Default)]
struct LookupCache {
    map: HashMap<(i64, String), Entry>,
    generation: u64,
}

struct Inner {
    db: SharedDatabase,
    limits: FsLimits,
    next_ino: AtomicI64,
    lock: RwLock<()>,
    cache: Mutex<LookupCache>,
    warned_bytes: AtomicBool,
    warned_inodes: AtomicBool,
}

/// The file-system service. Cheap to clone; clones and scoped views share the
/// database, the lock and the cache.
#[derive(Clone)]
pub struct Vfs {
    inner: Arc<Inner>,
    policy: Arc<VfsPolicy>,
}

impl std::fmt::Debug for Vfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vfs")
            .field("db", &self.inner.db.kind())
            .field("policy", &self.policy)
            .finish()
    }
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Vfs {
    /// Opens the service on a migrated database.
    pub async fn open(
        db: SharedDatabase,
        limits: FsLimits,
        policy: VfsPolicy,
    ) -> Result<Vfs, FsError> {
        limits.validate().map_err(FsError::Config)?;
        let policy = policy.normalized()?;
        let max = store::max_ino(db.as_ref()).await?;
        let usage = store::usage(db.as_ref()).await?;
        let vfs = Vfs {
            inner: Arc::new(Inner {
                db,
                limits,
                next_ino: AtomicI64::new(max + 1),
                lock: RwLock::new(()),
                cache: Mutex::new(LookupCache::default()),
                warned_bytes: AtomicBool::new(false),
                warned_inodes: AtomicBool::new(false),
            }),
            policy: Arc::new(policy),
        };
        vfs.check_warnings(usage);
        Ok(vfs)
    }

    /// A view restricted to `roots` (a session's cwd and additional
    /// directories); every root must lie inside this view's roots.
    pub fn scoped(&self, roots: &[String]) -> Result<Vfs, FsError> {
        Ok(Vfs {
            inner: Arc::clone(&self.inner),
            policy: Arc::new(self.policy.narrowed(roots)?),
        })
    }

    pub fn policy(&self) -> &VfsPolicy {
        &self.policy
    }

    pub fn limits(&self) -> &FsLimits {
        &self.inner.limits
    }

    fn db(&self) -> &dyn agentos_schema::Database {
        self.inner.db.as_ref()
    }

    // ---- resolution -------------------------------------------------------

    async fn lookup(&self, parent: i64, name: &str) -> Result<Option<Entry>, FsError> {
        let generation = {
            let cache = self.lock_cache();
            if let Some(entry) = cache.map.get(&(parent, name.to_owned())) {
                return Ok(Some(entry.clone()));
            }
            cache.generation
        };
        let found = store::lookup(self.db(), parent, name).await?;
        if let Some(entry) = &found {
            let mut cache = self.lock_cache();
            if cache.generation == generation {
                if cache.map.len() >= LOOKUP_CACHE_ENTRIES {
                    cache.map.clear();
                }
                cache.map.insert((parent, name.to_owned()), entry.clone());
            }
        }
        Ok(found)
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, LookupCache> {
        // A poisoned cache only means a panic elsewhere; its contents are
        // still consistent entries, so keep using it.
        self.inner
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn forget(&self, names: &[(i64, &str)]) {
        let mut cache = self.lock_cache();
        cache.generation += 1;
        for (parent, name) in names {
            cache.map.remove(&(*parent, (*name).to_owned()));
        }
    }

    fn forget_all(&self) {
        let mut cache = self.lock_cache();
        cache.generation += 1;
        cache.map.clear();
    }

    /// Resolves `path`; symlinks in the middle are always followed, the last
    /// one only when `follow_last`. A missing final name is not an error.
    async fn walk(&self, path: &str, follow_last: bool) -> Result<Walk, FsError> {
        let mut remaining: VecDeque<String> = components(path)?.into();
        let mut dirs: Vec<(i64, String)> = vec![(ROOT_INO, String::new())];
        let mut follows = 0u32;
        while let Some(name) = remaining.pop_front() {
            if name == "." {
                continue;
            }
            if name == ".." {
                if dirs.len() > 1 {
                    dirs.pop();
                }
                continue;
            }
            let last = remaining.is_empty();
            let parent = dirs.last().map_or(ROOT_INO, |d| d.0);
            let here = || {
                let mut p: Vec<&str> = dirs.iter().skip(1).map(|d| d.1.as_str()).collect();
                p.push(&name);
                join(&p)
            };
            let Some(entry) = self.lookup(parent, &name).await? else {
                if last {
                    return Ok(Walk {
                        dirs,
                        name: Some(name),
                        entry: None,
                    });
                }
                return Err(FsError::NotFound { path: here() });
            };
            match entry.kind {
                Kind::Dir if !last => dirs.push((entry.ino, name)),
                Kind::File if !last => return Err(FsError::NotDir { path: here() }),
                Kind::Symlink if !last || follow_last => {
                    follows += 1;
                    if follows > MAX_SYMLINK_FOLLOWS {
                        return Err(FsError::Loop {
                            path: path.to_owned(),
                        });
                    }
                    let target = entry.target.unwrap_or_default();
                    if target.is_empty() {
                        return Err(FsError::NotFound { path: here() });
                    }
                    if target.starts_with('/') {
                        dirs.truncate(1);
                    }
                    let mut next: VecDeque<String> = target
                        .split('/')
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect();
                    next.extend(remaining.drain(..));
                    remaining = next;
                }
                _ => {
                    return Ok(Walk {
                        dirs,
                        name: Some(name),
                        entry: Some(entry),
                    })
                }
            }
        }
        Ok(Walk {
            dirs,
            name: None,
            entry: None,
        })
    }

    /// Resolves an existing object and checks read access.
    async fn existing(&self, path: &str, follow: bool) -> Result<(Walk, Entry), FsError> {
        let walk = self.walk(path, follow).await?;
        self.policy.check_read(&walk.path())?;
        let entry = walk
            .target()
            .ok_or_else(|| FsError::NotFound { path: walk.path() })?;
        Ok((walk, entry))
    }

    async fn row(&self, ino: i64, path: &str) -> Result<InodeRow, FsError> {
        store::inode(self.db(), ino)
            .await?
            .ok_or_else(|| FsError::NotFound {
                path: path.to_owned(),
            })
    }

    fn alloc_ino(&self) -> i64 {
        self.inner.next_ino.fetch_add(1, Ordering::Relaxed)
    }

    async fn commit(&self, tx: Tx, path: &str) -> Result<Option<Usage>, FsError> {
        let frees = tx.frees_blocks;
        let (inodes, _) = tx.usage_delta;
        let limits = &self.inner.limits;
        let usage = match tx.commit(self.db()).await {
            Ok(usage) => usage,
            Err(TxError::Db(e)) => return Err(FsError::Db(e)),
            Err(TxError::Failed(fail)) => {
                let path = path.to_owned();
                return Err(match fail {
                    Fail::Conflict => FsError::Conflict { path },
                    Fail::Exists => FsError::Exists { path },
                    Fail::ParentGone => FsError::NotFound { path },
                    Fail::NotEmpty => FsError::NotEmpty { path },
                    Fail::NoSpace => {
                        // Which bound was hit: re-read the counters (rare path).
                        let now = store::usage(self.db()).await?;
                        let inodes_full = inodes > 0
                            && u128::from(now.inode_count) + inodes as u128
                                > u128::from(limits.max_inodes);
                        if inodes_full {
                            FsError::NoSpace {
                                path,
                                limit: limits.max_inodes,
                                setting: "limits.fs.maxInodes",
                            }
                        } else {
                            FsError::NoSpace {
                                path,
                                limit: limits.max_total_bytes,
                                setting: "limits.fs.maxTotalBytes",
                            }
                        }
                    }
                });
            }
        };
        if let Some(usage) = usage {
            self.check_warnings(usage);
        }
        if frees {
            // Bounded: whatever is left goes with later mutations or an
            // explicit `collect_garbage`.
            if let Err(e) = store::collect_garbage(self.db(), GC_BATCH_AFTER_MUTATION).await {
                tracing::warn!(code = e.code(), error = %e, "vfs block collection failed");
            }
        }
        Ok(usage)
    }

    /// One warning per upward crossing of 80 % of a limit.
    fn check_warnings(&self, usage: Usage) {
        let limits = &self.inner.limits;
        let checks = [
            (
                &self.inner.warned_bytes,
                usage.total_bytes,
                limits.max_total_bytes,
                "limits.fs.maxTotalBytes",
            ),
            (
                &self.inner.warned_inodes,
                usage.inode_count,
                limits.max_inodes,
                "limits.fs.maxInodes",
            ),
        ];
        for (flag, used, limit, setting) in checks {
            let high = u128::from(used) * 5 >= u128::from(limit) * 4;
            if high {
                if !flag.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        used,
                        limit,
                        setting,
                        "file system usage reached 80% of its limit"
                    );
                }
            } else {
                flag.store(false, Ordering::Relaxed);
            }
        }
    }

    fn check_size(&self, path: &str, size: u64) -> Result<(), FsError> {
        let limit = self.inner.limits.max_file_bytes;
        if size > limit {
            return Err(FsError::FileTooBig {
                path: path.to_owned(),
                size,
                limit,
                setting: "limits.fs.maxFileBytes",
            });
        }
        Ok(())
    }

    fn new_row(&self, kind: Kind, mode: u32, now: i64) -> InodeRow {
        InodeRow {
            ino: self.alloc_ino(),
            kind,
            mode,
            uid: 0,
            gid: 0,
            size: 0,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            birthtime_ns: now,
            symlink_target: None,
            inline: kind == Kind::File,
            chunk_bytes: 0,
            generation: 0,
        }
    }

    /// Resolves the parent of a name about to be created. Whether the name
    /// exists is left to the transaction (its dentry insert fails with EEXIST),
    /// which saves a lookup round trip per creation.
    async fn creation_point(&self, path: &str) -> Result<(Walk, String), FsError> {
        let mut parts = components(path)?;
        let Some(name) = parts.pop() else {
            return Err(FsError::Exists {
                path: "/".to_owned(),
            });
        };
        let parent = self.walk(&join(&parts), true).await?;
        let Some(entry) = parent.target() else {
            return Err(FsError::NotFound {
                path: parent.path(),
            });
        };
        if entry.kind != Kind::Dir {
            return Err(FsError::NotDir {
                path: parent.path(),
            });
        }
        let mut dirs = parent.dirs;
        if let Some(parent_name) = parent.name {
            dirs.push((entry.ino, parent_name));
        }
        let walk = Walk {
            dirs,
            name: Some(name.clone()),
            entry: None,
        };
        self.policy.check_write(&walk.path())?;
        Ok((walk, name))
    }

    /// Records a name this process just committed.
    fn remember(&self, parent: i64, name: &str, entry: Entry) {
        let mut cache = self.lock_cache();
        if cache.map.len() >= LOOKUP_CACHE_ENTRIES {
            cache.map.clear();
        }
        cache.map.insert((parent, name.to_owned()), entry);
    }

    fn is_cached(&self, parent: i64, name: &str) -> bool {
        self.lock_cache()
            .map
            .contains_key(&(parent, name.to_owned()))
    }

    fn check_mode(path: &str, mode: u32) -> Result<u32, FsError> {
        if mode > 0o7777 {
            return Err(FsError::invalid(path, "mode has bits outside 0o7777"));
        }
        Ok(mode)
    }

    // ---- reads ------------------------------------------------------------

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

    async fn read_row(&self, row: &InodeRow, offset: u64, len: u64) -> Result<Vec<u8>, FsError> {
        if offset >= row.size {
            return Ok(Vec::new());
        }
        let len = len.min(row.size - offset);
        if row.inline {
            let mut bytes = store::read_inline(self.db(), row.ino, offset, len).await?;
            bytes.resize(usize::try_from(len).unwrap_or(usize::MAX), 0);
            Ok(bytes)
        } else {
            store::read_chunked(self.db(), row.ino, row.chunk_bytes, offset, len).await
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

    // ---- file contents ----------------------------------------------------

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

    // ---- namespace --------------------------------------------------------

    pub async fn mkdir(&self, path: &str, mode: u32) -> Result<Stat, FsError> {
        let mode = Self::check_mode(path, mode)?;
        let _write = self.inner.lock.write().await;
        let (walk, name) = self.creation_point(path).await?;
        let now = now_ns();
        let row = self.new_row(Kind::Dir, mode, now);
        let mut tx = Tx::new();
        tx.insert_dentry(walk.parent(), &name, row.ino);
        tx.add_usage(1, 0, self.inner.limits.max_inodes, 0);
        tx.insert_inode(&row, None);
        tx.touch_dir(walk.parent(), now, 1);
        self.commit(tx, &walk.path()).await?;
        self.remember(
            walk.parent(),
            &name,
            Entry {
                ino: row.ino,
                kind: Kind::Dir,
                target: None,
            },
        );
        Ok(Stat::from_row(&row))
    }

    /// `mkdir -p`: creates every missing directory of `path` in one
    /// transaction; an existing directory is fine, anything else is EEXIST.
    pub async fn mkdir_p(&self, path: &str, mode: u32) -> Result<Stat, FsError> {
        let mode = Self::check_mode(path, mode)?;
        let _write = self.inner.lock.write().await;
        let parts = components(path)?;
        let mut missing_from = parts.len();
        let mut walk = self.walk("/", true).await?;
        for i in 0..parts.len() {
            let prefix = join(&parts[..=i]);
            let w = self.walk(&prefix, true).await?;
            match w.target() {
                Some(entry) if entry.kind == Kind::Dir => walk = w,
                Some(_) => {
                    return Err(if i + 1 == parts.len() {
                        FsError::Exists { path: w.path() }
                    } else {
                        FsError::NotDir { path: w.path() }
                    })
                }
                None => {
                    missing_from = i;
                    walk = w;
                    break;
                }
            }
        }
        if missing_from == parts.len() {
            let (walk, entry) = self.existing(path, true).await?;
            return Ok(Stat::from_row(&self.row(entry.ino, &walk.path()).await?));
        }
        let resolved = walk.path();
        self.policy.check_write(&resolved)?;
        let now = now_ns();
        let mut tx = Tx::new();
        let count = (parts.len() - missing_from) as i64;
        tx.add_usage(count, 0, self.inner.limits.max_inodes, 0);
        let mut parent = walk.parent();
        let mut last_row = None;
        tx.touch_dir(parent, now, 1);
        for (n, name) in parts[missing_from..].iter().enumerate() {
            let row = self.new_row(Kind::Dir, mode, now);
            let mut row = row;
            if n + 1 < count as usize {
                // It will hold the next new directory.
                row.nlink = 3;
            }
            tx.insert_inode(&row, None);
            tx.insert_dentry(parent, name, row.ino);
            parent = row.ino;
            last_row = Some(row);
        }
        self.commit(tx, &resolved).await?;
        last_row
            .map(|row| Stat::from_row(&row))
            .ok_or_else(|| FsError::corrupt(path, "nothing was created"))
    }

    pub async fn symlink(&self, target: &str, link_path: &str) -> Result<Stat, FsError> {
        if target.is_empty() || target.len() > PATH_MAX || target.contains('\0') {
            return Err(FsError::invalid(
                link_path,
                "symlink target must be 1..=4096 bytes without NUL",
            ));
        }
        let _write = self.inner.lock.write().await;
        let (walk, name) = self.creation_point(link_path).await?;
        let now = now_ns();
        let mut row = self.new_row(Kind::Symlink, 0o777, now);
        row.size = target.len() as u64;
        row.symlink_target = Some(target.to_owned());
        row.inline = false;
        let mut tx = Tx::new();
        tx.insert_dentry(walk.parent(), &name, row.ino);
        tx.add_usage(1, 0, self.inner.limits.max_inodes, 0);
        tx.insert_inode(&row, None);
        tx.touch_dir(walk.parent(), now, 0);
        self.commit(tx, &walk.path()).await?;
        self.remember(
            walk.parent(),
            &name,
            Entry {
                ino: row.ino,
                kind: Kind::Symlink,
                target: row.symlink_target.clone(),
            },
        );
        Ok(Stat::from_row(&row))
    }

    /// A hard link `new_path` to the non-directory `existing` (not followed).
    pub async fn link(&self, existing: &str, new_path: &str) -> Result<Stat, FsError> {
        let _write = self.inner.lock.write().await;
        let (src_walk, entry) = self.existing(existing, false).await?;
        let src_path = src_walk.path();
        // A new link changes the source inode (nlink, ctime).
        self.policy.check_write(&src_path)?;
        if entry.kind == Kind::Dir {
            return Err(FsError::NotPermitted {
                path: src_path,
                reason: "hard links to directories are not allowed".into(),
            });
        }
        let (walk, name) = self.creation_point(new_path).await?;
        let dst_path = walk.path();
        if self.policy.root_of(&src_path)? != self.policy.root_of(&dst_path)? {
            return Err(FsError::CrossDevice { path: dst_path });
        }
        let now = now_ns();
        let mut tx = Tx::new();
        tx.add_link(entry.ino, now);
        tx.insert_dentry(walk.parent(), &name, entry.ino);
        tx.touch_dir(walk.parent(), now, 0);
        self.commit(tx, &dst_path).await?;
        self.remember(walk.parent(), &name, entry.clone());
        Ok(Stat::from_row(&self.row(entry.ino, &dst_path).await?))
    }

    /// Removes a non-directory name.
    pub async fn unlink(&self, path: &str) -> Result<(), FsError> {
        let _write = self.inner.lock.write().await;
        let (walk, entry) = self.removal_point(path).await?;
        if entry.kind == Kind::Dir {
            return Err(FsError::IsDir { path: walk.path() });
        }
        self.remove_planned(&walk, &entry, false).await
    }

    /// Removes an empty directory.
    pub async fn rmdir(&self, path: &str) -> Result<(), FsError> {
        let _write = self.inner.lock.write().await;
        let (walk, entry) = self.removal_point(path).await?;
        if entry.kind != Kind::Dir {
            return Err(FsError::NotDir { path: walk.path() });
        }
        self.remove_planned(&walk, &entry, false).await
    }

    /// Removes a name of any kind; a directory only if empty unless `recursive`,
    /// in which case the whole subtree goes in one transaction.
    pub async fn remove(&self, path: &str, recursive: bool) -> Result<(), FsError> {
        let _write = self.inner.lock.write().await;
        let (walk, entry) = self.removal_point(path).await?;
        self.remove_planned(&walk, &entry, recursive).await
    }

    async fn removal_point(&self, path: &str) -> Result<(Walk, Entry), FsError> {
        let walk = self.walk(path, false).await?;
        let resolved = walk.path();
        self.policy.check_write(&resolved)?;
        if walk.name.is_none() {
            return Err(FsError::NotPermitted {
                path: resolved,
                reason: "the root cannot be removed".into(),
            });
        }
        for root in &self.policy.roots {
            if root == &resolved {
                return Err(FsError::NotPermitted {
                    path: resolved,
                    reason: "a root of this view cannot be removed".into(),
                });
            }
        }
        match walk.entry.clone() {
            Some(entry) => Ok((walk, entry)),
            None => Err(FsError::NotFound { path: resolved }),
        }
    }

    async fn remove_planned(
        &self,
        walk: &Walk,
        entry: &Entry,
        recursive: bool,
    ) -> Result<(), FsError> {
        let resolved = walk.path();
        let name = walk.name.clone().unwrap_or_default();
        let now = now_ns();
        let mut tx = Tx::new();
        if entry.kind == Kind::Dir && recursive {
            if let Some(ro) = self
                .policy
                .read_only
                .iter()
                .find(|ro| is_within(ro, &resolved))
            {
                return Err(FsError::ReadOnly { path: ro.clone() });
            }
            // Post-order: children before their directory.
            let mut stack = vec![entry.ino];
            let mut order: Vec<(i64, String, Entry)> = Vec::new();
            let mut pending: Vec<(i64, String, Entry)> = Vec::new();
            while let Some(dir) = stack.pop() {
                for (child_name, child) in store::children(self.db(), dir).await? {
                    if child.kind == Kind::Dir {
                        stack.push(child.ino);
                        pending.push((dir, child_name, child));
                    } else {
                        order.push((dir, child_name, child));
                    }
                }
            }
            // Directories were found parents-first; remove them children-first.
            for (parent, child_name, child) in &order {
                tx.delete_dentry(*parent, child_name, child.ino);
                tx.drop_link(child.ino, now);
            }
            for (parent, child_name, child) in pending.iter().rev() {
                tx.delete_dentry(*parent, child_name, child.ino);
                tx.remove_empty_dir(child.ino);
            }
        }
        tx.delete_dentry(walk.parent(), &name, entry.ino);
        if entry.kind == Kind::Dir {
            tx.remove_empty_dir(entry.ino);
            tx.touch_dir(walk.parent(), now, -1);
        } else {
            tx.drop_link(entry.ino, now);
            tx.touch_dir(walk.parent(), now, 0);
        }
        let result = self.commit(tx, &resolved).await;
        if recursive {
            self.forget_all();
        } else {
            self.forget(&[(walk.parent(), &name)]);
        }
        result.map(|_| ())
    }

    /// Atomic rename, replacing an existing destination as POSIX does.
    pub async fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        let _write = self.inner.lock.write().await;
        let src = self.walk(from, false).await?;
        let src_path = src.path();
        self.policy.check_write(&src_path)?;
        let (Some(src_name), Some(src_entry)) = (src.name.clone(), src.entry.clone()) else {
            return match src.name {
                None => Err(FsError::NotPermitted {
                    path: src_path,
                    reason: "the root cannot be renamed".into(),
                }),
                Some(_) => Err(FsError::NotFound { path: src_path }),
            };
        };
        let dst = self.walk(to, false).await?;
        let dst_path = dst.path();
        self.policy.check_write(&dst_path)?;
        let Some(dst_name) = dst.name.clone() else {
            return Err(FsError::NotPermitted {
                path: dst_path,
                reason: "cannot replace the root".into(),
            });
        };
        if self.policy.root_of(&src_path)? != self.policy.root_of(&dst_path)? {
            return Err(FsError::CrossDevice { path: dst_path });
        }
        if self.policy.roots.contains(&src_path) {
            return Err(FsError::NotPermitted {
                path: src_path,
                reason: "a root of this view cannot be renamed".into(),
            });
        }
        let src_is_dir = src_entry.kind == Kind::Dir;
        if src_is_dir && dst.dirs.iter().any(|(ino, _)| *ino == src_entry.ino) {
            return Err(FsError::invalid(
                &dst_path,
                "cannot move a directory into itself",
            ));
        }
        if let Some(dst_entry) = &dst.entry {
            if dst_entry.ino == src_entry.ino {
                return Ok(());
            }
            match (src_is_dir, dst_entry.kind == Kind::Dir) {
                (false, true) => return Err(FsError::IsDir { path: dst_path }),
                (true, false) => return Err(FsError::NotDir { path: dst_path }),
                _ => {}
            }
        }
        let now = now_ns();
        let mut tx = Tx::new();
        let mut dst_delta = 0i64;
        if let Some(dst_entry) = &dst.entry {
            tx.delete_dentry(dst.parent(), &dst_name, dst_entry.ino);
            if dst_entry.kind == Kind::Dir {
                tx.remove_empty_dir(dst_entry.ino);
                dst_delta -= 1;
            } else {
                tx.drop_link(dst_entry.ino, now);
            }
        }
        tx.move_dentry(
            (src.parent(), &src_name),
            (dst.parent(), &dst_name),
            src_entry.ino,
        );
        tx.touch_inode(src_entry.ino, now);
        if src.parent() == dst.parent() {
            tx.touch_dir(src.parent(), now, dst_delta);
        } else {
            let moved = i64::from(src_is_dir);
            tx.touch_dir(src.parent(), now, -moved);
            tx.touch_dir(dst.parent(), now, dst_delta + moved);
        }
        let result = self.commit(tx, &dst_path).await;
        self.forget(&[(src.parent(), &src_name), (dst.parent(), &dst_name)]);
        result.map(|_| ())
    }

    // ---- attributes -------------------------------------------------------

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

    // ---- ACP text helpers -------------------------------------------------

    /// ACP `fs/read_text_file`: the file as UTF-8, from 1-based `line`, at most
    /// `limit` lines (line terminators kept).
    pub async fn read_text_file(
        &self,
        path: &str,
        line: Option<u64>,
        limit: Option<u64>,
    ) -> Result<String, FsError> {
        if line == Some(0) {
            return Err(FsError::invalid(path, "line is 1-based"));
        }
        let bytes = self.read_all(path).await?;
        let text = String::from_utf8(bytes)
            .map_err(|_| FsError::invalid(path, "the file is not valid UTF-8"))?;
        if line.is_none() && limit.is_none() {
            return Ok(text);
        }
        let skip = line.map_or(0, |l| l - 1);
        let take = limit.unwrap_or(u64::MAX);
        Ok(text
            .split_inclusive('\n')
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
            .take(usize::try_from(take).unwrap_or(usize::MAX))
            .collect())
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
