//! The VFS's own settings: the mount policy as configured (`filesystem`)
//! and the bounds of the file system (`limits.fs`), validated here once so
//! the VFS takes its bounds only as [`ValidFsLimits`] and never re-checks
//! them.

use std::ops::Deref;

use serde::{Deserialize, Serialize};

const MIB: u64 = 1024 * 1024;

/// A setting refused, named by its path in the config.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidSetting {
    pub field: String,
    pub message: String,
}

impl InvalidSetting {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        InvalidSetting {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn code(&self) -> &'static str {
        "invalid_config"
    }
}

/// `filesystem`: the VM's mount policy as configured. The VFS normalises it
/// into its `VfsPolicy`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FilesystemConfig {
    /// Subtrees sessions may read and write; `["/"]` is the whole VM.
    pub roots: Vec<String>,
    /// Subtrees that refuse every mutation.
    #[serde(default)]
    pub read_only: Vec<String>,
}

impl Default for FilesystemConfig {
    fn default() -> Self {
        FilesystemConfig {
            roots: vec!["/".to_owned()],
            read_only: Vec::new(),
        }
    }
}

impl FilesystemConfig {
    /// Every path must be absolute and free of NUL (the VFS normalises the rest).
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let lists = [
            ("filesystem.roots", &self.roots),
            ("filesystem.readOnly", &self.read_only),
        ];
        for (field, paths) in lists {
            for (i, path) in paths.iter().enumerate() {
                if !path.starts_with('/') {
                    return Err(InvalidSetting::new(
                        format!("{field}[{i}]"),
                        "must be absolute",
                    ));
                }
                if path.contains('\0') {
                    return Err(InvalidSetting::new(
                        format!("{field}[{i}]"),
                        "must not contain NUL",
                    ));
                }
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct FsLimits {
    /// Sum of the sizes of all regular files.
    pub max_total_bytes: u64,
    /// Inodes of every kind, the root included.
    pub max_inodes: u64,
    /// Largest size of one regular file.
    pub max_file_bytes: u64,
    /// Size of the content-addressed chunks of files above the inline threshold.
    pub chunk_bytes: u64,
    /// Files up to this size keep their bytes in the inode row.
    pub inline_threshold_bytes: u64,
}

impl Default for FsLimits {
    fn default() -> Self {
        FsLimits {
            max_total_bytes: 8 * 1024 * MIB,
            max_inodes: 1_000_000,
            max_file_bytes: 1024 * MIB,
            chunk_bytes: 512 * 1024,
            inline_threshold_bytes: 64 * 1024,
        }
    }
}

/// Largest chunk: a chunk is one SQLite blob and one statement parameter.
pub const MAX_FS_CHUNK_BYTES: u64 = 16 * MIB;

/// `FsLimits` that passed `FsLimits::validate`: the only form the VFS accepts,
/// so its arithmetic (chunk sizes, signed counters) can rely on the bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidFsLimits(FsLimits);

impl Deref for ValidFsLimits {
    type Target = FsLimits;

    fn deref(&self) -> &FsLimits {
        &self.0
    }
}

impl FsLimits {
    /// Validates and wraps the limits for the VFS.
    pub fn validated(self) -> Result<ValidFsLimits, InvalidSetting> {
        self.validate()?;
        Ok(ValidFsLimits(self))
    }

    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let positive = [
            ("limits.fs.maxTotalBytes", self.max_total_bytes),
            ("limits.fs.maxInodes", self.max_inodes),
            ("limits.fs.maxFileBytes", self.max_file_bytes),
            ("limits.fs.chunkBytes", self.chunk_bytes),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(InvalidSetting::new(field, "must be greater than 0"));
            }
        }
        let signed = [
            ("limits.fs.maxTotalBytes", self.max_total_bytes),
            ("limits.fs.maxInodes", self.max_inodes),
            ("limits.fs.maxFileBytes", self.max_file_bytes),
        ];
        for (field, value) in signed {
            if value > i64::MAX as u64 {
                return Err(InvalidSetting::new(
                    field,
                    "must fit a signed 64-bit integer",
                ));
            }
        }
        if self.chunk_bytes > MAX_FS_CHUNK_BYTES {
            return Err(InvalidSetting::new(
                "limits.fs.chunkBytes",
                format!("must be at most {MAX_FS_CHUNK_BYTES}"),
            ));
        }
        if self.inline_threshold_bytes > self.chunk_bytes {
            return Err(InvalidSetting::new(
                "limits.fs.inlineThresholdBytes",
                "must not exceed limits.fs.chunkBytes",
            ));
        }
        Ok(())
    }
}
