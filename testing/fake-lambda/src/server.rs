//! A minimal HTTP/1.1 server: every request's body is read whole before the handler sees it (the
//! fakes only get small JSON bodies), and every connection stops with the server.

use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// A running server; dropping it closes the listener and every open connection.
pub(crate) struct Server {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Server {
    /// Serves `handler` on `127.0.0.1` at a free port.
    pub(crate) async fn start<H, F>(handler: H) -> io::Result<Server>
    where
        H: Fn(Request<Bytes>) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
    {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(accept(listener, handler));
        Ok(Server { addr, task })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // The connections live in the accept task's JoinSet, so they stop with it.
        self.task.abort();
    }
}

async fn accept<H, F>(listener: TcpListener, handler: H)
where
    H: Fn(Request<Bytes>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let handler = handler.clone();
                connections.spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let handler = handler.clone();
                        async move { Ok::<_, hyper::Error>(read_then(request, handler).await) }
                    });
                    // A client that goes away mid-request is no concern of the fake's.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next() => {}
        }
    }
}

async fn read_then<H, F>(request: Request<Incoming>, handler: H) -> Response<Full<Bytes>>
where
    H: Fn(Request<Bytes>) -> F,
    F: Future<Output = Response<Full<Bytes>>>,
{
    let (parts, body) = request.into_parts();
    match body.collect().await {
        Ok(body) => handler(Request::from_parts(parts, body.to_bytes())).await,
        Err(_) => respond(StatusCode::BAD_REQUEST, "application/json", "{}"),
    }
}

/// A response with a status, a content type and a body.
pub(crate) fn respond(
    status: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    response
}
