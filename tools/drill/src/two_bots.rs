//! Scenario 17, `two-bots`, on either target: two bots of one registry (docs/design/fleet.md §2),
//! the real pipeline serving both. The quiet bot posts at a steady pace four times: alone, beside
//! the other bot posting as much while healthy (what its mere traffic costs on this machine), while
//! the noisy bot's chats are in a 429 storm and failing for good, and alone again. Nothing may cross
//! between the bots (no call with one bot's token to the other's chats, no dead letter of the quiet
//! bot), and the quiet bot's end-to-end latency (webhook 200 to its reply at Telegram) beside the
//! failing bot must stay within 10 % of what the target compares it with.
//!
//! The target runs the pipeline (`run_emulator::two_bots`, `run_local`); this module plans the
//! phases, posts them and counts.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use secrecy::SecretString;
use tgq_core::ids::BotId;
use tgq_core::registry::BotEntry;
use tgq_fake_telegram::{FakeTelegram, Fault, RecordedCall, Scope, Times};

use crate::plan::{Expect, Plan, Planned};
use crate::poster::{Posted, Poster};
use crate::tally::{Check, Letter};

/// The bots' ids.
pub const QUIET: &str = "quiet";
pub const NOISY: &str = "noisy";
/// Their webhook secrets.
pub const QUIET_SECRET: &str = "tgq-drill-quiet-secret";
pub const NOISY_SECRET: &str = "tgq-drill-noisy-secret";
/// The noisy bot's token; the quiet bot has the fake's own.
pub const NOISY_TOKEN: &str = "777000:tgq-drill-noisy-token";
/// Both bots post one update every 100 ms: well under Telegram's limits, so that what the quiet
/// bot's latency measures is the pipeline, not a backlog of its own.
const EVERY: Duration = Duration::from_millis(100);
/// The quiet bot's chats; the noisy bot's are all above [`NOISY_CHATS`].
const QUIET_CHATS: i64 = 20;
const NOISY_CHATS: i64 = 900_000;
/// The first update id of each quiet phase and of the noisy bot.
const CONTROL_FIRST: i64 = 50_001;
const SHARED_FIRST: i64 = 100_001;
const SOLO_AGAIN_FIRST: i64 = 200_001;
const NOISY_FIRST: i64 = 500_001;
const NOISY_HEALTHY_FIRST: i64 = 400_001;
/// Each 429 of the storm asks for this many seconds; the worker pauses the noisy bot for as long.
const STORM_RETRY_AFTER: u32 = 2;
/// 429s per storm chat before the storm passes.
const STORM_HITS: u32 = 10;
/// The quiet bot's latency beside the noisy one, at most this times what it is compared with.
pub const TOLERANCE: f64 = 1.10;
/// How long a phase's replies, or the noisy bot's settling, may take.
const PATIENCE: Duration = Duration::from_secs(600);

/// The noisy bot's chats, by what their sends meet.
struct NoisyChats {
    storm: Vec<i64>,
    failing: Vec<i64>,
    calm: Vec<i64>,
}

impl NoisyChats {
    fn new() -> NoisyChats {
        NoisyChats {
            storm: (1..=3).map(|c| NOISY_CHATS + c).collect(),
            failing: (11..=13).map(|c| NOISY_CHATS + c).collect(),
            calm: (21..=24).map(|c| NOISY_CHATS + c).collect(),
        }
    }

    /// `count` updates from `first_id` over every chat in turn; with `failing`, the failing
    /// chats' are expected dead.
    fn plan(&self, count: usize, first_id: i64, failing: bool) -> Plan {
        let chats: Vec<i64> = [&self.storm[..], &self.failing, &self.calm].concat();
        let updates = (0..count)
            .map(|i| {
                let chat = chats[i % chats.len()];
                let expect = match failing && self.failing.contains(&chat) {
                    true => Expect::Dead,
                    false => Expect::Reply,
                };
                Planned::new(
                    first_id + i as i64,
                    chat,
                    format!("noisy c{chat} m{i}"),
                    expect,
                )
            })
            .collect();
        Plan::new(updates)
    }
}

/// The two bots' registry entries, the quiet one with the fake's own token.
pub fn entries(fake: &FakeTelegram) -> anyhow::Result<[BotEntry; 2]> {
    let entry = |id: &str, token: &str, secret: &str| -> anyhow::Result<BotEntry> {
        Ok(BotEntry {
            id: BotId::new(id)?,
            token: Some(SecretString::from(token.to_owned())),
            secret: Some(SecretString::from(secret.to_owned())),
            handler: "echo".to_owned(),
            allowed_updates: Vec::new(),
        })
    };
    Ok([
        entry(QUIET, fake.token(), QUIET_SECRET)?,
        entry(NOISY, NOISY_TOKEN, NOISY_SECRET)?,
    ])
}

/// The phases' boundaries, for a target that measures something of its own in each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Solo,
    BesideHealthy,
    BesideFailing,
    SoloAgain,
}

/// What the phases posted and what came of them.
pub struct Phases {
    solo: Plan,
    control: Plan,
    shared: Plan,
    solo_again: Plan,
    noisy_healthy: Plan,
    noisy_failing: Plan,
    quiet_posted: Posted,
    noisy_posted: Posted,
    /// Whether the noisy bot settled before the last phase, and how long it took.
    noisy_settled: bool,
    noisy_drain: Duration,
    quiet_token: String,
}

/// Posts the four phases to the bots' webhooks at `base` (`{base}{id}`, the id appended), with
/// the faults on `fake` in the third. `ended` is called as each phase's replies are in;
/// `letters` gives every dead letter so far.
pub async fn run_phases(
    fake: &FakeTelegram,
    base: &str,
    updates: usize,
    seed: u64,
    mut ended: impl FnMut(Phase),
    mut letters: impl AsyncFnMut() -> anyhow::Result<Vec<Letter>>,
) -> anyhow::Result<Phases> {
    let quiet = Poster::new(format!("{base}{QUIET}"), QUIET_SECRET, PATIENCE);
    let noisy = Poster::new(format!("{base}{NOISY}"), NOISY_SECRET, PATIENCE);
    let quiet_token = fake.token().to_owned();
    let per_phase = (updates / 3).max(10);
    // The quiet bot's chats come in the same order in every phase: its own pacing (a chat's
    // second update within a second waits, or goes back to the queue) is then the same in each,
    // and only what runs beside it differs.
    let quiet_plan = |first_id| Plan::ordinary(per_phase, QUIET_CHATS, first_id, seed);
    let solo = quiet_plan(1);
    let shared = quiet_plan(SHARED_FIRST);
    let solo_again = quiet_plan(SOLO_AGAIN_FIRST);
    let control = quiet_plan(CONTROL_FIRST);
    let chats = NoisyChats::new();
    let noisy_healthy = chats.plan(per_phase, NOISY_HEALTHY_FIRST, false);
    let noisy_failing = chats.plan(per_phase, NOISY_FIRST, true);

    // Alone.
    quiet.send_paced(&solo, EVERY).await;
    replied(fake, &solo, &quiet_token).await?;
    ended(Phase::Solo);

    // Beside the other bot while it is healthy, at the same pace: what the other bot's mere
    // traffic costs on this machine, to read the next phase against.
    let healthy_sending = beside(
        fake,
        (&quiet, &control, &quiet_token),
        (&noisy, &noisy_healthy),
    )
    .await?;
    ended(Phase::BesideHealthy);
    healthy_sending.await?;
    replied(fake, &noisy_healthy, NOISY_TOKEN).await?;

    // Beside the noisy bot: its storm chats answer 429 (which pauses every send of that bot), its
    // failing chats 400 (a permanent error: dead-lettered), its calm chats are served.
    for &chat in &chats.storm {
        fake.inject(
            Fault::RetryAfter(STORM_RETRY_AFTER),
            Scope::Chat(chat),
            Times::N(STORM_HITS),
        );
    }
    for &chat in &chats.failing {
        fake.inject(Fault::BadRequest, Scope::Chat(chat), Times::Always);
    }
    let noisy_sending = beside(
        fake,
        (&quiet, &shared, &quiet_token),
        (&noisy, &noisy_failing),
    )
    .await?;
    ended(Phase::BesideFailing);
    noisy_sending.await?;

    // The noisy bot catches up before the quiet one runs alone again.
    let started = Instant::now();
    let mut noisy_settled = false;
    while started.elapsed() < PATIENCE {
        if noisy_done(fake, &noisy_failing, &letters().await?) {
            noisy_settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let noisy_drain = started.elapsed();
    quiet.send_paced(&solo_again, EVERY).await;
    replied(fake, &solo_again, &quiet_token).await?;
    ended(Phase::SoloAgain);
    Ok(Phases {
        solo,
        control,
        shared,
        solo_again,
        noisy_healthy,
        noisy_failing,
        quiet_posted: quiet.posted(),
        noisy_posted: noisy.posted(),
        noisy_settled,
        noisy_drain,
        quiet_token,
    })
}

/// Posts the quiet bot's `plan` while the noisy bot posts its own at the same pace, and waits for
/// the quiet bot's replies; the noisy bot's posting is handed back, still going.
async fn beside(
    fake: &FakeTelegram,
    (quiet, plan, quiet_token): (&Poster, &Plan, &str),
    (noisy, noisy_plan): (&Poster, &Plan),
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let sending = {
        let (noisy, plan) = (noisy.clone(), noisy_plan.clone());
        tokio::spawn(async move { noisy.send_paced(&plan, EVERY).await })
    };
    quiet.send_paced(plan, EVERY).await;
    replied(fake, plan, quiet_token).await?;
    Ok(sending)
}

/// What the quiet bot's latency beside the failing bot is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Against {
    /// Its latency beside the same bot healthy, same traffic, same run (the emulator, where the
    /// other bot's mere traffic on one moto costs the quiet bot more than anything it does).
    Healthy,
    /// Its latency alone, and beside the same bot healthy.
    SoloAndHealthy,
}

/// The quiet bot's latencies, in milliseconds.
pub struct Latencies {
    pub solo_p50: f64,
    pub solo_p95: f64,
    pub first_p50: f64,
    pub second_p50: f64,
    pub control_p50: f64,
    pub shared_p50: f64,
    pub shared_p95: f64,
    pub solo: usize,
    pub shared: usize,
}

impl Phases {
    /// Every update of both bots, by update id, and everything both posters saw.
    pub fn everything(&self) -> (Plan, Posted) {
        let mut everything = Plan::default();
        for plan in [
            &self.solo,
            &self.control,
            &self.shared,
            &self.solo_again,
            &self.noisy_healthy,
            &self.noisy_failing,
        ] {
            everything.updates.extend(plan.updates.iter().cloned());
        }
        everything.updates.sort_by_key(|p| p.update_id);
        let mut posted = self.quiet_posted.clone();
        merge(&mut posted, &self.noisy_posted);
        (everything, posted)
    }

    /// The quiet bot's latencies in each phase, from `calls`.
    pub fn latencies(&self, calls: &[RecordedCall]) -> Latencies {
        let latency = |plan: &Plan| latencies(plan, &self.quiet_posted, calls, &self.quiet_token);
        let first_solo = latency(&self.solo);
        let second_solo = latency(&self.solo_again);
        let (first_p50, second_p50) = (percentile(&first_solo, 0.5), percentile(&second_solo, 0.5));
        let mut solo = first_solo;
        solo.extend(second_solo);
        let shared = latency(&self.shared);
        Latencies {
            solo_p50: percentile(&solo, 0.5),
            solo_p95: percentile(&solo, 0.95),
            first_p50,
            second_p50,
            control_p50: percentile(&latency(&self.control), 0.5),
            shared_p50: percentile(&shared, 0.5),
            shared_p95: percentile(&shared, 0.95),
            solo: solo.len(),
            shared: shared.len(),
        }
    }

    /// The scenario's own checks: the noisy bot's faults met and settled, nothing crossing, and
    /// the latency figure against `against`. `dead_expected` and `unexpected_dead` are the tally's;
    /// `moto` adds what the emulator measured of its own answers.
    pub fn checks(
        &self,
        calls: &[RecordedCall],
        letters: &[Letter],
        (dead_expected, unexpected_dead): (u64, u64),
        against: Against,
        moto: Option<String>,
    ) -> Vec<Check> {
        let storm_429s = calls
            .iter()
            .filter(|c| c.token == NOISY_TOKEN && c.status == 429)
            .count();
        let crossings = calls
            .iter()
            .filter(|c| c.method == "sendMessage")
            .filter(|c| match c.chat_id {
                Some(chat) if chat > NOISY_CHATS => c.token != NOISY_TOKEN,
                Some(_) => c.token != self.quiet_token,
                None => false,
            })
            .count();
        let quiet_letters = letters
            .iter()
            .filter(|l| l.bot.as_deref() != Some(NOISY))
            .count();
        let l = self.latencies(calls);
        let within = |p50: f64, of: f64| l.shared > 0 && p50 <= of * TOLERANCE;
        let (required, met) = match against {
            Against::Healthy => (
                "beside the same bot healthy",
                within(l.shared_p50, l.control_p50),
            ),
            Against::SoloAndHealthy => (
                "alone and beside the same bot healthy",
                within(l.shared_p50, l.solo_p50) && within(l.shared_p50, l.control_p50),
            ),
        };
        vec![
            Check::new(
                "every update of both bots acknowledged",
                self.quiet_posted.given_up.is_empty() && self.noisy_posted.given_up.is_empty(),
                format!(
                    "{} given up",
                    self.quiet_posted.given_up.len() + self.noisy_posted.given_up.len()
                ),
            ),
            Check::new(
                "the noisy bot's storm and failures were met",
                storm_429s > 0 && dead_expected > 0,
                format!(
                    "{storm_429s} answers 429 to the noisy bot; {dead_expected} of its updates dead-lettered (400)"
                ),
            ),
            Check::new(
                "the noisy bot settled: its storm chats served once the storm passed, its failing chats dead-lettered",
                self.noisy_settled,
                format!("in {:.1} s", self.noisy_drain.as_secs_f64()),
            ),
            Check::new(
                "nothing crossed between the bots",
                crossings == 0 && quiet_letters == 0 && unexpected_dead == 0,
                format!(
                    "{crossings} sends with one bot's token to the other's chats; {quiet_letters} dead \
                     letters not of the noisy bot; {unexpected_dead} unexpected dead letters"
                ),
            ),
            Check::new(
                format!(
                    "the quiet bot's median latency beside the failing bot within {:.0} % of {required}",
                    (TOLERANCE - 1.0) * 100.0
                ),
                met,
                format!(
                    "beside the failing bot p50 {:.0} ms, p95 {:.0} ms ({} replies); beside it healthy \
                     p50 {:.0} ms ({:+.1} %); alone p50 {:.0} ms, p95 {:.0} ms ({} replies; p50 {:.0} ms \
                     before, {:.0} ms after; {:+.1} %){}",
                    l.shared_p50,
                    l.shared_p95,
                    l.shared,
                    l.control_p50,
                    (l.shared_p50 / l.control_p50 - 1.0) * 100.0,
                    l.solo_p50,
                    l.solo_p95,
                    l.solo,
                    l.first_p50,
                    l.second_p50,
                    (l.shared_p50 / l.solo_p50 - 1.0) * 100.0,
                    moto.map(|m| format!("; {m}")).unwrap_or_default(),
                ),
            ),
        ]
    }
}

/// Waits until every update of `plan` has its reply from the bot with `token`.
async fn replied(fake: &FakeTelegram, plan: &Plan, token: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let calls = fake.calls();
        let answered = replies(&calls, token);
        if plan
            .updates
            .iter()
            .all(|p| answered.contains_key(&p.update_id))
        {
            return Ok(());
        }
        if started.elapsed() > PATIENCE {
            anyhow::bail!(
                "the {} bot did not answer every update within {} s",
                if token == NOISY_TOKEN { NOISY } else { QUIET },
                PATIENCE.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The first reply to each update, by update id, of the bot with `token`.
fn replies<'c>(calls: &'c [RecordedCall], token: &str) -> HashMap<i64, &'c RecordedCall> {
    let mut first = HashMap::new();
    for call in calls
        .iter()
        .filter(|c| c.token == token && c.is_delivered() && c.method == "sendMessage")
    {
        if let Some(id) = call.params["text"]
            .as_str()
            .and_then(crate::tally::echo_update_id)
        {
            first.entry(id).or_insert(call);
        }
    }
    first
}

/// Whether the noisy bot answered each of its updates that expects an answer and dead-lettered
/// the others.
fn noisy_done(fake: &FakeTelegram, plan: &Plan, letters: &[Letter]) -> bool {
    let calls = fake.calls();
    let answered = replies(&calls, NOISY_TOKEN);
    plan.updates.iter().all(|p| match p.expect {
        Expect::Dead => letters.iter().any(|l| l.update_id == Some(p.update_id)),
        _ => answered.contains_key(&p.update_id),
    })
}

/// Milliseconds from each update's 200 to its reply at Telegram.
/// How long each update of `plan` the bot of `token` answered took, from the webhook's 2xx to the
/// reply, in milliseconds.
pub(crate) fn latencies(
    plan: &Plan,
    posted: &Posted,
    calls: &[RecordedCall],
    token: &str,
) -> Vec<f64> {
    let answered = replies(calls, token);
    plan.updates
        .iter()
        .filter_map(|p| {
            let acknowledged = posted.acknowledged.get(&p.update_id)?;
            let reply = answered.get(&p.update_id)?;
            Some(
                reply
                    .at
                    .saturating_duration_since(*acknowledged)
                    .as_secs_f64()
                    * 1000.0,
            )
        })
        .collect()
}

/// The `q` quantile (nearest rank) of `values`; 0 when there are none.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn merge(into: &mut Posted, other: &Posted) {
    into.acknowledged
        .extend(other.acknowledged.iter().map(|(id, at)| (*id, *at)));
    for (status, n) in &other.statuses {
        *into.statuses.entry(*status).or_default() += n;
    }
    into.given_up.extend(other.given_up.iter().copied());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percentile_is_the_nearest_rank() {
        let values = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&values, 0.5), 3.0);
        assert_eq!(percentile(&values, 0.95), 5.0);
        assert_eq!(percentile(&values, 0.0), 1.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn the_noisy_plan_expects_its_failing_chats_dead_and_the_others_answered() {
        let chats = NoisyChats::new();
        let plan = chats.plan(20, NOISY_FIRST, true);
        assert!(plan.updates.iter().all(|p| p.chat > NOISY_CHATS));
        let dead: Vec<i64> = plan
            .updates
            .iter()
            .filter(|p| p.expect == Expect::Dead)
            .map(|p| p.chat)
            .collect();
        assert!(!dead.is_empty() && dead.iter().all(|c| chats.failing.contains(c)));
    }
}
