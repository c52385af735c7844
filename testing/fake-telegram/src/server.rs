//! The HTTP side: routes `/bot{token}/{method}`, reads parameters, and holds answers back for
//! timeouts and long polls.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::body::to_bytes;
use axum::extract::{FromRequest, Path, Query, Request, State as AxumState};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::{Form, Json, Router};
use serde_json::{Map, Value};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use crate::config::{FakeClock, FakeConfig};
use crate::envelope::{Answer, ApiError};
use crate::params::Params;
use crate::state::{Reply, State};

/// Telegram accepts up to 50 MB uploads; JSON calls stay far below this.
const MAX_BODY_BYTES: usize = 50 * 1024 * 1024;

/// What the server task and every [`FakeTelegram`](crate::FakeTelegram) handle share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) token: String,
    state: Mutex<State>,
    /// Wakes long polls when an update is pushed.
    pushed: Notify,
    /// Long polls waiting for an update right now.
    waiting_polls: AtomicUsize,
    /// `getUpdates` calls being answered right now, waiting or not.
    active_polls: AtomicUsize,
    /// `getUpdates` calls that began while another was being answered: two pollers at once.
    overlapping_polls: AtomicU64,
    /// Turns `true` once the server should stop.
    closed: watch::Sender<bool>,
    clock: FakeClock,
    /// The instant a frozen clock shows before it is advanced.
    started: Instant,
    /// How far [`Shared::advance_clock`] has moved the clock.
    advanced: Mutex<Duration>,
}

impl Shared {
    pub(crate) fn new(config: &FakeConfig) -> Self {
        Self {
            token: config.token.clone(),
            state: Mutex::new(State::new(config)),
            pushed: Notify::new(),
            waiting_polls: AtomicUsize::new(0),
            active_polls: AtomicUsize::new(0),
            overlapping_polls: AtomicU64::new(0),
            closed: watch::Sender::new(false),
            clock: config.clock,
            started: Instant::now(),
            advanced: Mutex::new(Duration::ZERO),
        }
    }

    /// The instant a call arriving now is recorded at and counted against the rate limits.
    pub(crate) fn now(&self) -> Instant {
        let advanced = *self.advanced.lock().unwrap_or_else(PoisonError::into_inner);
        match self.clock {
            FakeClock::Real => Instant::now() + advanced,
            FakeClock::Frozen => self.started + advanced,
        }
    }

    pub(crate) fn advance_clock(&self, by: Duration) {
        *self.advanced.lock().unwrap_or_else(PoisonError::into_inner) += by;
    }

    pub(crate) fn waiting_polls(&self) -> usize {
        self.waiting_polls.load(Ordering::SeqCst)
    }

    pub(crate) fn overlapping_polls(&self) -> u64 {
        self.overlapping_polls.load(Ordering::SeqCst)
    }

    /// The fake's memory. A test that panicked while holding it leaves nothing half-written worth
    /// refusing to read, so a poisoned lock is used as it is.
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn wake_pollers(&self) {
        self.pushed.notify_waiters();
    }

    pub(crate) fn close(&self) {
        self.closed.send_replace(true);
    }

    async fn closed(&self) {
        let mut closed = self.closed.subscribe();
        // The sender lives as long as `self`, so this only returns once closed.
        let _ = closed.wait_for(|closed| *closed).await;
    }

    /// Sleeps for `delay`, or less if the server is stopping.
    async fn hold(&self, delay: Duration) {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = self.closed() => {}
        }
    }

    /// Answers `getUpdates` with the queued updates, waiting up to `wait` for the first one.
    async fn poll(&self, limit: usize, wait: Duration) -> Answer {
        // A poll that begins while another is being answered overlaps it in time: Telegram would
        // end one of the two with 409. The poll counts as active until answered or abandoned.
        if self.active_polls.fetch_add(1, Ordering::SeqCst) > 0 {
            self.overlapping_polls.fetch_add(1, Ordering::SeqCst);
        }
        let _active = Active(&self.active_polls);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before looking at the queue so that a push in between is not missed.
            let pushed = self.pushed.notified();
            tokio::pin!(pushed);
            pushed.as_mut().enable();

            {
                let mut state = self.state();
                let updates = state.updates.peek(limit);
                if !updates.is_empty() || tokio::time::Instant::now() >= deadline {
                    state.updates.hand_out(&updates);
                    return Answer::ok(updates.into());
                }
            }
            let _waiting = Waiting::count(&self.waiting_polls);
            tokio::select! {
                () = pushed => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = self.closed() => return Answer::ok(Vec::<Value>::new().into()),
            }
        }
    }
}

/// Uncounts one active poll when it is answered or dropped.
struct Active<'a>(&'a AtomicUsize);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts one waiting long poll for as long as it lives (a poll whose client went away is dropped
/// mid-wait, and stops counting then).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn count(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(counter)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves until [`Shared::close`] is called, then lets answers in flight finish.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let router = Router::new()
        .route("/{bot_token}/{method}", any(call))
        .route("/file/{bot_token}/files/{file_id}", any(download))
        .fallback(not_found)
        .with_state(Arc::clone(&shared));
    let stopped = axum::serve(listener, router)
        .with_graceful_shutdown(async move { shared.closed().await })
        .await;
    if let Err(error) = stopped {
        tracing::warn!(%error, "fake telegram server stopped with an error");
    }
}

async fn call(
    AxumState(shared): AxumState<Arc<Shared>>,
    Path((bot_token, method)): Path<(String, String)>,
    request: Request,
) -> Response {
    // Like api.telegram.org, a path without the `bot` prefix is simply not found.
    let Some(token) = bot_token.strip_prefix("bot") else {
        return respond(ApiError::not_found().into());
    };
    let params = read_params(request).await;
    let (reply, seq) = {
        let mut state = shared.state();
        let reply = state.receive(token, &method, params, shared.now());
        (reply, state.calls().last().map(|call| call.seq))
    };
    let answer = match reply {
        Reply::Now(answer) => answer,
        Reply::Delayed(delay, answer) => {
            // The call took effect; if the client hangs up before the answer, this is dropped.
            let pending = PendingAnswer {
                shared: &shared,
                seq,
                answered: false,
            };
            shared.hold(delay).await;
            pending.answered();
            answer
        }
        Reply::Poll { limit, wait } => shared.poll(limit, wait).await,
    };
    respond(answer)
}

/// An answer held back while the call has already taken effect: dropped unanswered (the client
/// hung up, so the server dropped the request), it counts the call as one whose outcome the client
/// cannot know.
struct PendingAnswer<'a> {
    shared: &'a Shared,
    seq: Option<u64>,
    answered: bool,
}

impl PendingAnswer<'_> {
    fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for PendingAnswer<'_> {
    fn drop(&mut self) {
        if let (false, Some(seq)) = (self.answered, self.seq) {
            self.shared.state().unanswered(seq);
        }
    }
}

/// `GET /file/bot<token>/files/<id>`: a file's bytes, as Telegram's file server serves them.
async fn download(
    AxumState(shared): AxumState<Arc<Shared>>,
    Path((bot_token, file_id)): Path<(String, String)>,
) -> Response {
    let state = shared.state();
    let known = bot_token
        .strip_prefix("bot")
        .is_some_and(|token| state.accepts(token));
    match state.files.get(&file_id) {
        Some(bytes) if known => (StatusCode::OK, bytes.clone()).into_response(),
        _ => respond(ApiError::not_found().into()),
    }
}

async fn not_found() -> Response {
    respond(ApiError::not_found().into())
}

fn respond(answer: Answer) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(answer.body)).into_response()
}

/// Merges query-string parameters with a JSON or form-urlencoded body; the body wins.
async fn read_params(request: Request) -> Result<Params, ApiError> {
    let mut params = query_params(request.uri());
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let body = if content_type.starts_with("application/x-www-form-urlencoded") {
        let Form(pairs) = Form::<Vec<(String, String)>>::from_request(request, &())
            .await
            .map_err(|_| unreadable_body())?;
        Params::from_pairs(pairs)
    } else if content_type.is_empty() || content_type.starts_with("application/json") {
        json_body(request).await?
    } else if content_type.starts_with("multipart/form-data") {
        multipart_body(request).await?
    } else {
        // The wording is the fake's own.
        return Err(ApiError::bad_request("unsupported content type"));
    };
    params.merge(body);
    Ok(params)
}

fn query_params(uri: &Uri) -> Params {
    Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|Query(pairs)| Params::from_pairs(pairs))
        .unwrap_or_default()
}

async fn json_body(request: Request) -> Result<Params, ApiError> {
    let bytes = to_bytes(request.into_body(), MAX_BODY_BYTES)
        .await
        .map_err(|_| unreadable_body())?;
    if bytes.is_empty() {
        return Ok(Params::default());
    }
    serde_json::from_slice::<Map<String, Value>>(&bytes)
        .map(Params::new)
        .map_err(|_| unreadable_body())
}

/// A `multipart/form-data` body: text parts as form fields, and each file part as what a test
/// asks of an upload — `{"uploaded": {"file_name", "size", "sha256"}}` under the part's name.
async fn multipart_body(request: Request) -> Result<Params, ApiError> {
    use sha2::{Digest as _, Sha256};
    let mut form = axum::extract::Multipart::from_request(request, &())
        .await
        .map_err(|_| unreadable_body())?;
    let mut texts = Vec::new();
    let mut files = Vec::new();
    while let Some(field) = form.next_field().await.map_err(|_| unreadable_body())? {
        let name = field.name().unwrap_or_default().to_owned();
        let file_name = field.file_name().map(str::to_owned);
        let bytes = field.bytes().await.map_err(|_| unreadable_body())?;
        match file_name {
            Some(file_name) => {
                let sha256: String = Sha256::digest(&bytes)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                let uploaded = serde_json::json!({"uploaded": {
                    "file_name": file_name, "size": bytes.len(), "sha256": sha256,
                }});
                files.push((name, uploaded));
            }
            None => texts.push((name, String::from_utf8_lossy(&bytes).into_owned())),
        }
    }
    let mut params = Params::from_pairs(texts);
    for (name, uploaded) in files {
        params.insert(name, uploaded);
    }
    Ok(params)
}

/// The fake's own wording for a body it cannot read.
fn unreadable_body() -> ApiError {
    ApiError::bad_request("can't parse request body")
}
