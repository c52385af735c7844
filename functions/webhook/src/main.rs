//! The webhook Lambda: its parts built once per cold start ([`tgq_webhook::assemble`]), then one
//! answer for every request.

use lambda_http::{Error, Request};
use tgq_core::config::Vars;
use tgq_webhook::{assemble, handle, WebhookConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tgq_aws::init_logging();
    let config = WebhookConfig::from_vars(&Vars::from_env())?;
    let webhooks = assemble(&config).await?;
    let metrics = tgq_aws::init_metrics()?;
    // Flushes the invocation's metrics as EMF lines after each request.
    metrics_cloudwatch_embedded::lambda::handler::run_http(metrics, |request: Request| {
        handle(&webhooks, &config.allowed_sources, request)
    })
    .await
}
