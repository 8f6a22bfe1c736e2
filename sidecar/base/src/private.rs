//! Files are private: the data directory is created 0700, the database and
//! its WAL and SHM are 0600 whatever the umask, a socket is only ever
//! replaced when the path really is a stale socket, and an exclusive lock
//! file refuses a second process on the same store (and is removed when the
//! process lets go).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of the data directory when this process creates it.
pub const DIR_MODE: u32 = 0o700;
/// Mode of the database, its WAL and SHM, and the lock file.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` and its missing parents with mode 0700. An existing
/// directory is left as it is (it may be shared, like `/tmp`).
///
/// Each directory made gets its mode set explicitly afterwards: the umask
/// is process-wide, and a socket bound on another thread narrows it for a
/// moment (to 0177, which would leave a directory without its search bit).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.as_os_str().is_empty() || dir.exists() {
        return Ok(());
    }
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    for made in missing.into_iter().rev() {
        match std::fs::DirBuilder::new().mode(DIR_MODE).create(made) {
            Ok(()) => {}
            // Made meanwhile by someone else: theirs to keep as it is.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
        std::fs::set_permissions(made, std::fs::Permissions::from_mode(DIR_MODE))?;
    }
    Ok(())
}

/// The database file and SQLite's companions beside it.
pub fn database_files(db: &Path) -> [PathBuf; 3] {
    let with = |suffix: &str| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [db.to_path_buf(), with("-wal"), with("-shm")]
}

/// Creates the database file 0600 if it is missing (SQLite then creates the
/// WAL and SHM with the same mode) and makes any existing one 0600.
///
/// An existing file is never opened here, only changed by path: closing
/// any descriptor of a file drops every POSIX lock this process holds on
/// it, SQLite's included, so opening and closing the database while a
/// connection of this process is open would let another process believe
/// it is the last one and checkpoint and delete the WAL that connection
/// still writes (its later commits lost).
pub fn prepare_database_file(db: &Path) -> std::io::Result<()> {
    if let Some(parent) = db.parent() {
        create_private_dir(parent)?;
    }
    match std::fs::symlink_metadata(db) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Missing, so no connection of this process has it open.
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(FILE_MODE)
                .open(db)
            {
                Ok(_) => {}
                // Made meanwhile: whoever made it prepares it.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    }
    restrict_database_files(db)
}

/// Makes the database and whichever of its WAL and SHM exist 0600.
pub fn restrict_database_files(db: &Path) -> std::io::Result<()> {
    for file in database_files(db) {
        match std::fs::set_permissions(&file, std::fs::Permissions::from_mode(FILE_MODE)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other?,
        }
    }
    Ok(())
}

/// Why a socket path could not be cleared for binding.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StaleSocketError {
    #[error("another process is serving this socket")]
    InUse,
    #[error("the path exists and is not a socket; refusing to replace it")]
    NotASocket,
    #[error("cannot remove the stale socket: {0}")]
    Remove(String),
}

/// Removes `path` when it is a socket nobody answers on; a missing path is
/// fine. Anything else at the path is left alone and refused.
pub fn remove_stale_socket(path: &Path) -> Result<(), StaleSocketError> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StaleSocketError::Remove(e.to_string())),
    };
    if !metadata.file_type().is_socket() {
        return Err(StaleSocketError::NotASocket);
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(StaleSocketError::InUse);
    }
    std::fs::remove_file(path).map_err(|e| StaleSocketError::Remove(e.to_string()))
}

/// Creates `path` holding `bytes`, mode 0600 whatever the umask, whole or
/// not at all: the bytes go to a private temporary file beside it (synced)
/// that is then hard-linked into place. An existing `path` is never
/// replaced: the link fails with `AlreadyExists` and the temporary file
/// goes.
pub fn create_private_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(format!(
        ".{}.{:016x}.tmp",
        std::process::id(),
        rand::random::<u64>()
    ));
    let temporary = path.with_file_name(name);
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&temporary)?;
        // The umask may have narrowed the mode; make it exact.
        file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
        std::io::Write::write_all(&mut file, bytes)?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(e);
    }
    let linked = std::fs::hard_link(&temporary, path);
    let _ = std::fs::remove_file(&temporary);
    linked?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if let Ok(dir) = std::fs::File::open(parent) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}

/// Binds a Unix socket of mode 0600 at `path` in a private directory,
/// replacing only a stale socket. The socket is created under umask 0177, so
/// there is no window in which others could connect.
pub fn bind_private_socket(path: &Path) -> Result<tokio::net::UnixListener, String> {
    if let Some(parent) = path.parent() {
        create_private_dir(parent).map_err(|e| e.to_string())?;
    }
    remove_stale_socket(path).map_err(|e| e.to_string())?;
    // SAFETY: umask(2) only swaps the process's file-creation mask.
    let old_umask = unsafe { libc::umask(0o177) };
    let bound = tokio::net::UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old_umask) };
    let listener = bound.map_err(|e| e.to_string())?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| e.to_string())?;
    Ok(listener)
}

/// An exclusive `flock` on `<path>.lock`, held while this value lives.
#[derive(Debug)]
pub struct StoreLock {
    _file: File,
    path: PathBuf,
}

/// Why the store lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{path} is held by another process: a second sidecar on the same store is refused")]
    Held { path: PathBuf },
    #[error("cannot open the lock file {path}: {message}")]
    Io { path: PathBuf, message: String },
}

impl LockError {
    pub fn code(&self) -> &'static str {
        match self {
            LockError::Held { .. } => "store_locked",
            LockError::Io { .. } => "store_lock_failed",
        }
    }
}

impl StoreLock {
    /// Takes the lock beside `path` (the database file, or the actor
    /// socket) without waiting.
    pub fn acquire(path: &Path) -> Result<StoreLock, LockError> {
        let mut name = path.as_os_str().to_owned();
        name.push(".lock");
        let lock_path = PathBuf::from(name);
        let io = |e: std::io::Error| LockError::Io {
            path: lock_path.clone(),
            message: e.to_string(),
        };
        if let Some(parent) = lock_path.parent() {
            create_private_dir(parent).map_err(io)?;
        }
        for _ in 0..LOCK_ATTEMPTS {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(FILE_MODE)
                .open(&lock_path)
                .map_err(io)?;
            // SAFETY: flock(2) on a descriptor we own; no memory is involved.
            let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if locked != 0 {
                let error = std::io::Error::last_os_error();
                return match error.raw_os_error() {
                    Some(libc::EWOULDBLOCK) => Err(LockError::Held { path: lock_path }),
                    _ => Err(io(error)),
                };
            }
            // The holder before us removes the file as it lets go: a lock
            // taken on a file that is no longer at the path guards nothing.
            if same_file(&file, &lock_path) {
                return Ok(StoreLock {
                    _file: file,
                    path: lock_path,
                });
            }
        }
        Err(io(std::io::Error::other(
            "the lock file kept being replaced while it was taken",
        )))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Opens and locks retried before giving up, when the lock file is
/// replaced each time between the two.
const LOCK_ATTEMPTS: usize = 8;

/// Whether `path` still names the file `file` has open.
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

impl Drop for StoreLock {
    /// The lock file goes while the lock is still held (its fields close it
    /// after this), so a stopped sidecar leaves nothing beside the store;
    /// that matters where the store's directory is another's, as an actor
    /// runtime's shared socket directory is. A waiter that opened the old
    /// file sees it is gone and opens the path again.
    fn drop(&mut self) {
        if same_file(&self._file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held by the test that forks and by those whose descriptors a forked
    /// child must not copy (a listener the child kept open would still
    /// answer after the test dropped it).
    static FORKING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn no_fork() -> std::sync::MutexGuard<'static, ()> {
        FORKING.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// While another thread binds a socket the process umask is 0177; a
    /// directory made then must still end up 0700, parents included. Run in
    /// a forked child so the umask change touches no other test.
    #[test]
    fn directories_are_0700_whatever_the_umask() {
        let _fork = no_fork();
        let dir = tempfile::tempdir().expect("temp dir");
        let leaf = dir.path().join("a/b/c");
        // SAFETY: the child only makes system calls and exits.
        let status = unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork");
            if pid == 0 {
                libc::umask(0o177);
                let code = i32::from(create_private_dir(&leaf).is_err());
                libc::_exit(code);
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            status
        };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        for made in ["a", "a/b", "a/b/c"] {
            let mode = std::fs::metadata(dir.path().join(made))
                .expect("made")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{made}");
        }
    }

    #[test]
    fn a_regular_file_at_a_socket_path_is_never_replaced() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.sock");
        std::fs::write(&path, "precious").expect("file");
        assert_eq!(
            remove_stale_socket(&path),
            Err(StaleSocketError::NotASocket)
        );
        assert_eq!(std::fs::read_to_string(&path).expect("kept"), "precious");
        assert_eq!(remove_stale_socket(&dir.path().join("missing")), Ok(()));
    }

    #[test]
    fn a_stale_socket_is_removed_and_a_live_one_refused() {
        let _fork = no_fork();
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.sock");
        let live = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        assert_eq!(remove_stale_socket(&path), Err(StaleSocketError::InUse));
        drop(live);
        assert_eq!(remove_stale_socket(&path), Ok(()));
        assert!(!path.exists());
    }

    #[test]
    fn the_store_lock_refuses_a_second_holder() {
        let _fork = no_fork();
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("vm.sqlite");
        let first = StoreLock::acquire(&db).expect("first");
        let second = StoreLock::acquire(&db).expect_err("second");
        assert_eq!(second.code(), "store_locked");
        assert!(second.to_string().contains("vm.sqlite.lock"), "{second}");
        drop(first);
        assert!(
            !dir.path().join("vm.sqlite.lock").exists(),
            "released, the lock file is removed"
        );
        let again = StoreLock::acquire(&db).expect("free again");
        assert!(again.path().exists());
    }

    /// A process that opened the lock file just before its holder removed
    /// it must not count a lock on that removed file: it takes the path's
    /// new file instead, and a third process is refused.
    #[test]
    fn a_lock_on_a_removed_lock_file_is_not_kept() {
        let _fork = no_fork();
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("vm.sqlite");
        let path = dir.path().join("vm.sqlite.lock");
        let first = StoreLock::acquire(&db).expect("first");
        // What a waiter holds after the holder's removal: the old file,
        // open, no longer at the path.
        let stale = File::open(&path).expect("open the lock file");
        drop(first);
        assert!(!same_file(&stale, &path));
        let second = StoreLock::acquire(&db).expect("second");
        assert!(same_file(&second._file, &path));
        assert_eq!(
            StoreLock::acquire(&db).expect_err("third").code(),
            "store_locked"
        );
    }
}
