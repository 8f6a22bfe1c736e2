//! Reading the adapter: stdout lines up to a bound, classified and handed
//! on in arrival order (answers resolve our pending requests; everything
//! else becomes an event), and stderr lines as events and logs.

use std::process::ExitStatus;
use std::sync::{Arc, Mutex};

use super::*;

#[derive(Debug, PartialEq, Eq)]
pub(super) enum LineRead {
    /// A complete line is in the buffer; `truncated` when bytes beyond the
    /// limit were dropped.
    Line {
        truncated: bool,
    },
    Eof,
}

/// Reads one line into `buf` (without the newline and a trailing `\r`),
/// keeping at most `limit` bytes and discarding the rest of an overlong line
/// so the next call starts at the next line.
pub(super) async fn read_line_limited<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    let mut truncated = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            if buf.is_empty() && !truncated {
                return Ok(LineRead::Eof);
            }
            break;
        }
        let (chunk, consumed, done) = match memchr::memchr(b'\n', available) {
            Some(at) => (&available[..at], at + 1, true),
            None => (available, available.len(), false),
        };
        let room = limit.saturating_sub(buf.len());
        if chunk.len() > room {
            truncated = true;
        }
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        reader.consume(consumed);
        if done {
            break;
        }
    }
    if !truncated && buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(LineRead::Line { truncated })
}

pub(super) async fn stderr_loop<R: AsyncBufRead + Unpin>(
    mut reader: R,
    events: mpsc::Sender<(AdapterEvent, u32)>,
) {
    let mut buf = Vec::with_capacity(256);
    loop {
        match read_line_limited(&mut reader, &mut buf, MAX_STDERR_LINE_BYTES).await {
            Ok(LineRead::Line { .. }) => {
                let line = String::from_utf8_lossy(&buf).into_owned();
                tracing::debug!(target: "agentos_adapters::stderr", "{line}");
                // A dropped receiver only means nobody listens any more.
                // Stderr is bounded per line and not part of the stdout budget.
                let _ = events.send((AdapterEvent::Stderr(line), 0)).await;
            }
            Ok(LineRead::Eof) => return,
            Err(error) => {
                tracing::debug!(%error, "adapter stderr read failed");
                return;
            }
        }
    }
}

pub(super) struct ReadLoop<R> {
    pub(super) stdout: R,
    pub(super) budget: Arc<StdoutBudget>,
    pub(super) max_line: usize,
    pub(super) events: mpsc::Sender<(AdapterEvent, u32)>,
    pub(super) pending: Arc<Mutex<Pending>>,
    pub(super) writer: mpsc::WeakUnboundedSender<WriterCommand>,
    pub(super) exit: watch::Receiver<Option<ExitStatus>>,
    pub(super) stderr_task: tokio::task::JoinHandle<()>,
}

pub(super) async fn read_loop<R: AsyncBufRead + Unpin>(mut state: ReadLoop<R>) {
    let mut buf = Vec::with_capacity(4096);
    let mut exit_watch = state.exit.clone();
    let drain_deadline = async {
        let _ = exit_watch.wait_for(Option::is_some).await;
        tokio::time::sleep(EXIT_DRAIN_GRACE).await;
    };
    tokio::pin!(drain_deadline);
    let mut listening = true;
    loop {
        let read = tokio::select! {
            read = read_line_limited(&mut state.stdout, &mut buf, state.max_line) => read,
            _ = &mut drain_deadline => {
                tracing::debug!("adapter exited but its stdout stayed open; stop reading");
                break;
            }
        };
        match read {
            Ok(LineRead::Eof) => break,
            Err(error) => {
                tracing::debug!(%error, "adapter stdout read failed");
                break;
            }
            Ok(LineRead::Line { truncated: true }) => {
                let error = AdapterError::LineTooLong {
                    limit: state.max_line,
                };
                tracing::warn!(limit = state.max_line, "adapter wrote an oversize line");
                let event = AdapterEvent::ProtocolError(error);
                listening = deliver(&state, listening, event, state.max_line).await;
            }
            Ok(LineRead::Line { truncated: false }) => {
                if buf.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                if let Some(update) = acp::decode_session_update(&buf) {
                    let event = AdapterEvent::SessionUpdate(update);
                    listening = deliver(&state, listening, event, buf.len()).await;
                    continue;
                }
                match acp::decode_line(&buf) {
                    Ok(AcpMessage::Response { id, result }) => resolve(&state.pending, id, result),
                    Ok(AcpMessage::Notification { method, params }) => {
                        let event = AdapterEvent::Notification { method, params };
                        listening = deliver(&state, listening, event, buf.len()).await;
                    }
                    Ok(AcpMessage::Request { id, method, params }) => {
                        let event = AdapterEvent::Request {
                            id: IncomingRequestId(id),
                            method,
                            params,
                        };
                        listening = deliver(&state, listening, event, buf.len()).await;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "adapter wrote an invalid line");
                        let event = AdapterEvent::ProtocolError(error.into());
                        listening = deliver(&state, listening, event, buf.len()).await;
                    }
                }
            }
        }
    }

    // stderr usually ends together with stdout; bound the wait in case a
    // grandchild keeps it open.
    let _ = tokio::time::timeout(EXIT_DRAIN_GRACE, &mut state.stderr_task).await;
    state.stderr_task.abort();

    let status = {
        let mut exit = state.exit.clone();
        let status = match exit.wait_for(Option::is_some).await {
            Ok(status) => *status,
            Err(_) => None,
        };
        status
    };
    let waiting = {
        let mut pending = lock(&state.pending);
        pending.closed = true;
        std::mem::take(&mut pending.waiting)
    };
    for (_, reply) in waiting {
        let _ = reply.send(Err(AdapterError::Exited));
    }
    let (code, signal) = split_status(status);
    tracing::debug!(?code, ?signal, "adapter exited");
    let _ = state
        .events
        .send((AdapterEvent::Exited { code, signal }, 0))
        .await;
}

/// Sends an event read from `bytes` of stdout, waiting for room in the
/// channel and in the stdout budget (the reader reads no more meanwhile).
/// Once the receiver is gone, requests are answered with "method not found"
/// so the agent is not left waiting.
pub(super) async fn deliver<R>(
    state: &ReadLoop<R>,
    listening: bool,
    event: AdapterEvent,
    bytes: usize,
) -> bool {
    if listening {
        let cost = state.budget.cost(bytes);
        // The semaphore is never closed; the permits travel with the event
        // and come back when the caller takes it.
        if let Ok(permits) = state.budget.permits.acquire_many(cost).await {
            permits.forget();
        }
        state.budget.check_pressure();
        match state.events.send((event, cost)).await {
            Ok(()) => return true,
            Err(mpsc::error::SendError((event, cost))) => {
                state.budget.permits.add_permits(cost as usize);
                return reject_unheard(state, event);
            }
        }
    }
    reject_unheard(state, event)
}

pub(super) fn reject_unheard<R>(state: &ReadLoop<R>, event: AdapterEvent) -> bool {
    if let AdapterEvent::Request { id, method, .. } = event {
        if let Some(writer) = state.writer.upgrade() {
            let line = acp::encode_response(&id.0, &Err(RpcError::method_not_found(&method)));
            let _ = writer.send(WriterCommand::Line(line));
        }
    }
    false
}
