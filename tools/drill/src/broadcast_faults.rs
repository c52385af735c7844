//! Scenario 20, `broadcast-faults`, on both targets: one broadcast to 3,000 recipients through
//! every fault a broadcast meets, the fake Bot API enforcing Telegram's limits, while users write
//! to the bot. The list holds users who blocked the bot, deleted accounts and groups that became
//! supergroups; what runs the job is killed three times mid-job (`tgq local` SIGKILLed and started
//! again; on the emulator every worker container SIGKILLed mid-step and new ones started);
//! Telegram goes away for 30 s (connections refused) and answers 502 for 30 s more; the operator
//! pauses the job at half delivered until the users' updates are answered, and resumes it; then
//! the token is revoked (every call 401) until the job pauses, given back, and the job resumed. Counted per recipient from the fakes: each one reachable gets
//! the message once, nobody twice, nobody skipped; the recipients tgq calls uncertain are calls
//! the fake saw arrive; 0 sends over the limits. This module holds what both targets share: the
//! list, its faults, the waits and the count; `run_local/broadcast.rs` and
//! `run_emulator/broadcast_faults.rs` run the faults on theirs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::bail;
use tgq_fake_telegram::{
    FakeConfig, FakeTelegram, Fault, Limits, RecordedCall, Scope, Times, Violations,
};

use crate::plan::Plan;
use crate::poster::Posted;
use crate::scenarios::no_unexpected_dead;
use crate::tally::{Check, Letter, Resent, Tally};

/// The job's recipients.
const RECIPIENTS: i64 = 3_000;
/// The first recipient's chat id, apart from the users' chats.
const FIRST_RECIPIENT: i64 = 5_000_000;
/// Every this-many-th recipient blocked the bot; every other this-many-th deleted their account.
const BLOCKED_EVERY: i64 = 101;
const DEACTIVATED_EVERY: i64 = 103;
/// Groups of the list that became supergroups: each is followed to its new id.
const MIGRATED: [i64; 5] = [-1_000_001, -1_000_002, -1_000_003, -1_000_004, -1_000_005];
/// The shares of the job delivered at which what runs it is killed.
pub const KILLS_AT: [f64; 3] = [0.1, 0.2, 0.3];
/// The share delivered at which Telegram goes away, and for how long in each of its two ways.
const OUTAGE_AT: f64 = 0.4;
const REFUSED_FOR: Duration = Duration::from_secs(30);
const BAD_GATEWAY_FOR: Duration = Duration::from_secs(30);
/// The share delivered at which the operator pauses the job until the users' updates are
/// answered, then resumes it: the revoked token that follows then always meets a job still
/// sending and no reply waiting, however fast the replies drain beside the job.
pub const HELD_AT: f64 = 0.5;
/// The share delivered from which the token is revoked (after the hold).
const REVOKED_FROM: f64 = 0.7;
/// How long the job may take: its time at the lane's rate, the faults, and as much again.
pub const PATIENCE: Duration = Duration::from_secs(600);
/// The text the job sends.
pub const NEWS: &str = "news";
/// Every this-many-th user update schedules a timer this far ahead (`/later`): replies, timers and
/// the broadcast share the bot's budget and every fault.
pub const TIMER_EVERY: usize = 5;
pub const TIMER_AFTER_MS: u64 = 500;

fn supergroup(group: i64) -> i64 {
    -1_001_000_000_000 + group
}

/// The fake's configuration: Telegram's limits on.
pub fn limited() -> FakeConfig {
    FakeConfig {
        limits: Some(Limits::default()),
        ..FakeConfig::default()
    }
}

/// The job's list, and who on it cannot be reached.
pub struct Audience {
    /// Every chat, in the list's order.
    pub list: Vec<i64>,
    blocked: BTreeSet<i64>,
    deactivated: BTreeSet<i64>,
}

impl Audience {
    /// The scenario's list.
    pub fn new() -> Self {
        let mut list: Vec<i64> = (0..RECIPIENTS).map(|i| FIRST_RECIPIENT + i).collect();
        list.extend(MIGRATED);
        let every = |n: i64| -> BTreeSet<i64> {
            list.iter()
                .copied()
                .filter(|c| *c > 0 && (c - FIRST_RECIPIENT) % n == n - 1)
                .collect()
        };
        let (blocked, deactivated) = (every(BLOCKED_EVERY), every(DEACTIVATED_EVERY));
        Self {
            list,
            blocked,
            deactivated,
        }
    }

    /// Makes `fake` answer as the list's chats are: blocked, deleted, migrated.
    pub fn faults(&self, fake: &FakeTelegram) {
        for chat in &self.blocked {
            fake.inject(Fault::Blocked, Scope::Chat(*chat), Times::Always);
        }
        for chat in &self.deactivated {
            fake.inject(Fault::Deactivated, Scope::Chat(*chat), Times::Always);
        }
        for group in MIGRATED {
            fake.inject(
                Fault::MigrateToChat(supergroup(group)),
                Scope::Chat(group),
                Times::Always,
            );
        }
    }

    /// The recipients who can be reached.
    pub fn reachable(&self) -> usize {
        self.list.len() - self.blocked.len() - self.deactivated.len()
    }

    /// The share of the reachable recipients that `delivered` (messages the fakes took) makes.
    pub fn share(&self, delivered: usize) -> f64 {
        delivered as f64 / self.reachable() as f64
    }

    /// Waits until the news reached `share` of them: `previous` messages the fakes before took,
    /// the others `fake`.
    pub async fn reached(
        &self,
        started: Instant,
        previous: usize,
        fake: &FakeTelegram,
        share: f64,
    ) -> anyhow::Result<()> {
        wait_until(started, || {
            self.share(previous + news(&fake.calls()).count()) >= share
        })
        .await
    }
}

/// Telegram goes away once the news reached [`OUTAGE_AT`] of `audience`, as `fake` answered at
/// `addr`: its connections refused for [`REFUSED_FOR`], then every call answered 502 by an edge in
/// front of it for [`BAD_GATEWAY_FOR`]. What the fake saw before (read once it is down, so a call
/// it answered while it shut down is counted); `fake` is then the one that answers after, with the
/// list's faults.
pub async fn outage(
    started: Instant,
    fake: &mut FakeTelegram,
    addr: std::net::SocketAddr,
    audience: &Audience,
) -> anyhow::Result<Seen> {
    audience.reached(started, 0, fake, OUTAGE_AT).await?;
    fake.clone().shutdown().await;
    let before = (fake.calls(), fake.violations());
    tokio::time::sleep(REFUSED_FOR).await;
    let after = FakeTelegram::start_at(addr, limited()).await?;
    audience.faults(&after);
    after.inject(Fault::ServerError(502), Scope::Global, Times::Always);
    tokio::time::sleep(BAD_GATEWAY_FOR).await;
    after.clear_faults();
    audience.faults(&after);
    *fake = after;
    Ok(before)
}

/// Revokes the bot's token at `fake` (every call 401) once the news reached [`REVOKED_FROM`] of
/// `audience`, `previous` of it taken by the fakes before.
pub async fn revoke(
    started: Instant,
    audience: &Audience,
    previous: usize,
    fake: &FakeTelegram,
) -> anyhow::Result<()> {
    audience
        .reached(started, previous, fake, REVOKED_FROM)
        .await?;
    fake.inject(Fault::Unauthorized, Scope::Global, Times::Always);
    Ok(())
}

/// The chats each broadcast message reached, one per delivery.
pub fn news(calls: &[RecordedCall]) -> impl Iterator<Item = i64> + '_ {
    calls
        .iter()
        .filter(|c| c.method == "sendMessage" && c.is_delivered() && c.params["text"] == NEWS)
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

/// The job as tgq reports it at the end, and when the revoked token paused it.
pub struct Reported {
    /// Its state (`done`, …).
    pub state: String,
    /// Its counts: sent, gone, failed, uncertain.
    pub sent: u64,
    pub gone: u64,
    pub failed: u64,
    pub uncertain: u64,
    /// The chats of its recipients it calls uncertain, each with why.
    pub uncertain_chats: Vec<(i64, String)>,
    /// Its state when it paused for the revoked token, as JSON, and its failed count then.
    pub paused: serde_json::Value,
    pub failed_when_paused: u64,
}

/// The calls and violations of the fake before the outage and the one after, as one.
fn summed(
    (before_calls, before): (&[RecordedCall], &Violations),
    (after_calls, after): (&[RecordedCall], &Violations),
) -> (Vec<RecordedCall>, Violations) {
    let offset = before_calls.last().map_or(0, |c| c.seq);
    let mut calls = before_calls.to_vec();
    calls.extend(after_calls.iter().cloned().map(|mut c| {
        c.seq += offset;
        c
    }));
    let violations = Violations {
        early_sends: before.early_sends + after.early_sends,
        over_limit: before.over_limit + after.over_limit,
        unanswered: before
            .unanswered
            .iter()
            .copied()
            .chain(after.unanswered.iter().map(|seq| seq + offset))
            .collect(),
    };
    (calls, violations)
}

/// What the fake before the outage and the one after saw: their calls and violations.
pub type Seen = (Vec<RecordedCall>, Violations);

/// The run counted: the users' updates ([`Tally`], its checks and the dead letters'), then the
/// broadcast, per recipient, over both fakes.
pub fn counted(
    audience: &Audience,
    (plan, posted): (&Plan, &Posted),
    (before, after): (&Seen, &Seen),
    (letters, resent): (&[Letter], &Resent),
    job: &Reported,
    took: Duration,
) -> (Tally, Vec<Check>) {
    let (calls, violations) = summed((&before.0, &before.1), (&after.0, &after.1));
    let tally = Tally::count(plan, posted, &calls, &violations, letters, resent);
    let mut all = tally.base_checks();
    all.push(no_unexpected_dead(&tally));
    all.push(Check::new(
        "every timer's reply once, after its update's",
        tally.timers > 0 && tally.timers_once == tally.timers,
        format!(
            "{} of {} timers replied once; {} order violations in all",
            tally.timers_once, tally.timers, tally.order_violations
        ),
    ));
    all.extend(checks(
        audience,
        (&before.0, &after.0),
        &violations,
        job,
        took,
    ));
    (tally, all)
}

/// The scenario's own checks, counted per recipient over both fakes' calls.
fn checks(
    audience: &Audience,
    (before_calls, after_calls): (&[RecordedCall], &[RecordedCall]),
    violations: &Violations,
    job: &Reported,
    took: Duration,
) -> Vec<Check> {
    let calls: Vec<&RecordedCall> = before_calls.iter().chain(after_calls).collect();
    let mut delivered: BTreeMap<i64, u64> = BTreeMap::new();
    for chat in news(before_calls).chain(news(after_calls)) {
        *delivered.entry(chat).or_default() += 1;
    }
    let seen: BTreeSet<i64> = calls
        .iter()
        .filter(|c| c.method == "sendMessage" && c.params["text"] == NEWS)
        .filter_map(|c| c.chat_id)
        .collect();
    let expected: BTreeSet<i64> = audience
        .list
        .iter()
        .filter(|c| !audience.blocked.contains(c) && !audience.deactivated.contains(c))
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
    let uncertain = &job.uncertain_chats;
    // Each with why tgq called it uncertain: the call's error, or a send a stopped process began.
    let unseen: Vec<&(i64, String)> = uncertain
        .iter()
        .filter(|(c, _)| !seen.contains(c) && !seen.contains(&supergroup(*c)))
        .collect();
    // Skipped: neither delivered nor uncertain.
    let skipped: Vec<i64> = expected
        .iter()
        .copied()
        .filter(|c| !delivered.contains_key(c))
        .filter(|c| {
            !uncertain
                .iter()
                .any(|(u, _)| u == c || supergroup(*u) == *c)
        })
        .collect();
    let over: Vec<String> = [before_calls, after_calls]
        .iter()
        .flat_map(|calls| over_limits(calls))
        .collect();
    let gone = (audience.blocked.len() + audience.deactivated.len()) as u64;
    vec![
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
            job.state == "done"
                && job.failed == 0
                && job.gone == gone
                && job.sent + job.gone + job.uncertain == audience.list.len() as u64,
            format!(
                "sent {}, gone {} (of {gone} blocked or deleted), failed {}, uncertain {}",
                job.sent, job.gone, job.failed, job.uncertain
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
            job.paused["reason"]
                .as_str()
                .is_some_and(|r| r.contains("Unauthorized"))
                && job.failed_when_paused == 0,
            format!("{}", job.paused),
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
    ]
}

/// Each call of `calls` the fake refused as over the limits: its chat, how long after that
/// chat's previous call, and how many calls of the bot the 1.1 s before it held.
fn over_limits(calls: &[RecordedCall]) -> Vec<String> {
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
                .filter(|p| c.at.saturating_duration_since(p.at) < Duration::from_millis(1100))
                .count();
            format!(
                "chat {:?} {:?} after its last, {window} calls in the 1.1 s before",
                c.chat_id, previous
            )
        })
        .collect()
}
