//! A minimal HTTP/1.1 client over TCP or a Unix socket for the end-to-end
//! tests of the signed API: one request per connection (`Connection:
//! close`), the whole answer read back. Written small on purpose so the
//! tests exercise the server's bytes, not a client library's conveniences.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Where the API listens.
#[derive(Clone, Debug)]
pub enum Target {
    Tcp(String),
    Unix(PathBuf),
}

impl Target {
    /// From the ready line's `http` value (`host:port` or `unix:/path`).
    pub fn from_ready(address: &str) -> Target {
        match address.strip_prefix("unix:") {
            Some(path) => Target::Unix(path.into()),
            None => Target::Tcp(address.to_owned()),
        }
    }
}

/// An answer: status, headers (names lower-case) and body.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

/// Sends one request and reads the whole answer.
pub async fn request(
    target: &Target,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Reply> {
    match target {
        Target::Tcp(addr) => {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            exchange(stream, method, path, headers, body).await
        }
        Target::Unix(path_) => {
            let stream = tokio::net::UnixStream::connect(path_).await?;
            exchange(stream, method, path, headers, body).await
        }
    }
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Reply> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    // A server may answer (413) before it reads the whole body.
    let _ = stream.write_all(body).await;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    parse(&raw)
}

fn bad(message: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message.to_owned())
}

fn parse(raw: &[u8]) -> std::io::Result<Reply> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|_| bad("head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or_else(|| bad("no status line"))?;
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let mut headers = BTreeMap::new();
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let rest = &raw[split + 4..];
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Ok(Reply {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad("bad chunk size line"))?;
        let size_text = std::str::from_utf8(&rest[..end]).map_err(|_| bad("bad chunk size"))?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| bad("bad chunk size"))?;
        rest = &rest[end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            return Err(bad("short chunk"));
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}
