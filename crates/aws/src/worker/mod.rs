//! The worker Lambda: [`run`] is the whole function, from its cold start on, for the bots whose
//! handlers it is given. The SQS event in, the [`Worker`] use case, `SqsBatchResponse` with
//! partial batch failures out; and the bots it runs ([`WorkerConfig::fleet`]: the environment's
//! bot and the registry's, each with its own token and handler). The clients, the ports and the
//! event sources are built in one call, [`assemble`].

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use bytes::Bytes;
use lambda_runtime::LambdaEvent;
use secrecy::SecretString;
use tgq_core::bots::{BotRuntime, Connect, Fleet, RegistryBots};
use tgq_core::broadcast::steps::BroadcastSteps;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::config::HandlerChoice;
use tgq_core::config::{
    AwsResources, BroadcastResources, ConfigError, SecretSource, TimerResources, Vars,
};
use tgq_core::defaults;
use tgq_core::error::BoxError;
use tgq_core::handler::BotConfig;
use tgq_core::handlers::HandlerRegistry;
use tgq_core::ids::{BotId, MessageGroupId};
use tgq_core::pacer::RateLimits;
use tgq_core::ports::{QueueRecord, ReceiptHandle};
use tgq_core::record::Timestamp;
use tgq_core::registry::{BotSource, Layout, Registry};
use tgq_core::relay::{RelayRecord, Relayed, TimerRelay};
use tgq_core::telegram::BotApi;
use tgq_core::worker::{Worker, WorkerSettings};
use tgq_telegram::HttpBotApi;
use tracing::{warn, Instrument as _};

mod assemble;

pub use assemble::assemble;

/// The worker Lambda: logging, the configuration read from the environment, the worker and its
/// event sources [`assemble`]d once per cold start with the bots' `handlers`, then
/// [`handle_event`] for every SQS event, its metrics flushed as EMF lines after each batch. A
/// worker function's `main` is this call.
pub async fn run(handlers: HandlerRegistry) -> Result<(), lambda_runtime::Error> {
    crate::init_logging();
    let vars = Vars::from_env();
    let config = WorkerConfig::from_vars(&vars)?;
    let (worker, sources) = assemble(&config, &vars, handlers).await?;
    let (worker, sources) = (&worker, &sources);
    let metrics = crate::init_metrics()?;
    metrics_cloudwatch_embedded::lambda::handler::run(
        metrics,
        |event: LambdaEvent<SqsEvent>| async move {
            handle_event(worker, sources, event)
                .await
                .map_err(lambda_runtime::Error::from)
        },
    )
    .await
}

/// The worker's configuration, read once per cold start.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The environment's bot: `TGQ_BOT_ID`, with its token from `TELEGRAM_BOT_TOKEN` or
    /// `TELEGRAM_BOT_TOKEN_PARAM`. `None`: the stack hosts registry bots only.
    pub env_bot: Option<(BotId, SecretSource)>,
    /// `TGQ_BOTS_PARAMETER_PREFIX`: the bot registry's place in SSM, if there is one.
    pub bots: Option<Layout>,
    /// `TGQ_REGISTRY_REFRESH_SECS`: how often the registry is read again.
    pub registry_refresh: Duration,
    /// `TELEGRAM_API_URL`.
    pub telegram_api_url: String,
    /// `TGQ_TABLE`, `TGQ_QUEUE_URL`, `TGQ_DLQ_URL`.
    pub resources: AwsResources,
    /// Attempt budget and backoff.
    pub settings: WorkerSettings,
    /// `TGQ_HANDLER`: the environment's bot's handler, the bot in `bot/` or the built-in echo bot.
    pub handler: HandlerChoice,
    /// `TGQ_RATE_*`: Telegram's flood limits, per bot and container.
    pub rate_limits: RateLimits,
    /// `TGQ_TIMERS_QUEUE_URL` and the rest: where timers wait; `None`, no timers.
    pub timers: Option<TimerResources>,
    /// `TGQ_BROADCASTS_QUEUE_URL` and its ARN: where broadcasts run; `None`, no broadcasts.
    pub broadcasts: Option<BroadcastResources>,
}

impl WorkerConfig {
    /// Reads and checks every variable, naming the first one that is missing or malformed.
    pub fn from_vars(vars: &Vars) -> Result<Self, ConfigError> {
        let bots = vars.bots_layout()?;
        // Without a registry the environment's bot is the only one, so it must be complete; with
        // one, the environment's bot is there only if TGQ_BOT_ID names it.
        let env_bot = match (&bots, vars.env_bot_id()?) {
            (Some(_), None) => None,
            (_, bot_id) => {
                let token = vars.bot_token().ok_or(ConfigError::Missing {
                    name: "TELEGRAM_BOT_TOKEN".into(),
                    hint: "the bot token from @BotFather (or TELEGRAM_BOT_TOKEN_PARAM: an SSM parameter name)",
                })?;
                let bot_id = match bot_id {
                    Some(bot_id) => bot_id,
                    None => vars.bot_id()?,
                };
                Some((bot_id, token))
            }
        };
        Ok(Self {
            env_bot,
            bots,
            registry_refresh: vars.registry_refresh()?,
            telegram_api_url: vars.telegram_api_url()?,
            resources: vars.aws_resources()?,
            settings: WorkerSettings::from_vars(vars)?,
            rate_limits: vars.rate_limits()?,
            handler: vars.handler()?,
            timers: vars.timer_resources()?,
            broadcasts: vars.broadcast_resources()?,
        })
    }

    /// The bots this worker runs: the environment's bot (its token resolved: `env_token`) with
    /// the handler `TGQ_HANDLER` picks from `handlers`, and the bots `registry` lists, each with
    /// its own token and the handler it names. `vars` are every handler's settings.
    pub async fn fleet(
        &self,
        vars: &Vars,
        handlers: HandlerRegistry,
        env_token: Option<SecretString>,
        registry: Option<Arc<dyn BotSource>>,
    ) -> Result<Fleet, BoxError> {
        let env = match self.env_bot.as_ref().zip(env_token) {
            Some(((bot_id, _), token)) => {
                let api: Arc<dyn BotApi> = Arc::new(HttpBotApi::new(
                    &self.telegram_api_url,
                    token,
                    defaults::TELEGRAM_TIMEOUT,
                )?);
                let config = BotConfig {
                    bot_id: bot_id.clone(),
                    vars: vars.clone(),
                    api: api.clone(),
                };
                let handler = handlers
                    .build(handlers.name_of(self.handler), config)
                    .await?;
                Some((bot_id.clone(), BotRuntime { api, handler }))
            }
            None => None,
        };
        let registry = registry.map(|source| {
            RegistryBots::new(
                Arc::new(Registry::new(source, self.registry_refresh)),
                handlers,
                telegram_for(self.telegram_api_url.clone()),
                vars.clone(),
            )
        });
        Ok(Fleet::new(env, registry))
    }
}

/// A registry bot's Bot API client on Lambda: its own token, at `url`. A bot without a token
/// cannot send; its updates back off until `tgq bots add` is done with it.
fn telegram_for(url: String) -> Connect {
    Arc::new(move |bot| {
        let token = bot
            .token
            .clone()
            .ok_or("it has no token in the bot registry")?;
        let api = HttpBotApi::new(&url, token, defaults::TELEGRAM_TIMEOUT)?;
        Ok(Arc::new(api) as Arc<dyn BotApi>)
    })
}

/// An event record without a `messageId`: its failure could never be reported alone.
#[derive(Debug, thiserror::Error)]
#[error("an SQS record has no messageId, so its failure could not be reported alone; failing the whole batch, which Lambda returns to the queue")]
pub struct NamelessRecord;

/// The worker's second event source: the timer queue, whose records the relay moves
/// (docs/design/time.md).
pub struct TimerSource {
    /// The relay.
    pub relay: TimerRelay,
    /// The timer queue's ARN: records naming it as their source are timers on their way.
    pub queue_arn: String,
}

/// The worker's third event source: the broadcasts queue, whose records are the steps of the
/// stack's broadcast jobs (docs/design/broadcast-runs.md), run by core's [`BroadcastSteps`].
pub struct BroadcastSource {
    /// Runs the steps.
    pub steps: BroadcastSteps,
    /// The broadcasts queue's ARN: records naming it as their source are steps.
    pub queue_arn: String,
}

/// The worker's event sources besides the updates queue.
#[derive(Default)]
pub struct Sources {
    /// The timer queue, when the stack has one.
    pub timers: Option<TimerSource>,
    /// The broadcasts queue, when the stack has one.
    pub broadcasts: Option<BroadcastSource>,
}

/// [`handle`] for every event source of the worker: the event's records from the timer queue go
/// to the relay, those from the broadcasts queue to their jobs, the others to the worker. (An
/// event comes from one event source mapping, so it holds one kind.)
pub async fn handle_event(
    worker: &Worker,
    sources: &Sources,
    mut event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, NamelessRecord> {
    let from =
        |m: &SqsMessage, arn: Option<&str>| arn.is_some() && m.event_source_arn.as_deref() == arn;
    let timer_arn = sources.timers.as_ref().map(|t| t.queue_arn.as_str());
    let broadcast_arn = sources.broadcasts.as_ref().map(|b| b.queue_arn.as_str());
    let (relayed, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut event.payload.records)
        .into_iter()
        .partition(|m| from(m, timer_arn));
    let (steps, updates): (Vec<_>, Vec<_>) = rest.into_iter().partition(|m| from(m, broadcast_arn));
    let records = relayed
        .into_iter()
        .map(|m| {
            let message_id = m
                .message_id
                .filter(|id| !id.is_empty())
                .ok_or(NamelessRecord)?;
            Ok(RelayRecord {
                message_id,
                body: Bytes::from(m.body.unwrap_or_default()),
            })
        })
        .collect::<Result<Vec<_>, NamelessRecord>>()?;
    let steps = steps
        .into_iter()
        .map(queue_record)
        .collect::<Result<Vec<_>, _>>()?;
    let deadline = invocation_deadline(Timestamp(event.context.deadline), SystemClock.now());
    let mut response = SqsBatchResponse::default();
    if !updates.is_empty() {
        event.payload.records = updates;
        response = handle(worker, event).await?;
    }
    let mut failed = Vec::new();
    if let Some(source) = &sources.timers {
        let outcomes = source.relay.relay(&records).await;
        for (record, outcome) in records.into_iter().zip(outcomes) {
            if outcome == Relayed::Failed {
                failed.push(record.message_id);
            }
        }
    }
    if let Some(source) = &sources.broadcasts {
        failed.extend(source.steps.run(steps, deadline).await);
    }
    for id in failed {
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = id;
        response.batch_item_failures.push(failure);
    }
    Ok(response)
}

/// Handles one SQS event: every record in order, failures reported by message id. A record without
/// a message id fails the whole batch before anything runs: Lambda then returns every message to the
/// queue, which loses nothing, where dropping the record would.
pub async fn handle(
    worker: &Worker,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, NamelessRecord> {
    let records = event
        .payload
        .records
        .into_iter()
        .map(queue_record)
        .collect::<Result<Vec<_>, _>>()?;
    let deadline = invocation_deadline(Timestamp(event.context.deadline), SystemClock.now());
    // Every log line of the invocation carries its Lambda request id.
    let span = tracing::info_span!("invocation", request_id = %event.context.request_id);
    let report = worker
        .process_batch(&records, deadline)
        .instrument(span)
        .await;
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

/// Maps an event record to the use case's record; no SDK or event type goes further. The one place
/// a record without a message id is refused.
pub fn queue_record(message: SqsMessage) -> Result<QueueRecord, NamelessRecord> {
    let attribute = |name: &str| message.attributes.get(name).cloned();
    let message_id = message
        .message_id
        .clone()
        .filter(|id| !id.is_empty())
        .ok_or(NamelessRecord)?;
    Ok(QueueRecord {
        message_id,
        receipt: ReceiptHandle(message.receipt_handle.clone().unwrap_or_default()),
        body: Bytes::from(message.body.clone().unwrap_or_default()),
        group_id: MessageGroupId::from_raw(attribute("MessageGroupId").unwrap_or_default()),
        receive_count: attribute("ApproximateReceiveCount")
            .and_then(|n| n.parse().ok())
            .unwrap_or(1),
        // The event source mapping passes the message attributes a dead letter carries.
        dead_letter: crate::dead_letter_marks(|name| {
            message
                .message_attributes
                .get(name)
                .and_then(|a| a.string_value.as_deref())
        }),
    })
}
