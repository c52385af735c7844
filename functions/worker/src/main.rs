//! The worker Lambda: config, AWS clients and the Telegram client once per cold start, then one
//! [`Worker`] for every SQS batch.

use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use tgq_aws::{DynamoStore, SqsQueue};
use tgq_bot::ExampleBot;
use tgq_core::clock::SystemClock;
use tgq_core::config::Vars;
use tgq_core::worker::{Worker, WorkerPorts};
use tgq_telegram::HttpBotApi;
use tgq_worker::{handle, WorkerConfig, TELEGRAM_TIMEOUT};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let config = WorkerConfig::from_vars(&Vars::from_env())?;
    let sdk = tgq_aws::aws_config().await;
    let token =
        tgq_aws::resolve_secret(&aws_sdk_ssm::Client::new(&sdk), config.token.clone()).await?;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let store = Arc::new(DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        config.resources.table.clone(),
    ));
    let ports = WorkerPorts {
        ledger: store,
        visibility: Arc::new(SqsQueue::new(
            sqs.clone(),
            config.resources.queue_url.clone(),
        )),
        dead: Arc::new(SqsQueue::new(sqs, config.resources.dlq_url.clone())),
        api: Arc::new(HttpBotApi::new(
            &config.telegram_api_url,
            token,
            TELEGRAM_TIMEOUT,
        )?),
        clock: Arc::new(SystemClock),
    };
    let worker = Worker::new(config.settings.clone(), ports, Arc::new(ExampleBot));
    let worker = &worker;
    run(service_fn(|event: LambdaEvent<SqsEvent>| async move {
        handle(worker, event).await.map_err(Error::from)
    }))
    .await
}
