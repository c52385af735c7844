//! The drill's side of the event source mapping (`tgq_e2e::esm`, which the suite uses too): the
//! worker invoked through the fake Lambda's invoke URL with the function's timeout, and a mapping
//! that carries on whatever happens, as Lambda does.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use futures::future::BoxFuture;
use tgq_e2e::esm::{EventSourceMapping, Invoke, OnTrouble, RunningMapping};
use tokio::sync::Notify;

use super::stack::DrillStack;

/// Invocations at once (the mapping's `MaximumConcurrency`): SQS's smallest, so that every scenario
/// meets the least concurrency a deployment can have.
pub const CONCURRENCY: usize = 2;

/// The worker behind the fake Lambda's invoke URL.
struct Worker {
    http: reqwest::Client,
    invoke_url: String,
    timeout: Duration,
}

impl Invoke for Worker {
    fn invoke<'e>(
        &'e self,
        event: &'e SqsEvent,
    ) -> BoxFuture<'e, anyhow::Result<SqsBatchResponse>> {
        Box::pin(async move {
            let answer = self
                .http
                .post(&self.invoke_url)
                .json(event)
                .timeout(self.timeout)
                .send()
                .await
                .context("the invocation did not answer in time")?;
            let status = answer.status();
            let value: serde_json::Value = answer.json().await.context("the answer is not JSON")?;
            if !status.is_success() || value.get("errorType").is_some() {
                bail!("the worker failed ({status}): {value}");
            }
            Ok(serde_json::from_value(value)?)
        })
    }
}

/// Starts polling `stack`'s queue and invoking the worker at `invoke_url`, at most `concurrency`
/// invocations at once; `sends` wakes it when a message was sent.
pub fn start(
    sqs: aws_sdk_sqs::Client,
    stack: DrillStack,
    invoke_url: String,
    visibility: Duration,
    invocation_timeout: Duration,
    concurrency: usize,
    sends: Arc<Notify>,
) -> RunningMapping {
    let worker = Worker {
        http: reqwest::Client::new(),
        invoke_url,
        timeout: invocation_timeout,
    };
    EventSourceMapping::to(sqs, stack.stack, worker, OnTrouble::CarryOn)
        .with_concurrency(concurrency)
        .with_visibility(visibility)
        .with_wake(sends)
        .spawn()
}
