//! The worker Lambda: config, AWS clients and the Telegram client once per cold start, then one
//! [`Worker`] for every SQS batch.

use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent};
use tgq_aws::{DynamoStore, SqsQueue};
use tgq_core::clock::SystemClock;
use tgq_core::config::Vars;
use tgq_core::echo::EchoBot;
use tgq_core::handler::HandlerChoice;
use tgq_core::pacer::Pacer;
use tgq_core::telegram::BotApi;
use tgq_core::worker::{Worker, WorkerPorts};
use tgq_core::{BotConfig, Handler};
use tgq_telegram::HttpBotApi;
use tgq_worker::{handle, WorkerConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tgq_aws::init_logging();
    let vars = Vars::from_env();
    let config = WorkerConfig::from_vars(&vars)?;
    let sdk = tgq_aws::aws_config().await;
    let token =
        tgq_aws::resolve_secret(&aws_sdk_ssm::Client::new(&sdk), config.token.clone()).await?;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let store = Arc::new(DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        config.resources.table.clone(),
    ));
    let api: Arc<dyn BotApi> = Arc::new(HttpBotApi::new(
        &config.telegram_api_url,
        token,
        tgq_core::defaults::TELEGRAM_TIMEOUT,
    )?);
    let handler: Arc<dyn Handler> = match config.handler {
        HandlerChoice::Bot => {
            let bot = BotConfig {
                bot_id: config.bot_id.clone(),
                vars,
                api: api.clone(),
            };
            Arc::new(tgq_bot::build(&bot).await?)
        }
        HandlerChoice::Echo => Arc::new(EchoBot),
    };
    let ports = WorkerPorts {
        ledger: store.clone(),
        visibility: Arc::new(SqsQueue::new(
            sqs.clone(),
            config.resources.queue_url.clone(),
        )),
        dead: Arc::new(SqsQueue::new(sqs, config.resources.dlq_url.clone())),
        api,
        pacer: Arc::new(Pacer::new(config.rate_limits)),
        clock: Arc::new(SystemClock),
        reset: store.clone(),
        audit: store,
    };
    let worker = Worker::new(config.settings.clone(), ports, handler);
    let worker = &worker;
    let metrics = tgq_aws::init_metrics(&config.bot_id)?;
    // Flushes the invocation's metrics as EMF lines after each batch.
    metrics_cloudwatch_embedded::lambda::handler::run(
        metrics,
        |event: LambdaEvent<SqsEvent>| async move {
            handle(worker, event).await.map_err(Error::from)
        },
    )
    .await
}
