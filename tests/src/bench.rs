//! What the benchmarks (`examples/bench_*`) share: the release binaries
//! beside the running example, a sidecar started on a temporary store with
//! extra config, a keep-alive connection to its signed API, and what
//! `/proc` tells of a process: memory, CPU time, children, and the
//! machine's load.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

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
/// `AGENTOS_BENCH_SIDECAR` names another sidecar binary to run instead.
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
    let sidecar = match std::env::var_os("AGENTOS_BENCH_SIDECAR") {
        // Another build, to compare side by side.
        Some(path) => PathBuf::from(path),
        None => binary("agentos-sidecar")?,
    };
    let mut child = tokio::process::Command::new(sidecar)
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

/// CPU time (user + system) from one `/proc/<pid>/stat`: the process's own
/// and that of its children it has already reaped.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcCpu {
    pub own: Duration,
    pub reaped_children: Duration,
}

fn clock_ticks() -> u64 {
    // SAFETY: sysconf reads a constant of the running system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).unwrap_or(100).max(1)
}

/// The fields of a `stat` line after the command name (which is in
/// parentheses and may hold spaces): `fields[0]` is the state, `[1]` the
/// parent's pid, `[11]`/`[12]` utime/stime, `[13]`/`[14]` cutime/cstime.
fn stat_fields(path: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(path).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

fn ticks(fields: &[String], a: usize, b: usize) -> Option<Duration> {
    let n = fields.get(a)?.parse::<u64>().ok()? + fields.get(b)?.parse::<u64>().ok()?;
    Some(Duration::from_micros(n * 1_000_000 / clock_ticks()))
}

/// The CPU time of `pid` (`/proc/self` for this process: pass `None`).
pub fn proc_cpu(pid: Option<u32>) -> Option<ProcCpu> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let fields = stat_fields(&path)?;
    Some(ProcCpu {
        own: ticks(&fields, 11, 12)?,
        reaped_children: ticks(&fields, 13, 14)?,
    })
}

/// The live processes whose parent is `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            stat_fields(&format!("/proc/{child}/stat")).and_then(|f| f.get(1)?.parse::<u32>().ok())
                == Some(pid)
        })
        .collect()
}

/// Time on CPU of each live thread of `pid` (its name and its time), from
/// `schedstat`, which counts nanoseconds: `stat` counts clock ticks, and a
/// process that ran for less than one tick reads as zero there.
pub fn threads_on_cpu(pid: u32) -> Vec<(String, Duration)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let schedstat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
            let ns: u64 = schedstat.split_whitespace().next()?.parse().ok()?;
            let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            Some((name.trim().to_owned(), Duration::from_nanos(ns)))
        })
        .collect()
}

/// Time on CPU of the live threads of `pid`, to the nanosecond (threads
/// that ended are not counted).
pub fn on_cpu(pid: u32) -> Duration {
    threads_on_cpu(pid).into_iter().map(|(_, t)| t).sum()
}

/// CPU time of a process (`stat`: every thread it ever had) and of all its
/// children: the live ones read from their own `schedstat` (a live child's
/// time is not yet in its parent's `cutime`, and each child's is too small
/// for clock ticks), plus those already reaped.
#[derive(Clone, Copy, Debug)]
pub struct TreeCpu {
    pub own: Duration,
    pub children: Duration,
    pub live_children: usize,
}

pub fn tree_cpu(pid: u32) -> Option<TreeCpu> {
    let parent = proc_cpu(Some(pid))?;
    let live = children_of(pid);
    let children = live.iter().map(|child| on_cpu(*child)).sum::<Duration>();
    Some(TreeCpu {
        own: parent.own,
        children: children + parent.reaped_children,
        live_children: live.len(),
    })
}

/// `/proc/loadavg`'s three averages, as printed there.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The `p` quantile (0..=1) of sorted values; zero when there are none.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// One keep-alive HTTP/1.1 connection to the signed API's `/api/message`.
pub struct ApiConnection {
    sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
}

impl ApiConnection {
    pub async fn open(address: &str) -> Result<ApiConnection, Error> {
        let stream = tokio::net::TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(ApiConnection { sender })
    }

    /// Posts a signed envelope; the answer's status and body.
    pub async fn post(&mut self, body: Vec<u8>) -> Result<(u16, bytes::Bytes), Error> {
        use http_body_util::BodyExt;
        let request = hyper::Request::post("/api/message")
            .header("host", "localhost")
            .header("content-type", "application/cbor")
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))?;
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}
