//! Load over loopback HTTP, as Telegram would send it: distinct message updates spread over a set of
//! chats, POSTed to `/webhook` with the secret header. Closed loop (each client sends its next update
//! when the previous one is acknowledged) for throughput; open loop (each update at its scheduled
//! time, whatever the answers do) for latency.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Telegram's webhook secret header.
const SECRET_HEADER: &str = "X-Telegram-Bot-Api-Secret-Token";
/// The first chat id; chats are `FIRST_CHAT .. FIRST_CHAT + chats`.
const FIRST_CHAT: i64 = 100_000;

/// Where updates go.
#[derive(Clone, Debug)]
pub struct Target {
    /// The `/webhook` URL.
    pub url: String,
    /// The webhook secret.
    pub secret: String,
}

/// Hands out distinct update ids, each in one of `chats` chats in turn.
#[derive(Debug)]
pub struct Updates {
    next: AtomicU64,
    chats: u64,
}

impl Updates {
    /// Update ids from 1, over `chats` chats.
    pub fn new(chats: u64) -> Self {
        Self {
            next: AtomicU64::new(1),
            chats: chats.max(1),
        }
    }

    /// The next update id and its chat.
    fn next(&self) -> (u64, i64) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let chat = FIRST_CHAT + i64::try_from(id % self.chats).unwrap_or(0);
        (id, chat)
    }
}

/// A private-chat text message update, as Telegram sends it.
fn update_body(update_id: u64, chat: i64) -> String {
    // Written out rather than built as a JSON value: the closed loop makes tens of thousands a second
    // on the machine it measures. Every field is a number or a fixed word, so nothing needs escaping.
    format!(
        concat!(
            r#"{{"update_id":{id},"message":{{"message_id":{id},"#,
            r#""from":{{"id":{chat},"is_bot":false,"first_name":"Bench"}},"#,
            r#""chat":{{"id":{chat},"first_name":"Bench","type":"private"}},"#,
            r#""date":{date},"text":"bench {id}"}}}}"#
        ),
        id = update_id,
        chat = chat,
        date = now_ms() / 1000,
    )
}

/// A client for one concurrent sender: HTTP/1.1 keep-alive, so the connection is reused.
fn client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(4)
        .build()?)
}

/// Posts one update; anything but `200 {"result": "queued"}` is an error.
async fn post(
    client: &reqwest::Client,
    target: &Target,
    update_id: u64,
    chat: i64,
) -> anyhow::Result<()> {
    let answer = client
        .post(&target.url)
        .header(SECRET_HEADER, &target.secret)
        .header("content-type", "application/json")
        .body(update_body(update_id, chat))
        .send()
        .await
        .with_context(|| format!("posting update {update_id}"))?;
    let status = answer.status().as_u16();
    let body = answer.bytes().await.unwrap_or_default();
    check_answer(update_id, status, &body)
}

/// Anything but `200 {"result": "queued"}` is an error that names the update and the answer.
fn check_answer(update_id: u64, status: u16, body: &[u8]) -> anyhow::Result<()> {
    let queued = serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|answer| answer["result"] == "queued");
    if status != 200 || !queued {
        bail!(
            "update {update_id}: /webhook answered {status} {}",
            String::from_utf8_lossy(body)
        );
    }
    Ok(())
}

/// Milliseconds since the epoch, with sub-millisecond precision, as tgq's clock counts.
pub fn now_ms_precise() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64() * 1e3)
}

fn now_ms() -> u64 {
    now_ms_precise() as u64
}

/// What a closed-loop run achieved.
#[derive(Clone, Debug)]
pub struct ClosedLoop {
    /// Updates acknowledged with 200.
    pub accepted: u64,
    /// From the first send to the last answer.
    pub elapsed: Duration,
    /// Each request's time to its answer.
    pub latencies: Vec<Duration>,
}

/// One HTTP/1.1 keep-alive connection of a closed-loop sender, driven by hyper's connection-level
/// client: each request costs the bench a fraction of what a pooled client costs, and that CPU is
/// taken from tgq on the same machine.
struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    uri: hyper::Uri,
    secret: hyper::header::HeaderValue,
}

impl Connection {
    async fn open(target: &Target) -> anyhow::Result<Self> {
        let uri: hyper::Uri = target.url.parse().context("the webhook URL")?;
        let authority = uri.authority().context("the webhook URL has no host")?;
        let stream = tokio::net::TcpStream::connect(authority.as_str())
            .await
            .with_context(|| format!("connecting to {authority}"))?;
        stream.set_nodelay(true)?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let secret = hyper::header::HeaderValue::from_str(&target.secret)?;
        Ok(Self {
            sender,
            uri,
            secret,
        })
    }

    /// Posts one update; anything but `200 {"result": "queued"}` is an error.
    async fn post(&mut self, update_id: u64, chat: i64) -> anyhow::Result<()> {
        let authority = self.uri.authority().map_or("", |a| a.as_str());
        let request = hyper::Request::post(&self.uri)
            .header(hyper::header::HOST, authority)
            .header(SECRET_HEADER, &self.secret)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(update_body(update_id, chat))))?;
        self.sender.ready().await?;
        let answer = self
            .sender
            .send_request(request)
            .await
            .with_context(|| format!("posting update {update_id}"))?;
        let status = answer.status().as_u16();
        let body = answer.into_body().collect().await?.to_bytes();
        check_answer(update_id, status, &body)
    }
}

/// `clients` concurrent senders, each on its own connection, each posting its next update as soon as
/// the previous one is acknowledged, for `duration`. The first error stops the run.
pub async fn closed_loop(
    target: &Target,
    updates: &Arc<Updates>,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<ClosedLoop> {
    let connections = connect(target, clients).await?;
    let deadline = Instant::now() + duration;
    post_while(connections, updates, move || Instant::now() < deadline).await
}

/// `clients` concurrent senders, each on its own connection, posting `total` updates between them
/// as fast as they are acknowledged. The first error stops the run.
pub async fn post_count(
    target: &Target,
    updates: &Arc<Updates>,
    clients: usize,
    total: u64,
) -> anyhow::Result<ClosedLoop> {
    let connections = connect(target, clients).await?;
    let left = Arc::new(AtomicU64::new(total));
    let take = |n: u64| n.checked_sub(1);
    post_while(connections, updates, move || {
        left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, take)
            .is_ok()
    })
    .await
}

async fn connect(target: &Target, clients: usize) -> anyhow::Result<Vec<Connection>> {
    let mut connections = Vec::with_capacity(clients);
    for _ in 0..clients {
        connections.push(Connection::open(target).await?);
    }
    Ok(connections)
}

/// One sender per connection, each posting its next update as soon as the previous one is
/// acknowledged while `more()` says so (asked before each post).
async fn post_while(
    connections: Vec<Connection>,
    updates: &Arc<Updates>,
    more: impl Fn() -> bool + Clone + Send + 'static,
) -> anyhow::Result<ClosedLoop> {
    let start = Instant::now();
    let mut senders = JoinSet::new();
    for mut connection in connections {
        let (updates, more) = (updates.clone(), more.clone());
        senders.spawn(async move {
            let mut latencies = Vec::new();
            while more() {
                let (id, chat) = updates.next();
                let began = Instant::now();
                connection.post(id, chat).await?;
                latencies.push(began.elapsed());
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(joined) = senders.join_next().await {
        latencies.extend(joined??);
    }
    Ok(ClosedLoop {
        accepted: latencies.len() as u64,
        elapsed: start.elapsed(),
        latencies,
    })
}

/// One update of an open-loop run.
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    /// Its id.
    pub update_id: u64,
    /// When the bench sent it, in epoch milliseconds.
    pub sent_ms: f64,
    /// How late the send was against its schedule.
    pub lag: Duration,
    /// Its request's time to the 200.
    pub acknowledged_in: Duration,
}

/// Sends `rate` updates a second for `duration`, each at its scheduled time (`start + i / rate`)
/// on its own task, whether or not earlier requests have been answered; `clients` clients take turns.
/// Fails if any request is not acknowledged with 200.
pub async fn open_loop(
    target: &Target,
    updates: &Arc<Updates>,
    rate: f64,
    duration: Duration,
    clients: usize,
) -> anyhow::Result<Vec<Sent>> {
    let total = (rate * duration.as_secs_f64()).round() as u64;
    let pool: Vec<reqwest::Client> = (0..clients.max(1))
        .map(|_| client())
        .collect::<anyhow::Result<_>>()?;
    let start = Instant::now();
    let mut requests = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due).await;
        let client = pool[usize::try_from(i).unwrap_or(0) % pool.len()].clone();
        let (target, (update_id, chat)) = (target.clone(), updates.next());
        requests.push(tokio::spawn(async move {
            let lag = Instant::now().saturating_duration_since(due);
            let sent_ms = now_ms_precise();
            let began = Instant::now();
            post(&client, &target, update_id, chat).await?;
            anyhow::Ok(Sent {
                update_id,
                sent_ms,
                lag,
                acknowledged_in: began.elapsed(),
            })
        }));
    }
    let mut sent = Vec::with_capacity(requests.len());
    for request in requests {
        sent.push(request.await??);
    }
    Ok(sent)
}
