//! The drill's SQS event source mapping: like `template.yaml`'s (batch ≤ 10,
//! `ReportBatchItemFailures`, several invocations at once), and like Lambda when things go wrong —
//! an invocation that fails or runs past its timeout deletes nothing, and its messages come back
//! when their visibility ends. (The suite's mapping in `tgq_e2e::esm` is one invocation at a time
//! and stops at the first failure, which is right for a test and wrong for a drill.)
//!
//! Every delivery also goes through `tgq_e2e::esm::DeliveryLog`, which counts what the emulator
//! hands out against SQS FIFO order; moto's deviations are reported, never corrected.
//!
//! One task receives, with short polls, one at a time, and hands each batch to a free invocation.
//! Lambda's pollers long-poll side by side, but moto 5.2 does two things with long polls that SQS
//! does not: a long poll decides once, when it starts, which message groups are held by messages
//! in flight, so a batch another poll takes meanwhile does not hold its group for it (a chat's
//! later update was handed out while the earlier one was in flight: the drill counted it out of
//! order); and while a visible message waits behind its group, each open long poll spins in
//! moto's one Python process, which then answers every call of both functions slower (one bot's
//! backlog slowed the other's pipeline through the emulator, not through tgq). What a long poll
//! gives, an answer as soon as a message is sent, the mapping has from the webhook's proxy
//! ([`tgq_e2e::proxy::Proxy::sends`]); a message that comes back after its visibility is found by
//! a poll every [`REVISIT`].

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use tgq_e2e::esm::{lambda_record, Delivery, DeliveryLog};
use tokio::sync::{Notify, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use super::stack::DrillStack;

/// Invocations at once (the mapping's `MaximumConcurrency`): SQS's smallest, so that every scenario
/// meets the least concurrency a deployment can have.
pub const CONCURRENCY: usize = 2;
/// Records per invocation.
const BATCH: i32 = 10;
/// After a poll that found nothing, the next one comes with the next message sent, or after this
/// long: how late a message is found that came back after its visibility (a retry, which waited
/// a second or more anyway), and 20 polls a second to moto while idle.
const REVISIT: Duration = Duration::from_millis(50);

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
    /// The receiving task; the invocations in flight are its own.
    receiving: JoinHandle<()>,
    log: Arc<Mutex<DeliveryLog>>,
    /// Its counters.
    pub stats: Arc<EsmStats>,
}

impl Esm {
    /// Starts polling `stack`'s queue and invoking the worker at `invoke_url`, at most
    /// `concurrency` invocations at once; `sends` wakes it when a message was sent.
    pub fn start(
        sqs: aws_sdk_sqs::Client,
        stack: DrillStack,
        invoke_url: String,
        visibility: Duration,
        invocation_timeout: Duration,
        concurrency: usize,
        sends: Arc<Notify>,
    ) -> Esm {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(DeliveryLog::default()));
        let stats = Arc::new(EsmStats::default());
        let poller = Arc::new(Poller {
            sqs,
            stack,
            invoke_url,
            http: reqwest::Client::new(),
            visibility,
            invocation_timeout,
            log: log.clone(),
            stats: stats.clone(),
        });
        let slots = Arc::new(Semaphore::new(concurrency));
        let receiving = {
            let stop = stop.clone();
            tokio::spawn(async move {
                // Dropped with this task when the mapping stops: invocations in flight go with it.
                let mut invocations = JoinSet::new();
                while !stop.load(Ordering::SeqCst) {
                    let Ok(slot) = slots.clone().acquire_owned().await else {
                        return;
                    };
                    while invocations.try_join_next().is_some() {}
                    match poller.receive().await {
                        Ok(received) if !received.messages.is_empty() => {
                            let poller = poller.clone();
                            invocations.spawn(async move {
                                let _ = poller.invoke(received).await;
                                drop(slot);
                            });
                        }
                        Ok(_) => {
                            drop(slot);
                            let _ = tokio::time::timeout(REVISIT, sends.notified()).await;
                        }
                        Err(_) => {
                            drop(slot);
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                }
            })
        };
        Esm {
            stop,
            receiving,
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
        self.receiving.abort();
    }
}

/// A batch handed out by the queue.
struct Received {
    messages: Vec<Message>,
    deliveries: Vec<Delivery>,
    /// Its number in the delivery log.
    batch: u64,
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
    /// One short poll for a batch, recorded in the delivery log in the order it was handed out.
    async fn receive(&self) -> anyhow::Result<Received> {
        let messages = self
            .sqs
            .receive_message()
            .queue_url(&self.stack.queue_url)
            .max_number_of_messages(BATCH)
            .visibility_timeout(self.visibility.as_secs() as i32)
            .wait_time_seconds(0)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await?
            .messages
            .unwrap_or_default();
        let deliveries: Vec<Delivery> = messages
            .iter()
            .filter_map(|m| Delivery::of(m).ok())
            .collect();
        let batch = match deliveries.is_empty() {
            true => 0,
            false => self
                .log
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .deliver(&deliveries),
        };
        Ok(Received {
            messages,
            deliveries,
            batch,
        })
    }

    /// Invokes the worker with a batch and deletes what it finished.
    async fn invoke(&self, received: Received) -> anyhow::Result<()> {
        let Received {
            messages,
            deliveries,
            batch,
        } = received;
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
