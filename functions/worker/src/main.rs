//! The worker Lambda: config, AWS clients and every bot's Telegram client and handler once per cold
//! start (a registry bot's when it is first met), then one [`Worker`] for every SQS batch.

use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent};
use tgq_aws::{
    AwsTimers, DynamoBudgetCells, DynamoStore, Schedules, SqsQueue, SqsTimerQueue, SsmRegistry,
};
use tgq_core::budget::SharedBudget;
use tgq_core::clock::SystemClock;
use tgq_core::config::Vars;
use tgq_core::ports::TimerScheduler;
use tgq_core::registry::BotSource;
use tgq_core::relay::TimerRelay;
use tgq_core::worker::{Worker, WorkerPorts};
use tgq_worker::{handle_event, TimerSource, WorkerConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tgq_aws::init_logging();
    let vars = Vars::from_env();
    let config = WorkerConfig::from_vars(&vars)?;
    let sdk = tgq_aws::aws_config().await;
    let ssm = aws_sdk_ssm::Client::new(&sdk);
    let env_token = match &config.env_bot {
        Some((_, token)) => Some(tgq_aws::resolve_secret(&ssm, token.clone()).await?),
        None => None,
    };
    let registry = config.bots.clone().map(|layout| {
        Arc::new(SsmRegistry::without_secrets(ssm.clone(), layout)) as Arc<dyn BotSource>
    });
    let bots = config
        .fleet(&vars, tgq_bot::handlers(), env_token, registry)
        .await?;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let updates = Arc::new(SqsQueue::new(
        sqs.clone(),
        config.resources.queue_url.clone(),
    ));
    // Timers wait on the timer queue, or as schedules when due later (ARCHITECTURE §12); the
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
    // the table every container of the stack shares (ARCHITECTURE §4).
    let budget = SharedBudget::new(
        Arc::new(DynamoBudgetCells::new(
            dynamodb,
            config.resources.table.clone(),
        )),
        config.rate_limits,
        Arc::new(SystemClock),
    );
    let ports = WorkerPorts {
        ledger: store.clone(),
        visibility: updates,
        dead: Arc::new(SqsQueue::new(sqs, config.resources.dlq_url.clone())),
        budget: Arc::new(budget),
        clock: Arc::new(SystemClock),
        reset: store.clone(),
        audit: store,
        timers: scheduler,
        broadcasts: None,
    };
    let worker = Worker::new(config.settings.clone(), ports, Arc::new(bots));
    let worker = &worker;
    let source = source.as_ref();
    let metrics = tgq_aws::init_metrics()?;
    // Flushes the invocation's metrics as EMF lines after each batch.
    metrics_cloudwatch_embedded::lambda::handler::run(
        metrics,
        |event: LambdaEvent<SqsEvent>| async move {
            handle_event(worker, source, event)
                .await
                .map_err(Error::from)
        },
    )
    .await
}
