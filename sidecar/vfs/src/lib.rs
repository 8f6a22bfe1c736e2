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
//! the database together and are committed as a group. The lock is
//! `async-lock`'s: a shared hold is taken and let go with one atomic each,
//! where tokio's lock takes its waiters' mutex on every release, which two
//! readers then queued on.
//!
//! Directory lookups go through a bounded cache keyed by `(parent ino, name)`.
//! An entry's inode, kind and symlink target never change for the life of the
//! inode, so only removing or renaming a name invalidates it; a lookup that
//! raced with such a change never fills the cache (generation check). Names
//! found missing are kept as missing until the next commit. Inode
//! rows and the parts of chunks that small reads touch are cached too, and
//! every commit drops them all. The caches sit behind read-write locks, so
//! reads that hit them do not take turns. Reads go to the
//! database's read path (`Database::read`: a pool of read connections on
//! `sqlite_file`), off the writer's queue.
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
//!
//! This file holds the service, its types and the commit path shared by every
//! mutation; `resolve` turns paths into walks through the lookup cache, and
//! the operations live in `ops_read`, `ops_write` (contents and attributes)
//! and `ops_namespace` (names: create, link, remove, rename).

pub mod error;
mod ops_namespace;
mod ops_read;
mod ops_write;
pub mod path;
pub mod policy;
mod resolve;
mod settings;
pub mod store;
pub mod transfer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, RwLock as SyncRwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use agentos_schema::SharedDatabase;
use async_lock::RwLock;
use serde::{Deserialize, Serialize};

pub use self::error::FsError;
pub use self::policy::VfsPolicy;
use self::resolve::LookupCache;
use self::store::{Fail, InodeRow, Tx, TxError};
pub use self::store::{Kind, Usage};
pub use self::transfer::TreeReport;
pub use settings::{FilesystemConfig, FsLimits, InvalidSetting, ValidFsLimits, MAX_FS_CHUNK_BYTES};

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
/// The subtree the sidecar keeps for its own services (agents' memory is
/// `/.agentos/agents/<agentId>/memory`), reached through
/// [`Vfs::reserved_view`].
pub const RESERVED_ROOT: &str = "/.agentos";

/// Where a session's attachments live in the reserved tree: the files a
/// user gave it, which its agent may read (`fs/read_text_file`) but not
/// write. `session_id` must already be a valid id.
pub fn session_attachments_dir(session_id: &str) -> String {
    format!("{RESERVED_ROOT}/sessions/{session_id}/attachments")
}

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

/// Inode rows held by the inode cache before it is emptied.
const INODE_CACHE_ENTRIES: usize = 65_536;

/// Inode rows as last read, dropped whole by every commit: every mutation
/// passes through [`Vfs::commit`], so a cached row is the committed one. A
/// read that raced with a commit never fills it (generation check).
#[derive(Default)]
struct InodeCache {
    rows: HashMap<i64, InodeRow>,
    /// The parts of a file's chunk, `(part index, rowid)`, for small reads.
    parts: HashMap<(i64, u64), Arc<store::PartRows>>,
    generation: u64,
}

struct Inner {
    db: SharedDatabase,
    limits: ValidFsLimits,
    next_ino: AtomicI64,
    lock: RwLock<()>,
    cache: SyncRwLock<LookupCache>,
    inodes: SyncRwLock<InodeCache>,
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
        limits: ValidFsLimits,
        policy: VfsPolicy,
    ) -> Result<Vfs, FsError> {
        let policy = policy.normalized()?;
        let max = store::max_ino(db.as_ref()).await?;
        let usage = store::usage(db.as_ref()).await?;
        let vfs = Vfs {
            inner: Arc::new(Inner {
                db,
                limits,
                next_ino: AtomicI64::new(max + 1),
                lock: RwLock::new(()),
                cache: SyncRwLock::new(LookupCache::default()),
                inodes: SyncRwLock::new(InodeCache::default()),
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

    /// A view of exactly [`RESERVED_ROOT`], read-write, whatever the VM's
    /// configured roots and read-only subtrees are: the sidecar's own
    /// services keep their files there (agents' memory). Nothing else
    /// reaches it through this view's policy: a session's view is narrowed
    /// from the VM's roots to its cwd and additional directories, so it
    /// includes `/.agentos` only when a host session's cwd (or one of its
    /// additional directories) is `/` or lies inside `/.agentos`, which
    /// only a trusted host can ask for.
    pub fn reserved_view(&self) -> Vfs {
        Vfs {
            inner: Arc::clone(&self.inner),
            policy: Arc::new(VfsPolicy {
                roots: vec![RESERVED_ROOT.to_owned()],
                read_only: Vec::new(),
            }),
        }
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

    fn read_inodes(&self) -> std::sync::RwLockReadGuard<'_, InodeCache> {
        self.inner
            .inodes
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lock_inodes(&self) -> std::sync::RwLockWriteGuard<'_, InodeCache> {
        self.inner
            .inodes
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn row(&self, ino: i64, path: &str) -> Result<InodeRow, FsError> {
        let generation = {
            let cache = self.read_inodes();
            if let Some(row) = cache.rows.get(&ino) {
                return Ok(row.clone());
            }
            cache.generation
        };
        let row = store::inode(self.db(), ino)
            .await?
            .ok_or_else(|| FsError::NotFound {
                path: path.to_owned(),
            })?;
        let mut cache = self.lock_inodes();
        if cache.generation == generation {
            if cache.rows.len() >= INODE_CACHE_ENTRIES {
                cache.rows.clear();
            }
            cache.rows.insert(ino, row.clone());
        }
        Ok(row)
    }

    /// Forgets every cached inode row (after any commit, whatever its
    /// outcome: a failed or unknown one may still have landed).
    fn forget_inodes(&self) {
        let mut cache = self.lock_inodes();
        cache.generation += 1;
        cache.rows.clear();
        cache.parts.clear();
    }

    /// The parts of chunk `index` of file `ino`, through the inode cache.
    async fn chunk_parts(&self, ino: i64, index: u64) -> Result<Arc<store::PartRows>, FsError> {
        let generation = {
            let cache = self.read_inodes();
            if let Some(parts) = cache.parts.get(&(ino, index)) {
                return Ok(parts.clone());
            }
            cache.generation
        };
        let parts = Arc::new(store::chunk_parts(self.db(), ino, index).await?);
        let mut cache = self.lock_inodes();
        if cache.generation == generation {
            if cache.parts.len() >= INODE_CACHE_ENTRIES {
                cache.parts.clear();
            }
            cache.parts.insert((ino, index), parts.clone());
        }
        Ok(parts)
    }

    fn alloc_ino(&self) -> i64 {
        self.inner.next_ino.fetch_add(1, Ordering::Relaxed)
    }

    async fn commit(&self, tx: Tx, path: &str) -> Result<Option<Usage>, FsError> {
        let frees = tx.frees_blocks;
        let (inodes, _) = tx.usage_delta;
        let limits = &self.inner.limits;
        // The write runs to its end in a task of its own, which then drops
        // the cached inode rows and missing names: a caller that stops
        // waiting (and so lets go of the namespace lock) cannot leave a
        // reader holding what the write changed once it lands.
        let vfs = self.clone();
        let write = tokio::spawn(async move {
            let committed = tx.commit(vfs.db()).await;
            vfs.forget_inodes();
            vfs.forget_absent();
            committed
        });
        let committed = match write.await {
            Ok(committed) => committed,
            Err(e) => {
                self.forget_inodes();
                self.forget_absent();
                return Err(FsError::Db(agentos_schema::DbError::CommitOutcomeUnknown(
                    e.to_string(),
                )));
            }
        };
        let usage = match committed {
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
                tracing::warn!(code = e.code().as_str(), error = %e, "vfs block collection failed");
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

    fn check_mode(path: &str, mode: u32) -> Result<u32, FsError> {
        if mode > 0o7777 {
            return Err(FsError::invalid(path, "mode has bits outside 0o7777"));
        }
        Ok(mode)
    }
}
