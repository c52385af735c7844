//! Scenario 17, `two-bots`, on the emulator (`crate::two_bots` plans and counts it): both bots in
//! the stack's SSM registry, the real functions serving both, the mapping's invocations at once as
//! on a stack. The quiet bot's latency beside the failing bot is held to its latency beside the
//! same bot healthy: on one moto the other bot's mere traffic costs it more than anything that bot
//! does, and the healthy phase carries the same traffic.

use tgq_aws::SsmRegistry;
use tgq_core::registry::Layout;
use tgq_e2e::proxy::AnswerTimes;
use tgq_fake_telegram::FakeTelegram;

use super::Emulated;
use crate::plan::Plan;
use crate::scenarios::note_order;
use crate::tally::{Row, Tally};
use crate::two_bots::{self, Against, Phase, NOISY_TOKEN};

/// The mapping's invocations at once: template.yaml's `WorkerMaxConcurrency` default, as a
/// stack hosting several bots runs.
const CONCURRENCY: usize = 5;

/// Runs the scenario.
pub async fn run(on: &Emulated<'_>) -> anyhow::Result<Row> {
    let (s, o, em) = (on.scenario, on.options, on.em);
    // No rate limits at the fake: Telegram limits each bot on its own, the fake its whole server.
    let fake = FakeTelegram::start().await?;
    fake.accept_token(NOISY_TOKEN);
    let prefix = format!(
        "/tgq/drill-{}-{}/bots/",
        std::process::id(),
        rand::random::<u32>()
    );
    let registry = SsmRegistry::new(aws_sdk_ssm::Client::new(&em.sdk), Layout::new(&prefix)?);
    for entry in two_bots::entries(&fake)? {
        registry.put(&entry).await?;
    }

    let mut run = on
        .start_with(
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

    // What moto took to answer the worker's DynamoDB calls in each phase: the emulator's share
    // of the quiet bot's latency, which the other bot's calls raise on this machine.
    run.worker_proxy.take_answer_times();
    let mut dynamo = Vec::new();
    // Reading a dead letter deletes it: what is read is kept for the count at the end.
    let mut letters = Vec::new();
    let phases = {
        let (fake, sqs, stack, proxy) =
            (&run.outside.fake, &run.sqs, &run.stack, &run.worker_proxy);
        two_bots::run_phases(
            fake,
            &format!("{}webhook/", run.webhook_url),
            o.updates,
            o.seed,
            |phase: Phase| dynamo.push((phase, dynamo_median(&proxy.take_answer_times()))),
            async || {
                letters.extend(stack.dead_letters(sqs).await?);
                Ok(letters.clone())
            },
        )
        .await?
    };
    let drain = run.drain(tokio::spawn(async {})).await?;

    let calls = run.outside.fake.calls();
    let (everything, posted) = phases.everything();
    let mapping = run.mapping_note();
    run.stop_mapping();
    letters.extend(run.stack.dead_letters(&run.sqs).await?);
    let reported = run.reported().await;
    let tally = Tally::count(
        &everything,
        &posted,
        &calls,
        &run.outside.fake.violations(),
        &letters,
        &reported.resent,
    );
    let moto = |phase| {
        dynamo
            .iter()
            .find(|(p, _)| *p == phase)
            .map_or(0.0, |(_, ms)| *ms)
    };
    let moto = format!(
        "moto's median answer to the worker's DynamoDB calls {:.1} ms alone ({:.1} ms after), \
         {:.1} ms beside the healthy bot, {:.1} ms beside the failing one",
        moto(Phase::Solo),
        moto(Phase::SoloAgain),
        moto(Phase::BesideHealthy),
        moto(Phase::BesideFailing),
    );
    let mut checks = tally.base_checks();
    note_order(&mut checks, &mapping);
    checks.extend(phases.checks(
        &calls,
        &letters,
        (tally.dead_expected, tally.unexpected_dead()),
        Against::Healthy,
        Some(moto),
    ));
    run.finish_with(s, &tally, &reported, drain, checks).await
}

/// The median of `times`' DynamoDB answers, in milliseconds; 0 when there were none.
fn dynamo_median(times: &AnswerTimes) -> f64 {
    let millis: Vec<f64> = times
        .0
        .iter()
        .filter(|(target, _)| target.starts_with("DynamoDB_20120810."))
        .flat_map(|(_, times)| times.iter().map(|t| t.as_secs_f64() * 1000.0))
        .collect();
    two_bots::percentile(&millis, 0.5)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
}
