//! The host front door: length-delimited JSON-RPC 2.0 on a Unix socket
//! (mode 0600), for the host actor and operators.
//!
//! Bytes become frames in `FrameDecoder`, frames become messages in
//! `decode_message`, and messages become service calls in `dispatch.rs`. The
//! listener bounds connections with a semaphore; every request runs as its own
//! task so a long prompt never blocks other calls on the same connection; one
//! writer task per connection owns the socket's write half. Protocol faults
//! get the standard codes and leave the connection open whenever the frame
//! boundary is intact; an oversize frame is answered and the connection
//! closed, since its bytes cannot be skipped safely.

mod dispatch;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use agentos_protocol::host::{
    encode_frame, encode_notification, encode_response, methods, ErrorObject, FrameDecoder, Inbound,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{broadcast, mpsc, Semaphore};

use crate::config::HostLimits;
use crate::sessions::{Item, Notice, Sink, SinkRefusal};
use crate::vm::Vm;

pub use dispatch::error_object;

/// Requests one connection may have running at once (prompts wait for their
/// turn to end, so this is also the number of concurrent prompts a single
/// connection can drive).
const MAX_REQUESTS_IN_FLIGHT: usize = 4096;

/// Bytes of notifications a connection may have queued before its
/// subscriptions are closed with `overflow`.
const MAX_QUEUED_NOTIFICATION_BYTES: usize = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot bind {path}: {message}")]
    Bind { path: PathBuf, message: String },
}

impl HostError {
    pub fn code(&self) -> &'static str {
        match self {
            HostError::Bind { .. } => "host_bind_failed",
        }
    }
}

/// A bound host socket.
pub struct HostServer {
    listener: UnixListener,
    path: PathBuf,
    vm: Arc<Vm>,
    limits: HostLimits,
}

impl HostServer {
    /// Binds the socket with mode 0600, replacing a stale socket file.
    pub fn bind(path: &Path, vm: Arc<Vm>, limits: HostLimits) -> Result<HostServer, HostError> {
        let err = |message: String| HostError::Bind {
            path: path.to_owned(),
            message,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| err(e.to_string()))?;
        }
        if path.exists() {
            // Only a socket nobody answers on may be replaced.
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(err("another process is serving this socket".into()));
            }
            std::fs::remove_file(path).map_err(|e| err(e.to_string()))?;
        }
        // Create it private: no window in which others could connect.
        let old_umask = unsafe { libc::umask(0o177) };
        let bound = UnixListener::bind(path);
        unsafe { libc::umask(old_umask) };
        let listener = bound.map_err(|e| err(e.to_string()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| err(e.to_string()))?;
        Ok(HostServer {
            listener,
            path: path.to_owned(),
            vm,
            limits,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts connections until `shutdown` resolves.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let permits = Arc::new(Semaphore::new(self.limits.max_connections as usize));
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    let Ok(permit) = permits.clone().try_acquire_owned() else {
                        tracing::warn!("refusing a host connection: limits.host.maxConnections reached");
                        drop(stream);
                        continue;
                    };
                    let vm = self.vm.clone();
                    let max = self.limits.max_frame_bytes;
                    tokio::spawn(async move {
                        serve_connection(stream, vm, max).await;
                        drop(permit);
                    });
                }
            }
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Outbound frames of one connection, with a byte budget for notifications.
pub(crate) struct Outbox {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    queued: Arc<AtomicUsize>,
}

impl Outbox {
    fn send(&self, payload: Vec<u8>) -> bool {
        self.send_frame(encode_frame(&payload))
    }

    /// Queues a frame that already carries its length prefix.
    fn send_frame(&self, frame: Vec<u8>) -> bool {
        self.queued.fetch_add(frame.len(), Ordering::Relaxed);
        self.tx.send(frame).is_ok()
    }

    pub(crate) fn respond(&self, id: &Value, result: Result<Value, ErrorObject>) {
        let payload = match &result {
            Ok(v) => encode_response(id, Ok(v)),
            Err(e) => encode_response(id, Err(e)),
        };
        self.send(payload);
    }

    fn notify(&self, method: &str, params: &Value) -> bool {
        self.send(encode_notification(method, params))
    }
}

/// A connection as a subscription sink.
pub(crate) struct ConnectionSink {
    outbox: Outbox,
}

impl Sink for ConnectionSink {
    fn deliver(&self, subscription_id: &str, item: &Item) -> Result<(), SinkRefusal> {
        if self.outbox.queued.load(Ordering::Relaxed) > MAX_QUEUED_NOTIFICATION_BYTES {
            return Err(SinkRefusal::Overflow);
        }
        let ok = match item {
            Item::Durable(_, public) => {
                // Spliced, not re-serialized: the event is already JSON. The
                // frame is built in place: length prefix, then the payload.
                let mut frame = Vec::with_capacity(public.len() + subscription_id.len() + 100);
                frame.extend_from_slice(&[0; 4]);
                frame.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"");
                frame.extend_from_slice(methods::EVENT.as_bytes());
                frame.extend_from_slice(b"\",\"params\":{\"subscriptionId\":");
                match serde_json::to_writer(&mut frame, subscription_id) {
                    Ok(()) => {}
                    Err(_) => return Err(SinkRefusal::Closed),
                }
                frame.extend_from_slice(b",\"event\":");
                frame.extend_from_slice(public.as_bytes());
                frame.extend_from_slice(b"}}");
                let length = (frame.len() - 4) as u32;
                frame[..4].copy_from_slice(&length.to_be_bytes());
                self.outbox.send_frame(frame)
            }
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

async fn serve_connection(stream: UnixStream, vm: Arc<Vm>, max_frame_bytes: u64) {
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
    let requests = Arc::new(Semaphore::new(MAX_REQUESTS_IN_FLIGHT));
    let mut decoder = FrameDecoder::new(max_frame_bytes);
    let mut buf = vec![0u8; 64 * 1024];
    'read: loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
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
                    error.code = agentos_protocol::host::codes::INVALID_REQUEST;
                    sink.outbox.respond(&Value::Null, Err(error));
                    break 'read;
                }
            }
        }
    }
    let dyn_sink: Arc<dyn Sink> = sink.clone();
    vm.sessions.hub().drop_sink(&dyn_sink);
    notice_task.abort();
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
                let result =
                    dispatch::dispatch(&vm, &sink, &method, params, &mut after_reply).await;
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
