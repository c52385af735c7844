//! Local mode's pipeline for the shared scenarios, and the scenarios only it has (a full or damaged
//! disk, a frozen or repeatedly killed process): the real `tgq local` with the echo bot, sending
//! to the fake Bot API, counted from the outside.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use tgq_fake_telegram::FakeTelegram;

use crate::disk::SmallDisk;
use crate::local::LocalTgq;
use crate::plan::Plan;
use crate::scenario::Scenario;
use crate::scenarios::{
    self, chats, first_id, no_unexpected_dead, start_fake, Inside, Launcher, Outside, Pipeline,
};
use crate::tally::{Check, Reported, Row, Tally};
use crate::two_bots::{self, Against};
use crate::{Options, SECRET};

mod broadcast;
mod payments;

/// How long a scenario may take to drain after its fault before what is missing counts as lost.
const DRAIN_LIMIT: Duration = Duration::from_secs(180);

/// One scenario's pipeline: the fake Bot API, `tgq local`, and Telegram posting to it.
struct Run {
    outside: Outside,
    tgq: LocalTgq,
}

/// The folder of scenario `s` under the drill's work folder.
fn scenario_dir(s: &Scenario, o: &Options) -> PathBuf {
    o.work.join(format!("local-{:02}-{}", s.number, s.name))
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

/// Starts `tgq local` on `data_dir` with the echo bot's settings sending to `fake`, and `env`
/// besides; its log in `dir`.
async fn start_tgq(
    o: &Options,
    dir: &Path,
    data_dir: &Path,
    fake: &FakeTelegram,
    env: &[(&str, &str)],
) -> anyhow::Result<LocalTgq> {
    let mut envs = base_env(fake);
    envs.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let mut tgq = LocalTgq::new(&o.exe, data_dir, &dir.join("tgq-local.log"), envs);
    tgq.start().await?;
    Ok(tgq)
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
        let fake = start_fake(limits).await?;
        let dir = scenario_dir(scenario, options);
        std::fs::create_dir_all(&dir)?;
        let data_dir = data_dir.unwrap_or_else(|| dir.join("data"));
        let tgq = start_tgq(options, &dir, &data_dir, &fake, env).await?;
        let url = tgq.url("/webhook");
        let outside = Outside::new(scenario, options, Run::TARGET, plan, fake, url);
        Ok(Run { outside, tgq })
    }

    /// Waits up to `limit` for every update to be acknowledged and the queue to drain without any
    /// help; when that does not happen, kills and restarts `tgq local` (what an operator would do) so
    /// that the drill can tell a pipeline that is stuck from one that lost updates. Returns whether
    /// it recovered by itself, and what happened.
    async fn recover(&mut self, limit: Duration) -> anyhow::Result<(bool, String)> {
        let started = Instant::now();
        let total = self.outside.plan.updates.len();
        while started.elapsed() < limit {
            let acknowledged = self.outside.poster.posted().acknowledged.len();
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
}

/// Starts local mode's pipeline for one scenario.
struct Local<'a> {
    scenario: &'a Scenario,
    options: &'a Options,
}

impl Launcher for Local<'_> {
    type Run = Run;

    async fn start(&self, plan: Plan, limits: bool, env: &[(&str, &str)]) -> anyhow::Result<Run> {
        Run::start(self.scenario, self.options, plan, limits, env, None).await
    }
}

impl Pipeline for Run {
    const TARGET: &'static str = "local";

    fn outside(&self) -> &Outside {
        &self.outside
    }

    async fn drain(&self, sending: tokio::task::JoinHandle<()>) -> anyhow::Result<Duration> {
        Run::drain(self, sending).await
    }

    /// SIGKILL of `tgq local`, restarted at once on the same data directory and port.
    async fn crash_worker(&mut self) -> anyhow::Result<()> {
        self.tgq.kill();
        self.tgq.start().await
    }

    fn redrive_note(&self) -> String {
        String::new()
    }

    async fn inside(&mut self) -> anyhow::Result<Inside> {
        Ok(Inside {
            letters: self.tgq.dead_letters().await?,
            reported: self.tgq.reported().await,
            order_note: None,
        })
    }

    async fn stop(mut self) {
        self.outside.progress.done();
        self.tgq.stop().await;
        self.outside.fake.clone().shutdown().await;
    }
}

/// Runs one scenario on local mode.
pub async fn run(scenario: &Scenario, options: &Options) -> anyhow::Result<Row> {
    let ordinary = Plan::ordinary(
        options.updates,
        chats(options),
        first_id(scenario),
        options.seed,
    );
    let local = Local { scenario, options };
    if let Some(row) = scenarios::run_shared(scenario, &local, ordinary.clone()).await {
        return row;
    }
    match scenario.number {
        3 => store_unreachable(scenario, options, ordinary.padded(DISK_PADDING)).await,
        12 => stale_worker(scenario, options, ordinary).await,
        13 => kill_loop(scenario, options, ordinary).await,
        15 => disk_full(scenario, options, ordinary.padded(DISK_PADDING)).await,
        16 => damaged_store(scenario, options, ordinary).await,
        17 => two_bots(scenario, options).await,
        20 => broadcast::run(scenario, options).await,
        21 => payments::run(scenario, options).await,
        n => bail!("scenario {n} does not apply to local mode"),
    }
}

/// Scenario 17 on the local target (`crate::two_bots` plans and counts it): both bots in
/// `tgq local`'s `bots.json`, one process serving both. There the quiet bot's latency beside the
/// failing bot is held to its latency alone as well as beside the same bot healthy: no emulator
/// stands between the bots.
async fn two_bots(s: &Scenario, o: &Options) -> anyhow::Result<Row> {
    // No rate limits at the fake: Telegram limits each bot on its own, the fake its whole server.
    let fake = FakeTelegram::start().await?;
    fake.accept_token(two_bots::NOISY_TOKEN);
    let dir = scenario_dir(s, o);
    let data_dir = dir.join("data");
    std::fs::create_dir_all(&data_dir)?;
    tgq_embedded::BotsFile::in_dir(&data_dir).write(&two_bots::entries(&fake)?)?;
    let mut tgq = start_tgq(o, &dir, &data_dir, &fake, &[]).await?;
    let phases = two_bots::run_phases(
        &fake,
        &tgq.url("/webhook/"),
        o.updates,
        o.seed,
        |_| {},
        async || tgq.dead_letters().await,
    )
    .await?;
    let started = Instant::now();
    while started.elapsed() < DRAIN_LIMIT && !tgq.drained().await.unwrap_or(false) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drain = started.elapsed();
    let calls = fake.calls();
    let letters = tgq.dead_letters().await?;
    let reported = tgq.reported().await;
    let (everything, posted) = phases.everything();
    let tally = Tally::count(
        &everything,
        &posted,
        &calls,
        &fake.violations(),
        &letters,
        &reported.resent,
    );
    let mut checks = tally.base_checks();
    checks.extend(phases.checks(
        &calls,
        &letters,
        (tally.dead_expected, tally.unexpected_dead()),
        Against::SoloAndHealthy,
        None,
    ));
    tgq.stop().await;
    fake.clone().shutdown().await;
    Ok(tally.row(s.number, s.name, "local", &reported, drain, checks))
}

/// Bytes of filler in each update of the scenarios that fill the disk (3 and 15). The store reuses
/// the pages that processed updates and earlier commits freed, so updates of a few hundred bytes
/// keep fitting in a file that can no longer grow; each of these needs about 130 KB more (its record
/// and its queue message), so the posts made while the disk is full run out of free pages within a
/// few dozen.
const DISK_PADDING: usize = 64 * 1024;
/// The tmpfs those scenarios fill: room for every update of the plan once the space is back (300 by
/// default: about 40 MB with the copies redb writes), whatever the fill leaves.
const DISK_MEGABYTES: u32 = 128;

async fn store_unreachable(s: &Scenario, o: &Options, plan: Plan) -> anyhow::Result<Row> {
    let disk = SmallDisk::mount(&o.work.join("local-03-disk"), DISK_MEGABYTES)?;
    let mut run = Run::start(s, o, plan, false, &[], Some(disk.path().join("data"))).await?;
    let sending = run.send(1);
    run.acknowledged(run.outside.plan.updates.len() / 4).await;
    run.outside.poster.mark(true);
    disk.fill()?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    disk.free()?;
    run.outside.poster.mark(false);
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
    run.acknowledged(run.outside.plan.updates.len() / 2).await;
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

async fn disk_full(s: &Scenario, o: &Options, plan: Plan) -> anyhow::Result<Row> {
    let disk = SmallDisk::mount(&o.work.join("local-15-disk"), DISK_MEGABYTES)?;
    let mut run = Run::start(s, o, plan, false, &[], Some(disk.path().join("data"))).await?;
    let sending = run.send(1);
    run.acknowledged(run.outside.plan.updates.len() / 4).await;
    run.outside.poster.mark(true);
    disk.fill()?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let full_readyz = run.tgq.readyz().await.unwrap_or((0, String::new()));
    tokio::time::sleep(Duration::from_secs(10)).await;
    disk.free()?;
    run.outside.poster.mark(false);
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
    let expected = run.outside.plan.updates.len() as u64;
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
