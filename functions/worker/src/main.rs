//! The worker Lambda: its parts built once per cold start ([`tgq_worker::assemble`]), then one
//! [`Worker`](tgq_core::worker::Worker) run for every SQS batch.

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent};
use tgq_core::config::Vars;
use tgq_worker::{assemble, handle_event, WorkerConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tgq_aws::init_logging();
    let vars = Vars::from_env();
    let config = WorkerConfig::from_vars(&vars)?;
    let (worker, sources) = assemble(&config, &vars, tgq_bot::handlers()).await?;
    let (worker, sources) = (&worker, &sources);
    let metrics = tgq_aws::init_metrics()?;
    // Flushes the invocation's metrics as EMF lines after each batch.
    metrics_cloudwatch_embedded::lambda::handler::run(
        metrics,
        |event: LambdaEvent<SqsEvent>| async move {
            handle_event(worker, sources, event)
                .await
                .map_err(Error::from)
        },
    )
    .await
}
