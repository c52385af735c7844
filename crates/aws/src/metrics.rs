//! The functions' metrics: what `tgq_core::metrics` counts, printed as CloudWatch
//! embedded-metric-format lines on stdout after each invocation (the Lambda integration of
//! `metrics_cloudwatch_embedded` flushes them), namespace `tgq`, with the invocation's request id
//! as a property. Each metric's labels become its dimensions: `BotId` (the bot it counts, set by
//! `tgq_core::metrics` on every metric) and, for some, one more (`Reason`, `ErrorClass`, `Cause`).
//! No default dimension is set: the crate's defaults may not repeat a label.

use metrics_cloudwatch_embedded::{Builder, Collector};

/// The property naming the invocation an EMF line belongs to.
const REQUEST_ID: &str = "RequestId";

/// Installs the process's metrics recorder and describes every metric; once per process (a cold
/// start). The Lambda runtime wrapper flushes the returned collector.
pub fn init_metrics() -> Result<&'static Collector, Box<dyn std::error::Error + Send + Sync>> {
    let collector = Builder::new()
        .cloudwatch_namespace(tgq_core::metrics::NAMESPACE)
        .with_lambda_request_id(REQUEST_ID)
        .init()?;
    tgq_core::metrics::describe();
    Ok(collector)
}
