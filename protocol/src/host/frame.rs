//! Host framing: a u32 big-endian length, then one UTF-8 JSON-RPC 2.0
//! message. The decoder is incremental and refuses an oversize frame before
//! reading its bytes; the encoders build whole frames, length prefix first, and refuse a payload
//! whose length does not fit the u32 prefix.

// Framing

/// Why a byte stream could not be cut into frames. Either way the stream is
/// no longer trustworthy and the connection ends after the error is answered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {length} bytes exceeds the limit of {limit} bytes")]
    TooLarge { length: u64, limit: u64 },
}

impl FrameError {
    pub fn code(&self) -> crate::ErrorCode {
        match self {
            FrameError::TooLarge { .. } => crate::ErrorCode::FrameTooLarge,
        }
    }
}

/// A buffer larger than this is dropped, not kept, once it is empty.
const SHRINK_ABOVE: usize = 4 << 20;

/// Incremental frame decoder: push bytes, pop whole frames.
#[derive(Debug)]
pub struct FrameDecoder {
    max_frame_bytes: u64,
    buf: Vec<u8>,
    start: usize,
}

impl FrameDecoder {
    pub fn new(max_frame_bytes: u64) -> Self {
        FrameDecoder {
            max_frame_bytes,
            buf: Vec::new(),
            start: 0,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            if self.buf.capacity() > SHRINK_ABOVE {
                // A large frame went through: its room is not kept.
                self.buf = Vec::new();
            } else {
                self.buf.clear();
            }
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The length the next frame announces, once its prefix has arrived.
    pub fn next_length(&self) -> Option<u64> {
        let header = self.buf.get(self.start..self.start + 4)?;
        Some(u64::from(u32::from_be_bytes([
            header[0], header[1], header[2], header[3],
        ])))
    }

    /// Bytes received but not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next whole frame's payload, `None` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let available = &self.buf[self.start..];
        let Some(header) = available.get(..4) else {
            return Ok(None);
        };
        let length = u64::from(u32::from_be_bytes([
            header[0], header[1], header[2], header[3],
        ]));
        if length > self.max_frame_bytes {
            return Err(FrameError::TooLarge {
                length,
                limit: self.max_frame_bytes,
            });
        }
        let total = 4 + length as usize;
        if available.len() < total {
            return Ok(None);
        }
        let payload = available[4..total].to_vec();
        self.start += total;
        if self.start > (1 << 20) && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        Ok(Some(payload))
    }
}

/// The u32 length prefix of a payload, or `TooLarge` when the length does
/// not fit (never a truncated length).
fn length_prefix(length: usize) -> Result<[u8; 4], FrameError> {
    u32::try_from(length)
        .map(u32::to_be_bytes)
        .map_err(|_| FrameError::TooLarge {
            length: length as u64,
            limit: u64::from(u32::MAX),
        })
}

/// Prefixes `payload` with its u32 big-endian length.
pub fn encode_frame(payload: &[u8]) -> Result<Vec<u8>, FrameError> {
    let prefix = length_prefix(payload.len())?;
    let mut out = Vec::with_capacity(4 + payload.len());
    out.extend_from_slice(&prefix);
    out.extend_from_slice(payload);
    Ok(out)
}

/// A frame whose payload `write` appends to `out`, the length patched in
/// afterwards so the payload is never copied.
fn frame_with(write: impl FnOnce(&mut Vec<u8>)) -> Result<Vec<u8>, FrameError> {
    let mut frame = Vec::new();
    append_frame_with(&mut frame, write)?;
    Ok(frame)
}

/// [`frame_with`] at the end of `out`, which may already hold frames; on
/// error `out` is left as it was.
fn append_frame_with(
    out: &mut Vec<u8>,
    write: impl FnOnce(&mut Vec<u8>),
) -> Result<(), FrameError> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    write(out);
    match length_prefix(out.len() - start - 4) {
        Ok(prefix) => {
            out[start..start + 4].copy_from_slice(&prefix);
            Ok(())
        }
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

/// The bytes [`append_event_notification_frame`] adds, exactly.
pub fn event_notification_frame_len(subscription_id: &str, public_event: &str) -> usize {
    EVENT_FRAME_HEAD.len()
        + crate::session::json_str_len(subscription_id)
        + EVENT_FRAME_MIDDLE.len()
        + public_event.len()
        + EVENT_FRAME_TAIL.len()
        + 4
}

const EVENT_FRAME_HEAD: &str = concat!(
    "{\"jsonrpc\":\"2.0\",\"method\":\"",
    "sessions/event",
    "\",\"params\":{\"subscriptionId\":"
);
const EVENT_FRAME_MIDDLE: &str = ",\"event\":";
const EVENT_FRAME_TAIL: &str = "}}";

/// The whole frame of a `sessions/event` notification, spliced from the
/// event's already rendered public JSON (see `StoredEvent::public_json`).
pub fn event_notification_frame(
    subscription_id: &str,
    public_event: &str,
) -> Result<Vec<u8>, FrameError> {
    let mut out = Vec::with_capacity(event_notification_frame_len(subscription_id, public_event));
    append_event_notification_frame(&mut out, subscription_id, public_event)?;
    Ok(out)
}

/// [`event_notification_frame`] written at the end of `out`, so a run of
/// events becomes one buffer without a copy per frame.
pub fn append_event_notification_frame(
    out: &mut Vec<u8>,
    subscription_id: &str,
    public_event: &str,
) -> Result<(), FrameError> {
    append_frame_with(out, |out| {
        out.extend_from_slice(EVENT_FRAME_HEAD.as_bytes());
        crate::session::push_json_str_bytes(out, subscription_id);
        out.extend_from_slice(EVENT_FRAME_MIDDLE.as_bytes());
        out.extend_from_slice(public_event.as_bytes());
        out.extend_from_slice(EVENT_FRAME_TAIL.as_bytes());
    })
}

#[derive(serde::Serialize)]
struct Outgoing<'a, P: serde::Serialize> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a P>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a serde_json::value::RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a super::ErrorObject>,
}

/// The whole frame of a response; `result` is already-serialized JSON and
/// is copied as it is.
pub fn response_frame(
    id: &serde_json::Value,
    result: Result<&serde_json::value::RawValue, &super::ErrorObject>,
) -> Result<Vec<u8>, FrameError> {
    let (result, error) = match result {
        Ok(result) => (Some(result), None),
        Err(error) => (None, Some(error)),
    };
    let message: Outgoing<'_, ()> = Outgoing {
        jsonrpc: "2.0",
        id: Some(id),
        method: None,
        params: None,
        result,
        error,
    };
    // Serializing these types cannot fail: every map key is a string.
    frame_with(|out| {
        let _ = serde_json::to_writer(out, &message);
    })
}

/// The whole frame of a notification.
pub fn notification_frame(
    method: &str,
    params: &impl serde::Serialize,
) -> Result<Vec<u8>, FrameError> {
    let message = Outgoing {
        jsonrpc: "2.0",
        id: None,
        method: Some(method),
        params: Some(params),
        result: None,
        error: None,
    };
    frame_with(|out| {
        let _ = serde_json::to_writer(out, &message);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_beyond_u32_is_an_error_not_a_truncation() {
        assert_eq!(length_prefix(7), Ok(7u32.to_be_bytes()));
        assert_eq!(length_prefix(u32::MAX as usize), Ok([0xff; 4]));
        let over = u32::MAX as usize + 1;
        assert_eq!(
            length_prefix(over),
            Err(FrameError::TooLarge {
                length: over as u64,
                limit: u64::from(u32::MAX),
            })
        );
    }

    #[test]
    fn event_frames_appended_in_place_are_the_frames_made_one_by_one() {
        let events = [r#"{"sequence":1}"#, r#"{"sequence":2,"text":"é"}"#];
        for id in ["sub-1", "needs \"escaping\"\n"] {
            let mut joined = b"kept".to_vec();
            for event in events {
                let before = joined.len();
                append_event_notification_frame(&mut joined, id, event).unwrap();
                assert_eq!(
                    joined.len() - before,
                    event_notification_frame_len(id, event)
                );
            }
            let mut expected = b"kept".to_vec();
            for event in events {
                expected.extend(event_notification_frame(id, event).unwrap());
            }
            assert_eq!(joined, expected);
            let mut decoder = FrameDecoder::new(1 << 20);
            decoder.push(&joined[4..]);
            for event in events {
                let payload = decoder.next_frame().unwrap().unwrap();
                let frame: serde_json::Value = serde_json::from_slice(&payload).unwrap();
                assert_eq!(frame["method"], super::super::methods::EVENT);
                assert_eq!(frame["params"]["subscriptionId"], id);
                assert_eq!(
                    frame["params"]["event"],
                    serde_json::from_str::<serde_json::Value>(event).unwrap()
                );
            }
        }
    }
}
