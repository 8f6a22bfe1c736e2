//! Crash atomicity on `sqlite_file`: this test binary re-executes itself as a
//! child that rewrites a large file (unaligned ranged writes over many chunks)
//! or replaces a file by rename, in a loop; the parent SIGKILLs it at a random
//! moment, reopens the database and checks that every file holds exactly one
//! version (old or new, never a mix) and that the tree, link counts, block
//! reference counts and usage counters are consistent.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agentos_schema::{migrate_all, SharedDatabase};
use agentos_storage::sqlite_file::SqliteFileDatabase;
use agentos_storage::SqliteLimits;
use agentos_vfs::{FsLimits, ValidFsLimits};
use agentos_vfs::{Vfs, VfsPolicy};
use rand::Rng;

const MODE_VAR: &str = "AGENTOS_VFS_CRASH_MODE";
const DB_VAR: &str = "AGENTOS_VFS_CRASH_DB";
const BIG: u64 = 3 * 1024 * 1024 + 4321;
const EDGE: u64 = 1000;
const ROUNDS: usize = 4;

fn limits() -> ValidFsLimits {
    FsLimits {
        chunk_bytes: 256 * 1024,
        ..FsLimits::default()
    }
    .validated()
    .expect("valid limits")
}

async fn open_db(path: &std::path::Path) -> SharedDatabase {
    let db = SqliteFileDatabase::open(path, &SqliteLimits::default()).expect("open sqlite_file");
    let db: SharedDatabase = Arc::new(db);
    migrate_all(db.as_ref()).await.expect("migrate");
    db
}

/// Version `k` of a file in rename mode: a header and a fill derived from `k`.
fn version(k: u64, len: usize) -> Vec<u8> {
    let mut v = vec![(k % 251) as u8; len];
    v[..8].copy_from_slice(&k.to_le_bytes());
    v
}

fn version_of(bytes: &[u8]) -> Option<u64> {
    let k = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    (bytes == version(k, bytes.len()).as_slice()).then_some(k)
}

/// The child's loop; runs only when the parent sets the environment.
#[tokio::test]
#[ignore = "child process entry point of the crash tests"]
async fn crash_child() {
    let (Ok(mode), Ok(db_path)) = (std::env::var(MODE_VAR), std::env::var(DB_VAR)) else {
        return;
    };
    let db = open_db(std::path::Path::new(&db_path)).await;
    let vfs = Vfs::open(db, limits(), VfsPolicy::default())
        .await
        .expect("open vfs");
    println!("running");
    let mut k: u64 = rand::thread_rng().gen_range(1..1_000_000);
    loop {
        k += 1;
        match mode.as_str() {
            "write" => {
                let fill = vec![(k % 251) as u8; (BIG - 2 * EDGE) as usize];
                vfs.write("/big", EDGE, &fill).await.expect("write");
            }
            "rename" => {
                let len = 200_000 + (k % 7) as usize * 100_000;
                vfs.write_file("/r/tmp", &version(k, len))
                    .await
                    .expect("write tmp");
                vfs.rename("/r/tmp", "/r/current").await.expect("rename");
            }
            other => panic!("unknown mode {other}"),
        }
    }
}

fn run_child_and_kill(mode: &str, db_path: &std::path::Path) {
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new(exe)
        .args(["--ignored", "--exact", "crash_child", "--nocapture"])
        .env(MODE_VAR, mode)
        .env(DB_VAR, db_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("running") => break,
            Some(Ok(_)) => continue,
            other => panic!("child ended before running: {other:?}"),
        }
    }
    let wait = rand::thread_rng().gen_range(50..600);
    std::thread::sleep(Duration::from_millis(wait));
    // `kill` is SIGKILL on Unix: no destructor, no rollback runs in the child.
    child.kill().expect("kill child");
    let status = child.wait().expect("wait child");
    assert!(!status.success(), "the child must have been killed");
}

async fn scalar(db: &SharedDatabase, sql: &str) -> i64 {
    db.query(sql, vec![])
        .await
        .expect("query")
        .scalar_i64()
        .expect("integer")
}

/// The invariants every committed state satisfies.
async fn assert_consistent(db: &SharedDatabase) {
    let checks = [
        (
            "inode count matches usage",
            "SELECT (SELECT count(*) FROM agentos_fs_inodes) - inode_count FROM agentos_fs_usage",
        ),
        (
            "file bytes match usage",
            "SELECT (SELECT coalesce(sum(size), 0) FROM agentos_fs_inodes WHERE kind = 'file') \
             - total_bytes FROM agentos_fs_usage",
        ),
        (
            "block refcounts match chunk references",
            "SELECT count(*) FROM agentos_fs_blocks b WHERE refcount <> \
             (SELECT count(*) FROM agentos_fs_file_chunks c WHERE c.block_key = b.block_key)",
        ),
        (
            "every chunk has its block",
            "SELECT count(*) FROM agentos_fs_file_chunks c WHERE NOT EXISTS \
             (SELECT 1 FROM agentos_fs_blocks b WHERE b.block_key = c.block_key)",
        ),
        (
            "every referenced block holds all its bytes",
            "SELECT count(*) FROM agentos_fs_blocks b WHERE refcount > 0 AND size <> \
             (SELECT coalesce(sum(length(content)), 0) FROM agentos_fs_block_parts p \
              WHERE p.block_key = b.block_key)",
        ),
        (
            "every entry names an inode",
            "SELECT count(*) FROM agentos_fs_dentries d WHERE NOT EXISTS \
             (SELECT 1 FROM agentos_fs_inodes i WHERE i.ino = d.ino)",
        ),
        (
            "file link counts match entries",
            "SELECT count(*) FROM agentos_fs_inodes i WHERE kind <> 'dir' AND nlink <> \
             (SELECT count(*) FROM agentos_fs_dentries d WHERE d.ino = i.ino)",
        ),
        (
            "no orphan inodes",
            "SELECT count(*) FROM agentos_fs_inodes i WHERE ino <> 1 AND NOT EXISTS \
             (SELECT 1 FROM agentos_fs_dentries d WHERE d.ino = i.ino)",
        ),
    ];
    for (what, sql) in checks {
        assert_eq!(scalar(db, sql).await, 0, "{what}");
    }
}

#[tokio::test]
async fn killed_large_write_leaves_old_or_new() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db_path = dir.path().join("vm.sqlite");
    {
        let db = open_db(&db_path).await;
        let vfs = Vfs::open(db, limits(), VfsPolicy::default())
            .await
            .expect("open");
        vfs.write_file("/big", &vec![0xEEu8; BIG as usize])
            .await
            .expect("seed");
    }
    let mut versions = std::collections::BTreeSet::new();
    for round in 0..ROUNDS {
        run_child_and_kill("write", &db_path);
        let db = open_db(&db_path).await;
        assert_consistent(&db).await;
        let vfs = Vfs::open(db, limits(), VfsPolicy::default())
            .await
            .expect("reopen");
        let bytes = vfs.read_all("/big").await.expect("read");
        assert_eq!(bytes.len() as u64, BIG, "round {round}");
        let (edge_a, rest) = bytes.split_at(EDGE as usize);
        let (middle, edge_b) = rest.split_at((BIG - 2 * EDGE) as usize);
        assert!(
            edge_a.iter().chain(edge_b).all(|b| *b == 0xEE),
            "edges untouched"
        );
        let first = middle[0];
        assert!(
            middle.iter().all(|b| *b == first),
            "round {round}: the file mixes two writes"
        );
        versions.insert(first);
    }
    assert!(
        versions.iter().any(|v| *v != 0xEE),
        "the child never committed a write, so nothing was tested"
    );
}

#[tokio::test]
async fn killed_rename_leaves_old_or_new() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db_path = dir.path().join("vm.sqlite");
    {
        let db = open_db(&db_path).await;
        let vfs = Vfs::open(db, limits(), VfsPolicy::default())
            .await
            .expect("open");
        vfs.mkdir("/r", 0o755).await.expect("dir");
        vfs.write_file("/r/current", &version(0, 100_000))
            .await
            .expect("seed");
    }
    let mut versions = std::collections::BTreeSet::new();
    for round in 0..ROUNDS {
        run_child_and_kill("rename", &db_path);
        let db = open_db(&db_path).await;
        assert_consistent(&db).await;
        let vfs = Vfs::open(db, limits(), VfsPolicy::default())
            .await
            .expect("reopen");
        let current = vfs.read_all("/r/current").await.expect("current exists");
        let k = version_of(&current);
        assert!(
            k.is_some(),
            "round {round}: /r/current is not one whole version"
        );
        versions.extend(k);
        match vfs.read_all("/r/tmp").await {
            Ok(tmp) => assert!(version_of(&tmp).is_some(), "round {round}: torn tmp"),
            Err(e) => assert_eq!(e.code().as_str(), "ENOENT"),
        }
        let names: Vec<String> = vfs
            .readdir_all("/r")
            .await
            .expect("list")
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert!(
            names.iter().all(|n| n == "current" || n == "tmp"),
            "{names:?}"
        );
    }
    assert!(
        versions.iter().any(|v| *v != 0),
        "the child never committed a rename, so nothing was tested"
    );
}
