//! `tgq-warm`: the two Lambda handlers' use cases, warm, end to end against moto — the webhook's
//! (`Webhook::admit` + `receive`: conditional put, send to the FIFO queue) and the worker's
//! (`Worker::process_batch` on the message the queue gave: claim, the reply's intent, the reply to a
//! fake Bot API, the settle) — on the real ports (`tgq_aws::DynamoStore`, `SqsQueue`,
//! `tgq_telegram::HttpBotApi`) with the functions' own SDK configuration. One update at a time, so
//! nothing queues inside tgq; per update it prints the total time, the time waiting on DynamoDB,
//! SQS and Telegram (an SDK interceptor and a Bot API decorator, `waits`), and the difference: tgq's
//! own time. `docs/PERFORMANCE.md` ("The handlers, warm") has the figures and the command.

mod moto;
#[path = "../../bench/src/stats.rs"]
mod stats;
mod waits;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use clap::Parser;
use secrecy::SecretString;
use tgq_aws::{DynamoStore, SqsQueue};
use tgq_core::bots::OneBot;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::echo::EchoBot;
use tgq_core::ids::BotId;
use tgq_core::ingest::{Ingest, Ingested, RequestHead, Webhook, WebhookPorts, WebhookSettings};
use tgq_core::ports::QueueConsumer;
use tgq_core::telegram::BotApi;
use tgq_core::worker::{Worker, WorkerPorts, WorkerSettings};
use tgq_e2e::emulator::Stack;
use tgq_e2e::telegram::text_update;
use tgq_fake_telegram::FakeTelegram;

use crate::stats::Summary;
use crate::waits::{Service, Timed, TimedApi, Waited, Waits};

const SECRET: &str = "tgq-warm-secret";

/// Times the webhook's and the worker's use cases against moto and a fake Bot API, tgq's own time
/// apart from the waits. Run it with `cargo run --release -p tgq-warm`.
#[derive(Debug, Parser)]
#[command(name = "tgq-warm")]
struct Args {
    /// Measured updates.
    #[arg(long, default_value_t = 500)]
    updates: usize,
    /// Updates handled first and not measured (connections opened, code paths warm).
    #[arg(long, default_value_t = 20)]
    warmup: usize,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    if cfg!(debug_assertions) {
        eprintln!(
            "warning: a debug build measures nothing useful; use `cargo run --release -p tgq-warm`"
        );
    }
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One update's figures in one use case.
struct Sample {
    total: Duration,
    waited: Waited,
}

impl Sample {
    fn own(&self) -> Duration {
        self.total.saturating_sub(self.waited.any)
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    if args.updates == 0 {
        bail!("--updates must be at least 1");
    }
    let emulator = moto::Emulator::start(&workspace()).await?;
    let telegram = FakeTelegram::start().await?;
    let harness = tgq_e2e::emulator::sdk_config().await;
    let stack = Stack::create(&harness, "warm")
        .await
        .with_context(|| format!("creating a table and queues on {}", emulator.endpoint))?;

    // The functions' own SDK configuration, each client timed.
    let sdk = tgq_aws::aws_config().await;
    let waits = Arc::new(Waits::default());
    let timed = |service| Timed {
        service,
        waits: waits.clone(),
    };
    let dynamo = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .interceptor(timed(Service::Dynamo))
            .build(),
    );
    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&sdk)
            .interceptor(timed(Service::Sqs))
            .build(),
    );
    let store = Arc::new(DynamoStore::new(dynamo, stack.table.clone()));
    let queue = Arc::new(SqsQueue::new(sqs.clone(), stack.queue_url.clone()));
    let dlq = Arc::new(SqsQueue::new(sqs, stack.dlq_url.clone()));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);

    let bot_id = BotId::new("warm")?;
    let webhook = Webhook::new(
        WebhookSettings {
            bot_id,
            secret: SecretString::from(SECRET),
            max_body_bytes: tgq_core::defaults::MAX_BODY_BYTES,
            record_ttl: tgq_core::defaults::RECORD_TTL,
            ack_callbacks: false,
        },
        WebhookPorts {
            ingest: Ingest::PutThenSend {
                store: store.clone(),
                queue: queue.clone(),
            },
            dead: dlq.clone(),
            clock: clock.clone(),
        },
    );
    let api: Arc<dyn BotApi> = Arc::new(TimedApi {
        inner: Arc::new(tgq_telegram::HttpBotApi::new(
            &telegram.url(),
            SecretString::from(telegram.token()),
            tgq_core::defaults::TELEGRAM_TIMEOUT,
        )?),
        waits: waits.clone(),
    });
    let worker = Worker::new(
        WorkerSettings::default(),
        // Unpaced: Telegram's limits would pace the sends; what is measured is tgq, not those
        // limits.
        WorkerPorts {
            clock: clock.clone(),
            ..WorkerPorts::around(store, queue, dlq)
        },
        Arc::new(OneBot::new(api, Arc::new(EchoBot))),
    );
    // The event source mapping's part, untimed: its own client, as Lambda's pollers are not the
    // function.
    let mapping = SqsQueue::new(aws_sdk_sqs::Client::new(&harness), stack.queue_url.clone());

    let mut webhook_samples = Vec::with_capacity(args.updates);
    let mut worker_samples = Vec::with_capacity(args.updates);
    let all = args.warmup + args.updates;
    for n in 0..all {
        let id = i64::try_from(n)? + 1;
        let body = Bytes::from(text_update(id, 10_000 + id, id, "hello").to_string());

        waits.take()?;
        let started = Instant::now();
        let head = RequestHead {
            method: "POST",
            secret: Some(SECRET.as_bytes()),
            declared_length: Some(body.len()),
        };
        webhook
            .admit(&head)
            .map_err(|refused| anyhow::anyhow!("update {id} refused: {refused}"))?;
        let reply = webhook.receive(body).await;
        let total = started.elapsed();
        match &reply.outcome {
            Ok(Ingested::Queued) => {}
            other => bail!("update {id}: the webhook answered {other:?}, not queued"),
        }
        let webhook_sample = Sample {
            total,
            waited: waits.take()?,
        };

        let records = receive_one(&mapping).await?;
        waits.take()?;
        let started = Instant::now();
        let deadline = clock.now().plus(tgq_core::defaults::WORKER_TIMEOUT);
        let report = worker.process_batch(&records, deadline).await;
        let total = started.elapsed();
        if !report.failed_message_ids().is_empty() {
            bail!("update {id}: the worker failed it");
        }
        let worker_sample = Sample {
            total,
            waited: waits.take()?,
        };
        mapping.delete(&records[0].receipt).await?;
        if n >= args.warmup {
            webhook_samples.push(webhook_sample);
            worker_samples.push(worker_sample);
        }
    }
    let replies = telegram.delivered().len();
    if replies != all {
        bail!("the fake Bot API received {replies} replies for {all} updates");
    }
    println!(
        "{} updates, one at a time, after {} unmeasured; moto at {}; {replies} replies received\n",
        args.updates, args.warmup, emulator.endpoint
    );
    println!("{}", render("webhook", &webhook_samples));
    println!("{}", render("worker", &worker_samples));
    Ok(())
}

/// The message the webhook just sent, as the event source mapping would hand it to the worker.
async fn receive_one(mapping: &SqsQueue) -> anyhow::Result<Vec<tgq_core::ports::QueueRecord>> {
    for _ in 0..10 {
        let records = mapping
            .receive(1, Duration::from_secs(30), Duration::from_secs(1))
            .await?;
        if !records.is_empty() {
            return Ok(records);
        }
    }
    bail!("the queue gave no message for 10 s after the webhook's send")
}

/// One use case's table, in milliseconds.
fn render(name: &str, samples: &[Sample]) -> String {
    let summary = |values: Vec<Duration>| Summary::of_durations(&values);
    let calls = |service: Service| {
        samples
            .iter()
            .map(|s| f64::from(s.waited.of(service).1))
            .sum::<f64>()
            / samples.len() as f64
    };
    let mut rows = vec![(
        "total".to_owned(),
        summary(samples.iter().map(|s| s.total).collect()),
    )];
    for (label, service) in [
        ("DynamoDB", Service::Dynamo),
        ("SQS", Service::Sqs),
        ("Telegram", Service::Telegram),
    ] {
        if calls(service) > 0.0 {
            rows.push((
                format!("waiting on {label} ({:.2} calls)", calls(service)),
                summary(samples.iter().map(|s| s.waited.of(service).0).collect()),
            ));
        }
    }
    rows.push((
        "waiting, in all".to_owned(),
        summary(samples.iter().map(|s| s.waited.any).collect()),
    ));
    rows.push((
        "tgq's own time (total − waiting)".to_owned(),
        summary(samples.iter().map(Sample::own).collect()),
    ));
    let mut out = format!(
        "**{name}** ({} updates, ms)\n\n| per update | mean | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|\n",
        samples.len()
    );
    for (label, s) in rows {
        out.push_str(&format!(
            "| {label} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
            s.mean, s.p50, s.p90, s.p99, s.max
        ));
    }
    out
}
