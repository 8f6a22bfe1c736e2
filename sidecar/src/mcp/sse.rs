//! A `text/event-stream` reader for the MCP transports: bytes in, whole
//! events out, as the HTML standard parses them (`event`, `data` joined by
//! newlines, `id`; comments and unknown fields ignored; CR, LF or CRLF
//! line ends). An event still incomplete past its bound is an error, so a
//! server cannot make the reader hold more than that.

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// `message` when the server named none.
    pub event: String,
    pub data: String,
    pub id: Option<String>,
}

/// The reader's state between chunks.
#[derive(Debug)]
pub struct Reader {
    /// Bytes of the line being read.
    line: Vec<u8>,
    /// The previous chunk ended on CR: an LF first in the next is its pair.
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
    id: Option<String>,
    /// Bytes held for the event being read, at most.
    max_event_bytes: usize,
}

/// An event grew past its bound.
#[derive(Debug, PartialEq, Eq)]
pub struct TooLarge(pub usize);

impl Reader {
    pub fn new(max_event_bytes: usize) -> Reader {
        Reader {
            line: Vec::new(),
            after_cr: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
            id: None,
            max_event_bytes,
        }
    }

    /// Reads a chunk; answers the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Event>, TooLarge> {
        let mut events = Vec::new();
        for &byte in chunk {
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                continue;
            }
            match byte {
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.line_done(&line) {
                        events.push(event);
                    }
                }
                _ => {
                    self.line.push(byte);
                    if self.line.len() + self.data.len() > self.max_event_bytes {
                        return Err(TooLarge(self.max_event_bytes));
                    }
                }
            }
        }
        Ok(events)
    }

    fn line_done(&mut self, line: &[u8]) -> Option<Event> {
        if line.is_empty() {
            let event = Event {
                event: if self.event.is_empty() {
                    "message".to_owned()
                } else {
                    std::mem::take(&mut self.event)
                },
                data: std::mem::take(&mut self.data),
                id: self.id.clone(),
            };
            self.event.clear();
            return std::mem::take(&mut self.has_data).then_some(event);
        }
        if line[0] == b':' {
            return None;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (text.as_ref(), ""),
        };
        match field {
            "event" => self.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_across_chunks_and_line_ends() {
        let mut reader = Reader::new(1024);
        assert_eq!(
            reader.push(b": hello\r\nevent: endpoint\r").unwrap(),
            vec![]
        );
        let events = reader
            .push(b"\ndata: /messages?s=1\r\n\r\ndata: {\"a\"\ndata:1}\n\nid: 7\ndata: x\r\r")
            .unwrap();
        assert_eq!(
            events,
            vec![
                Event {
                    event: "endpoint".into(),
                    data: "/messages?s=1".into(),
                    id: None
                },
                Event {
                    event: "message".into(),
                    data: "{\"a\"\n1}".into(),
                    id: None
                },
                Event {
                    event: "message".into(),
                    data: "x".into(),
                    id: Some("7".into())
                },
            ]
        );
        // A blank line with no data dispatches nothing.
        assert_eq!(reader.push(b"event: ping\n\n").unwrap(), vec![]);
    }

    #[test]
    fn an_event_past_its_bound_is_refused() {
        let mut reader = Reader::new(16);
        assert_eq!(reader.push(b"data: 0123456789\n").unwrap(), vec![]);
        assert_eq!(reader.push(b"data: 0123456789"), Err(TooLarge(16)));
    }
}
