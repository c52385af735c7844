//! `tgq poll` on a stack (the `aws` feature): the lease, the budget and the ingest use case on the
//! stack's table and queues.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use rand::distr::{Alphanumeric, SampleString as _};
use secrecy::SecretString;
use serde::Serialize;
use tgq_aws::{DynamoBudgetCells, DynamoPollerLease, DynamoStore, SqsQueue};
use tgq_core::budget::SharedBudget;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::config::{SecretSource, Vars};
use tgq_core::defaults;
use tgq_core::ids::BotId;
use tgq_core::ingest::{Ingest, Webhook, WebhookPorts, WebhookSettings};
use tgq_core::poller::{
    LeaseTiming, Poller, PollerHandle, PollerPorts, PollerSettings, POLL_TIMEOUT,
};
use tgq_telegram::HttpBotApi;
use tokio::net::TcpListener;
use tracing::info;

use super::{holder_id, PollArgs, PollerView, TimingArgs};
use crate::config::UsageError;
use crate::local::shutdown::Shutdown;
use crate::ops::target::Deployment;

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
