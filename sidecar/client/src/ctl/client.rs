//! A host-protocol client: requests with ids matched to responses, and a
//! stream of notifications. Used by the operator CLI and by tests.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agentos_protocol::host::{
    decode_message, encode_frame, encode_request, ErrorObject, FrameDecoder, Inbound,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no sidecar socket at {0} (is the sidecar running? check --socket)")]
    NoSocket(String),
    #[error("the sidecar at {0} refused the connection (stale socket or sidecar not running)")]
    Refused(String),
    #[error("cannot connect to {path}: {message}")]
    Connect { path: String, message: String },
    #[error("the connection to the sidecar closed")]
    Closed,
    #[error("the request cannot be framed: {0}")]
    FrameTooLarge(String),
    #[error("{}", .0.message)]
    Rpc(ErrorObject),
}

impl ClientError {
    pub fn code(&self) -> String {
        match self {
            ClientError::NoSocket(_) => "no_socket".into(),
            ClientError::Refused(_) => "connection_refused".into(),
            ClientError::Connect { .. } => "connect_failed".into(),
            ClientError::Closed => "connection_closed".into(),
            ClientError::FrameTooLarge(_) => "frame_too_large".into(),
            ClientError::Rpc(e) => e
                .data_code()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("rpc_{}", e.code)),
        }
    }
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, ErrorObject>>>>>;

/// A connected client. Notifications arrive on the receiver returned by
/// `connect`.
#[derive(Clone)]
pub struct HostClient {
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    pending: Pending,
    next_id: Arc<AtomicU64>,
}

/// A notification from the sidecar: method and params.
pub type Notification = (String, Value);

impl HostClient {
    pub async fn connect(
        path: &Path,
    ) -> Result<(HostClient, mpsc::UnboundedReceiver<Notification>), ClientError> {
        let display = path.display().to_string();
        let stream = UnixStream::connect(path)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => ClientError::NoSocket(display.clone()),
                std::io::ErrorKind::ConnectionRefused => ClientError::Refused(display.clone()),
                _ => ClientError::Connect {
                    path: display.clone(),
                    message: e.to_string(),
                },
            })?;
        let (mut reader, writer) = stream.into_split();
        let pending: Pending = Arc::default();
        let (notes_tx, notes_rx) = mpsc::unbounded_channel();
        let reader_pending = pending.clone();
        tokio::spawn(async move {
            let mut decoder = FrameDecoder::new(u64::from(u32::MAX));
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                decoder.push(&buf[..n]);
                while let Ok(Some(frame)) = decoder.next_frame() {
                    match decode_message(&frame) {
                        Inbound::Response { id, result } => {
                            let waiter = id
                                .as_u64()
                                .and_then(|id| reader_pending.lock().ok()?.remove(&id));
                            if let Some(waiter) = waiter {
                                let _ = waiter.send(result);
                            }
                        }
                        Inbound::Notification { method, params } => {
                            let _ = notes_tx.send((method, params));
                        }
                        Inbound::Invalid { id, error } => {
                            // An error answer without a usable id.
                            let _ = notes_tx
                                .send(("$/error".into(), json!({"id": id, "error": error})));
                        }
                        Inbound::Request { .. } => {}
                    }
                }
            }
            if let Ok(mut pending) = reader_pending.lock() {
                pending.clear();
            }
        });
        Ok((
            HostClient {
                writer: Arc::new(tokio::sync::Mutex::new(writer)),
                pending,
                next_id: Arc::new(AtomicU64::new(1)),
            },
            notes_rx,
        ))
    }

    /// Sends raw bytes (tests use this for malformed input).
    pub async fn send_raw(&self, bytes: &[u8]) -> Result<(), ClientError> {
        let mut writer = self.writer.lock().await;
        writer
            .write_all(bytes)
            .await
            .map_err(|_| ClientError::Closed)
    }

    pub async fn call(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id, tx);
        }
        let frame = match encode_frame(&encode_request(&json!(id), method, &params)) {
            Ok(frame) => frame,
            Err(e) => {
                if let Ok(mut pending) = self.pending.lock() {
                    pending.remove(&id);
                }
                return Err(ClientError::FrameTooLarge(e.to_string()));
            }
        };
        self.send_raw(&frame).await?;
        match rx.await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ClientError::Rpc(e)),
            Err(_) => Err(ClientError::Closed),
        }
    }
}
