//! The worker Lambda's parts, built once per cold start from its configuration: the AWS clients,
//! every bot's Telegram client and handler (a registry bot's when it is first met), the
//! [`Worker`] use case with its ports, and the event sources of timers and broadcasts.

use std::sync::Arc;

use crate::{
    AwsTimers, DynamoBroadcasts, DynamoBudgetCells, DynamoStore, Schedules, SqsQueue,
    SqsTimerQueue, SsmRegistry,
};
use tgq_core::bots::BotDirectory;
use tgq_core::broadcast::steps::BroadcastSteps;
use tgq_core::broadcast::{BroadcastRunner, BroadcastStore, QueuedBroadcasts};
use tgq_core::budget::{SendBudget, SharedBudget};
use tgq_core::clock::SystemClock;
use tgq_core::config::Vars;
use tgq_core::error::BoxError;
use tgq_core::handlers::HandlerRegistry;
use tgq_core::policy::RetryPolicy;
use tgq_core::ports::TimerScheduler;
use tgq_core::registry::BotSource;
use tgq_core::relay::TimerRelay;
use tgq_core::worker::{Worker, WorkerPorts};

use super::{BroadcastSource, Sources, TimerSource, WorkerConfig};

/// The worker and its event sources for `config`, the bots' handlers taken from `handlers`.
pub async fn assemble(
    config: &WorkerConfig,
    vars: &Vars,
    handlers: HandlerRegistry,
) -> Result<(Worker, Sources), BoxError> {
    let sdk = crate::aws_config().await;
    let ssm = aws_sdk_ssm::Client::new(&sdk);
    let env_token = match &config.env_bot {
        Some((_, token)) => Some(crate::resolve_secret(&ssm, token.clone()).await?),
        None => None,
    };
    let registry = config.bots.clone().map(|layout| {
        Arc::new(SsmRegistry::without_secrets(ssm.clone(), layout)) as Arc<dyn BotSource>
    });
    let bots: Arc<dyn BotDirectory> =
        Arc::new(config.fleet(vars, handlers, env_token, registry).await?);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let updates = Arc::new(SqsQueue::new(
        sqs.clone(),
        config.resources.queue_url.clone(),
    ));
    // Timers wait on the timer queue, or as schedules when due later (docs/design/time.md); the
    // same function relays them from that queue into their chats when they are due.
    let timers = config.timers.as_ref().map(|resources| {
        let queue = SqsTimerQueue::new(sqs.clone(), resources.queue_url.clone());
        let schedules = Schedules {
            client: aws_sdk_scheduler::Client::new(&sdk),
            group: resources.schedule_group.clone(),
            queue_arn: resources.queue_arn.clone(),
            role_arn: resources.scheduler_role_arn.clone(),
        };
        let source = TimerSource {
            relay: TimerRelay::new(
                Arc::new(queue.clone()),
                updates.clone(),
                Arc::new(SystemClock),
            ),
            queue_arn: resources.queue_arn.clone(),
        };
        let scheduler = AwsTimers::new(queue, schedules, resources.reach);
        (Arc::new(scheduler) as Arc<dyn TimerScheduler>, source)
    });
    let (scheduler, source) = timers.unzip();
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let store = Arc::new(DynamoStore::new(
        dynamodb.clone(),
        config.resources.table.clone(),
    ));
    // Telegram's limits belong to the bot, not to this container: each bot's sends are booked in
    // the table every container of the stack shares (docs/design/pacing.md).
    let budget: Arc<dyn SendBudget> = Arc::new(SharedBudget::new(
        Arc::new(DynamoBudgetCells::new(
            dynamodb.clone(),
            config.resources.table.clone(),
        )),
        config.rate_limits,
        Arc::new(SystemClock),
    ));
    // Broadcasts run as chains of steps on their own queue, a message group per job, paced by
    // the same budget (docs/design/broadcast-runs.md); a handler's broadcast starts one there.
    let broadcasts = config.broadcasts.as_ref().map(|resources| {
        let queue = Arc::new(SqsQueue::new(sqs.clone(), resources.queue_url.clone()));
        let store = Arc::new(QueuedBroadcasts::new(
            Arc::new(DynamoBroadcasts::new(
                dynamodb.clone(),
                config.resources.table.clone(),
            )),
            queue.clone(),
        ));
        let source = BroadcastSource {
            steps: BroadcastSteps {
                runner: BroadcastRunner {
                    store: store.clone(),
                    budget: budget.clone(),
                    bot_rate: config.rate_limits.per_second,
                    clock: Arc::new(SystemClock),
                    retry: RetryPolicy::default(),
                },
                bots: bots.clone(),
                queue: queue.clone(),
                visibility: queue,
                chunk: resources.chunk,
                clock: Arc::new(SystemClock),
            },
            queue_arn: resources.queue_arn.clone(),
        };
        (store as Arc<dyn BroadcastStore>, source)
    });
    let (broadcast_store, broadcast_source) = broadcasts.unzip();
    let dead = Arc::new(SqsQueue::new(sqs, config.resources.dlq_url.clone()));
    let ports = WorkerPorts {
        budget,
        timers: scheduler,
        broadcasts: broadcast_store,
        ..WorkerPorts::around(store, updates, dead)
    };
    let worker = Worker::new(config.settings.clone(), ports, bots);
    let sources = Sources {
        timers: source,
        broadcasts: broadcast_source,
    };
    Ok((worker, sources))
}
