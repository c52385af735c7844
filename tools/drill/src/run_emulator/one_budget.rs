//! Scenario 18, `one-budget` (emulator only): one bot, four worker processes at once (four Lambda
//! containers), the fake Bot API enforcing Telegram's limits at a bot-wide rate of [`RATE`] a
//! second, which the workers are given too (`TGQ_RATE_PER_SECOND`). A burst over many chats, and
//! a storm of bot-wide 429s while it drains: summed over the four processes, no send may go over
//! the limits or into an announced wait (docs/design/pacing.md), and the
//! sends keep close to the rate.

use std::time::{Duration, Instant};

use tgq_fake_telegram::{FakeConfig, FakeTelegram, Fault, Limits, RecordedCall, Scope, Times};

use super::Emulated;
use crate::plan::Plan;
use crate::scenarios::Pipeline;
use crate::tally::{Check, Row};

/// The bot-wide rate, at the fake and in the workers: low, so that four processes each sending at
/// it alone would go far over it.
const RATE: u32 = 4;
/// Worker processes at once, and the mapping's invocations at once.
const WORKERS: usize = 4;
/// The chats the burst is spread over: many, so that the bot-wide rate binds, not each chat's.
const CHATS: i64 = 120;
/// Bot-wide 429s of the storm, each asking for [`STORM_RETRY_AFTER`] seconds.
const STORM: u64 = 3;
const STORM_RETRY_AFTER: u32 = 2;
/// The window the busiest rate is read over.
const WINDOW: Duration = Duration::from_secs(10);
/// The least share of [`RATE`] the busiest window must reach: the budget must not starve the bot
/// (moto's answers on a loaded two-core machine bound what four processes can book).
const LEAST_SHARE: f64 = 0.5;

/// Runs the scenario.
pub async fn run(on: &Emulated<'_>) -> anyhow::Result<Row> {
    let (s, o) = (on.scenario, on.options);
    let fake = FakeTelegram::start_with(FakeConfig {
        limits: Some(Limits {
            global_per_sec: RATE,
            ..Limits::default()
        }),
        ..FakeConfig::default()
    })
    .await?;
    let plan = Plan::ordinary(o.updates, CHATS, 1, o.seed);
    let rate = RATE.to_string();
    let mut run = on
        .start_with(
            plan.clone(),
            fake,
            &[("TGQ_RATE_PER_SECOND", rate.as_str())],
            WORKERS,
        )
        .await?;
    for _ in 1..WORKERS {
        run.new_worker().await?;
    }

    // The storm: a bot-wide 429 once a quarter, a half and three quarters of the replies went out.
    let storm = {
        let fake = run.outside.fake.clone();
        let total = plan.updates.len() as u64;
        tokio::spawn(async move {
            for k in 1..=STORM {
                while (delivered(&fake.calls()).len() as u64) < total * k / (STORM + 1) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                fake.inject(
                    Fault::RetryAfter(STORM_RETRY_AFTER),
                    Scope::Global,
                    Times::Once,
                );
            }
        })
    };
    let started = Instant::now();
    run.outside.poster.send(&plan, 1).await;
    let drain = run.drain(tokio::spawn(async {})).await?;
    let took = started.elapsed();
    storm.abort();

    let calls = run.outside.fake.calls();
    let violations = run.outside.fake.violations();
    let sends = delivered(&calls);
    let storm_429s = calls
        .iter()
        .filter(|c| c.method == "sendMessage" && c.status == 429)
        .count();
    let busiest = busiest_rate(&sends, WINDOW);
    let overall = match (sends.first(), sends.last()) {
        (Some(first), Some(last)) if sends.len() > 1 => {
            (sends.len() - 1) as f64 / last.saturating_duration_since(*first).as_secs_f64()
        }
        _ => 0.0,
    };
    let inside = run.inside().await?;
    let posted = run.outside.poster.posted();
    let tally = inside.count(&plan, &posted, &calls, &violations);
    let mut checks = inside.base_checks(&tally);
    checks.extend([
        Check::new(
            format!("0 sends over Telegram's limits from {WORKERS} workers at once"),
            violations.over_limit == 0,
            format!(
                "{} refused as over {RATE}/s for the bot, 1/s per chat or 20/min per group",
                violations.over_limit
            ),
        ),
        Check::new(
            "0 sends inside an announced wait",
            violations.early_sends == 0,
            format!(
                "{} sends while a bot-wide retry_after of {STORM_RETRY_AFTER} s ran, of {storm_429s} \
                 429s answered",
                violations.early_sends
            ),
        ),
        Check::new(
            "the 429 storm was met",
            storm_429s as u64 >= STORM,
            format!("{storm_429s} answers 429, {STORM} injected"),
        ),
        Check::new(
            format!(
                "the busiest {}-s window at least {:.0} % of the bot-wide rate",
                WINDOW.as_secs(),
                LEAST_SHARE * 100.0
            ),
            busiest >= f64::from(RATE) * LEAST_SHARE,
            format!(
                "busiest {}-s window {busiest:.1}/s, {:.0} % of {RATE}/s; {:.2}/s from the first \
                 reply to the last; {} replies in {:.1} s",
                WINDOW.as_secs(),
                busiest / f64::from(RATE) * 100.0,
                overall,
                sends.len(),
                took.as_secs_f64()
            ),
        ),
    ]);
    run.finish_with(s, &tally, &inside.reported, drain, checks)
        .await
}

/// When each sendMessage Telegram accepted arrived, in order.
fn delivered(calls: &[RecordedCall]) -> Vec<Instant> {
    let mut at: Vec<Instant> = calls
        .iter()
        .filter(|c| c.method == "sendMessage" && c.is_delivered())
        .map(|c| c.at)
        .collect();
    at.sort();
    at
}

/// The most sends per second in any `window` starting at a send.
fn busiest_rate(sends: &[Instant], window: Duration) -> f64 {
    let mut most = 0;
    let mut end = 0;
    for (start, first) in sends.iter().enumerate() {
        while end < sends.len() && sends[end].saturating_duration_since(*first) < window {
            end += 1;
        }
        most = most.max(end - start);
    }
    most as f64 / window.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busiest_window_counts_the_sends_inside_it() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let sends = [at(0), at(100), at(200), at(5_000), at(20_000)];
        assert_eq!(busiest_rate(&sends, Duration::from_secs(1)), 3.0);
        assert_eq!(busiest_rate(&sends, Duration::from_secs(10)), 0.4);
        assert_eq!(busiest_rate(&[], Duration::from_secs(1)), 0.0);
    }
}
