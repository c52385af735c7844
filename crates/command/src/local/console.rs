//! The console of `tgq local` (docs/BOT.md, "The console"): a page at `/` and the admin routes it reads.
//!
//! The page, its script and its style are files of this crate built into the binary; nothing is
//! fetched from elsewhere and nothing is built before `cargo run`. The page reads the store
//! through `/admin/console/…` (behind the admin check like every admin route: loopback, or the
//! admin token) and learns of changes from one event stream, `/admin/console/events`, which sends
//! an event after the store commits (at most a few a second) and nothing while it is idle.
//! What a person types in the console reaches the bot through the webhook's use case, as an
//! update from Telegram would: stored, deduplicated and queued.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Json, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};
use tgq_core::ids::BotId;

use super::http::{admin_read, answer, App};
use crate::views::StatusView;

const PAGE: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");

/// How long the event stream gathers commits into one event: a busy store sends a few events a
/// second, not one per commit.
const COALESCE: Duration = Duration::from_millis(250);

/// A comment on an idle stream this often keeps proxies from closing it.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The most updates the feed and a conversation list.
const MAX_LIMIT: usize = 500;

/// The page and its two files: public (they hold no data), served with a policy that lets the
/// page load nothing from anywhere else.
pub fn assets() -> Router<App> {
    Router::new()
        .route(
            "/",
            get(|| async { asset(PAGE, "text/html; charset=utf-8") }),
        )
        .route(
            "/console/console.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/console/console.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
}

/// The console's reads and its one write (an update typed in the page), nested under `/admin`.
pub fn routes() -> Router<App> {
    Router::new()
        .route("/console/feed", get(feed))
        .route("/console/update", get(update))
        .route("/console/chats", get(chats))
        .route("/console/waits", get(waits))
        .route("/console/conversation", get(conversation))
        .route("/console/events", get(events))
        .route("/console/send", post(send))
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `?limit=N` of the feed.
#[derive(Debug, Deserialize)]
struct FeedQuery {
    limit: Option<usize>,
}

/// `GET /admin/console/feed?limit=N`: the newest updates, newest first.
async fn feed(State(app): State<App>, Query(query): Query<FeedQuery>) -> Response {
    let limit = query.limit.unwrap_or(100).min(MAX_LIMIT);
    let now = app.clock.now();
    admin_read(&app, move |store| Ok(store.recent_updates(limit, now)?)).await
}

/// `?bot=ID&id=N` of one update.
#[derive(Debug, Deserialize)]
struct UpdateQuery {
    bot: String,
    id: i64,
}

/// `GET /admin/console/update?bot=ID&id=N`: one update whole; 404 when the store has none.
async fn update(State(app): State<App>, Query(query): Query<UpdateQuery>) -> Response {
    let Ok(bot) = BotId::new(query.bot.clone()) else {
        return answer(
            StatusCode::BAD_REQUEST,
            Value::from(format!("`{}` is not a bot id", query.bot)),
        );
    };
    let now = app.clock.now();
    let store = app.store.clone();
    let read = tokio::task::spawn_blocking(move || store.update_detail(&bot, query.id, now)).await;
    match read {
        Ok(Ok(Some(detail))) => match serde_json::to_value(detail) {
            Ok(value) => answer(StatusCode::OK, value),
            Err(error) => answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                Value::from(format!("the view does not serialize: {error}")),
            ),
        },
        Ok(Ok(None)) => answer(
            StatusCode::NOT_FOUND,
            Value::from(format!(
                "no update {} of bot `{}` is stored (never received, or past its retention)",
                query.id, query.bot
            )),
        ),
        Ok(Err(error)) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            Value::from(error.to_string()),
        ),
        Err(_) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            Value::from("the store read did not finish"),
        ),
    }
}

/// `GET /admin/console/chats`: every chat with a state or updates on the queue.
async fn chats(State(app): State<App>) -> Response {
    let now = app.clock.now();
    admin_read(&app, move |store| Ok(store.chats(now)?)).await
}

/// `GET /admin/console/waits`: the flood waits Telegram announced that still hold a bot: every
/// send of the bot waits until then, in every chat.
async fn waits(State(app): State<App>) -> Response {
    let running = app.flood_waits.running(app.clock.now().0);
    let waits: Vec<Value> = running
        .into_iter()
        .map(|(bot_id, until)| json!({ "bot_id": bot_id, "until": until }))
        .collect();
    answer(StatusCode::OK, Value::from(waits))
}

/// `?bot=ID&chat=GROUP&limit=N` of a conversation.
#[derive(Debug, Deserialize)]
struct ConversationQuery {
    bot: Option<String>,
    chat: String,
    limit: Option<usize>,
}

/// `GET /admin/console/conversation?chat=GROUP`: a chat's updates and what the bot sent it.
async fn conversation(State(app): State<App>, Query(query): Query<ConversationQuery>) -> Response {
    let bot = match bot_of(&app, query.bot.as_deref()) {
        Ok(bot) => bot,
        Err(reason) => return answer(StatusCode::BAD_REQUEST, Value::from(reason)),
    };
    let limit = query.limit.unwrap_or(50).min(MAX_LIMIT);
    let now = app.clock.now();
    admin_read(&app, move |store| {
        Ok(store.conversation(&bot, &query.chat, limit, now)?)
    })
    .await
}

/// The bot a console request names, or the environment's; the reason when the name is not a bot id.
fn bot_of(app: &App, named: Option<&str>) -> Result<BotId, String> {
    match named.filter(|name| !name.is_empty()) {
        None => Ok(app.console_bot.clone()),
        Some(name) => BotId::new(name.to_owned()).map_err(|_| format!("`{name}` is not a bot id")),
    }
}

/// `GET /admin/console/events`: a server-sent event `change` after the store commits, carrying
/// what `tgq status` shows and the end-to-end latency's running totals; a comment every 15 s
/// while nothing happens. The stream ends when the process stops.
async fn events(
    State(app): State<App>,
) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let commits = app.store.commits_watch();
    let first = true;
    let stream = futures::stream::unfold(
        (app, commits, first),
        |(app, mut commits, first)| async move {
            if !first {
                tokio::select! {
                    changed = commits.changed() => changed.ok()?,
                    () = app.shutdown.wait() => return None,
                }
                // Gather the commits that follow closely into this one event.
                tokio::select! {
                    () = tokio::time::sleep(COALESCE) => {}
                    () = app.shutdown.wait() => return None,
                }
                commits.borrow_and_update();
            }
            let event = change_event(&app).await;
            Some((Ok(event), (app, commits, false)))
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

/// The `change` event: the status view and the latency totals, at this moment.
async fn change_event(app: &App) -> Event {
    let store = app.store.clone();
    let now = app.clock.now();
    let status = tokio::task::spawn_blocking(move || StatusView::read(&store, now)).await;
    let status = match status {
        Ok(Ok(view)) => serde_json::to_value(view).unwrap_or(Value::Null),
        Ok(Err(error)) => json!({ "error": format!("{error:#}") }),
        Err(_) => json!({ "error": "the store read did not finish" }),
    };
    let (count, sum) = latency_totals(&app.metrics.render());
    let data = json!({
        "at": now.0,
        "status": status,
        "latency": { "count": count, "sum_seconds": sum },
    });
    Event::default().event("change").data(data.to_string())
}

/// The end-to-end latency histogram's count and sum over every bot, from the Prometheus text.
fn latency_totals(text: &str) -> (u64, f64) {
    let mut count = 0u64;
    let mut sum = 0f64;
    for line in text.lines() {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let metric = name.split('{').next().unwrap_or(name);
        match metric {
            "tgq_end_to_end_latency_seconds_count" => {
                count += value.parse::<f64>().unwrap_or(0.0) as u64;
            }
            "tgq_end_to_end_latency_seconds_sum" => sum += value.parse::<f64>().unwrap_or(0.0),
            _ => {}
        }
    }
    (count, sum)
}

/// What the console sends the bot: a message typed as a chat, a button pressed under one of the
/// bot's messages, or any update's JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SendRequest {
    /// The bot (`/webhook/{bot_id}`); the environment's bot when absent.
    bot: Option<String>,
    /// A message typed as this private chat.
    chat_id: Option<i64>,
    /// Its text.
    text: Option<String>,
    /// A button pressed: its `callback_data`.
    callback_data: Option<String>,
    /// The bot's message the button is under.
    message_id: Option<i64>,
    /// Any update, sent as it is (its `update_id` included).
    update: Option<Value>,
}

/// `POST /admin/console/send`: builds the update (a new update id above every stored one) and
/// hands it to the bot's webhook use case, which stores, deduplicates and queues it as it does
/// Telegram's. Answers with the update id and the webhook's own answer.
async fn send(State(app): State<App>, Json(request): Json<SendRequest>) -> Response {
    let bot = match bot_of(&app, request.bot.as_deref()) {
        Ok(bot) => bot,
        Err(reason) => return answer(StatusCode::BAD_REQUEST, Value::from(reason)),
    };
    // The environment's bot answers on /webhook, the registry's on /webhook/{bot_id}.
    let path = if bot == app.console_bot {
        String::from("/webhook")
    } else {
        format!("/webhook/{bot}")
    };
    let webhook = match app.webhooks.route(&path).await {
        Ok(webhook) => webhook,
        Err(_) => {
            return answer(
                StatusCode::NOT_FOUND,
                Value::from(format!("this instance hosts no bot `{bot}`")),
            )
        }
    };
    let body = match &request.update {
        Some(update) => update.to_string(),
        None => {
            let store = app.store.clone();
            let highest = {
                let bot = bot.clone();
                tokio::task::spawn_blocking(move || store.highest_update_id(&bot)).await
            };
            let update_id = match highest {
                Ok(Ok(highest)) => app.console_ids.next_after(highest),
                Ok(Err(error)) => {
                    return answer(
                        StatusCode::SERVICE_UNAVAILABLE,
                        Value::from(error.to_string()),
                    )
                }
                Err(_) => {
                    return answer(
                        StatusCode::SERVICE_UNAVAILABLE,
                        Value::from("the store read did not finish"),
                    )
                }
            };
            match typed_update(&request, update_id, app.clock.now().0 / 1000) {
                Ok(update) => update.to_string(),
                Err(reason) => return answer(StatusCode::BAD_REQUEST, Value::from(reason)),
            }
        }
    };
    let update_id = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|update| update["update_id"].as_i64());
    let reply = webhook.receive(Bytes::from(body)).await;
    let webhook_answer = reply.answer();
    let status = StatusCode::from_u16(webhook_answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let said: Value = serde_json::from_str(&webhook_answer.body).unwrap_or(Value::Null);
    answer(
        status,
        json!({ "update_id": update_id, "webhook": { "status": webhook_answer.status, "answer": said } }),
    )
}

/// The update Telegram would send for a message typed in a private chat, or a button pressed.
fn typed_update(request: &SendRequest, update_id: i64, now_secs: u64) -> Result<Value, String> {
    let chat_id = request
        .chat_id
        .ok_or("name the chat (`chat_id`) the message comes from")?;
    if chat_id <= 0 {
        return Err(format!(
            "the console types as a private chat, whose id is a positive user id, not {chat_id}"
        ));
    }
    let user = json!({ "id": chat_id, "is_bot": false, "first_name": "Console", "username": format!("console{chat_id}") });
    let chat = json!({ "id": chat_id, "type": "private", "first_name": "Console" });
    match (&request.text, &request.callback_data) {
        (Some(text), None) if !text.is_empty() => Ok(json!({
            "update_id": update_id,
            "message": {
                "message_id": typed_message_id(update_id),
                "date": now_secs,
                "chat": chat,
                "from": user,
                "text": text,
            }
        })),
        (None, Some(data)) => {
            let message_id = request
                .message_id
                .ok_or("name the bot's message (`message_id`) the button is under")?;
            Ok(json!({
                "update_id": update_id,
                "callback_query": {
                    "id": format!("console-{update_id}"),
                    "from": user,
                    "chat_instance": format!("console-{chat_id}"),
                    "data": data,
                    "message": {
                        "message_id": message_id,
                        "date": now_secs,
                        "chat": chat,
                        "from": { "id": 1, "is_bot": true, "first_name": "bot" },
                        "text": "",
                    }
                }
            }))
        }
        (Some(_), Some(_)) => Err(String::from(
            "send either `text` (a message) or `callback_data` (a button), not both",
        )),
        _ => Err(String::from(
            "send `text` (a message), `callback_data` (a button) or `update` (any update's JSON)",
        )),
    }
}

/// The update ids of what the console types start above this: Telegram numbers a bot's updates
/// upwards from a point of its own, well below it, so a typed update never takes the id of one
/// Telegram sends later (which would then be dropped as a duplicate). The Bot API's ids fit 32
/// bits unsigned (teloxide-core's `UpdateId`), and so do these.
pub const CONSOLE_UPDATE_IDS_FROM: i64 = 3_000_000_000;

/// Update ids for what the console types: above [`CONSOLE_UPDATE_IDS_FROM`], every stored id of
/// the bot and every id this process handed out, so a typed message is never a duplicate.
#[derive(Debug, Default)]
pub struct ConsoleIds {
    last: std::sync::Mutex<i64>,
}

impl ConsoleIds {
    /// The next id above `highest` (the store's), the floor and the last one handed out.
    fn next_after(&self, highest: Option<i64>) -> i64 {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        *last = (*last)
            .max(highest.unwrap_or(0))
            .max(CONSOLE_UPDATE_IDS_FROM)
            + 1;
        *last
    }
}

/// The message id of a message typed in the console: the Bot API's message ids are 32-bit
/// signed, so the typed update's id is brought under that, above the small ids the offline outbox
/// gives the bot's own messages.
fn typed_message_id(update_id: i64) -> i64 {
    2_000_000_000 + (update_id - CONSOLE_UPDATE_IDS_FROM).rem_euclid(100_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(text: Option<&str>, data: Option<&str>) -> SendRequest {
        SendRequest {
            bot: None,
            chat_id: Some(7),
            text: text.map(str::to_owned),
            callback_data: data.map(str::to_owned),
            message_id: Some(3),
            update: None,
        }
    }

    #[test]
    fn a_typed_message_and_a_pressed_button_are_updates_telegram_could_have_sent() {
        let ids = ConsoleIds::default();
        // The highest id the console may reach before u32's end, as well as its first.
        for id in [ids.next_after(Some(7)), 4_294_967_295] {
            for update in [
                typed_update(&request(Some("hi"), None), id, 1_700_000_000).unwrap(),
                typed_update(&request(None, Some("book:1")), id, 1_700_000_000).unwrap(),
            ] {
                let text = update.to_string();
                let parsed: teloxide_core::types::Update = serde_json::from_str(&text).unwrap();
                assert!(
                    !matches!(parsed.kind, teloxide_core::types::UpdateKind::Error(_)),
                    "{text}"
                );
                assert_eq!(i64::from(parsed.id.0), id);
            }
        }
    }

    #[test]
    fn what_cannot_be_typed_is_refused_with_the_reason() {
        let both = typed_update(&request(Some("hi"), Some("x")), 5, 0).unwrap_err();
        assert!(both.contains("not both"), "{both}");
        let group = SendRequest {
            chat_id: Some(-100),
            ..request(Some("hi"), None)
        };
        assert!(typed_update(&group, 5, 0)
            .unwrap_err()
            .contains("private chat"));
        let empty = typed_update(&request(Some(""), None), 5, 0).unwrap_err();
        assert!(empty.contains("`text`"), "{empty}");
    }

    #[test]
    fn console_ids_climb_above_telegrams_the_store_and_each_other() {
        let ids = ConsoleIds::default();
        let first = CONSOLE_UPDATE_IDS_FROM + 1;
        assert_eq!(ids.next_after(None), first);
        assert_eq!(
            ids.next_after(Some(812_345_678)),
            first + 1,
            "a real bot's ids stay below"
        );
        assert_eq!(ids.next_after(Some(first + 40)), first + 41);
        assert_eq!(ids.next_after(Some(3)), first + 42);
    }

    #[test]
    fn the_latency_totals_add_up_every_bot() {
        let text = "# TYPE tgq_end_to_end_latency_seconds histogram\n\
            tgq_end_to_end_latency_seconds_bucket{bot_id=\"a\",le=\"0.1\"} 2\n\
            tgq_end_to_end_latency_seconds_sum{bot_id=\"a\"} 0.5\n\
            tgq_end_to_end_latency_seconds_count{bot_id=\"a\"} 2\n\
            tgq_end_to_end_latency_seconds_sum{bot_id=\"b\"} 1.5\n\
            tgq_end_to_end_latency_seconds_count{bot_id=\"b\"} 3\n";
        assert_eq!(latency_totals(text), (5, 2.0));
    }
}
