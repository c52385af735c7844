//! The webhook Lambda's parts, built once per cold start from its configuration: the AWS clients,
//! the environment's bot's secret, the registry (read at the first request that needs it), and
//! one [`Webhook`](tgq_core::ingest::Webhook) use case per bot ([`Webhooks`]).

use std::sync::Arc;

use crate::{DynamoStore, SqsQueue, SsmRegistry};
use tgq_core::clock::SystemClock;
use tgq_core::error::BoxError;
use tgq_core::ingest::{Ingest, WebhookPorts, Webhooks};
use tgq_core::registry::Registry;

use super::WebhookConfig;

/// Every bot's webhook for `config`.
pub async fn assemble(config: &WebhookConfig) -> Result<Webhooks, BoxError> {
    let sdk = crate::aws_config().await;
    let ssm = aws_sdk_ssm::Client::new(&sdk);
    let env_secret = match &config.env_bot {
        Some((_, secret)) => Some(crate::resolve_secret(&ssm, secret.clone()).await?),
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
    Ok(config.webhooks(ports, env_secret, registry))
}
