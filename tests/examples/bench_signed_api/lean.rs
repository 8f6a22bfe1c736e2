//! A client WebSocket reduced to what the fan-out measures, and the two
//! things read from each frame: its kind and its `createdAt`.

use super::now_ms;
use agentos_tests::bench::Error;

#[derive(PartialEq)]
pub(super) enum FrameKind {
    Subscribed,
    Append,
    Error,
    Other,
}

/// A Seed event frame's `_`, which the server writes first.
pub(super) fn frame_kind(text: &[u8]) -> Result<FrameKind, Error> {
    let rest = text
        .strip_prefix(br#"{"_":""#)
        .ok_or_else(|| format!("not a Seed event: {}", String::from_utf8_lossy(text)))?;
    let kind = rest.split(|b| *b == b'"').next().unwrap_or_default();
    Ok(match kind {
        b"subscribed" => FrameKind::Subscribed,
        b"append" => FrameKind::Append,
        b"error" => FrameKind::Error,
        _ => FrameKind::Other,
    })
}

/// The `createdAt` of a frame: a key is the only place the text can hold
/// those bytes unescaped.
pub(super) fn created_at(text: &[u8]) -> Option<i64> {
    static KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(br#""createdAt":"#));
    let digits = &text[KEY.find(text)? + KEY.needle().len()..];
    let end = digits
        .iter()
        .position(|c| !c.is_ascii_digit() && *c != b'-')
        .unwrap_or(digits.len());
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// A client WebSocket reduced to what the fan-out needs: the upgrade, one
/// masked binary frame out, pongs, and unfragmented frames in.
pub(super) struct LeanSocket {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The last text frame, as `start..end` of `buf`.
    text: (usize, usize),
    /// When the last read returned, in Unix ms: every frame it brought
    /// arrived then, so the clock is read once per read, not per frame.
    pub(super) read_at_ms: i64,
}

impl LeanSocket {
    pub(super) async fn connect(address: &str, path: &str) -> Result<LeanSocket, Error> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut end = 0;
        let head = loop {
            let n = stream.read(&mut buf[end..]).await?;
            if n == 0 {
                return Err("the server closed the socket during the upgrade".into());
            }
            end += n;
            if let Some(at) = buf[..end].windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if end == buf.len() {
                return Err("an upgrade answer larger than the buffer".into());
            }
        };
        if !buf.starts_with(b"HTTP/1.1 101") {
            return Err(format!(
                "the upgrade was refused: {}",
                String::from_utf8_lossy(&buf[..head])
            )
            .into());
        }
        Ok(LeanSocket {
            stream,
            buf,
            start: head,
            end,
            text: (0, 0),
            read_at_ms: now_ms(),
        })
    }

    /// One masked frame with `opcode`.
    async fn send(&mut self, opcode: u8, payload: &[u8]) -> Result<(), Error> {
        use tokio::io::AsyncWriteExt;
        let mask = [0x5a, 0x17, 0xc3, 0x88];
        let mut frame = Vec::with_capacity(payload.len() + 14);
        frame.push(0x80 | opcode);
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n <= 0xffff => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream.write_all(&frame).await?;
        Ok(())
    }

    pub(super) async fn send_binary(&mut self, payload: &[u8]) -> Result<(), Error> {
        self.send(0x2, payload).await
    }

    /// The next text frame's bytes, unchecked (pings answered, binary
    /// frames skipped); `None` once the server closes.
    pub(super) async fn next_text(&mut self) -> Result<Option<&[u8]>, Error> {
        loop {
            let (opcode, payload) = self.next_frame().await?;
            match opcode {
                0x1 => {
                    self.text = payload;
                    return Ok(Some(&self.buf[payload.0..payload.1]));
                }
                0x8 => return Ok(None),
                0x9 => {
                    let ping = self.buf[payload.0..payload.1].to_vec();
                    self.send(0xA, &ping).await?;
                }
                0x0 => return Err("a fragmented frame".into()),
                _ => {}
            }
        }
    }

    pub(super) fn last_text(&self) -> &str {
        std::str::from_utf8(&self.buf[self.text.0..self.text.1]).unwrap_or("(not UTF-8)")
    }

    /// The next frame's opcode and payload (as a range of `buf`).
    async fn next_frame(&mut self) -> Result<(u8, (usize, usize)), Error> {
        loop {
            if let Some((opcode, fin, header, len)) = self.header()? {
                if self.end - self.start >= header + len {
                    if !fin {
                        return Err("a fragmented frame".into());
                    }
                    let payload = (self.start + header, self.start + header + len);
                    self.start += header + len;
                    return Ok((opcode, payload));
                }
                if header + len > self.buf.len() {
                    self.buf.resize(header + len, 0);
                }
            }
            self.fill().await?;
        }
    }

    /// The frame header at `start`, once whole: opcode, FIN, header length
    /// and payload length.
    fn header(&self) -> Result<Option<(u8, bool, usize, usize)>, Error> {
        let bytes = &self.buf[self.start..self.end];
        let [b0, b1, ..] = *bytes else {
            return Ok(None);
        };
        if b1 & 0x80 != 0 {
            return Err("the server masked a frame".into());
        }
        let (header, len) = match b1 & 0x7f {
            126 => match bytes.get(2..4) {
                Some(n) => (4, u16::from_be_bytes([n[0], n[1]]) as usize),
                None => return Ok(None),
            },
            127 => match bytes.get(2..10) {
                Some(n) => {
                    let mut be = [0u8; 8];
                    be.copy_from_slice(n);
                    (10, usize::try_from(u64::from_be_bytes(be))?)
                }
                None => return Ok(None),
            },
            n => (2, n as usize),
        };
        Ok(Some((b0 & 0x0f, b0 & 0x80 != 0, header, len)))
    }

    /// Reads more, first moving what is unread to the front.
    async fn fill(&mut self) -> Result<(), Error> {
        use tokio::io::AsyncReadExt;
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = self.stream.read(&mut self.buf[self.end..]).await?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        self.end += n;
        self.read_at_ms = now_ms();
        Ok(())
    }
}
