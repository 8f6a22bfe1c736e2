//! The file system's tables (`agentos_fs_*`): inodes, directory entries and
//! content-addressed blocks, one row each, so that every mutation costs the
//! same whatever the size of the tree.

use crate::migrate::Migration;

pub const MIGRATIONS: &[Migration] = &[];
