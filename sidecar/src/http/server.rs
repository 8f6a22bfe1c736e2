//! The listener of the signed API: a loopback TCP port or a private Unix
//! socket, served by axum until shutdown, then drained. Its WebSockets
//! are closed first (1001, "server shutting down"), since an upgraded
//! connection is no longer a request the drain would wait for.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::ws::Sockets;
use crate::config::HttpListen;

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
                let listener = crate::private::bind_private_socket(path).map_err(err)?;
                Ok(HttpServer {
                    bound: Bound::Unix(listener, path.clone()),
                    address: listen.to_string(),
                })
            }
        }
    }

    /// Serves `router` until [`Running::shutdown`]; `sockets` are the
    /// router's WebSockets.
    pub fn serve(self, router: Router, sockets: Arc<Sockets>) -> Running {
        let (stop, mut stopped) = watch::channel(false);
        let signal = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        let (task, socket) = match self.bound {
            Bound::Tcp(listener) => (tokio::spawn(serve_on(listener, router, signal)), None),
            Bound::Unix(listener, path) => {
                (tokio::spawn(serve_on(listener, router, signal)), Some(path))
            }
        };
        Running {
            stop,
            task,
            socket,
            sockets,
        }
    }
}

async fn serve_on<L>(listener: L, router: Router, signal: impl Future<Output = ()> + Send + 'static)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    if let Err(e) = axum::serve(listener, router)
        .with_graceful_shutdown(signal)
        .await
    {
        tracing::error!(error = %e, "the HTTP listener failed");
    }
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
