//! Scenario 21, `payments`, on the emulator (`crate::payments` has the scenario): the webhook and
//! worker functions under `cargo lambda watch`, the drill's event source mapping; each kill
//! SIGKILLs every worker container and starts as many new ones, and the killed invocation's
//! messages come back after their visibility timeout. The ledger is read from the table as
//! `tgq payments list --stack` reads it, and compared with the fake's Star transactions as
//! `tgq payments reconcile --stack` compares them.

use std::time::Duration;

use secrecy::SecretString;
use serde_json::Value;
use tgq_core::payment::Charge;
use tgq_core::reconcile::{reconcile, star_transactions};
use tgq_fake_telegram::FakeTelegram;

use super::{esm, Emulated, Run, BOT_ID};
use crate::payments::{self, PaymentsTarget};
use crate::plan::Plan;
use crate::scenarios::start_fake;
use crate::tally::Row;

impl PaymentsTarget for Run<'_> {
    const TARGET: &'static str = "emulator";
    const KILLS_AMID_TRAFFIC: bool = false;

    fn webhook_url(&self) -> String {
        self.webhook_url.clone()
    }

    async fn crash(&mut self) -> anyhow::Result<()> {
        let workers = self.all_workers().await;
        for &pid in &workers {
            self.kill_worker(pid).await;
        }
        for _ in &workers {
            self.new_worker().await?;
        }
        Ok(())
    }

    async fn drained(&self) -> bool {
        tgq_e2e::emulator::queue_depth(&self.sqs, &self.stack.queue_url)
            .await
            .is_ok_and(|depth| depth.is_empty())
    }

    async fn ledger(&self) -> anyhow::Result<Vec<Value>> {
        let entries = self.store().charges(usize::MAX).await?;
        Ok(entries
            .iter()
            .filter(|entry| entry.bot_id == BOT_ID)
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?)
    }

    async fn reconcile(&self, fake: &FakeTelegram) -> anyhow::Result<(i32, String)> {
        let charges: Vec<Charge> = self
            .store()
            .charges(usize::MAX)
            .await?
            .into_iter()
            .filter(|entry| entry.bot_id == BOT_ID)
            .map(|entry| entry.charge)
            .collect();
        let token = SecretString::from(fake.token().to_owned());
        let telegram = tgq_telegram::HttpBotApi::new(&fake.url(), token, Duration::from_secs(10))?;
        let transactions = star_transactions(&telegram).await?;
        let report = reconcile(&charges, &transactions);
        let code = if report.differences() == 0 { 0 } else { 3 };
        Ok((code, serde_json::to_string(&report)?))
    }

    async fn dead_letters(&mut self) -> anyhow::Result<usize> {
        self.stop_mapping();
        Ok(self.stack.dead_letters(&self.sqs).await?.len())
    }

    async fn stop(self) {
        crate::scenarios::Pipeline::stop(self).await;
    }
}

impl Run<'_> {
    fn store(&self) -> tgq_aws::DynamoStore {
        let client = aws_sdk_dynamodb::Client::new(&self.em.sdk);
        tgq_aws::DynamoStore::new(client, self.stack.table.clone())
    }
}

/// Runs the scenario.
pub async fn run(on: &Emulated<'_>) -> anyhow::Result<Row> {
    // Telegram's limits on.
    let fake = start_fake(true).await?;
    let (name, ttl) = payments::record_ttl_env();
    let env = [(name, ttl.as_str())];
    let nothing = Plan {
        updates: Vec::new(),
        poison: Vec::new(),
    };
    let run = on
        .start_with(nothing, fake.clone(), &env, esm::CONCURRENCY)
        .await?;
    payments::run(on.scenario, run, fake).await
}
