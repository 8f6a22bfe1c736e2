//! `ctl fs`: the VM's file system from the operator's shell, over the host
//! socket: list, read, write, remove, move, and whole-tree import/export with
//! a progress bar. Large files travel in bounded pieces so no frame comes near
//! the frame limit.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentos_protocol::host::methods;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use clap::Subcommand;
use serde_json::{json, Value};

use super::{ClientError, HostClient};

/// Bytes per `fs/read` or `fs/write` call.
const PIECE: usize = 4 << 20;

#[derive(Debug, Subcommand)]
pub enum FsCommand {
    /// List a directory.
    Ls { path: String },
    /// Print a file.
    Cat { path: String },
    /// Copy a local file into the VM.
    Put { local: PathBuf, remote: String },
    /// Copy a file out of the VM (`-` for standard output).
    Get { remote: String, local: PathBuf },
    /// Remove a file or, with -r, a directory tree.
    Rm {
        path: String,
        #[arg(short, long)]
        recursive: bool,
    },
    /// Rename or move.
    Mv { from: String, to: String },
    /// Create a directory (-p: with its parents).
    Mkdir {
        path: String,
        #[arg(short, long)]
        parents: bool,
    },
    /// Copy a local directory tree into the VM.
    Import { local: PathBuf, remote: String },
    /// Copy a directory tree out of the VM.
    Export { remote: String, local: PathBuf },
}

fn local_error(path: &Path, e: std::io::Error) -> ClientError {
    ClientError::Connect {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

async fn put(client: &HostClient, data: &[u8], remote: &str) -> Result<(), ClientError> {
    let mut pieces = data.chunks(PIECE);
    let first = pieces.next().unwrap_or_default();
    client
        .call(
            methods::FS_WRITE,
            json!({"path": remote, "data": BASE64.encode(first)}),
        )
        .await?;
    let mut offset = first.len();
    for piece in pieces {
        client
            .call(
                methods::FS_WRITE,
                json!({"path": remote, "data": BASE64.encode(piece), "offset": offset}),
            )
            .await?;
        offset += piece.len();
    }
    Ok(())
}

async fn get(client: &HostClient, remote: &str, out: &mut dyn Write) -> Result<u64, ClientError> {
    let mut offset = 0u64;
    loop {
        let v = client
            .call(
                methods::FS_READ,
                json!({"path": remote, "offset": offset, "length": PIECE}),
            )
            .await?;
        let data = BASE64
            .decode(v["data"].as_str().unwrap_or_default())
            .map_err(|e| ClientError::Connect {
                path: remote.to_owned(),
                message: format!("bad data from the sidecar: {e}"),
            })?;
        out.write_all(&data).map_err(|e| ClientError::Connect {
            path: remote.to_owned(),
            message: e.to_string(),
        })?;
        offset += data.len() as u64;
        if v["eof"] == json!(true) || data.is_empty() {
            return Ok(offset);
        }
    }
}

async fn list(client: &HostClient, path: &str) -> Result<Vec<Value>, ClientError> {
    let mut entries = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = client
            .call(
                methods::FS_READDIR,
                json!({"path": path, "cursor": cursor, "limit": 1000}),
            )
            .await?;
        entries.extend(page["entries"].as_array().cloned().unwrap_or_default());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(entries),
        }
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// A progress bar on standard error (only on a terminal).
struct Progress {
    verb: &'static str,
    files: u64,
    bytes: u64,
    done_files: u64,
    done_bytes: u64,
    tty: bool,
    last: Instant,
}

impl Progress {
    fn new(verb: &'static str, files: u64, bytes: u64) -> Progress {
        Progress {
            verb,
            files,
            bytes,
            done_files: 0,
            done_bytes: 0,
            tty: std::io::stderr().is_terminal(),
            last: Instant::now() - Duration::from_secs(1),
        }
    }

    fn advance(&mut self, bytes: u64) {
        self.done_files += 1;
        self.done_bytes += bytes;
        if self.tty
            && (self.last.elapsed() >= Duration::from_millis(100) || self.done_files == self.files)
        {
            self.last = Instant::now();
            let width = 30usize;
            let fraction = if self.bytes > 0 {
                self.done_bytes as f64 / self.bytes as f64
            } else if self.files > 0 {
                self.done_files as f64 / self.files as f64
            } else {
                1.0
            };
            let filled = ((fraction * width as f64) as usize).min(width);
            eprint!(
                "\r{} [{}{}] {}/{} files  {:.1}/{:.1} MiB",
                self.verb,
                "#".repeat(filled),
                ".".repeat(width - filled),
                self.done_files,
                self.files,
                self.done_bytes as f64 / 1048576.0,
                self.bytes as f64 / 1048576.0
            );
            let _ = std::io::stderr().flush();
        }
    }

    fn finish(&self) -> Value {
        if self.tty {
            eprintln!();
        }
        json!({"files": self.done_files, "bytes": self.done_bytes})
    }
}

/// A local tree: its directories, then its regular files with their sizes.
type LocalTree = (Vec<PathBuf>, Vec<(PathBuf, u64)>);

/// Local files and directories under `root`, directories first.
fn walk_local(root: &Path) -> std::io::Result<LocalTree> {
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let kind = entry.file_type()?;
            let path = entry.path();
            if kind.is_dir() {
                dirs.push(path.clone());
                stack.push(path);
            } else if kind.is_file() {
                files.push((path, entry.metadata()?.len()));
            } else {
                eprintln!(
                    "skipping {} (not a regular file or directory)",
                    path.display()
                );
            }
        }
    }
    Ok((dirs, files))
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

pub(super) async fn run(
    client: &HostClient,
    command: &FsCommand,
    json_mode: bool,
) -> Result<(), ClientError> {
    let done = |v: Value, human: String| {
        if json_mode {
            println!("{v}");
        } else if !human.is_empty() {
            println!("{human}");
        }
    };
    match command {
        FsCommand::Ls { path } => {
            let entries = list(client, path).await?;
            let lines: Vec<String> = entries
                .iter()
                .map(|e| {
                    let stat = &e["stat"];
                    let kind = match stat["kind"].as_str() {
                        Some("dir") => 'd',
                        Some("symlink") => 'l',
                        _ => '-',
                    };
                    format!(
                        "{kind} {:o} {:>12} {}",
                        stat["mode"].as_u64().unwrap_or(0) & 0o7777,
                        stat["size"].as_u64().unwrap_or(0),
                        e["name"].as_str().unwrap_or("?")
                    )
                })
                .collect();
            done(json!({"entries": entries}), lines.join("\n"));
        }
        FsCommand::Cat { path } => {
            let mut out = std::io::stdout().lock();
            get(client, path, &mut out).await?;
        }
        FsCommand::Put { local, remote } => {
            let data = std::fs::read(local).map_err(|e| local_error(local, e))?;
            put(client, &data, remote).await?;
            done(
                json!({"bytes": data.len()}),
                format!("{} bytes → {remote}", data.len()),
            );
        }
        FsCommand::Get { remote, local } => {
            let bytes = if local.as_os_str() == "-" {
                get(client, remote, &mut std::io::stdout().lock()).await?
            } else {
                let mut file = std::fs::File::create(local).map_err(|e| local_error(local, e))?;
                get(client, remote, &mut file).await?
            };
            if local.as_os_str() != "-" {
                done(
                    json!({"bytes": bytes}),
                    format!("{remote} → {} ({bytes} bytes)", local.display()),
                );
            }
        }
        FsCommand::Rm { path, recursive } => {
            client
                .call(
                    methods::FS_REMOVE,
                    json!({"path": path, "recursive": recursive}),
                )
                .await?;
            done(json!({}), format!("removed {path}"));
        }
        FsCommand::Mv { from, to } => {
            client
                .call(methods::FS_RENAME, json!({"from": from, "to": to}))
                .await?;
            done(json!({}), format!("{from} → {to}"));
        }
        FsCommand::Mkdir { path, parents } => {
            client
                .call(methods::FS_MKDIR, json!({"path": path, "parents": parents}))
                .await?;
            done(json!({}), String::new());
        }
        FsCommand::Import { local, remote } => {
            let (dirs, files) = walk_local(local).map_err(|e| local_error(local, e))?;
            let total: u64 = files.iter().map(|(_, n)| n).sum();
            let mut progress = Progress::new("import", files.len() as u64, total);
            client
                .call(methods::FS_MKDIR, json!({"path": remote, "parents": true}))
                .await?;
            for dir in &dirs {
                let target = join(remote, &relative(local, dir));
                client
                    .call(methods::FS_MKDIR, json!({"path": target, "parents": true}))
                    .await?;
            }
            for (file, len) in &files {
                let data = std::fs::read(file).map_err(|e| local_error(file, e))?;
                put(client, &data, &join(remote, &relative(local, file))).await?;
                progress.advance(*len);
            }
            let summary = progress.finish();
            done(
                summary,
                format!(
                    "imported {} files ({total} bytes) into {remote}",
                    files.len()
                ),
            );
        }
        FsCommand::Export { remote, local } => {
            // Walk the VM tree first so the bar knows the total.
            let mut dirs = vec![remote.clone()];
            let mut files: Vec<(String, u64)> = Vec::new();
            let mut i = 0;
            while i < dirs.len() {
                let dir = dirs[i].clone();
                i += 1;
                for entry in list(client, &dir).await? {
                    let name = entry["name"].as_str().unwrap_or_default();
                    let path = join(&dir, name);
                    match entry["stat"]["kind"].as_str() {
                        Some("dir") => dirs.push(path),
                        Some("file") => {
                            files.push((path, entry["stat"]["size"].as_u64().unwrap_or(0)))
                        }
                        _ => eprintln!("skipping {path} (not a regular file or directory)"),
                    }
                }
            }
            let total: u64 = files.iter().map(|(_, n)| n).sum();
            let mut progress = Progress::new("export", files.len() as u64, total);
            let base = remote.trim_end_matches('/');
            let local_path =
                |p: &str| local.join(p.strip_prefix(base).unwrap_or(p).trim_start_matches('/'));
            for dir in &dirs {
                let target = local_path(dir);
                std::fs::create_dir_all(&target).map_err(|e| local_error(&target, e))?;
            }
            for (file, len) in &files {
                let target = local_path(file);
                let mut out =
                    std::fs::File::create(&target).map_err(|e| local_error(&target, e))?;
                get(client, file, &mut out).await?;
                progress.advance(*len);
            }
            let summary = progress.finish();
            done(
                summary,
                format!(
                    "exported {} files ({total} bytes) to {}",
                    files.len(),
                    local.display()
                ),
            );
        }
    }
    Ok(())
}
