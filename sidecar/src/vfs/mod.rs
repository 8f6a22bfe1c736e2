//! The VFS: a POSIX-like file system stored as rows in the shared database.
