//! `tgq local --demo`: sends every example update of `events/updates` to the instance's own
//! `/webhook`, one of them twice and one body that is not JSON, waits until the queue is empty and
//! nothing is in flight, and prints what happened and what the bot answered.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use secrecy::{ExposeSecret as _, SecretString};
use serde_json::Value;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::ingest::SECRET_HEADER;
use tgq_embedded::{Counters, EmbeddedStore, OutboxEntry};

use super::fixtures;
use crate::ops::render::one_line;

/// How long the demo waits for the queue to drain.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the demo's data is, for the commands its summary suggests.
#[derive(Clone, Debug)]
pub struct Place {
    /// ` --data-dir <dir>`, or nothing for the default directory.
    pub data_dir_option: String,
    /// Whether the directory goes away when the demo exits (a fresh one, with `--exit`).
    pub removed_at_exit: bool,
}

/// What the store held before the demo, so that the summary shows this run only.
struct Before {
    counters: Counters,
    last_outbox_id: u64,
}

/// Runs the demo against the instance listening at `addr` and prints its summary on stdout.
pub async fn run(
    addr: SocketAddr,
    secret: &SecretString,
    store: Arc<EmbeddedStore>,
    place: &Place,
) -> anyhow::Result<()> {
    let before = blocking(&store, |store| {
        Ok(Before {
            counters: store.counters()?,
            last_outbox_id: store.outbox(usize::MAX)?.last().map_or(0, |entry| entry.id),
        })
    })
    .await?;

    let url = format!("http://{}/webhook", crate::ops::loopback(addr));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let updates = updates_in_order();
    for (name, body) in &updates {
        post(&client, &url, secret, body)
            .await
            .with_context(|| format!("posting {name}"))?;
    }
    // Telegram retries a request it got no answer to: the same update again.
    if let Some((name, body)) = updates.first() {
        post(&client, &url, secret, body)
            .await
            .with_context(|| format!("posting {name} again"))?;
    }
    post(&client, &url, secret, fixtures::POISON)
        .await
        .context("posting the poison body")?;

    settle(&store).await?;
    let (counters, replies) = blocking(&store, move |store| {
        let replies: Vec<OutboxEntry> = store
            .outbox(usize::MAX)?
            .into_iter()
            .filter(|entry| entry.id > before.last_outbox_id)
            .collect();
        Ok((store.counters()?, replies))
    })
    .await?;
    print_summary(
        updates.len(),
        &url,
        &Counters::since(&counters, &before.counters),
        &replies,
        place,
    );
    Ok(())
}

/// The fixtures in update_id order, as Telegram would send them.
fn updates_in_order() -> Vec<(&'static str, &'static str)> {
    let mut updates = fixtures::UPDATES.to_vec();
    updates.sort_by_key(|(name, body)| {
        let id = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|update| update["update_id"].as_i64());
        (id, *name)
    });
    updates
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    secret: &SecretString,
    body: &'static str,
) -> anyhow::Result<()> {
    let response = client
        .post(url)
        .header(SECRET_HEADER, secret.expose_secret())
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        bail!("the webhook answered {status}: {text}");
    }
    Ok(())
}

/// Waits until no message is pending or in flight.
async fn settle(store: &Arc<EmbeddedStore>) -> anyhow::Result<()> {
    let started = tokio::time::Instant::now();
    loop {
        let stats = blocking(store, |store| Ok(store.stats(SystemClock.now())?)).await?;
        if stats.pending == 0 && stats.in_flight == 0 {
            return Ok(());
        }
        if started.elapsed() > SETTLE_TIMEOUT {
            bail!(
                "the demo did not settle within {} s: {} pending, {} in flight. \
                 See the log above and `tgq status`.",
                SETTLE_TIMEOUT.as_secs(),
                stats.pending,
                stats.in_flight
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn print_summary(
    sent: usize,
    url: &str,
    counts: &Counters,
    replies: &[OutboxEntry],
    place: &Place,
) {
    let dlq = format!("`tgq dlq list{}`", place.data_dir_option);
    let outbox = format!("`tgq outbox{}`", place.data_dir_option);
    outln!();
    outln!("Demo: {sent} example updates (events/updates) sent to {url},");
    outln!("      then the first one again (as Telegram retries) and one body that is not JSON.");
    outln!();
    let rows = [
        (
            "received",
            counts.received,
            "new updates, stored durably and queued",
        ),
        (
            "duplicates",
            counts.duplicates,
            "already stored: acknowledged, not queued again",
        ),
        (
            "poison",
            counts.poison,
            &format!("not an update: kept as a dead letter ({dlq})"),
        ),
        ("processed", counts.processed, "handled by the bot"),
        (
            "retried",
            counts.retried,
            "failed for a moment, retried after a backoff",
        ),
        (
            "dead-lettered",
            counts.dead_lettered,
            &format!("given up on ({dlq})"),
        ),
    ];
    for (label, count, meaning) in rows {
        outln!("  {label:<14} {count:>4}   {meaning}");
    }
    if counts.received == 0 && counts.duplicates > 0 {
        outln!();
        outln!("  These updates were already handled by an earlier demo on this data directory, so every");
        outln!("  one was recognised as a duplicate. Leave out --data-dir (each demo then gets a fresh");
        outln!("  one) to see them processed again.");
    }
    outln!();
    if replies.is_empty() {
        outln!("The bot sent no replies in this run.");
    } else {
        outln!("The bot's replies (offline: kept in the outbox, nothing went to Telegram; see {outbox}):");
        for reply in replies {
            let chat = reply
                .chat_id
                .map_or_else(|| "-".to_owned(), |chat| chat.to_string());
            let text = one_line(reply.text.as_deref().unwrap_or(""), 70);
            outln!("  chat {chat:<15} {:<20} {text}", reply.method);
        }
    }
    if place.removed_at_exit {
        outln!();
        outln!("This demo's data directory was made for this run and goes away as it exits: give");
        outln!("--data-dir DIR to keep the store and look inside with the commands above.");
    }
    outln!();
}

/// Runs a blocking store read off the async threads.
async fn blocking<T, F>(store: &Arc<EmbeddedStore>, read: F) -> anyhow::Result<T>
where
    T: Send + 'static,
    F: FnOnce(&EmbeddedStore) -> anyhow::Result<T> + Send + 'static,
{
    let store = store.clone();
    tokio::task::spawn_blocking(move || read(&store)).await?
}
