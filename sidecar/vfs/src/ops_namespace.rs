//! Namespace operations: `mkdir`, `mkdir -p`, `symlink`, hard `link`,
//! `unlink`, `rmdir`, recursive `remove` and atomic `rename`. Each is one
//! transaction under the service's write lock, checked against the view's
//! policy after symlink resolution; removals and renames invalidate the
//! names they change in the lookup cache.

use super::path::{components, is_within, join, PATH_MAX};
use super::resolve::Walk;
use super::store::{self, Entry, Kind, Tx};
use super::{now_ns, FsError, Stat, Vfs};

impl Vfs {
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
}
