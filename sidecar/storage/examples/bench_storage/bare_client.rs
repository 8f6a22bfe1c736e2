//! Round trips per transaction, measured rather than estimated: a bare ARS
//! v1 client, with none of the handle's work (its statement values,
//! expected-change checks, connection driver and in-flight bound). Three
//! shapes:
//! - stepwise, what the handle sends: `Begin` and the first insert in one
//!   write, every later insert and then `Commit` once the one before is
//!   answered. It is the only shape a server that runs each request on a
//!   task of its own (Rivet's) keeps in order, so against an instant peer it
//!   is the ceiling of what any client can get from such a server;
//! - two round trips: `Begin` and every insert in one write, `Commit` once
//!   they are answered (what the handle sent before it met Rivet's server,
//!   which may run the pipelined inserts in any order);
//! - one round trip: `Commit` written behind them. Never safe: ARS v1
//!   commits a lease whatever its statements answered, so a `Commit` sent
//!   before the answers are seen would keep the statements before a failed
//!   one, or a compare-and-set that matched nothing.
//!
//! Against an instant peer each shape reaches the most it could give on
//! this machine; through a real server, what it gives with SQLite behind it.

use agentos_protocol::ars::{
    self, ClientFrame, FrameDecoder, Request, RequestPayload, ResponsePayload, ServerFrame,
    SqlValue, SqliteBegin, SqliteCommit, SqliteQuery,
};
use bytes::BytesMut;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// How a transaction's requests go out.
#[derive(Clone, Copy)]
pub enum Shape {
    /// `Begin` with the first statement, then one request per answer.
    Stepwise,
    /// `Begin` and the statements, then `Commit` after their answers.
    TwoTrips,
    /// Everything in one write.
    OneTrip,
}

/// A connected bare client. Request ids count up from 1, and a
/// transaction's lease key is the count of requests sent before it.
pub struct BareClient {
    stream: UnixStream,
    decoder: FrameDecoder,
    buf: BytesMut,
    out: Vec<u8>,
    next_request: u32,
}

impl BareClient {
    /// Connects and says hello.
    pub async fn connect(socket: &Path) -> Result<BareClient, String> {
        let stream = UnixStream::connect(socket)
            .await
            .map_err(|e| e.to_string())?;
        let mut client = BareClient {
            stream,
            decoder: FrameDecoder::new(ars::DEFAULT_MAX_FRAME_BYTES),
            buf: BytesMut::with_capacity(64 * 1024),
            out: Vec::with_capacity(64 * 1024),
            next_request: 0,
        };
        let hello = ars::client_hello_frame().map_err(|e| e.to_string())?;
        client
            .stream
            .write_all(&hello)
            .await
            .map_err(|e| e.to_string())?;
        let payload = client.next_payload().await?;
        match ars::decode_server_hello(payload).map_err(|e| e.to_string())? {
            ars::ServerHello::HelloOk(_) => Ok(client),
            other => Err(format!("the peer refused the hello: {other:?}")),
        }
    }

    async fn next_payload(&mut self) -> Result<bytes::Bytes, String> {
        loop {
            if let Some(payload) = self
                .decoder
                .decode(&mut self.buf)
                .map_err(|e| e.to_string())?
            {
                return Ok(payload);
            }
            let n = self
                .stream
                .read_buf(&mut self.buf)
                .await
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the peer closed the connection".into());
            }
        }
    }

    fn push(&mut self, lease_key: Option<String>, payload: RequestPayload) -> Result<(), String> {
        self.next_request = self.next_request.wrapping_add(1);
        let frame = ClientFrame::Request(Request {
            request_id: self.next_request,
            lease_key,
            payload,
        });
        ars::client_frame_into(&frame, ars::DEFAULT_MAX_FRAME_BYTES, &mut self.out)
            .map_err(|e| e.to_string())
    }

    /// One transaction of `statements` inserts sent in `shape`; every answer
    /// must be the success its request expects.
    async fn transaction(
        &mut self,
        shape: Shape,
        statements: Vec<(i64, String)>,
    ) -> Result<(), String> {
        let lease = self.next_request.to_string();
        let insert = |(id, body): (i64, String)| {
            RequestPayload::SqliteQuery(SqliteQuery {
                sql: super::INSERT.into(),
                params: vec![SqlValue::SqlInteger(id), SqlValue::SqlText(body)],
            })
        };
        let commit = RequestPayload::SqliteCommit(SqliteCommit {
            lease_key: lease.clone(),
        });
        self.out.clear();
        self.push(
            None,
            RequestPayload::SqliteBegin(SqliteBegin {
                lease_key: lease.clone(),
                timeout_ms: None,
            }),
        )?;
        let mut statements = statements.into_iter();
        match shape {
            Shape::Stepwise => {
                let mut answers = 1;
                for statement in statements {
                    self.push(Some(lease.clone()), insert(statement))?;
                    self.send_and_await(answers + 1).await?;
                    self.out.clear();
                    answers = 0;
                }
                self.push(None, commit)?;
                self.send_and_await(answers + 1).await
            }
            Shape::TwoTrips | Shape::OneTrip => {
                let answers = statements.len() + 1;
                for statement in statements.by_ref() {
                    self.push(Some(lease.clone()), insert(statement))?;
                }
                if let Shape::OneTrip = shape {
                    self.push(None, commit)?;
                    return self.send_and_await(answers + 1).await;
                }
                self.send_and_await(answers).await?;
                self.out.clear();
                self.push(None, commit)?;
                self.send_and_await(1).await
            }
        }
    }

    /// Writes what is queued and reads `answers` successes.
    async fn send_and_await(&mut self, answers: usize) -> Result<(), String> {
        self.stream
            .write_all(&self.out)
            .await
            .map_err(|e| e.to_string())?;
        for _ in 0..answers {
            let payload = self.next_payload().await?;
            let ServerFrame::Response(response) =
                ars::decode_server_frame(payload).map_err(|e| e.to_string())?
            else {
                return Err("the peer went away".into());
            };
            match response.payload {
                ResponsePayload::SqliteBeginOk | ResponsePayload::SqliteCommitOk => {}
                ResponsePayload::SqliteQueryOk(ok) if ok.changes == 1 => {}
                other => return Err(format!("unexpected answer {other:?}")),
            }
        }
        Ok(())
    }

    /// Rows/s of `rows_per_tx`-row transactions sent in `shape` for `run`;
    /// `next_id` carries the key sequence across rounds.
    pub async fn run(
        &mut self,
        shape: Shape,
        next_id: &mut i64,
        rows_per_tx: usize,
        run: Duration,
    ) -> Result<f64, String> {
        let mut meter = super::Meter::new(run);
        while meter.running() {
            let statements = (0..rows_per_tx)
                .map(|_| {
                    *next_id += 1;
                    (*next_id, super::payload(*next_id))
                })
                .collect();
            self.transaction(shape, statements).await?;
            meter.add(rows_per_tx);
        }
        Ok(meter.rate())
    }
}
