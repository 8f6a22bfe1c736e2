//! The processes a trial starts and kills: the sidecar and, for `actor_uds`,
//! the reference socket server, each in its own process group so a SIGKILL
//! takes the whole group; starting waits for the `ready` line, stopping
//! drains the group and reports what did not go away.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use super::PATIENCE;

pub(super) struct Proc {
    pub(super) child: Child,
    pub(super) pid: i32,
}

pub(super) fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid of a process this driver started.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Processes of process group `pgid` that are still running (not zombies).
pub(super) fn live_group_members(pgid: i32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 3
            && fields[2].parse::<i32>().ok() == Some(pgid)
            && !matches!(fields[0], "Z" | "X")
        {
            n += 1;
        }
    }
    n
}

/// Waits until the process group of a stopped sidecar (its adapters) is
/// gone, so their prompt log is final; kills leftovers after a while.
pub(super) async fn drain_group(pgid: i32, notes: &mut Vec<String>) {
    for _ in 0..500 {
        if live_group_members(pgid) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    notes.push(format!(
        "adapters of process group {pgid} outlived their sidecar by 5 s; killed"
    ));
    signal(-pgid, libc::SIGKILL);
    for _ in 0..200 {
        if live_group_members(pgid) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(super) async fn start_ars(sidecar: &Path, db: &Path, socket: &Path) -> Result<Proc, String> {
    let mut child = Command::new(sidecar)
        .arg("ars-serve")
        .arg("--db")
        .arg(db)
        .arg("--socket")
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the socket server: {e}"))?;
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    let stderr = child
        .stderr
        .take()
        .ok_or("the socket server has no stderr pipe")?;
    let mut lines = BufReader::new(stderr).lines();
    let ready = tokio::time::timeout(PATIENCE, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with("serving ") {
                return Ok(());
            }
        }
        Err("the socket server exited before serving".to_owned())
    })
    .await
    .unwrap_or_else(|_| Err("the socket server did not come up".to_owned()));
    if let Err(e) = ready {
        signal(pid, libc::SIGKILL);
        let _ = child.wait().await;
        return Err(e);
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Proc { child, pid })
}

pub(super) async fn start_sidecar(
    sidecar: &Path,
    config: &Value,
    stderr: &Path,
) -> Result<Proc, String> {
    let err_file =
        std::fs::File::create(stderr).map_err(|e| format!("cannot create a log file: {e}"))?;
    let mut child = Command::new(sidecar)
        .args(["serve", "--config", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(err_file))
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the sidecar: {e}"))?;
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(config.to_string().as_bytes()).await;
    }
    let stdout = child
        .stdout
        .take()
        .ok_or("the sidecar has no stdout pipe")?;
    let mut lines = BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(PATIENCE, async {
        match lines.next_line().await {
            Ok(Some(line)) => match serde_json::from_str::<Value>(&line) {
                Ok(v) if v["event"] == "ready" => Ok(()),
                _ => Err(format!("unexpected first line: {line}")),
            },
            _ => Err("the sidecar exited before it was ready".to_owned()),
        }
    })
    .await
    .unwrap_or_else(|_| Err("the sidecar did not become ready".to_owned()));
    if let Err(e) = ready {
        signal(pid, libc::SIGKILL);
        let _ = child.wait().await;
        drain_group(pid, &mut Vec::new()).await;
        let tail = std::fs::read_to_string(stderr).unwrap_or_default();
        let tail: String = tail.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
        return Err(format!("{e}; stderr: {tail}"));
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Proc { child, pid })
}

/// SIGTERM, then SIGKILL if it does not stop; returns a note when it had to.
pub(super) async fn stop(proc: &mut Proc, what: &str) -> Option<String> {
    signal(proc.pid, libc::SIGTERM);
    match tokio::time::timeout(Duration::from_secs(15), proc.child.wait()).await {
        Ok(Ok(status)) if status.success() => None,
        Ok(Ok(status)) => Some(format!("{what} exited with {status} after SIGTERM")),
        _ => {
            signal(proc.pid, libc::SIGKILL);
            let _ = proc.child.wait().await;
            Some(format!("{what} ignored SIGTERM for 15 s; killed"))
        }
    }
}
