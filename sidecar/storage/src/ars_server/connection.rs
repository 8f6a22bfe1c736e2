//! One client connection of the reference server: frames in, lease rules
//! that need no database state checked here, requests handed to the SQLite
//! thread, and responses written back through a byte-bounded outbox (a
//! client that stops reading is closed, not buffered for).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use agentos_protocol::ars::{
    self, ArsError, ClientFrame, FrameDecoder, GoAway, GoAwayReason, HelloOk, InvalidLeaseKey,
    QueueFull, RequestPayload, Response, ResponsePayload, ServerFrame, ServerHello,
};
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::{mpsc as tmpsc, watch};

use super::lease_keys::{KeyRefusal, LeaseKeys, UsedKeys};
use super::outbox::{Outboxes, Outgoing, Unread};
use super::worker::{Job, Req};
use super::Shared;

/// How much a connection asks the socket for at once.
const READ_CHUNK: usize = 64 * 1024;

/// A write is flushed once this much is coalesced, even if more is queued.
const WRITE_BATCH: usize = 1024 * 1024;

enum ReadOutcome {
    Frame(Bytes),
    Eof,
    TooLarge,
}

async fn read_frame(
    rd: &mut OwnedReadHalf,
    buf: &mut BytesMut,
    decoder: &FrameDecoder,
) -> std::io::Result<ReadOutcome> {
    loop {
        match decoder.decode(buf) {
            Ok(Some(payload)) => return Ok(ReadOutcome::Frame(payload)),
            Ok(None) => {}
            Err(_) => return Ok(ReadOutcome::TooLarge),
        }
        if rd.read_buf(buf).await? == 0 {
            return Ok(ReadOutcome::Eof);
        }
    }
}

pub(super) async fn serve_connection(
    stream: UnixStream,
    conn_id: u64,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (mut rd, mut wr) = stream.into_split();
    let decoder = FrameDecoder::new(shared.options.max_frame_bytes);
    let mut buf = BytesMut::with_capacity(READ_CHUNK);

    let hello = tokio::time::timeout(
        shared.options.handshake_timeout,
        read_frame(&mut rd, &mut buf, &decoder),
    )
    .await;
    let reply = match hello {
        Ok(Ok(ReadOutcome::Frame(payload))) => match ars::decode_client_hello(payload) {
            Ok(_) => ServerHello::HelloOk(HelloOk {
                max_frame_bytes: shared.options.max_frame_bytes,
            }),
            Err(ArsError::UnsupportedVersion { .. }) => ServerHello::HelloRejectUnsupportedVersion,
            Err(_) => return,
        },
        _ => return,
    };
    let Ok(frame) = ars::server_hello_frame(&reply) else {
        return;
    };
    if wr.write_all(&frame).await.is_err() || !matches!(reply, ServerHello::HelloOk(_)) {
        let _ = wr.shutdown().await;
        return;
    }

    let in_flight: Arc<Mutex<HashSet<u32>>> = Arc::default();
    let (out_tx, out_rx) = tmpsc::unbounded_channel();
    let out = shared
        .outboxes
        .open(conn_id, out_tx, shared.options.max_outbox_bytes);
    let writer = tokio::spawn(write_loop(
        wr,
        out_rx,
        in_flight.clone(),
        shared.options.max_frame_bytes,
        (out.unread.clone(), out.all.clone()),
    ));
    // The inbound budget taken for the large frame at the front of `buf`,
    // whole, before the rest of it is read; it travels with its request.
    let mut inbound: Option<agentos_base::budget::Held> = None;
    let keys: LeaseKeys = Arc::new(Mutex::new(UsedKeys::new(
        shared.options.max_leases_per_connection,
    )));
    let mut overflowed = false;
    let mut accepted: Vec<Req> = Vec::new();
    'serve: loop {
        // Take every complete frame the last read brought in and hand the
        // accepted ones to the SQLite thread as one job: one wake-up per read
        // rather than per request.
        let mut go_away = None;
        loop {
            if inbound.is_none() {
                match decoder.next_length(&buf) {
                    Some(len) if len as usize > READ_CHUNK && len <= decoder.max() => {
                        let taken = shared.inbound.take(len as usize);
                        tokio::select! {
                            held = taken => inbound = Some(held),
                            _ = shutdown.changed() => break 'serve,
                        }
                    }
                    _ => {}
                }
            }
            let payload = match decoder.decode(&mut buf) {
                Ok(Some(payload)) => payload,
                Ok(None) => break,
                Err(_) => {
                    go_away = Some(GoAwayReason::FrameTooLarge);
                    break;
                }
            };
            let request = match ars::decode_client_frame(payload) {
                Ok(ClientFrame::Request(request)) => request,
                Err(_) => {
                    go_away = Some(GoAwayReason::MalformedFrame);
                    break;
                }
            };
            let fresh = match in_flight.lock() {
                Ok(mut ids) => ids.insert(request.request_id),
                Err(_) => false,
            };
            if !fresh {
                go_away = Some(GoAwayReason::MalformedFrame);
                break;
            }
            if let Some(rejection) = check_lease_rules(&request, &keys) {
                out.send(Outgoing::Response(
                    request.request_id,
                    ResponsePayload::InvalidLeaseKey(InvalidLeaseKey { message: rejection }),
                ));
                continue;
            }
            let capacity = shared.options.worker_queue_capacity;
            if shared.queued.fetch_add(1, Ordering::AcqRel) >= capacity as usize {
                shared.queued.fetch_sub(1, Ordering::AcqRel);
                out.send(Outgoing::Response(
                    request.request_id,
                    ResponsePayload::QueueFull(QueueFull {
                        limit: "sqliteWorkerQueue".into(),
                        capacity,
                    }),
                ));
                continue;
            }
            accepted.push(Req {
                conn: conn_id,
                request_id: request.request_id,
                lease: request.lease_key,
                payload: request.payload,
                out: out.clone(),
                keys: keys.clone(),
                seq: 0,
                _inbound: inbound.take(),
            });
        }
        if !accepted.is_empty() {
            let requests = std::mem::take(&mut accepted);
            if let Err(Job::Requests(refused)) = shared.send(Job::Requests(requests)) {
                for req in refused {
                    shared.queued.fetch_sub(1, Ordering::AcqRel);
                    out.send(Outgoing::Response(
                        req.request_id,
                        ResponsePayload::EndpointClosed,
                    ));
                }
            }
        }
        if let Some(reason) = go_away {
            out.send(Outgoing::GoAway(reason));
            break;
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let read = tokio::select! {
            _ = shutdown.changed() => break,
            _ = out.unread.overflow.notified() => {
                overflowed = true;
                break;
            }
            read = rd.read_buf(&mut buf) => read,
        };
        match read {
            Ok(0) | Err(_) => break 'serve,
            Ok(_) => {}
        }
    }
    let _ = shared.send(Job::Closed { conn: conn_id });
    if overflowed {
        // The client stopped reading: nothing more is written to it.
        tracing::warn!(
            conn = conn_id,
            max = shared.options.max_outbox_bytes,
            max_total = shared.options.max_outbox_bytes_total,
            "ars server: closing a connection whose unread responses exceeded its outbox bound, or the most unread when all together exceeded theirs"
        );
        writer.abort();
        let _ = writer.await;
        shared.outboxes.leave(conn_id, &out.unread);
        return;
    }
    out.send(Outgoing::Close);
    let unread = out.unread.clone();
    drop(out);
    let _ = writer.await;
    shared.outboxes.leave(conn_id, &unread);
}

/// The lease rules that depend only on this connection's history.
fn check_lease_rules(request: &ars::Request, keys: &LeaseKeys) -> Option<String> {
    let Ok(mut used_keys) = keys.lock() else {
        return Some("the connection's lease table is unusable".into());
    };
    match &request.payload {
        RequestPayload::SqliteBegin(begin) => {
            if request.lease_key.is_some() {
                Some("SqliteBegin must not carry Request.leaseKey".into())
            } else if begin.lease_key.is_empty() {
                Some("the lease key is empty".into())
            } else {
                match used_keys.take(&begin.lease_key) {
                    Ok(()) => None,
                    Err(KeyRefusal::Reused) => {
                        Some("the lease key was already used on this connection".into())
                    }
                    Err(KeyRefusal::Exhausted(max)) => Some(format!(
                        "this connection has begun its {max} leases \
                         (maxLeasesPerConnection); open a new connection"
                    )),
                }
            }
        }
        RequestPayload::SqliteCommit(ars::SqliteCommit { lease_key })
        | RequestPayload::SqliteRollback(ars::SqliteRollback { lease_key }) => {
            if request.lease_key.is_some() {
                Some("SqliteCommit and SqliteRollback must not carry Request.leaseKey".into())
            } else if !used_keys.contains(lease_key) {
                Some("no lease with this key was begun on this connection".into())
            } else {
                None
            }
        }
        RequestPayload::SqliteQuery(_) | RequestPayload::SqliteExec(_) => {
            match &request.lease_key {
                Some(key) if !used_keys.contains(key) => {
                    Some("no lease with this key was begun on this connection".into())
                }
                _ => None,
            }
        }
    }
}

async fn write_loop(
    mut wr: OwnedWriteHalf,
    mut rx: tmpsc::UnboundedReceiver<Outgoing>,
    in_flight: Arc<Mutex<HashSet<u32>>>,
    max_frame_bytes: u32,
    (unread, all): (Arc<Unread>, Arc<Outboxes>),
) {
    let mut batch: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut responses: Vec<(u32, ResponsePayload)> = Vec::new();
    'outer: while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        let mut stop = false;
        let mut taken = 0;
        // Coalesce whatever is already queued into one write.
        while let Some(message) = next.take() {
            taken += message.approx_bytes();
            match message {
                Outgoing::Response(id, payload) => responses.push((id, payload)),
                Outgoing::Responses(mut more) => responses.append(&mut more),
                Outgoing::GoAway(reason) => {
                    if !encode_responses(&mut responses, &in_flight, max_frame_bytes, &mut batch) {
                        break 'outer;
                    }
                    let frame = ServerFrame::GoAway(GoAway { reason });
                    let _ = ars::server_frame_into(&frame, max_frame_bytes, &mut batch);
                    stop = true;
                    break;
                }
                Outgoing::Close => {
                    stop = true;
                    break;
                }
            }
            if !encode_responses(&mut responses, &in_flight, max_frame_bytes, &mut batch) {
                break 'outer;
            }
            if batch.len() < WRITE_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !encode_responses(&mut responses, &in_flight, max_frame_bytes, &mut batch) {
            break;
        }
        if !batch.is_empty() {
            if wr.write_all(&batch).await.is_err() {
                break;
            }
            batch.clear();
        }
        all.taken(&unread, taken);
        if stop {
            break;
        }
    }
    let _ = wr.shutdown().await;
}

/// Appends `responses` to `batch` as frames and retires their request ids.
/// A response over the frame limit is replaced by `ResponseTooLarge`; false
/// when even that cannot be encoded.
fn encode_responses(
    responses: &mut Vec<(u32, ResponsePayload)>,
    in_flight: &Mutex<HashSet<u32>>,
    max_frame_bytes: u32,
    batch: &mut Vec<u8>,
) -> bool {
    if responses.is_empty() {
        return true;
    }
    if let Ok(mut ids) = in_flight.lock() {
        for (id, _) in responses.iter() {
            ids.remove(id);
        }
    }
    for (id, payload) in responses.drain(..) {
        let frame = ServerFrame::Response(Response {
            request_id: id,
            payload,
        });
        if ars::server_frame_into(&frame, max_frame_bytes, batch).is_err() {
            let too_large = ServerFrame::Response(Response {
                request_id: id,
                payload: ResponsePayload::ResponseTooLarge,
            });
            if ars::server_frame_into(&too_large, max_frame_bytes, batch).is_err() {
                return false;
            }
        }
    }
    true
}
