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
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use clap::Args;
use metrics_exporter_prometheus::PrometheusHandle;
use rand::distr::{Alphanumeric, SampleString as _};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use tgq_aws::{DynamoBudgetCells, DynamoPollerLease, DynamoStore, SqsQueue};
use tgq_core::budget::{SendBudget, SharedBudget};
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::config::{SecretSource, Vars};
use tgq_core::defaults;
use tgq_core::ids::BotId;
use tgq_core::ingest::{Ingest, Webhook, WebhookPorts, WebhookSettings};
use tgq_core::leadership::{HolderId, PollerLease};
use tgq_core::poller::{
    LeaseTiming, Poller, PollerHandle, PollerPorts, PollerSettings, PollerStatus, POLL_TIMEOUT,
};
use tgq_core::telegram::BotApi;
use tgq_telegram::HttpBotApi;
use tokio::net::TcpListener;
use tracing::info;

use crate::config::UsageError;
use crate::local::shutdown::Shutdown;
use crate::ops::target::Deployment;

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

impl PollArgs {
    /// The deployment to poll into: the named stack's outputs (the operations commands' resolver),
    /// or the resources given one by one.
    async fn deployment(&self) -> anyhow::Result<Deployment> {
        if let (Some(table), Some(queue_url), Some(dlq_url)) =
            (&self.table, &self.queue_url, &self.dlq_url)
        {
            return Deployment::of_resources(table, queue_url, dlq_url, self.region.clone()).await;
        }
        match &self.stack {
            Some(stack) => Deployment::of_stack(stack, self.region.clone()).await,
            None => Err(UsageError(
                "tgq poll needs a deployment: --stack NAME, or --table, --queue-url and --dlq-url \
                 (or TGQ_STACK, or TGQ_TABLE, TGQ_QUEUE_URL and TGQ_DLQ_URL)"
                    .into(),
            )
            .into()),
        }
    }
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

impl TimingArgs {
    /// The timing, checked.
    pub fn timing(&self) -> anyhow::Result<LeaseTiming> {
        let timing = LeaseTiming {
            ttl: Duration::from_secs(self.lease_ttl_secs),
            renew_every: Duration::from_secs(self.lease_renew_secs),
            cooldown: Duration::from_secs(self.lease_cooldown_secs),
            ..LeaseTiming::default()
        };
        timing.check().map_err(|reason| anyhow::anyhow!(reason))?;
        Ok(timing)
    }
}

/// Runs `tgq poll` until SIGTERM/SIGINT.
pub async fn run(args: PollArgs) -> anyhow::Result<()> {
    let vars = Vars::from_env();
    let timing = args.timing.timing()?;
    let holder = holder_id(args.id.as_deref())?;
    let deployment = args.deployment().await?;
    // TGQ_BOT_ID, else the stack's BotId output.
    let bot_id = match (vars.get("TGQ_BOT_ID"), &deployment.bot_id) {
        (None, Some(id)) => BotId::new(id.as_str())
            .with_context(|| format!("the stack's BotId output {id:?} is not a bot id"))?,
        _ => vars.bot_id()?,
    };
    let listener = TcpListener::bind(&args.health_addr)
        .await
        .with_context(|| format!("cannot listen on {} (--health-addr)", args.health_addr))?;
    let sdk = &deployment.sdk;
    // The token: TELEGRAM_BOT_TOKEN(_PARAM), else the stack's parameter.
    let token_source = vars
        .bot_token()
        .or_else(|| {
            deployment
                .token_parameter
                .clone()
                .map(SecretSource::Parameter)
        })
        .context(
            "tgq poll needs TELEGRAM_BOT_TOKEN (or TELEGRAM_BOT_TOKEN_PARAM, or --stack with a \
             token parameter): it asks Telegram for the bot's updates",
        )?;
    let token = tgq_aws::resolve_secret(&aws_sdk_ssm::Client::new(sdk), token_source).await?;
    let api_url = match (
        std::env::var_os("TELEGRAM_API_URL"),
        &deployment.telegram_api_url,
    ) {
        (None, Some(url)) => url.trim_end_matches('/').to_owned(),
        _ => vars.telegram_api_url()?,
    };
    let api = HttpBotApi::new(&api_url, token, POLL_TIMEOUT + defaults::TELEGRAM_TIMEOUT)?;
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let webhook = Webhook::new(
        polling_webhook_settings(&vars, &bot_id)?,
        WebhookPorts {
            ingest: Ingest::PutThenSend {
                store: Arc::new(DynamoStore::new(dynamodb.clone(), &deployment.table)),
                queue: Arc::new(SqsQueue::new(sqs.clone(), &deployment.queue_url)),
            },
            dead: Arc::new(SqsQueue::new(sqs, &deployment.dlq_url)),
            clock: clock.clone(),
        },
    );
    let lease = Arc::new(DynamoPollerLease::new(
        dynamodb.clone(),
        &deployment.table,
        &bot_id,
    ));
    // The stack's workers book the bot's sends in the table: a 429 this poller hears is written
    // there, and holds them too (docs/design/pacing.md).
    let budget = SharedBudget::new(
        Arc::new(DynamoBudgetCells::new(dynamodb, &deployment.table)),
        vars.rate_limits()?,
        clock.clone(),
    );
    // What the ingest use case and the poller count, served at /metrics (Prometheus text format),
    // each metric labelled with its bot by tgq_core::metrics.
    let metrics = crate::prometheus::install()?;
    info!(bot_id = %bot_id, table = %deployment.table, holder = %holder, health = %listener.local_addr()?, "tgq poll starting");
    let poller = Poller::new(
        PollerSettings {
            holder,
            timing,
            poll_timeout: POLL_TIMEOUT,
        },
        PollerPorts {
            api: Arc::new(api),
            lease,
            clock: clock.clone(),
            budget: Arc::new(budget),
        },
        webhook,
    );
    serve(listener, poller, metrics).await
}

/// The webhook settings a poller ingests with: its secret is never asked for (polled updates are
/// not requests), so a random one stands in.
fn polling_webhook_settings(vars: &Vars, bot_id: &BotId) -> anyhow::Result<WebhookSettings> {
    Ok(WebhookSettings {
        bot_id: bot_id.clone(),
        secret: SecretString::from(Alphanumeric.sample_string(&mut rand::rng(), 32)),
        max_body_bytes: vars.max_body_bytes()?,
        record_ttl: vars.record_ttl()?,
        // A polled update has no request to answer: the handler answers its callback queries.
        ack_callbacks: false,
    })
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

/// Runs the poller and its health server until a signal; a second signal ends the process at once.
async fn serve(
    listener: TcpListener,
    poller: Poller,
    metrics: PrometheusHandle,
) -> anyhow::Result<()> {
    let shutdown = Shutdown::new();
    shutdown.on_signals()?;
    let health = Health {
        poller: poller.handle(),
        shutdown: shutdown.clone(),
        metrics,
    };
    let server_shutdown = shutdown.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, health_router(health))
            .with_graceful_shutdown(async move { server_shutdown.wait().await })
            .await
    });
    let outcome = poller.run(shutdown.subscribe()).await;
    shutdown.trigger();
    server.await??;
    info!("stopped");
    Ok(outcome?)
}

/// What the health routes read.
#[derive(Clone)]
pub struct Health {
    /// The poller's status.
    pub poller: PollerHandle,
    /// Set once the process is stopping.
    pub shutdown: Shutdown,
    /// The counters, for `/metrics`.
    pub metrics: PrometheusHandle,
}

/// `/healthz`, `/readyz`, `/status` and `/metrics` of a poller.
pub fn health_router(health: Health) -> Router {
    Router::new()
        .route("/healthz", get(|| async { json(StatusCode::OK, "alive") }))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .with_state(health)
}

/// The counters of `tgq_core::metrics` (ingest and poller), in the Prometheus text format.
async fn metrics(State(health): State<Health>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        health.metrics.render(),
    )
        .into_response()
}

fn json(status: StatusCode, body: impl Serialize) -> Response {
    let body = serde_json::to_string(&body).unwrap_or_else(|_| "null".into());
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Ready: the leader, or a standby that reaches the lease's store (it is ready to take over).
async fn readyz(State(health): State<Health>) -> Response {
    if health.shutdown.is_triggered() {
        return json(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    }
    let status = health.poller.status();
    match status.readiness() {
        Ok(()) => json(StatusCode::OK, status.role.as_str()),
        Err(reason) => json(StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

async fn status(State(health): State<Health>) -> Response {
    let view = PollerView::of(&health.poller.status(), SystemClock.now().0);
    json(StatusCode::OK, view)
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
