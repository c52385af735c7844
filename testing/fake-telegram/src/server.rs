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
use axum::{Extension, Form, Json, Router};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde_json::{Map, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::{JoinHandle, JoinSet};

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

    fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Takes one call: records it, decides its answer, and wakes the long polls when it made an
    /// update (a payment's message). Gives the answer and the call's place in the record.
    fn receive(
        &self,
        token: &str,
        method: &str,
        params: Result<Params, ApiError>,
    ) -> (Reply, Option<u64>) {
        let (reply, seq, pushed) = {
            let mut state = self.state();
            let queued = state.updates.len();
            let reply = state.receive(token, method, params, self.now());
            let pushed = state.updates.len() > queued;
            (reply, state.calls().last().map(|call| call.seq), pushed)
        };
        if pushed {
            self.wake_pollers();
        }
        (reply, seq)
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
///
/// Connections are served with half-close on: a request read in full takes effect even when its
/// client closes its side the moment after writing it (a sender killed mid-call), as Telegram acts
/// on a call it received whatever becomes of the caller. [`ClientLeft`] tells such a call apart.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let router = Router::new()
        .route("/{bot_token}/{method}", any(call))
        .route("/file/{bot_token}/files/{file_id}", any(download))
        .fallback(not_found)
        .with_state(Arc::clone(&shared));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let closed = shared.closed();
    tokio::pin!(closed);
    loop {
        let socket = tokio::select! {
            biased;
            () = &mut closed => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => socket,
                Err(error) => {
                    tracing::warn!(%error, "fake telegram could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let (socket, left, watching, tail) = match ClientLeft::watch(socket) {
            Ok(watched) => watched,
            Err(error) => {
                tracing::warn!(%error, "fake telegram could not watch a connection");
                continue;
            }
        };
        let service = TowerToHyperService::new(router.clone().layer(Extension(left)));
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .half_close(true)
            .serve_connection(TokioIo::new(socket), service);
        let connection = graceful.watch(connection);
        let shared = Arc::clone(&shared);
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "fake telegram connection ended with an error");
            }
            watching.abort();
            if shared.is_closed() {
                last_calls(tail, shared).await;
            }
        });
    }
    // New connections are refused from now on, as a Telegram gone away refuses them; those
    // accepted finish the calls they carry, and take the calls that crossed their close. Those
    // the kernel completed and the loop had not yet accepted are taken the same way: dropping
    // the listener would reset them with their calls unread.
    for tail in backlog(listener) {
        connections.spawn(last_calls(tail, Arc::clone(&shared)));
    }
    graceful.shutdown().await;
    while connections.join_next().await.is_some() {}
}

/// The most accepts [`backlog`] tries: far above any listen backlog.
const BACKLOG_BOUND: usize = 65_536;

/// Accepts, without waiting, every connection the listen backlog holds, and closes the listener.
fn backlog(listener: TcpListener) -> Vec<std::net::TcpStream> {
    let Ok(listener) = listener.into_std() else {
        return Vec::new();
    };
    let mut sockets = Vec::new();
    // The listener is non-blocking: `accept` ends with `WouldBlock` once the backlog is empty.
    // Another error (a connection its client aborted, a signal) concerns one connection: the
    // rest are still taken. The bound covers a listener that keeps failing.
    for _ in 0..BACKLOG_BOUND {
        match listener.accept() {
            Ok((socket, _)) => {
                if socket.set_nonblocking(true).is_ok() {
                    sockets.push(socket);
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(_) => continue,
        }
    }
    sockets
}

/// How long a connection the fake closed as it went away is read for the calls that crossed its
/// close: a client learns of the close within a round trip on loopback.
const CROSSED_CLOSE_WITHIN: Duration = Duration::from_secs(1);

/// Takes the calls that reached a connection the fake was closing as it went away: the client
/// wrote them before it saw the close. Telegram takes such a call or not, and its caller cannot
/// tell which; the fake takes it as any call and counts it unanswered, which it is. Without this,
/// the close would throw such a call away unread, and a caller right to doubt it would seem to
/// doubt a call Telegram never saw.
async fn last_calls(tail: std::net::TcpStream, shared: Arc<Shared>) {
    // Shut here too: a connection that ended on an error may not have shut its side.
    let _ = tail.shutdown(std::net::Shutdown::Write);
    let Ok(tail) = TcpStream::from_std(tail) else {
        return;
    };
    let router = Router::new()
        .route("/{bot_token}/{method}", any(crossed_close))
        .with_state(shared);
    // The fake's side is shut: any answer written here goes nowhere.
    let connection = http1::Builder::new()
        .half_close(true)
        .serve_connection(TokioIo::new(tail), TowerToHyperService::new(router));
    let _ = tokio::time::timeout(CROSSED_CLOSE_WITHIN, connection).await;
}

/// A call read after its connection was closed (see [`last_calls`]): taken, never answered.
async fn crossed_close(
    AxumState(shared): AxumState<Arc<Shared>>,
    Path((bot_token, method)): Path<(String, String)>,
    request: Request,
) -> Response {
    if let Some(token) = bot_token.strip_prefix("bot") {
        let params = read_params(request).await;
        if let (_, Some(seq)) = shared.receive(token, &method, params) {
            shared.state().unanswered(seq);
        }
    }
    StatusCode::SERVICE_UNAVAILABLE.into_response()
}

/// How long the watch on a client waits before looking again at input the server has not read.
const LOOK_AGAIN: Duration = Duration::from_millis(10);

/// A connection as served: its socket, the watch on its client, the watch's task, and a last
/// handle on the socket.
type Watched = (TcpStream, ClientLeft, JoinHandle<()>, std::net::TcpStream);

/// Whether a connection's client has closed its side, so that it reads no answer.
#[derive(Clone, Debug)]
struct ClientLeft {
    /// Turns `true` when the watch sees the client's end.
    left: watch::Receiver<bool>,
    /// A handle on the socket to look at its input now, without waiting for the watch.
    peer: Arc<std::net::TcpStream>,
}

impl ClientLeft {
    /// Watches `socket`'s client through second handles that peek for the end of its input,
    /// never taking what the connection has not read. The watch ends when the client leaves, or
    /// is aborted through the handle returned when the connection ends. The last handle keeps the
    /// socket open after the connection ends, for [`last_calls`].
    fn watch(socket: TcpStream) -> std::io::Result<Watched> {
        let socket = socket.into_std()?;
        let tail = socket.try_clone()?;
        let peer = Arc::new(socket.try_clone()?);
        let watched = TcpStream::from_std(socket.try_clone()?)?;
        let socket = TcpStream::from_std(socket)?;
        let (sender, left) = watch::channel(false);
        let watching = tokio::spawn(async move {
            let mut byte = [0_u8; 1];
            while let Ok(1..) = watched.peek(&mut byte).await {
                tokio::time::sleep(LOOK_AGAIN).await;
            }
            sender.send_replace(true);
        });
        Ok((socket, ClientLeft { left, peer }, watching, tail))
    }

    /// Whether the client has left by now: its input ends (or the connection was reset) with
    /// nothing unread before the end.
    fn is_gone(&self) -> bool {
        if *self.left.borrow() {
            return true;
        }
        // The socket is non-blocking: no input yet reads as `WouldBlock`.
        let mut byte = [0_u8; 1];
        match self.peer.peek(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(error) => error.kind() != std::io::ErrorKind::WouldBlock,
        }
    }

    async fn gone(&self) {
        let mut left = self.left.clone();
        // The sender lives until the client leaves; one dropped unsent means the connection ended.
        let _ = left.wait_for(|left| *left).await;
    }
}

async fn call(
    AxumState(shared): AxumState<Arc<Shared>>,
    Extension(left): Extension<ClientLeft>,
    Path((bot_token, method)): Path<(String, String)>,
    request: Request,
) -> Response {
    // Like api.telegram.org, a path without the `bot` prefix is simply not found.
    let Some(token) = bot_token.strip_prefix("bot") else {
        return respond(ApiError::not_found().into());
    };
    let params = read_params(request).await;
    let (reply, seq) = shared.receive(token, &method, params);
    // The call took effect; until it is answered to a client still there, it counts unanswered.
    let pending = PendingAnswer {
        shared: &shared,
        seq,
        answered: false,
    };
    let answer = match reply {
        Reply::Now(answer) => answer,
        Reply::Delayed(delay, answer) => {
            tokio::select! {
                () = shared.hold(delay) => answer,
                () = left.gone() => return respond(answer),
            }
        }
        Reply::Poll { limit, wait } => tokio::select! {
            answer = shared.poll(limit, wait) => answer,
            () = left.gone() => return respond(Answer::ok(Vec::<Value>::new().into())),
        },
    };
    if !left.is_gone() {
        pending.answered();
    }
    respond(answer)
}

/// An answer to a call that has already taken effect: dropped unanswered (the client left before
/// it), it counts the call as one whose outcome the client cannot know.
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
