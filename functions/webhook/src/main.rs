//! The webhook Lambda: config and AWS clients once per cold start, then one [`Webhook`] for every request.

use std::sync::Arc;

use lambda_http::{Error, Request};
use tgq_aws::{DynamoStore, SqsQueue};
use tgq_core::clock::SystemClock;
use tgq_core::config::Vars;
use tgq_core::ingest::{Ingest, Webhook, WebhookPorts};
use tgq_webhook::{handle, WebhookConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tgq_aws::init_logging();
    let config = WebhookConfig::from_vars(&Vars::from_env())?;
    let sdk = tgq_aws::aws_config().await;
    let secret =
        tgq_aws::resolve_secret(&aws_sdk_ssm::Client::new(&sdk), config.secret.clone()).await?;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ports = WebhookPorts {
        ingest: Ingest::PutThenSend {
            store: Arc::new(DynamoStore::new(
                aws_sdk_dynamodb::Client::new(&sdk),
                config.resources.table.clone(),
            )),
            queue: Arc::new(SqsQueue::new(
                sqs.clone(),
                config.resources.queue_url.clone(),
            )),
        },
        dead: Arc::new(SqsQueue::new(sqs, config.resources.dlq_url.clone())),
        clock: Arc::new(SystemClock),
    };
    let webhook = Webhook::new(config.settings(secret), ports);
    let metrics = tgq_aws::init_metrics(&config.bot_id)?;
    // Flushes the invocation's metrics as EMF lines after each request.
    metrics_cloudwatch_embedded::lambda::handler::run_http(metrics, |request: Request| {
        handle(&webhook, &config.allowed_sources, request)
    })
    .await
}
