//! The file system's tables (`agentos_fs_*`): inodes, directory entries and
//! content-addressed blocks, one row each, so that every mutation costs the
//! same whatever the size of the tree.
//!
//! - `agentos_fs_inodes`: one row per inode. Small files keep their bytes in
//!   `inline_data` (always exactly `size` bytes); larger files keep
//!   `inline_data` NULL, record the `chunk_bytes` they were written with (so a
//!   changed setting never misreads old files) and own rows in
//!   `agentos_fs_file_chunks`. `generation`
//!   grows on every change of the row so writers can compare-and-set.
//! - `agentos_fs_dentries`: one row per name in a directory.
//! - `agentos_fs_file_chunks`: chunk `i` of a file covers bytes
//!   `[i * chunk, (i + 1) * chunk)`; a missing chunk, or bytes past the end of a
//!   short one, read as zeros (sparse files).
//! - `agentos_fs_blocks`: chunk contents keyed by their BLAKE3 hex digest and
//!   reference-counted; rows at refcount 0 are collected in bounded batches
//!   through the partial index. The bytes live in `agentos_fs_block_parts`,
//!   64 KiB per row, because SQLite materialises a whole blob to take a
//!   `substr` of it: a 4 KiB read then loads one part, not a whole chunk.
//! - `agentos_fs_usage`: the singleton counters checked by the limits, updated in
//!   the same transaction as every mutation so a limit check is O(1).
//!
//! The root directory is inode 1 and is created here. Its times come from
//! `julianday('now')` (millisecond precision, SQLite 3.0+) rather than
//! `unixepoch('subsec')` (3.42): the ladders run on the host's SQLite, which
//! may be as old as `MIN_SQLITE_VERSION`. Migration 1 only ever runs on a new
//! database (the runner records versions, not statement text), so this
//! spelling changes nothing for databases already migrated.

use crate::migrate::Migration;

pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    statements: &[
        "CREATE TABLE agentos_fs_inodes (
            ino INTEGER PRIMARY KEY CHECK (ino >= 1),
            kind TEXT NOT NULL CHECK (kind IN ('file', 'dir', 'symlink')),
            mode INTEGER NOT NULL CHECK (mode BETWEEN 0 AND 4095),
            uid INTEGER NOT NULL CHECK (uid >= 0),
            gid INTEGER NOT NULL CHECK (gid >= 0),
            size INTEGER NOT NULL CHECK (size >= 0),
            nlink INTEGER NOT NULL CHECK (nlink >= 0),
            atime_ns INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            ctime_ns INTEGER NOT NULL,
            birthtime_ns INTEGER NOT NULL,
            symlink_target TEXT,
            inline_data BLOB,
            chunk_bytes INTEGER NOT NULL DEFAULT 0 CHECK (chunk_bytes >= 0),
            generation INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
            CHECK ((kind = 'symlink') = (symlink_target IS NOT NULL)),
            CHECK (inline_data IS NULL OR (kind = 'file' AND length(inline_data) = size)),
            CHECK (kind <> 'dir' OR size = 0),
            CHECK ((kind = 'file' AND inline_data IS NULL) = (chunk_bytes > 0))
        ) STRICT",
        "CREATE TABLE agentos_fs_dentries (
            parent_ino INTEGER NOT NULL,
            name TEXT NOT NULL CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 255
                                      AND name NOT IN ('.', '..')
                                      AND instr(name, '/') = 0),
            ino INTEGER NOT NULL CHECK (ino >= 2),
            PRIMARY KEY (parent_ino, name)
        ) STRICT, WITHOUT ROWID",
        "CREATE TABLE agentos_fs_file_chunks (
            ino INTEGER NOT NULL,
            chunk_index INTEGER NOT NULL CHECK (chunk_index >= 0),
            block_key TEXT NOT NULL CHECK (length(block_key) = 64),
            PRIMARY KEY (ino, chunk_index)
        ) STRICT, WITHOUT ROWID",
        "CREATE TABLE agentos_fs_blocks (
            block_key TEXT PRIMARY KEY CHECK (length(block_key) = 64),
            size INTEGER NOT NULL CHECK (size >= 0),
            refcount INTEGER NOT NULL CHECK (refcount >= 0)
        ) STRICT",
        "CREATE TABLE agentos_fs_block_parts (
            block_key TEXT NOT NULL,
            part_index INTEGER NOT NULL CHECK (part_index >= 0),
            content BLOB NOT NULL,
            PRIMARY KEY (block_key, part_index)
        ) STRICT",
        "CREATE INDEX agentos_fs_blocks_unreferenced ON agentos_fs_blocks (block_key)
            WHERE refcount = 0",
        "CREATE TABLE agentos_fs_usage (
            singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
            total_bytes INTEGER NOT NULL CHECK (total_bytes >= 0),
            inode_count INTEGER NOT NULL CHECK (inode_count >= 0)
        ) STRICT",
        "INSERT INTO agentos_fs_inodes
            (ino, kind, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, birthtime_ns)
         VALUES (1, 'dir', 493, 0, 0, 0, 2,
            CAST((julianday('now') - 2440587.5) * 86400000000000 AS INTEGER),
            CAST((julianday('now') - 2440587.5) * 86400000000000 AS INTEGER),
            CAST((julianday('now') - 2440587.5) * 86400000000000 AS INTEGER),
            CAST((julianday('now') - 2440587.5) * 86400000000000 AS INTEGER))",
        "INSERT INTO agentos_fs_usage (singleton, total_bytes, inode_count) VALUES (1, 0, 1)",
    ],
}];
