//! The socket's bytes, below the frames the rest of this module deals in:
//! the server's side of RFC 6455 framing, written straight from the
//! rendered frames with vectored writes, and the read half handed to
//! tungstenite, which decodes and checks what the client sends.
//!
//! A durable event's frame is one shared buffer for every socket
//! subscribed to its session, header included ([`Framed`]), as is a
//! session's new state. Writing it through a general WebSocket sink copied
//! it into each socket's own buffer first; here each socket writes a batch
//! as one `writev` of those shared frames (and, for a frame rendered for
//! the socket alone, a small header and its payload), so the only copy is
//! the kernel's, and a socket holds no write buffer of its own between
//! batches.
//!
//! Server frames are never masked, fragmented or compressed (no extension
//! is negotiated). Control frames (ping, pong, close) carry at most 125
//! bytes, as the protocol requires.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

pub(super) const OP_TEXT: u8 = 0x1;
pub(super) const OP_CLOSE: u8 = 0x8;
pub(super) const OP_PING: u8 = 0x9;
pub(super) const OP_PONG: u8 = 0xA;

/// The most payload a control frame carries.
const MAX_CONTROL_PAYLOAD: usize = 125;
/// The most slices one `writev` is handed (Linux's `IOV_MAX`).
const MAX_SLICES: usize = 1024;

/// A frame's header: FIN, the opcode and the payload length, unmasked.
fn header(opcode: u8, len: usize) -> ([u8; 10], u8) {
    let mut head = [0u8; 10];
    head[0] = 0x80 | opcode;
    let used = if len < 126 {
        head[1] = len as u8;
        2
    } else if let Ok(short) = u16::try_from(len) {
        head[1] = 126;
        head[2..4].copy_from_slice(&short.to_be_bytes());
        4
    } else {
        head[1] = 127;
        head[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    };
    (head, used)
}

/// A text frame with its header, in one buffer shared by every socket it
/// goes to: no socket frames it again, and a write hands it to the kernel
/// as one slice.
#[derive(Clone, Debug)]
pub(super) struct Framed(Bytes);

impl Framed {
    pub(super) fn text(payload: &str) -> Framed {
        let (head, used) = header(OP_TEXT, payload.len());
        let mut bytes = Vec::with_capacity(usize::from(used) + payload.len());
        bytes.extend_from_slice(&head[..usize::from(used)]);
        bytes.extend_from_slice(payload.as_bytes());
        Framed(bytes.into())
    }

    /// The frame's text (its payload), as [`Framed::text`] was given it.
    #[cfg(test)]
    pub(super) fn payload(&self) -> &str {
        let at = match self.0[1] & 0x7F {
            126 => 4,
            127 => 10,
            _ => 2,
        };
        std::str::from_utf8(&self.0[at..]).unwrap_or_default()
    }

    /// The bytes on the wire.
    pub(super) fn bytes(&self) -> &Bytes {
        &self.0
    }
}

/// One frame of a batch: its header and its payload.
struct Frame {
    head: [u8; 10],
    head_len: u8,
    payload: Bytes,
}

impl Frame {
    fn new(opcode: u8, payload: Bytes) -> Frame {
        let (head, head_len) = header(opcode, payload.len());
        Frame {
            head,
            head_len,
            payload,
        }
    }

    fn head(&self) -> &[u8] {
        &self.head[..usize::from(self.head_len)]
    }

    fn len(&self) -> usize {
        usize::from(self.head_len) + self.payload.len()
    }

    /// What is left of the frame from byte `at` on, as at most two slices.
    fn rest(&self, at: usize) -> [&[u8]; 2] {
        let head = self.head();
        if at < head.len() {
            [&head[at..], &self.payload]
        } else {
            [&[], &self.payload[at - head.len()..]]
        }
    }
}

/// The frames waiting to be written and how far the write got, kept
/// across calls: a write cut short (the socket closing while a client
/// does not read) leaves the position of the frame it was in, so that
/// frame can be finished before the close frame and the stream stays
/// well formed.
pub(super) struct Wire<W> {
    io: W,
    frames: Vec<Frame>,
    /// The first frame not wholly written, and the bytes of it written.
    next: usize,
    written: usize,
}

/// Frames a batch keeps room for once written; a larger batch's list is
/// given back, so an idle socket holds no more than this.
pub(super) const KEPT_FRAMES: usize = 64;

impl<W: AsyncWrite + Unpin> Wire<W> {
    pub(super) fn new(io: W) -> Wire<W> {
        Wire {
            io,
            frames: Vec::new(),
            next: 0,
            written: 0,
        }
    }

    /// Adds a text frame to the batch.
    pub(super) fn text(&mut self, text: impl Into<Bytes>) {
        self.frames.push(Frame::new(OP_TEXT, text.into()));
    }

    /// Adds a frame already framed.
    pub(super) fn framed(&mut self, frame: Framed) {
        self.frames.push(Frame {
            head: [0; 10],
            head_len: 0,
            payload: frame.0,
        });
    }

    /// Adds a control frame; a payload beyond 125 bytes is cut to them.
    pub(super) fn control(&mut self, opcode: u8, mut payload: Bytes) {
        payload.truncate(MAX_CONTROL_PAYLOAD);
        self.frames.push(Frame::new(opcode, payload));
    }

    /// Frames in the batch, not yet wholly written.
    pub(super) fn pending(&self) -> usize {
        self.frames.len() - self.next
    }

    /// Writes the batch. Cancel safe: a write either happened and is
    /// counted, or did not, so a later call (or [`Wire::close`]) goes on
    /// from where this one stopped.
    pub(super) async fn send(&mut self) -> io::Result<()> {
        while self.next < self.frames.len() {
            let n = {
                let mut slices: Vec<IoSlice<'_>> =
                    Vec::with_capacity((2 * (self.frames.len() - self.next)).min(MAX_SLICES));
                let mut at = self.written;
                for frame in &self.frames[self.next..] {
                    if slices.len() + 2 > MAX_SLICES {
                        break;
                    }
                    for part in frame.rest(at) {
                        if !part.is_empty() {
                            slices.push(IoSlice::new(part));
                        }
                    }
                    at = 0;
                }
                self.io.write_vectored(&slices).await?
            };
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            self.advance(n);
        }
        self.frames.clear();
        if self.frames.capacity() > KEPT_FRAMES {
            self.frames = Vec::new();
        }
        self.next = 0;
        self.written = 0;
        self.io.flush().await
    }

    /// Counts `n` more bytes written.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(frame) = self.frames.get(self.next) else {
                return;
            };
            let left = frame.len() - self.written;
            if n < left {
                self.written += n;
                return;
            }
            n -= left;
            self.next += 1;
            self.written = 0;
        }
    }

    /// Ends the stream: drops the frames not begun, finishes the one a cut
    /// write left half written, then sends a close frame with `code` and
    /// `reason` (cut to fit a control frame, on a character boundary).
    pub(super) async fn close(&mut self, code: u16, reason: &str) -> io::Result<()> {
        if self.written > 0 {
            self.frames.truncate(self.next + 1);
        } else {
            self.frames.truncate(self.next);
        }
        let mut payload = Vec::with_capacity(2 + reason.len().min(MAX_CONTROL_PAYLOAD - 2));
        payload.extend_from_slice(&code.to_be_bytes());
        let mut end = reason.len().min(MAX_CONTROL_PAYLOAD - 2);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        payload.extend_from_slice(&reason.as_bytes()[..end]);
        self.frames.push(Frame::new(OP_CLOSE, payload.into()));
        self.send().await
    }
}

/// The read half of an upgraded connection, as the stream tungstenite
/// decodes client frames from. Its writes go nowhere: tungstenite queues a
/// pong for each ping and a reply to a close, and both are the writer's to
/// send here (the connection answers a ping through the socket's outbox,
/// and the close through [`Wire::close`]), in order with everything else
/// the socket sends.
pub(super) struct ReadOnly<R>(pub R);

impl<R: AsyncRead + Unpin> AsyncRead for ReadOnly<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<R: Unpin> AsyncWrite for ReadOnly<R> {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// Decodes unmasked server frames: (opcode, payload) each.
    fn decode(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            assert_eq!(bytes[0] & 0xF0, 0x80, "FIN set, no RSV bits");
            assert_eq!(bytes[1] & 0x80, 0, "not masked");
            let (len, at) = match bytes[1] & 0x7F {
                126 => (u16::from_be_bytes([bytes[2], bytes[3]]) as usize, 4),
                127 => {
                    let mut be = [0u8; 8];
                    be.copy_from_slice(&bytes[2..10]);
                    (u64::from_be_bytes(be) as usize, 10)
                }
                n => (n as usize, 2),
            };
            out.push((bytes[0] & 0x0F, bytes[at..at + len].to_vec()));
            bytes = &bytes[at + len..];
        }
        out
    }

    #[test]
    fn lengths_take_the_shortest_header() {
        for (len, used, marker) in [
            (0, 2, 0),
            (125, 2, 125),
            (126, 4, 126),
            (65_535, 4, 126),
            (65_536, 10, 127),
        ] {
            let (head, n) = header(OP_TEXT, len);
            assert_eq!(usize::from(n), used, "{len}");
            assert_eq!(head[0], 0x81);
            assert_eq!(head[1], if len < 126 { len as u8 } else { marker });
        }
    }

    #[tokio::test]
    async fn a_batch_arrives_as_the_frames_it_was_given() {
        let (client, server) = tokio::io::duplex(1 << 20);
        let mut wire = Wire::new(server);
        let big = "b".repeat(70_000);
        wire.text("hello");
        wire.control(OP_PING, Bytes::new());
        wire.text(big.clone());
        wire.control(OP_PONG, Bytes::from(vec![7u8; 200]));
        wire.text("x".repeat(300));
        // Frames framed once, of each header length.
        for len in [5, 300, 70_000] {
            let framed = Framed::text(&"f".repeat(len));
            assert_eq!(framed.payload().len(), len);
            wire.framed(framed);
        }
        wire.send().await.unwrap();
        assert_eq!(wire.pending(), 0);
        wire.close(1008, "fell behind").await.unwrap();
        drop(wire);
        let mut bytes = Vec::new();
        let mut client = client;
        client.read_to_end(&mut bytes).await.unwrap();
        let frames = decode(&bytes);
        assert_eq!(frames.len(), 9);
        assert_eq!(frames[0], (OP_TEXT, b"hello".to_vec()));
        assert_eq!(frames[1], (OP_PING, vec![]));
        assert_eq!(frames[2], (OP_TEXT, big.into_bytes()));
        // A control payload is cut to 125 bytes.
        assert_eq!(frames[3], (OP_PONG, vec![7u8; 125]));
        assert_eq!(frames[4].1.len(), 300);
        for (frame, len) in frames[5..8].iter().zip([5, 300, 70_000]) {
            assert_eq!(frame, &(OP_TEXT, vec![b'f'; len]));
        }
        let mut close = 1008u16.to_be_bytes().to_vec();
        close.extend_from_slice(b"fell behind");
        assert_eq!(frames[8], (OP_CLOSE, close));
    }

    #[tokio::test]
    async fn more_frames_than_one_writev_takes_all_go_out_in_order() {
        let (client, server) = tokio::io::duplex(1 << 22);
        let mut wire = Wire::new(server);
        for i in 0..3000 {
            wire.text(format!("frame {i}"));
        }
        wire.send().await.unwrap();
        drop(wire);
        let mut bytes = Vec::new();
        let mut client = client;
        client.read_to_end(&mut bytes).await.unwrap();
        let frames = decode(&bytes);
        assert_eq!(frames.len(), 3000);
        for (i, (op, payload)) in frames.iter().enumerate() {
            assert_eq!(*op, OP_TEXT);
            assert_eq!(payload, format!("frame {i}").as_bytes());
        }
    }

    #[tokio::test]
    async fn a_write_cut_short_finishes_its_frame_before_the_close() {
        // Room for 100 bytes only: the second frame is cut in its middle.
        let (mut client, server) = tokio::io::duplex(100);
        let mut wire = Wire::new(server);
        wire.text("a".repeat(60));
        wire.text("b".repeat(60));
        wire.text("c".repeat(60));
        let cut = tokio::time::timeout(std::time::Duration::from_millis(50), wire.send()).await;
        assert!(cut.is_err(), "the client reads nothing, so the write waits");
        assert_eq!(wire.pending(), 2);
        assert!(wire.written > 0, "the second frame is half written");
        let reader = tokio::spawn(async move {
            let mut bytes = Vec::new();
            client.read_to_end(&mut bytes).await.unwrap();
            bytes
        });
        // A close reason beyond 123 bytes is cut on a character boundary.
        let reason = "é".repeat(100);
        wire.close(1008, &reason).await.unwrap();
        drop(wire);
        let frames = decode(&reader.await.unwrap());
        assert_eq!(frames.len(), 3, "{frames:?}");
        assert_eq!(frames[0].1, vec![b'a'; 60]);
        assert_eq!(frames[1].1, vec![b'b'; 60]);
        assert_eq!(frames[2].0, OP_CLOSE);
        assert_eq!(frames[2].1.len(), 2 + 122);
        assert!(std::str::from_utf8(&frames[2].1[2..]).is_ok());
    }

    #[tokio::test]
    async fn a_close_before_any_write_drops_the_batch() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut wire = Wire::new(server);
        wire.text("never");
        wire.close(1001, "server shutting down").await.unwrap();
        drop(wire);
        let mut bytes = Vec::new();
        client.read_to_end(&mut bytes).await.unwrap();
        let frames = decode(&bytes);
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].0, OP_CLOSE);
    }
}
