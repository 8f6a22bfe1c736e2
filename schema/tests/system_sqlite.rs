//! Every owner's ladder, run statement by statement on the system's SQLite
//! through python3's `sqlite3` module: a library older than the bundled one
//! (Debian 12 ships 3.40.1), as a host's may be under `actor_uds`. The
//! sidecar accepts any SQLite from `MIN_SQLITE_VERSION` on, so the ladders
//! must not use anything newer than what the system library offers.

use std::io::Write;
use std::process::{Command, Stdio};

use agentos_schema::{Owner, MIN_SQLITE_VERSION};

/// Reads NUL-separated statements from stdin, runs them in order on a new
/// database, then prints the library's version and the root inode's atime.
const RUNNER: &str = r#"
import sqlite3, sys
statements = sys.stdin.buffer.read().decode("utf-8").split("\0")
db = sqlite3.connect(":memory:", isolation_level=None)
db.execute("PRAGMA foreign_keys = ON")
for index, sql in enumerate(statements):
    try:
        db.execute(sql)
    except sqlite3.Error as error:
        sys.stderr.write("statement %d failed: %s\n%s\n" % (index, error, sql))
        sys.exit(1)
print(sqlite3.sqlite_version)
print(db.execute("SELECT atime_ns FROM agentos_fs_inodes WHERE ino = 1").fetchone()[0])
"#;

#[test]
fn every_ladder_runs_on_the_system_sqlite() {
    let statements: Vec<&str> = Owner::ALL
        .iter()
        .flat_map(|owner| owner.ladder())
        .flat_map(|migration| migration.statements.iter().copied())
        .collect();
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(RUNNER)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is required (scripts/install-peers makes sure of it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(statements.join("\0").as_bytes())
        .expect("write statements");
    let output = child.wait_with_output().expect("python3 ran");
    assert!(
        output.status.success(),
        "a ladder failed on the system SQLite: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut lines = stdout.lines();
    let version = lines.next().expect("version line");
    let parts: Vec<u32> = version.split('.').filter_map(|p| p.parse().ok()).collect();
    assert!(
        parts.len() >= 3 && (parts[0], parts[1], parts[2]) >= MIN_SQLITE_VERSION,
        "the system SQLite {version} is below the supported minimum"
    );
    // The root's times are now, in nanoseconds since the epoch (after 2020).
    let atime: i64 = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .expect("root atime");
    assert!(atime > 1_577_836_800_000_000_000, "root atime {atime}");
    eprintln!("ladders ran on system SQLite {version}");
}
