//! The webhook Lambda: config and AWS clients once per cold start, then one [`Webhooks`] (the
//! environment's bot and the registry's) for every request.

use std::sync::Arc;

use lambda_http::{Error, Request};
use tgq_aws::{DynamoStore, SqsQueue, SsmRegistry};
use tgq_core::clock::SystemClock;
use tgq_core::config::Vars;
use tgq_core::ingest::{Ingest, WebhookPorts};
use tgq_core::registry::Registry;
use tgq_webhook::{handle, WebhookConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tgq_aws::init_logging();
    let config = WebhookConfig::from_vars(&Vars::from_env())?;
    let sdk = tgq_aws::aws_config().await;
    let ssm = aws_sdk_ssm::Client::new(&sdk);
    let env_secret = match &config.env_bot {
        Some((_, secret)) => Some(tgq_aws::resolve_secret(&ssm, secret.clone()).await?),
        None => None,
    };
    // Read at the first request that needs it, then again after each refresh interval; the
    // webhook reads every bot's secret, never its token.
    let registry = config.bots.clone().map(|layout| {
        let source = Arc::new(SsmRegistry::without_tokens(ssm.clone(), layout));
        Arc::new(Registry::new(source, config.registry_refresh))
    });
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
    let webhooks = config.webhooks(ports, env_secret, registry);
    let metrics = tgq_aws::init_metrics()?;
    // Flushes the invocation's metrics as EMF lines after each request.
    metrics_cloudwatch_embedded::lambda::handler::run_http(metrics, |request: Request| {
        handle(&webhooks, &config.allowed_sources, request)
    })
    .await
}
