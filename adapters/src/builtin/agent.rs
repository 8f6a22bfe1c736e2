//! The builtin model agent as an ACP agent: the request loop over one byte
//! stream, which opens and forgets sessions and starts and cancels their
//! prompts (the state it shares with the turns is in `state.rs`).
//!
//! It answers `initialize`, `session/new`, `session/resume` and
//! `session/load` (both accepted for any id: the conversation is rebuilt
//! from the client's log at every turn, so there is nothing to replay), runs
//! each `session/prompt` as its own task (`turn.rs`), stops it on
//! `session/cancel`, and forgets a session on `session/close`. Everything else is "method not found". A line longer
//! than [`MAX_LINE_BYTES`] or one that is not JSON is skipped, never fatal.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agentos_protocol::acp::{methods, RpcError};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};

use super::peer::Peer;
use super::provider::Provider;
use super::state::{lock, Agent, Cancel};
use super::turn;

pub use super::state::AgentOptions;

/// The longest line accepted from the client.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Serves one client until its input ends.
pub async fn serve<R, W>(input: R, output: W, options: AgentOptions) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let provider =
        Provider::new(options.provider.clone()).map_err(|e| std::io::Error::other(e.message))?;
    serve_with(input, output, options, provider).await
}

/// [`serve`] calling providers through `provider`, which agents served in
/// one process share (its pooled clients are built once, not per agent).
pub async fn serve_with<R, W>(
    input: R,
    output: W,
    options: AgentOptions,
    provider: Provider,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let agent = Arc::new(Agent {
        peer: Peer::start(output),
        options,
        provider,
        client_fs: Mutex::new((false, false)),
        sessions: Mutex::new(HashMap::new()),
    });
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        match read_line(&mut reader, &mut line).await? {
            Line::End => break,
            Line::TooLong => {
                tracing::warn!("skipped a client line over {MAX_LINE_BYTES} bytes");
                continue;
            }
            Line::Complete => {}
        }
        let Ok(message) = serde_json::from_slice::<Value>(&line) else {
            if !line.iter().all(u8::is_ascii_whitespace) {
                tracing::warn!("skipped a client line that is not JSON");
            }
            continue;
        };
        agent.dispatch(message).await;
    }
    agent.peer.close();
    for state in lock(&agent.sessions).values() {
        if let Some(running) = &state.running {
            running.cancel();
        }
    }
    Ok(())
}

enum Line {
    Complete,
    TooLong,
    End,
}

async fn read_line<R: AsyncBufReadExt + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<Line> {
    let mut too_long = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if line.is_empty() && !too_long {
                Line::End
            } else if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
        let (chunk, done) = match memchr(buf) {
            Some(i) => (&buf[..i], i + 1),
            None => (buf, buf.len()),
        };
        let found = done > chunk.len();
        if !too_long {
            if line.len() + chunk.len() > MAX_LINE_BYTES {
                too_long = true;
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        reader.consume(done);
        if found {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
    }
}

fn memchr(buf: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', buf)
}

impl Agent {
    /// Serves one message; its parts are moved out of it, not copied.
    async fn dispatch(self: &Arc<Self>, mut message: Value) {
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let id = message.get_mut("id").map(Value::take);
        match (method.as_deref(), id) {
            (None, Some(id)) => self.peer.resolve(&id, message),
            (Some(method), Some(id)) => {
                let params = message
                    .get_mut("params")
                    .map(Value::take)
                    .unwrap_or(Value::Null);
                self.request(method.to_owned(), id, params).await;
            }
            (Some(methods::SESSION_CANCEL), None) => {
                let session = message["params"]["sessionId"].as_str().unwrap_or_default();
                if let Some(running) = lock(&self.sessions)
                    .get(session)
                    .and_then(|s| s.running.clone())
                {
                    running.cancel();
                }
            }
            _ => {}
        }
    }

    async fn request(self: &Arc<Self>, method: String, id: Value, params: Value) {
        let answer = match method.as_str() {
            methods::INITIALIZE => {
                let fs = &params["clientCapabilities"]["fs"];
                *lock(&self.client_fs) = (
                    fs["readTextFile"].as_bool().unwrap_or(false),
                    fs["writeTextFile"].as_bool().unwrap_or(false),
                );
                Ok(json!({
                    "protocolVersion": agentos_protocol::acp::PROTOCOL_VERSION,
                    "agentCapabilities": {
                        "loadSession": true,
                        "sessionCapabilities": {"resume": {}},
                        "promptCapabilities": {"embeddedContext": true},
                    },
                    "agentInfo": {"name": "agentos-builtin", "version": env!("CARGO_PKG_VERSION")},
                    "authMethods": [],
                }))
            }
            methods::SESSION_NEW => {
                let session = uuid::Uuid::new_v4().to_string();
                self.open_session(&session, &params);
                Ok(json!({ "sessionId": session }))
            }
            methods::SESSION_CLOSE => {
                let session = params["sessionId"].as_str().unwrap_or_default();
                if let Some(state) = lock(&self.sessions).remove(session) {
                    if let Some(running) = state.running {
                        running.cancel();
                    }
                }
                Ok(json!({}))
            }
            methods::SESSION_RESUME | methods::SESSION_LOAD => match params["sessionId"].as_str() {
                Some(session) if !session.is_empty() => {
                    self.open_session(session, &params);
                    Ok(json!({}))
                }
                _ => Err(RpcError::invalid_params("sessionId must be a string")),
            },
            methods::SESSION_PROMPT => {
                let Some(session) = params["sessionId"].as_str().map(str::to_owned) else {
                    self.peer
                        .respond(
                            id,
                            Err(RpcError::invalid_params("sessionId must be a string")),
                        )
                        .await;
                    return;
                };
                let cancel = Cancel::new();
                let refused = {
                    let mut sessions = lock(&self.sessions);
                    match sessions.get_mut(&session) {
                        None => Some(RpcError::resource_not_found(format!(
                            "no session {session:?}"
                        ))),
                        Some(state) if state.running.is_some() => Some(RpcError::invalid_params(
                            "the session is already running a prompt",
                        )),
                        Some(state) => {
                            state.running = Some(cancel.clone());
                            None
                        }
                    }
                };
                if let Some(refused) = refused {
                    self.peer.respond(id, Err(refused)).await;
                    return;
                }
                let prompt = params["prompt"].as_array().cloned().unwrap_or_default();
                let agent = Arc::clone(self);
                tokio::spawn(async move {
                    // A turn that panics still answers its prompt, and the
                    // session takes the next one.
                    let turn = {
                        let agent = Arc::clone(&agent);
                        let session = session.clone();
                        tokio::spawn(
                            async move { turn::run(&agent, &session, prompt, &cancel).await },
                        )
                    };
                    let answer = turn.await.unwrap_or_else(|e| {
                        tracing::error!(error = %e, "a turn of the builtin agent panicked");
                        Err(RpcError::internal(
                            "the agent failed while running the turn",
                        ))
                    });
                    if let Some(state) = lock(&agent.sessions).get_mut(&session) {
                        state.running = None;
                    }
                    agent.peer.respond(id, answer).await;
                });
                return;
            }
            other => Err(RpcError::method_not_found(other)),
        };
        self.peer.respond(id, answer).await;
    }

    fn open_session(&self, session: &str, params: &Value) {
        let cwd = params["cwd"].as_str().map(PathBuf::from);
        let mut sessions = lock(&self.sessions);
        let state = sessions.entry(session.to_owned()).or_default();
        state.cwd = cwd;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    /// Sends one request line and reads lines until its answer.
    async fn ask<W: tokio::io::AsyncWrite + Unpin, R: tokio::io::AsyncBufRead + Unpin>(
        to: &mut W,
        from: &mut R,
        id: u64,
        method: &str,
        params: Value,
    ) -> Value {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        to.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        loop {
            let mut text = String::new();
            assert!(
                from.read_line(&mut text).await.unwrap() > 0,
                "the agent hung up"
            );
            let message: Value = serde_json::from_str(&text).unwrap();
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    #[tokio::test]
    async fn sessions_open_close_and_bad_lines_are_skipped() {
        let (client, agent_side) = tokio::io::duplex(1 << 16);
        let (agent_in, agent_out) = tokio::io::split(agent_side);
        tokio::spawn(serve(agent_in, agent_out, AgentOptions::default()));
        let (from, mut to) = tokio::io::split(client);
        let mut from = tokio::io::BufReader::new(from);
        to.write_all(b"not json\n\n").await.unwrap();
        let init = ask(
            &mut to,
            &mut from,
            1,
            methods::INITIALIZE,
            json!({"protocolVersion": 1}),
        )
        .await;
        assert_eq!(
            init["result"]["agentCapabilities"]["sessionCapabilities"]["resume"],
            json!({})
        );
        let new = ask(
            &mut to,
            &mut from,
            2,
            methods::SESSION_NEW,
            json!({"cwd": "/w", "mcpServers": []}),
        )
        .await;
        let session = new["result"]["sessionId"].as_str().unwrap().to_owned();
        let resumed = ask(
            &mut to,
            &mut from,
            3,
            methods::SESSION_RESUME,
            json!({"sessionId": "old", "cwd": "/w"}),
        )
        .await;
        assert_eq!(resumed["result"], json!({}));
        let closed = ask(
            &mut to,
            &mut from,
            4,
            methods::SESSION_CLOSE,
            json!({"sessionId": session}),
        )
        .await;
        assert_eq!(closed["result"], json!({}));
        let prompt = ask(
            &mut to,
            &mut from,
            5,
            methods::SESSION_PROMPT,
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}),
        )
        .await;
        assert_eq!(prompt["error"]["code"], json!(-32002));
        let unknown = ask(&mut to, &mut from, 6, methods::SESSION_SET_MODE, json!({})).await;
        assert_eq!(unknown["error"]["code"], json!(-32601));
    }
}
