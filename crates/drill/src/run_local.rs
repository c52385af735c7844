//! Each scenario against local mode: the real `tgq local` with the echo bot, sending to the fake Bot
//! API, broken the way the scenario says, counted from the outside.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use tgq_fake_telegram::{FakeConfig, FakeTelegram, Fault, Limits, Scope, Times};

use crate::disk::SmallDisk;
use crate::local::LocalTgq;
use crate::plan::{poison_bodies, Expect, Plan};
use crate::poster::Poster;
use crate::scenario::Scenario;
use crate::tally::{Check, Reported, Row, Tally};
use crate::{Options, SECRET};

/// How long a scenario may take to drain after its fault before what is missing counts as lost.
const DRAIN_LIMIT: Duration = Duration::from_secs(180);

/// One scenario's pipeline: the fake Bot API, `tgq local`, and Telegram posting to it.
struct Run {
    fake: FakeTelegram,
    tgq: LocalTgq,
    poster: Poster,
    plan: Plan,
    progress: crate::progress::ScenarioProgress,
}

/// The echo bot's settings for the drill: the product's defaults (attempt budget 8, backoff from
/// 2 s), so a fault costs what it costs in production.
fn base_env(fake: &FakeTelegram) -> Vec<(String, String)> {
    [
        ("TGQ_HANDLER", "echo".to_owned()),
        ("TGQ_WEBHOOK_SECRET", SECRET.to_owned()),
        ("TELEGRAM_BOT_TOKEN", fake.token().to_owned()),
        ("TELEGRAM_API_URL", fake.url()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

impl Run {
    async fn start(
        scenario: &Scenario,
        options: &Options,
        plan: Plan,
        limits: bool,
        env: &[(&str, &str)],
        data_dir: Option<PathBuf>,
    ) -> anyhow::Result<Run> {
        let fake = FakeTelegram::start_with(FakeConfig {
            limits: limits.then(Limits::default),
            ..FakeConfig::default()
        })
        .await?;
        let dir = options
            .work
            .join(format!("local-{:02}-{}", scenario.number, scenario.name));
        std::fs::create_dir_all(&dir)?;
        let data_dir = data_dir.unwrap_or_else(|| dir.join("data"));
        let mut envs = base_env(&fake);
        envs.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let mut tgq = LocalTgq::new(&options.exe, &data_dir, &dir.join("tgq-local.log"), envs);
        tgq.start().await?;
        let poster = Poster::new(tgq.url("/webhook"), SECRET, Duration::from_secs(300));
        let progress = options
            .progress
            .scenario(scenario, "local", &plan, &poster, &fake);
        Ok(Run {
            fake,
            tgq,
            poster,
            plan,
            progress,
        })
    }

    fn send(&self, copies: usize) -> tokio::task::JoinHandle<()> {
        let (poster, plan) = (self.poster.clone(), self.plan.clone());
        tokio::spawn(async move { poster.send(&plan, copies).await })
    }

    /// Waits until `n` updates were acknowledged.
    async fn acknowledged(&self, n: usize) {
        while self.poster.posted().acknowledged.len() < n {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits up to `limit` for every update to be acknowledged and the queue to drain without any
    /// help; when that does not happen, kills and restarts `tgq local` (what an operator would do) so
    /// that the drill can tell a pipeline that is stuck from one that lost updates. Returns whether
    /// it recovered by itself, and what happened.
    async fn recover(&mut self, limit: Duration) -> anyhow::Result<(bool, String)> {
        let started = Instant::now();
        let total = self.plan.updates.len();
        while started.elapsed() < limit {
            let acknowledged = self.poster.posted().acknowledged.len();
            if acknowledged == total && self.tgq.drained().await.unwrap_or(false) {
                return Ok((
                    true,
                    format!("drained {:.0?} after the fault", started.elapsed()),
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let readyz = self
            .tgq
            .readyz()
            .await
            .map_or_else(|e| e.to_string(), |(s, t)| format!("{s} {t}"));
        self.tgq.kill();
        self.tgq.start().await?;
        Ok((
            false,
            format!(
                "stuck {limit:?} after the fault (/readyz: {readyz}); killed and restarted, then it went on"
            ),
        ))
    }

    /// Waits until the queue is empty, after sending finished; returns how long it took.
    async fn drain(&self, sending: tokio::task::JoinHandle<()>) -> anyhow::Result<Duration> {
        sending.await?;
        let started = Instant::now();
        while started.elapsed() < DRAIN_LIMIT {
            if let Ok(true) = self.tgq.drained().await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(started.elapsed())
    }

    /// Counts, checks and stops.
    async fn finish(
        mut self,
        scenario: &Scenario,
        drain: Duration,
        extra: impl FnOnce(&Tally, &Reported, &crate::poster::Posted) -> Vec<Check>,
    ) -> anyhow::Result<Row> {
        let letters = self.tgq.dead_letters().await?;
        let reported = self.tgq.reported().await;
        let posted = self.poster.posted();
        let tally = Tally::count(
            &self.plan,
            &posted,
            &self.fake.calls(),
            &self.fake.violations(),
            &letters,
            &reported.resent,
        );
        let mut checks = tally.base_checks();
        checks.push(Check::new(
            "every update acknowledged",
            posted.given_up.is_empty(),
            format!("{} given up by Telegram", posted.given_up.len()),
        ));
        checks.extend(extra(&tally, &reported, &posted));
        self.progress.done();
        self.tgq.stop().await;
        self.fake.clone().shutdown().await;
        Ok(tally.row(
            scenario.number,
            scenario.name,
            "local",
            &reported,
            drain,
            checks,
        ))
    }
}

pub(crate) fn no_unexpected_dead(tally: &Tally) -> Check {
    Check::new(
        "0 unexpected dead letters",
        tally.unexpected_dead() == 0,
        format!("{:?}", tally.dead_unexpected),
    )
}

pub(crate) fn no_limit_violations(tally: &Tally) -> Check {
    Check::new(
        "0 Telegram limit violations",
        tally.limit_violations == 0,
        format!(
            "{} (early sends + sends over the limits)",
            tally.limit_violations
        ),
    )
}

pub(crate) fn chats(options: &Options) -> i64 {
    (options.updates as i64 / 10).clamp(3, 60)
}

pub(crate) fn first_id(scenario: &Scenario) -> i64 {
    100_000_000 * i64::from(scenario.number)
}

/// Runs one scenario on local mode.
pub async fn run(scenario: &Scenario, options: &Options) -> anyhow::Result<Row> {
    let ordinary = Plan::ordinary(
        options.updates,
        chats(options),
        first_id(scenario),
        options.seed,
    );
    match scenario.number {
        1 => triple_delivery(scenario, options, ordinary).await,
        2 => worker_killed(scenario, options, ordinary).await,
        3 => store_unreachable(scenario, options, ordinary).await,
        6 => failing_head(scenario, options, ordinary).await,
        7 => flood_wait(scenario, options, ordinary).await,
        8 => telegram_5xx(scenario, options, ordinary).await,
        9 => permanent_errors(scenario, options, ordinary).await,
        10 => poison(scenario, options, ordinary).await,
        11 => crash_after_send(scenario, options, ordinary).await,
        12 => stale_worker(scenario, options, ordinary).await,
        13 => kill_loop(scenario, options, ordinary).await,
        14 => recovery_drain(scenario, options, ordinary).await,
        15 => disk_full(scenario, options, ordinary.padded(DISK_FULL_PADDING)).await,
        16 => damaged_store(scenario, options, ordinary).await,
        n => bail!("scenario {n} does not apply to local mode"),
    }
}

async fn triple_delivery(s: &Scenario, o: &Options, plan: Plan) -> anyhow::Result<Row> {
    let run = Run::start(s, o, plan, false, &[], None).await?;
    let sending = run.send(3);
    let drain = run.drain(sending).await?;
    run.finish(s, drain, |t, _, _| vec![no_unexpected_dead(t)])
        .await
}

async fn worker_killed(s: &Scenario, o: &Options, mut plan: Plan) -> anyhow::Result<Row> {
    // Slow replies keep batches in the worker's hands when the kill comes.
    for planned in plan.updates.iter_mut().step_by(3) {
        planned.text = format!("/slow 300 {}", planned.text);
    }
    let mut run = Run::start(s, o, plan, false, &[], None).await?;
    let sending = run.send(1);
    run.acknowledged(run.plan.updates.len() / 3).await;
    run.tgq.kill();
    run.tgq.start().await?;
    let drain = run.drain(sending).await?;
    run.finish(s, drain, |t, _, _| vec![no_unexpected_dead(t)])
        .await
}

async fn store_unreachable(s: &Scenario, o: &Options, plan: Plan) -> anyhow::Result<Row> {
    let disk = SmallDisk::mount(&o.work.join("local-03-disk"), 64)?;
    let mut run = Run::start(s, o, plan, false, &[], Some(disk.path().join("data"))).await?;
    let sending = run.send(1);
    run.acknowledged(run.plan.updates.len() / 4).await;
    run.poster.mark(true);
    disk.fill()?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    disk.free()?;
    run.poster.mark(false);
    let (by_itself, recovery) = run.recover(Duration::from_secs(60)).await?;
    let drain = run.drain(sending).await?;
    let row = run
        .finish(s, drain, move |t, _, posted| {
            vec![
                no_unexpected_dead(t),
                Check::new(
                    "it recovered by itself once the store could commit",
                    by_itself,
                    recovery,
                ),
                Check::new(
                    "the webhook refused while the store could not commit (5xx, Telegram retried)",
                    posted.during_fault.keys().any(|s| *s >= 500),
                    format!("answers during the fault: {:?}", posted.during_fault),
                ),
            ]
        })
        .await;
    drop(disk);
    row
}

async fn failing_head(s: &Scenario, o: &Options, mut plan: Plan) -> anyhow::Result<Row> {
    let chat = plan.chats()[0];
    plan.edit_chat(chat, |k, planned| {
        if k < 5 {
            planned.text = format!("/fail transient {k}");
            planned.expect = Expect::Dead;
        }
    });
    let head: Vec<i64> = plan
        .updates
        .iter()
        .filter(|p| p.chat == chat)
        .map(|p| p.update_id)
        .collect();
    // A quick backoff so that five budgets of 8 runs are spent in seconds, not minutes.
    let env = [
        ("TGQ_BACKOFF_BASE_MS", "100"),
        ("TGQ_BACKOFF_CAP_MS", "400"),
    ];
    let run = Run::start(s, o, plan, false, &env, None).await?;
    let sending = run.send(1);
    let drain = run.drain(sending).await?;
    run.finish(s, drain, move |t, _, _| {
        vec![
            no_unexpected_dead(t),
            Check::new(
                "the 5 failing heads dead-lettered by tgq once their budget was spent (not moved by the redrive), the good ones after them processed",
                t.dead_missing == 0 && t.lost == 0 && t.dead_by_redrive == 0,
                format!(
                    "chat {chat}: updates {:?}…; {} of the heads moved by the redrive",
                    &head[..head.len().min(10)],
                    t.dead_by_redrive
                ),
            ),
        ]
    })
    .await
}

async fn flood_wait(s: &Scenario, o: &Options, plan: Plan) -> anyhow::Result<Row> {
    let run = Run::start(s, o, plan, true, &[], None).await?;
    let sending = run.send(1);
    run.acknowledged(run.plan.updates.len() / 5).await;
    run.fake
        .inject(Fault::RetryAfter(3), Scope::Global, Times::Always);
    tokio::time::sleep(Duration::from_secs(20)).await;
    run.fake.clear_faults();
    let drain = run.drain(sending).await?;
    run.finish(s, drain, |t, _, _| {
        vec![no_unexpected_dead(t), no_limit_violations(t)]
    })
    .await
}

/// Telegram failing for `window`: mostly 5xx, and every `every` one call that takes effect but is
/// answered only after the client's 10 s timeout.
pub(crate) async fn telegram_trouble(fake: &FakeTelegram, window: Duration, every: Duration) {
    let started = Instant::now();
    while started.elapsed() < window {
        fake.clear_faults();
        fake.inject(
            Fault::Timeout(Duration::from_secs(12)),
            Scope::Global,
            Times::Once,
        );
        fake.inject(Fault::ServerError(502), Scope::Global, Times::Always);
        tokio::time::sleep(every.min(window.saturating_sub(started.elapsed()))).await;
    }
    fake.clear_faults();
}

async fn telegram_5xx(s: &Scenario, o: &Options, plan: Plan) -> anyhow::Result<Row> {
    let run = Run::start(s, o, plan, false, &[], None).await?;
    let sending = run.send(1);
    run.acknowledged(run.plan.updates.len() / 5).await;
    telegram_trouble(&run.fake, Duration::from_secs(30), Duration::from_secs(3)).await;
    let drain = run.drain(sending).await?;
    run.finish(s, drain, |t, _, _| vec![no_unexpected_dead(t)])
        .await
}

/// Marks the traffic of scenario 9 and queues its Telegram faults.
pub(crate) fn permanent_plan(plan: &mut Plan) -> (Vec<i64>, Vec<(Fault, i64)>) {
    let chats = plan.chats();
    let (handler_chat, bad_chat, blocked, deactivated) =
        (chats[0], chats[1], chats[2], chats[3 % chats.len()]);
    plan.edit_chat(handler_chat, |k, p| {
        if k % 3 == 1 {
            p.text = format!("/fail permanent {k}");
            p.expect = Expect::Dead;
        }
    });
    plan.edit_chat(bad_chat, |k, p| {
        if k == 0 {
            p.expect = Expect::Dead;
        }
    });
    for chat in [blocked, deactivated] {
        plan.edit_chat(chat, |_, p| p.expect = Expect::Gone);
    }
    let gone = plan
        .updates
        .iter()
        .filter(|p| p.expect == Expect::Gone)
        .map(|p| p.update_id)
        .collect();
    let faults = vec![
        (Fault::BadRequest, bad_chat),
        (Fault::Blocked, blocked),
        (Fault::Deactivated, deactivated),
    ];
    (gone, faults)
}

pub(crate) fn permanent_checks(t: &Tally, gone: usize) -> Vec<Check> {
    vec![
        no_unexpected_dead(t),
        Check::new(
            "permanent errors dead-lettered on the first attempt",
            t.dead_after_retries == 0 && t.dead_missing == 0,
            format!(
                "{} after more than one run, {} missing",
                t.dead_after_retries, t.dead_missing
            ),
        ),
        Check::new(
            "recipients who left settle as recipient_gone, not dead-lettered",
            t.dead_unexpected.values().sum::<u64>() == 0,
            format!(
                "{gone} updates to recipients who left; unexpected letters {:?}",
                t.dead_unexpected
            ),
        ),
    ]
}

async fn permanent_errors(s: &Scenario, o: &Options, mut plan: Plan) -> anyhow::Result<Row> {
    let (gone, faults) = permanent_plan(&mut plan);
    let run = Run::start(s, o, plan, false, &[], None).await?;
    for (fault, chat) in faults {
        let times = if fault == Fault::BadRequest {
            Times::Once
        } else {
            Times::Always
        };
        run.fake.inject(fault, Scope::Chat(chat), times);
    }
    let sending = run.send(1);
    let drain = run.drain(sending).await?;
    run.finish(s, drain, move |t, _, _| permanent_checks(t, gone.len()))
        .await
}

async fn poison(s: &Scenario, o: &Options, mut plan: Plan) -> anyhow::Result<Row> {
    plan.poison = poison_bodies((plan.updates.len() / 10).max(4));
    let count = plan.poison.len() as u64;
    let run = Run::start(s, o, plan, false, &[], None).await?;
    let sending = run.send(1);
    let drain = run.drain(sending).await?;
    run.finish(s, drain, move |t, _, posted| {
        vec![
            no_unexpected_dead(t),
            Check::new(
                "every poison body answered 200 and dead-lettered",
                posted.poison_acknowledged == count && t.poison_lettered == count,
                format!(
                    "{count} poison bodies: {} answered 2xx, {} dead-lettered",
                    posted.poison_acknowledged, t.poison_lettered
                ),
            ),
        ]
    })
    .await
}

/// The chats of scenario 11 whose first update is an at-most-once send held past a crash.
pub(crate) fn at_most_once_plan(plan: &mut Plan) -> Vec<i64> {
    let chats: Vec<i64> = plan.chats().into_iter().take(3).collect();
    for &chat in &chats {
        plan.edit_chat(chat, |k, p| {
            if k == 0 {
                p.text = format!("/once {}", p.text);
                p.expect = Expect::ReplyAtMostOnce;
            }
        });
    }
    chats
}

pub(crate) async fn wait_for_calls(
    fake: &FakeTelegram,
    chats: &[i64],
    limit: Duration,
) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let calls = fake.calls();
        if chats
            .iter()
            .all(|c| calls.iter().any(|call| call.chat_id == Some(*c)))
        {
            return Ok(());
        }
        if started.elapsed() > limit {
            bail!("the sends to chats {chats:?} did not arrive within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The sends that took effect while their answer was lost in the crash (the outside count) must
/// each be counted once by tgq — uncertain when at most once, made again when at least once — and
/// none sent twice (the base checks).
pub(crate) fn uncertain_checks(t: &Tally, reported: &Reported) -> Vec<Check> {
    vec![
        no_unexpected_dead(t),
        Check::new(
            "the crash met an at-most-once send in flight",
            t.uncertain >= 1,
            format!("{} sends took effect without their answer", t.uncertain),
        ),
        Check::new(
            "tgq counts each call whose answer was lost once: uncertain (at most once) + made again (at least once) = the calls that took effect without their answer",
            reported.unknown_outcomes() == Some(t.uncertain),
            format!(
                "tgq counts {} uncertain + {} made again, against {} at Telegram",
                reported
                    .uncertain
                    .map_or("no".into(), |n| n.to_string()),
                reported
                    .resent_count
                    .map_or("no".into(), |n| n.to_string()),
                t.uncertain
            ),
        ),
    ]
}

async fn crash_after_send(s: &Scenario, o: &Options, mut plan: Plan) -> anyhow::Result<Row> {
    let chats = at_most_once_plan(&mut plan);
    let mut run = Run::start(s, o, plan, false, &[], None).await?;
    for &chat in &chats {
        // The send takes effect at once; its answer is held until after the crash.
        run.fake.inject(
            Fault::Timeout(Duration::from_secs(8)),
            Scope::Chat(chat),
            Times::Once,
        );
    }
    let sending = run.send(1);
    // The first held send has reached Telegram; its answer comes 8 s later, after the crash.
    wait_for_calls(&run.fake, &chats[..1], Duration::from_secs(120)).await?;
    run.tgq.kill();
    run.tgq.start().await?;
    let drain = run.drain(sending).await?;
    run.finish(s, drain, |t, r, _| uncertain_checks(t, r)).await
}

pub(crate) fn stale_checks(t: &Tally, reported: &Reported) -> Vec<Check> {
    vec![
        no_unexpected_dead(t),
        Check::new(
            "the stale run's late writes refused and counted (fenced ≥ 1)",
            reported.fenced.is_some_and(|n| n >= 1),
            reported.fenced.map_or(
                "tgq reports no fenced writes (no such counter)".into(),
                |n| format!("{n} fenced"),
            ),
        ),
    ]
}

async fn stale_worker(s: &Scenario, o: &Options, mut plan: Plan) -> anyhow::Result<Row> {
    let slow: Vec<i64> = plan.chats().into_iter().take(4).collect();
    for &chat in &slow {
        plan.edit_chat(chat, |k, p| {
            if k == 1 {
                p.text = format!("/slow 5000 {}", p.text);
            }
        });
    }
    let run = Run::start(s, o, plan, false, &[], None).await?;
    let sending = run.send(1);
    run.acknowledged(run.plan.updates.len() / 2).await;
    // Past the lease (60 s) and the visibility (70 s): the laptop's lid closed mid-batch.
    run.tgq.freeze(true)?;
    tokio::time::sleep(Duration::from_secs(75)).await;
    run.tgq.freeze(false)?;
    let drain = run.drain(sending).await?;
    // The whole process was frozen: no other run of it could take the updates over meanwhile. On
    // waking, the stale batch is cut off at its own deadline (as a timed-out Lambda is), or a write
    // it still tries after another run claimed is refused. Either way it sends nothing twice.
    let cut_off = run.tgq.log_text().contains("cut off");
    run.finish(s, drain, move |t, r, _| local_stale_checks(t, r, cut_off))
        .await
}

/// Scenario 12 in local mode, where the frozen process is the only worker.
fn local_stale_checks(t: &Tally, reported: &Reported, cut_off: bool) -> Vec<Check> {
    let fenced = reported.fenced.unwrap_or(0);
    vec![
        no_unexpected_dead(t),
        Check::new(
            "the stale run wrote nothing once its lease was gone: cut off at its deadline, or refused (fenced)",
            cut_off || fenced >= 1,
            format!(
                "{}; {fenced} fenced",
                if cut_off {
                    "the stale batch was cut off"
                } else {
                    "no batch was cut off"
                }
            ),
        ),
    ]
}

async fn kill_loop(s: &Scenario, o: &Options, plan: Plan) -> anyhow::Result<Row> {
    let mut run = Run::start(s, o, plan, false, &[], None).await?;
    let sending = run.send(1);
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        run.tgq.kill();
        run.tgq.start().await?;
    }
    let drain = run.drain(sending).await?;
    run.finish(s, drain, |t, _, _| vec![no_unexpected_dead(t)])
        .await
}

async fn recovery_drain(s: &Scenario, o: &Options, plan: Plan) -> anyhow::Result<Row> {
    let run = Run::start(s, o, plan, true, &[], None).await?;
    run.fake
        .inject(Fault::ServerError(502), Scope::Global, Times::Always);
    let sending = run.send(1);
    tokio::time::sleep(Duration::from_secs(60)).await;
    run.fake.clear_faults();
    let drain = run.drain(sending).await?;
    run.finish(s, drain, |t, _, _| {
        vec![no_unexpected_dead(t), no_limit_violations(t)]
    })
    .await
}

/// Bytes of filler in each update of the disk-full scenario. The store reuses the pages that
/// processed updates and earlier commits freed, so updates of a few hundred bytes keep fitting in
/// a file that can no longer grow; each of these needs about 130 KB more (its record and its queue
/// message), so the posts made while the disk is full run out of free pages within a few dozen.
const DISK_FULL_PADDING: usize = 64 * 1024;

async fn disk_full(s: &Scenario, o: &Options, plan: Plan) -> anyhow::Result<Row> {
    // Room for every update of the plan once the space is back (300 by default: about 40 MB with
    // the copies redb writes), whatever the fill leaves.
    let disk = SmallDisk::mount(&o.work.join("local-15-disk"), 128)?;
    let mut run = Run::start(s, o, plan, false, &[], Some(disk.path().join("data"))).await?;
    let sending = run.send(1);
    run.acknowledged(run.plan.updates.len() / 4).await;
    run.poster.mark(true);
    disk.fill()?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let full_readyz = run.tgq.readyz().await.unwrap_or((0, String::new()));
    tokio::time::sleep(Duration::from_secs(10)).await;
    disk.free()?;
    run.poster.mark(false);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_readyz = run.tgq.readyz().await.unwrap_or((0, String::new()));
    let (by_itself, recovery) = run.recover(Duration::from_secs(60)).await?;
    let drain = run.drain(sending).await?;
    let log = run.tgq.log_text().to_lowercase();
    let log_says = ["no space left", "disk full", "enospc", "storage full"]
        .iter()
        .any(|words| log.contains(words));
    let row = run
        .finish(s, drain, move |t, _, posted| {
            vec![
                no_unexpected_dead(t),
                Check::new(
                    "the webhook answered 5xx while the disk was full",
                    posted.during_fault.keys().any(|s| *s >= 500),
                    format!("answers during the fault: {:?}", posted.during_fault),
                ),
                Check::new(
                    "/readyz answered 503 with the reason while full",
                    full_readyz.0 == 503 && !full_readyz.1.is_empty(),
                    format!("{} {}", full_readyz.0, full_readyz.1),
                ),
                Check::new(
                    "the log says the disk is full",
                    log_says,
                    format!("found: {log_says}"),
                ),
                Check::new(
                    "/readyz 200 again once space was freed",
                    after_readyz.0 == 200,
                    format!("{} {}", after_readyz.0, after_readyz.1),
                ),
                Check::new(
                    "it recovered by itself once space was freed",
                    by_itself,
                    recovery,
                ),
            ]
        })
        .await;
    drop(disk);
    row
}

async fn damaged_store(s: &Scenario, o: &Options, plan: Plan) -> anyhow::Result<Row> {
    let mut run = Run::start(s, o, plan, false, &[], None).await?;
    let sending = run.send(1);
    let drain = run.drain(sending).await?;
    let backup = o.work.join("local-16-backup.redb");
    let made = std::process::Command::new(&o.exe)
        .arg("backup")
        .arg("--data-dir")
        .arg(run.tgq.data_dir())
        .arg("--to")
        .arg(&backup)
        .output()
        .context("running tgq backup")?;
    let backed_up = made.status.success();
    run.tgq.stop().await;
    let file = run.tgq.data_dir().join("tgq.redb");
    damage(&file)?;
    let refusal = run.tgq.start_expecting_refusal().await?;
    let (refused, refusal_text) = match &refusal {
        Ok(refusal) => {
            let text = refusal.stderr.clone();
            let names = text.contains(&file.display().to_string());
            let says = text.contains("restore a backup");
            (
                !refusal.status.success() && names && says,
                last_line(&text, "damaged"),
            )
        }
        Err(served) => (false, served.clone()),
    };
    std::fs::copy(&backup, &file).context("restoring the backup")?;
    run.tgq.start().await?;
    let restored = run.tgq.status().await?;
    let processed = restored["counters"]["processed"].as_u64().unwrap_or(0);
    let expected = run.plan.updates.len() as u64;
    run.finish(s, drain, move |_, _, _| {
        vec![
            Check::new(
                "tgq backup took a copy while tgq local ran",
                backed_up,
                String::from_utf8_lossy(&made.stdout).lines().next().unwrap_or_default().to_owned(),
            ),
            Check::new(
                "tgq local refuses the damaged store, naming the file and the way back, and never serves",
                refused,
                refusal_text,
            ),
            Check::new(
                "tgq local serves again from the restored backup, with what it held",
                processed == expected,
                format!("{processed} of {expected} processed updates in the restored store"),
            ),
        ]
    })
    .await
}

/// Garbage over every page of `file` past its header: what a bad disk or a stray write leaves.
fn damage(file: &Path) -> anyhow::Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    let size = std::fs::metadata(file)?.len();
    let mut f = std::fs::OpenOptions::new().write(true).open(file)?;
    let mut at = 4096 + 100;
    while at + 64 < size {
        f.seek(SeekFrom::Start(at))?;
        f.write_all(&[0xA5; 64])?;
        at += 4096;
    }
    f.sync_all()?;
    Ok(())
}

fn last_line(text: &str, containing: &str) -> String {
    text.lines()
        .rev()
        .find(|l| l.contains(containing))
        .unwrap_or_else(|| text.lines().last().unwrap_or_default())
        .chars()
        .take(300)
        .collect()
}
