//! The stack's broadcasts queue and its event source mapping to the worker
//! (docs/design/broadcast-runs.md), played by the harness as Lambda plays them for a FIFO queue
//! with a batch of one: receive a job's step, invoke the worker with it, delete it unless the
//! worker named it in `batchItemFailures` (then it shows again when the visibility the worker gave
//! it ends).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;

use anyhow::Context as _;
use aws_config::SdkConfig;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_sqs::types::MessageSystemAttributeName;

use crate::emulator::{create_fifo_queue, queue_arn, Stack};
use crate::esm::lambda_record;
use crate::functions::Functions;

/// How long a received step stays hidden when its invocation dies: it shows again this soon.
const VISIBILITY_SECS: i32 = 5;

/// A stack's broadcasts queue, and what the harness did with it.
pub struct BroadcastParts {
    sqs: aws_sdk_sqs::Client,
    /// The queue (`TGQ_BROADCASTS_QUEUE_URL`).
    pub queue_url: String,
    /// Its ARN.
    pub queue_arn: String,
    /// Steps handed to the worker.
    pub steps: u64,
    /// Steps the worker reported as not done (held until due, or to run again).
    pub held: u64,
    /// Invocations abandoned when the worker was killed.
    pub crashed: u64,
}

impl BroadcastParts {
    /// Creates `stack`'s broadcasts queue, as template.yaml declares it.
    pub async fn create(config: &SdkConfig, stack: &Stack) -> anyhow::Result<BroadcastParts> {
        Self::create_named(config, &format!("{}-broadcasts.fifo", stack.table)).await
    }

    /// Creates a broadcasts queue named `name` (ending `.fifo`).
    pub async fn create_named(config: &SdkConfig, name: &str) -> anyhow::Result<BroadcastParts> {
        let sqs = aws_sdk_sqs::Client::new(config);
        let queue_url = create_fifo_queue(&sqs, name, HashMap::new()).await?;
        let queue_arn = queue_arn(&sqs, &queue_url).await?;
        Ok(Self::on(sqs, queue_url, queue_arn))
    }

    /// The broadcasts queue at `queue_url` (a deployed stack's), received from with `sqs`.
    pub fn on(sqs: aws_sdk_sqs::Client, queue_url: String, queue_arn: String) -> Self {
        BroadcastParts {
            sqs,
            queue_url,
            queue_arn,
            steps: 0,
            held: 0,
            crashed: 0,
        }
    }

    /// The worker's settings for this queue, its chunks of `chunk` recipients.
    pub fn function_vars(&self, chunk: u64) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("TGQ_BROADCASTS_QUEUE_URL".into(), self.queue_url.clone()),
            ("TGQ_BROADCASTS_QUEUE_ARN".into(), self.queue_arn.clone()),
            ("TGQ_BROADCAST_CHUNK".into(), chunk.to_string()),
        ])
    }

    /// One receive and, when it found a step, one invocation of the worker with it; whether it
    /// found one.
    pub async fn step_once(
        &mut self,
        functions: &Functions,
        stack: &Stack,
    ) -> anyhow::Result<bool> {
        self.step_or_crash(functions, stack, std::future::pending())
            .await
    }

    /// [`BroadcastParts::step_once`], the invocation raced against `crash` (which kills the
    /// worker): when `crash` ends first the invocation is abandoned, as Lambda abandons one whose
    /// runtime died, and its step shows again when its visibility ends.
    pub async fn step_or_crash(
        &mut self,
        functions: &Functions,
        stack: &Stack,
        crash: impl Future<Output = ()>,
    ) -> anyhow::Result<bool> {
        let invoke = |event: SqsEvent| async move { functions.invoke_worker(&event).await };
        self.step_with(stack, invoke, crash).await
    }

    /// [`BroadcastParts::step_or_crash`] with the worker invoked by `invoke` (another harness's
    /// runtime).
    pub async fn step_with<F, Fut>(
        &mut self,
        stack: &Stack,
        invoke: F,
        crash: impl Future<Output = ()>,
    ) -> anyhow::Result<bool>
    where
        F: FnOnce(SqsEvent) -> Fut,
        Fut: Future<Output = anyhow::Result<SqsBatchResponse>>,
    {
        let messages = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(1)
            .visibility_timeout(VISIBILITY_SECS)
            .wait_time_seconds(0)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .context("ReceiveMessage broadcasts")?
            .messages
            .unwrap_or_default();
        let Some(message) = messages.into_iter().next() else {
            return Ok(false);
        };
        let mut record = lambda_record(&message, stack);
        record.event_source_arn = Some(self.queue_arn.clone());
        let mut event = SqsEvent::default();
        event.records = vec![record];
        self.steps += 1;
        let response = tokio::select! {
            response = invoke(event) => response?,
            () = crash => {
                self.crashed += 1;
                return Ok(true);
            }
        };
        if !response.batch_item_failures.is_empty() {
            self.held += 1;
            return Ok(true);
        }
        self.sqs
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(message.receipt_handle.unwrap_or_default())
            .send()
            .await
            .context("DeleteMessage broadcasts")?;
        Ok(true)
    }
}
