//! The worker Lambda's event handling: the SQS event in, the [`Worker`] use case, `SqsBatchResponse`
//! with partial batch failures out. Configuration and client construction live in `main.rs`.

use std::time::Duration;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use bytes::Bytes;
use lambda_runtime::LambdaEvent;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::config::{AwsResources, ConfigError, SecretSource, Vars};
use tgq_core::defaults;
use tgq_core::handler::HandlerChoice;
use tgq_core::ids::BotId;
use tgq_core::ports::{QueueRecord, ReceiptHandle};
use tgq_core::record::Timestamp;
use tgq_core::worker::{Worker, WorkerSettings};
use tracing::warn;

/// The worker's configuration, read once per cold start.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// `TELEGRAM_BOT_TOKEN` or `TELEGRAM_BOT_TOKEN_PARAM`.
    pub token: SecretSource,
    /// `TELEGRAM_API_URL`.
    pub telegram_api_url: String,
    /// `TGQ_TABLE`, `TGQ_QUEUE_URL`, `TGQ_DLQ_URL`.
    pub resources: AwsResources,
    /// Attempt budget and backoff.
    pub settings: WorkerSettings,
    /// `TGQ_BOT_ID`: the bot whose handler runs here.
    pub bot_id: BotId,
    /// `TGQ_HANDLER`: the bot in `bot/` or the built-in echo bot.
    pub handler: HandlerChoice,
}

impl WorkerConfig {
    /// Reads and checks every variable, naming the first one that is missing or malformed.
    pub fn from_vars(vars: &Vars) -> Result<Self, ConfigError> {
        let token = vars.bot_token().ok_or(ConfigError::Missing {
            name: "TELEGRAM_BOT_TOKEN".into(),
            hint: "the bot token from @BotFather (or TELEGRAM_BOT_TOKEN_PARAM: an SSM parameter name)",
        })?;
        Ok(Self {
            token,
            telegram_api_url: vars.telegram_api_url()?,
            resources: vars.aws_resources()?,
            settings: WorkerSettings {
                retry: vars.retry_policy()?,
                deadline_margin: defaults::DEADLINE_MARGIN,
                record_ttl: vars.record_ttl()?,
            },
            bot_id: vars.bot_id()?,
            handler: vars.handler()?,
        })
    }
}

/// How long one Telegram call may take before it counts as a (transient) timeout.
pub const TELEGRAM_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an event could not be answered with a partial batch response.
#[derive(Debug, thiserror::Error)]
#[error(
    "a failed record has no messageId, so it cannot be reported alone; failing the whole batch"
)]
pub struct NamelessFailure;

/// Handles one SQS event: every record in order, failures reported by message id.
pub async fn handle(
    worker: &Worker,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, NamelessFailure> {
    let records: Vec<QueueRecord> = event
        .payload
        .records
        .into_iter()
        .map(queue_record)
        .collect();
    let deadline = invocation_deadline(Timestamp(event.context.deadline), SystemClock.now());
    let report = worker.process_batch(&records, deadline).await;
    if report
        .outcomes
        .iter()
        .any(|(id, outcome)| id.is_empty() && outcome.is_failure())
    {
        // Without an id the failure cannot be named; an error makes Lambda return the whole batch.
        return Err(NamelessFailure);
    }
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = report
        .failed_message_ids()
        .into_iter()
        .map(|id| {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            failure
        })
        .collect();
    Ok(response)
}

/// The invocation's deadline. Lambda sends a future epoch time; a deadline already past when the
/// invocation starts is not one (`cargo lambda watch` 1.9 sends the constant 600000, a duration), so
/// the worker's own timeout applies instead of returning every record unrun.
pub fn invocation_deadline(sent: Timestamp, now: Timestamp) -> Timestamp {
    if sent > now {
        return sent;
    }
    warn!(
        deadline_ms = sent.0,
        "the runtime sent a deadline in the past; using the worker timeout"
    );
    now.plus(defaults::WORKER_TIMEOUT)
}

/// Maps an event record to the use case's record; no SDK or event type goes further.
pub fn queue_record(message: SqsMessage) -> QueueRecord {
    let attribute = |name: &str| message.attributes.get(name).cloned();
    QueueRecord {
        message_id: message.message_id.clone().unwrap_or_default(),
        receipt: ReceiptHandle(message.receipt_handle.clone().unwrap_or_default()),
        body: Bytes::from(message.body.clone().unwrap_or_default()),
        group_id: attribute("MessageGroupId").unwrap_or_default(),
        receive_count: attribute("ApproximateReceiveCount")
            .and_then(|n| n.parse().ok())
            .unwrap_or(1),
    }
}
