//! A WebSocket on `/agents/ws`: signed `Subscribe`/`Unsubscribe` frames
//! out (binary, one canonical envelope each), JSON events in.
//!
//! Events are read from the socket only when asked for, so nothing piles
//! up in this process beyond one message, whose size is bounded by the
//! client's response bound; a server that sends more than that ends the
//! subscription with an error. Pings are answered by the WebSocket layer
//! while it reads.

use agentos_protocol::seed::Action;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use super::{ClientError, SeedClient, Transport, WS_PATH};

/// A byte stream a WebSocket runs over: TCP or a Unix socket.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// An open `/agents/ws` connection.
pub struct Subscription {
    client: SeedClient,
    socket: WebSocketStream<Box<dyn Io>>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl Subscription {
    /// Connects and completes the WebSocket handshake; nothing is
    /// subscribed yet.
    pub(crate) async fn open(client: SeedClient) -> Result<Subscription, ClientError> {
        let stream: Box<dyn Io> = match client.transport() {
            Transport::Http { addr } => Box::new(
                TcpStream::connect(addr.as_str())
                    .await
                    .map_err(|e| ClientError::io(format!("cannot connect to {addr}"), e))?,
            ),
            Transport::HttpUnix { path } => {
                Box::new(UnixStream::connect(path).await.map_err(|e| {
                    ClientError::io(format!("cannot connect to {}", path.display()), e)
                })?)
            }
            Transport::HostSocket { .. } => {
                return Err(ClientError::Unsupported(
                    "the host socket carries no WebSocket; subscribe through http.listen \
                     (--url)"
                        .to_string(),
                ))
            }
        };
        let limit = client.max_response_bytes();
        let config = WebSocketConfig::default()
            .max_message_size(Some(limit))
            .max_frame_size(Some(limit));
        let url = format!("ws://{}{WS_PATH}", client.transport().host_header());
        let (socket, _response) =
            tokio_tungstenite::client_async_with_config(url, stream, Some(config))
                .await
                .map_err(|e| ClientError::WebSocket(format!("handshake failed: {e}")))?;
        Ok(Subscription { client, socket })
    }

    /// Sends a signed `Subscribe{key, afterSeq?}` on this socket. The
    /// server answers with a `subscribed` or an `error` event.
    pub async fn subscribe(
        &mut self,
        key: &str,
        after_seq: Option<u64>,
    ) -> Result<(), ClientError> {
        self.send(&Action::Subscribe {
            key: key.to_string(),
            after_seq,
        })
        .await
    }

    /// Sends a signed `Unsubscribe{key}`.
    pub async fn unsubscribe(&mut self, key: &str) -> Result<(), ClientError> {
        self.send(&Action::Unsubscribe {
            key: key.to_string(),
        })
        .await
    }

    async fn send(&mut self, action: &Action) -> Result<(), ClientError> {
        let bytes = self
            .client
            .sign(action.to_map().map_err(ClientError::Sign)?)?;
        self.socket
            .send(Message::Binary(bytes.into()))
            .await
            .map_err(|e| ClientError::WebSocket(e.to_string()))
    }

    /// The next event, a JSON object named under `_`; `None` once the
    /// server has closed the socket.
    pub async fn next_event(&mut self) -> Result<Option<serde_json::Value>, ClientError> {
        loop {
            let message = match self.socket.next().await {
                None => return Ok(None),
                Some(Ok(message)) => message,
                Some(Err(WsError::ConnectionClosed | WsError::AlreadyClosed)) => return Ok(None),
                Some(Err(WsError::Capacity(e))) => return Err(ClientError::ResponseTooLarge {
                    limit: match e {
                        tokio_tungstenite::tungstenite::error::CapacityError::MessageTooLong {
                            max_size,
                            ..
                        } => max_size,
                        _ => self.client.max_response_bytes(),
                    },
                }),
                Some(Err(e)) => return Err(ClientError::WebSocket(e.to_string())),
            };
            match message {
                Message::Text(text) => return parse_event(text.as_str()).map(Some),
                Message::Binary(_) => {
                    return Err(ClientError::BadEvent(
                        "the server sent a binary frame; events are JSON text".to_string(),
                    ))
                }
                Message::Close(_) => return Ok(None),
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
            }
        }
    }

    /// Closes the socket politely.
    pub async fn close(mut self) -> Result<(), ClientError> {
        match self.socket.close(None).await {
            Ok(()) | Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => Ok(()),
            Err(e) => Err(ClientError::WebSocket(e.to_string())),
        }
    }
}

/// One event frame: a JSON object whose `_` is a string.
fn parse_event(text: &str) -> Result<serde_json::Value, ClientError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| ClientError::BadEvent(format!("not JSON: {e}")))?;
    match value.get("_") {
        Some(serde_json::Value::String(_)) if value.is_object() => Ok(value),
        _ => Err(ClientError::BadEvent(
            "an event is a JSON object with its name under `_`".to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_must_be_named_objects() {
        let event = parse_event(r#"{"_":"connected","connectedAt":5}"#).unwrap();
        assert_eq!(event["connectedAt"], 5);
        for bad in ["", "[]", "{}", r#"{"_":1}"#, r#"["_"]"#, "nope"] {
            assert_eq!(parse_event(bad).unwrap_err().code(), "bad_event", "{bad}");
        }
    }
}
