//! One host connection: a reader that cuts frames and starts one task per
//! request (bounded per connection), a writer task that owns the socket's
//! write half and coalesces queued frames, the connection's outbox with its
//! byte count, its subscriptions (as a hub sink) and the VM-wide notices.
//!
//! On shutdown the connection tells its client (`lifecycle/shutdown`),
//! stops reading, waits for its requests to be answered, lets the outbox
//! drain and closes.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use agentos_protocol::host::{
    codes, event_notification_frame, methods, notification_frame, response_frame, ErrorObject,
    FrameDecoder, Inbound,
};
use agentos_protocol::ErrorCode;
use serde_json::{json, value::RawValue, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{broadcast, mpsc, watch, Semaphore};

use super::dispatch;
use crate::sessions::{Item, Notice, Sink, SinkRefusal};
use crate::vm::Vm;

/// Requests one connection may have running at once (prompts wait for their
/// turn to end, so this is also the number of concurrent prompts a single
/// connection can drive).
const MAX_REQUESTS_IN_FLIGHT: u32 = 4096;

/// Bytes of notifications a connection may have queued before its
/// subscriptions are closed with `overflow`.
const MAX_QUEUED_NOTIFICATION_BYTES: usize = 256 << 20;

/// Outbound frames of one connection, with a byte count for notifications.
pub(super) struct Outbox {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    queued: Arc<AtomicUsize>,
}

impl Outbox {
    /// Queues a whole frame (length prefix included).
    fn send_frame(&self, frame: Vec<u8>) -> bool {
        self.queued.fetch_add(frame.len(), Ordering::Relaxed);
        self.tx.send(frame).is_ok()
    }

    fn respond(&self, id: &Value, result: Result<Box<RawValue>, ErrorObject>) {
        let frame = match &result {
            Ok(v) => response_frame(id, Ok(v)),
            Err(e) => response_frame(id, Err(e)),
        };
        self.send_frame(frame);
    }

    fn notify(&self, method: &str, params: &Value) -> bool {
        self.send_frame(notification_frame(method, params))
    }
}

/// A connection as a subscription sink.
pub(super) struct ConnectionSink {
    outbox: Outbox,
}

impl Sink for ConnectionSink {
    fn deliver(&self, subscription_id: &str, item: &Item) -> Result<(), SinkRefusal> {
        if self.outbox.queued.load(Ordering::Relaxed) > MAX_QUEUED_NOTIFICATION_BYTES {
            return Err(SinkRefusal::Overflow);
        }
        let ok = match item {
            // Spliced, not re-serialized: the event is already JSON.
            Item::Durable(_, public) => self
                .outbox
                .send_frame(event_notification_frame(subscription_id, public)),
            Item::Ephemeral {
                session_id,
                after_sequence,
                update,
            } => self.outbox.notify(
                methods::UPDATE,
                &json!({
                    "subscriptionId": subscription_id,
                    "sessionId": &**session_id,
                    "afterSequence": after_sequence,
                    "update": &**update,
                }),
            ),
        };
        if ok {
            Ok(())
        } else {
            Err(SinkRefusal::Closed)
        }
    }

    fn ended(&self, subscription_id: &str, session_id: &str, reason: &str, last_sequence: u64) {
        self.outbox.notify(
            methods::SUBSCRIPTION_ENDED,
            &json!({
                "subscriptionId": subscription_id,
                "sessionId": session_id,
                "reason": reason,
                "lastSequence": last_sequence,
            }),
        );
    }
}

static CONNECTIONS: AtomicU64 = AtomicU64::new(1);

/// Serves one connection until the client leaves, the stream breaks, or
/// `shutdown` turns true.
pub(super) async fn serve_connection(
    stream: UnixStream,
    vm: Arc<Vm>,
    max_frame_bytes: u64,
    mut shutdown: watch::Receiver<bool>,
) {
    let connection = CONNECTIONS.fetch_add(1, Ordering::Relaxed);
    let (mut reader, mut writer) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let queued = Arc::new(AtomicUsize::new(0));
    let writer_queued = queued.clone();
    let writer_task = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            let mut batch = frame;
            // Coalesce what is already waiting into one write.
            while batch.len() < (1 << 20) {
                match rx.try_recv() {
                    Ok(more) => batch.extend_from_slice(&more),
                    Err(_) => break,
                }
            }
            let written = batch.len();
            if writer.write_all(&batch).await.is_err() {
                break;
            }
            writer_queued.fetch_sub(written, Ordering::Relaxed);
        }
        let _ = writer.shutdown().await;
    });
    let sink: Arc<ConnectionSink> = Arc::new(ConnectionSink {
        outbox: Outbox {
            tx: tx.clone(),
            queued: queued.clone(),
        },
    });
    let notice_outbox = Outbox {
        tx: tx.clone(),
        queued: queued.clone(),
    };
    let mut notices = vm.sessions.notices();
    let notice_task = tokio::spawn(async move {
        loop {
            match notices.recv().await {
                Ok(notice) => {
                    let (method, params) = notice_json(&notice);
                    if !notice_outbox.notify(method, &params) {
                        break;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(
                        connection,
                        skipped = n,
                        "host connection lagged behind lifecycle notices"
                    );
                }
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    });
    let requests = Arc::new(Semaphore::new(MAX_REQUESTS_IN_FLIGHT as usize));
    let mut decoder = FrameDecoder::new(max_frame_bytes);
    let mut buf = vec![0u8; 64 * 1024];
    let mut shutting_down = *shutdown.borrow();
    'read: while !shutting_down {
        let n = tokio::select! {
            read = reader.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = shutdown.wait_for(|down| *down) => {
                shutting_down = true;
                break;
            }
        };
        decoder.push(&buf[..n]);
        loop {
            match decoder.next_frame() {
                Ok(None) => break,
                Ok(Some(payload)) => {
                    handle_frame(&vm, &sink, &requests, &payload).await;
                }
                Err(e) => {
                    let mut extra = serde_json::Map::new();
                    extra.insert("setting".into(), json!("limits.host.maxFrameBytes"));
                    let mut error = ErrorObject::application(e.code(), e.to_string(), extra);
                    error.code = codes::INVALID_REQUEST;
                    sink.outbox.respond(&Value::Null, Err(error));
                    break 'read;
                }
            }
        }
    }
    if shutting_down {
        sink.outbox.notify(
            methods::SHUTDOWN,
            &json!({"reason": ErrorCode::VmShutdown.as_str()}),
        );
        // Every request still running is answered (or failed by the
        // sessions' shutdown) before the connection closes.
        let _ = requests.acquire_many(MAX_REQUESTS_IN_FLIGHT).await;
    }
    let dyn_sink: Arc<dyn Sink> = sink.clone();
    vm.sessions.hub().drop_sink(&dyn_sink);
    notice_task.abort();
    let _ = notice_task.await;
    drop(sink);
    drop(dyn_sink);
    drop(tx);
    let _ = writer_task.await;
}

async fn handle_frame(
    vm: &Arc<Vm>,
    sink: &Arc<ConnectionSink>,
    requests: &Arc<Semaphore>,
    payload: &[u8],
) {
    match agentos_protocol::host::decode_message(payload) {
        Inbound::Request { id, method, params } => {
            // Bounded concurrency per connection: when every slot is busy the
            // reader waits, and the client feels it as socket backpressure.
            let Ok(permit) = requests.clone().acquire_owned().await else {
                return;
            };
            let vm = vm.clone();
            let sink = sink.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let mut after_reply = None;
                let subscriber: Arc<dyn Sink> = sink.clone();
                let result =
                    dispatch::dispatch(&vm, &subscriber, &method, params, &mut after_reply).await;
                sink.outbox.respond(&id, result);
                if let Some(start) = after_reply {
                    let _ = start.send(());
                }
            });
        }
        // The host sends no notifications we act on; responses to us are
        // not expected either.
        Inbound::Notification { .. } | Inbound::Response { .. } => {}
        Inbound::Invalid { id, error } => sink.outbox.respond(&id, Err(error)),
    }
}

fn notice_json(notice: &Notice) -> (&'static str, Value) {
    match notice {
        Notice::AgentStderr { session_id, line } => (
            methods::AGENT_STDERR,
            json!({"sessionId": session_id, "line": line}),
        ),
        Notice::AgentExited {
            session_id,
            code,
            signal,
        } => (
            methods::AGENT_EXITED,
            json!({"sessionId": session_id, "exitCode": code, "signal": signal, "restart": "not_attempted"}),
        ),
        Notice::KeepAwake {
            held,
            holders,
            session_id,
            prompt_id,
        } => (
            methods::KEEP_AWAKE,
            json!({"held": held, "holders": holders, "sessionId": session_id, "promptId": prompt_id}),
        ),
    }
}
