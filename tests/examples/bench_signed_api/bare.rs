//! The bare fan-out: the least a server can do to send the fan-out's
//! bytes, run as a process of its own beside the sidecar's figures. It
//! accepts the same upgrades, answers each subscriber's first frame with
//! `subscribed`, and on each burst renders `FANOUT_EVENTS + 1` frames
//! shaped and sized as the sidecar's `append` of a flooded
//! `tool_call_update`, stamped as rendered, once for all sockets. A
//! socket's task writes what was published since its last write in one
//! `writev`, as the sidecar's writers do, on a runtime with a worker per
//! core, as the sidecar's HTTP door has. Nothing is stored, checked or
//! queued per socket: what it costs the machine to carry the bytes to the
//! same clients is the ceiling the sidecar's fan-out is read against.

use std::io::IoSlice;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::{now_ms, FANOUT_EVENTS};
use agentos_tests::bench::Error;

/// The argument that makes the bench this server.
pub(super) const ROLE: &str = "bare-fan-out";

/// The session id the frames name (any 36 characters; the sidecar's are
/// UUIDs).
const SESSION: &str = "4c9bfc85-8326-41d1-8e61-b889435f991d";

/// The bare fan-out as the bench drives it: a burst per line on its stdin.
pub(super) struct Bare {
    pub(super) address: String,
    pub(super) pid: u32,
    /// Held so the server runs as long as this does (killed on drop).
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
}

impl Bare {
    /// Starts this bench again as the bare server and reads its address.
    pub(super) async fn start() -> Result<Bare, Error> {
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .arg(ROLE)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let address = BufReader::new(stdout)
            .lines()
            .next_line()
            .await?
            .ok_or("the bare fan-out ended before its address")?;
        let pid = child.id().ok_or("no pid")?;
        Ok(Bare {
            address,
            pid,
            _child: child,
            stdin,
        })
    }

    pub(super) async fn burst(&mut self) -> Result<(), Error> {
        self.stdin.write_all(b"burst\n").await?;
        self.stdin.flush().await?;
        Ok(())
    }
}

/// One event's whole frame (header and payload), as the sidecar renders a
/// flooded tool call update.
fn frame(seq: u64, i: u64) -> Bytes {
    let filler = "f".repeat(160);
    let payload = format!(
        r#"{{"_":"append","key":"sessions/{SESSION}","event":{{"id":"{SESSION}:{seq}","sessionId":"{SESSION}","seq":{seq},"event":{{"actor":"agent","content":[{{"content":{{"text":"{i:08} {filler}","type":"text"}},"type":"content"}}],"status":"in_progress","toolCallId":"flood","type":"tool_call_update"}},"createdAt":{}}}}}"#,
        now_ms()
    );
    let mut frame = header(payload.len());
    frame.extend_from_slice(payload.as_bytes());
    frame.into()
}

/// An unmasked text frame's header for `len` payload bytes.
fn header(len: usize) -> Vec<u8> {
    let mut head = vec![0x81];
    if len < 126 {
        head.push(len as u8);
    } else if let Ok(short) = u16::try_from(len) {
        head.push(126);
        head.extend_from_slice(&short.to_be_bytes());
    } else {
        head.push(127);
        head.extend_from_slice(&(len as u64).to_be_bytes());
    }
    head
}

/// Every frame published so far, each shared by every socket (a clone is a
/// reference count); their count is watched.
type Published = Arc<Mutex<Vec<Bytes>>>;

/// The server's process: the address on stdout, then a burst per stdin
/// line, until stdin closes.
pub(super) fn serve() -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get()))
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        println!("{}", listener.local_addr()?);
        let published: Published = Arc::default();
        let (count_tx, count_rx) = watch::channel(0usize);
        tokio::spawn({
            let published = published.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(socket(stream, published.clone(), count_rx.clone()));
                }
            }
        });
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        let mut seq = 0u64;
        while lines.next_line().await?.is_some() {
            for i in 0..=FANOUT_EVENTS {
                seq += 1;
                let frame = frame(seq, i);
                let count = {
                    let mut frames = published.lock().unwrap_or_else(PoisonError::into_inner);
                    frames.push(frame);
                    frames.len()
                };
                count_tx.send_replace(count);
            }
        }
        Ok(())
    })
}

/// One subscriber's socket: the upgrade, its first frame answered, then
/// what is published, written as it comes.
async fn socket(
    mut stream: TcpStream,
    published: Published,
    mut count: watch::Receiver<usize>,
) -> Result<(), Error> {
    stream.set_nodelay(true)?;
    let mut buf = vec![0u8; 16 * 1024];
    let mut end = 0;
    let head = loop {
        let n = stream.read(&mut buf[end..]).await?;
        if n == 0 {
            return Ok(());
        }
        end += n;
        if let Some(at) = buf[..end].windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if end == buf.len() {
            return Err("an upgrade request larger than the buffer".into());
        }
    };
    stream
        .write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
              Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
        )
        .await?;
    // The client's one masked frame: its header, mask and payload.
    let mut have = buf[head..end].to_vec();
    while !whole_client_frame(&have)? {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        have.extend_from_slice(&buf[..n]);
    }
    let subscribed = br#"{"_":"subscribed","key":"sessions/bare"}"#;
    let mut first = header(subscribed.len());
    first.extend_from_slice(subscribed);
    stream.write_all(&first).await?;
    let mut sent = *count.borrow_and_update();
    while count.changed().await.is_ok() {
        let upto = *count.borrow_and_update();
        let batch: Vec<Bytes> =
            published.lock().unwrap_or_else(PoisonError::into_inner)[sent..upto].to_vec();
        sent = upto;
        write_all(&mut stream, &batch).await?;
    }
    Ok(())
}

/// Whether `bytes` begin with a whole masked client frame (of at most
/// 64 KiB: the subscribe envelope).
fn whole_client_frame(bytes: &[u8]) -> Result<bool, Error> {
    let [_, b1, rest @ ..] = bytes else {
        return Ok(false);
    };
    let (extended, len) = match b1 & 0x7f {
        127 => return Err("a subscribe frame too large".into()),
        126 => match rest {
            [a, b, ..] => (2, usize::from(u16::from_be_bytes([*a, *b]))),
            _ => return Ok(false),
        },
        n => (0, usize::from(n)),
    };
    Ok(bytes.len() >= 2 + extended + 4 + len)
}

/// Writes a batch of whole frames with vectored writes of at most 1,024
/// slices.
async fn write_all(stream: &mut TcpStream, batch: &[Bytes]) -> Result<(), Error> {
    let mut parts: Vec<&[u8]> = batch.iter().map(Bytes::as_ref).collect();
    let mut at = 0;
    while at < parts.len() {
        let slices: Vec<IoSlice<'_>> = parts[at..(at + 1024).min(parts.len())]
            .iter()
            .map(|part| IoSlice::new(part))
            .collect();
        let mut n = stream.write_vectored(&slices).await?;
        if n == 0 {
            return Err("the socket took nothing".into());
        }
        while n > 0 {
            let part = parts[at];
            if n >= part.len() {
                n -= part.len();
                at += 1;
            } else {
                parts[at] = &part[n..];
                n = 0;
            }
        }
    }
    Ok(())
}
