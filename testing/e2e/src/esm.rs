//! The SQS event source mapping of `template.yaml` (batch ≤ 10, `ReportBatchItemFailures`,
//! several invocations at once), played by the harness for the suite and for the drill: receive,
//! invoke the worker with the event Lambda would build, delete every record not named in
//! `batchItemFailures`, and leave the failed ones to the visibility the worker gave them.
//!
//! [`OnTrouble`] says what a failure does: a test stops at the first failed invocation or FIFO
//! breach; a drill carries on as Lambda does (a failed or timed-out invocation deletes nothing) and
//! counts the breaches. [`DeliveryLog`] checks every delivery against SQS FIFO semantics per message
//! group, so a breach of the emulator's is reported with what the queue handed out, not later as
//! replies out of order.
//!
//! Invocations run side by side ([`EventSourceMapping::with_concurrency`]); receives are short polls
//! made one at a time, because moto's long polls decide which groups are held when they start and
//! spin while a group waits. A [`Notify`] the sender wakes ([`EventSourceMapping::with_wake`]) gives
//! what a long poll would. A group whose messages' visibility expired together comes back in order
//! only because `scripts/moto_server.py` makes moto hand it out as SQS does; [`DeliveryLog`]
//! reports a group handed back out of order as a breach.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use futures::future::BoxFuture;
use tokio::sync::Notify;

use crate::emulator::{queue_depth, Stack};
use crate::functions::{Functions, INVOCATION_TIMEOUT};

/// Records per invocation: the most a FIFO event source hands a function.
const BATCH_SIZE: i32 = 10;
/// After a poll that found nothing, the next one comes with the next wake, or after this long: how
/// late a message is found that came back after its visibility (a retry, which waited a second or
/// more anyway), and 20 polls a second to moto while idle.
pub const REVISIT: Duration = Duration::from_millis(50);
/// How long a mapping that carries on waits after a receive that failed.
const RECEIVE_RETRY: Duration = Duration::from_millis(500);

/// How the worker is invoked: an error is a failed invocation (a function error, a runtime that
/// died, a timeout), after which Lambda deletes nothing.
pub trait Invoke: Send + Sync {
    /// Invokes the worker with `event` and reads its partial batch response.
    fn invoke<'e>(&'e self, event: &'e SqsEvent)
        -> BoxFuture<'e, anyhow::Result<SqsBatchResponse>>;
}

impl Invoke for &Functions {
    fn invoke<'e>(
        &'e self,
        event: &'e SqsEvent,
    ) -> BoxFuture<'e, anyhow::Result<SqsBatchResponse>> {
        Box::pin(self.invoke_worker(event))
    }
}

/// What the mapping does when an invocation fails or the queue breaks FIFO order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnTrouble {
    /// Stops and reports it: a test fails there.
    Fail,
    /// Does what Lambda does, and counts it: the drill goes on.
    CarryOn,
}

/// The event source mapping between the updates queue and the worker.
pub struct EventSourceMapping<'a> {
    sqs: aws_sdk_sqs::Client,
    stack: Stack,
    worker: Box<dyn Invoke + 'a>,
    on_trouble: OnTrouble,
    /// Invocations at once.
    concurrency: usize,
    /// Held by the invocation slot whose receive is in flight.
    receiving: tokio::sync::Mutex<()>,
    /// How long a received batch stays hidden.
    visibility: Duration,
    wake: Arc<Notify>,
    log: Mutex<DeliveryLog>,
    stats: Mutex<MappingStats>,
}

/// What the mapping did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MappingStats {
    /// Receives that returned at least one message.
    pub batches: u64,
    /// Records handed to the worker (redeliveries included).
    pub records: u64,
    /// Records the worker named in `batchItemFailures`.
    pub reported_failures: u64,
    /// Messages deleted after the worker finished them.
    pub deleted: u64,
    /// The highest `ApproximateReceiveCount` seen.
    pub max_receive_count: u32,
    /// Invocations whose worker was killed before it answered; their batches were left to expire.
    pub crashed_invocations: u64,
    /// Invocations that failed or ran past their timeout, when the mapping carries on: their
    /// batches were left to their visibility.
    pub failed_invocations: u64,
    /// The most invocations that were running at the same moment.
    pub most_concurrent_invocations: u64,
    /// Invocations running now.
    running: u64,
}

/// What became of one invocation.
enum Invoked {
    Answered(SqsBatchResponse),
    /// The worker died or failed first; nothing is deleted, as Lambda deletes nothing for a failed
    /// invocation.
    Abandoned,
}

/// A mapping polling on a task of its own ([`EventSourceMapping::spawn`]).
pub struct RunningMapping {
    mapping: Arc<EventSourceMapping<'static>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl RunningMapping {
    /// The mapping, to read its log and statistics.
    pub fn mapping(&self) -> &EventSourceMapping<'static> {
        &self.mapping
    }

    /// Stops polling; invocations in flight are abandoned, their batches left to their
    /// visibility.
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.abort();
    }
}

impl<'a> EventSourceMapping<'a> {
    /// A mapping from `stack`'s updates queue to the worker of `functions`, for a test: one
    /// invocation at a time, the visibility timeout `template.yaml` gives the queue (six times the
    /// worker's timeout), and [`OnTrouble::Fail`].
    pub fn new(sqs: aws_sdk_sqs::Client, stack: Stack, functions: &'a Functions) -> Self {
        EventSourceMapping::to(sqs, stack, functions, OnTrouble::Fail)
            .with_visibility(INVOCATION_TIMEOUT * 6)
    }

    /// A mapping from `stack`'s updates queue to `worker`: one invocation at a time, hiding each
    /// batch for 60 s.
    pub fn to(
        sqs: aws_sdk_sqs::Client,
        stack: Stack,
        worker: impl Invoke + 'a,
        on_trouble: OnTrouble,
    ) -> Self {
        EventSourceMapping {
            sqs,
            stack,
            worker: Box::new(worker),
            on_trouble,
            concurrency: 1,
            receiving: tokio::sync::Mutex::new(()),
            visibility: Duration::from_secs(60),
            wake: Arc::new(Notify::new()),
            log: Mutex::new(DeliveryLog::default()),
            stats: Mutex::new(MappingStats::default()),
        }
    }

    /// Runs up to `concurrency` invocations at once, as Lambda scales a FIFO event source out over
    /// message groups (the mapping's `MaximumConcurrency`).
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// Hides each received batch for `visibility` (whole seconds).
    pub fn with_visibility(mut self, visibility: Duration) -> Self {
        self.visibility = visibility;
        self
    }

    /// Polls again as soon as `wake` is notified (a message was sent), not only every
    /// [`REVISIT`].
    pub fn with_wake(mut self, wake: Arc<Notify>) -> Self {
        self.wake = wake;
        self
    }

    /// The receive order so far, per message group.
    pub fn log(&self) -> DeliveryLog {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What the mapping has done so far.
    pub fn stats(&self) -> MappingStats {
        self.stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Polls until `sending_done()` holds and the queue holds nothing at all (every message deleted),
    /// or fails: when the mapping fails on trouble and meets some, or `limit` passes.
    pub async fn run_until_drained(
        &self,
        sending_done: impl Fn() -> bool,
        limit: Duration,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let sending_done = &sending_done;
        let drained = &AtomicBool::new(false);
        let slots = (0..self.concurrency).map(|_| async move {
            loop {
                // Read before polling: once it holds, every update is in the queue or deleted.
                let sent = sending_done();
                let handed = self.poll::<std::future::Pending<()>>(None).await?;
                if drained.load(Ordering::SeqCst) {
                    return Ok(());
                }
                if sent && handed == 0 && self.stats().running == 0 {
                    let depth = queue_depth(&self.sqs, &self.stack.queue_url).await?;
                    if depth.is_empty() {
                        drained.store(true, Ordering::SeqCst);
                        return Ok(());
                    }
                }
                if started.elapsed() > limit {
                    let depth = queue_depth(&self.sqs, &self.stack.queue_url).await?;
                    bail!(
                        "the queue did not drain within {limit:?}: {depth:?}, {:?}; outstanding \
                         per group: {:?}",
                        self.stats(),
                        self.log().outstanding()
                    );
                }
            }
        });
        futures::future::try_join_all(slots).await?;
        Ok(())
    }

    /// Receives one batch and invokes the worker with it, but `kill` — which is to kill the
    /// worker's instances — runs alongside; once it has, the invocation is abandoned, as Lambda
    /// fails an invocation whose runtime exited: nothing is deleted, and the batch comes back when
    /// its visibility timeout ends. Fails when the queue had nothing, or the worker answered first.
    pub async fn poll_and_crash(&self, kill: impl Future<Output = ()>) -> anyhow::Result<usize> {
        let limit = Instant::now() + Duration::from_secs(30);
        let mut kill = std::pin::pin!(kill);
        loop {
            let before = self.stats().crashed_invocations;
            let handed = self.poll(Some(kill.as_mut())).await?;
            if handed > 0 {
                if self.stats().crashed_invocations == before {
                    bail!("the worker answered before it could be killed");
                }
                return Ok(handed);
            }
            if Instant::now() > limit {
                bail!("nothing was received for the invocation meant to crash");
            }
        }
    }

    /// One receive, one invocation (raced against `crash` when given), one delete; returns how
    /// many records the worker was handed. A receive that finds nothing waits for the next wake or
    /// [`REVISIT`] before it lets the next slot receive.
    async fn poll<F: Future<Output = ()>>(
        &self,
        crash: Option<Pin<&mut F>>,
    ) -> anyhow::Result<usize> {
        let turn = self.receiving.lock().await;
        let messages = match self.receive().await {
            Ok(messages) => messages,
            // The emulator answered badly (a drill may have stopped it): the next poll retries.
            Err(_) if self.on_trouble == OnTrouble::CarryOn => {
                tokio::time::sleep(RECEIVE_RETRY).await;
                return Ok(0);
            }
            Err(err) => return Err(err),
        };
        if messages.is_empty() {
            let _ = tokio::time::timeout(REVISIT, self.wake.notified()).await;
            return Ok(0);
        }
        let deliveries = messages
            .iter()
            .map(Delivery::of)
            .collect::<anyhow::Result<Vec<_>>>()?;
        let batch = {
            let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
            let batch = log.deliver(&deliveries);
            if self.on_trouble == OnTrouble::Fail && !log.breaches().is_empty() {
                bail!(
                    "the queue broke FIFO order in batch #{batch}:\n{}",
                    log.explain_breaches()
                );
            }
            batch
        };
        // Logged in the order received: the next slot's turn comes after.
        drop(turn);
        self.count(|stats| {
            stats.batches += 1;
            stats.records += messages.len() as u64;
            for delivery in &deliveries {
                stats.max_receive_count = stats.max_receive_count.max(delivery.receive_count);
            }
            stats.running += 1;
            stats.most_concurrent_invocations =
                stats.most_concurrent_invocations.max(stats.running);
        });

        let mut event = SqsEvent::default();
        event.records = messages
            .iter()
            .map(|m| lambda_record(m, &self.stack))
            .collect();
        let crashing = crash.is_some();
        let invoked = self.invoke(&event, crash).await;
        self.count(|stats| stats.running -= 1);
        let response = match invoked {
            Ok(Invoked::Answered(response)) => response,
            Ok(Invoked::Abandoned) => {
                self.count(|stats| stats.crashed_invocations += 1);
                return Ok(deliveries.len());
            }
            Err(_) if self.on_trouble == OnTrouble::CarryOn && !crashing => {
                self.count(|stats| stats.failed_invocations += 1);
                return Ok(deliveries.len());
            }
            Err(err) => return Err(err.context(format!("invoking the worker with batch #{batch}"))),
        };

        let ids: HashSet<&str> = deliveries.iter().map(|d| d.message_id.as_str()).collect();
        let mut failed = HashSet::new();
        for failure in &response.batch_item_failures {
            if !ids.contains(failure.item_identifier.as_str()) {
                bail!(
                    "the worker reported {:?}, which is not in batch #{batch}",
                    failure.item_identifier
                );
            }
            failed.insert(failure.item_identifier.clone());
        }
        let finished: Vec<&Delivery> = deliveries
            .iter()
            .filter(|d| !failed.contains(&d.message_id))
            .collect();
        // Noted before the delete: once deleted, another slot may receive what follows in the
        // group, and the log must already know the way is clear.
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .settle(batch, &deliveries, &failed);
        self.delete(&finished).await?;
        self.count(|stats| {
            stats.reported_failures += failed.len() as u64;
            stats.deleted += finished.len() as u64;
        });
        Ok(deliveries.len())
    }

    /// One short poll for a batch.
    async fn receive(&self) -> anyhow::Result<Vec<Message>> {
        let visibility = i32::try_from(self.visibility.as_secs())?;
        Ok(self
            .sqs
            .receive_message()
            .queue_url(&self.stack.queue_url)
            .max_number_of_messages(BATCH_SIZE)
            .visibility_timeout(visibility)
            .wait_time_seconds(0)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .context("ReceiveMessage")?
            .messages
            .unwrap_or_default())
    }

    async fn invoke<F: Future<Output = ()>>(
        &self,
        event: &SqsEvent,
        crash: Option<Pin<&mut F>>,
    ) -> anyhow::Result<Invoked> {
        let answer = self.worker.invoke(event);
        let Some(crash) = crash else {
            return answer.await.map(Invoked::Answered);
        };
        tokio::select! {
            answer = answer => answer.map(Invoked::Answered),
            () = crash => Ok(Invoked::Abandoned),
        }
    }

    fn count(&self, change: impl FnOnce(&mut MappingStats)) {
        change(&mut self.stats.lock().unwrap_or_else(PoisonError::into_inner));
    }

    async fn delete(&self, finished: &[&Delivery]) -> anyhow::Result<()> {
        if finished.is_empty() {
            return Ok(());
        }
        let entries = finished
            .iter()
            .enumerate()
            .map(|(i, d)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(&d.receipt)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let output = self
            .sqs
            .delete_message_batch()
            .queue_url(&self.stack.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .context("DeleteMessageBatch")?;
        if !output.failed.is_empty() {
            bail!("DeleteMessageBatch failed for {:?}", output.failed);
        }
        Ok(())
    }
}

impl EventSourceMapping<'static> {
    /// Polls on a task of its own until [`RunningMapping::stop`], with every slot busy: a drill's
    /// mapping, which carries on whatever happens (a failure of a mapping that fails on trouble
    /// ends the task).
    pub fn spawn(self) -> RunningMapping {
        let mapping = Arc::new(self);
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let mapping = mapping.clone();
            let stop = stop.clone();
            async move {
                let slots = (0..mapping.concurrency).map(|_| async {
                    while !stop.load(Ordering::SeqCst) {
                        mapping.poll::<std::future::Pending<()>>(None).await?;
                    }
                    anyhow::Ok(())
                });
                futures::future::try_join_all(slots).await?;
                Ok(())
            }
        });
        RunningMapping {
            mapping,
            stop,
            task,
        }
    }
}

/// The record Lambda builds for a message received from `stack`'s updates queue.
pub fn lambda_record(message: &Message, stack: &Stack) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = message.message_id.clone();
    record.receipt_handle = message.receipt_handle.clone();
    record.body = message.body.clone();
    record.md5_of_body = message.md5_of_body.clone();
    record.md5_of_message_attributes = message.md5_of_message_attributes.clone();
    record.attributes = message
        .attributes
        .iter()
        .flatten()
        .map(|(name, value)| (name.as_str().to_owned(), value.clone()))
        .collect();
    // tgq's queues carry string attributes only; binary ones would need base64 here.
    record.message_attributes = message
        .message_attributes
        .iter()
        .flatten()
        .map(|(name, value)| {
            let mut attribute = SqsMessageAttribute::default();
            attribute.string_value = value.string_value.clone();
            attribute.data_type = Some(value.data_type.clone());
            (name.clone(), attribute)
        })
        .collect();
    record.event_source = Some("aws:sqs".into());
    record.event_source_arn = Some(stack.queue_arn.clone());
    record.aws_region = Some(stack.region.clone());
    record
}

/// One message as the mapping received it.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// SQS `MessageId`.
    pub message_id: String,
    /// The receipt handle of this receive.
    pub receipt: String,
    /// `MessageGroupId`.
    pub group: String,
    /// The `update_id` the body carries. Order is judged by it: Telegram's ids increase, the harness
    /// posts each chat's updates in that order, and moto's `SequenceNumber` is random digits.
    pub update_id: i64,
    /// `ApproximateReceiveCount`.
    pub receive_count: u32,
}

impl Delivery {
    /// What the FIFO check needs of a received message.
    pub fn of(message: &Message) -> anyhow::Result<Delivery> {
        let attribute = |name: MessageSystemAttributeName| {
            message
                .attributes
                .as_ref()
                .and_then(|a| a.get(&name))
                .cloned()
        };
        let body: serde_json::Value =
            serde_json::from_str(message.body.as_deref().unwrap_or_default())
                .context("a queued body is not JSON")?;
        Ok(Delivery {
            message_id: message.message_id.clone().context("no MessageId")?,
            receipt: message.receipt_handle.clone().context("no ReceiptHandle")?,
            group: attribute(MessageSystemAttributeName::MessageGroupId)
                .context("no MessageGroupId: is the queue FIFO?")?,
            update_id: body["update_id"]
                .as_i64()
                .context("a queued body has no update_id")?,
            receive_count: attribute(MessageSystemAttributeName::ApproximateReceiveCount)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
        })
    }
}

/// Every delivery, per message group, and the FIFO breaches among them.
#[derive(Clone, Debug, Default)]
pub struct DeliveryLog {
    batches: u64,
    groups: BTreeMap<String, GroupLog>,
    breaches: Vec<Breach>,
}

#[derive(Clone, Debug, Default)]
struct GroupLog {
    /// What happened to the group's messages, in order.
    history: Vec<Step>,
    /// Received and not yet deleted: update id → the batch that last received it.
    outstanding: BTreeMap<i64, u64>,
    /// Every update id received at least once.
    seen: BTreeSet<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Delivered {
        batch: u64,
        update_id: i64,
        receive_count: u32,
    },
    Deleted {
        batch: u64,
        update_id: i64,
    },
    Returned {
        batch: u64,
        update_id: i64,
    },
}

/// A delivery FIFO forbids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breach {
    /// The message group.
    pub group: String,
    /// The batch that delivered `update_id`.
    pub batch: u64,
    /// The update delivered out of turn.
    pub update_id: i64,
    /// What should have come first.
    pub reason: String,
}

impl DeliveryLog {
    /// Notes a received batch, checking each message against its group's history; returns the
    /// batch's number.
    pub fn deliver(&mut self, deliveries: &[Delivery]) -> u64 {
        self.batches += 1;
        let batch = self.batches;
        let mut earlier: HashMap<&str, Vec<i64>> = HashMap::new();
        for delivery in deliveries {
            let group = self.groups.entry(delivery.group.clone()).or_default();
            let ahead = earlier.entry(delivery.group.as_str()).or_default();
            let mut breach = |reason: String| {
                self.breaches.push(Breach {
                    group: delivery.group.clone(),
                    batch,
                    update_id: delivery.update_id,
                    reason,
                })
            };
            let u = delivery.update_id;
            // A timer's id (negative) is a hash, not a position in its group: its place is not
            // checked here, and the timer tests check it in the replies instead.
            let timer = u < 0;
            // An earlier message of the group is still received-but-not-deleted (hidden by a
            // visibility change, or in flight) and does not come first in this batch.
            for (&v, &received_in) in group.outstanding.range(0..u.max(0)) {
                if !timer && !ahead.contains(&v) {
                    breach(format!(
                        "update {v} (received in batch #{received_in}) was not deleted"
                    ));
                }
            }
            // A later message of the group was handed out before this one ever was.
            if !timer && !group.seen.contains(&u) {
                if let Some(&w) = group.seen.range(u + 1..).next() {
                    breach(format!("update {w} was delivered before it"));
                }
            }
            if let Some(&w) = ahead.iter().find(|&&w| !timer && w > u) {
                breach(format!("update {w} precedes it in the same batch"));
            }
            ahead.push(u);
            group.seen.insert(u);
            group.outstanding.insert(u, batch);
            group.history.push(Step::Delivered {
                batch,
                update_id: u,
                receive_count: delivery.receive_count,
            });
        }
        batch
    }

    /// Notes what became of a batch: deleted, or returned to the queue by the worker.
    pub fn settle(&mut self, batch: u64, deliveries: &[Delivery], failed: &HashSet<String>) {
        for delivery in deliveries {
            let group = self.groups.entry(delivery.group.clone()).or_default();
            let update_id = delivery.update_id;
            if failed.contains(&delivery.message_id) {
                group.history.push(Step::Returned { batch, update_id });
            } else {
                group.outstanding.remove(&update_id);
                group.history.push(Step::Deleted { batch, update_id });
            }
        }
    }

    /// The FIFO breaches seen so far.
    pub fn breaches(&self) -> &[Breach] {
        &self.breaches
    }

    /// Update ids received and not deleted, per group.
    pub fn outstanding(&self) -> BTreeMap<&str, Vec<i64>> {
        self.groups
            .iter()
            .filter(|(_, g)| !g.outstanding.is_empty())
            .map(|(name, g)| (name.as_str(), g.outstanding.keys().copied().collect()))
            .collect()
    }

    /// Each breach, followed by its group's whole history.
    pub fn explain_breaches(&self) -> String {
        let mut text = String::new();
        let mut groups = BTreeSet::new();
        for breach in &self.breaches {
            let _ = writeln!(
                text,
                "  {} batch #{}: update {} delivered although {}",
                breach.group, breach.batch, breach.update_id, breach.reason
            );
            groups.insert(breach.group.as_str());
        }
        for group in groups {
            let _ = writeln!(text, "  history of {group}: {}", self.history(group));
        }
        text
    }

    /// A group's deliveries and their fate, e.g. `#3 +1027(rc 1) ↺1027 | #5 +1027(rc 2) ✓1027`.
    pub fn history(&self, group: &str) -> String {
        let Some(log) = self.groups.get(group) else {
            return "(never delivered)".into();
        };
        let mut text = String::new();
        let mut current = 0;
        for step in &log.history {
            let (batch, mark) = match *step {
                Step::Delivered {
                    batch,
                    update_id,
                    receive_count,
                } => (batch, format!("+{update_id}(rc {receive_count})")),
                Step::Deleted { batch, update_id } => (batch, format!("✓{update_id}")),
                Step::Returned { batch, update_id } => (batch, format!("↺{update_id}")),
            };
            if batch != current {
                if current != 0 {
                    text.push_str(" |");
                }
                let _ = write!(text, " #{batch}");
                current = batch;
            }
            let _ = write!(text, " {mark}");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(id: &str, group: &str, update_id: i64) -> Delivery {
        Delivery {
            message_id: id.into(),
            receipt: format!("r-{id}"),
            group: group.into(),
            update_id,
            receive_count: 1,
        }
    }

    #[test]
    fn a_group_delivered_in_order_with_a_retry_is_no_breach() {
        let mut log = DeliveryLog::default();
        let first = [delivery("a", "g", 1), delivery("b", "g", 2)];
        let batch = log.deliver(&first);
        log.settle(batch, &first, &HashSet::from(["a".into(), "b".into()]));
        let again = [delivery("a", "g", 1), delivery("b", "g", 2)];
        let batch = log.deliver(&again);
        log.settle(batch, &again, &HashSet::new());
        assert!(log.breaches().is_empty(), "{}", log.explain_breaches());
    }

    #[test]
    fn a_later_message_delivered_while_an_earlier_one_is_hidden_is_a_breach() {
        let mut log = DeliveryLog::default();
        let first = [delivery("a", "g", 1)];
        let batch = log.deliver(&first);
        log.settle(batch, &first, &HashSet::from(["a".into()]));
        log.deliver(&[delivery("b", "g", 2)]);
        assert_eq!(log.breaches().len(), 1);
        assert!(log
            .explain_breaches()
            .contains("update 1 (received in batch #1)"));
    }

    #[test]
    fn a_message_first_delivered_after_a_later_one_is_a_breach() {
        let mut log = DeliveryLog::default();
        let first = [delivery("b", "g", 2)];
        let batch = log.deliver(&first);
        log.settle(batch, &first, &HashSet::new());
        log.deliver(&[delivery("a", "g", 1)]);
        assert_eq!(log.breaches()[0].reason, "update 2 was delivered before it");
    }
}
