//! The functions' metrics: what `tgq_core::metrics` counts, printed as CloudWatch
//! embedded-metric-format lines on stdout after each invocation (the Lambda integration of
//! `metrics_cloudwatch_embedded` flushes them), namespace `tgq`, dimension `BotId`, with the
//! invocation's request id as a property.

use metrics_cloudwatch_embedded::{Builder, Collector};
use tgq_core::ids::BotId;

/// The property naming the invocation an EMF line belongs to.
const REQUEST_ID: &str = "RequestId";

/// Installs the process's metrics recorder for `bot_id` and describes every metric; once per
/// process (a cold start). The Lambda runtime wrapper flushes the returned collector.
pub fn init_metrics(
    bot_id: &BotId,
) -> Result<&'static Collector, Box<dyn std::error::Error + Send + Sync>> {
    let collector = Builder::new()
        .cloudwatch_namespace(tgq_core::metrics::NAMESPACE)
        .with_dimension(tgq_core::metrics::BOT_ID, bot_id.to_string())
        .with_lambda_request_id(REQUEST_ID)
        .init()?;
    tgq_core::metrics::describe();
    Ok(collector)
}
