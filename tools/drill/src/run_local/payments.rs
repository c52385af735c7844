//! Scenario 21, `payments`, on `tgq local` (`crate::payments` has the scenario): the kills are
//! SIGKILLs of `tgq local`, started again at once on the same data directory and port, while the
//! other users pay; the ledger and the reconciliation are the `tgq payments` commands' own.

use anyhow::Context as _;
use serde_json::Value;
use tgq_fake_telegram::FakeTelegram;

use super::{scenario_dir, start_tgq};
use crate::local::LocalTgq;
use crate::payments::{self, PaymentsTarget};
use crate::scenario::Scenario;
use crate::scenarios::start_fake;
use crate::tally::Row;
use crate::Options;

/// `tgq local` and the `tgq` binary that runs it.
struct Local<'a> {
    options: &'a Options,
    tgq: LocalTgq,
}

impl Local<'_> {
    /// `tgq ARGS --data-dir DIR`, with the bot's token and Telegram's address as `tgq local` has
    /// them: its exit code and standard output.
    fn tgq(&self, fake: Option<&FakeTelegram>, args: &[&str]) -> anyhow::Result<(i32, String)> {
        let mut command = std::process::Command::new(&self.options.exe);
        command
            .args(args)
            .arg("--data-dir")
            .arg(self.tgq.data_dir());
        if let Some(fake) = fake {
            command
                .env("TELEGRAM_BOT_TOKEN", fake.token())
                .env("TELEGRAM_API_URL", fake.url());
        }
        let output = command
            .output()
            .with_context(|| format!("running tgq {args:?}"))?;
        let code = output.status.code().unwrap_or(-1);
        Ok((code, String::from_utf8_lossy(&output.stdout).into_owned()))
    }
}

impl PaymentsTarget for Local<'_> {
    const TARGET: &'static str = "local";
    const KILLS_AMID_TRAFFIC: bool = true;

    fn webhook_url(&self) -> String {
        self.tgq.url("/webhook")
    }

    async fn crash(&mut self) -> anyhow::Result<()> {
        self.tgq.kill();
        self.tgq.start().await
    }

    async fn drained(&self) -> bool {
        self.tgq.drained().await.unwrap_or(false)
    }

    async fn ledger(&self) -> anyhow::Result<Vec<Value>> {
        let args = ["payments", "list", "--json", "--limit", "100000"];
        match self.tgq(None, &args)? {
            (0, listed) => Ok(serde_json::from_str(&listed)?),
            (code, _) => anyhow::bail!("tgq payments list exited {code}"),
        }
    }

    async fn reconcile(&self, fake: &FakeTelegram) -> anyhow::Result<(i32, String)> {
        self.tgq(Some(fake), &["payments", "reconcile", "--json"])
    }

    async fn dead_letters(&mut self) -> anyhow::Result<usize> {
        Ok(self.tgq.dead_letters().await?.len())
    }

    async fn stop(mut self) {
        self.tgq.stop().await;
    }
}

/// Runs the scenario.
pub async fn run(s: &Scenario, o: &Options) -> anyhow::Result<Row> {
    // Telegram's limits on.
    let fake = start_fake(true).await?;
    let dir = scenario_dir(s, o);
    std::fs::create_dir_all(&dir)?;
    let (name, ttl) = payments::record_ttl_env();
    let env = [(name, ttl.as_str()), ("TGQ_PURGE_INTERVAL_SECS", "1")];
    let tgq = start_tgq(o, &dir, &dir.join("data"), &fake, &env).await?;
    payments::run(s, Local { options: o, tgq }, fake).await
}
