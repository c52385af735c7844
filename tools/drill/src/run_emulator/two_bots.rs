//! Scenario 17, `two-bots` (emulator only): two bots of one stack's registry (docs/ARCHITECTURE.md
//! §11), the real functions serving both. The quiet bot posts at a steady pace four times: alone,
//! beside the other bot posting as much while healthy (what its mere traffic costs on this machine),
//! while the noisy bot's chats are in a 429 storm and failing for good, and alone again. The quiet
//! bot's end-to-end latency (webhook 200 to its reply at Telegram) while the noisy one struggles
//! must stay within 10 % of its solo median, and nothing may cross between the bots: no call with
//! one bot's token to the other's chats, no dead letter of the quiet bot.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use secrecy::SecretString;
use tgq_aws::SsmRegistry;
use tgq_core::ids::BotId;
use tgq_core::registry::{BotEntry, Layout};
use tgq_e2e::proxy::AnswerTimes;
use tgq_fake_telegram::{FakeTelegram, Fault, RecordedCall, Scope, Times};

use super::{note_mapping, Emulator, Run, DRAIN_LIMIT};
use crate::plan::{Expect, Plan, Planned};
use crate::poster::{Posted, Poster};
use crate::scenario::Scenario;
use crate::tally::{echo_update_id, Check, Letter, Row, Tally};
use crate::Options;

const QUIET: &str = "quiet";
const NOISY: &str = "noisy";
const QUIET_SECRET: &str = "tgq-drill-quiet-secret";
const NOISY_SECRET: &str = "tgq-drill-noisy-secret";
/// The noisy bot's token; the quiet bot has the fake's own.
const NOISY_TOKEN: &str = "777000:tgq-drill-noisy-token";
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
/// The mapping's invocations at once: template.yaml's `WorkerMaxConcurrency` default, as a
/// stack hosting several bots runs.
const CONCURRENCY: usize = 5;
/// The quiet bot's latency beside the noisy one, at most this times its solo median.
const TOLERANCE: f64 = 1.10;

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
                Planned {
                    update_id: first_id + i as i64,
                    chat,
                    text: format!("noisy c{chat} m{i}"),
                    expect: match failing && self.failing.contains(&chat) {
                        true => Expect::Dead,
                        false => Expect::Reply,
                    },
                    padding: 0,
                }
            })
            .collect();
        Plan {
            updates,
            poison: Vec::new(),
        }
    }
}

fn entry(id: &str, token: &str, secret: &str) -> anyhow::Result<BotEntry> {
    Ok(BotEntry {
        id: BotId::new(id)?,
        token: Some(SecretString::from(token.to_owned())),
        secret: Some(SecretString::from(secret.to_owned())),
        handler: "echo".to_owned(),
        allowed_updates: Vec::new(),
    })
}

/// Runs the scenario.
pub async fn run(s: &Scenario, o: &Options, em: &Emulator) -> anyhow::Result<Row> {
    // No rate limits at the fake: Telegram limits each bot on its own, the fake its whole server.
    let fake = FakeTelegram::start().await?;
    fake.accept_token(NOISY_TOKEN);
    let prefix = format!(
        "/tgq/drill-{}-{}/bots/",
        std::process::id(),
        rand::random::<u32>()
    );
    let registry = SsmRegistry::new(aws_sdk_ssm::Client::new(&em.sdk), Layout::new(&prefix)?);
    registry
        .put(&entry(QUIET, fake.token(), QUIET_SECRET)?)
        .await?;
    registry
        .put(&entry(NOISY, NOISY_TOKEN, NOISY_SECRET)?)
        .await?;
    let quiet_token = fake.token().to_owned();

    let mut run = Run::start_with(
        s,
        o,
        em,
        Plan::default(),
        fake,
        &[("TGQ_BOTS_PARAMETER_PREFIX", prefix.as_str())],
        CONCURRENCY,
    )
    .await?;
    // A container for each of the mapping's invocations at once, as on Lambda.
    for _ in 1..CONCURRENCY {
        run.new_worker().await?;
    }
    let patience = Duration::from_secs(600);
    let quiet = Poster::new(
        format!("{}webhook/{QUIET}", run.webhook_url),
        QUIET_SECRET,
        patience,
    );
    let noisy = Poster::new(
        format!("{}webhook/{NOISY}", run.webhook_url),
        NOISY_SECRET,
        patience,
    );
    let per_phase = (o.updates / 3).max(10);
    // The quiet bot's chats come in the same order in every phase: its own pacing (a chat's
    // second update within a second waits, or goes back to the queue) is then the same in each,
    // and only what runs beside it differs.
    let quiet_plan = |first_id| Plan::ordinary(per_phase, QUIET_CHATS, first_id, o.seed);
    let solo = quiet_plan(1);
    let shared = quiet_plan(SHARED_FIRST);
    let solo_again = quiet_plan(SOLO_AGAIN_FIRST);
    let control = quiet_plan(CONTROL_FIRST);
    let chats = NoisyChats::new();
    let noisy_healthy = chats.plan(per_phase, NOISY_HEALTHY_FIRST, false);
    let noisy_plan = chats.plan(per_phase, NOISY_FIRST, true);

    // What moto took to answer the worker's DynamoDB calls in each phase: the emulator's share
    // of the quiet bot's latency, which the other bot's calls raise on this machine.
    let dynamo = |times: AnswerTimes| dynamo_median(&times);
    run.worker_proxy.take_answer_times();

    // Alone.
    quiet.send_paced(&solo, EVERY).await;
    replied(&run.fake, &solo, &quiet_token).await?;
    let solo_dynamo = dynamo(run.worker_proxy.take_answer_times());

    // Beside the other bot while it is healthy, at the same pace: what the other bot's mere
    // traffic costs on this machine (one moto, two cores), to read the next phase against.
    let healthy_sending = {
        let (noisy, plan) = (noisy.clone(), noisy_healthy.clone());
        tokio::spawn(async move { noisy.send_paced(&plan, EVERY).await })
    };
    quiet.send_paced(&control, EVERY).await;
    replied(&run.fake, &control, &quiet_token).await?;
    let control_dynamo = dynamo(run.worker_proxy.take_answer_times());
    healthy_sending.await?;
    replied(&run.fake, &noisy_healthy, NOISY_TOKEN).await?;

    // Beside the noisy bot: its storm chats answer 429 (which pauses every send of that bot), its
    // failing chats 400 (a permanent error: dead-lettered), its calm chats are served.
    for &chat in &chats.storm {
        run.fake.inject(
            Fault::RetryAfter(STORM_RETRY_AFTER),
            Scope::Chat(chat),
            Times::N(STORM_HITS),
        );
    }
    for &chat in &chats.failing {
        run.fake
            .inject(Fault::BadRequest, Scope::Chat(chat), Times::Always);
    }
    let noisy_sending = {
        let (noisy, plan) = (noisy.clone(), noisy_plan.clone());
        tokio::spawn(async move { noisy.send_paced(&plan, EVERY).await })
    };
    run.worker_proxy.take_answer_times();
    quiet.send_paced(&shared, EVERY).await;
    replied(&run.fake, &shared, &quiet_token).await?;
    let shared_dynamo = dynamo(run.worker_proxy.take_answer_times());
    noisy_sending.await?;

    // The noisy bot catches up before the quiet one runs alone again.
    // Reading a dead letter deletes it: what is read here is kept for the count at the end.
    let mut letters = Vec::new();
    let started = Instant::now();
    let mut noisy_settled = false;
    while started.elapsed() < DRAIN_LIMIT {
        letters.extend(run.stack.dead_letters(&run.sqs).await?);
        if noisy_done(&run.fake, &noisy_plan, &letters) {
            noisy_settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let noisy_drain = started.elapsed();
    run.worker_proxy.take_answer_times();
    quiet.send_paced(&solo_again, EVERY).await;
    replied(&run.fake, &solo_again, &quiet_token).await?;
    let solo_again_dynamo = dynamo(run.worker_proxy.take_answer_times());
    let drain = run.drain(tokio::spawn(async {})).await?;

    // Counted from the outside, as every scenario is.
    let calls = run.fake.calls();
    let quiet_posted = quiet.posted();
    let latency = |plan: &Plan| latencies(plan, &quiet_posted, &calls, &quiet_token);
    let first_solo = latency(&solo);
    let second_solo = latency(&solo_again);
    let (first_p50, second_p50) = (percentile(&first_solo, 0.5), percentile(&second_solo, 0.5));
    let mut solo_latencies = first_solo;
    solo_latencies.extend(second_solo);
    let shared_latencies = latency(&shared);
    let control_latencies = latency(&control);
    let control_p50 = percentile(&control_latencies, 0.5);
    let (solo_p50, solo_p95) = (
        percentile(&solo_latencies, 0.5),
        percentile(&solo_latencies, 0.95),
    );
    let (shared_p50, shared_p95) = (
        percentile(&shared_latencies, 0.5),
        percentile(&shared_latencies, 0.95),
    );
    let storm_429s = calls
        .iter()
        .filter(|c| c.token == NOISY_TOKEN && c.status == 429)
        .count();
    let crossings = calls
        .iter()
        .filter(|c| c.method == "sendMessage")
        .filter(|c| match c.chat_id {
            Some(chat) if chat > NOISY_CHATS => c.token != NOISY_TOKEN,
            Some(_) => c.token != quiet_token,
            None => false,
        })
        .count();

    let mut everything = Plan::default();
    for plan in [
        &solo,
        &control,
        &shared,
        &solo_again,
        &noisy_healthy,
        &noisy_plan,
    ] {
        everything.updates.extend(plan.updates.iter().cloned());
    }
    everything.updates.sort_by_key(|p| p.update_id);
    let mut posted = quiet_posted.clone();
    merge(&mut posted, &noisy.posted());
    let mapping = run.mapping_note();
    run.stop_mapping();
    letters.extend(run.stack.dead_letters(&run.sqs).await?);
    let quiet_letters = letters
        .iter()
        .filter(|l| l.bot.as_deref() != Some(NOISY))
        .count();
    let reported = run.reported().await;
    let tally = Tally::count(
        &everything,
        &posted,
        &calls,
        &run.fake.violations(),
        &letters,
        &reported.resent,
    );
    let mut checks = tally.base_checks();
    note_mapping(&mut checks, &mapping);
    checks.extend([
        Check::new(
            "every update of both bots acknowledged",
            posted.given_up.is_empty(),
            format!("{} given up", posted.given_up.len()),
        ),
        Check::new(
            "the noisy bot's storm and failures were met",
            storm_429s > 0 && tally.dead_expected > 0,
            format!(
                "{storm_429s} answers 429 to the noisy bot; {} of its updates dead-lettered (400)",
                tally.dead_expected
            ),
        ),
        Check::new(
            "the noisy bot settled: its storm chats served once the storm passed, its failing chats dead-lettered",
            noisy_settled,
            format!("in {:.1} s", noisy_drain.as_secs_f64()),
        ),
        Check::new(
            "nothing crossed between the bots",
            crossings == 0 && quiet_letters == 0 && tally.unexpected_dead() == 0,
            format!(
                "{crossings} sends with one bot's token to the other's chats; {quiet_letters} dead \
                 letters not of the noisy bot; {} unexpected dead letters",
                tally.unexpected_dead()
            ),
        ),
        Check::new(
            format!(
                "the quiet bot's median latency beside the noisy one within {:.0} % of alone",
                (TOLERANCE - 1.0) * 100.0
            ),
            !shared_latencies.is_empty() && shared_p50 <= solo_p50 * TOLERANCE,
            format!(
                "alone p50 {solo_p50:.0} ms, p95 {solo_p95:.0} ms ({} replies; p50 \
                 {first_p50:.0} ms before, {second_p50:.0} ms after); beside p50 \
                 {shared_p50:.0} ms, p95 {shared_p95:.0} ms ({} replies): {:+.1} %; beside it \
                 while it was healthy, at the same pace: p50 {control_p50:.0} ms; moto's median \
                 answer to the worker's DynamoDB calls {:.1} ms alone ({:.1} ms after), {:.1} ms \
                 beside the healthy bot, {:.1} ms beside the failing one",
                solo_latencies.len(),
                shared_latencies.len(),
                (shared_p50 / solo_p50 - 1.0) * 100.0,
                solo_dynamo,
                solo_again_dynamo,
                control_dynamo,
                shared_dynamo,
            ),
        ),
    ]);
    run.finish_with(s, &tally, &reported, drain, checks).await
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
        if started.elapsed() > DRAIN_LIMIT {
            anyhow::bail!(
                "the bot with the fake's {} token did not answer every update within {} s",
                if token == NOISY_TOKEN {
                    "noisy"
                } else {
                    "quiet"
                },
                DRAIN_LIMIT.as_secs()
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
        if let Some(id) = call.params["text"].as_str().and_then(echo_update_id) {
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
fn latencies(plan: &Plan, posted: &Posted, calls: &[RecordedCall], token: &str) -> Vec<f64> {
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

/// The median of `times`' DynamoDB answers, in milliseconds; 0 when there were none.
fn dynamo_median(times: &AnswerTimes) -> f64 {
    let millis: Vec<f64> = times
        .0
        .iter()
        .filter(|(target, _)| target.starts_with("DynamoDB_20120810."))
        .flat_map(|(_, times)| times.iter().map(|t| t.as_secs_f64() * 1000.0))
        .collect();
    percentile(&millis, 0.5)
}

/// The `q` quantile (nearest rank) of `values`; 0 when there are none.
fn percentile(values: &[f64], q: f64) -> f64 {
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
    fn the_dynamo_median_is_of_dynamodb_answers_only() {
        let ms = Duration::from_millis;
        let times = AnswerTimes(std::collections::BTreeMap::from([
            (
                "DynamoDB_20120810.UpdateItem".to_owned(),
                vec![ms(7), ms(3)],
            ),
            ("DynamoDB_20120810.GetItem".to_owned(), vec![ms(5)]),
            ("AmazonSQS.SendMessage".to_owned(), vec![ms(90), ms(80)]),
        ]));
        assert_eq!(dynamo_median(&times), 5.0);
        assert_eq!(dynamo_median(&AnswerTimes::default()), 0.0);
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
