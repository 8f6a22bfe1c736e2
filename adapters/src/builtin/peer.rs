//! The builtin agent's end of an ACP connection: newline-delimited JSON-RPC
//! over any byte stream (the child's stdio, or an in-memory duplex).
//!
//! A line goes out from the task that sends it when no line waits before it
//! and the output is free: it is copied whole into the output's buffer
//! (shorter than the buffer, so one copy or none: a sender dropped on the
//! way leaves no half line) and flushed, one task hop fewer for each
//! streamed delta. Otherwise it is queued for the writer task, which
//! batches whatever is queued into one flush; the queue is bounded in lines
//! and in bytes, and a sender writing itself waits for the output to drain,
//! so an agent whose client stops reading waits instead of growing.
//!
//! Our requests to the client wait for their answer in `pending`; when the
//! input ends every waiting request fails, so no turn hangs on a client that
//! went away.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use agentos_protocol::acp::{methods, RpcError};
use serde_json::{json, Value};
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

/// Lines queued for the client, at most, and their bytes at most (a line
/// longer than that waits for the whole budget alone).
const OUTBOX_LINES: usize = 1024;
const OUTBOX_BYTES: usize = 16 * 1024 * 1024;
/// The output's buffer (tokio's default). A line shorter than it, sent
/// while no line waits in the queue, is copied into it whole by the sender
/// itself, without a hop to the writer task.
const OUTPUT_BUFFER: usize = 8 * 1024;

type Output = BufWriter<Box<dyn AsyncWrite + Unpin + Send>>;

type Reply = oneshot::Sender<Result<Value, RpcError>>;

#[derive(Default)]
struct Pending {
    waiting: HashMap<u64, Reply>,
    closed: bool,
}

/// A cheap handle on the connection; clones share it.
#[derive(Clone)]
pub struct Peer {
    out: mpsc::Sender<(String, OwnedSemaphorePermit)>,
    /// Bytes of the queued lines, against [`OUTBOX_BYTES`].
    room: Arc<Semaphore>,
    next_id: Arc<AtomicU64>,
    pending: Arc<Mutex<Pending>>,
    output: Arc<tokio::sync::Mutex<Output>>,
    /// Lines queued and not yet written.
    queued: Arc<AtomicUsize>,
}

fn lock(pending: &Mutex<Pending>) -> MutexGuard<'_, Pending> {
    // The map stays consistent whatever panicked while holding it.
    pending
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Peer {
    /// Starts the writer task on `output`.
    pub fn start<W>(output: W) -> Peer
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (out, lines) = mpsc::channel(OUTBOX_LINES);
        let boxed: Box<dyn AsyncWrite + Unpin + Send> = Box::new(output);
        let output = Arc::new(tokio::sync::Mutex::new(BufWriter::with_capacity(
            OUTPUT_BUFFER,
            boxed,
        )));
        let queued = Arc::new(AtomicUsize::new(0));
        tokio::spawn(write_loop(output.clone(), lines, queued.clone()));
        Peer {
            out,
            room: Arc::new(Semaphore::new(OUTBOX_BYTES)),
            next_id: Arc::new(AtomicU64::new(1)),
            pending: Arc::new(Mutex::new(Pending::default())),
            output,
            queued,
        }
    }

    async fn send(&self, message: Value) {
        self.send_line(message.to_string()).await;
    }

    async fn send_line(&self, mut line: String) {
        line.push('\n');
        // Written here only while no line is queued or being written: the
        // writer task counts a line off after writing it, under the lock.
        if line.len() < OUTPUT_BUFFER && self.queued.load(Ordering::SeqCst) == 0 {
            if let Ok(mut output) = self.output.try_lock() {
                if self.queued.load(Ordering::SeqCst) == 0 {
                    // The buffer takes the line whole (after writing out
                    // what it held, if it must). A flush cut short keeps
                    // the rest for the next write or flush.
                    if output.write_all(line.as_bytes()).await.is_ok() {
                        let _ = output.flush().await;
                    }
                    return;
                }
            }
        }
        let cost = u32::try_from(line.len().clamp(1, OUTBOX_BYTES)).unwrap_or(u32::MAX);
        // A closed output means the client is gone; the read side ends the
        // agent, so there is nobody to tell.
        let Ok(permit) = Arc::clone(&self.room).acquire_many_owned(cost).await else {
            return;
        };
        self.queued.fetch_add(1, Ordering::SeqCst);
        if self.out.send((line, permit)).await.is_err() {
            self.queued.fetch_sub(1, Ordering::SeqCst);
        }
    }

    pub async fn notify(&self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// A notification whose params are written straight from `params`,
    /// with no JSON tree in between (a streamed delta's, dozens per reply).
    pub async fn notify_typed<P: serde::Serialize>(&self, method: &str, params: &P) {
        #[derive(serde::Serialize)]
        struct Envelope<'a, P> {
            jsonrpc: &'static str,
            method: &'a str,
            params: &'a P,
        }
        let envelope = Envelope {
            jsonrpc: "2.0",
            method,
            params,
        };
        match serde_json::to_string(&envelope) {
            Ok(line) => self.send_line(line).await,
            Err(error) => tracing::warn!(%error, method, "a notification could not be written"),
        }
    }

    /// `session/update` of `session` with `update`.
    pub async fn session_update(&self, session: &str, update: Value) {
        self.notify(
            methods::SESSION_UPDATE,
            json!({"sessionId": session, "update": update}),
        )
        .await;
    }

    pub async fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        let message = match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        };
        self.send(message).await;
    }

    /// Sends a request and waits for the client's answer.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&self.pending);
            if pending.closed {
                return Err(RpcError::internal("the client connection is closed"));
            }
            pending.waiting.insert(id, tx);
        }
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        rx.await
            .unwrap_or_else(|_| Err(RpcError::internal("the client connection is closed")))
    }

    /// Hands an answer from the client to the request waiting for it.
    pub fn resolve(&self, id: &Value, mut message: Value) {
        let Some(id) = id.as_u64() else {
            return;
        };
        let Some(reply) = lock(&self.pending).waiting.remove(&id) else {
            return;
        };
        let result = match message.get_mut("error").map(Value::take) {
            Some(error) => Err(serde_json::from_value::<RpcError>(error.clone())
                .unwrap_or_else(|_| RpcError::internal(error.to_string()))),
            None => Ok(message
                .get_mut("result")
                .map(Value::take)
                .unwrap_or(Value::Null)),
        };
        let _ = reply.send(result);
    }

    /// The input ended: every waiting request fails, and later ones fail at
    /// once.
    pub fn close(&self) {
        let mut pending = lock(&self.pending);
        pending.closed = true;
        for (_, reply) in pending.waiting.drain() {
            let _ = reply.send(Err(RpcError::internal("the client connection is closed")));
        }
    }
}

async fn write_loop(
    output: Arc<tokio::sync::Mutex<Output>>,
    mut lines: mpsc::Receiver<(String, OwnedSemaphorePermit)>,
    queued: Arc<AtomicUsize>,
) {
    while let Some(line) = lines.recv().await {
        let mut out = output.lock().await;
        let mut next = Some(line);
        // Each line's permit goes back once it is written.
        while let Some((line, _permit)) = next.take() {
            if out.write_all(line.as_bytes()).await.is_err() {
                return;
            }
            queued.fetch_sub(1, Ordering::SeqCst);
            next = lines.try_recv().ok();
        }
        if out.flush().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncBufReadExt, BufReader};

    use super::*;

    /// Reads `n` lines and parses each as JSON.
    async fn read_lines<R: tokio::io::AsyncRead + Unpin>(input: R, n: usize) -> Vec<Value> {
        let mut lines = BufReader::new(input).lines();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
                .await
                .expect("a line in time")
                .expect("readable")
                .expect("not the end");
            out.push(serde_json::from_str(&line).expect("a whole JSON line"));
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lines_of_many_senders_arrive_whole_and_each_senders_in_order() {
        const SENDERS: u64 = 8;
        const EACH: u64 = 200;
        // A pipe far smaller than what is sent: senders wait on it, some
        // while writing themselves, some behind the queue.
        let (ours, theirs) = tokio::io::duplex(512);
        let peer = Peer::start(theirs);
        let reader = tokio::spawn(read_lines(ours, (SENDERS * EACH) as usize));
        let mut senders = Vec::new();
        for sender in 0..SENDERS {
            let peer = peer.clone();
            senders.push(tokio::spawn(async move {
                for i in 0..EACH {
                    // Every seventh line is longer than the output's
                    // buffer, so it always takes the queue.
                    let filler = if i % 7 == 0 {
                        "x".repeat(OUTPUT_BUFFER + 100)
                    } else {
                        String::new()
                    };
                    peer.notify(
                        "test/line",
                        json!({"sender": sender, "i": i, "filler": filler}),
                    )
                    .await;
                }
            }));
        }
        for sender in senders {
            sender.await.expect("sender");
        }
        let lines = reader.await.expect("reader");
        let mut next = [0u64; SENDERS as usize];
        for line in lines {
            let sender = line["params"]["sender"].as_u64().expect("sender") as usize;
            assert_eq!(line["params"]["i"], next[sender], "in the sender's order");
            next[sender] += 1;
        }
        assert!(next.iter().all(|&n| n == EACH), "every line once: {next:?}");
    }

    #[tokio::test]
    async fn a_sender_dropped_while_the_output_is_full_leaves_no_half_line() {
        let (ours, theirs) = tokio::io::duplex(64);
        let peer = Peer::start(theirs);
        // Nobody reads yet: the flush cannot finish, and the send is
        // dropped while it waits.
        let first = peer.notify("test/line", json!({"n": 1, "text": "a".repeat(2000)}));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), first)
                .await
                .is_err(),
            "the send waits for a reader"
        );
        let reader = tokio::spawn(read_lines(ours, 2));
        peer.notify("test/line", json!({"n": 2})).await;
        let lines = reader.await.expect("reader");
        assert_eq!(
            lines[0]["params"]["n"], 1,
            "the dropped sender's line is whole"
        );
        assert_eq!(
            lines[0]["params"]["text"].as_str().map(str::len),
            Some(2000)
        );
        assert_eq!(lines[1]["params"]["n"], 2);
    }
}
