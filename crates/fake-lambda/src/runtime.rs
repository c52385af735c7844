//! The fake Lambda Runtime API: one invocation, then silence.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use tokio::sync::watch;

use crate::server::{respond, Server};

/// The path prefix of every Runtime API route.
pub const RUNTIME_API_VERSION: &str = "/2018-06-01/runtime";

/// The ARN the fake gives the invoked function.
const FUNCTION_ARN: &str = "arn:aws:lambda:us-east-1:123456789012:function:tgq-fake";

/// The one event the fake hands out.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// `Lambda-Runtime-Aws-Request-Id`; the answer must be posted under it.
    pub request_id: String,
    /// The event JSON, as Lambda would pass it (a Function URL event, an SQS batch, …).
    pub payload: Bytes,
    /// How long the function may run: `Lambda-Runtime-Deadline-Ms` is now plus this.
    pub timeout: Duration,
}

impl Invocation {
    /// An invocation of `payload` with a fixed request id and a 60 s deadline.
    pub fn new(payload: impl Into<Bytes>) -> Invocation {
        Invocation {
            request_id: "00000000-0000-4000-8000-000000000001".to_owned(),
            payload: payload.into(),
            timeout: Duration::from_secs(60),
        }
    }
}

/// What the function posted back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerKind {
    /// `POST …/invocation/{id}/response`: the function's result.
    Response,
    /// `POST …/invocation/{id}/error`: the handler failed.
    InvocationError,
    /// `POST …/init/error`: the function could not start.
    InitError,
}

/// The function's first answer and when it arrived.
#[derive(Clone, Debug)]
pub struct Answer {
    pub at: Instant,
    pub kind: AnswerKind,
    pub body: Bytes,
}

impl Answer {
    /// The body as JSON, or `Null` when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// How far the function has got.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// When its first `GET …/invocation/next` arrived: it had read its configuration and built its
    /// clients by then.
    pub first_poll: Option<Instant>,
    /// Its first answer.
    pub answer: Option<Answer>,
}

/// A running fake Runtime API; it stops when dropped.
pub struct FakeRuntime {
    server: Server,
    progress: watch::Receiver<Progress>,
}

struct Shared {
    invocation: Invocation,
    handed_out: AtomicBool,
    progress: watch::Sender<Progress>,
}

impl FakeRuntime {
    /// Starts the fake on `127.0.0.1` at a free port, holding `invocation` for the first poll.
    pub async fn start(invocation: Invocation) -> io::Result<FakeRuntime> {
        let (progress, receiver) = watch::channel(Progress::default());
        let shared = Arc::new(Shared {
            invocation,
            handed_out: AtomicBool::new(false),
            progress,
        });
        let server = Server::start(move |request| route(Arc::clone(&shared), request)).await?;
        Ok(FakeRuntime {
            server,
            progress: receiver,
        })
    }

    /// The value for `AWS_LAMBDA_RUNTIME_API`: `127.0.0.1:{port}`.
    pub fn api(&self) -> String {
        self.server.addr().to_string()
    }

    /// What has happened so far.
    pub fn progress(&self) -> Progress {
        self.progress.borrow().clone()
    }

    /// Waits for the function's first poll.
    pub async fn first_poll(&mut self) -> Instant {
        let progress = self
            .progress
            .wait_for(|progress| progress.first_poll.is_some())
            .await;
        match progress.ok().and_then(|progress| progress.first_poll) {
            Some(at) => at,
            // The sender lives in the server, which lives as long as `self`.
            None => std::future::pending().await,
        }
    }

    /// Waits for the function's first answer.
    pub async fn answer(&mut self) -> Answer {
        let progress = self
            .progress
            .wait_for(|progress| progress.answer.is_some())
            .await;
        match progress.ok().and_then(|progress| progress.answer.clone()) {
            Some(answer) => answer,
            None => std::future::pending().await,
        }
    }
}

async fn route(shared: Arc<Shared>, request: Request<Bytes>) -> Response<Full<Bytes>> {
    let arrived = Instant::now();
    let Some(route) = request.uri().path().strip_prefix(RUNTIME_API_VERSION) else {
        return not_found();
    };
    let segments: Vec<&str> = route.trim_start_matches('/').split('/').collect();
    match (request.method(), segments.as_slice()) {
        (&Method::GET, ["invocation", "next"]) => next(&shared, arrived).await,
        (&Method::POST, ["invocation", id, "response"]) => {
            answer(&shared, id, AnswerKind::Response, arrived, request.body())
        }
        (&Method::POST, ["invocation", id, "error"]) => answer(
            &shared,
            id,
            AnswerKind::InvocationError,
            arrived,
            request.body(),
        ),
        (&Method::POST, ["init", "error"]) => {
            let id = shared.invocation.request_id.clone();
            answer(&shared, &id, AnswerKind::InitError, arrived, request.body())
        }
        _ => not_found(),
    }
}

async fn next(shared: &Shared, arrived: Instant) -> Response<Full<Bytes>> {
    shared.progress.send_if_modified(|progress| {
        let first = progress.first_poll.is_none();
        progress.first_poll.get_or_insert(arrived);
        first
    });
    if shared.handed_out.swap(true, Ordering::SeqCst) {
        // Lambda freezes a function between events; the fake simply never sends a second one.
        return std::future::pending().await;
    }
    let invocation = &shared.invocation;
    let deadline = SystemTime::now() + invocation.timeout;
    let deadline_ms = deadline
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis());
    let mut response = respond(
        StatusCode::OK,
        "application/json",
        invocation.payload.clone(),
    );
    let headers = response.headers_mut();
    for (name, value) in [
        (
            "lambda-runtime-aws-request-id",
            invocation.request_id.clone(),
        ),
        ("lambda-runtime-deadline-ms", deadline_ms.to_string()),
        (
            "lambda-runtime-invoked-function-arn",
            FUNCTION_ARN.to_owned(),
        ),
        (
            "lambda-runtime-trace-id",
            "Root=1-00000000-000000000000000000000001;Sampled=0".to_owned(),
        ),
    ] {
        if let Ok(value) = value.parse() {
            headers.insert(name, value);
        }
    }
    response
}

fn answer(
    shared: &Shared,
    id: &str,
    kind: AnswerKind,
    arrived: Instant,
    body: &Bytes,
) -> Response<Full<Bytes>> {
    if id != shared.invocation.request_id {
        return respond(
            StatusCode::BAD_REQUEST,
            "application/json",
            r#"{"errorMessage":"unknown request id","errorType":"InvalidRequestID"}"#,
        );
    }
    shared.progress.send_if_modified(|progress| {
        if progress.answer.is_some() {
            return false;
        }
        progress.answer = Some(Answer {
            at: arrived,
            kind,
            body: body.clone(),
        });
        true
    });
    respond(
        StatusCode::ACCEPTED,
        "application/json",
        r#"{"status":"OK"}"#,
    )
}

fn not_found() -> Response<Full<Bytes>> {
    respond(
        StatusCode::NOT_FOUND,
        "application/json",
        r#"{"errorMessage":"no such route","errorType":"NotFound"}"#,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// One HTTP/1.1 exchange on a fresh connection; returns the raw response.
    async fn exchange(api: &str, request: String) -> String {
        let mut stream = TcpStream::connect(api).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut buffer = vec![0; 8192];
        let read = stream.read(&mut buffer).await.expect("read");
        String::from_utf8_lossy(&buffer[..read]).into_owned()
    }

    #[tokio::test]
    async fn the_first_poll_gets_the_event_and_the_answer_is_recorded() {
        let mut runtime = FakeRuntime::start(Invocation::new(r#"{"Records":[]}"#))
            .await
            .expect("start");
        let api = runtime.api();
        let event = exchange(
            &api,
            "GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nhost: x\r\n\r\n".to_owned(),
        )
        .await;
        assert!(event.starts_with("HTTP/1.1 200"), "{event}");
        assert!(
            event.contains("lambda-runtime-aws-request-id: 00000000-0000-4000-8000-000000000001")
        );
        assert!(event.ends_with(r#"{"Records":[]}"#), "{event}");
        assert!(runtime.progress().first_poll.is_some());

        let body = r#"{"batchItemFailures":[]}"#;
        let accepted = exchange(
            &api,
            format!(
                "POST /2018-06-01/runtime/invocation/00000000-0000-4000-8000-000000000001/response HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            ),
        )
        .await;
        assert!(accepted.starts_with("HTTP/1.1 202"), "{accepted}");
        let answer = runtime.answer().await;
        assert_eq!(answer.kind, AnswerKind::Response);
        assert_eq!(answer.json(), serde_json::json!({"batchItemFailures": []}));
    }

    #[tokio::test]
    async fn a_second_poll_waits_and_an_unknown_request_id_is_refused() {
        let runtime = FakeRuntime::start(Invocation::new("{}"))
            .await
            .expect("start");
        let api = runtime.api();
        let poll = "GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nhost: x\r\n\r\n";
        exchange(&api, poll.to_owned()).await;
        let second =
            tokio::time::timeout(Duration::from_millis(200), exchange(&api, poll.to_owned())).await;
        assert!(second.is_err(), "a second event was handed out: {second:?}");

        let refused = exchange(
            &api,
            "POST /2018-06-01/runtime/invocation/other/response HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}".to_owned(),
        )
        .await;
        assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
        assert!(runtime.progress().answer.is_none());
    }

    #[tokio::test]
    async fn an_init_error_is_an_answer() {
        let mut runtime = FakeRuntime::start(Invocation::new("{}"))
            .await
            .expect("start");
        let body = r#"{"errorMessage":"TGQ_TABLE is not set","errorType":"Config"}"#;
        exchange(
            &runtime.api(),
            format!(
                "POST /2018-06-01/runtime/init/error HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            ),
        )
        .await;
        let answer = runtime.answer().await;
        assert_eq!(answer.kind, AnswerKind::InitError);
        assert_eq!(answer.json()["errorType"], "Config");
    }
}
