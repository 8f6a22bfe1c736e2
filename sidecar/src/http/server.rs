//! The listener of the signed API: a loopback TCP port or a private Unix
//! socket, served by the router over hyper's HTTP/1.1 until shutdown, then
//! drained. Connections are bounded (`http.maxConnections`) and each must
//! send its request headers within `http.headerReadTimeoutMs`. Idle peers
//! cannot hold the listener: at the bound, a new connection takes the place
//! of an idle one (one that never sent a request head first, oldest first,
//! then the one idle longest between requests), so a flood of connections
//! that send nothing cannot keep out a client that does; only when every
//! connection is inside a request does the next wait. Its WebSockets are
//! closed first at shutdown (1001, "server shutting down"), since an
//! upgraded connection is no longer a request the drain would wait for.

use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::conns::Conns;
use super::ws::Sockets;
use crate::config::{HttpConfig, HttpListen};

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("http.listen {listen}: cannot bind: {message}")]
    Bind { listen: String, message: String },
}

impl HttpError {
    pub fn code(&self) -> &'static str {
        match self {
            HttpError::Bind { .. } => "http_bind_failed",
        }
    }
}

enum Bound {
    Tcp(TcpListener),
    Unix(UnixListener, std::path::PathBuf),
}

/// A bound listener, not yet serving.
pub struct HttpServer {
    bound: Bound,
    /// Where it listens, as printed in the ready line (`127.0.0.1:7878`, or
    /// `unix:/path`); a port of 0 is resolved to the real one.
    pub address: String,
}

/// A server that is running; `shutdown` stops it.
pub struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    socket: Option<std::path::PathBuf>,
    sockets: Arc<Sockets>,
}

impl HttpServer {
    pub async fn bind(listen: &HttpListen) -> Result<HttpServer, HttpError> {
        let err = |message: String| HttpError::Bind {
            listen: listen.to_string(),
            message,
        };
        match listen {
            HttpListen::Tcp(addr) => {
                let listener = TcpListener::bind(addr).await.map_err(|e| {
                    if e.kind() == std::io::ErrorKind::AddrInUse {
                        err("the port is in use (set http.listen to another port)".into())
                    } else {
                        err(e.to_string())
                    }
                })?;
                let address = listener
                    .local_addr()
                    .map(|a| a.to_string())
                    .map_err(|e| err(e.to_string()))?;
                Ok(HttpServer {
                    bound: Bound::Tcp(listener),
                    address,
                })
            }
            HttpListen::Unix(path) => {
                let listener = agentos_base::private::bind_private_socket(path).map_err(err)?;
                Ok(HttpServer {
                    bound: Bound::Unix(listener, path.clone()),
                    address: listen.to_string(),
                })
            }
        }
    }

    /// Binds on `runtime`, whose workers will serve it: a listener is
    /// driven by the runtime it was bound on.
    pub async fn bind_on(
        runtime: &tokio::runtime::Handle,
        listen: &HttpListen,
    ) -> Result<HttpServer, HttpError> {
        let owned = listen.clone();
        runtime
            .spawn(async move { HttpServer::bind(&owned).await })
            .await
            .unwrap_or_else(|e| {
                Err(HttpError::Bind {
                    listen: listen.to_string(),
                    message: format!("the HTTP runtime could not bind: {e}"),
                })
            })
    }

    /// Serves `router` on `runtime` (the one it was bound on) until
    /// [`Running::shutdown`]; `sockets` are the
    /// router's WebSockets. At most `http.maxConnections` connections are
    /// open at once: past it a new one takes an idle one's place, or waits
    /// in the backlog while every one is inside a request. One that takes
    /// longer than `http.headerReadTimeoutMs` to send a request's headers
    /// (idle keep-alive time included) is closed.
    pub fn serve(
        self,
        runtime: &tokio::runtime::Handle,
        router: Router,
        sockets: Arc<Sockets>,
        config: &HttpConfig,
    ) -> Running {
        let (stop, stopped) = watch::channel(false);
        let bounds = Bounds {
            conns: Conns::new(config.max_connections),
            header_timeout: Duration::from_millis(config.header_read_timeout_ms),
        };
        let (task, socket) = match self.bound {
            Bound::Tcp(listener) => {
                // Without it, a small frame written while the previous one
                // is unacknowledged waits for the peer's delayed ACK (up to
                // 40 ms): a streamed token or an answer would stall.
                let listener = listener.tap_io(|tcp| {
                    if let Err(e) = tcp.set_nodelay(true) {
                        tracing::debug!(error = %e, "TCP_NODELAY could not be set");
                    }
                });
                (
                    runtime.spawn(serve_on(listener, router, stopped, bounds)),
                    None,
                )
            }
            Bound::Unix(listener, path) => (
                runtime.spawn(serve_on(listener, router, stopped, bounds)),
                Some(path),
            ),
        };
        Running {
            stop,
            task,
            socket,
            sockets,
        }
    }
}

/// The most one connection buffers of a request head.
const MAX_CONNECTION_BUFFER: usize = 64 * 1024;

struct Bounds {
    conns: Arc<Conns>,
    header_timeout: Duration,
}

/// Accepts until `stopped`, one task per connection holding its place;
/// then waits for the connections to finish what they are doing.
async fn serve_on<L>(
    mut listener: L,
    router: Router,
    mut stopped: watch::Receiver<bool>,
    bounds: Bounds,
) where
    L: axum::serve::Listener,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(bounds.header_timeout)
        // A signed request's head is small: 64 KiB of buffer per
        // connection, not hyper's 400 KiB.
        .max_buf_size(MAX_CONNECTION_BUFFER);
    let service = TowerToHyperService::new(router);
    loop {
        // axum's listeners retry failed accepts with a backoff themselves.
        let (io, _) = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.wait_for(|s| *s) => break,
        };
        let place = tokio::select! {
            place = bounds.conns.admit() => place,
            _ = stopped.wait_for(|s| *s) => break,
        };
        let connection = http
            .serve_connection(TokioIo::new(io), place.track(service.clone()))
            .with_upgrades();
        let mut stop = stopped.clone();
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = place.evicted.notified() => {
                    tracing::debug!("an idle HTTP connection gave its place to a new one");
                    Ok(())
                }
                () = async { let _ = stop.wait_for(|s| *s).await; } => {
                    // Finish the request in flight, then close.
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "an HTTP connection ended with an error");
            }
            drop(place);
        });
    }
    drop(listener);
    // Every connection holds its place until it is done.
    bounds.conns.drained().await;
}

impl Running {
    /// Closes every WebSocket (1001), stops accepting, lets requests in
    /// flight finish, all within `deadline`, and removes a Unix socket
    /// file. True when everything closed and drained.
    pub async fn shutdown(self, deadline: Duration) -> bool {
        let started = tokio::time::Instant::now();
        let closed = self.sockets.close_all(deadline).await;
        let _ = self.stop.send(true);
        let task = self.task;
        let left = deadline.saturating_sub(started.elapsed());
        let drained = tokio::time::timeout(left, task).await.is_ok() && closed;
        if let Some(path) = self.socket {
            let _ = std::fs::remove_file(path);
        }
        drained
    }
}
