//! An ARS v1 peer that answers at once, without SQLite: on one thread of
//! its own it polls its socket without sleeping while its rounds run (so no
//! answer waits for a thread to wake; between them it naps, leaving the
//! other targets' rounds a quiet machine), and answers every request in a
//! read with one write
//! (`Begin` → `BeginOk`, a query → `QueryOk` of one change, `Commit` →
//! `CommitOk`). What the handle reaches against it is the ceiling its own
//! side allows on this machine: the remaining cost of an `actor_uds`
//! transaction is the client's, not the server's.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use agentos_protocol::ars::{
    self, ClientFrame, FrameDecoder, HelloOk, RequestPayload, Response, ResponsePayload,
    ServerFrame, ServerHello, SqlValue, SqliteQueryOk,
};
use bytes::BytesMut;

/// A running peer; dropping it stops the thread.
pub struct InstantPeer {
    pub socket: PathBuf,
    /// Poll without sleeping while set.
    pub active: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl InstantPeer {
    /// Listens on `socket` and serves the first connection made to it.
    pub fn start(socket: &Path) -> std::io::Result<InstantPeer> {
        let socket = socket.to_owned();
        let listener = UnixListener::bind(&socket)?;
        let stop = Arc::new(AtomicBool::new(false));
        let active = Arc::new(AtomicBool::new(false));
        let (stopping, spinning) = (stop.clone(), active.clone());
        let thread = std::thread::Builder::new()
            .name("instant-peer".into())
            .spawn(move || {
                if let Err(e) = serve(&listener, &stopping, &spinning) {
                    eprintln!("instant peer: {e}");
                }
            })?;
        Ok(InstantPeer {
            socket,
            active,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for InstantPeer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(listener: &UnixListener, stop: &AtomicBool, active: &AtomicBool) -> Result<(), String> {
    // Polled, so a handle that never connects cannot keep `drop` waiting.
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    stream.set_nonblocking(true).map_err(|e| e.to_string())?;
    let decoder = FrameDecoder::new(ars::DEFAULT_MAX_FRAME_BYTES);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut out = Vec::with_capacity(64 * 1024);
    let mut greeted = false;
    while !stop.load(Ordering::Relaxed) {
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                match active.load(Ordering::Relaxed) {
                    true => std::thread::yield_now(),
                    false => std::thread::sleep(std::time::Duration::from_millis(1)),
                }
                continue;
            }
            Err(e) => return Err(e.to_string()),
        }
        while let Some(payload) = decoder.decode(&mut buf).map_err(|e| e.to_string())? {
            if !greeted {
                greeted = true;
                let hello = ServerHello::HelloOk(HelloOk {
                    max_frame_bytes: ars::DEFAULT_MAX_FRAME_BYTES,
                });
                out.extend_from_slice(&ars::server_hello_frame(&hello).map_err(|e| e.to_string())?);
                continue;
            }
            let ClientFrame::Request(request) =
                ars::decode_client_frame(payload).map_err(|e| e.to_string())?;
            let response = ServerFrame::Response(Response {
                request_id: request.request_id,
                payload: answer(request.payload),
            });
            ars::server_frame_into(&response, ars::DEFAULT_MAX_FRAME_BYTES, &mut out)
                .map_err(|e| e.to_string())?;
        }
        let mut written = 0;
        while written < out.len() {
            match stream.write(&out[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => return Err(e.to_string()),
            }
        }
        out.clear();
    }
    Ok(())
}

fn answer(request: RequestPayload) -> ResponsePayload {
    match request {
        RequestPayload::SqliteExec(_) => ResponsePayload::SqliteExecOk,
        RequestPayload::SqliteBegin(_) => ResponsePayload::SqliteBeginOk,
        RequestPayload::SqliteCommit(_) => ResponsePayload::SqliteCommitOk,
        RequestPayload::SqliteRollback(_) => ResponsePayload::SqliteRollbackOk,
        // The handle checks that foreign keys are on when it connects.
        RequestPayload::SqliteQuery(query) if query.sql == "PRAGMA foreign_keys" => {
            ResponsePayload::SqliteQueryOk(SqliteQueryOk {
                columns: vec!["foreign_keys".into()],
                rows: vec![vec![SqlValue::SqlInteger(1)]],
                changes: 0,
                last_insert_row_id: None,
            })
        }
        RequestPayload::SqliteQuery(_) => ResponsePayload::SqliteQueryOk(SqliteQueryOk {
            columns: vec![],
            rows: vec![],
            changes: 1,
            last_insert_row_id: None,
        }),
    }
}
