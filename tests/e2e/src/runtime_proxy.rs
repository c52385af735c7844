//! A pass-through proxy on the Lambda Runtime API that gives each invocation a real deadline.
//!
//! The Runtime API's `Lambda-Runtime-Deadline-Ms` header is "the date that the function times out in
//! Unix time milliseconds". `cargo lambda watch` 1.9 sends the constant `600000` instead
//! (`crates/cargo-lambda-watch/src/runtime/functions_router.rs`: `.header(LAMBDA_RUNTIME_DEADLINE_MS,
//! 600_000_u32)`), i.e. 1970-01-01T00:10:00Z. `lambda_runtime` passes it on as
//! `Context::deadline`, so under plain `cargo lambda watch` the worker believes every invocation is
//! already out of time: it runs no record and returns the whole batch (DESIGN §4 "Deadline"). This
//! proxy honours the semantics cargo-lambda lacks and nothing else: a deadline that is already in
//! the past when the function asks for its next event is replaced by *now + the function timeout*,
//! exactly what Lambda would send; every other byte passes through unchanged.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The Runtime API header that carries the invocation's deadline.
pub const DEADLINE_HEADER: &str = "lambda-runtime-deadline-ms";

/// The running proxy; it stops when dropped.
pub struct DeadlineProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

struct Shared {
    upstream: String,
    timeout: Duration,
    http: reqwest::Client,
    corrected: AtomicU64,
    first_seen: Mutex<Option<String>>,
}

/// What the proxy found and changed, for the test's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadlineReport {
    /// The first deadline header the Runtime API sent, verbatim.
    pub first_seen: Option<String>,
    /// How many deadlines were in the past and replaced.
    pub corrected: u64,
}

impl DeadlineProxy {
    /// Serves on a free loopback port, forwarding to `upstream` (`http://host:port`, no path).
    pub async fn start(upstream: String, timeout: Duration) -> std::io::Result<DeadlineProxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            timeout,
            // No timeout: a runtime's request for its next event waits until there is one.
            http: reqwest::Client::builder()
                .build()
                .map_err(std::io::Error::other)?,
            corrected: AtomicU64::new(0),
            first_seen: Mutex::new(None),
        });
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                eprintln!("runtime API proxy stopped: {err}");
            }
        });
        Ok(DeadlineProxy { addr, shared, task })
    }

    /// The value to give a function as `AWS_LAMBDA_RUNTIME_API` for the function `name`.
    pub fn runtime_api(&self, name: &str) -> String {
        format!("http://{}/.rt/{name}", self.addr)
    }

    /// What the proxy has seen and changed so far.
    pub fn report(&self) -> DeadlineReport {
        DeadlineReport {
            first_seen: self
                .shared
                .first_seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            corrected: self.shared.corrected.load(Ordering::Relaxed),
        }
    }
}

impl Drop for DeadlineProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The deadline to hand on: `sent` itself when it lies in the future, else `now + timeout`.
pub fn corrected_deadline(sent: u64, now_ms: u64, timeout: Duration) -> Option<u64> {
    if sent > now_ms {
        return None;
    }
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    Some(now_ms.saturating_add(timeout_ms))
}

/// Headers that belong to one connection, not to the request or answer being relayed.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "host"
            | "content-length"
    )
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    match relay(&shared, request).await {
        Ok(response) => response,
        Err(err) => {
            let mut response = Response::new(Body::from(format!("runtime API proxy: {err:#}")));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            response
        }
    }
}

async fn relay(shared: &Shared, request: Request) -> anyhow::Result<Response> {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await?;
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut upstream = shared
        .http
        .request(parts.method, format!("{}{path}", shared.upstream))
        .body(body);
    for (name, value) in parts.headers.iter().filter(|(n, _)| !hop_by_hop(n)) {
        upstream = upstream.header(name, value);
    }
    let answer = upstream.send().await?;
    let status = answer.status();
    let headers = answer.headers().clone();
    let bytes = answer.bytes().await?;

    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    for (name, value) in headers.iter().filter(|(n, _)| !hop_by_hop(n)) {
        let value = if name.as_str() == DEADLINE_HEADER {
            shared.deadline(value)
        } else {
            value.clone()
        };
        response.headers_mut().append(name, value);
    }
    Ok(response)
}

impl Shared {
    fn deadline(&self, sent: &HeaderValue) -> HeaderValue {
        self.first_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(|| String::from_utf8_lossy(sent.as_bytes()).into_owned());
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let parsed = sent.to_str().ok().and_then(|s| s.parse::<u64>().ok());
        match parsed.and_then(|sent| corrected_deadline(sent, now_ms, self.timeout)) {
            Some(deadline) => {
                self.corrected.fetch_add(1, Ordering::Relaxed);
                HeaderValue::from(deadline)
            }
            None => sent.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_795_936_163_100;
    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn cargo_lambdas_constant_deadline_becomes_now_plus_the_timeout() {
        assert_eq!(corrected_deadline(600_000, NOW, MINUTE), Some(NOW + 60_000));
    }

    #[test]
    fn a_deadline_in_the_future_is_left_alone() {
        assert_eq!(corrected_deadline(NOW + 5_000, NOW, MINUTE), None);
    }
}
