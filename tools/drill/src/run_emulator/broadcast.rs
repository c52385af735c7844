//! Scenario 19, `broadcast` (emulator only), the stack's broadcast benchmark: one job of
//! `--recipients` (10,000) recipients run by the real worker from the broadcasts queue
//! (docs/design/broadcast-runs.md), the fake Bot API enforcing Telegram's limits, while users keep
//! writing to the bot through the webhook and the updates queue. Counted from the fake: every
//! recipient exactly once, nothing over the limits; the job's sustained rate against its lane's
//! (the bot's 30/s less the 20 % reserve), and the bot's reply latency during it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use aws_lambda_events::event::sqs::SqsBatchResponse;
use serde_json::json;
use tgq_aws::{DynamoBroadcasts, SqsQueue};
use tgq_core::broadcast::{
    self, Audience, BroadcastSpec, BroadcastStore as _, QueuedBroadcasts, DEFAULT_RESERVE_PERCENT,
};
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::ids::BotId;
use tgq_e2e::broadcasts::BroadcastParts;
use tgq_e2e::functions::WORKER;
use tgq_fake_telegram::FakeTelegram;

use super::{Emulated, Run, BOT_ID};
use crate::plan::Plan;
use crate::scenarios::{start_fake, Pipeline};
use crate::tally::{Check, Row};

/// The first recipient's chat id, apart from the users' chats.
const FIRST_RECIPIENT: i64 = 5_000_000;
/// The chats of the users writing meanwhile, and how often one writes.
const CHATS: i64 = 20;
const INTERACTIVE_EVERY: Duration = Duration::from_millis(500);
/// The bot's rate (Telegram's 30/s); the job's lane is this less the reserve.
const BOT_RATE: f64 = 30.0;
/// The least sustained share of the lane's rate.
const LEAST_SHARE: f64 = 0.95;
/// How long the job may take before what is missing counts as lost: twice its time at its rate.
fn patience(recipients: u64) -> Duration {
    Duration::from_secs_f64(recipients as f64 / lane_rate() * 2.0 + 120.0)
}

fn lane_rate() -> f64 {
    BOT_RATE * (1.0 - f64::from(DEFAULT_RESERVE_PERCENT) / 100.0)
}

/// Runs the scenario.
pub async fn run(on: &Emulated<'_>) -> anyhow::Result<Row> {
    let (s, o, em) = (on.scenario, on.options, on.em);
    let recipients = o.recipients;
    let fake = start_fake(true).await?;
    let plan = Plan::ordinary(o.updates, CHATS, 1, o.seed);
    let (mut run, mut parts, store) = with_broadcasts(on, plan.clone(), fake, &[]).await?;
    let chats: Vec<i64> = (0..recipients as i64)
        .map(|i| FIRST_RECIPIENT + i)
        .collect();
    let spec = BroadcastSpec::standard(
        BotId::new(BOT_ID)?,
        "sendMessage",
        json!({"text": "news"}),
        "cli",
    );
    let started = Instant::now();
    let id = broadcast::start(
        &store,
        &spec,
        &Audience::Chats {
            chats: chats.clone(),
        },
        SystemClock.now(),
    )
    .await?
    .job()
    .id
    .clone();
    let stored = started.elapsed();

    // Users write meanwhile; the broadcasts queue's mapping runs the job's steps.
    let posting = {
        let (poster, plan) = (run.outside.poster.clone(), plan.clone());
        tokio::spawn(async move { poster.send_paced(&plan, INTERACTIVE_EVERY).await })
    };
    let invoke_url = em.lambda.lock().await.invoke_url(WORKER);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(90))
        .build()?;
    let limit = patience(recipients);
    let job = loop {
        let job = store.job(&id).await?.context("the job is gone")?;
        if job.state.is_final() || started.elapsed() > limit {
            break job;
        }
        let invoke = |event| {
            let (http, url) = (http.clone(), invoke_url.clone());
            async move {
                let answer = http.post(&url).json(&event).send().await?;
                Ok::<SqsBatchResponse, anyhow::Error>(answer.json().await?)
            }
        };
        if !parts
            .step_with(&run.stack, invoke, std::future::pending())
            .await?
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let took = started.elapsed();
    posting.await?;
    let drain = run.drain(tokio::spawn(async {})).await?;

    let calls = run.outside.fake.calls();
    let violations = run.outside.fake.violations();
    let mut per_chat: HashMap<i64, u64> = HashMap::new();
    let mut first_last: Option<(Instant, Instant)> = None;
    for call in calls
        .iter()
        .filter(|c| c.method == "sendMessage" && c.is_delivered())
    {
        let Some(chat) = call.params["chat_id"].as_i64() else {
            continue;
        };
        if chat < FIRST_RECIPIENT {
            continue;
        }
        *per_chat.entry(chat).or_default() += 1;
        first_last = Some(match first_last {
            None => (call.at, call.at),
            Some((first, last)) => (first.min(call.at), last.max(call.at)),
        });
    }
    let once = per_chat.values().filter(|n| **n == 1).count() as u64;
    let twice = per_chat.values().filter(|n| **n > 1).count() as u64;
    let sustained = match first_last {
        Some((first, last)) if per_chat.len() > 1 => {
            (per_chat.len() - 1) as f64 / last.saturating_duration_since(first).as_secs_f64()
        }
        _ => 0.0,
    };
    let posted = run.outside.poster.posted();
    let latencies = crate::two_bots::latencies(&plan, &posted, &calls, run.outside.fake.token());
    let (p50, p99) = (
        crate::two_bots::percentile(&latencies, 0.5),
        crate::two_bots::percentile(&latencies, 0.99),
    );
    let c = job.counts;
    // What the worker asked of DynamoDB and SQS, replies and mapping included.
    let actions = run.worker_proxy.actions();
    let dynamodb: u64 = actions
        .iter()
        .filter(|(action, _)| action.starts_with("dynamodb:"))
        .map(|(_, n)| n)
        .sum();
    let requests = actions
        .iter()
        .map(|(action, n)| format!("{action} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let inside = run.inside().await?;
    let tally = inside.count(&plan, &posted, &calls, &violations);
    let mut checks = tally.base_checks();
    checks.extend([
        Check::new(
            format!("{recipients} recipients sent the message exactly once"),
            once == recipients && twice == 0 && c.sent == recipients,
            format!(
                "{once} once, {twice} more than once, {} never; the job {} with sent {}, gone {}, \
                 failed {}, uncertain {} ({} steps, {} held)",
                recipients.saturating_sub(once + twice),
                job.state.as_str(),
                c.sent,
                c.gone,
                c.failed,
                c.uncertain,
                parts.steps,
                parts.held
            ),
        ),
        Check::new(
            "0 sends over Telegram's limits, 0 inside a wait",
            violations.over_limit == 0 && violations.early_sends == 0,
            format!(
                "{} over 30/s for the bot, 1/s per chat or 20/min per group; {} inside a wait",
                violations.over_limit, violations.early_sends
            ),
        ),
        Check::new(
            format!(
                "sustained at least {:.0} % of the lane's {:.0}/s",
                LEAST_SHARE * 100.0,
                lane_rate()
            ),
            sustained >= lane_rate() * LEAST_SHARE,
            format!(
                "{sustained:.1}/s = {:.1} % of {:.0}/s; {:.1} s from the start to the job's end \
                 (recipients / rate = {:.1} s; storing the job took {:.1} s); the worker's \
                 AWS requests, the replies' included: {:.1} DynamoDB requests a recipient, \
                 {requests}",
                sustained / lane_rate() * 100.0,
                lane_rate(),
                took.as_secs_f64(),
                recipients as f64 / lane_rate(),
                stored.as_secs_f64(),
                dynamodb as f64 / recipients as f64
            ),
        ),
        Check::new(
            "the bot's replies during it",
            latencies.len() == plan.updates.len(),
            format!(
                "{} of {} answered; p50 {p50:.0} ms, p99 {p99:.0} ms from the webhook's 200 to the \
                 reply",
                latencies.len(),
                plan.updates.len()
            ),
        ),
    ]);
    run.finish_with(s, &tally, &inside.reported, drain, checks)
        .await
}

/// The scenario's pipeline with a broadcasts queue: the worker given it, a container for the
/// job's steps besides those of the updates' batches (Lambda runs each invocation in a container
/// of its own), and the job store `tgq broadcast --stack` uses, which queues a job's steps there.
/// `env` is more of the worker's settings.
pub(super) async fn with_broadcasts<'a>(
    on: &Emulated<'a>,
    plan: Plan,
    fake: FakeTelegram,
    env: &[(&str, &str)],
) -> anyhow::Result<(Run<'a>, BroadcastParts, QueuedBroadcasts)> {
    let (s, em) = (on.scenario, on.em);
    let millis = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let parts = BroadcastParts::create_named(
        &em.sdk,
        &format!(
            "tgq-drill-{:02}-{}-{millis}-broadcasts.fifo",
            s.number,
            std::process::id()
        ),
    )
    .await?;
    let (url, arn) = (parts.queue_url.clone(), parts.queue_arn.clone());
    let mut vars = vec![
        ("TGQ_BROADCASTS_QUEUE_URL", url.as_str()),
        ("TGQ_BROADCASTS_QUEUE_ARN", arn.as_str()),
    ];
    vars.extend_from_slice(env);
    let run = on
        .start_with(plan, fake, &vars, super::esm::CONCURRENCY)
        .await?;
    for _ in 0..super::esm::CONCURRENCY {
        run.new_worker().await?;
    }
    let store = QueuedBroadcasts::new(
        Arc::new(DynamoBroadcasts::new(
            aws_sdk_dynamodb::Client::new(&em.sdk),
            run.stack.table.clone(),
        )),
        Arc::new(SqsQueue::new(aws_sdk_sqs::Client::new(&em.sdk), url)),
    );
    Ok((run, parts, store))
}
