//! Scenario 20, `broadcast-faults` (local): one broadcast of `tgq local` to 3,000 recipients
//! through every fault a broadcast meets, the fake Bot API enforcing Telegram's limits, while users
//! write to the bot. The list holds users who blocked the bot, deleted accounts and groups that
//! became supergroups; the process is killed three times mid-job (SIGKILL, restarted at once);
//! Telegram goes away for 30 s (connections refused) and answers 502 for 30 s more; then, once the
//! users' updates are answered, the token is revoked (every call 401) until the job pauses, given
//! back, and the job resumed with `tgq broadcast resume`. Counted per recipient from the fake: each
//! one reachable gets the message once, nobody twice, nobody skipped; the recipients tgq calls
//! uncertain are calls the fake saw arrive; 0 sends over the limits.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::Value;
use tgq_fake_telegram::{
    FakeConfig, FakeTelegram, Fault, Limits, RecordedCall, Scope, Times, Violations,
};

use super::{base_env, Run};
use crate::local::LocalTgq;
use crate::plan::Plan;
use crate::poster::Poster;
use crate::scenario::Scenario;
use crate::scenarios::{chats, first_id, no_unexpected_dead};
use crate::tally::{Check, Row, Tally};
use crate::{Options, SECRET};

/// The job's recipients.
const RECIPIENTS: i64 = 3_000;
/// The first recipient's chat id, apart from the users' chats.
const FIRST_RECIPIENT: i64 = 5_000_000;
/// Every this-many-th recipient blocked the bot; every other this-many-th deleted their account.
const BLOCKED_EVERY: i64 = 101;
const DEACTIVATED_EVERY: i64 = 103;
/// Groups of the list that became supergroups: each is followed to its new id.
const MIGRATED: [i64; 5] = [-1_000_001, -1_000_002, -1_000_003, -1_000_004, -1_000_005];
/// The shares of the job delivered at which `tgq local` is killed.
const KILLS_AT: [f64; 3] = [0.1, 0.2, 0.3];
/// The share delivered at which Telegram goes away, and for how long in each of its two ways.
const OUTAGE_AT: f64 = 0.4;
const REFUSED_FOR: Duration = Duration::from_secs(30);
const BAD_GATEWAY_FOR: Duration = Duration::from_secs(30);
/// The share delivered from which the token is revoked (once the users' updates are answered).
const REVOKED_FROM: f64 = 0.7;
/// How often the users write to the bot meanwhile.
const INTERACTIVE_EVERY: Duration = Duration::from_millis(150);
/// How long the job may take: its time at the lane's rate, the faults, and as much again.
const PATIENCE: Duration = Duration::from_secs(600);

fn supergroup(group: i64) -> i64 {
    -1_001_000_000_000 + group
}

/// Runs the scenario.
pub async fn run(s: &Scenario, o: &Options) -> anyhow::Result<Row> {
    let addr: SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let limited = || FakeConfig {
        limits: Some(Limits::default()),
        ..FakeConfig::default()
    };
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
    let mut list: Vec<i64> = (0..RECIPIENTS).map(|i| FIRST_RECIPIENT + i).collect();
    list.extend(MIGRATED);
    let blocked: BTreeSet<i64> = list
        .iter()
        .copied()
        .filter(|c| *c > 0 && (c - FIRST_RECIPIENT) % BLOCKED_EVERY == BLOCKED_EVERY - 1)
        .collect();
    let deactivated: BTreeSet<i64> = list
        .iter()
        .copied()
        .filter(|c| *c > 0 && (c - FIRST_RECIPIENT) % DEACTIVATED_EVERY == DEACTIVATED_EVERY - 1)
        .collect();
    let faults = |fake: &FakeTelegram| {
        for chat in &blocked {
            fake.inject(Fault::Blocked, Scope::Chat(*chat), Times::Always);
        }
        for chat in &deactivated {
            fake.inject(Fault::Deactivated, Scope::Chat(*chat), Times::Always);
        }
        for group in MIGRATED {
            fake.inject(
                Fault::MigrateToChat(supergroup(group)),
                Scope::Chat(group),
                Times::Always,
            );
        }
    };
    faults(&fake);
    let recipients_file = dir.join("recipients.txt");
    let text: String = list.iter().map(|c| format!("{c}\n")).collect();
    std::fs::write(&recipients_file, text)?;

    let plan = Plan::ordinary(o.updates, chats(o), first_id(s), o.seed);
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
        &["broadcast", "start", "--text", "news", "--to"],
        &recipients_file,
    )?;
    let posting = {
        let (poster, plan) = (run.poster.clone(), run.plan.clone());
        tokio::spawn(async move { poster.send_paced(&plan, INTERACTIVE_EVERY).await })
    };
    let reachable = list.len() - blocked.len() - deactivated.len();
    let share = |fakes: &[&FakeTelegram]| {
        let delivered: usize = fakes.iter().map(|f| news(&f.calls()).count()).sum();
        delivered as f64 / reachable as f64
    };

    // Three kills, each at once restarted on the same data directory and port.
    for at in KILLS_AT {
        wait_until(started, || share(&[&run.fake]) >= at).await?;
        run.tgq.kill();
        run.tgq.start().await?;
    }

    // Telegram goes away: its connections refused, then 502s from an edge in front of it.
    wait_until(started, || share(&[&run.fake]) >= OUTAGE_AT).await?;
    // Read once it is down: a call it answered while it shut down is counted.
    run.fake.clone().shutdown().await;
    let before_calls = run.fake.calls();
    let before_violations = run.fake.violations();
    tokio::time::sleep(REFUSED_FOR).await;
    let after = FakeTelegram::start_at(addr, limited()).await?;
    faults(&after);
    after.inject(Fault::ServerError(502), Scope::Global, Times::Always);
    tokio::time::sleep(BAD_GATEWAY_FOR).await;
    after.clear_faults();
    faults(&after);
    run.fake = after;

    // The users' updates answered, the token is revoked until the job pauses, then given back.
    let sending = posting;
    let drain = run.drain(sending).await?;
    let previous = news(&before_calls).count();
    wait_until(started, || {
        (previous + news(&run.fake.calls()).count()) as f64 / reachable as f64 >= REVOKED_FROM
    })
    .await?;
    run.fake
        .inject(Fault::Unauthorized, Scope::Global, Times::Always);
    let paused = wait_for_state(&run.tgq, started, "paused").await?;
    run.fake.clear_faults();
    faults(&run.fake);
    cli(o, &data_dir, &["broadcast", "resume", "1"], &dir)?;
    let view = wait_for_state(&run.tgq, started, "done").await?;
    let took = started.elapsed();

    // Counted across both fakes: the one before the outage and the one after.
    let after_calls = run.fake.calls();
    let offset = before_calls.last().map_or(0, |c| c.seq);
    let mut calls = before_calls.clone();
    calls.extend(after_calls.iter().cloned().map(|mut c| {
        c.seq += offset;
        c
    }));
    let after_violations = run.fake.violations();
    let violations = Violations {
        early_sends: before_violations.early_sends + after_violations.early_sends,
        over_limit: before_violations.over_limit + after_violations.over_limit,
        unanswered: before_violations
            .unanswered
            .iter()
            .copied()
            .chain(after_violations.unanswered.iter().map(|seq| seq + offset))
            .collect(),
    };
    let mut delivered: BTreeMap<i64, u64> = BTreeMap::new();
    for chat in news(&calls) {
        *delivered.entry(chat).or_default() += 1;
    }
    let seen: BTreeSet<i64> = calls
        .iter()
        .filter(|c| c.method == "sendMessage" && c.params["text"] == "news")
        .filter_map(|c| c.chat_id)
        .collect();
    let expected: BTreeSet<i64> = list
        .iter()
        .filter(|c| !blocked.contains(c) && !deactivated.contains(c))
        .map(|c| {
            if MIGRATED.contains(c) {
                supergroup(*c)
            } else {
                *c
            }
        })
        .collect();
    let once = expected
        .iter()
        .filter(|c| delivered.get(c) == Some(&1))
        .count();
    let twice: Vec<i64> = delivered
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(c, _)| *c)
        .collect();
    let uncertain: Vec<i64> = view["undelivered"]
        .as_array()
        .context("the status lists the undelivered")?
        .iter()
        .filter(|r| r["state"]["state"] == "uncertain")
        .filter_map(|r| r["chat"].as_i64())
        .collect();
    let unseen: Vec<i64> = uncertain
        .iter()
        .copied()
        .filter(|c| !seen.contains(c) && !seen.contains(&supergroup(*c)))
        .collect();
    // Skipped: neither delivered nor uncertain.
    let skipped: Vec<i64> = expected
        .iter()
        .copied()
        .filter(|c| !delivered.contains_key(c))
        .filter(|c| !uncertain.iter().any(|u| u == c || supergroup(*u) == *c))
        .collect();
    // Each call the fake refused as over the limits: its chat, how long after that chat's
    // previous call, and how many calls of the bot the 1.1 s before it held.
    let over: Vec<String> = [&before_calls[..], &after_calls[..]]
        .iter()
        .flat_map(|calls| {
            calls
                .iter()
                .enumerate()
                .filter(|(_, c)| c.status == 429 && c.params["text"].is_string())
                .map(|(i, c)| {
                    let earlier = &calls[..i];
                    let previous = earlier
                        .iter()
                        .rev()
                        .find(|p| p.chat_id == c.chat_id && p.is_delivered())
                        .map(|p| c.at.saturating_duration_since(p.at));
                    let window = earlier
                        .iter()
                        .filter(|p| {
                            c.at.saturating_duration_since(p.at) < Duration::from_millis(1100)
                        })
                        .count();
                    format!(
                        "chat {:?} {:?} after its last, {window} calls in the 1.1 s before",
                        c.chat_id, previous
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let counts = &view["job"]["counts"];
    let count = |name: &str| counts[name].as_u64().unwrap_or(u64::MAX);
    let gone = (blocked.len() + deactivated.len()) as u64;

    let letters = run.tgq.dead_letters().await?;
    let reported = run.tgq.reported().await;
    let posted = run.poster.posted();
    let tally = Tally::count(
        &run.plan,
        &posted,
        &calls,
        &violations,
        &letters,
        &reported.resent,
    );
    let mut checks = tally.base_checks();
    checks.extend([
        no_unexpected_dead(&tally),
        Check::new(
            "each reachable recipient once, nobody twice, nobody skipped",
            twice.is_empty() && skipped.is_empty(),
            format!(
                "{once} of {} once (the {} migrated groups at their new ids), twice {twice:?}, \
                 skipped {skipped:?}; {} s from the start to the job's end",
                expected.len(),
                MIGRATED.len(),
                took.as_secs()
            ),
        ),
        Check::new(
            "the job done: nobody failed, the unreachable gone, every recipient counted once",
            view["job"]["state"]["state"] == "done"
                && count("failed") == 0
                && count("gone") == gone
                && count("sent") + count("gone") + count("uncertain") == list.len() as u64,
            format!(
                "sent {}, gone {} (of {gone} blocked or deleted), failed {}, uncertain {}",
                count("sent"),
                count("gone"),
                count("failed"),
                count("uncertain")
            ),
        ),
        Check::new(
            "uncertain only for calls the fake saw arrive (in flight at a kill)",
            unseen.is_empty() && uncertain.len() <= 3 * 8,
            format!(
                "{} uncertain over {} kills, {} of them never seen at the fake: {unseen:?}",
                uncertain.len(),
                KILLS_AT.len(),
                unseen.len()
            ),
        ),
        Check::new(
            "the revoked token paused the job with Telegram's words, failing nobody",
            paused["job"]["state"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("Unauthorized"))
                && paused["job"]["counts"]["failed"] == 0,
            format!("{}", paused["job"]["state"]),
        ),
        Check::new(
            "0 sends over Telegram's limits, 0 inside a wait",
            violations.over_limit == 0 && violations.early_sends == 0,
            format!(
                "{} over the limits {over:?}, {} inside a wait (the two fakes summed; a window \
                 across the outage is not checked)",
                violations.over_limit, violations.early_sends
            ),
        ),
    ]);
    run.progress.done();
    run.tgq.stop().await;
    run.fake.clone().shutdown().await;
    Ok(tally.row(s.number, s.name, "local", &reported, drain, checks))
}

/// The chats each broadcast message reached, one per delivery.
fn news(calls: &[RecordedCall]) -> impl Iterator<Item = i64> + '_ {
    calls
        .iter()
        .filter(|c| c.method == "sendMessage" && c.is_delivered() && c.params["text"] == "news")
        .filter_map(|c| c.chat_id)
}

/// Waits until `done`, within the scenario's patience.
async fn wait_until(started: Instant, mut done: impl FnMut() -> bool) -> anyhow::Result<()> {
    while !done() {
        if started.elapsed() > PATIENCE {
            bail!("the broadcast made no progress within {PATIENCE:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
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
