//! What the benchmarks (`examples/bench_*`) share: the release binaries
//! beside the running example, a sidecar started on a temporary store with
//! extra config, and the process's memory from `/proc`.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The directory of the binaries: `target/<profile>/` above the example.
pub fn bin_dir() -> Result<PathBuf, Error> {
    let exe = std::env::current_exe()?;
    Ok(exe
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot locate the target directory")?
        .to_path_buf())
}

pub fn binary(name: &str) -> Result<PathBuf, Error> {
    let path = bin_dir()?.join(name);
    if !path.exists() {
        return Err(format!(
            "{} is missing: run `cargo build --release --bins` first",
            path.display()
        )
        .into());
    }
    Ok(path)
}

/// A sidecar serving a temporary SQLite store, with the fake agent as
/// `echo`; `ready` is its ready line.
pub struct Running {
    pub child: tokio::process::Child,
    pub socket: PathBuf,
    pub ready: Value,
    _dir: tempfile::TempDir,
}

/// Starts a sidecar; `extra` is merged into the top level of its config.
pub async fn start_sidecar(extra: Value) -> Result<Running, Error> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("sidecar.sock");
    let mut config = json!({
        "database": {"type": "sqlite_file", "path": dir.path().join("vm.sqlite")},
        "socket": socket,
        "agents": {"echo": {"command": binary("agentos-fake-agent")?}},
    });
    if let (Some(config), Value::Object(extra)) = (config.as_object_mut(), extra) {
        config.extend(extra);
    }
    let mut child = tokio::process::Command::new(binary("agentos-sidecar")?)
        .args(["serve", "--config", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    stdin.write_all(config.to_string().as_bytes()).await?;
    drop(stdin);
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let ready: Value = serde_json::from_str(&lines.next_line().await?.ok_or("it exited")?)?;
    if ready["event"] != "ready" {
        return Err(format!("unexpected first line {ready}").into());
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Running {
        child,
        socket,
        ready,
        _dir: dir,
    })
}

/// A `/proc/<pid>/status` size in KiB (`VmRSS:`, `VmHWM:`).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
