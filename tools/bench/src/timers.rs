//! The timers phase (`--timers-only`): `N` chats each schedule a timer at a time of the bench's
//! choosing (the echo bot's `/at`), all due within the same minute, and the bench reads from the
//! outbox when each one fired: how late against the time it was due, and whether every timer fired
//! exactly once.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::load::now_ms_precise;
use crate::server::Server;
use crate::stats;

/// How long after the first post the minute of due times starts: the posting and the scheduling
/// runs finish well before it.
const LEAD: Duration = Duration::from_secs(45);
/// The span the due times are spread over.
const SPAN: Duration = Duration::from_secs(60);
/// Concurrent posters.
const CLIENTS: u64 = 32;

/// What the phase measured.
pub struct TimerFigures {
    timers: u64,
    fired: u64,
    twice: u64,
    lateness_ms: Vec<f64>,
    post_secs: f64,
}

impl TimerFigures {
    /// Fails unless every timer fired exactly once.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.fired != self.timers || self.twice > 0 {
            bail!(
                "{} of {} timers fired, {} more than once:\n{}",
                self.fired,
                self.timers,
                self.twice,
                self.summary()
            );
        }
        Ok(())
    }

    /// The figures as text.
    pub fn summary(&self) -> String {
        let late = stats::Summary::of_millis(&self.lateness_ms);
        format!(
            "timers: {} scheduled by {} chats (posted in {:.1} s), due spread over one minute\n\
             fired: {} once each, {} more than once\n\
             lateness after the due time: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            self.timers,
            self.timers,
            self.post_secs,
            self.fired,
            self.twice,
            late.p50,
            late.p99,
            late.max,
        )
    }
}

/// Runs the phase with `timers` timers in `run_dir`.
pub async fn timers(tgq: &Path, run_dir: &Path, timers: u64) -> anyhow::Result<TimerFigures> {
    let server = Server::start(
        tgq,
        &run_dir.join("timers"),
        &run_dir.join("timers.log"),
        &[],
    )
    .await?;
    let started = Instant::now();
    let window_start = now_ms_precise() as u64 + LEAD.as_millis() as u64;
    let next = Arc::new(AtomicU64::new(1));
    let mut posters = Vec::new();
    for _ in 0..CLIENTS {
        let (next, url, secret) = (
            next.clone(),
            server.webhook_url(),
            server.secret().to_owned(),
        );
        posters.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            loop {
                let id = next.fetch_add(1, Ordering::Relaxed);
                if id > timers {
                    return Ok::<(), anyhow::Error>(());
                }
                // Spread evenly over the minute, each due time in the text it echoes back.
                let due = window_start + SPAN.as_millis() as u64 * (id - 1) / timers;
                let body = format!(
                    r#"{{"update_id":{id},"message":{{"message_id":{id},"date":0,"chat":{{"id":{id},"type":"private","first_name":"B"}},"from":{{"id":{id},"is_bot":false,"first_name":"B"}},"text":"/at {due} due={due}"}}}}"#
                );
                let answer = client
                    .post(&url)
                    .header("x-telegram-bot-api-secret-token", &secret)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .with_context(|| format!("posting update {id}"))?;
                if !answer.status().is_success() {
                    bail!("update {id}: /webhook answered {}", answer.status());
                }
            }
        }));
    }
    for poster in posters {
        poster.await??;
    }
    let post_secs = started.elapsed().as_secs_f64();
    if now_ms_precise() as u64 > window_start {
        bail!("posting took longer than the {LEAD:?} lead; the timers' minute had begun");
    }
    let end = window_start + SPAN.as_millis() as u64;
    // Until every timer has fired, and a few seconds more for a second delivery to show.
    let deadline = Instant::now() + LEAD + SPAN + Duration::from_secs(120);
    let mut fired: HashMap<u64, (u64, u32)> = HashMap::new();
    let mut after = 0u64;
    loop {
        let page = server
            .admin(&format!("/admin/outbox?limit=1000&after={after}"))
            .await?;
        let entries = page.as_array().cloned().unwrap_or_default();
        for entry in &entries {
            after = after.max(entry["id"].as_u64().unwrap_or(after));
            let text = entry["text"].as_str().unwrap_or_default();
            let (Some(rest), Some(at)) = (text.strip_prefix("echo timer "), entry["at"].as_u64())
            else {
                continue;
            };
            let due = rest
                .rsplit_once("due=")
                .and_then(|(_, due)| due.parse::<u64>().ok())
                .context("a timer reply names its due time")?;
            let slot = fired.entry(due).or_insert((at, 0));
            slot.1 += 1;
        }
        let now = now_ms_precise() as u64;
        if fired.len() as u64 >= timers && now > end + 5_000 && entries.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {} of {timers} timers fired in time", fired.len());
        }
        if entries.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    server.stop().await?;
    let lateness_ms: Vec<f64> = fired
        .iter()
        .map(|(due, (at, _))| at.saturating_sub(*due) as f64)
        .collect();
    Ok(TimerFigures {
        timers,
        fired: fired.len() as u64,
        twice: fired.values().filter(|(_, n)| *n > 1).count() as u64,
        lateness_ms,
        post_secs,
    })
}
