//! The builtin agent's end of an ACP connection: newline-delimited JSON-RPC
//! over any byte stream (the child's stdio, or an in-memory duplex).
//!
//! One writer task owns the output and batches whatever is queued into one
//! flush; the queue is bounded in lines and in bytes, so an agent whose
//! client stops reading waits instead of growing. Our requests to the client wait for
//! their answer in `pending`; when the input ends every waiting request
//! fails, so no turn hangs on a client that went away.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use agentos_protocol::acp::{methods, RpcError};
use serde_json::{json, Value};
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

/// Lines queued for the client, at most, and their bytes at most (a line
/// longer than that waits for the whole budget alone).
const OUTBOX_LINES: usize = 1024;
const OUTBOX_BYTES: usize = 16 * 1024 * 1024;

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
        tokio::spawn(write_loop(output, lines));
        Peer {
            out,
            room: Arc::new(Semaphore::new(OUTBOX_BYTES)),
            next_id: Arc::new(AtomicU64::new(1)),
            pending: Arc::new(Mutex::new(Pending::default())),
        }
    }

    async fn send(&self, message: Value) {
        self.send_line(message.to_string()).await;
    }

    async fn send_line(&self, line: String) {
        let cost = u32::try_from(line.len().clamp(1, OUTBOX_BYTES)).unwrap_or(u32::MAX);
        // A closed output means the client is gone; the read side ends the
        // agent, so there is nobody to tell.
        let Ok(permit) = Arc::clone(&self.room).acquire_many_owned(cost).await else {
            return;
        };
        let _ = self.out.send((line, permit)).await;
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
    pub fn resolve(&self, message: &Value) {
        let Some(id) = message.get("id").and_then(Value::as_u64) else {
            return;
        };
        let Some(reply) = lock(&self.pending).waiting.remove(&id) else {
            return;
        };
        let result = match message.get("error") {
            Some(error) => Err(serde_json::from_value::<RpcError>(error.clone())
                .unwrap_or_else(|_| RpcError::internal(error.to_string()))),
            None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
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

async fn write_loop<W>(output: W, mut lines: mpsc::Receiver<(String, OwnedSemaphorePermit)>)
where
    W: AsyncWrite + Unpin,
{
    let mut out = BufWriter::new(output);
    while let Some(line) = lines.recv().await {
        let mut next = Some(line);
        // Each line's permit goes back once it is written.
        while let Some((line, _permit)) = next.take() {
            if out.write_all(line.as_bytes()).await.is_err() || out.write_all(b"\n").await.is_err()
            {
                return;
            }
            next = lines.try_recv().ok();
        }
        if out.flush().await.is_err() {
            return;
        }
    }
}
