//! A scripted HTTP/1.1 server's plumbing on loopback: a free port on
//! 127.0.0.1, and every connection served by `serve` (one request at a
//! time per connection, keep-alive as hyper does it) until the task ends.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// Binds a free loopback port and serves it with `serve`; answers the
/// address and the accepting task.
pub async fn serve<F, Fut, E>(what: &str, serve: F) -> (SocketAddr, tokio::task::JoinHandle<()>)
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<Full<Bytes>>, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind a loopback port for {what}: {e}"));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("the address of {what}: {e}"));
    let serve = Arc::new(serve);
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let serve = serve.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| serve(request));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, task)
}
