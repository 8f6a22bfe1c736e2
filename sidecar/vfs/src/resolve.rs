//! Path resolution and the lookup cache: how a path becomes a `Walk` (its
//! parent chain and final entry), following symlinks as POSIX does (ELOOP
//! after `MAX_SYMLINK_FOLLOWS`), and the bounded `(parent ino, name)` cache
//! that saves a lookup statement per component. Cache entries only go stale
//! when a name is removed or renamed, which calls `forget`; a lookup that
//! raced with such a change never fills the cache (generation check). Names
//! found missing are kept too, until the next commit of any mutation (every
//! one passes through `Vfs::commit`, which drops them all once its write has
//! ended, whether or not its caller still waits).

use std::collections::{HashMap, HashSet, VecDeque};

use super::path::{components, join};
use super::store::{self, Entry, Kind, ROOT_INO};
use super::{FsError, Vfs, LOOKUP_CACHE_ENTRIES, MAX_SYMLINK_FOLLOWS};

/// Bytes the names held as missing may take (each counted with
/// [`ABSENT_ENTRY_OVERHEAD`]): anyone who may look a path up can make a
/// name missing for free, so these are bounded in bytes, apart from the
/// names that exist.
const ABSENT_BYTES: usize = 4 << 20;
/// What one missing name costs beyond its bytes: its set slot and string.
const ABSENT_ENTRY_OVERHEAD: usize = 64;

/// A path resolved to its parent chain and final entry.
pub(super) struct Walk {
    /// Directories from the root (`(ROOT_INO, "")`) to the parent of `name`.
    pub(super) dirs: Vec<(i64, String)>,
    /// The final name; `None` when the path is the directory `dirs.last()`.
    pub(super) name: Option<String>,
    /// The final entry, when it exists.
    pub(super) entry: Option<Entry>,
}

impl Walk {
    pub(super) fn parent(&self) -> i64 {
        self.dirs.last().map_or(ROOT_INO, |d| d.0)
    }

    /// The resolved (symlink-free) path.
    pub(super) fn path(&self) -> String {
        let mut parts: Vec<&str> = self.dirs.iter().skip(1).map(|d| d.1.as_str()).collect();
        if let Some(name) = &self.name {
            parts.push(name);
        }
        join(&parts)
    }

    /// The final object, when it exists.
    pub(super) fn target(&self) -> Option<Entry> {
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

/// Directory entries this process has read or committed, by parent and
/// then name (so a lookup borrows the name instead of allocating a key).
#[derive(Default)]
pub(super) struct LookupCache {
    map: HashMap<i64, HashMap<String, Entry>>,
    /// Names held, across every parent.
    len: usize,
    /// Names found missing since the last commit, by parent, and their
    /// bytes against [`ABSENT_BYTES`].
    absent: HashMap<i64, HashSet<String>>,
    absent_bytes: usize,
    generation: u64,
}

impl LookupCache {
    fn get(&self, parent: i64, name: &str) -> Option<&Entry> {
        self.map.get(&parent)?.get(name)
    }

    /// Holds `entry`, first emptying the cache when it is full.
    fn insert(&mut self, parent: i64, name: &str, entry: Entry) {
        if self.len >= LOOKUP_CACHE_ENTRIES {
            self.map.clear();
            self.len = 0;
        }
        if self
            .map
            .entry(parent)
            .or_default()
            .insert(name.to_owned(), entry)
            .is_none()
        {
            self.len += 1;
        }
    }

    fn remove(&mut self, parent: i64, name: &str) {
        let Some(names) = self.map.get_mut(&parent) else {
            return;
        };
        if names.remove(name).is_some() {
            self.len -= 1;
        }
        if names.is_empty() {
            self.map.remove(&parent);
        }
    }

    fn clear(&mut self) {
        self.map.clear();
        self.len = 0;
        self.clear_absent();
    }

    fn is_absent(&self, parent: i64, name: &str) -> bool {
        self.absent
            .get(&parent)
            .is_some_and(|names| names.contains(name))
    }

    /// Holds that `name` is missing, first emptying that set when the name
    /// would take it past its bytes.
    fn insert_absent(&mut self, parent: i64, name: &str) {
        let cost = name.len() + ABSENT_ENTRY_OVERHEAD;
        if self.is_absent(parent, name) {
            return;
        }
        if self.absent_bytes + cost > ABSENT_BYTES {
            self.clear_absent();
        }
        self.absent
            .entry(parent)
            .or_default()
            .insert(name.to_owned());
        self.absent_bytes += cost;
    }

    /// Drops `name` from the missing names (it was just created).
    fn remove_absent(&mut self, parent: i64, name: &str) {
        let Some(names) = self.absent.get_mut(&parent) else {
            return;
        };
        if names.remove(name) {
            self.absent_bytes -= name.len() + ABSENT_ENTRY_OVERHEAD;
        }
        if names.is_empty() {
            self.absent.remove(&parent);
        }
    }

    fn clear_absent(&mut self) {
        self.absent.clear();
        self.absent_bytes = 0;
    }
}

impl Vfs {
    pub(super) async fn lookup(&self, parent: i64, name: &str) -> Result<Option<Entry>, FsError> {
        let generation = {
            let cache = self.read_cache();
            if let Some(entry) = cache.get(parent, name) {
                return Ok(Some(entry.clone()));
            }
            if cache.is_absent(parent, name) {
                return Ok(None);
            }
            cache.generation
        };
        let found = store::lookup(self.db(), parent, name).await?;
        let mut cache = self.lock_cache();
        if cache.generation == generation {
            match &found {
                Some(entry) => cache.insert(parent, name, entry.clone()),
                None => cache.insert_absent(parent, name),
            }
        }
        Ok(found)
    }

    // A poisoned cache only means a panic elsewhere; its contents are still
    // consistent entries, so both keep using it.
    pub(super) fn read_cache(&self) -> std::sync::RwLockReadGuard<'_, LookupCache> {
        self.inner
            .cache
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn lock_cache(&self) -> std::sync::RwLockWriteGuard<'_, LookupCache> {
        self.inner
            .cache
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn forget(&self, names: &[(i64, &str)]) {
        let mut cache = self.lock_cache();
        cache.generation += 1;
        for (parent, name) in names {
            cache.remove(*parent, name);
        }
    }

    /// Drops every name held as missing (after any commit).
    pub(super) fn forget_absent(&self) {
        let mut cache = self.lock_cache();
        cache.generation += 1;
        cache.clear_absent();
    }

    pub(super) fn forget_all(&self) {
        let mut cache = self.lock_cache();
        cache.generation += 1;
        cache.clear();
    }

    /// Resolves `path`; symlinks in the middle are always followed, the last
    /// one only when `follow_last`. A missing final name is not an error.
    pub(super) async fn walk(&self, path: &str, follow_last: bool) -> Result<Walk, FsError> {
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
    pub(super) async fn existing(
        &self,
        path: &str,
        follow: bool,
    ) -> Result<(Walk, Entry), FsError> {
        let walk = self.walk(path, follow).await?;
        self.policy.check_read(&walk.path())?;
        let entry = walk
            .target()
            .ok_or_else(|| FsError::NotFound { path: walk.path() })?;
        Ok((walk, entry))
    }

    /// Resolves the parent of a name about to be created. Whether the name
    /// exists is left to the transaction (its dentry insert fails with EEXIST),
    /// which saves a lookup round trip per creation.
    pub(super) async fn creation_point(&self, path: &str) -> Result<(Walk, String), FsError> {
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
    pub(super) fn remember(&self, parent: i64, name: &str, entry: Entry) {
        let mut cache = self.lock_cache();
        cache.remove_absent(parent, name);
        cache.insert(parent, name, entry);
    }

    pub(super) fn is_cached(&self, parent: i64, name: &str) -> bool {
        self.read_cache().get(parent, name).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(ino: i64) -> Entry {
        Entry {
            ino,
            kind: Kind::Dir,
            target: None,
        }
    }

    #[test]
    fn the_lookup_cache_counts_names_across_parents() {
        let mut cache = LookupCache::default();
        cache.insert(1, "a", dir(2));
        cache.insert(1, "b", dir(3));
        cache.insert(2, "a", dir(4));
        // Replacing a name does not count it twice.
        cache.insert(1, "a", dir(5));
        assert_eq!(cache.len, 3);
        assert_eq!(cache.get(1, "a").map(|e| e.ino), Some(5));
        assert_eq!(cache.get(2, "a").map(|e| e.ino), Some(4));
        assert!(cache.get(3, "a").is_none());

        cache.remove(1, "a");
        cache.remove(1, "missing");
        cache.remove(9, "a");
        assert_eq!(cache.len, 2);
        assert!(cache.get(1, "a").is_none());
        cache.remove(2, "a");
        // A parent left without names is dropped with its last one.
        assert!(!cache.map.contains_key(&2));
        assert_eq!(cache.len, 1);
    }

    #[test]
    fn missing_names_stay_within_their_bytes() {
        let mut cache = LookupCache::default();
        let name = "n".repeat(255);
        let cost = name.len() + ABSENT_ENTRY_OVERHEAD;
        let fit = ABSENT_BYTES / cost;
        for n in 0..fit {
            cache.insert_absent(n as i64, &name);
        }
        assert_eq!(cache.absent_bytes, fit * cost);
        // Held again: not counted twice.
        cache.insert_absent(0, &name);
        assert_eq!(cache.absent_bytes, fit * cost);
        assert!(cache.is_absent(0, &name));
        // One more than fits starts the set again.
        cache.insert_absent(-1, &name);
        assert_eq!(cache.absent_bytes, cost);
        assert!(cache.is_absent(-1, &name) && !cache.is_absent(0, &name));
        // A created name leaves the set, and its bytes with it.
        cache.remove_absent(-1, &name);
        assert_eq!(cache.absent_bytes, 0);
        assert!(cache.absent.is_empty());
        cache.remove_absent(-1, &name);
        assert_eq!(cache.absent_bytes, 0);
    }

    #[test]
    fn a_full_lookup_cache_starts_again() {
        let mut cache = LookupCache::default();
        for n in 0..LOOKUP_CACHE_ENTRIES {
            cache.insert((n % 7) as i64, &n.to_string(), dir(n as i64));
        }
        assert_eq!(cache.len, LOOKUP_CACHE_ENTRIES);
        cache.insert(100, "new", dir(1));
        assert_eq!(cache.len, 1);
        assert!(cache.get(0, "0").is_none());
        assert_eq!(cache.get(100, "new").map(|e| e.ino), Some(1));
    }
}
