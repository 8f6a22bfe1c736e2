//! Reading the adapter: stdout lines up to a bound, classified and handed
//! on in arrival order (answers resolve our pending requests; everything
//! else becomes an event), and stderr lines as events and logs.

use std::process::ExitStatus;
use std::sync::{Arc, Mutex};

use super::*;

/// A line buffer larger than this is dropped once its line is handled.
const SHRINK_LINE_ABOVE: usize = 1 << 20;

#[derive(Debug, PartialEq, Eq)]
pub(super) enum LineRead {
    /// A complete line is in the buffer; `truncated` when bytes beyond the
    /// limit were dropped, `refused` when the process's stdout budget had
    /// no room for it in time (the line is dropped too).
    Line {
        truncated: bool,
        refused: bool,
    },
    Eof,
}

/// What a line being read holds of the process's stdout budget.
pub(super) struct LineCharge<'a> {
    pub(super) process: &'a ProcessBudget,
    pub(super) held: usize,
}

/// Reads one line into `buf` (without the newline and a trailing `\r`),
/// keeping at most `limit` bytes and discarding the rest of an overlong line
/// so the next call starts at the next line. With a `charge`, what the line
/// keeps past [`FREE_LINE_BYTES`] is taken from the process's budget first.
pub(super) async fn read_line_limited<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
    mut charge: Option<&mut LineCharge<'_>>,
) -> std::io::Result<LineRead> {
    buf.clear();
    let mut truncated = false;
    let mut refused = false;
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
        let room = if refused {
            0
        } else {
            limit.saturating_sub(buf.len())
        };
        if chunk.len() > room && !refused {
            truncated = true;
        }
        let keep = chunk.len().min(room);
        if let Some(charge) = charge.as_deref_mut() {
            let need = (buf.len() + keep).saturating_sub(FREE_LINE_BYTES);
            if need > charge.held {
                let more = need - charge.held;
                // Copied out: the reader's buffer cannot stay borrowed
                // across the wait.
                let kept = chunk[..keep].to_vec();
                reader.consume(consumed);
                if charge.process.take_stdout(more).await {
                    charge.held += more;
                    buf.extend_from_slice(&kept);
                } else {
                    refused = true;
                    truncated = false;
                }
                if done {
                    break;
                }
                continue;
            }
        }
        buf.extend_from_slice(&chunk[..keep]);
        reader.consume(consumed);
        if done {
            break;
        }
    }
    if !truncated && !refused && buf.last() == Some(&b'\r') {
        buf.pop();
    }
    if refused {
        buf.clear();
    }
    Ok(LineRead::Line { truncated, refused })
}

pub(super) async fn stderr_loop<R: AsyncBufRead + Unpin>(
    mut reader: R,
    events: mpsc::Sender<Queued>,
) {
    let mut buf = Vec::with_capacity(256);
    loop {
        match read_line_limited(&mut reader, &mut buf, MAX_STDERR_LINE_BYTES, None).await {
            Ok(LineRead::Line { .. }) => {
                let line = String::from_utf8_lossy(&buf).into_owned();
                tracing::debug!(target: "agentos_adapters::stderr", "{line}");
                // A dropped receiver only means nobody listens any more.
                // Stderr is bounded per line and not part of the stdout budget.
                let _ = events
                    .send(Box::new((AdapterEvent::Stderr(line), 0, 0)))
                    .await;
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
    pub(super) process: Arc<ProcessBudget>,
    pub(super) max_line: usize,
    pub(super) events: mpsc::Sender<Queued>,
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
    let process = state.process.clone();
    let mut charge = LineCharge {
        process: &process,
        held: 0,
    };
    loop {
        if buf.capacity() > SHRINK_LINE_ABOVE {
            // A long line went through: its room is not kept.
            buf = Vec::with_capacity(4096);
        }
        let read = tokio::select! {
            read = read_line_limited(&mut state.stdout, &mut buf, state.max_line, Some(&mut charge)) => read,
            _ = &mut drain_deadline => {
                tracing::debug!("adapter exited but its stdout stayed open; stop reading");
                break;
            }
        };
        // What the line holds of the process's budget travels with its
        // event, or is given back now.
        let held = std::mem::take(&mut charge.held);
        match read {
            Ok(LineRead::Eof) => {
                process.give_stdout(held);
                break;
            }
            Err(error) => {
                process.give_stdout(held);
                tracing::debug!(%error, "adapter stdout read failed");
                break;
            }
            Ok(LineRead::Line { refused: true, .. }) => {
                process.give_stdout(held);
                let limit = process.stdout_limit();
                tracing::warn!(
                    limit,
                    "an adapter line found no room in the process-wide stdout budget"
                );
                let event = AdapterEvent::ProtocolError(AdapterError::StdoutBudget { limit });
                listening = deliver(&state, listening, event, 0, 0).await;
            }
            Ok(LineRead::Line {
                truncated: true, ..
            }) => {
                process.give_stdout(held);
                let error = AdapterError::LineTooLong {
                    limit: state.max_line,
                };
                tracing::warn!(limit = state.max_line, "adapter wrote an oversize line");
                let event = AdapterEvent::ProtocolError(error);
                listening = deliver(&state, listening, event, 0, 0).await;
            }
            Ok(LineRead::Line { .. }) => {
                if buf.iter().all(u8::is_ascii_whitespace) {
                    process.give_stdout(held);
                    continue;
                }
                if let Some(update) = acp::decode_session_update(&buf) {
                    let event = AdapterEvent::SessionUpdate(update);
                    listening = deliver(&state, listening, event, buf.len(), held).await;
                    continue;
                }
                match acp::decode_line(&buf) {
                    Ok(AcpMessage::Response { id, result }) => {
                        process.give_stdout(held);
                        resolve(&state.pending, id, result)
                    }
                    Ok(AcpMessage::Notification { method, params }) => {
                        let event = AdapterEvent::Notification { method, params };
                        listening = deliver(&state, listening, event, buf.len(), held).await;
                    }
                    Ok(AcpMessage::Request { id, method, params }) => {
                        let event = AdapterEvent::Request {
                            id: IncomingRequestId(id),
                            method,
                            params,
                        };
                        listening = deliver(&state, listening, event, buf.len(), held).await;
                    }
                    Err(error) => {
                        process.give_stdout(held);
                        tracing::warn!(%error, "adapter wrote an invalid line");
                        let event = AdapterEvent::ProtocolError(error.into());
                        listening = deliver(&state, listening, event, 0, 0).await;
                    }
                }
            }
        }
    }
    // A line cut short by the drain deadline gives back what it took.
    process.give_stdout(std::mem::take(&mut charge.held));

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
        .send(Box::new((AdapterEvent::Exited { code, signal }, 0, 0)))
        .await;
}

/// Sends an event read from `bytes` of stdout, holding `held` bytes of the
/// process's stdout budget until it is taken, waiting for room in the
/// channel and in the stdout budget (the reader reads no more meanwhile).
/// Once the receiver is gone, requests are answered with "method not found"
/// so the agent is not left waiting.
pub(super) async fn deliver<R>(
    state: &ReadLoop<R>,
    listening: bool,
    event: AdapterEvent,
    bytes: usize,
    held: usize,
) -> bool {
    if listening {
        // The whole event holds its bytes of the process's budget: what a
        // long line took while it was read, and the rest now. An event the
        // budget has no room for in time is not delivered.
        let mut held = held;
        let rest = bytes.saturating_sub(held);
        if rest > 0 {
            if state.process.take_stdout(rest).await {
                held += rest;
            } else {
                state.process.give_stdout(held);
                let limit = state.process.stdout_limit();
                tracing::warn!(
                    limit,
                    "an adapter event found no room in the process-wide stdout budget"
                );
                let refused = AdapterEvent::ProtocolError(AdapterError::StdoutBudget { limit });
                reject_unheard(state, event);
                return Box::pin(deliver(state, listening, refused, 0, 0)).await;
            }
        }
        let cost = state.budget.cost(bytes);
        // The semaphore is never closed; the permits travel with the event
        // and come back when the caller takes it.
        if let Ok(permits) = state.budget.permits.acquire_many(cost).await {
            permits.forget();
        }
        state.budget.check_pressure();
        match state.events.send(Box::new((event, cost, held))).await {
            Ok(()) => return true,
            Err(mpsc::error::SendError(queued)) => {
                let (event, cost, held) = *queued;
                state.budget.permits.add_permits(cost as usize);
                state.process.give_stdout(held);
                return reject_unheard(state, event);
            }
        }
    }
    state.process.give_stdout(held);
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
