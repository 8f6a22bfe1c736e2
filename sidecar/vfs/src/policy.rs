//! The mount policy the composition root gives the file-system layer: which
//! subtrees a view may touch at all (`roots`, EACCES outside them) and which of
//! them are read-only (EROFS). A session's view narrows the VM's roots to its
//! cwd and additional directories; it can never widen them. Checks apply to
//! the path after symlinks are resolved, so a link cannot lead out of a root.
//! The config's `filesystem` section (`FilesystemConfig`) converts into one.

use super::error::FsError;
use super::path::{is_within, normalize};
use crate::FilesystemConfig;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VfsPolicy {
    /// Subtrees this view may read and write; `["/"]` is the whole VM.
    pub roots: Vec<String>,
    /// Subtrees that refuse every mutation.
    pub read_only: Vec<String>,
}

impl From<FilesystemConfig> for VfsPolicy {
    fn from(config: FilesystemConfig) -> Self {
        VfsPolicy {
            roots: config.roots,
            read_only: config.read_only,
        }
    }
}

impl Default for VfsPolicy {
    fn default() -> Self {
        VfsPolicy {
            roots: vec!["/".to_owned()],
            read_only: Vec::new(),
        }
    }
}

impl VfsPolicy {
    /// Normalises every path and drops duplicates.
    pub fn normalized(&self) -> Result<VfsPolicy, FsError> {
        let mut roots = Vec::with_capacity(self.roots.len());
        for root in &self.roots {
            let root = normalize(root)?;
            if !roots.contains(&root) {
                roots.push(root);
            }
        }
        let mut read_only = Vec::with_capacity(self.read_only.len());
        for path in &self.read_only {
            let path = normalize(path)?;
            if !read_only.contains(&path) {
                read_only.push(path);
            }
        }
        Ok(VfsPolicy { roots, read_only })
    }

    /// The root containing `path`, or EACCES.
    pub fn root_of(&self, path: &str) -> Result<&str, FsError> {
        self.roots
            .iter()
            .filter(|root| is_within(path, root))
            .max_by_key(|root| root.len())
            .map(String::as_str)
            .ok_or_else(|| FsError::Access {
                path: path.to_owned(),
            })
    }

    pub fn check_read(&self, path: &str) -> Result<(), FsError> {
        self.root_of(path).map(|_| ())
    }

    pub fn check_write(&self, path: &str) -> Result<(), FsError> {
        self.check_read(path)?;
        if self.read_only.iter().any(|ro| is_within(path, ro)) {
            return Err(FsError::ReadOnly {
                path: path.to_owned(),
            });
        }
        Ok(())
    }

    /// A narrower policy: each requested root must lie inside one of ours.
    pub fn narrowed(&self, roots: &[String]) -> Result<VfsPolicy, FsError> {
        let mut out = Vec::with_capacity(roots.len());
        for root in roots {
            let root = normalize(root)?;
            self.check_read(&root)?;
            if !out.contains(&root) {
                out.push(root);
            }
        }
        Ok(VfsPolicy {
            roots: out,
            read_only: self.read_only.clone(),
        })
    }
}
