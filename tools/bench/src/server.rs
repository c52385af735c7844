//! One `tgq local` process under test: started offline on a fresh data directory and a free loopback
//! port, asked for its status over `/admin/status`, stopped with SIGTERM.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context as _};
use rand::distr::{Alphanumeric, SampleString as _};
use serde_json::Value;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::system::{self, Memory};

/// How long `tgq local` may take to answer `/readyz`.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a graceful stop may take before the process is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `tgq local`.
pub struct Server {
    child: Child,
    pid: u32,
    base: String,
    admin_base: String,
    secret: String,
    data_dir: PathBuf,
    client: reqwest::Client,
}

/// What `/admin/status` says, in the parts the bench uses.
#[derive(Clone, Copy, Debug, Default)]
pub struct Status {
    /// Messages on the queue that no worker holds.
    pub pending: u64,
    /// Messages a worker holds.
    pub in_flight: u64,
    /// Outbox entries (the bot's replies, offline).
    pub outbox: u64,
    /// Stored update records.
    pub records: u64,
    /// Updates stored for the first time, since the store was created.
    pub received: u64,
    /// Handler runs settled DONE.
    pub processed: u64,
    /// Write transactions committed (each one fsync) since the process opened the store.
    pub commits: u64,
    /// Operations those commits carried.
    pub operations: u64,
}

impl Status {
    fn from_json(value: &Value) -> anyhow::Result<Self> {
        let number = |pointer: &str| {
            value
                .pointer(pointer)
                .and_then(Value::as_u64)
                .with_context(|| format!("/admin/status has no {pointer}: {value}"))
        };
        Ok(Self {
            pending: number("/stats/pending")?,
            in_flight: number("/stats/in_flight")?,
            outbox: number("/stats/outbox")?,
            records: number("/stats/records")?,
            received: number("/counters/received")?,
            processed: number("/counters/processed")?,
            commits: number("/writer/commits")?,
            operations: number("/writer/operations")?,
        })
    }

    /// Nothing is left to do: the queue is empty and every stored update was handled.
    pub fn is_settled(&self) -> bool {
        self.pending == 0 && self.in_flight == 0 && self.processed >= self.received
    }
}

impl Server {
    /// Starts `tgq local` offline (no bot token) on `data_dir` with a secret of the bench's own and
    /// `env` on top, its output going to `log`; returns once `/readyz` answers 200.
    pub async fn start(
        tgq: &Path,
        data_dir: &Path,
        log: &Path,
        env: &[(&str, String)],
    ) -> anyhow::Result<Self> {
        let secret = Alphanumeric.sample_string(&mut rand::rng(), 48);
        let log_file = std::fs::File::create(log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let mut command = Command::new(tgq);
        // Nothing of the caller's shell changes what is measured; `TGQ_WORKER_LOOPS` and
        // `TGQ_WORKER_BATCH` are passed through, to compare loop counts and batch sizes.
        for name in tgq_core::config::SETTINGS {
            if !matches!(name, "TGQ_WORKER_LOOPS" | "TGQ_WORKER_BATCH") {
                command.env_remove(name);
            }
        }
        command
            .arg("local")
            // Port 0: the kernel picks free ports; tgq writes the ones it got to webhook.addr and
            // local.addr.
            .args([
                "--addr",
                "127.0.0.1:0",
                "--admin-addr",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(data_dir)
            .env("TGQ_WEBHOOK_SECRET", &secret)
            // The built-in echo bot: one sendMessage per update, so the figures measure tgq and
            // stay comparable whatever the bot in bot/ does.
            .env("TGQ_HANDLER", "echo")
            // Telegram's flood limits (30 sends/s per bot by default) pace the offline outbox too;
            // the bench measures tgq, not them.
            .env("TGQ_RATE_PER_SECOND", "0")
            .env("TGQ_RATE_PER_CHAT_PER_SECOND", "0")
            .env("TGQ_RATE_PER_GROUP_PER_MINUTE", "0")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .kill_on_drop(true);
        for (name, value) in env {
            command.env(name, value);
        }
        Self::spawn(command, tgq, data_dir, log, secret).await
    }

    /// Starts `tgq noop-http`, the no-op HTTP/1.1 server on `tgq local`'s runtime that answers every
    /// webhook request at once and stores nothing; returns once it answers `/readyz`.
    pub async fn start_noop(tgq: &Path, dir: &Path, log: &Path) -> anyhow::Result<Self> {
        let log_file = std::fs::File::create(log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let mut command = Command::new(tgq);
        command
            .args(["noop-http", "--addr", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .kill_on_drop(true);
        Self::spawn(command, tgq, dir, log, String::new()).await
    }

    /// Runs `command` and waits until the address it writes to `<data_dir>/webhook.addr` answers
    /// `/readyz` with 200.
    async fn spawn(
        mut command: Command,
        tgq: &Path,
        data_dir: &Path,
        log: &Path,
        secret: String,
    ) -> anyhow::Result<Self> {
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot run {}", tgq.display()))?;
        let pid = child.id().context("tgq exited at once")?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        // The webhook listener's address, and the admin listener's, as tgq writes them.
        let webhook_addr_file = data_dir.join("webhook.addr");
        let admin_addr_file = data_dir.join("local.addr");
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait()? {
                bail!("tgq exited during start ({status}); see {}", log.display());
            }
            if Instant::now() > deadline {
                bail!(
                    "tgq was not ready within {START_TIMEOUT:?}; see {}",
                    log.display()
                );
            }
            let addrs = (
                std::fs::read_to_string(&webhook_addr_file),
                std::fs::read_to_string(&admin_addr_file),
            );
            if let (Ok(addr), Ok(admin_addr)) = addrs {
                let base = format!("http://{}", addr.trim());
                let admin_base = format!("http://{}", admin_addr.trim());
                let ready = client.get(format!("{base}/readyz")).send().await;
                if ready.is_ok_and(|answer| answer.status().is_success()) {
                    return Ok(Self {
                        child,
                        pid,
                        base,
                        admin_base,
                        secret,
                        data_dir: data_dir.to_owned(),
                        client,
                    });
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The webhook URL.
    pub fn webhook_url(&self) -> String {
        format!("{}/webhook", self.base)
    }

    /// GETs an admin route and returns its `result`.
    pub async fn admin(&self, route: &str) -> anyhow::Result<Value> {
        let answer = self
            .client
            .get(format!("{}{route}", self.admin_base))
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!("{route} answered {}", answer.status());
        }
        let body: Value = answer.json().await?;
        Ok(body["result"].clone())
    }

    /// The webhook secret the process was started with.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// `/admin/status`.
    pub async fn status(&self) -> anyhow::Result<Status> {
        Status::from_json(&self.admin("/admin/status").await?)
    }

    /// Waits until `done` holds for the status, polling; fails after `timeout`.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Status) -> bool,
    ) -> anyhow::Result<Status> {
        let deadline = Instant::now() + timeout;
        loop {
            let status = self.status().await?;
            if done(&status) {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("tgq did not reach `{what}` within {timeout:?}: {status:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The process's resident memory now and at its peak.
    pub fn memory(&self) -> anyhow::Result<Memory> {
        system::memory_of(self.pid)
    }

    /// CPU time the process has used so far.
    pub fn cpu_time(&self) -> Duration {
        system::cpu_time_of(&self.pid.to_string()).unwrap_or_default()
    }

    /// Stops the process with SIGTERM (a graceful shutdown that closes the store), killing it if it
    /// does not exit in time.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()?;
        if !sent.success() {
            bail!("SIGTERM could not be sent to tgq ({})", self.pid);
        }
        match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(exit) => match exit? {
                exit if exit.success() => Ok(()),
                exit => bail!("tgq local exited with {exit} on SIGTERM"),
            },
            Err(_) => {
                self.child.kill().await?;
                bail!("tgq local did not stop within {STOP_TIMEOUT:?} of SIGTERM; killed")
            }
        }
    }

    /// Stops the process with SIGKILL (the no-op server has nothing to close).
    pub async fn kill(mut self) -> anyhow::Result<()> {
        self.child.kill().await?;
        Ok(())
    }
}
