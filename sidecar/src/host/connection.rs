//! One host connection: a reader that cuts frames and starts one task per
//! request (bounded per connection), a writer task that owns the socket's
//! write half and coalesces queued frames, the connection's outbox with its
//! byte budget, its subscriptions (as a hub sink) and the VM-wide notices.
//!
//! Every frame queued for the client (responses, events, notices) counts
//! against one budget, `limits.host.maxQueuedBytesPerConnection`, together
//! with what the running reads need to make their answers (reserved before
//! they start), and against the process-wide `limits.host.maxQueuedBytes`
//! shared by every connection. Coming in, every request holds twice its
//! frame's length of the process-wide `limits.host.maxInboundBytes` until
//! it is answered: a frame over 64 KiB takes it before the rest of it is
//! read (waiting for room), a smaller one once it is whole (refused with
//! `host_inbound_limit` when there is none).
//! Over it the connection is not read (backpressure), notices to it are
//! dropped and counted, and its subscriptions end with `overflow`; if the
//! client then reads nothing for `limits.host.stalledWriteTimeoutMs`, the
//! connection is closed with a logged reason. Everything queued is released
//! when the connection ends.
//!
//! On shutdown the connection tells its client (`lifecycle/shutdown`),
//! stops reading, waits for its requests to be answered, lets the outbox
//! drain and closes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentos_base::budget::{ByteBudget, Held};
use agentos_protocol::host::{
    append_event_notification_frame, codes, event_notification_frame, event_notification_frame_len,
    methods, notification_frame, response_frame, ErrorObject, FrameDecoder, FrameError, Inbound,
};
use agentos_protocol::ErrorCode;
use serde_json::{json, value::RawValue, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{broadcast, watch, Semaphore};

use super::{dispatch, HostServices};
use crate::config::HostLimits;
use crate::doors::outbox::{self, Overflow, Pool, PoolOverflow, Tally};
use crate::sessions::{Batch, Item, MemoryCounters, Notice, Sink, SinkRefusal};

/// Requests one connection may have running at once (prompts wait for their
/// turn to end, so this is also the number of concurrent prompts a single
/// connection can drive).
const MAX_REQUESTS_IN_FLIGHT: u32 = 4096;

/// The largest write the writer coalesces queued frames into.
const MAX_BATCH_BYTES: usize = 1 << 20;

/// What every host connection shares: the pool of bytes queued to all
/// clients (`limits.host.maxQueuedBytes`; a frame that does not fit is
/// refused, as one over the connection's own bound is) and the inbound
/// budget.
pub(super) struct Shared {
    outbound: Arc<Pool>,
    /// `limits.host.maxInboundBytes`: what requests hold from their frame's
    /// arrival until they are answered.
    inbound: Arc<ByteBudget>,
}

/// A request frame up to this size is read without asking the inbound
/// budget (it fits the connection's own read buffer).
const FREE_FRAME_BYTES: u64 = 64 * 1024;

/// `vm/status` counts the bytes queued to host clients.
struct HostQueued(Arc<MemoryCounters>);

impl Tally for HostQueued {
    fn queued(&self, bytes: usize) {
        self.0.host_queued(bytes as u64);
    }

    fn dequeued(&self, bytes: usize) {
        self.0.host_dequeued(bytes as u64);
    }
}

impl Shared {
    pub(super) fn new(limits: &HostLimits, counters: Arc<MemoryCounters>) -> Arc<Shared> {
        Arc::new(Shared {
            outbound: Pool::with_tally(
                limits.max_queued_bytes,
                PoolOverflow::Refuse,
                Arc::new(HostQueued(counters)),
            ),
            inbound: ByteBudget::new(
                usize::try_from(limits.max_inbound_bytes)
                    .unwrap_or(usize::MAX)
                    .max(1),
            ),
        })
    }

    /// What a frame of `length` bytes takes from the inbound budget: its
    /// bytes twice (as received, and decoded).
    fn inbound_bytes(length: u64) -> usize {
        usize::try_from(length.saturating_mul(2)).unwrap_or(usize::MAX)
    }
}

/// The notices one connection dropped in the current run of drops (logged
/// once per run), shared by its outbox's handles and its writer.
struct Dropped {
    run: AtomicU64,
    counters: Arc<MemoryCounters>,
}

impl Dropped {
    /// Counts (and logs, once per run of drops) a notice that did not fit.
    fn notice(&self, connection: u64, method: &str, queued: usize) {
        self.counters.host_notice_dropped();
        if self.run.fetch_add(1, Ordering::AcqRel) == 0 {
            tracing::warn!(
                connection,
                method,
                queued,
                "dropping notices to a host connection over limits.host.maxQueuedBytesPerConnection"
            );
        }
    }

    /// The writer made progress: a run of drops, if any, is over.
    fn progressed(&self, connection: u64) {
        let dropped = self.run.swap(0, Ordering::AcqRel);
        if dropped > 0 {
            tracing::warn!(
                connection,
                dropped,
                "a host connection over its queue budget lost notices"
            );
        }
    }
}

/// What a request needs while its answer is made and queued, reserved
/// before it runs so that many reads cannot each hold an answer the client
/// will not take: for a read, twice its framed answer (the answer and its
/// frame exist together for a moment); once framed, only the frame stays
/// charged. Other answers are small or bounded by their own limits and are
/// charged when they are queued.
fn answer_estimate(method: &str, params: &Value) -> usize {
    if method == methods::FS_READ {
        let max = super::fs::MAX_READ_CHUNK;
        let length = params
            .get("length")
            .and_then(Value::as_u64)
            .unwrap_or(max)
            .min(max);
        // Base64 and the envelope, twice.
        return usize::try_from(2 * (length.div_ceil(3) * 4 + 4096)).unwrap_or(usize::MAX);
    }
    0
}

/// Outbound frames of one connection: the shared outbox
/// (`limits.host.maxQueuedBytesPerConnection`, refusing), with what this
/// door does when a frame is refused.
#[derive(Clone)]
pub(super) struct Outbox {
    queue: outbox::Outbox<Vec<u8>>,
    connection: u64,
    dropped: Arc<Dropped>,
}

impl Outbox {
    /// Queues a whole frame whose bytes are already charged.
    fn push(&self, frame: Vec<u8>) -> bool {
        let n = frame.len();
        self.queue.send_charged(frame, n)
    }

    /// Answers a request that reserved `reserved` bytes before it ran.
    fn respond(&self, id: &Value, result: Result<Box<RawValue>, ErrorObject>, reserved: usize) {
        let frame = match &result {
            Ok(v) => response_frame(id, Ok(v)),
            Err(e) => response_frame(id, Err(e)),
        };
        let frame = frame.or_else(|e| {
            let error = ErrorObject::application(
                e.code(),
                format!("the answer cannot be framed: {e}"),
                serde_json::Map::new(),
            );
            response_frame(id, Err(&error))
        });
        let Ok(frame) = frame else {
            self.queue.release(reserved);
            return;
        };
        let n = frame.len();
        if n >= reserved {
            self.queue.charge(n - reserved);
        } else {
            self.queue.release(reserved - n);
        }
        self.push(frame);
    }

    /// A notification that must not be lost (it is small and rare).
    fn notify_always(&self, method: &str, params: &Value) -> bool {
        match notification_frame(method, params) {
            Ok(frame) => {
                self.queue.charge(frame.len());
                self.push(frame)
            }
            Err(_) => false,
        }
    }

    /// A notice: dropped (and counted) when the connection is over budget.
    /// `false` only when the connection is gone.
    fn notice(&self, method: &str, params: &Value) -> bool {
        let Ok(frame) = notification_frame(method, params) else {
            return true;
        };
        if !self.queue.try_charge(frame.len()) {
            self.dropped
                .notice(self.connection, method, self.queue.queued());
            return !self.queue.is_gone();
        }
        self.push(frame)
    }

    /// A subscription item: refused with `Overflow` when it does not fit.
    fn item(&self, frame: Result<Vec<u8>, FrameError>) -> Result<(), SinkRefusal> {
        let Ok(frame) = frame else {
            return Err(SinkRefusal::Overflow);
        };
        let n = frame.len();
        self.queue.push(frame, n).map_err(|refused| match refused {
            outbox::Refused::Full => SinkRefusal::Overflow,
            outbox::Refused::Closed => SinkRefusal::Closed,
        })
    }
}

/// A connection as a subscription sink.
pub(super) struct ConnectionSink {
    outbox: Outbox,
}

/// The frame a subscription item becomes on the host socket.
fn item_frame(subscription_id: &str, item: &Item) -> Result<Vec<u8>, FrameError> {
    match item {
        // Spliced, not re-serialized: the event is already JSON.
        Item::Durable(_, public, _) => event_notification_frame(subscription_id, public),
        Item::Ephemeral {
            session_id,
            after_sequence,
            update,
        } => notification_frame(
            methods::UPDATE,
            &json!({
                "subscriptionId": subscription_id,
                "sessionId": &**session_id,
                "afterSequence": after_sequence,
                "update": &**update,
            }),
        ),
    }
}

impl Sink for ConnectionSink {
    fn deliver(&self, subscription_id: &Arc<str>, item: &Item) -> Result<(), SinkRefusal> {
        self.outbox.item(item_frame(subscription_id, item))
    }

    /// A commit's frames as one entry (one wake-up and one write for the
    /// connection's writer), unless together they pass the connection's
    /// whole bound: then one entry each, so only a single frame may ever
    /// pass it.
    fn deliver_all(&self, subscription_id: &Arc<str>, items: Batch) -> Result<(), SinkRefusal> {
        let items = items.items();
        // Sized first, so the frames are written once, into one buffer
        // that never grows (a commit's frames run to megabytes). Live
        // updates are rendered while sizing; stored events are spliced.
        let mut total = 0usize;
        let mut live = Vec::new();
        for item in items {
            total += match item {
                Item::Durable(_, public, _) => {
                    event_notification_frame_len(subscription_id, public)
                }
                Item::Ephemeral { .. } => {
                    let frame =
                        item_frame(subscription_id, item).map_err(|_| SinkRefusal::Overflow)?;
                    let len = frame.len();
                    live.push(frame);
                    len
                }
            };
            if total > self.outbox.queue.limit() {
                return items
                    .iter()
                    .try_for_each(|item| self.deliver(subscription_id, item));
            }
        }
        if total == 0 {
            return Ok(());
        }
        let mut joined: Vec<u8> = Vec::with_capacity(total);
        let mut live = live.into_iter();
        for item in items {
            match item {
                Item::Durable(_, public, _) => {
                    append_event_notification_frame(&mut joined, subscription_id, public)
                        .map_err(|_| SinkRefusal::Overflow)?;
                }
                Item::Ephemeral { .. } => joined.extend(live.next().unwrap_or_default()),
            }
        }
        self.outbox.item(Ok(joined))
    }

    fn ended(&self, subscription_id: &str, session_id: &str, reason: &str, last_sequence: u64) {
        // Small and once per subscription (whose number is capped): always
        // queued, so the client learns where to resume.
        self.outbox.notify_always(
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

/// Serves one connection until the client leaves, the stream breaks, the
/// client stalls over its budget, or `shutdown` turns true.
pub(super) async fn serve_connection(
    stream: UnixStream,
    services: Arc<HostServices>,
    limits: HostLimits,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let connection = CONNECTIONS.fetch_add(1, Ordering::Relaxed);
    let (mut reader, mut writer) = stream.into_split();
    let (queue, mut frames) = outbox::Outbox::<Vec<u8>>::new(
        &shared.outbound,
        limits.max_queued_bytes_per_connection,
        Overflow::Refuse,
    );
    let dropped = Arc::new(Dropped {
        run: AtomicU64::new(0),
        counters: services.sessions.counters().clone(),
    });
    let stall = Duration::from_millis(limits.stalled_write_timeout_ms);
    // Turns true when the writer gives up (stream broken or client stalled).
    let (closed_tx, mut closed) = watch::channel(false);
    let writer_dropped = dropped.clone();
    let writer_task = tokio::spawn(async move {
        let dropped = writer_dropped;
        // What is already waiting is coalesced into one write, copied into
        // this buffer (kept from write to write, so it grows once rather
        // than reallocating a batch from its first frame up); a frame
        // alone is written as it is.
        let mut coalesced: Vec<u8> = Vec::new();
        'frames: while let Some((frame, _)) = frames.recv().await {
            let batch: &[u8] = match frames.try_recv() {
                Err(_) => &frame,
                Ok((more, _)) => {
                    coalesced.clear();
                    coalesced.extend_from_slice(&frame);
                    coalesced.extend_from_slice(&more);
                    while coalesced.len() < MAX_BATCH_BYTES {
                        match frames.try_recv() {
                            Ok((more, _)) => coalesced.extend_from_slice(&more),
                            Err(_) => break,
                        }
                    }
                    &coalesced
                }
            };
            let mut written = 0;
            while written < batch.len() {
                match tokio::time::timeout(stall, writer.write(&batch[written..])).await {
                    Ok(Ok(0)) | Ok(Err(_)) => {
                        frames.release(batch.len() - written);
                        break 'frames;
                    }
                    Ok(Ok(n)) => {
                        written += n;
                        frames.release(n);
                        frames.progressed();
                        dropped.progressed(connection);
                    }
                    // A client that reads slowly but stays within its
                    // budget is only waited for.
                    Err(_) if !frames.over() => {}
                    Err(_) => {
                        tracing::warn!(
                            connection,
                            queued = frames.queued(),
                            timeout_ms = stall.as_millis() as u64,
                            "closing a host connection: over limits.host.maxQueuedBytesPerConnection \
                             and nothing read for limits.host.stalledWriteTimeoutMs"
                        );
                        dropped.counters.host_connection_stalled();
                        frames.release(batch.len() - written);
                        break 'frames;
                    }
                }
            }
            if coalesced.capacity() > 2 * MAX_BATCH_BYTES {
                // A huge frame went through it: its room is not kept.
                coalesced = Vec::new();
            }
        }
        let _ = closed_tx.send(true);
        // Whatever is still queued is released now; later sends fail and
        // release their own bytes.
        frames.close();
        while let Ok((_, n)) = frames.try_recv() {
            frames.release(n);
        }
        let _ = writer.shutdown().await;
    });
    let outbox = Outbox {
        queue,
        connection,
        dropped,
    };
    let sink: Arc<ConnectionSink> = Arc::new(ConnectionSink {
        outbox: outbox.clone(),
    });
    let notice_outbox = outbox;
    let mut notices = services.sessions.notices();
    let notice_task = tokio::spawn(async move {
        loop {
            match notices.recv().await {
                Ok(notice) => {
                    let (method, params) = notice_json(&notice);
                    if !notice_outbox.notice(method, &params) {
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
    let mut decoder = FrameDecoder::new(limits.max_frame_bytes);
    let mut buf = vec![0u8; FREE_FRAME_BYTES as usize];
    let mut shutting_down = *shutdown.borrow();
    // The inbound budget taken for the large frame at the head of the
    // decoder, whole, before the rest of it is read: holders never wait
    // for each other, so they always finish.
    let mut inbound: Option<Held> = None;
    'read: while !shutting_down {
        if inbound.is_none() {
            if let Some(length) = decoder.next_length() {
                if length > FREE_FRAME_BYTES && length <= limits.max_frame_bytes {
                    let taken = shared.inbound.take(Shared::inbound_bytes(length));
                    tokio::select! {
                        held = taken => inbound = Some(held),
                        _ = closed.wait_for(|c| *c) => break,
                        _ = shutdown.wait_for(|down| *down) => {
                            shutting_down = true;
                            break;
                        }
                    }
                }
            }
        }
        // Over budget: stop reading until the client takes its answers.
        tokio::select! {
            _ = sink.outbox.queue.reserve(0) => {}
            _ = closed.wait_for(|c| *c) => break,
            _ = shutdown.wait_for(|down| *down) => {
                shutting_down = true;
                break;
            }
        }
        let n = tokio::select! {
            read = reader.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = closed.wait_for(|c| *c) => break,
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
                    // The frame the inbound budget was taken for is the
                    // first one decoded after it was taken; a small one
                    // takes its share now, or is refused (never waited
                    // for: the requests holding the budget may be waiting
                    // for this very client's next answer).
                    let taken = match inbound.take() {
                        Some(held) => held,
                        None => {
                            let bytes = Shared::inbound_bytes(payload.len() as u64);
                            match shared.inbound.try_take(bytes) {
                                Some(held) => held,
                                None => {
                                    refuse_inbound(&sink, &payload, &limits);
                                    continue;
                                }
                            }
                        }
                    };
                    let admitted = tokio::select! {
                        _ = handle_frame(&services, &sink, &requests, &payload, taken) => true,
                        _ = closed.wait_for(|c| *c) => false,
                    };
                    if !admitted {
                        break 'read;
                    }
                }
                Err(e) => {
                    let mut extra = serde_json::Map::new();
                    extra.insert("setting".into(), json!("limits.host.maxFrameBytes"));
                    let mut error = ErrorObject::application(e.code(), e.to_string(), extra);
                    error.code = codes::INVALID_REQUEST;
                    sink.outbox.respond(&Value::Null, Err(error), 0);
                    break 'read;
                }
            }
        }
    }
    if shutting_down {
        sink.outbox.notify_always(
            methods::SHUTDOWN,
            &json!({"reason": ErrorCode::VmShutdown.as_str()}),
        );
        // Every request still running is answered (or failed by the
        // sessions' shutdown) before the connection closes.
        let _ = requests.acquire_many(MAX_REQUESTS_IN_FLIGHT).await;
    }
    let dyn_sink: Arc<dyn Sink> = sink.clone();
    services.sessions.hub().drop_sink(&dyn_sink);
    notice_task.abort();
    let _ = notice_task.await;
    drop(sink);
    drop(dyn_sink);
    let _ = writer_task.await;
}

async fn handle_frame(
    services: &Arc<HostServices>,
    sink: &Arc<ConnectionSink>,
    requests: &Arc<Semaphore>,
    payload: &[u8],
    inbound: Held,
) {
    match agentos_protocol::host::decode_message(payload) {
        Inbound::Request { id, method, params } => {
            // Bounded concurrency per connection: when every slot is busy the
            // reader waits, and the client feels it as socket backpressure.
            let Ok(permit) = requests.clone().acquire_owned().await else {
                return;
            };
            // So does a read whose answer does not fit the budget yet.
            let reserved = answer_estimate(&method, &params);
            sink.outbox.queue.reserve(reserved).await;
            let services = services.clone();
            let sink = sink.clone();
            tokio::spawn(async move {
                let _permit = permit;
                // Held until answered: the request's input stays counted.
                let _inbound = inbound;
                let mut after_reply = None;
                let subscriber: Arc<dyn Sink> = sink.clone();
                let result =
                    dispatch::dispatch(&services, &subscriber, &method, params, &mut after_reply)
                        .await;
                sink.outbox.respond(&id, result, reserved);
                if let Some(start) = after_reply {
                    let _ = start.send(());
                }
            });
        }
        // The host sends no notifications we act on; responses to us are
        // not expected either.
        Inbound::Notification { .. } | Inbound::Response { .. } => {}
        Inbound::Invalid { id, error } => sink.outbox.respond(&id, Err(error), 0),
    }
}

/// Answers a request that found the inbound budget full.
fn refuse_inbound(sink: &ConnectionSink, payload: &[u8], limits: &HostLimits) {
    if let Inbound::Request { id, .. } = agentos_protocol::host::decode_message(payload) {
        let mut extra = serde_json::Map::new();
        extra.insert("setting".into(), json!("limits.host.maxInboundBytes"));
        extra.insert("limit".into(), json!(limits.max_inbound_bytes));
        let error = ErrorObject::application(
            ErrorCode::HostInboundLimit,
            "the requests being served hold all of limits.host.maxInboundBytes; try again",
            extra,
        );
        sink.outbox.respond(&id, Err(error), 0);
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

#[cfg(test)]
mod tests {
    use agentos_protocol::session::{Actor, EventKind, StoredEvent};

    use super::*;

    fn durable(sequence: u64) -> Item {
        Item::durable(StoredEvent {
            session_id: "s".into(),
            sequence,
            timestamp_ms: 1,
            kind: EventKind::SessionUpdate,
            correlation_id: None,
            outcome_status: None,
            terminal_reason: None,
            actor: Actor::Agent,
            payload_json: r#"{"sessionUpdate":"agent_message_chunk"}"#.into(),
        })
    }

    /// A sink on an outbox of `limit` bytes, and the queue its writer reads.
    fn connection_sink(limit: u64) -> (ConnectionSink, outbox::Queue<Vec<u8>>) {
        let pool = Pool::new(1 << 30, PoolOverflow::Refuse);
        let (queue, frames) = outbox::Outbox::new(&pool, limit, Overflow::Refuse);
        let dropped = Arc::new(Dropped {
            run: AtomicU64::new(0),
            counters: Arc::default(),
        });
        let outbox = Outbox {
            queue,
            connection: 0,
            dropped,
        };
        (ConnectionSink { outbox }, frames)
    }

    /// The sequences of the `event` notifications in `bytes`, in order.
    fn sequences(mut bytes: &[u8]) -> Vec<u64> {
        let mut out = Vec::new();
        while let [a, b, c, d, rest @ ..] = bytes {
            let n = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
            let frame: Value = serde_json::from_slice(&rest[..n]).unwrap();
            assert_eq!(frame["params"]["subscriptionId"], "sub");
            out.push(frame["params"]["event"]["sequence"].as_u64().unwrap());
            bytes = &rest[n..];
        }
        out
    }

    #[test]
    fn a_commit_is_one_entry_of_whole_frames_unless_it_passes_the_bound() {
        let sub: Arc<str> = Arc::from("sub");
        let items: Vec<Item> = (1..=3).map(durable).collect();
        let (sink, mut frames) = connection_sink(1 << 20);
        sink.deliver_all(&sub, items.clone().into()).unwrap();
        let (entry, n) = frames.try_recv().unwrap();
        assert_eq!(n, entry.len());
        assert_eq!(sequences(&entry), [1, 2, 3]);
        assert!(frames.try_recv().is_err());
        // A bound two frames wide: one entry per frame, and the one that
        // does not fit is refused as it would be alone.
        let one = item_frame(&sub, &items[0]).unwrap().len() as u64;
        let (sink, mut frames) = connection_sink(2 * one + 2);
        assert_eq!(
            sink.deliver_all(&sub, items.into()),
            Err(SinkRefusal::Overflow)
        );
        let mut seen = Vec::new();
        while let Ok((entry, _)) = frames.try_recv() {
            seen.extend(sequences(&entry));
        }
        assert_eq!(seen, [1, 2]);
    }
}
