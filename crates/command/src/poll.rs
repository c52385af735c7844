//! `tgq poll`: long polling into the AWS pipeline for bots that cannot take a webhook
//! (docs/design/fleet.md §1). Any number of these processes may run for one bot: they share a
//! lease in the stack's DynamoDB table, and only its holder calls getUpdates. Each polled update goes
//! through the same ingest use case as the webhook Lambda (DynamoDB conditional put, then SQS FIFO).
//!
//! The process serves `/healthz` (alive), `/readyz` (leader, or standby that reaches the store) and
//! `/status` (its role, the lease and the offset as JSON; `tgq status --poller ADDR` shows it).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use serde::{Deserialize, Serialize};
use tgq_core::budget::SendBudget;
use tgq_core::clock::Clock;
use tgq_core::ingest::Webhook;
use tgq_core::leadership::{HolderId, PollerLease};
#[cfg(feature = "aws")]
use tgq_core::poller::PollerStatus;
use tgq_core::poller::{LeaseTiming, Poller, PollerPorts, PollerSettings, POLL_TIMEOUT};
use tgq_core::telegram::BotApi;

#[cfg(feature = "aws")]
mod stack;

#[cfg(feature = "aws")]
pub use stack::run;

/// `tgq poll`.
#[derive(Debug, Args)]
pub struct PollArgs {
    /// A deployed stack: the table, the queues, the token's parameter and the Bot API URL come from
    /// its CloudFormation outputs.
    #[arg(long, env = "TGQ_STACK", value_name = "NAME", conflicts_with_all = ["table", "queue_url", "dlq_url"])]
    stack: Option<String>,
    /// The stack's DynamoDB table (output TableName), with --queue-url and --dlq-url instead of
    /// --stack.
    #[arg(long, env = "TGQ_TABLE", value_name = "NAME", requires_all = ["queue_url", "dlq_url"])]
    table: Option<String>,
    /// The stack's updates FIFO queue (output UpdatesQueueUrl).
    #[arg(long, env = "TGQ_QUEUE_URL", value_name = "URL", requires_all = ["table", "dlq_url"])]
    queue_url: Option<String>,
    /// The stack's dead-letter FIFO queue (output DeadLetterQueueUrl): poison updates go there, as
    /// from the webhook.
    #[arg(long, env = "TGQ_DLQ_URL", value_name = "URL", requires_all = ["table", "queue_url"])]
    dlq_url: Option<String>,
    /// The AWS region of the stack [default: AWS_REGION, or the profile's].
    #[arg(long, value_name = "REGION")]
    region: Option<String>,
    /// Where `/healthz`, `/readyz` and `/status` are served.
    #[arg(long, default_value = "127.0.0.1:8090", value_name = "HOST:PORT")]
    health_addr: String,
    /// This poller's id among the contenders; default `{host}:{pid}:{random}`.
    #[arg(long, value_name = "ID")]
    id: Option<String>,
    #[command(flatten)]
    timing: TimingArgs,
}

/// The lease's timing: defaults TTL 15 s, renewal every 5 s, cooldown 30 s.
#[derive(Debug, Args)]
pub struct TimingArgs {
    /// How long an acquired or renewed lease lasts.
    #[arg(
        long,
        env = "TGQ_LEASE_TTL_SECS",
        default_value_t = 15,
        value_name = "SECS"
    )]
    lease_ttl_secs: u64,
    /// How often the leader renews it.
    #[arg(
        long,
        env = "TGQ_LEASE_RENEW_SECS",
        default_value_t = 5,
        value_name = "SECS"
    )]
    lease_renew_secs: u64,
    /// How long a poller that lost the lease waits before contending again.
    #[arg(
        long,
        env = "TGQ_LEASE_COOLDOWN_SECS",
        default_value_t = 30,
        value_name = "SECS"
    )]
    lease_cooldown_secs: u64,
}

/// `tgq poll` in a build without the AWS SDK: refused, saying how to run it.
#[cfg(not(feature = "aws"))]
pub async fn run(_: PollArgs) -> anyhow::Result<()> {
    Err(crate::without_aws("tgq poll"))
}

/// The given id, or one generated from the host name.
pub fn holder_id(given: Option<&str>) -> anyhow::Result<HolderId> {
    match given {
        Some(id) => Ok(HolderId::new(id)?),
        None => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .or_else(|_| std::env::var("HOSTNAME"))
                .unwrap_or_default();
            Ok(HolderId::generate(host.trim()))
        }
    }
}

/// A poller's status as `/status` serves it and `tgq status --poller` shows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PollerView {
    /// This poller's id.
    pub id: String,
    /// leader, standby, suspended, cooling_down, starting or stopped.
    pub role: String,
    /// Who holds the lease, as this poller last saw it.
    pub leader: Option<String>,
    /// The lease's fencing token.
    pub token: Option<u64>,
    /// Milliseconds until the lease ends unless renewed.
    pub lease_remaining_ms: Option<u64>,
    /// The next getUpdates offset.
    pub offset: Option<i64>,
    /// Whether the lease's store answered the last call.
    pub store_reachable: bool,
    /// getUpdates calls answered.
    pub polls: u64,
    /// Updates made durable.
    pub updates: u64,
    /// Takeovers of a lapsed lease by this poller.
    pub takeovers: u64,
    /// Of those, within a minute of the previous takeover (alerts).
    pub flapping: u64,
    /// Checkpoints refused because a newer leader held the lease.
    pub checkpoints_refused: u64,
    /// Renewals that failed or came too late.
    pub renewals_failed: u64,
}

impl PollerView {
    /// The view of `status` at `now_ms`.
    #[cfg(feature = "aws")]
    pub fn of(status: &PollerStatus, now_ms: u64) -> Self {
        let c = status.counters;
        Self {
            id: status.holder.to_string(),
            role: status.role.as_str().to_owned(),
            leader: status.leader.as_ref().map(ToString::to_string),
            token: status.token,
            lease_remaining_ms: status.lease_until.map(|u| u.0.saturating_sub(now_ms)),
            offset: status.offset,
            store_reachable: status.store_reachable,
            polls: c.polls,
            updates: c.updates,
            takeovers: c.takeovers,
            flapping: c.flapping,
            checkpoints_refused: c.checkpoints_refused,
            renewals_failed: c.renewals_failed,
        }
    }
}

/// `tgq status --poller ADDR`: reads a running poller's `/status`.
pub async fn fetch_status(addr: &str) -> anyhow::Result<PollerView> {
    let url = if addr.starts_with("http://") || addr.starts_with("https://") {
        format!("{}/status", addr.trim_end_matches('/'))
    } else {
        format!("http://{addr}/status")
    };
    let view = reqwest::Client::new()
        .get(&url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .with_context(|| format!("cannot reach the poller at {url}"))?
        .error_for_status()?
        .json()
        .await
        .with_context(|| format!("{url} did not answer a poller's status"))?;
    Ok(view)
}

/// Prints a poller's status.
pub fn render(view: &PollerView) {
    outln!("poller       {}", view.id);
    outln!("role         {}", view.role);
    outln!("leader       {}", view.leader.as_deref().unwrap_or("none"));
    outln!(
        "token        {}",
        view.token.map_or("-".to_owned(), |t| t.to_string())
    );
    outln!(
        "lease ends   {}",
        view.lease_remaining_ms.map_or("-".to_owned(), |ms| format!(
            "in {:.1} s",
            ms as f64 / 1000.0
        ))
    );
    outln!(
        "offset       {}",
        view.offset.map_or("-".to_owned(), |o| o.to_string())
    );
    outln!(
        "store        {}",
        if view.store_reachable {
            "reachable"
        } else {
            "unreachable"
        }
    );
    outln!(
        "counts       {} polls, {} updates, {} takeovers ({} flapping), {} checkpoints refused, {} renewals failed",
        view.polls,
        view.updates,
        view.takeovers,
        view.flapping,
        view.checkpoints_refused,
        view.renewals_failed
    );
}

/// Where local mode polls from: the poller on the embedded store's lease, sharing its flood
/// waits with local mode's worker loops through their pacer.
pub fn local_poller(
    api: Arc<dyn BotApi>,
    lease: Arc<dyn PollerLease>,
    clock: Arc<dyn Clock>,
    budget: Arc<dyn SendBudget>,
    webhook: Webhook,
) -> anyhow::Result<Poller> {
    Ok(Poller::new(
        PollerSettings {
            holder: holder_id(None)?,
            timing: LeaseTiming::default(),
            poll_timeout: POLL_TIMEOUT,
        },
        PollerPorts {
            api,
            lease,
            clock,
            budget,
        },
        webhook,
    ))
}
