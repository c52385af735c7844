//! The emulator's pipeline for the shared scenarios, and the scenarios only it has (AWS faults,
//! stale containers, two bots): the real `webhook` and `worker` binaries as runtime
//! processes under `cargo lambda watch`, moto behind a fault-injecting proxy per function, the
//! drill's event source mapping, and the fake Bot API — counted from the outside as on local mode.

mod broadcast;
mod broadcast_faults;
mod esm;
mod lambda;
mod one_budget;
mod payments;
mod stack;
mod two_bots;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::bail;
use tgq_e2e::functions::{WEBHOOK, WORKER};
use tgq_fake_telegram::FakeTelegram;
use tokio::sync::Mutex;

use crate::plan::Plan;
use crate::scenario::Scenario;
use crate::scenarios::{
    self, chats, first_id, no_unexpected_dead, stale_checks, start_fake, Inside, Launcher, Outside,
    Pipeline,
};
use crate::tally::{Check, Reported, Row, Tally};
use crate::{Options, SECRET};
use lambda::Lambda;
use stack::DrillStack;
use tgq_e2e::esm::RunningMapping;
use tgq_e2e::proxy::{AwsFault, Proxy, Service};

/// The bot id of the drilled functions.
const BOT_ID: &str = "drill";
/// The queue's visibility timeout in the drill's mapping: the invocation timeout plus 10 s, as in
/// local mode (the template's 6 × 60 s would make every crash scenario wait six minutes; the order
/// of events is the same).
const VISIBILITY: Duration = Duration::from_secs(70);
/// How long the mapping waits for an invocation: the worker's timeout plus the runtime's margin.
const INVOCATION_TIMEOUT: Duration = Duration::from_secs(65);
/// How long a scenario may take to drain before what is missing counts as lost.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// What stays up across scenarios: `cargo lambda watch` and the AWS SDK configuration.
pub struct Emulator {
    lambda: Mutex<Lambda>,
    sdk: aws_config::SdkConfig,
    endpoint: String,
}

impl Emulator {
    /// Checks for moto and cargo-lambda, builds the functions and starts `cargo lambda watch`.
    pub async fn start(options: &Options) -> anyhow::Result<Emulator> {
        let endpoint = match std::env::var("AWS_ENDPOINT_URL") {
            Ok(url) if !url.is_empty() => url,
            _ => bail!(
                "AWS_ENDPOINT_URL is not set: the emulator target needs moto. Start \
                 `.venv/bin/python scripts/moto_server.py -H 127.0.0.1 -p 5099` and export \
                 AWS_ENDPOINT_URL=http://127.0.0.1:5099 AWS_ACCESS_KEY_ID=testing \
                 AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1"
            ),
        };
        let logs = options.work.join("emulator-logs");
        std::fs::create_dir_all(&logs)?;
        let lambda = Lambda::start(&options.exe, options.functions.as_deref(), &logs).await?;
        Ok(Emulator {
            lambda: Mutex::new(lambda),
            sdk: tgq_e2e::emulator::sdk_config().await,
            endpoint,
        })
    }
}

struct Run<'a> {
    em: &'a Emulator,
    outside: Outside,
    stack: DrillStack,
    sqs: aws_sdk_sqs::Client,
    webhook_proxy: Proxy,
    worker_proxy: Proxy,
    worker_vars: BTreeMap<String, String>,
    worker_log: String,
    esm: Option<RunningMapping>,
    /// The webhook's function URL (ending with `/`).
    webhook_url: String,
}

impl<'a> Emulated<'a> {
    /// The scenario's pipeline with a fake Bot API the scenario set up, and `concurrency`
    /// invocations of the worker at once.
    async fn start_with(
        &self,
        plan: Plan,
        fake: FakeTelegram,
        env: &[(&str, &str)],
        concurrency: usize,
    ) -> anyhow::Result<Run<'a>> {
        let (s, o, em) = (self.scenario, self.options, self.em);
        let stack = DrillStack::create(&em.sdk, &format!("{:02}", s.number)).await?;
        let sqs = aws_sdk_sqs::Client::new(&em.sdk);
        let webhook_proxy = Proxy::start(&em.endpoint).await?;
        let worker_proxy = Proxy::start(&em.endpoint).await?;
        let mut vars: BTreeMap<String, String> = [
            ("TGQ_BOT_ID", BOT_ID.to_owned()),
            ("TGQ_WEBHOOK_SECRET", SECRET.to_owned()),
            ("TGQ_TABLE", stack.table.clone()),
            ("TGQ_QUEUE_URL", stack.queue_url.clone()),
            ("TGQ_DLQ_URL", stack.dlq_url.clone()),
            ("TGQ_HANDLER", "echo".to_owned()),
            ("TELEGRAM_BOT_TOKEN", fake.token().to_owned()),
            ("TELEGRAM_API_URL", fake.url()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        vars.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let mut webhook_vars = vars.clone();
        webhook_vars.insert("AWS_ENDPOINT_URL".into(), webhook_proxy.url());
        let mut worker_vars = vars;
        worker_vars.insert("AWS_ENDPOINT_URL".into(), worker_proxy.url());
        let worker_log = format!("{:02}-{}-worker", s.number, s.name);
        let (webhook_url, invoke_url) = {
            let mut lambda = em.lambda.lock().await;
            lambda.kill_all(WEBHOOK);
            lambda.kill_all(WORKER);
            lambda.spawn(
                WEBHOOK,
                &webhook_vars,
                &format!("{:02}-{}-webhook", s.number, s.name),
            )?;
            lambda.spawn(WORKER, &worker_vars, &worker_log)?;
            lambda.wait_answering(WEBHOOK).await?;
            lambda.wait_answering(WORKER).await?;
            (lambda.function_url(WEBHOOK), lambda.invoke_url(WORKER))
        };
        let esm = esm::start(
            sqs.clone(),
            stack.clone(),
            invoke_url,
            VISIBILITY,
            INVOCATION_TIMEOUT,
            concurrency,
            webhook_proxy.sends(),
        );
        let outside = Outside::new(s, o, Run::TARGET, plan, fake, webhook_url.clone());
        Ok(Run {
            em,
            outside,
            stack,
            sqs,
            webhook_proxy,
            worker_proxy,
            worker_vars,
            worker_log,
            esm: Some(esm),
            webhook_url,
        })
    }
}

impl Run<'_> {
    /// Waits up to `limit` until one of `updates` is `PROCESSING` (a worker holds its lease and runs
    /// its handler); returns which, or `None` when none was.
    async fn wait_processing(
        &self,
        updates: &[i64],
        limit: Duration,
    ) -> anyhow::Result<Option<i64>> {
        use tgq_core::clock::Clock as _;
        use tgq_core::ports::RecordReader as _;
        let store = tgq_aws::DynamoStore::new(
            aws_sdk_dynamodb::Client::new(&self.em.sdk),
            self.stack.table.clone(),
        );
        let bot = tgq_core::ids::BotId::new(BOT_ID)?;
        let started = Instant::now();
        while started.elapsed() < limit {
            for &id in updates {
                let key = tgq_core::ids::RecordKey::new(bot.clone(), tgq_core::ids::UpdateId(id));
                let record = store.get(&key, tgq_core::clock::SystemClock.now()).await?;
                if record.is_some_and(|r| r.status == tgq_core::record::Status::Processing) {
                    return Ok(Some(id));
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(None)
    }

    async fn drain(&self, sending: tokio::task::JoinHandle<()>) -> anyhow::Result<Duration> {
        sending.await?;
        let started = Instant::now();
        while started.elapsed() < DRAIN_LIMIT {
            let depth = tgq_e2e::emulator::queue_depth(&self.sqs, &self.stack.queue_url).await?;
            if depth.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(started.elapsed())
    }

    /// A new worker process (a new container), with the scenario's configuration.
    async fn new_worker(&self) -> anyhow::Result<u32> {
        let mut lambda = self.em.lambda.lock().await;
        lambda.spawn(WORKER, &self.worker_vars, &self.worker_log)
    }

    async fn all_workers(&self) -> Vec<u32> {
        self.em.lambda.lock().await.all(WORKER)
    }

    async fn newest_worker(&self) -> anyhow::Result<u32> {
        let lambda = self.em.lambda.lock().await;
        lambda
            .newest(WORKER)
            .ok_or_else(|| anyhow::anyhow!("no worker runs"))
    }

    async fn kill_worker(&self, pid: u32) {
        self.em.lambda.lock().await.kill(WORKER, pid);
    }

    /// What the worker itself reports: fenced writes and uncertain sends, counted from its log.
    async fn reported(&self) -> Reported {
        let log = self.em.lambda.lock().await.log_text(&self.worker_log);
        let fenced = log
            .lines()
            .filter(|l| l.to_lowercase().contains("fenced"))
            .count() as u64;
        // The worker's embedded-metric-format lines: each flush carries the invocation's counters.
        let uncertain: u64 = log
            .lines()
            .filter(|l| l.contains("\"_aws\""))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v[tgq_core::metrics::UNCERTAIN_SEND].as_f64())
            .map(|n| n as u64)
            .sum();
        Reported {
            fenced: (fenced > 0).then_some(fenced),
            uncertain: (uncertain > 0).then_some(uncertain),
            resent: Reported::resent_in_log(&log),
            resent_count: Some(Reported::resent_lines(&log)),
        }
    }

    /// What the mapping saw of the emulator and of the worker, for the order check: taken before
    /// the mapping stops.
    fn mapping_note(&self) -> String {
        let (breaches, failed_invocations) = self.esm.as_ref().map_or((0, 0), |esm| {
            let mapping = esm.mapping();
            (
                mapping.log().breaches().len(),
                mapping.stats().failed_invocations,
            )
        });
        format!(
            "moto handed out {breaches} deliveries out of FIFO order; \
             {failed_invocations} invocations failed or timed out"
        )
    }

    /// Stops the event source mapping: nothing more is delivered to the worker.
    fn stop_mapping(&mut self) {
        if let Some(esm) = self.esm.take() {
            esm.stop();
        }
    }

    /// Ends the run with checks the scenario counted itself: the functions stopped, the fake shut
    /// down, the row.
    async fn finish_with(
        self,
        s: &Scenario,
        tally: &Tally,
        reported: &Reported,
        drain: Duration,
        checks: Vec<Check>,
    ) -> anyhow::Result<Row> {
        let row = tally.row(s.number, s.name, Self::TARGET, reported, drain, checks);
        self.stop().await;
        Ok(row)
    }
}

/// Starts the emulator's pipeline for one scenario.
struct Emulated<'a> {
    scenario: &'a Scenario,
    options: &'a Options,
    em: &'a Emulator,
}

impl<'a> Launcher for Emulated<'a> {
    type Run = Run<'a>;

    async fn start(
        &self,
        plan: Plan,
        limits: bool,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Run<'a>> {
        let fake = start_fake(limits).await?;
        self.start_with(plan, fake, env, esm::CONCURRENCY).await
    }
}

impl Pipeline for Run<'_> {
    const TARGET: &'static str = "emulator";

    fn outside(&self) -> &Outside {
        &self.outside
    }

    async fn drain(&self, sending: tokio::task::JoinHandle<()>) -> anyhow::Result<Duration> {
        Run::drain(self, sending).await
    }

    /// The newest worker process killed, as Lambda ends a container whose invocation ran past its
    /// timeout, and a new one started for the next invocations.
    async fn crash_worker(&mut self) -> anyhow::Result<()> {
        let pid = self.newest_worker().await?;
        self.kill_worker(pid).await;
        self.new_worker().await?;
        Ok(())
    }

    fn redrive_note(&self) -> String {
        format!(
            " after {} receives (template.yaml)",
            self.stack.max_receive_count
        )
    }

    /// The dead letters and what the worker reports, once the mapping stopped; what the mapping
    /// saw, for the order check.
    async fn inside(&mut self) -> anyhow::Result<Inside> {
        let order_note = Some(self.mapping_note());
        self.stop_mapping();
        Ok(Inside {
            letters: self.stack.dead_letters(&self.sqs).await?,
            reported: self.reported().await,
            order_note,
        })
    }

    async fn stop(mut self) {
        self.stop_mapping();
        self.outside.progress.done();
        {
            let mut lambda = self.em.lambda.lock().await;
            lambda.kill_all(WEBHOOK);
            lambda.kill_all(WORKER);
        }
        self.outside.fake.clone().shutdown().await;
    }
}

/// Runs one scenario on the emulator.
pub async fn run(s: &Scenario, o: &Options, em: &Emulator) -> anyhow::Result<Row> {
    let plan = Plan::ordinary(o.updates, chats(o), first_id(s), o.seed);
    let emulated = Emulated {
        scenario: s,
        options: o,
        em,
    };
    if let Some(row) = scenarios::run_shared(s, &emulated, plan.clone()).await {
        return row;
    }
    match s.number {
        3 => {
            aws_fault(
                &emulated,
                plan,
                Side::Webhook,
                &[
                    (Service::Dynamo, AwsFault::Unavailable),
                    (Service::Sqs, AwsFault::Unavailable),
                ],
                Duration::from_secs(10),
            )
            .await
        }
        4 => misconfigured(&emulated, plan).await,
        5 => {
            aws_fault(
                &emulated,
                plan,
                Side::Worker,
                &[(Service::Dynamo, AwsFault::Throttled)],
                Duration::from_secs(120),
            )
            .await
        }
        12 => stale_worker(&emulated, plan).await,
        17 => two_bots::run(&emulated).await,
        18 => one_budget::run(&emulated).await,
        19 => broadcast::run(&emulated).await,
        20 => broadcast_faults::run(&emulated).await,
        21 => payments::run(&emulated).await,
        n => bail!("scenario {n} does not apply to the emulator"),
    }
}

/// Which function's AWS calls a fault hits.
#[derive(Clone, Copy)]
enum Side {
    Webhook,
    Worker,
}

async fn aws_fault(
    on: &Emulated<'_>,
    plan: Plan,
    side: Side,
    faults: &[(Service, AwsFault)],
    window: Duration,
) -> anyhow::Result<Row> {
    let run = on.start(plan, false, &[]).await?;
    let sending = run.send(1);
    run.acknowledged(run.outside.plan.updates.len() / 4).await;
    let proxy = match side {
        Side::Webhook => &run.webhook_proxy,
        Side::Worker => &run.worker_proxy,
    };
    run.outside.poster.mark(true);
    for (service, fault) in faults {
        proxy.set(*service, Some(*fault));
    }
    tokio::time::sleep(window).await;
    for (service, _) in faults {
        proxy.set(*service, None);
    }
    run.outside.poster.mark(false);
    let refused = proxy.refused();
    let drain = run.drain(sending).await?;
    run.finish(on.scenario, drain, move |t, _, posted| {
        let mut checks = vec![
            no_unexpected_dead(t),
            Check::new(
                "the fault was met",
                refused.0 + refused.1 > 0,
                format!(
                    "AWS calls refused: {} DynamoDB, {} SQS",
                    refused.0, refused.1
                ),
            ),
        ];
        if let Side::Webhook = side {
            checks.push(Check::new(
                "the webhook answered 5xx while it could not store (Telegram retried)",
                posted.during_fault.keys().any(|s| *s >= 500),
                format!("answers during the fault: {:?}", posted.during_fault),
            ));
        }
        checks
    })
    .await
}

async fn misconfigured(on: &Emulated<'_>, plan: Plan) -> anyhow::Result<Row> {
    let run = on.start(plan, false, &[]).await?;
    let sending = run.send(1);
    run.acknowledged(run.outside.plan.updates.len() / 4).await;
    // A wrong TGQ_TABLE for 30 s, then an IAM edit that denies the table for 30 s. The answers
    // counted as "during the fault" are those of requests made wholly inside it: marked a moment
    // after the fault is set (a request already past its put answers 200, rightly), unmarked before
    // it is cleared.
    run.webhook_proxy
        .set(Service::Dynamo, Some(AwsFault::NotFound));
    tokio::time::sleep(Duration::from_secs(1)).await;
    run.outside.poster.mark(true);
    tokio::time::sleep(Duration::from_secs(29)).await;
    run.webhook_proxy
        .set(Service::Dynamo, Some(AwsFault::AccessDenied));
    tokio::time::sleep(Duration::from_secs(30)).await;
    run.outside.poster.mark(false);
    run.webhook_proxy.set(Service::Dynamo, None);
    let drain = run.drain(sending).await?;
    run.finish(on.scenario, drain, |t, _, posted| {
        let answers: u64 = posted.during_fault.values().sum();
        let only_503 = posted.during_fault.keys().all(|s| *s == 503);
        vec![
            no_unexpected_dead(t),
            Check::new(
                "every answer 503 while misconfigured",
                answers > 0 && only_503,
                format!("answers during the fault: {:?}", posted.during_fault),
            ),
        ]
    })
    .await
}

async fn stale_worker(on: &Emulated<'_>, mut plan: Plan) -> anyhow::Result<Row> {
    let slow: Vec<i64> = plan.chats().into_iter().take(4).collect();
    for &chat in &slow {
        plan.edit_chat(chat, |k, p| {
            if k == 1 {
                p.text = format!("/slow 5000 {}", p.text);
            }
        });
    }
    let run = on.start(plan, false, &[]).await?;
    let sending = run.send(1);
    run.acknowledged(run.outside.plan.updates.len() / 4).await;
    // Freeze while a slow update runs: its record is PROCESSING under a worker's lease, and its
    // handler has 5 s to go. Every worker container is frozen, so whichever runs it is caught in
    // the middle. (A reply to the chat's first update says only that the slow one is next: it may
    // still wait in the queue, and then nothing is caught.)
    let slow_updates: Vec<i64> = slow
        .iter()
        .filter_map(|chat| {
            let mine = run.outside.plan.updates.iter().filter(|p| p.chat == *chat);
            mine.clone().nth(1).map(|p| p.update_id)
        })
        .collect();
    let running = run
        .wait_processing(&slow_updates, Duration::from_secs(60))
        .await?;
    let frozen = run.all_workers().await;
    for pid in &frozen {
        crate::local::signal(*pid, libc::SIGSTOP)?;
    }
    // A new container takes the next invocations; the frozen ones' batches come back after their
    // visibility, and their leases have run out by then.
    run.new_worker().await?;
    tokio::time::sleep(Duration::from_secs(100)).await;
    for pid in &frozen {
        crate::local::signal(*pid, libc::SIGCONT)?;
    }
    let drain = run.drain(sending).await?;
    run.finish(on.scenario, drain, move |t, r, _| {
        let mut checks = stale_checks(t, r);
        checks.push(Check::new(
            "a worker was frozen in the middle of a run",
            running.is_some(),
            running.map_or("no slow update was PROCESSING within 60 s".into(), |id| {
                format!("update {id} was PROCESSING when every worker was frozen")
            }),
        ));
        checks
    })
    .await
}
