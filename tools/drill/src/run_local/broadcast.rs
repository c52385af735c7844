//! Scenario 20, `broadcast-faults`, on `tgq local` (`crate::broadcast_faults` has the
//! scenario): the job started and resumed with `tgq broadcast`, `tgq local` SIGKILLed and started
//! again at once on the same data directory and port, Telegram's outage the fake shut down and
//! another started at its address.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::Value;
use tgq_fake_telegram::{FakeTelegram, Fault, Scope, Times};

use super::{base_env, Run};
use crate::broadcast_faults::{
    self, limited, news, wait_until, Audience, HELD_AT, KILLS_AT, NEWS, OUTAGE_AT, PATIENCE,
    REVOKED_FROM, TIMER_AFTER_MS, TIMER_EVERY,
};
use crate::local::LocalTgq;
use crate::plan::Plan;
use crate::poster::Poster;
use crate::scenario::Scenario;
use crate::scenarios::{chats, first_id};
use crate::tally::Row;
use crate::{Options, SECRET};

/// How often the users write to the bot meanwhile.
const INTERACTIVE_EVERY: Duration = Duration::from_millis(150);

/// Runs the scenario.
pub async fn run(s: &Scenario, o: &Options) -> anyhow::Result<Row> {
    let addr: SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let fake = FakeTelegram::start_at(addr, limited()).await?;
    let dir = o.work.join(format!("local-{:02}-{}", s.number, s.name));
    std::fs::create_dir_all(&dir)?;
    let data_dir = dir.join("data");
    let mut tgq = LocalTgq::new(
        &o.exe,
        &data_dir,
        &dir.join("tgq-local.log"),
        base_env(&fake),
    );
    tgq.start().await?;

    // The list, with who cannot be reached.
    let audience = Audience::new();
    audience.faults(&fake);
    let recipients_file = dir.join("recipients.txt");
    let text: String = audience.list.iter().map(|c| format!("{c}\n")).collect();
    std::fs::write(&recipients_file, text)?;

    let plan = Plan::ordinary(o.updates, chats(o), first_id(s), o.seed)
        .with_timers(TIMER_EVERY, TIMER_AFTER_MS);
    let poster = Poster::new(tgq.url("/webhook"), SECRET, Duration::from_secs(300));
    let progress = o.progress.scenario(s, "local", &plan, &poster, &fake);
    let mut run = Run {
        fake,
        tgq,
        poster,
        plan,
        progress,
    };
    let started = Instant::now();
    cli(
        o,
        &data_dir,
        &["broadcast", "start", "--text", NEWS, "--to"],
        &recipients_file,
    )?;
    let posting = {
        let (poster, plan) = (run.poster.clone(), run.plan.clone());
        tokio::spawn(async move { poster.send_paced(&plan, INTERACTIVE_EVERY).await })
    };
    let share = |fakes: &[&FakeTelegram]| {
        audience.share(fakes.iter().map(|f| news(&f.calls()).count()).sum())
    };

    // Three kills, each at once restarted on the same data directory and port.
    for at in KILLS_AT {
        wait_until(started, || share(&[&run.fake]) >= at).await?;
        run.tgq.kill();
        run.tgq.start().await?;
    }

    // Telegram goes away: its connections refused, then 502s from an edge in front of it.
    wait_until(started, || share(&[&run.fake]) >= OUTAGE_AT).await?;
    let (before, after) = broadcast_faults::outage(&run.fake, addr, &audience).await?;
    run.fake = after;

    // The job held from half delivered until the users' updates are answered, then resumed.
    let previous = news(&before.0).count();
    wait_until(started, || {
        audience.share(previous + news(&run.fake.calls()).count()) >= HELD_AT
    })
    .await?;
    cli(o, &data_dir, &["broadcast", "pause", "1"], &dir)?;
    let drain = run.drain(posting).await?;
    cli(o, &data_dir, &["broadcast", "resume", "1"], &dir)?;

    // The token is revoked until the job pauses, then given back, and the job resumed.
    wait_until(started, || {
        audience.share(previous + news(&run.fake.calls()).count()) >= REVOKED_FROM
    })
    .await?;
    run.fake
        .inject(Fault::Unauthorized, Scope::Global, Times::Always);
    let paused = wait_for_state(&run.tgq, started, "paused").await?;
    run.fake.clear_faults();
    audience.faults(&run.fake);
    cli(o, &data_dir, &["broadcast", "resume", "1"], &dir)?;
    let view = wait_for_state(&run.tgq, started, "done").await?;
    let took = started.elapsed();

    // Counted across both fakes: the one before the outage and the one after.
    let after = (run.fake.calls(), run.fake.violations());
    let counts = &view["job"]["counts"];
    let count = |name: &str| counts[name].as_u64().unwrap_or(u64::MAX);
    let reported_job = broadcast_faults::Reported {
        state: view["job"]["state"]["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        sent: count("sent"),
        gone: count("gone"),
        failed: count("failed"),
        uncertain: count("uncertain"),
        uncertain_chats: view["undelivered"]
            .as_array()
            .context("the status lists the undelivered")?
            .iter()
            .filter(|r| r["state"]["state"] == "uncertain")
            .filter_map(|r| r["chat"].as_i64())
            .collect(),
        paused: paused["job"]["state"].clone(),
        failed_when_paused: paused["job"]["counts"]["failed"]
            .as_u64()
            .unwrap_or(u64::MAX),
    };
    let letters = run.tgq.dead_letters().await?;
    let reported = run.tgq.reported().await;
    let (tally, checks) = broadcast_faults::counted(
        &audience,
        (&run.plan, &run.poster.posted()),
        (&before, &after),
        (&letters, &reported.resent),
        &reported_job,
        took,
    );
    run.progress.done();
    run.tgq.stop().await;
    run.fake.clone().shutdown().await;
    Ok(tally.row(s.number, s.name, "local", &reported, drain, checks))
}

/// Waits until job 1 is in `state`; its status then.
async fn wait_for_state(tgq: &LocalTgq, started: Instant, state: &str) -> anyhow::Result<Value> {
    loop {
        if let Ok(view) = tgq.broadcast(1).await {
            if view["job"]["state"]["state"] == state {
                return Ok(view);
            }
        }
        if started.elapsed() > PATIENCE {
            bail!("broadcast 1 was not {state} within {PATIENCE:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `tgq ARGS PATH --data-dir DATA`, as an operator types it, against the running instance.
fn cli(
    o: &Options,
    data_dir: &std::path::Path,
    args: &[&str],
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let mut command = Command::new(&o.exe);
    command.args(args);
    if args.last() == Some(&"--to") {
        command.arg(path);
    }
    let output = command
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .context("running tgq")?;
    if !output.status.success() {
        bail!(
            "tgq {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}
