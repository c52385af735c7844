//! The broadcast phase (`--broadcast-only N`): `tgq local` sends one message to `N` recipients
//! through the fake Bot API, which enforces Telegram's limits, while a steady trickle of users
//! writes to the bot. The bench counts from the fake what arrived — every recipient exactly once,
//! nothing over the limits — and measures the job's sustained rate against its lane's and the
//! latency of the bot's replies during it.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use tgq_fake_telegram::{FakeConfig, FakeTelegram, Limits};

use crate::server::Server;
use crate::stats;

/// Which lane the phase sends in, and at what rate.
#[derive(Clone, Copy, Debug)]
pub struct Lane {
    /// Telegram's paid broadcasts rather than the bot's own budget.
    pub paid: bool,
    /// The bot's rate (`TGQ_RATE_PER_SECOND`) and the fake's limit for it.
    pub bot_rate: u32,
    /// The paid lane's rate, and the fake's limit for it.
    pub paid_rate: u32,
}

impl Lane {
    /// What the job may send a second: the paid lane's rate, or the bot's less the 20 % reserve.
    fn budget(&self) -> f64 {
        match self.paid {
            true => f64::from(self.paid_rate),
            false => f64::from(self.bot_rate) * 0.8,
        }
    }
}

/// Users writing to the bot during the broadcast, each a chat of its own: one every this long.
const INTERACTIVE_EVERY: Duration = Duration::from_millis(500);
/// The first chat id of those users, above any recipient's.
const INTERACTIVE_CHATS: i64 = 1_000_000_000;

/// What the phase measured.
pub struct BroadcastFigures {
    lane: Lane,
    recipients: u64,
    delivered: u64,
    twice: u64,
    over_limit: u64,
    early: u64,
    seconds: f64,
    sustained: f64,
    reply_ms: Vec<f64>,
    unanswered: u64,
}

impl BroadcastFigures {
    /// Fails unless every recipient got the message exactly once within the limits.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.delivered != self.recipients
            || self.twice > 0
            || self.over_limit > 0
            || self.early > 0
        {
            bail!("the broadcast broke a promise:\n{}", self.summary());
        }
        Ok(())
    }

    /// The figures as text.
    pub fn summary(&self) -> String {
        let replies = stats::Summary::of_millis(&self.reply_ms);
        let budget = self.lane.budget();
        format!(
            "broadcast: {} recipients, {} lane at {:.0}/s (bot rate {}/s)\n\
             delivered: {} once each, {} more than once; over the limits {}, inside a flood wait {}\n\
             time: {:.1} s (recipients / budget = {:.1} s); sustained {:.1}/s = {:.1} % of the budget\n\
             the bot's replies during it: {} (unanswered {}), p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            self.recipients,
            if self.lane.paid { "paid" } else { "standard" },
            budget,
            self.lane.bot_rate,
            self.delivered,
            self.twice,
            self.over_limit,
            self.early,
            self.seconds,
            self.recipients as f64 / budget,
            self.sustained,
            self.sustained * 100.0 / budget,
            replies.count,
            self.unanswered,
            replies.p50,
            replies.p99,
            replies.max,
        )
    }
}

/// Runs the phase with `recipients` recipients in `run_dir`.
pub async fn broadcast(
    tgq: &Path,
    run_dir: &Path,
    recipients: u64,
    lane: Lane,
) -> anyhow::Result<BroadcastFigures> {
    let fake = FakeTelegram::start_with(FakeConfig {
        limits: Some(Limits {
            global_per_sec: lane.bot_rate,
            paid_per_sec: lane.paid_rate,
            ..Limits::default()
        }),
        ..FakeConfig::default()
    })
    .await?;
    let data_dir = run_dir.join("broadcast");
    let env = [
        ("TELEGRAM_API_URL", fake.url()),
        ("TELEGRAM_BOT_TOKEN", fake.token().to_owned()),
        ("TGQ_RATE_PER_SECOND", lane.bot_rate.to_string()),
        ("TGQ_RATE_PER_CHAT_PER_SECOND", "1".to_owned()),
        ("TGQ_RATE_PER_GROUP_PER_MINUTE", "20".to_owned()),
    ];
    let server = Server::start(tgq, &data_dir, &run_dir.join("broadcast.log"), &env).await?;
    let list = run_dir.join("recipients.txt");
    let text: String = (1..=recipients).map(|chat| format!("{chat}\n")).collect();
    std::fs::write(&list, text)?;
    let mut start = std::process::Command::new(tgq);
    start
        .args(["broadcast", "start", "--text", "news", "--to"])
        .arg(&list)
        .arg("--data-dir")
        .arg(&data_dir);
    if lane.paid {
        start.args(["--paid", "--paid-rate", &lane.paid_rate.to_string()]);
    }
    let started = start.output().context("running tgq broadcast start")?;
    if !started.status.success() {
        bail!(
            "tgq broadcast start failed: {}",
            String::from_utf8_lossy(&started.stderr)
        );
    }
    let began = Instant::now();

    // The bot's users meanwhile: each posts one message and waits for its reply at the fake.
    let mut sent_at: HashMap<i64, Instant> = HashMap::new();
    let mut next_chat = INTERACTIVE_CHATS;
    let client = reqwest::Client::new();
    let mut last_post = Instant::now() - INTERACTIVE_EVERY;
    loop {
        let status = server.admin("/admin/broadcasts/status?id=1").await?;
        match status["job"]["state"]["state"].as_str() {
            Some("done") => break,
            Some("running") => {}
            other => bail!("the broadcast is {other:?}: {status}"),
        }
        if began.elapsed() > Duration::from_secs(recipients / 10 + 600) {
            bail!("the broadcast did not end in time: {status}");
        }
        if last_post.elapsed() >= INTERACTIVE_EVERY {
            last_post = Instant::now();
            next_chat += 1;
            let body = format!(
                r#"{{"update_id":{next_chat},"message":{{"message_id":1,"date":0,"chat":{{"id":{next_chat},"type":"private","first_name":"U"}},"from":{{"id":{next_chat},"is_bot":false,"first_name":"U"}},"text":"hi"}}}}"#
            );
            sent_at.insert(next_chat, Instant::now());
            let answer = client
                .post(server.webhook_url())
                .header("x-telegram-bot-api-secret-token", server.secret())
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await?;
            if !answer.status().is_success() {
                bail!("/webhook answered {}", answer.status());
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The replies to the last users are let in.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seconds = began.elapsed().as_secs_f64();
    server.stop().await?;

    let calls = fake.delivered();
    let mut per_chat: HashMap<i64, u64> = HashMap::new();
    let mut times = Vec::new();
    let mut reply_ms = Vec::new();
    let posted = sent_at;
    for call in &calls {
        let Some(chat) = call.chat_id else { continue };
        if chat >= INTERACTIVE_CHATS {
            if let Some(at) = posted.get(&chat) {
                reply_ms.push(call.at.duration_since(*at).as_secs_f64() * 1e3);
            }
            continue;
        }
        *per_chat.entry(chat).or_default() += 1;
        times.push(call.at);
    }
    times.sort();
    let sustained = match (times.first(), times.last()) {
        (Some(first), Some(last)) if times.len() > 1 => {
            (times.len() - 1) as f64 / last.duration_since(*first).as_secs_f64()
        }
        _ => 0.0,
    };
    let violations = fake.violations();
    Ok(BroadcastFigures {
        lane,
        recipients,
        delivered: per_chat.len() as u64,
        twice: per_chat.values().filter(|n| **n > 1).count() as u64,
        over_limit: violations.over_limit,
        early: violations.early_sends,
        seconds,
        sustained,
        unanswered: posted.len() as u64 - reply_ms.len() as u64,
        reply_ms,
    })
}
