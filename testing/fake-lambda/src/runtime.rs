//! The fake Lambda Runtime API: its invocations one after another, then silence.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// An event the fake hands out.
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

    /// The same as [`Invocation::new`] under request id number `n` (1 is `new`'s), so that several
    /// invocations of one process can be told apart.
    pub fn numbered(payload: impl Into<Bytes>, n: u64) -> Invocation {
        Invocation {
            request_id: format!("00000000-0000-4000-8000-{n:012}"),
            ..Invocation::new(payload)
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
    /// When each invocation was handed out, in order.
    pub handed_out: Vec<Instant>,
    /// Its answer to each invocation, by the invocation's position (an init error counts as the
    /// first one's).
    pub answers: Vec<Option<Answer>>,
}

impl Progress {
    /// How many invocations have their answer.
    pub fn answered(&self) -> usize {
        self.answers.iter().flatten().count()
    }
}

/// A running fake Runtime API; it stops when dropped.
pub struct FakeRuntime {
    server: Server,
    progress: watch::Receiver<Progress>,
}

struct Shared {
    invocations: Vec<Invocation>,
    next: AtomicUsize,
    progress: watch::Sender<Progress>,
}

impl FakeRuntime {
    /// Starts the fake on `127.0.0.1` at a free port, holding `invocation` for the first poll.
    pub async fn start(invocation: Invocation) -> io::Result<FakeRuntime> {
        FakeRuntime::start_all(vec![invocation]).await
    }

    /// Starts the fake holding `invocations`: each poll gets the next (a function polls again once
    /// it has answered), and the polls after the last wait for ever.
    pub async fn start_all(invocations: Vec<Invocation>) -> io::Result<FakeRuntime> {
        let (progress, receiver) = watch::channel(Progress {
            answers: vec![None; invocations.len()],
            ..Progress::default()
        });
        let shared = Arc::new(Shared {
            invocations,
            next: AtomicUsize::new(0),
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

    /// Waits until `count` invocations have their answer.
    pub async fn answered(&mut self, count: usize) -> Progress {
        match self
            .progress
            .wait_for(|progress| progress.answered() >= count)
            .await
        {
            Ok(progress) => progress.clone(),
            Err(_) => std::future::pending().await,
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
            let id = shared
                .invocations
                .first()
                .map(|invocation| invocation.request_id.clone())
                .unwrap_or_default();
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
    let Some(invocation) = shared
        .invocations
        .get(shared.next.fetch_add(1, Ordering::SeqCst))
    else {
        // Lambda freezes a function between events; the fake simply sends no more.
        return std::future::pending().await;
    };
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
    shared.progress.send_modify(|progress| {
        progress.handed_out.push(Instant::now());
    });
    response
}

fn answer(
    shared: &Shared,
    id: &str,
    kind: AnswerKind,
    arrived: Instant,
    body: &Bytes,
) -> Response<Full<Bytes>> {
    let Some(index) = shared
        .invocations
        .iter()
        .position(|invocation| invocation.request_id == id)
    else {
        return respond(
            StatusCode::BAD_REQUEST,
            "application/json",
            r#"{"errorMessage":"unknown request id","errorType":"InvalidRequestID"}"#,
        );
    };
    shared.progress.send_if_modified(|progress| {
        if progress.answers[index].is_some() {
            return false;
        }
        let answer = Answer {
            at: arrived,
            kind,
            body: body.clone(),
        };
        progress.answer.get_or_insert_with(|| answer.clone());
        progress.answers[index] = Some(answer);
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
    async fn invocations_are_handed_out_in_turn_and_answered_by_request_id() {
        let mut runtime = FakeRuntime::start_all(vec![
            Invocation::numbered("{\"n\":1}", 1),
            Invocation::numbered("{\"n\":2}", 2),
        ])
        .await
        .expect("start");
        let api = runtime.api();
        let poll = "GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nhost: x\r\n\r\n";
        for n in 1..=2 {
            let event = exchange(&api, poll.to_owned()).await;
            let id = format!("00000000-0000-4000-8000-{n:012}");
            assert!(
                event.contains(&format!("lambda-runtime-aws-request-id: {id}")),
                "{event}"
            );
            assert!(event.ends_with(&format!("{{\"n\":{n}}}")), "{event}");
            let body = format!("{{\"answer\":{n}}}");
            exchange(
                &api,
                format!(
                    "POST /2018-06-01/runtime/invocation/{id}/response HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                ),
            )
            .await;
        }
        let third =
            tokio::time::timeout(Duration::from_millis(200), exchange(&api, poll.to_owned())).await;
        assert!(third.is_err(), "a third event was handed out: {third:?}");
        let progress = runtime.answered(2).await;
        assert_eq!(progress.handed_out.len(), 2);
        let answers: Vec<_> = progress
            .answers
            .iter()
            .flatten()
            .map(Answer::json)
            .collect();
        assert_eq!(
            answers,
            [
                serde_json::json!({"answer": 1}),
                serde_json::json!({"answer": 2})
            ]
        );
        assert_eq!(
            runtime.answer().await.json(),
            serde_json::json!({"answer": 1})
        );
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
