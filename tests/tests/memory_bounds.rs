//! Memory stays bounded whatever a peer does: each test runs one attack
//! against the real binary (a host client that never reads, an agent that
//! floods requests and stops reading its stdin, an agent that floods
//! stderr, an update nested too deep, too many subscriptions, cursors at
//! the end of the u64 range) and checks the bound or the refusal: the
//! sidecar's peak resident memory (`VmHWM` in /proc/<pid>/status) stays far
//! below what the attack reached before, counters in `vm/status` show what
//! was dropped, and the process stays up with committed data intact.

mod common;

use common::{data_code, eventually, kinds, memory, Backend, Options, Sidecar, PATIENCE};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const MIB: u64 = 1024 * 1024;

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> shift) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Writes `bytes` to `path` through the host door, in 8 MiB pieces.
async fn put_file(sc: &Sidecar, path: &str, bytes: &[u8]) {
    for (i, piece) in bytes.chunks(8 * MIB as usize).enumerate() {
        let mut params = json!({"path": path, "data": base64(piece)});
        if i > 0 {
            params["offset"] = json!(i as u64 * 8 * MIB);
        }
        sc.ok("fs/write", params).await;
    }
}

async fn memory_status(sc: &Sidecar) -> Value {
    sc.ok("vm/status", json!({})).await["memory"].clone()
}

/// Something committed before the attack, to check it survived.
/// Opens `session` with `/home/agentos` as its directory (the files these
/// tests plant live there) and commits one turn; returns its history.
async fn commit_a_turn(sc: &Sidecar, session: &str) -> Vec<Value> {
    sc.ok(
        "sessions/open",
        json!({"sessionId": session, "agent": "echo", "cwd": "/home/agentos"}),
    )
    .await;
    sc.prompt(session, "echo before the attack")
        .await
        .expect("a turn");
    sc.history(session).await
}

/// A host client sends reads of a 16 MiB file and never reads the answers.
/// Before: 240 of them took the sidecar from 64 MiB to 4 GiB, and the memory
/// stayed after the client left; later, with answers reserved but not the
/// memory that makes them, 140 still reached 558 MiB. Now what a read needs
/// to make its answer is reserved before it runs, the connection stops being
/// read at its budget, is closed when it still reads nothing, and its bytes
/// are released: the peak stays under 512 MiB.
async fn a_client_that_never_reads_is_bounded_and_closed(backend: Backend) {
    let sc = Sidecar::start_with(
        backend,
        Options {
            limits: json!({"host": {"stalledWriteTimeoutMs": 2000}}),
            ..Options::default()
        },
    )
    .await;
    let before = commit_a_turn(&sc, "kept").await;
    let file = vec![0u8; 16 * MIB as usize];
    put_file(&sc, "/big.bin", &file).await;

    let mut attacker = UnixStream::connect(&sc.socket).await.expect("connect");
    let mut requests = Vec::new();
    for id in 0..240 {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "fs/read",
                             "params": {"path": "/big.bin", "offset": 0, "length": 16 * MIB}});
        requests.extend_from_slice(
            &agentos_protocol::host::encode_frame(request.to_string().as_bytes())
                .expect("a small frame"),
        );
    }
    attacker.write_all(&requests).await.expect("send the reads");

    eventually("the stalled connection is closed", || async {
        memory_status(&sc).await["hostConnectionsClosedStalled"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    })
    .await;
    // Its queued bytes were released (only this client's own answers remain
    // in flight, and none is queued between calls).
    eventually("the closed connection's bytes are released", || async {
        memory_status(&sc).await["hostQueuedBytes"] == json!(0)
    })
    .await;
    let (rss, peak) = memory(sc.pid());
    eprintln!(
        "host outbox attack: VmRSS {} MiB, VmHWM {} MiB",
        rss / MIB,
        peak / MIB
    );
    assert!(
        peak < 512 * MIB,
        "peak RSS {} MiB: the outbox is not bounded",
        peak / MIB
    );
    // The attacker sees the end of its stream after what was written.
    let drained = tokio::time::timeout(PATIENCE, async {
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match attacker.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the stalled connection was not closed");
    // The sidecar still serves, with its data intact.
    let read = sc
        .ok(
            "fs/read",
            json!({"path": "/big.bin", "offset": 0, "length": 4}),
        )
        .await;
    assert_eq!(read["data"], "AAAAAA==");
    assert_eq!(sc.history("kept").await, before);
}

/// An agent floods `fs/read_text_file` for a 15 MB file and stops reading
/// its stdin. Before: 400 requests took the sidecar to 4.4 GiB. Now the
/// answers queued for it are bounded, the turn fails with `resource_limit`
/// naming the setting, and the adapter is stopped.
async fn an_agent_that_stops_reading_fails_its_turn(backend: Backend) {
    let mut sc = Sidecar::start_with(
        backend,
        Options {
            limits: json!({"acp": {"stalledStdinTimeoutMs": 2000}}),
            ..Options::default()
        },
    )
    .await;
    let before = commit_a_turn(&sc, "hostile").await;
    let line = format!("{}\n", "x".repeat(99));
    let text = line.repeat(150_000);
    put_file(&sc, "/home/agentos/big.txt", text.as_bytes()).await;

    let error = match sc
        .prompt("hostile", "fs_flood 400 /home/agentos/big.txt")
        .await
    {
        Ok(v) => panic!("the flooding turn succeeded: {v}"),
        Err(agentos_client::ctl::ClientError::Rpc(e)) => e,
        Err(e) => panic!("the flooding turn failed without an RPC error: {e}"),
    };
    assert_eq!(data_code(&error), "resource_limit", "{error:?}");
    assert_eq!(
        error.data.as_ref().and_then(|d| d.get("setting")),
        Some(&json!("limits.acp.maxQueuedStdinBytes")),
        "{error:?}"
    );
    let (rss, peak) = memory(sc.pid());
    eprintln!(
        "agent stdin attack: VmRSS {} MiB, VmHWM {} MiB",
        rss / MIB,
        peak / MIB
    );
    assert!(
        peak < 768 * MIB,
        "peak RSS {} MiB: the stdin queue is not bounded",
        peak / MIB
    );
    assert!(sc.is_running());
    // The adapter was stopped; committed history is intact and the session
    // works again on a new adapter.
    let history = sc.history("hostile").await;
    assert_eq!(history[..before.len()], before[..]);
    let answer = sc
        .prompt("hostile", "echo after")
        .await
        .expect("a new adapter serves the session");
    assert_eq!(answer["message"]["content"][0]["text"], "after");
    // A read over the byte cap is refused naming its setting.
    let sc2 = Sidecar::start_with(
        backend,
        Options {
            limits: json!({"acp": {"maxReadTextFileBytes": 1024}}),
            ..Options::default()
        },
    )
    .await;
    // The first turn makes the session's directories.
    commit_a_turn(&sc2, "reader").await;
    put_file(&sc2, "/home/agentos/big.txt", text.as_bytes()).await;
    let answer = sc2
        .prompt("reader", "fs_read /home/agentos/big.txt")
        .await
        .expect("the turn");
    let said = answer["message"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        said.contains("EFBIG") && said.contains("limits.acp.maxReadTextFileBytes"),
        "{answer}"
    );
    sc.terminate().await;
}

/// An agent writes 256 MiB of stderr while three host connections never
/// read. Before: 1 GB of it took the sidecar to 3 GiB. Now stderr is
/// forwarded at a bounded rate, the rest is counted, and what the idle
/// connections cannot take is dropped and counted.
async fn a_stderr_flood_is_rate_limited_and_counted(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(UnixStream::connect(&sc.socket).await.expect("connect"));
    }
    let before = commit_a_turn(&sc, "noisy").await;
    let answer = sc
        .prompt("noisy", "stderr_flood 256")
        .await
        .expect("the turn ends normally");
    assert_eq!(answer["message"]["content"][0]["text"], "flooded");
    let counters = memory_status(&sc).await;
    let dropped = counters["agentStderrDroppedBytes"].as_u64().unwrap_or(0);
    assert!(dropped > 128 * MIB, "{counters}");
    let (rss, peak) = memory(sc.pid());
    eprintln!(
        "stderr attack: VmRSS {} MiB, VmHWM {} MiB, {} MiB of stderr dropped",
        rss / MIB,
        peak / MIB,
        dropped / MIB
    );
    assert!(
        peak < 512 * MIB,
        "peak RSS {} MiB: stderr is not bounded",
        peak / MIB
    );
    let history = sc.history("noisy").await;
    assert_eq!(history[..before.len()], before[..]);
    drop(idle);
}

/// An update nested 900 deep is a malformed line: refused when decoded,
/// never stored (before, it was stored and read back as `null`). One at a
/// depth within the bound is stored and reads back whole.
async fn an_update_nested_too_deep_is_refused(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    let before = commit_a_turn(&sc, "deep").await;
    let error = match sc.prompt("deep", "deep 900").await {
        Ok(v) => panic!("the deep update was accepted: {v}"),
        Err(agentos_client::ctl::ClientError::Rpc(e)) => e,
        Err(e) => panic!("no RPC error: {e}"),
    };
    assert_eq!(data_code(&error), "acp_protocol_error", "{error:?}");
    let history = sc.history("deep").await;
    assert_eq!(history[..before.len()], before[..]);
    assert!(
        !history.iter().any(|e| e["toolCallId"] == "deep"),
        "{history:?}"
    );
    // Within the bound: stored and read back whole.
    sc.prompt("deep", "deep 100").await.expect("a turn");
    let history = sc.history("deep").await;
    let stored = history
        .iter()
        .find(|e| e["toolCallId"] == "deep")
        .expect("the tool call is stored");
    let mut depth = 0;
    let mut value = &stored["rawInput"];
    while let Some(inner) = value.as_array() {
        depth += 1;
        match inner.first() {
            Some(next) => value = next,
            None => break,
        }
    }
    assert_eq!(depth, 100, "{stored}");
    assert!(kinds(&history).contains(&"tool_call".to_owned()));
}

/// A connection holds at most `limits.host.maxSubscriptionsPerConnection`.
async fn subscriptions_per_connection_are_capped(backend: Backend) {
    let sc = Sidecar::start_with(
        backend,
        Options {
            limits: json!({"host": {"maxSubscriptionsPerConnection": 3}}),
            ..Options::default()
        },
    )
    .await;
    sc.open("watched", "echo").await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let sub = sc
            .ok("sessions/subscribe", json!({"sessionId": "watched"}))
            .await;
        ids.push(sub["subscriptionId"].clone());
    }
    let error = sc
        .err("sessions/subscribe", json!({"sessionId": "watched"}))
        .await;
    assert_eq!(data_code(&error), "subscriptions_limit");
    assert_eq!(
        error.data.as_ref().and_then(|d| d.get("setting")),
        Some(&json!("limits.host.maxSubscriptionsPerConnection"))
    );
    // Another connection has its own allowance.
    let (other, _notes) = sc.connect().await;
    other
        .call("sessions/subscribe", json!({"sessionId": "watched"}))
        .await
        .expect("a second connection subscribes");
    // Unsubscribing frees a place.
    let gone = sc
        .ok("sessions/unsubscribe", json!({"subscriptionId": ids[0]}))
        .await;
    assert_eq!(gone["unsubscribed"], true);
    sc.ok("sessions/subscribe", json!({"sessionId": "watched"}))
        .await;
    // The remaining subscriptions still receive events.
    let mut sc = sc;
    sc.prompt("watched", "echo seen").await.expect("a turn");
    sc.next_note(|method, params| {
        method == "sessions/event" && params["event"]["content"]["text"] == "seen"
    })
    .await;
}

/// A cursor at the top of the u64 range is past every event: an empty page,
/// not a panic in a debug build nor a wrap to the start.
async fn cursors_at_the_end_of_the_range_are_empty(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    commit_a_turn(&sc, "cursor").await;
    let page = sc
        .ok(
            "sessions/history",
            json!({"sessionId": "cursor", "after": u64::MAX}),
        )
        .await;
    assert_eq!(page["events"], json!([]), "{page}");
    sc.ok(
        "sessions/subscribe",
        json!({"sessionId": "cursor", "after": u64::MAX}),
    )
    .await;
    // Still serving.
    assert!(sc.history("cursor").await.len() >= 2);
}

/// The floods measure the sidecar's own memory, which does not depend on
/// the backend: they run once, on the local file.
macro_rules! sqlite_only {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite_file() {
                super::$name($crate::common::Backend::SqliteFile).await
            }
        }
    )+};
}

sqlite_only!(
    a_client_that_never_reads_is_bounded_and_closed,
    an_agent_that_stops_reading_fails_its_turn,
    a_stderr_flood_is_rate_limited_and_counted,
);

both_backends!(
    an_update_nested_too_deep_is_refused,
    subscriptions_per_connection_are_capped,
    cursors_at_the_end_of_the_range_are_empty,
);

/// Sends `n` reads of `length` bytes of `path` on a new connection that
/// never reads an answer; the connection is returned so it stays open.
async fn silent_reader(sc: &Sidecar, path: &str, length: u64, n: u64) -> UnixStream {
    let mut attacker = UnixStream::connect(&sc.socket).await.expect("connect");
    let mut requests = Vec::new();
    for id in 0..n {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "fs/read",
                             "params": {"path": path, "offset": 0, "length": length}});
        requests.extend_from_slice(
            &agentos_protocol::host::encode_frame(request.to_string().as_bytes())
                .expect("a small frame"),
        );
    }
    attacker.write_all(&requests).await.expect("send the reads");
    attacker
}

/// Host connections share one budget (`limits.host.maxQueuedBytes`): two
/// clients that never read, each well within its own budget, cannot queue
/// more than it together (vm/status reports its use); both are closed as
/// stalled, and then another client's read is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_connections_share_one_budget() {
    let sc = Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            limits: json!({"host": {"maxQueuedBytes": 48 * MIB,
                                    "maxQueuedBytesPerConnection": 512 * MIB,
                                    "stalledWriteTimeoutMs": 3000}}),
            ..Options::default()
        },
    )
    .await;
    put_file(&sc, "/four.bin", &vec![7u8; 4 * MIB as usize]).await;
    let _a = silent_reader(&sc, "/four.bin", 4 * MIB, 60).await;
    let _b = silent_reader(&sc, "/four.bin", 4 * MIB, 60).await;
    // One read's reservation: its answer, twice.
    let one_read = 2 * (4 * MIB / 3 * 4 + 8192);
    let mut most = 0;
    let mut saw_both_closed = false;
    for _ in 0..200 {
        let status = sc.ok("vm/status", json!({})).await;
        let queued = status["memory"]["hostQueuedBytes"].as_u64().unwrap_or(0);
        most = most.max(queued);
        let limit = status["limits"]
            .as_array()
            .and_then(|limits| {
                limits
                    .iter()
                    .find(|l| l["setting"] == "limits.host.maxQueuedBytes")
            })
            .cloned()
            .expect("the process-wide host budget is listed");
        assert_eq!(limit["limit"], json!(48 * MIB));
        assert!(limit["used"].is_u64(), "{limit}");
        if status["memory"]["hostConnectionsClosedStalled"].as_u64() >= Some(2) {
            saw_both_closed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(most > 16 * MIB, "the attack never queued much: {most}");
    assert!(
        most <= 48 * MIB + one_read,
        "{} MiB queued over a 48 MiB budget",
        most / MIB
    );
    assert!(saw_both_closed, "the stalled clients were not closed");
    let read = sc
        .ok(
            "fs/read",
            json!({"path": "/four.bin", "offset": 0, "length": 3}),
        )
        .await;
    assert_eq!(read["data"], "BwcH");
}

/// Large request frames take from one process-wide inbound budget
/// (`limits.host.maxInboundBytes`) before they are read: sixteen clients
/// each start a 12 MiB `fs/write` and stall after 10 MiB. Without the
/// budget each one's bytes sat in the sidecar (160 MiB and more); now only
/// what the budget allows is read, small requests are still served, and
/// once the stalled clients leave a large write goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_request_frames_share_one_inbound_budget() {
    let sc = Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            limits: json!({"host": {"maxInboundBytes": 32 * MIB}}),
            ..Options::default()
        },
    )
    .await;
    sc.ok("vm/status", json!({})).await;
    let (_, before) = memory(sc.pid());
    let data = base64(&vec![1u8; 9 * MIB as usize]);
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "fs/write",
                         "params": {"path": "/w.bin", "data": data}});
    let frame =
        agentos_protocol::host::encode_frame(request.to_string().as_bytes()).expect("a frame");
    assert!(frame.len() as u64 > 12 * MIB);
    let mut stalled = Vec::new();
    for _ in 0..16 {
        let part = frame[..10 * MIB as usize].to_vec();
        let socket = sc.socket.clone();
        stalled.push(tokio::spawn(async move {
            let mut stream = UnixStream::connect(&socket).await.expect("connect");
            // Those the budget does not admit block here: the sidecar
            // stops reading them.
            let _ = stream.write_all(&part).await;
            tokio::time::sleep(PATIENCE).await;
        }));
    }
    // Let every client push what it can.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let status = sc.ok("vm/status", json!({})).await;
    assert!(status["uptimeMs"].is_u64(), "small requests are served");
    let (_, during) = memory(sc.pid());
    eprintln!(
        "inbound frames attack: VmHWM {} MiB before, {} MiB during",
        before / MIB,
        during / MIB
    );
    assert!(
        during < before + 96 * MIB,
        "{} MiB read from stalled frames",
        (during - before) / MIB
    );
    for task in &stalled {
        task.abort();
    }
    for task in stalled {
        let _ = task.await;
    }
    // The budget is free again: a whole large write is answered.
    let mut writer = UnixStream::connect(&sc.socket).await.expect("connect");
    writer.write_all(&frame).await.expect("write the frame");
    let mut reply = vec![0u8; 4];
    tokio::time::timeout(PATIENCE, writer.read_exact(&mut reply))
        .await
        .expect("answered in time")
        .expect("read the answer");
    let read = sc
        .ok(
            "fs/read",
            json!({"path": "/w.bin", "offset": 0, "length": 3}),
        )
        .await;
    assert_eq!(read["data"], "AQEB");
}

/// The VM's adapters share their stdin and stdout budgets
/// (`limits.acp.maxQueuedStdinBytesPerVm`, `limits.acp.maxStdoutBytesPerVm`):
/// an agent that floods reads and stops reading its stdin fails its turn
/// naming the VM's bound when that is the one it fills, and a line longer
/// than the VM's stdout budget fails its turn naming that; the sessions
/// work again afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adapters_share_the_vms_stdin_and_stdout_budgets() {
    let sc = Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            limits: json!({"acp": {"maxQueuedStdinBytesPerVm": 32 * MIB,
                                   "maxStdoutBytesPerVm": 512 * 1024,
                                   "stalledStdinTimeoutMs": 2000}}),
            ..Options::default()
        },
    )
    .await;
    commit_a_turn(&sc, "flood").await;
    let line = format!("{}\n", "x".repeat(99));
    put_file(
        &sc,
        "/home/agentos/big.txt",
        line.repeat(150_000).as_bytes(),
    )
    .await;
    let setting = |e: &agentos_protocol::host::ErrorObject| {
        e.data
            .as_ref()
            .and_then(|d| d.get("setting"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let error = match sc
        .prompt("flood", "fs_flood 400 /home/agentos/big.txt")
        .await
    {
        Ok(v) => panic!("the flooding turn succeeded: {v}"),
        Err(agentos_client::ctl::ClientError::Rpc(e)) => e,
        Err(e) => panic!("no RPC error: {e}"),
    };
    assert_eq!(data_code(&error), "resource_limit", "{error:?}");
    assert_eq!(setting(&error), "limits.acp.maxQueuedStdinBytesPerVm");

    commit_a_turn(&sc, "long").await;
    let error = match sc.prompt("long", "oversize 1000000").await {
        Ok(v) => panic!("a line over the VM's stdout budget went through: {v}"),
        Err(agentos_client::ctl::ClientError::Rpc(e)) => e,
        Err(e) => panic!("no RPC error: {e}"),
    };
    assert_eq!(
        setting(&error),
        "limits.acp.maxStdoutBytesPerVm",
        "{error:?}"
    );
    // Both sessions serve again, on new adapters.
    for session in ["flood", "long"] {
        let answer = sc.prompt(session, "echo again").await.expect("a turn");
        assert_eq!(answer["message"]["content"][0]["text"], "again");
    }
    let limits = sc.ok("vm/status", json!({})).await["limits"].clone();
    for name in [
        "limits.acp.maxQueuedStdinBytesPerVm",
        "limits.acp.maxStdoutBytesPerVm",
    ] {
        assert!(
            limits
                .as_array()
                .is_some_and(|l| l.iter().any(|e| e["setting"] == name)),
            "{name} in vm/status"
        );
    }
}

/// A small request is never waited for when the requests being served
/// hold all of `limits.host.maxInboundBytes`: it is answered
/// `host_inbound_limit` naming the setting (the requests holding the
/// budget may be waiting for this very client's next answer), and served
/// again once the budget frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_request_is_refused_not_waited_for_when_the_inbound_budget_is_full() {
    let sc = Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            limits: json!({"host": {"maxInboundBytes": MIB}}),
            ..Options::default()
        },
    )
    .await;
    // A frame announcing 600 KiB takes the whole budget (twice its length,
    // within the budget) and never finishes.
    let mut holder = UnixStream::connect(&sc.socket).await.expect("connect");
    holder
        .write_all(&(600u32 * 1024).to_be_bytes())
        .await
        .expect("a header");
    holder.write_all(b"{").await.expect("a byte");
    common::eventually("the small request is refused", || async {
        match sc.call("vm/status", json!({})).await {
            Err(agentos_client::ctl::ClientError::Rpc(e)) => {
                assert_eq!(data_code(&e), "host_inbound_limit", "{e:?}");
                assert_eq!(
                    e.data.as_ref().and_then(|d| d.get("setting")),
                    Some(&json!("limits.host.maxInboundBytes"))
                );
                true
            }
            _ => false,
        }
    })
    .await;
    drop(holder);
    common::eventually("served again", || async {
        sc.call("vm/status", json!({})).await.is_ok()
    })
    .await;
}
