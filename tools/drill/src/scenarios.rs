//! The scenarios that read the same on both targets, written once against [`Pipeline`]: what is
//! posted, which fault is injected at the fake Bot API and when, and what must hold afterwards.
//! Where a target breaks differently (the process that runs the worker, the store's outage), the
//! pipeline says how ([`Pipeline::crash_worker`]); the faults only one target has stay in
//! `run_local.rs` and `run_emulator/`.

use std::time::{Duration, Instant};

use anyhow::bail;
use tgq_fake_telegram::{
    FakeConfig, FakeTelegram, Fault, Limits, RecordedCall, Scope, Times, Violations,
};

use crate::plan::{poison_bodies, Expect, Plan};
use crate::poster::{Posted, Poster};
use crate::progress::ScenarioProgress;
use crate::scenario::Scenario;
use crate::tally::{Check, Letter, Reported, Row, Tally};
use crate::{Options, SECRET};

/// What a pipeline is driven and counted from on either target: the fake Bot API it sends to,
/// Telegram posting the plan to its webhook, and the scenario's progress line.
pub(crate) struct Outside {
    pub(crate) fake: FakeTelegram,
    pub(crate) poster: Poster,
    pub(crate) plan: Plan,
    pub(crate) progress: ScenarioProgress,
}

impl Outside {
    /// Telegram posting `plan` to `webhook_url`, and the progress line of `scenario` on `target`.
    pub(crate) fn new(
        scenario: &Scenario,
        options: &Options,
        target: &str,
        plan: Plan,
        fake: FakeTelegram,
        webhook_url: String,
    ) -> Outside {
        let poster = Poster::new(webhook_url, SECRET, Duration::from_secs(300));
        let progress = options
            .progress
            .scenario(scenario, target, &plan, &poster, &fake);
        Outside {
            fake,
            poster,
            plan,
            progress,
        }
    }
}

/// What the target holds once the traffic is over.
pub(crate) struct Inside {
    /// Its dead letters.
    pub(crate) letters: Vec<Letter>,
    /// What tgq reports of itself.
    pub(crate) reported: Reported,
    /// What the target saw of the order of deliveries, when it knows: see [`note_order`].
    pub(crate) order_note: Option<String>,
}

impl Inside {
    /// Counts `plan` against what was posted, the fake's `calls` and `violations`, and what the
    /// target holds.
    pub(crate) fn count(
        &self,
        plan: &Plan,
        posted: &Posted,
        calls: &[RecordedCall],
        violations: &Violations,
    ) -> Tally {
        let resent = &self.reported.resent;
        Tally::count(plan, posted, calls, violations, &self.letters, resent)
    }

    /// [`Tally::base_checks`], the order check with what the target saw of the order.
    pub(crate) fn base_checks(&self, tally: &Tally) -> Vec<Check> {
        let mut checks = tally.base_checks();
        if let Some(note) = &self.order_note {
            note_order(&mut checks, note);
        }
        checks
    }
}

/// One scenario's pipeline on one target, started with the scenario's traffic.
pub(crate) trait Pipeline: Sized {
    /// The fake Bot API, Telegram posting the plan, and the progress line.
    fn outside(&self) -> &Outside;
    /// Waits until the sending is over and the queue is empty; how long the queue took.
    async fn drain(&self, sending: tokio::task::JoinHandle<()>) -> anyhow::Result<Duration>;
    /// Ends whatever runs the worker in the middle of its batches, as a crash does, and starts
    /// another: `tgq local` killed and restarted, or the worker's container killed and a new one
    /// started.
    async fn crash_worker(&mut self) -> anyhow::Result<()>;
    /// A note on the failing heads' dead letters: who moved them.
    fn redrive_note(&self) -> String;
    /// The target's name in the table.
    const TARGET: &'static str;
    /// Stops delivering and reads what the target holds.
    async fn inside(&mut self) -> anyhow::Result<Inside>;
    /// Stops the pipeline: the progress line done, what runs tgq and the fake shut down.
    async fn stop(self);

    /// Counts what happened, adds the scenario's own checks, stops the pipeline.
    async fn finish(
        mut self,
        scenario: &Scenario,
        drain: Duration,
        extra: impl FnOnce(&Tally, &Reported, &Posted) -> Vec<Check>,
    ) -> anyhow::Result<Row> {
        let inside = self.inside().await?;
        let outside = self.outside();
        let posted = outside.poster.posted();
        let (calls, violations) = (outside.fake.calls(), outside.fake.violations());
        let tally = inside.count(&outside.plan, &posted, &calls, &violations);
        let mut checks = inside.base_checks(&tally);
        checks.push(Check::new(
            "every update acknowledged",
            posted.given_up.is_empty(),
            format!("{} given up by Telegram", posted.given_up.len()),
        ));
        checks.extend(extra(&tally, &inside.reported, &posted));
        let (number, name) = (scenario.number, scenario.name);
        let row = tally.row(number, name, Self::TARGET, &inside.reported, drain, checks);
        self.stop().await;
        Ok(row)
    }

    /// Posts the plan, each update `copies` times at once, in the background.
    fn send(&self, copies: usize) -> tokio::task::JoinHandle<()> {
        let outside = self.outside();
        let (poster, plan) = (outside.poster.clone(), outside.plan.clone());
        tokio::spawn(async move { poster.send(&plan, copies).await })
    }

    /// Waits until `n` updates were acknowledged.
    async fn acknowledged(&self, n: usize) {
        while self.outside().poster.posted().acknowledged.len() < n {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The fake Bot API, Telegram's limits enforced when `limits`.
pub(crate) async fn start_fake(limits: bool) -> anyhow::Result<FakeTelegram> {
    let config = FakeConfig {
        limits: limits.then(Limits::default),
        ..FakeConfig::default()
    };
    Ok(FakeTelegram::start_with(config).await?)
}

/// Adds the target's `note` to the order check: an order violation reads against what the target
/// handed out.
pub(crate) fn note_order(checks: &mut [Check], note: &str) {
    for check in checks.iter_mut().filter(|c| c.required == "0 out of order") {
        check.observed.push_str("; ");
        check.observed.push_str(note);
    }
}

/// Starts a target's pipeline for a scenario.
pub(crate) trait Launcher {
    /// The pipeline it starts.
    type Run: Pipeline;
    /// Starts one with `plan`, Telegram's limits enforced when `limits`, and `env` for tgq.
    async fn start(
        &self,
        plan: Plan,
        limits: bool,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self::Run>;
}

/// The scenario `s` when it reads the same on both targets; `None` for the others.
pub(crate) async fn run_shared(
    s: &Scenario,
    launcher: &impl Launcher,
    plan: Plan,
) -> Option<anyhow::Result<Row>> {
    Some(match s.number {
        1 => triple_delivery(s, launcher, plan).await,
        2 => worker_killed(s, launcher, plan).await,
        6 => failing_head(s, launcher, plan).await,
        7 => flood_wait(s, launcher, plan).await,
        8 => telegram_5xx(s, launcher, plan).await,
        9 => permanent_errors(s, launcher, plan).await,
        10 => poison(s, launcher, plan).await,
        11 => crash_after_send(s, launcher, plan).await,
        14 => recovery_drain(s, launcher, plan).await,
        _ => return None,
    })
}

async fn triple_delivery(s: &Scenario, l: &impl Launcher, plan: Plan) -> anyhow::Result<Row> {
    let run = l.start(plan, false, &[]).await?;
    let sending = run.send(3);
    let drain = run.drain(sending).await?;
    run.finish(s, drain, |t, _, _| vec![no_unexpected_dead(t)])
        .await
}

async fn worker_killed(s: &Scenario, l: &impl Launcher, mut plan: Plan) -> anyhow::Result<Row> {
    // Slow replies keep batches in the worker's hands when the kill comes.
    for planned in plan.updates.iter_mut().step_by(3) {
        planned.text = format!("/slow 300 {}", planned.text);
    }
    let mut run = l.start(plan, false, &[]).await?;
    let sending = run.send(1);
    run.acknowledged(run.outside().plan.updates.len() / 3).await;
    run.crash_worker().await?;
    let drain = run.drain(sending).await?;
    run.finish(s, drain, |t, _, _| vec![no_unexpected_dead(t)])
        .await
}

async fn failing_head(s: &Scenario, l: &impl Launcher, mut plan: Plan) -> anyhow::Result<Row> {
    let chat = plan.chats()[0];
    plan.edit_chat(chat, |k, planned| {
        if k < 5 {
            planned.text = format!("/fail transient {k}");
            planned.expect = Expect::Dead;
        }
    });
    // A quick backoff so that five budgets of 8 runs are spent in seconds, not minutes.
    let env = [
        ("TGQ_BACKOFF_BASE_MS", "100"),
        ("TGQ_BACKOFF_CAP_MS", "400"),
    ];
    let run = l.start(plan, false, &env).await?;
    let note = run.redrive_note();
    let sending = run.send(1);
    let drain = run.drain(sending).await?;
    run.finish(s, drain, move |t, _, _| {
        vec![
            no_unexpected_dead(t),
            Check::new(
                "the 5 failing heads dead-lettered by tgq once their budget was spent (not moved by the redrive), the good ones after them processed",
                t.dead_missing == 0 && t.lost == 0 && t.dead_by_redrive == 0,
                format!(
                    "chat {chat}; {} of the heads moved by the redrive{note}",
                    t.dead_by_redrive
                ),
            ),
        ]
    })
    .await
}

async fn flood_wait(s: &Scenario, l: &impl Launcher, plan: Plan) -> anyhow::Result<Row> {
    let run = l.start(plan, true, &[]).await?;
    let sending = run.send(1);
    run.acknowledged(run.outside().plan.updates.len() / 5).await;
    run.outside()
        .fake
        .inject(Fault::RetryAfter(3), Scope::Global, Times::Always);
    tokio::time::sleep(Duration::from_secs(20)).await;
    run.outside().fake.clear_faults();
    let drain = run.drain(sending).await?;
    run.finish(s, drain, |t, _, _| {
        vec![no_unexpected_dead(t), no_limit_violations(t)]
    })
    .await
}

async fn telegram_5xx(s: &Scenario, l: &impl Launcher, plan: Plan) -> anyhow::Result<Row> {
    let run = l.start(plan, false, &[]).await?;
    let sending = run.send(1);
    run.acknowledged(run.outside().plan.updates.len() / 5).await;
    telegram_trouble(
        &run.outside().fake,
        Duration::from_secs(30),
        Duration::from_secs(3),
    )
    .await;
    let drain = run.drain(sending).await?;
    run.finish(s, drain, |t, _, _| vec![no_unexpected_dead(t)])
        .await
}

async fn permanent_errors(s: &Scenario, l: &impl Launcher, mut plan: Plan) -> anyhow::Result<Row> {
    let (gone, faults) = permanent_plan(&mut plan);
    let run = l.start(plan, false, &[]).await?;
    for (fault, chat) in faults {
        let times = if fault == Fault::BadRequest {
            Times::Once
        } else {
            Times::Always
        };
        run.outside().fake.inject(fault, Scope::Chat(chat), times);
    }
    let sending = run.send(1);
    let drain = run.drain(sending).await?;
    run.finish(s, drain, move |t, _, _| permanent_checks(t, gone.len()))
        .await
}

async fn poison(s: &Scenario, l: &impl Launcher, mut plan: Plan) -> anyhow::Result<Row> {
    plan.poison = poison_bodies((plan.updates.len() / 10).max(4));
    let count = plan.poison.len() as u64;
    let run = l.start(plan, false, &[]).await?;
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

async fn crash_after_send(s: &Scenario, l: &impl Launcher, mut plan: Plan) -> anyhow::Result<Row> {
    let chats = at_most_once_plan(&mut plan);
    let mut run = l.start(plan, false, &[]).await?;
    for &chat in &chats {
        // The send takes effect at once; its answer is held until after the crash.
        run.outside().fake.inject(
            Fault::Timeout(Duration::from_secs(8)),
            Scope::Chat(chat),
            Times::Once,
        );
    }
    let sending = run.send(1);
    // The first held send has reached Telegram; its answer comes 8 s later, after the crash.
    wait_for_calls(&run.outside().fake, &chats[..1], Duration::from_secs(120)).await?;
    run.crash_worker().await?;
    let drain = run.drain(sending).await?;
    run.finish(s, drain, |t, r, _| uncertain_checks(t, r)).await
}

async fn recovery_drain(s: &Scenario, l: &impl Launcher, plan: Plan) -> anyhow::Result<Row> {
    let run = l.start(plan, true, &[]).await?;
    run.outside()
        .fake
        .inject(Fault::ServerError(502), Scope::Global, Times::Always);
    let sending = run.send(1);
    tokio::time::sleep(Duration::from_secs(60)).await;
    run.outside().fake.clear_faults();
    let drain = run.drain(sending).await?;
    run.finish(s, drain, |t, _, _| {
        vec![no_unexpected_dead(t), no_limit_violations(t)]
    })
    .await
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
