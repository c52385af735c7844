//! The drill's SQS event source mapping: like `template.yaml`'s (batch ≤ 10,
//! `ReportBatchItemFailures`, several invocations at once), and like Lambda when things go wrong —
//! an invocation that fails or runs past its timeout deletes nothing, and its messages come back
//! when their visibility ends. (The suite's mapping in `tgq_e2e::esm` is one invocation at a time
//! and stops at the first failure, which is right for a test and wrong for a drill.)
//!
//! Every delivery also goes through `tgq_e2e::esm::DeliveryLog`, which counts what the emulator
//! hands out against SQS FIFO order; moto's deviations are reported, never corrected.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use tgq_e2e::esm::{lambda_record, Delivery, DeliveryLog};
use tokio::task::JoinHandle;

use super::stack::DrillStack;

/// Invocations at once (the mapping's `MaximumConcurrency`): SQS's smallest, so that every scenario
/// meets the least concurrency a deployment can have.
pub const CONCURRENCY: usize = 2;
/// Records per invocation.
const BATCH: i32 = 10;

/// What the mapping did.
#[derive(Debug, Default)]
pub struct EsmStats {
    /// Invocations that failed or ran past the timeout: their batch was left to its visibility.
    pub failed_invocations: AtomicU64,
    /// Invocations answered.
    pub invocations: AtomicU64,
}

/// A running mapping.
pub struct Esm {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
    log: Arc<Mutex<DeliveryLog>>,
    /// Its counters.
    pub stats: Arc<EsmStats>,
}

impl Esm {
    /// Starts polling `stack`'s queue and invoking the worker at `invoke_url`.
    pub fn start(
        sqs: aws_sdk_sqs::Client,
        stack: DrillStack,
        invoke_url: String,
        visibility: Duration,
        invocation_timeout: Duration,
        concurrency: usize,
    ) -> Esm {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(DeliveryLog::default()));
        let stats = Arc::new(EsmStats::default());
        let http = reqwest::Client::new();
        let tasks = (0..concurrency)
            .map(|_| {
                let poller = Poller {
                    sqs: sqs.clone(),
                    stack: stack.clone(),
                    invoke_url: invoke_url.clone(),
                    http: http.clone(),
                    visibility,
                    invocation_timeout,
                    log: log.clone(),
                    stats: stats.clone(),
                };
                let stop = stop.clone();
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        if poller.poll().await.is_err() {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                })
            })
            .collect();
        Esm {
            stop,
            tasks,
            log,
            stats,
        }
    }

    /// Deliveries the emulator made out of FIFO order so far.
    pub fn fifo_breaches(&self) -> usize {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .breaches()
            .len()
    }

    /// Stops polling; invocations in flight are abandoned.
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.abort();
        }
    }
}

struct Poller {
    sqs: aws_sdk_sqs::Client,
    stack: DrillStack,
    invoke_url: String,
    http: reqwest::Client,
    visibility: Duration,
    invocation_timeout: Duration,
    log: Arc<Mutex<DeliveryLog>>,
    stats: Arc<EsmStats>,
}

impl Poller {
    async fn poll(&self) -> anyhow::Result<()> {
        let messages = self
            .sqs
            .receive_message()
            .queue_url(&self.stack.queue_url)
            .max_number_of_messages(BATCH)
            .visibility_timeout(self.visibility.as_secs() as i32)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await?
            .messages
            .unwrap_or_default();
        if messages.is_empty() {
            return Ok(());
        }
        let deliveries: Vec<Delivery> = messages
            .iter()
            .filter_map(|m| Delivery::of(m).ok())
            .collect();
        let batch = self
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .deliver(&deliveries);
        let mut event = SqsEvent::default();
        event.records = messages
            .iter()
            .map(|m| lambda_record(m, &self.stack))
            .collect();
        let answer = self
            .http
            .post(&self.invoke_url)
            .json(&event)
            .timeout(self.invocation_timeout)
            .send()
            .await;
        let failed: HashSet<String> = match answer {
            Ok(answer) if answer.status().is_success() => {
                let value: serde_json::Value = answer.json().await.unwrap_or_default();
                if value.get("errorType").is_some() {
                    self.stats.failed_invocations.fetch_add(1, Ordering::SeqCst);
                    return Ok(());
                }
                self.stats.invocations.fetch_add(1, Ordering::SeqCst);
                value["batchItemFailures"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_owned))
                    .collect()
            }
            // A failed or timed-out invocation: nothing is deleted; the messages come back when
            // their visibility ends, as they do after a Lambda timeout.
            _ => {
                self.stats.failed_invocations.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
        };
        let finished: Vec<&Message> = messages
            .iter()
            .filter(|m| !failed.contains(m.message_id.as_deref().unwrap_or_default()))
            .collect();
        if !finished.is_empty() {
            let entries = finished
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()?;
            self.sqs
                .delete_message_batch()
                .queue_url(&self.stack.queue_url)
                .set_entries(Some(entries))
                .send()
                .await?;
        }
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .settle(batch, &deliveries, &failed);
        Ok(())
    }
}
