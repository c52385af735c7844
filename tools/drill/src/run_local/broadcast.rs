//! Scenario 20, `broadcast-faults`, on `tgq local` (`crate::broadcast_faults` has the
//! scenario): the job started and resumed with `tgq broadcast`, `tgq local` SIGKILLed and started
//! again at once on the same data directory and port, Telegram's outage the fake shut down and
//! another started at its address.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::Value;
use tgq_fake_telegram::FakeTelegram;

use super::{scenario_dir, start_tgq, Run};
use crate::broadcast_faults::{
    self, limited, news, Audience, HELD_AT, KILLS_AT, NEWS, PATIENCE, TIMER_AFTER_MS, TIMER_EVERY,
};
use crate::local::LocalTgq;
use crate::plan::Plan;
use crate::scenario::Scenario;
use crate::scenarios::{chats, first_id, Inside, Outside, Pipeline};
use crate::tally::Row;
use crate::Options;

/// How often the users write to the bot meanwhile.
const INTERACTIVE_EVERY: Duration = Duration::from_millis(150);

/// Runs the scenario.
pub async fn run(s: &Scenario, o: &Options) -> anyhow::Result<Row> {
    let addr: SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let fake = FakeTelegram::start_at(addr, limited()).await?;
    let dir = scenario_dir(s, o);
    std::fs::create_dir_all(&dir)?;
    let data_dir = dir.join("data");
    let tgq = start_tgq(o, &dir, &data_dir, &fake, &[]).await?;

    // The list, with who cannot be reached.
    let audience = Audience::new();
    audience.faults(&fake);
    let recipients_file = dir.join("recipients.txt");
    let text: String = audience.list.iter().map(|c| format!("{c}\n")).collect();
    std::fs::write(&recipients_file, text)?;

    let plan = Plan::ordinary(o.updates, chats(o), first_id(s), o.seed)
        .with_timers(TIMER_EVERY, TIMER_AFTER_MS);
    let url = tgq.url("/webhook");
    let outside = Outside::new(s, o, Run::TARGET, plan, fake, url);
    let mut run = Run { outside, tgq };
    let started = Instant::now();
    cli(
        o,
        &data_dir,
        &["broadcast", "start", "--text", NEWS, "--to"],
        &recipients_file,
    )?;
    let posting = {
        let (poster, plan) = (run.outside.poster.clone(), run.outside.plan.clone());
        tokio::spawn(async move { poster.send_paced(&plan, INTERACTIVE_EVERY).await })
    };

    // Three kills, each at once restarted on the same data directory and port.
    for at in KILLS_AT {
        audience.reached(started, 0, &run.outside.fake, at).await?;
        run.tgq.kill();
        run.tgq.start().await?;
    }

    // Telegram goes away: its connections refused, then 502s from an edge in front of it.
    let before = broadcast_faults::outage(started, &mut run.outside.fake, addr, &audience).await?;

    // The job held from half delivered until the users' updates are answered, then resumed.
    let previous = news(&before.0).count();
    audience
        .reached(started, previous, &run.outside.fake, HELD_AT)
        .await?;
    cli(o, &data_dir, &["broadcast", "pause", "1"], &dir)?;
    let drain = run.drain(posting).await?;
    cli(o, &data_dir, &["broadcast", "resume", "1"], &dir)?;

    // The token is revoked until the job pauses, then given back, and the job resumed.
    broadcast_faults::revoke(started, &audience, previous, &run.outside.fake).await?;
    let paused = wait_for_state(&run.tgq, started, "paused").await?;
    run.outside.fake.clear_faults();
    audience.faults(&run.outside.fake);
    cli(o, &data_dir, &["broadcast", "resume", "1"], &dir)?;
    let view = wait_for_state(&run.tgq, started, "done").await?;
    let took = started.elapsed();

    // Counted across both fakes: the one before the outage and the one after.
    let after = (run.outside.fake.calls(), run.outside.fake.violations());
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
            .filter_map(|r| {
                let why = r["state"]["why"].as_str().unwrap_or("not kept");
                Some((r["chat"].as_i64()?, why.to_owned()))
            })
            .collect(),
        paused: paused["job"]["state"].clone(),
        failed_when_paused: paused["job"]["counts"]["failed"]
            .as_u64()
            .unwrap_or(u64::MAX),
    };
    let Inside {
        letters, reported, ..
    } = run.inside().await?;
    let (tally, checks) = broadcast_faults::counted(
        &audience,
        (&run.outside.plan, &run.outside.poster.posted()),
        (&before, &after),
        (&letters, &reported.resent),
        &reported_job,
        took,
    );
    let row = tally.row(s.number, s.name, Run::TARGET, &reported, drain, checks);
    run.stop().await;
    Ok(row)
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
