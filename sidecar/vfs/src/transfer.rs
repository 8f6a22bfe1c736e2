//! Copying whole trees between the VFS and the host file system (`ctl fs
//! import` / `export`). Each file, directory and symlink is its own VFS
//! transaction, so an interrupted import leaves a prefix of the tree, never a
//! torn file. Host symlinks are copied as symlinks and never followed, and
//! names come from directory listings, so neither side can be led outside the
//! tree being copied.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::FsError;
use super::path::join;
use super::{FileKind, Vfs, DEFAULT_DIR_MODE};

/// What one import or export copied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeReport {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
}

fn host_error(path: &Path, e: std::io::Error) -> FsError {
    FsError::Host {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

fn child_path(parent: &str, name: &str) -> String {
    if parent == "/" {
        join(&[name])
    } else {
        format!("{parent}/{name}")
    }
}

impl Vfs {
    /// Copies the host directory `host` to the VFS directory `dest` (created
    /// with its parents if missing; existing files are replaced).
    pub async fn import_tree(&self, host: &Path, dest: &str) -> Result<TreeReport, FsError> {
        let mut report = TreeReport::default();
        self.mkdir_p(dest, DEFAULT_DIR_MODE).await?;
        report.dirs += 1;
        let mut stack: Vec<(PathBuf, String)> = vec![(host.to_owned(), dest.to_owned())];
        while let Some((host_dir, vfs_dir)) = stack.pop() {
            let mut entries = tokio::fs::read_dir(&host_dir)
                .await
                .map_err(|e| host_error(&host_dir, e))?;
            while let Some(entry) = entries
                .next_entry()
                .await
                .map_err(|e| host_error(&host_dir, e))?
            {
                let host_path = entry.path();
                let name = entry.file_name().into_string().map_err(|_| {
                    FsError::invalid(&host_path.display().to_string(), "name is not UTF-8")
                })?;
                let vfs_path = child_path(&vfs_dir, &name);
                let meta = tokio::fs::symlink_metadata(&host_path)
                    .await
                    .map_err(|e| host_error(&host_path, e))?;
                let mode = permission_bits(&meta);
                if meta.file_type().is_symlink() {
                    let target = tokio::fs::read_link(&host_path)
                        .await
                        .map_err(|e| host_error(&host_path, e))?;
                    let target = target
                        .into_os_string()
                        .into_string()
                        .map_err(|_| FsError::invalid(&vfs_path, "symlink target is not UTF-8"))?;
                    self.symlink(&target, &vfs_path).await?;
                    report.symlinks += 1;
                } else if meta.is_dir() {
                    match self.mkdir(&vfs_path, mode).await {
                        Ok(_) | Err(FsError::Exists { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    report.dirs += 1;
                    stack.push((host_path, vfs_path));
                } else if meta.is_file() {
                    if meta.len() > self.limits().max_file_bytes {
                        return Err(FsError::FileTooBig {
                            path: vfs_path,
                            size: meta.len(),
                            limit: self.limits().max_file_bytes,
                            setting: "limits.fs.maxFileBytes",
                        });
                    }
                    let data = tokio::fs::read(&host_path)
                        .await
                        .map_err(|e| host_error(&host_path, e))?;
                    self.write_file(&vfs_path, &data).await?;
                    self.chmod(&vfs_path, mode).await?;
                    report.files += 1;
                    report.bytes += data.len() as u64;
                }
                // Sockets, fifos and devices have no VFS counterpart.
            }
        }
        Ok(report)
    }

    /// Copies the VFS directory `src` to the host directory `host` (created if
    /// missing; existing host files with the same names are replaced).
    pub async fn export_tree(&self, src: &str, host: &Path) -> Result<TreeReport, FsError> {
        let mut report = TreeReport::default();
        let root = self.stat(src).await?;
        if !root.is_dir() {
            return Err(FsError::NotDir {
                path: src.to_owned(),
            });
        }
        tokio::fs::create_dir_all(host)
            .await
            .map_err(|e| host_error(host, e))?;
        report.dirs += 1;
        let mut stack: Vec<(String, PathBuf)> = vec![(src.to_owned(), host.to_owned())];
        while let Some((vfs_dir, host_dir)) = stack.pop() {
            for entry in self.readdir_all(&vfs_dir).await? {
                let vfs_path = child_path(&vfs_dir, &entry.name);
                let host_path = host_dir.join(&entry.name);
                match entry.stat.kind {
                    FileKind::Dir => {
                        match tokio::fs::create_dir(&host_path).await {
                            Ok(()) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                            Err(e) => return Err(host_error(&host_path, e)),
                        }
                        report.dirs += 1;
                        stack.push((vfs_path, host_path));
                    }
                    FileKind::File => {
                        let data = self.read_all(&vfs_path).await?;
                        tokio::fs::write(&host_path, &data)
                            .await
                            .map_err(|e| host_error(&host_path, e))?;
                        set_permission_bits(&host_path, entry.stat.mode).await?;
                        report.files += 1;
                        report.bytes += data.len() as u64;
                    }
                    FileKind::Symlink => {
                        let target = self.readlink(&vfs_path).await?;
                        let link = host_path.clone();
                        tokio::task::spawn_blocking(move || {
                            std::os::unix::fs::symlink(target, &link)
                        })
                        .await
                        .map_err(|e| FsError::Host {
                            path: host_path.display().to_string(),
                            message: e.to_string(),
                        })?
                        .map_err(|e| host_error(&host_path, e))?;
                        report.symlinks += 1;
                    }
                }
            }
        }
        Ok(report)
    }
}

fn permission_bits(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o7777
}

async fn set_permission_bits(path: &Path, mode: u32) -> Result<(), FsError> {
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .await
        .map_err(|e| host_error(path, e))
}
