//! Hostile-load benchmark (release): what peers that misbehave cost the
//! sidecar, each on a fresh one.
//!
//! - idle flood: 1,100 TCP connections to the signed API that send nothing
//!   (past its bound of 1,024, opened 2 ms apart so each reaches it), then
//!   the time a client that sends a request waits for its answer;
//! - WebSocket flood: 500 sockets subscribed to `account/<A>` and
//!   `agents/<X>` that never read while A sends 2,000 `UpdateAgent` with a
//!   16 KB system prompt, and one subscriber that reads: the sidecar's peak
//!   RSS and what the reader received;
//! - host reads: 140 `fs/read` of a 16 MiB file on a host connection that
//!   never reads: the sidecar's peak RSS.
//!
//! `AGENTOS_BENCH_SIDECAR` runs another build of the sidecar (an older one,
//! to compare); `--old` leaves out the settings older builds do not know.
//! Run with `scripts/bench-hostile`.

use std::time::{Duration, Instant};

use agentos_tests::bench::{start_sidecar, status_kib, Error};
use agentos_tests::http::{request, Target};
use agentos_tests::seed::{call, Signer};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;

const MIB: u64 = 1024 * 1024;

fn peak_mib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:").unwrap_or(0) / 1024
}

fn http_address(ready: &Value) -> Result<String, Error> {
    Ok(ready["http"]
        .as_str()
        .ok_or("no http in the ready line")?
        .to_owned())
}

/// 1,100 silent connections, then five requests, each on a new connection.
async fn idle_flood() -> Result<(), Error> {
    let sidecar = start_sidecar(json!({"http": {"listen": "127.0.0.1:0"}})).await?;
    let address = http_address(&sidecar.ready)?;
    let mut silent = Vec::with_capacity(1100);
    for _ in 0..1100 {
        silent.push(tokio::net::TcpStream::connect(&address).await?);
        // At the pace the server accepts: connections faster than that
        // overflow the kernel's queues and never reach the server at all.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let target = Target::from_ready(&address);
    let mut waits = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let answered = tokio::time::timeout(
            Duration::from_secs(45),
            request(&target, "GET", "/api/health", &[], b""),
        )
        .await;
        let wait = started.elapsed();
        match answered {
            Ok(Ok(reply)) if reply.status == 200 => {
                waits.push(format!("{:.3} s", wait.as_secs_f64()))
            }
            Ok(Ok(reply)) => waits.push(format!(
                "status {} after {:.3} s",
                reply.status,
                wait.as_secs_f64()
            )),
            Ok(Err(e)) => waits.push(format!("failed after {:.3} s: {e}", wait.as_secs_f64())),
            Err(_) => waits.push("no answer within 45 s".into()),
        }
    }
    println!(
        "idle flood: 1,100 silent connections; a client's wait for /api/health, five times: {}",
        waits.join(", ")
    );
    drop(silent);
    Ok(())
}

/// 500 silent sockets and a reader, while 2,000 16 KB updates go out.
/// The `UpdateAgent`s of the WebSocket flood.
const UPDATES: u64 = 2000;

async fn ws_flood(old: bool) -> Result<(), Error> {
    let ws = if old {
        json!({"maxSockets": 1024})
    } else {
        json!({"maxSockets": 1024, "maxSocketsPerAccount": 1024})
    };
    let sidecar = start_sidecar(json!({"http": {"listen": "127.0.0.1:0", "ws": ws}})).await?;
    let pid = sidecar.child.id().ok_or("no pid")?;
    let address = http_address(&sidecar.ready)?;
    let target = Target::from_ready(&address);
    let owner = Signer::new();
    let definition = |prompt: &str| {
        json!({"name": "Helper", "systemPrompt": prompt, "modelProvider": "openai",
               "model": "gpt-5-mini", "adapter": "echo"})
    };
    let created = call(
        &target,
        &owner,
        json!({"_": "CreateAgent", "definition": definition("first")}),
    )
    .await;
    let agent_id = created.text("agentId");
    let keys = [
        format!("account/{}", owner.id()),
        format!("agents/{agent_id}"),
    ];
    let url = format!("ws://{address}/agents/ws");
    let mut silent = Vec::with_capacity(500);
    for _ in 0..500 {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_recv_buffer_size(4096)?;
        let stream = socket.connect(address.parse()?).await?;
        let (mut ws, _) = tokio_tungstenite::client_async(&url, stream).await?;
        for key in &keys {
            ws.send(Message::Binary(
                owner.sign(&json!({"_": "Subscribe", "key": key})).into(),
            ))
            .await?;
        }
        silent.push(ws);
    }
    let (mut reader, _) = tokio_tungstenite::connect_async(&url).await?;
    reader
        .send(Message::Binary(
            owner
                .sign(&json!({"_": "Subscribe", "key": keys[1]}))
                .into(),
        ))
        .await?;
    let agent_key = keys[1].clone();
    let reading = tokio::spawn(async move {
        // Until every change came, or none for 20 s (the server's pings,
        // every 20 s by default, do not count: with them the wait could
        // never end).
        let mut changes = 0u64;
        let mut heard = Instant::now();
        while changes < UPDATES {
            let left = Duration::from_secs(20).saturating_sub(heard.elapsed());
            let Ok(Some(Ok(message))) = tokio::time::timeout(left, reader.next()).await else {
                break;
            };
            if let Message::Text(text) = message {
                heard = Instant::now();
                let event: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                if event["_"] == "change" && event["key"] == json!(agent_key) {
                    changes += 1;
                }
            }
        }
        changes
    });
    let before = peak_mib(pid);
    let padding = "x".repeat(16 * 1024);
    let started = Instant::now();
    for n in 0..UPDATES {
        call(
            &target,
            &owner,
            json!({"_": "UpdateAgent", "agentId": agent_id,
                   "definition": definition(&format!("{n}:{padding}"))}),
        )
        .await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let changes = reading.await?;
    println!(
        "ws flood: 500 silent sockets, 2,000 x 16 KB UpdateAgent in {elapsed:.1} s; VmHWM {before} MiB before, {} MiB after; the reader got {changes} changes of the agent",
        peak_mib(pid)
    );
    drop(silent);
    Ok(())
}

/// 140 reads of a 16 MiB file on a host connection that never reads.
async fn host_reads() -> Result<(), Error> {
    let sidecar = start_sidecar(json!({})).await?;
    let pid = sidecar.child.id().ok_or("no pid")?;
    let (client, _notes) = agentos_client::ctl::HostClient::connect(&sidecar.socket).await?;
    let piece = base64_zeros(8 * MIB as usize);
    for i in 0..2u64 {
        let mut params = json!({"path": "/big.bin", "data": piece});
        if i > 0 {
            params["offset"] = json!(i * 8 * MIB);
        }
        client.call("fs/write", params).await?;
    }
    let before = peak_mib(pid);
    let mut attacker = tokio::net::UnixStream::connect(&sidecar.socket).await?;
    let mut frames = Vec::new();
    for id in 0..140 {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "fs/read",
                             "params": {"path": "/big.bin", "offset": 0, "length": 16 * MIB}});
        frames.extend_from_slice(&agentos_protocol::host::encode_frame(
            request.to_string().as_bytes(),
        )?);
    }
    attacker.write_all(&frames).await?;
    let mut peak = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        peak = peak.max(peak_mib(pid));
    }
    println!("host reads: 140 x 16 MiB fs/read, never read; VmHWM {before} MiB before, {peak} MiB during");
    drop(attacker);
    Ok(())
}

fn base64_zeros(n: usize) -> String {
    // Zero bytes in base64 are all 'A' (with padding for the tail).
    let mut out = "A".repeat(n / 3 * 4);
    match n % 3 {
        1 => out.push_str("AA=="),
        2 => out.push_str("AAA="),
        _ => {}
    }
    out
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let old = args.iter().any(|a| a == "--old");
    // `idle`, `ws` or `host` runs only those.
    let chosen: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let run = |name: &str| chosen.is_empty() || chosen.contains(&name);
    println!("load: {}", agentos_tests::bench::load_average());
    if run("idle") {
        idle_flood().await?;
    }
    if run("ws") {
        ws_flood(old).await?;
    }
    if run("host") {
        host_reads().await?;
    }
    Ok(())
}
