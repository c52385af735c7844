//! The HTTP faces of `tgq local` (axum), on two listeners. `--addr`: `POST /webhook` (the
//! environment's bot) and `POST /webhook/{bot_id}` (a bot of `bots.json`) answered exactly as the
//! webhook Lambda answers, and `GET /healthz` and `GET /readyz` for supervisors. `--admin-addr`:
//! `GET /metrics` for Prometheus, admin routes that read the store, and the console at `/`
//! (`console`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Json, Query, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;
use http_body_util::LengthLimitError;
use metrics_exporter_prometheus::PrometheusHandle;
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::{json, Value};
use tgq_core::clock::Clock;
use tgq_core::ingest::{Answer, Ingested, Refused, RequestHead, Webhooks, SECRET_HEADER};
use tgq_embedded::EmbeddedStore;
use tracing::warn;

use super::admin;
use super::console::{self, ConsoleIds};
use super::share::LoopShare;
use super::shutdown::Shutdown;
use super::worker_loop::LoopStats;
use crate::ops::{dlq, payments, DEFAULT_LIMIT};
use crate::views::{self, ActRequest, ReportView, StatusView};

/// What the routes share.
#[derive(Clone)]
pub struct App {
    /// The webhook use case of every bot, as the Lambda runs it.
    pub webhooks: Webhooks,
    /// The store the admin routes read.
    pub store: Arc<EmbeddedStore>,
    /// Tells the time for queue ages.
    pub clock: Arc<dyn Clock>,
    /// `TGQ_ADMIN_TOKEN`.
    pub admin_token: Option<SecretString>,
    /// `--backup-dir`: the one directory the backup route writes into.
    pub backup_dir: Option<std::path::PathBuf>,
    /// The worker loops' state.
    pub loops: Arc<LoopStats>,
    /// Counts webhook requests, so that the worker loops yield to a busy webhook.
    pub share: Arc<LoopShare>,
    /// How many worker loops should be running.
    pub expected_loops: usize,
    /// Set once the process is stopping.
    pub shutdown: Shutdown,
    /// Renders what the use cases counted.
    pub metrics: PrometheusHandle,
    /// Where the store lives: /readyz checks the space left on its filesystem.
    pub data_dir: std::path::PathBuf,
    /// The bot the console talks to when a request names none: the environment's.
    pub console_bot: tgq_core::ids::BotId,
    /// The update ids of what the console types.
    pub console_ids: Arc<ConsoleIds>,
    /// Telegram's flood waits of the bots, which the console shows as what holds them.
    pub flood_waits: Arc<super::flood::FloodWaits>,
    /// The bots the worker runs, each with its Bot API: a refund asks Telegram through them.
    pub bots: Arc<dyn tgq_core::bots::BotDirectory>,
}

/// Below this much free space on the store's filesystem, /readyz answers 503: the next commit that
/// needs the file to grow would fail.
const MIN_FREE_BYTES: u64 = 4 * 1024 * 1024;

/// The bytes an unprivileged process may still write on the filesystem holding `dir`.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string and `stat` is written by statvfs before it is read.
    let answered = unsafe { libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) };
    if answered != 0 {
        return None;
    }
    // SAFETY: statvfs answered 0, so it filled `stat`.
    let stat = unsafe { stat.assume_init() };
    #[allow(clippy::useless_conversion)] // the field types differ between targets
    Some(u64::from(stat.f_bavail).saturating_mul(u64::from(stat.f_frsize)))
}

/// The routes of `--addr`, the listener a user exposes to Telegram through a proxy or a tunnel:
/// the webhook and the health checks, nothing else (docs/design/local.md, "Two listeners").
pub fn webhook_router(app: App) -> Router {
    Router::new()
        .route("/webhook", any(webhook))
        .route("/webhook/{bot_id}", any(webhook))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(app)
}

/// The routes of `--admin-addr`: the console, the admin routes and the metrics, every one behind
/// one access check, so a new one cannot forget it.
pub fn admin_router(app: App) -> Router {
    let admin = Router::new()
        .route("/status", get(admin_status))
        .route("/outbox", get(admin_outbox))
        .route("/dlq", get(admin_dlq))
        .route("/dlq/letter", get(admin_dlq_letter))
        .route("/dlq/replay", post(admin_dlq_replay))
        .route("/dlq/purge", post(admin_dlq_purge))
        .route("/audit", get(admin_audit))
        .route("/timers", get(admin_timers))
        .route("/payments", get(admin_payments))
        .route("/payments/refund", post(admin_payments_refund))
        .route("/timers/cancel", post(admin_timers_cancel))
        .route("/backup", post(admin_backup))
        .route("/broadcasts", get(admin_broadcasts))
        .route("/broadcasts/status", get(admin_broadcast_status))
        .route("/broadcasts/start", post(admin_broadcast_start))
        .route("/broadcasts/change", post(admin_broadcast_change))
        .route("/broadcasts/retry", post(admin_broadcast_retry))
        .merge(console::routes());
    let guarded = Router::new()
        .route("/metrics", get(metrics))
        .nest("/admin", admin)
        .route_layer(middleware::from_fn_with_state(app.clone(), admin_only));
    Router::new()
        .merge(guarded)
        .merge(console::assets())
        // A supervisor watching the admin listener alone sees the same health.
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(app)
}

/// The answer shape of the webhook Lambda, used by every route: `{"ok": …, "result": …}`.
pub(super) fn answer(status: StatusCode, result: Value) -> Response {
    let body = json!({ "ok": status == StatusCode::OK, "result": result });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The webhook's answer, in the same shape as the Lambda's.
fn webhook_answer(outcome: &Result<Ingested, Refused>) -> Response {
    respond(Answer::of(outcome))
}

/// An [`Answer`] as an HTTP response.
fn respond(answer: Answer) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        answer.body,
    )
        .into_response()
}

/// `POST /webhook` and `POST /webhook/{bot_id}`: the path picks the bot (404 for none, before
/// anything is read or written); its use case admits the request's head (405, 401, and 413 for a
/// declared length) before a byte of the body is read; the body is read up to the limit (413 past
/// it, even without a declared length); then the use case stores and enqueues it.
async fn webhook(
    State(app): State<App>,
    uri: Uri,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    app.share.arrived();
    let webhook = match app.webhooks.route(uri.path()).await {
        Ok(webhook) => webhook,
        Err(refused) => return webhook_answer(&Err(refused)),
    };
    let declared_length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    let head = RequestHead {
        method: method.as_str(),
        secret: headers.get(SECRET_HEADER).map(|value| value.as_bytes()),
        declared_length,
    };
    if let Err(refused) = webhook.admit(&head) {
        return webhook_answer(&Err(refused));
    }
    let limit = webhook.max_body_bytes();
    let refused = match axum::body::to_bytes(body, limit).await {
        Ok(body) => return respond(webhook.receive(body).await.answer()),
        Err(error) if is_length_limit(&error) => Refused::PayloadTooLarge {
            size: limit + 1,
            limit,
        },
        Err(_) => Refused::UnreadableBody,
    };
    webhook_answer(&Err(refused))
}

fn is_length_limit(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if cause.is::<LengthLimitError>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// `GET /healthz`: the process answers.
async fn healthz() -> Response {
    answer(StatusCode::OK, Value::from("alive"))
}

/// `GET /readyz`: the store commits and every worker loop runs.
async fn readyz(State(app): State<App>) -> Response {
    if app.shutdown.is_triggered() {
        return answer(
            StatusCode::SERVICE_UNAVAILABLE,
            Value::from("shutting down"),
        );
    }
    let running = app.loops.running();
    if running < app.expected_loops {
        let text = format!("{running} of {} worker loops running", app.expected_loops);
        return answer(StatusCode::SERVICE_UNAVAILABLE, Value::from(text));
    }
    // A full disk says so before a commit fails on it: a small commit may still fit in the
    // file's free pages while the next one that needs it to grow cannot.
    if let Some(free) = free_bytes(&app.data_dir).filter(|free| *free < MIN_FREE_BYTES) {
        let text = format!(
            "the disk holding {} is full: {free} bytes free",
            app.data_dir.display()
        );
        return answer(StatusCode::SERVICE_UNAVAILABLE, Value::from(text));
    }
    // After a failed commit (a full disk, an fsync error) the store is not ready until a commit
    // succeeds again: this probe tries one (reopening the file first).
    if app.store.health().is_err() {
        if let Err(reason) = app.store.probe().await {
            let text = format!("the store cannot commit: {reason}");
            return answer(StatusCode::SERVICE_UNAVAILABLE, Value::from(text));
        }
    }
    answer(StatusCode::OK, Value::from("ready"))
}

/// `GET /metrics`: the counters and histograms of `tgq_core::metrics` and the queue's gauges, in
/// the Prometheus text format under Prometheus' names (`crate::prometheus`), for the same clients
/// as the admin routes (a scraper on another host presents the admin token as a bearer token).
async fn metrics(State(app): State<App>) -> Response {
    // The queue's gauges, from one snapshot read; a store that cannot be read leaves them as they
    // were at the last scrape, and the counters are served all the same.
    let store = app.store.clone();
    let now = app.clock.now();
    let read = tokio::task::spawn_blocking(move || store.stats(now)).await;
    match read
        .map_err(anyhow::Error::from)
        .and_then(|stats| Ok(stats?))
    {
        Ok(stats) => crate::prometheus::record_store(&stats),
        Err(error) => warn!(error = %error, "reading the queue's gauges for /metrics"),
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

/// `?limit=N` on the admin list routes.
#[derive(Debug, Deserialize)]
struct Limit {
    limit: Option<usize>,
}

/// Lets a request through to an admin route only from loopback or with the admin token.
async fn admin_only(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    if let Err(forbidden) = admin::authorize(peer, request.headers(), app.admin_token.as_ref()) {
        return answer(StatusCode::FORBIDDEN, Value::from(forbidden.to_string()));
    }
    next.run(request).await
}

/// `GET /admin/status`: what `tgq status --json` prints.
async fn admin_status(State(app): State<App>) -> Response {
    let now = app.clock.now();
    admin_read(&app, move |store| StatusView::read(store, now)).await
}

/// `?limit=N&after=ID` of `GET /admin/outbox`.
#[derive(Debug, Deserialize)]
struct OutboxQuery {
    limit: Option<usize>,
    after: Option<u64>,
}

/// `GET /admin/outbox?limit=N&after=ID`: what `tgq outbox --json` prints (the entries after `ID`).
async fn admin_outbox(State(app): State<App>, Query(query): Query<OutboxQuery>) -> Response {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    let after = query.after.unwrap_or(0);
    admin_read(&app, move |store| views::outbox(store, after, limit)).await
}

/// `GET /admin/dlq?limit=N`: what `tgq dlq list --json` prints.
async fn admin_dlq(State(app): State<App>, Query(query): Query<Limit>) -> Response {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    let listed = match operator(&app, String::new()) {
        Ok(operator) => dlq::list_letters(&operator, limit).await,
        Err(error) => Err(error),
    };
    admin_answer(listed)
}

/// `?id=…` of `GET /admin/dlq/letter`.
#[derive(Debug, Deserialize)]
struct LetterId {
    id: String,
}

/// `GET /admin/dlq/letter?id=…`: what `tgq dlq show --json` prints (`null` when there is none).
async fn admin_dlq_letter(State(app): State<App>, Query(query): Query<LetterId>) -> Response {
    let shown = match operator(&app, String::new()) {
        Ok(operator) => dlq::show_letter(&operator, &query.id).await,
        Err(error) => Err(error),
    };
    admin_answer(shown)
}

/// `POST /admin/dlq/replay`: `tgq dlq replay` run by this instance, which holds the store.
async fn admin_dlq_replay(State(app): State<App>, Json(request): Json<ActRequest>) -> Response {
    let report = match operator(&app, request.principal.clone()) {
        Ok(operator) => {
            let report = operator
                .replay(&request.selection(), request.replay(), &|_| {})
                .await;
            Ok(ReportView::of(&report, request.dry_run))
        }
        Err(error) => Err(error),
    };
    admin_answer(report)
}

/// `POST /admin/dlq/purge`: `tgq dlq purge` run by this instance.
async fn admin_dlq_purge(State(app): State<App>, Json(request): Json<ActRequest>) -> Response {
    let report = match operator(&app, request.principal.clone()) {
        Ok(operator) => {
            let report = operator.purge(&request.selection(), &|_| {}).await;
            Ok(ReportView::of(&report, false))
        }
        Err(error) => Err(error),
    };
    admin_answer(report)
}

/// `GET /admin/audit?limit=N`: what `tgq dlq audit --json` prints.
async fn admin_audit(State(app): State<App>, Query(query): Query<Limit>) -> Response {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    admin_answer(dlq::audit_entries(app.store.as_ref(), limit).await)
}

/// The operator's use cases on this instance's store, acting for `principal`.
fn operator(app: &App, principal: String) -> anyhow::Result<tgq_core::operate::Operator> {
    dlq::local_operator(&app.store, principal)
}

/// Answers with a view, or 503 with the error.
fn admin_answer<T: serde::Serialize>(view: anyhow::Result<T>) -> Response {
    match view.map(serde_json::to_value) {
        Ok(Ok(value)) => answer(StatusCode::OK, value),
        Ok(Err(error)) => answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            Value::from(format!("the view does not serialize: {error}")),
        ),
        Err(error) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            Value::from(format!("{error:#}")),
        ),
    }
}

/// `GET /admin/timers?limit=N`: what `tgq timers list --json` prints.
async fn admin_timers(State(app): State<App>, Query(query): Query<Limit>) -> Response {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    admin_read(&app, move |store| Ok(store.pending_timers(limit)?)).await
}

/// `GET /admin/payments?limit=N`: what `tgq payments list --json` prints.
async fn admin_payments(State(app): State<App>, Query(query): Query<Limit>) -> Response {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    admin_read(&app, move |store| Ok(store.charges(limit)?)).await
}

/// `POST /admin/payments/refund`: `tgq payments refund` run by this instance, which holds the
/// store and the bots' tokens.
async fn admin_payments_refund(
    State(app): State<App>,
    Json(request): Json<payments::RefundBody>,
) -> Response {
    let refunded = match payments::served_telegram(app.bots.as_ref(), &request.bot).await {
        Ok(telegram) => {
            payments::refund_here(
                &app.store,
                telegram,
                &request.bot,
                &request.charge,
                request.principal,
            )
            .await
        }
        Err(error) => Err(error),
    };
    admin_answer(refunded)
}

/// `POST /admin/timers/cancel`: `tgq timers cancel` run by this instance, which holds the store.
async fn admin_timers_cancel(
    State(app): State<App>,
    Json(request): Json<crate::ops::timers::CancelRequest>,
) -> Response {
    admin_answer(crate::ops::timers::cancel_here(&app.store, &request).await)
}

/// `GET /admin/broadcasts`: what `tgq broadcast list --json` prints.
async fn admin_broadcasts(State(app): State<App>) -> Response {
    use tgq_core::broadcast::BroadcastStore as _;
    admin_answer(app.store.jobs().await.map_err(Into::into))
}

/// `?id=N` on the broadcast status route.
#[derive(Debug, Deserialize)]
struct BroadcastIdQuery {
    id: u64,
}

/// `GET /admin/broadcasts/status?id=N`: what `tgq broadcast status --json` prints (`null` when
/// there is no such broadcast).
async fn admin_broadcast_status(
    State(app): State<App>,
    Query(query): Query<BroadcastIdQuery>,
) -> Response {
    admin_answer(crate::ops::broadcast::status_here(&*app.store, query.id).await)
}

/// `POST /admin/broadcasts/start`: `tgq broadcast start` run by this instance; a broadcast that
/// cannot be sent (an empty audience, a method that sends nothing) is a 400 saying why.
async fn admin_broadcast_start(
    State(app): State<App>,
    Json(request): Json<crate::ops::broadcast::StartRequest>,
) -> Response {
    // A job for a bot this instance does not serve would wait for ever, then fail every
    // recipient with the bot's refusal: it is refused before anything is stored.
    let served = served_bots(&app).await;
    if !served.contains(&request.spec.bot) {
        let names: Vec<String> = served.iter().map(ToString::to_string).collect();
        let reason = format!(
            "bot `{}` is not served by this tgq local, which serves {}: pass --bot with one of \
             them, or add the bot with `tgq bots add`; nothing was stored",
            request.spec.bot,
            names.join(", ")
        );
        return answer(StatusCode::BAD_REQUEST, Value::from(reason));
    }
    let started = crate::ops::broadcast::start_here(&*app.store, &request).await;
    match started {
        Err(error)
            if error
                .downcast_ref::<tgq_core::broadcast::SpecError>()
                .is_some() =>
        {
            answer(StatusCode::BAD_REQUEST, Value::from(format!("{error:#}")))
        }
        other => admin_answer(other),
    }
}

/// The bots this instance serves: the environment's, and those of `bots.json`.
async fn served_bots(app: &App) -> Vec<tgq_core::ids::BotId> {
    let file = tgq_embedded::BotsFile::in_dir(&app.data_dir);
    let listed = tokio::task::spawn_blocking(move || file.read()).await;
    let mut served = vec![app.console_bot.clone()];
    match listed {
        Ok(Ok(entries)) => served.extend(entries.into_iter().map(|entry| entry.id)),
        Ok(Err(error)) => warn!(error = %error, "reading bots.json for a broadcast's bot"),
        Err(_) => warn!("reading bots.json for a broadcast's bot did not finish"),
    }
    served
}

/// `POST /admin/broadcasts/change`: `tgq broadcast pause | resume | cancel` run by this instance.
async fn admin_broadcast_change(
    State(app): State<App>,
    Json(request): Json<crate::ops::broadcast::ChangeRequest>,
) -> Response {
    admin_answer(crate::ops::broadcast::change_here(&*app.store, &request).await)
}

/// `POST /admin/broadcasts/retry`: `tgq broadcast retry` run by this instance.
async fn admin_broadcast_retry(
    State(app): State<App>,
    Json(request): Json<crate::ops::broadcast::RetryRequest>,
) -> Response {
    admin_answer(crate::ops::broadcast::retry_here(&*app.store, &request).await)
}

/// `?name=FILE` on the backup route.
#[derive(Debug, Deserialize)]
struct BackupName {
    name: String,
}

/// `POST /admin/backup?name=FILE`: a backup, taken inside one read transaction while the instance
/// goes on serving, written as `FILE` in `--backup-dir` and nowhere else, never over a file
/// already there: whoever reaches this route can write no other path. `tgq backup --to` takes
/// one here and moves it where its user asked.
async fn admin_backup(State(app): State<App>, Query(query): Query<BackupName>) -> Response {
    let Some(dir) = app.backup_dir.clone() else {
        return answer(
            StatusCode::CONFLICT,
            Value::from(
                "this tgq local was started without --backup-dir: restart it with \
                 --backup-dir DIR, or stop it and run `tgq backup` again (it then reads the store \
                 itself)",
            ),
        );
    };
    let plain = std::path::Path::new(&query.name)
        .file_name()
        .is_some_and(|name| name == query.name.as_str())
        && !query.name.starts_with('.');
    if !plain {
        let reason = format!(
            "{:?} is not a plain file name: a backup is written only into --backup-dir",
            query.name
        );
        return answer(StatusCode::BAD_REQUEST, Value::from(reason));
    }
    admin_read(&app, move |store| {
        Ok(store.backup_to(&dir.join(&query.name), false)?)
    })
    .await
}

/// Runs a blocking store read off the async threads and answers with its view as JSON.
pub(super) async fn admin_read<T, F>(app: &App, read: F) -> Response
where
    T: serde::Serialize + Send + 'static,
    F: FnOnce(&EmbeddedStore) -> anyhow::Result<T> + Send + 'static,
{
    let store = app.store.clone();
    match tokio::task::spawn_blocking(move || read(&store)).await {
        Ok(Ok(view)) => match serde_json::to_value(view) {
            Ok(value) => answer(StatusCode::OK, value),
            Err(error) => answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                Value::from(format!("the view does not serialize: {error}")),
            ),
        },
        Ok(Err(error)) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            Value::from(format!("{error:#}")),
        ),
        Err(_) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            Value::from("the store read did not finish"),
        ),
    }
}
