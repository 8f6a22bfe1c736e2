//! Actor Runtime Socket v1: the message types both ends exchange and their codec.
//!
//! Every frame on the socket is a u32 big-endian length followed by a payload;
//! every payload is a vbare "embedded version" body: a u16 little-endian schema
//! version (1) followed by BARE. The types below follow the reference schema
//! field by field and member by member, so serde's declaration order is the
//! wire order and serde's variant index is the BARE union tag. The version
//! header is written and checked by vbare's `Versioned`; the BARE body is
//! written by serde_bare. Nothing here performs I/O.

use std::io::{self, Write};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use vbare::{Body, DecodeError, DecodeErrorKind, EncodeError, Sink, Versioned};

/// The only schema version this crate speaks.
pub const VERSION: u16 = 1;
/// The reference default for `maxFrameBytes`, on both sides.
pub const DEFAULT_MAX_FRAME_BYTES: u32 = 32 * 1024 * 1024;
/// The length prefix of every frame.
pub const FRAME_HEADER_LEN: usize = 4;

/// Why bytes could not become a message (or a message could not become bytes).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArsError {
    #[error("frame of {len} bytes exceeds maxFrameBytes {max}")]
    FrameTooLarge { len: u64, max: u32 },
    #[error("unsupported schema version {version} (this end speaks {VERSION})")]
    UnsupportedVersion { version: u16 },
    #[error("malformed payload: {0}")]
    Malformed(String),
    #[error("cannot encode: {0}")]
    Encode(String),
}

impl ArsError {
    pub fn code(&self) -> &'static str {
        match self {
            ArsError::FrameTooLarge { .. } => "ars_frame_too_large",
            ArsError::UnsupportedVersion { .. } => "ars_unsupported_version",
            ArsError::Malformed(_) => "ars_malformed_frame",
            ArsError::Encode(_) => "ars_encode_failed",
        }
    }
}

// ---------------------------------------------------------------------------
// Schema types, in the reference's field and member order.

/// `ClientHello` is void: the hello payload is only the version header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientHello;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloOk {
    pub max_frame_bytes: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerHello {
    HelloOk(HelloOk),
    HelloRejectUnsupportedVersion,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SqlValue {
    SqlNull,
    SqlInteger(i64),
    SqlReal(f64),
    SqlText(String),
    SqlBlob(#[serde(with = "data")] Vec<u8>),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqliteExec {
    pub script: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SqliteQuery {
    pub sql: String,
    pub params: Vec<SqlValue>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqliteBegin {
    pub lease_key: String,
    pub timeout_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqliteCommit {
    pub lease_key: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqliteRollback {
    pub lease_key: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RequestPayload {
    SqliteExec(SqliteExec),
    SqliteQuery(SqliteQuery),
    SqliteBegin(SqliteBegin),
    SqliteCommit(SqliteCommit),
    SqliteRollback(SqliteRollback),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub request_id: u32,
    pub lease_key: Option<String>,
    pub payload: RequestPayload,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ClientFrame {
    Request(Request),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SqliteQueryOk {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<SqlValue>>,
    pub changes: i64,
    pub last_insert_row_id: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqlError {
    pub code: i32,
    pub statement_index: u32,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueFull {
    pub limit: String,
    pub capacity: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidLeaseKey {
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseExpired {
    pub timeout_ms: u64,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ResponsePayload {
    SqliteExecOk,
    SqliteQueryOk(SqliteQueryOk),
    SqliteBeginOk,
    SqliteCommitOk,
    SqliteRollbackOk,
    SqlError(SqlError),
    EndpointClosed,
    QueueFull(QueueFull),
    InvalidLeaseKey(InvalidLeaseKey),
    LeaseExpired(LeaseExpired),
    ResponseTooLarge,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub request_id: u32,
    pub payload: ResponsePayload,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GoAwayReason {
    FrameTooLarge,
    MalformedFrame,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoAway {
    pub reason: GoAwayReason,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ServerFrame {
    Response(Response),
    GoAway(GoAway),
}

/// BARE `data`: a varint length then raw bytes. serde_bare writes a byte
/// string exactly so, and reading it as one avoids a per-byte sequence walk.
mod data {
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(value: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        struct DataVisitor;
        impl<'de> Visitor<'de> for DataVisitor {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("BARE data")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
        }
        deserializer.deserialize_byte_buf(DataVisitor)
    }
}

// ---------------------------------------------------------------------------
// vbare glue: every top-level message is a `Body` written by serde_bare, and a
// one-version `Versioned` envelope so vbare owns the header.

/// Counts bytes so `body_len` is exact without allocating.
struct Counter(usize);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn bare_len<T: Serialize>(value: &T) -> usize {
    let mut counter = Counter(0);
    // These types use only BARE-representable shapes, so serde_bare cannot
    // refuse them; a refusal would surface as a length mismatch in `seal`.
    let _ = serde_bare::to_writer(&mut counter, value);
    counter.0
}

fn bare_put<T: Serialize, S: Sink>(value: &T, out: &mut S) {
    let _ = serde_bare::to_writer(out.writer(), value);
}

fn bare_from<T: for<'de> Deserialize<'de>>(bytes: Bytes) -> Result<T, DecodeError> {
    let mut rest: &[u8] = &bytes;
    let value = serde_bare::from_reader(&mut rest).map_err(|e| {
        let consumed = bytes.len() - rest.len();
        // Reading from a slice can only fail at its end or on invalid data.
        let kind = match e.classify() {
            serde_bare::error::Category::Data => DecodeErrorKind::InvalidTag,
            _ => DecodeErrorKind::Truncated,
        };
        DecodeError::with_detail(kind, consumed, e.to_string())
    })?;
    if !rest.is_empty() {
        return Err(DecodeError::new(
            DecodeErrorKind::TrailingBytes,
            bytes.len() - rest.len(),
        ));
    }
    Ok(value)
}

macro_rules! versioned_message {
    ($message:ty, $envelope:ident) => {
        impl Body for $message {
            fn body_len(&self) -> usize {
                bare_len(self)
            }
            fn put_body<S: Sink>(&self, out: &mut S) {
                bare_put(self, out)
            }
            fn from_body(bytes: Bytes) -> Result<Self, DecodeError> {
                bare_from(bytes)
            }
        }

        /// The versioned envelope of this message; v1 is the only version.
        pub enum $envelope {
            V1($message),
        }

        impl Versioned for $envelope {
            type Latest = $message;
            const LATEST: u16 = VERSION;

            fn wrap_latest(latest: $message) -> Self {
                $envelope::V1(latest)
            }

            fn unwrap_latest(self) -> anyhow::Result<$message> {
                match self {
                    $envelope::V1(message) => Ok(message),
                }
            }

            fn decode_version(version: u16, _body: Bytes) -> Result<Self, DecodeError> {
                Err(DecodeError::with_detail(
                    DecodeErrorKind::UnsupportedVersion,
                    0,
                    format!("version {version}"),
                ))
            }

            fn encode_version<S: Sink>(
                &self,
                version: u16,
                out: &mut S,
            ) -> Result<(), EncodeError> {
                match (self, version) {
                    ($envelope::V1(message), VERSION) => {
                        message.put_body(out);
                        Ok(())
                    }
                    _ => Err(EncodeError::UnsupportedVersion(version)),
                }
            }
        }
    };
}

versioned_message!(ClientHello, VersionedClientHello);
versioned_message!(ServerHello, VersionedServerHello);
versioned_message!(ClientFrame, VersionedClientFrame);
versioned_message!(ServerFrame, VersionedServerFrame);

// ---------------------------------------------------------------------------
// Payload and frame helpers.

fn map_decode(error: DecodeError) -> ArsError {
    ArsError::Malformed(error.to_string())
}

/// The version a payload claims, without decoding its body.
pub fn payload_version(payload: &[u8]) -> Result<u16, ArsError> {
    match payload {
        [a, b, ..] => Ok(u16::from_le_bytes([*a, *b])),
        _ => Err(ArsError::Malformed("missing version header".into())),
    }
}

fn decode_payload<V: Versioned>(payload: Bytes) -> Result<V::Latest, ArsError> {
    let version = payload_version(&payload)?;
    if version != VERSION {
        return Err(ArsError::UnsupportedVersion { version });
    }
    V::decode(payload).map_err(map_decode)
}

pub fn decode_client_hello(payload: Bytes) -> Result<ClientHello, ArsError> {
    decode_payload::<VersionedClientHello>(payload)
}

pub fn decode_server_hello(payload: Bytes) -> Result<ServerHello, ArsError> {
    decode_payload::<VersionedServerHello>(payload)
}

pub fn decode_client_frame(payload: Bytes) -> Result<ClientFrame, ArsError> {
    decode_payload::<VersionedClientFrame>(payload)
}

pub fn decode_server_frame(payload: Bytes) -> Result<ServerFrame, ArsError> {
    decode_payload::<VersionedServerFrame>(payload)
}

fn encode_payload<V: Versioned>(value: &V::Latest) -> Result<Vec<u8>, ArsError> {
    V::seal_to_vec(value, VERSION).map_err(|e| ArsError::Encode(e.to_string()))
}

pub fn encode_client_hello() -> Result<Vec<u8>, ArsError> {
    encode_payload::<VersionedClientHello>(&ClientHello)
}

pub fn encode_server_hello(hello: &ServerHello) -> Result<Vec<u8>, ArsError> {
    encode_payload::<VersionedServerHello>(hello)
}

pub fn encode_client_frame(frame: &ClientFrame) -> Result<Vec<u8>, ArsError> {
    encode_payload::<VersionedClientFrame>(frame)
}

pub fn encode_server_frame(frame: &ServerFrame) -> Result<Vec<u8>, ArsError> {
    encode_payload::<VersionedServerFrame>(frame)
}

/// Seals `value` straight into a length-prefixed frame: one allocation, no copy.
fn frame_of<V: Versioned>(value: &V::Latest, max: u32) -> Result<Vec<u8>, ArsError> {
    let len = V::sealed_len(value);
    if len as u64 > u64::from(max) {
        return Err(ArsError::FrameTooLarge {
            len: len as u64,
            max,
        });
    }
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + len);
    out.put_u32(len as u32);
    V::seal(value, VERSION, &mut out).map_err(|e| ArsError::Encode(e.to_string()))?;
    if out.len() != FRAME_HEADER_LEN + len {
        return Err(ArsError::Encode(
            "encoded length disagrees with its count".into(),
        ));
    }
    Ok(out)
}

/// Appends one length-prefixed frame of `value` to `out` in a single pass:
/// the body is sealed after a placeholder prefix that is patched afterwards,
/// so batches of frames share one reused buffer and skip the counting pass.
/// A frame over `max` leaves `out` as it was.
fn frame_into<V: Versioned>(
    value: &V::Latest,
    max: u32,
    out: &mut Vec<u8>,
) -> Result<(), ArsError> {
    let start = out.len();
    out.put_u32(0);
    if let Err(e) = V::seal(value, VERSION, out) {
        out.truncate(start);
        return Err(ArsError::Encode(e.to_string()));
    }
    let len = out.len() - start - FRAME_HEADER_LEN;
    match u32::try_from(len) {
        Ok(len32) if len32 <= max => {
            out[start..start + FRAME_HEADER_LEN].copy_from_slice(&len32.to_be_bytes());
            Ok(())
        }
        _ => {
            out.truncate(start);
            Err(ArsError::FrameTooLarge {
                len: len as u64,
                max,
            })
        }
    }
}

pub fn client_hello_frame() -> Result<Vec<u8>, ArsError> {
    frame_of::<VersionedClientHello>(&ClientHello, DEFAULT_MAX_FRAME_BYTES)
}

pub fn server_hello_frame(hello: &ServerHello) -> Result<Vec<u8>, ArsError> {
    frame_of::<VersionedServerHello>(hello, DEFAULT_MAX_FRAME_BYTES)
}

/// A complete request frame; refuses payloads longer than the peer's `max`.
pub fn client_frame(frame: &ClientFrame, max: u32) -> Result<Vec<u8>, ArsError> {
    frame_of::<VersionedClientFrame>(frame, max)
}

/// A complete server frame; refuses payloads longer than `max`.
pub fn server_frame(frame: &ServerFrame, max: u32) -> Result<Vec<u8>, ArsError> {
    frame_of::<VersionedServerFrame>(frame, max)
}

/// Appends a request frame to `out`, byte for byte what [`client_frame`]
/// returns; refuses payloads longer than the peer's `max`.
pub fn client_frame_into(frame: &ClientFrame, max: u32, out: &mut Vec<u8>) -> Result<(), ArsError> {
    frame_into::<VersionedClientFrame>(frame, max, out)
}

/// Appends a server frame to `out`, byte for byte what [`server_frame`]
/// returns; refuses payloads longer than `max`.
pub fn server_frame_into(frame: &ServerFrame, max: u32, out: &mut Vec<u8>) -> Result<(), ArsError> {
    frame_into::<VersionedServerFrame>(frame, max, out)
}

/// Wraps an already encoded payload in its length prefix.
pub fn frame_payload(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    out.put_u32(payload.len() as u32);
    out.extend_from_slice(payload);
    out
}

/// Splits a byte stream into payloads. A length over `max` is an error before
/// any of the payload is buffered, so a peer cannot make us allocate it.
#[derive(Clone, Debug)]
pub struct FrameDecoder {
    max: u32,
}

impl FrameDecoder {
    pub fn new(max: u32) -> Self {
        FrameDecoder { max }
    }

    pub fn max(&self) -> u32 {
        self.max
    }

    /// The length the frame at the front of `buf` announces, once its
    /// header is there.
    pub fn next_length(&self, buf: &[u8]) -> Option<u32> {
        let header = buf.get(..FRAME_HEADER_LEN)?;
        Some(u32::from_be_bytes([
            header[0], header[1], header[2], header[3],
        ]))
    }

    /// Takes one complete payload off the front of `buf`, if one is there.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Bytes>, ArsError> {
        if buf.len() < FRAME_HEADER_LEN {
            return Ok(None);
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if len > self.max {
            return Err(ArsError::FrameTooLarge {
                len: u64::from(len),
                max: self.max,
            });
        }
        let total = FRAME_HEADER_LEN + len as usize;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        buf.advance(FRAME_HEADER_LEN);
        Ok(Some(buf.split_to(len as usize).freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_is_exactly_version_one() {
        assert_eq!(encode_client_hello().unwrap(), vec![0x01, 0x00]);
        assert_eq!(
            client_hello_frame().unwrap(),
            vec![0x00, 0x00, 0x00, 0x02, 0x01, 0x00]
        );
        assert_eq!(
            decode_client_hello(Bytes::from_static(&[1, 0])).unwrap(),
            ClientHello
        );
    }

    #[test]
    fn rejection_is_three_bytes() {
        let bytes = encode_server_hello(&ServerHello::HelloRejectUnsupportedVersion).unwrap();
        assert_eq!(bytes, vec![0x01, 0x00, 0x01]);
        let ok = encode_server_hello(&ServerHello::HelloOk(HelloOk {
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
        }))
        .unwrap();
        assert_eq!(ok, vec![0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02]);
    }

    #[test]
    fn request_without_lease_key() {
        let frame = ClientFrame::Request(Request {
            request_id: 7,
            lease_key: None,
            payload: RequestPayload::SqliteBegin(SqliteBegin {
                lease_key: "k".into(),
                timeout_ms: None,
            }),
        });
        let bytes = encode_client_frame(&frame).unwrap();
        assert_eq!(
            bytes,
            vec![
                0x01, 0x00, // version 1
                0x00, // ClientFrame::Request
                0x07, 0x00, 0x00, 0x00, // requestId u32 LE
                0x00, // leaseKey absent
                0x02, // SqliteBegin
                0x01, b'k', // leaseKey str
                0x00, // timeoutMs absent
            ]
        );
        assert_eq!(decode_client_frame(Bytes::from(bytes)).unwrap(), frame);
    }

    #[test]
    fn request_with_lease_key() {
        let frame = ClientFrame::Request(Request {
            request_id: 0x0102_0304,
            lease_key: Some("ab".into()),
            payload: RequestPayload::SqliteQuery(SqliteQuery {
                sql: "S".into(),
                params: vec![
                    SqlValue::SqlInteger(-1),
                    SqlValue::SqlText("é".into()),
                    SqlValue::SqlBlob(vec![9, 8]),
                    SqlValue::SqlNull,
                    SqlValue::SqlReal(1.0),
                ],
            }),
        });
        let bytes = encode_client_frame(&frame).unwrap();
        let mut expected = vec![
            0x01, 0x00, 0x00, 0x04, 0x03, 0x02, 0x01, 0x01, 0x02, b'a', b'b',
        ];
        expected.extend([0x01, 0x01, b'S', 0x05]);
        expected.extend([0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        expected.extend([0x03, 0x02, 0xc3, 0xa9]);
        expected.extend([0x04, 0x02, 9, 8]);
        expected.extend([0x00]);
        expected.extend([0x02]);
        expected.extend(1.0f64.to_le_bytes());
        assert_eq!(bytes, expected);
        assert_eq!(decode_client_frame(Bytes::from(bytes)).unwrap(), frame);
    }

    #[test]
    fn query_ok_layout() {
        let frame = ServerFrame::Response(Response {
            request_id: 1,
            payload: ResponsePayload::SqliteQueryOk(SqliteQueryOk {
                columns: vec!["a".into()],
                rows: vec![vec![SqlValue::SqlInteger(2)]],
                changes: 3,
                last_insert_row_id: Some(4),
            }),
        });
        let bytes = encode_server_frame(&frame).unwrap();
        let mut expected = vec![0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01];
        expected.extend([0x01, 0x01, b'a']);
        expected.extend([0x01, 0x01, 0x01, 2, 0, 0, 0, 0, 0, 0, 0]);
        expected.extend([3, 0, 0, 0, 0, 0, 0, 0]);
        expected.extend([0x01, 4, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bytes, expected);
        assert_eq!(decode_server_frame(Bytes::from(bytes)).unwrap(), frame);
    }

    #[test]
    fn go_away_and_void_responses() {
        let go_away = ServerFrame::GoAway(GoAway {
            reason: GoAwayReason::MalformedFrame,
        });
        assert_eq!(encode_server_frame(&go_away).unwrap(), vec![1, 0, 1, 1]);
        let too_large = ServerFrame::Response(Response {
            request_id: 2,
            payload: ResponsePayload::ResponseTooLarge,
        });
        assert_eq!(
            encode_server_frame(&too_large).unwrap(),
            vec![1, 0, 0, 2, 0, 0, 0, 10]
        );
    }

    #[test]
    fn wrong_version_and_garbage_are_typed() {
        assert_eq!(
            decode_client_hello(Bytes::from_static(&[2, 0])).unwrap_err(),
            ArsError::UnsupportedVersion { version: 2 }
        );
        assert_eq!(
            decode_client_frame(Bytes::from_static(&[1]))
                .unwrap_err()
                .code(),
            "ars_malformed_frame"
        );
        assert_eq!(
            decode_client_frame(Bytes::from_static(&[1, 0, 9, 9, 9]))
                .unwrap_err()
                .code(),
            "ars_malformed_frame"
        );
        // Trailing bytes after a complete hello are not a hello.
        assert!(decode_client_hello(Bytes::from_static(&[1, 0, 0])).is_err());
    }

    #[test]
    fn frames_into_a_shared_buffer_match_single_frames() {
        let request = ClientFrame::Request(Request {
            request_id: 9,
            lease_key: Some("key".into()),
            payload: RequestPayload::SqliteQuery(SqliteQuery {
                sql: "INSERT INTO t VALUES (?1)".into(),
                params: vec![SqlValue::SqlText("x".repeat(300))],
            }),
        });
        let response = ServerFrame::Response(Response {
            request_id: 9,
            payload: ResponsePayload::SqliteCommitOk,
        });
        let mut out = vec![0xaa];
        client_frame_into(&request, 1024, &mut out).unwrap();
        server_frame_into(&response, 1024, &mut out).unwrap();
        let mut expected = vec![0xaa];
        expected.extend(client_frame(&request, 1024).unwrap());
        expected.extend(server_frame(&response, 1024).unwrap());
        assert_eq!(out, expected);
        // A frame over the limit is refused and leaves the buffer untouched.
        assert_eq!(
            client_frame_into(&request, 16, &mut out)
                .unwrap_err()
                .code(),
            "ars_frame_too_large"
        );
        assert_eq!(out, expected);
    }

    #[test]
    fn frame_decoder_limits_and_splits() {
        let decoder = FrameDecoder::new(8);
        let mut buf = BytesMut::from(&[0, 0, 0, 2, 1, 0, 0, 0][..]);
        assert_eq!(
            decoder.decode(&mut buf).unwrap(),
            Some(Bytes::from_static(&[1, 0]))
        );
        assert_eq!(decoder.decode(&mut buf).unwrap(), None);
        let mut big = BytesMut::from(&[0, 0, 0, 9][..]);
        assert_eq!(
            decoder.decode(&mut big).unwrap_err(),
            ArsError::FrameTooLarge { len: 9, max: 8 }
        );
    }

    #[test]
    fn pseudo_random_bytes_never_panic() {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..5000 {
            let len = (next() % 64) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if len >= 2 && next() % 2 == 0 {
                bytes[0] = 1;
                bytes[1] = 0;
            }
            let payload = Bytes::from(bytes.clone());
            let _ = decode_client_hello(payload.clone());
            let _ = decode_server_hello(payload.clone());
            let _ = decode_client_frame(payload.clone());
            let _ = decode_server_frame(payload);
            let decoder = FrameDecoder::new(1024);
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = decoder.decode(&mut buf) {}
        }
    }
}
