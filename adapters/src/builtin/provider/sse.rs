//! An incremental Server-Sent Events parser. Providers stream their answers
//! as `text/event-stream`, and the network hands the bytes over in arbitrary
//! chunks: a line ending, a UTF-8 sequence or an event may be split anywhere.
//! The parser keeps only the line being read and the event being built, and
//! refuses either once it passes the byte bound, so a provider that never
//! ends a line cannot make it grow without limit.

/// One dispatched event: its `event:` name (`message` when the server gave
/// none, as the SSE standard says) and its `data:` lines joined by `\n`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// Why a stream could not be read as events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseError {
    /// A line, or the event being built, passed the bound.
    TooLarge { limit: usize },
    /// A line is not UTF-8.
    InvalidUtf8,
}

impl std::fmt::Display for SseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SseError::TooLarge { limit } => {
                write!(f, "an event of the stream is larger than {limit} bytes")
            }
            SseError::InvalidUtf8 => write!(f, "a line of the event stream is not UTF-8"),
        }
    }
}

impl std::error::Error for SseError {}

/// The parser's state between chunks.
#[derive(Debug)]
pub struct SseParser {
    limit: usize,
    /// The bytes of the line not yet ended.
    line: Vec<u8>,
    /// The previous chunk ended on `\r`: a `\n` opening the next one belongs
    /// to the same line ending.
    after_cr: bool,
    /// The stream's first bytes have not been seen yet (a leading BOM is
    /// dropped).
    at_start: bool,
    event: Option<String>,
    data: String,
    /// At least one `data:` field was seen for the event being built.
    has_data: bool,
    /// Bytes the event being built has taken so far, line endings included.
    event_bytes: usize,
}

impl SseParser {
    /// A parser refusing any line or event over `limit` bytes.
    pub fn new(limit: usize) -> SseParser {
        SseParser {
            limit,
            line: Vec::new(),
            after_cr: false,
            at_start: true,
            event: None,
            data: String::new(),
            has_data: false,
            event_bytes: 0,
        }
    }

    /// Feeds one chunk, appending every event it completes to `out`.
    pub fn push(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.at_start && !chunk.is_empty() {
            // A BOM may itself arrive split; only a whole one at the very
            // start is dropped, which is what servers send.
            if let Some(rest) = chunk.strip_prefix(b"\xEF\xBB\xBF") {
                chunk = rest;
            }
            self.at_start = false;
        }
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while !chunk.is_empty() {
            match chunk.iter().position(|b| *b == b'\n' || *b == b'\r') {
                None => {
                    self.extend_line(chunk)?;
                    break;
                }
                Some(at) => {
                    self.extend_line(&chunk[..at])?;
                    let ending = chunk[at];
                    chunk = &chunk[at + 1..];
                    if ending == b'\r' {
                        match chunk.first() {
                            Some(b'\n') => chunk = &chunk[1..],
                            Some(_) => {}
                            None => self.after_cr = true,
                        }
                    }
                    self.end_line(out)?;
                }
            }
        }
        Ok(())
    }

    /// Whether the stream stopped inside an event: bytes of a line or fields
    /// were read that no blank line dispatched. The standard discards such
    /// an event; the caller decides whether that means truncation.
    pub fn has_partial(&self) -> bool {
        !self.line.is_empty() || self.has_data || self.event.is_some()
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.event_bytes + self.line.len() + bytes.len() > self.limit {
            return Err(SseError::TooLarge { limit: self.limit });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        self.event_bytes += self.line.len() + 1;
        let line = std::mem::take(&mut self.line);
        let result = self.field(&line);
        // The buffer's capacity is kept for the next line.
        self.line = line;
        self.line.clear();
        result
    }

    fn field(&mut self, line: &[u8]) -> Result<(), SseError> {
        if line.first() == Some(&b':') {
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::InvalidUtf8)?;
        let (name, value) = match line.split_once(':') {
            Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match name {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            // `id` and `retry` steer reconnection, which a model call never
            // does: a broken stream is a failed call.
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        self.event_bytes = 0;
        if !self.has_data {
            // The standard dispatches nothing for an event without data.
            self.data.clear();
            return;
        }
        self.has_data = false;
        out.push(SseEvent {
            event: event.unwrap_or_else(|| "message".to_owned()),
            data: std::mem::take(&mut self.data),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]], limit: usize) -> Result<Vec<SseEvent>, SseError> {
        let mut parser = SseParser::new(limit);
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk, &mut out)?;
        }
        Ok(out)
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.to_owned(),
            data: data.to_owned(),
        }
    }

    const STREAM: &str = "event: message_start\ndata: {\"a\":1}\n\n: a comment\n\ndata: first\ndata:second\ndata:  third\n\nevent: done\ndata\n\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            ev("message_start", "{\"a\":1}"),
            ev("message", "first\nsecond\n third"),
            ev("done", ""),
        ]
    }

    #[test]
    fn whole_stream_in_one_chunk() {
        assert_eq!(parse_all(&[STREAM.as_bytes()], 1024), Ok(expected()));
    }

    #[test]
    fn split_at_every_boundary_gives_the_same_events() {
        for line_ending in ["\n", "\r\n", "\r"] {
            let text = STREAM.replace('\n', line_ending);
            let bytes = text.as_bytes();
            for at in 0..=bytes.len() {
                let (a, b) = bytes.split_at(at);
                assert_eq!(
                    parse_all(&[a, b], 1024),
                    Ok(expected()),
                    "split at {at} with {line_ending:?}"
                );
            }
        }
    }

    #[test]
    fn byte_by_byte_with_crlf() {
        let text = STREAM.replace('\n', "\r\n");
        let chunks: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
        assert_eq!(parse_all(&chunks, 1024), Ok(expected()));
    }

    #[test]
    fn an_empty_chunk_between_cr_and_lf_changes_nothing() {
        let chunks: [&[u8]; 3] = [b"data: x\r", b"", b"\n\r\n"];
        assert_eq!(parse_all(&chunks, 64), Ok(vec![ev("message", "x")]));
    }

    #[test]
    fn multibyte_utf8_split_across_chunks() {
        let text = "data: héllo → wörld\n\n".as_bytes();
        for at in 0..=text.len() {
            let (a, b) = text.split_at(at);
            assert_eq!(
                parse_all(&[a, b], 1024),
                Ok(vec![ev("message", "héllo → wörld")])
            );
        }
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored() {
        let text = b": keep-alive\nid: 7\nretry: 10\nfoo: bar\ndata: x\n\n:\n\n";
        assert_eq!(parse_all(&[text], 1024), Ok(vec![ev("message", "x")]));
    }

    #[test]
    fn leading_bom_is_dropped() {
        let text = b"\xEF\xBB\xBFdata: x\n\n";
        assert_eq!(parse_all(&[text], 1024), Ok(vec![ev("message", "x")]));
    }

    #[test]
    fn an_event_without_data_is_not_dispatched() {
        let text = b"event: ping\n\ndata: y\n\n";
        assert_eq!(parse_all(&[text], 1024), Ok(vec![ev("message", "y")]));
    }

    #[test]
    fn a_line_over_the_bound_is_refused_before_it_ends() {
        let long = vec![b'x'; 100];
        let mut parser = SseParser::new(64);
        let mut out = Vec::new();
        assert_eq!(parser.push(b"data: ", &mut out), Ok(()));
        assert_eq!(
            parser.push(&long, &mut out),
            Err(SseError::TooLarge { limit: 64 })
        );
    }

    #[test]
    fn an_event_of_many_short_lines_over_the_bound_is_refused() {
        let text = "data: 0123456789\n".repeat(10);
        assert_eq!(
            parse_all(&[text.as_bytes()], 64),
            Err(SseError::TooLarge { limit: 64 })
        );
        // Each event alone fits: the bound is per event, not per stream.
        let text = "data: 0123456789\n\n".repeat(10);
        assert_eq!(parse_all(&[text.as_bytes()], 64).map(|e| e.len()), Ok(10));
    }

    #[test]
    fn invalid_utf8_is_refused() {
        assert_eq!(
            parse_all(&[b"data: \xff\xfe\n\n"], 64),
            Err(SseError::InvalidUtf8)
        );
    }

    #[test]
    fn partial_event_is_reported() {
        let mut parser = SseParser::new(64);
        let mut out = Vec::new();
        parser.push(b"data: x\n\ndata: y", &mut out).unwrap();
        assert_eq!(out, vec![ev("message", "x")]);
        assert!(parser.has_partial());
        parser.push(b"\n\n", &mut out).unwrap();
        assert!(!parser.has_partial());
    }
}
