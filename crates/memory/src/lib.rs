//! In-memory adapters for every tgq port: the reference semantics for the conformance suite, and the
//! fast fakes for unit tests and benchmarks. Each can be switched to "unavailable" to inject faults.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;
use tgq_core::clock::Clock;
use tgq_core::ids::RecordKey;
use tgq_core::ports::{
    Claim, ClaimRequest, DeadLetter, DeadLetters, Inserted, OutgoingMessage, QueueConsumer,
    QueueRecord, ReceiptHandle, RecordReader, Settlement, UpdateLedger, UpdateQueue, UpdateStore,
    Visibility,
};
use tgq_core::record::{ActionIntent, Status, Timestamp, UpdateRecord};
use tgq_core::telegram::{BotApi, TelegramError};
use tgq_core::PortError;

/// SQS FIFO drops a message whose deduplication id was seen within this window.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(300);

/// A switch that makes an adapter fail every call with [`PortError::Unavailable`] while it is on.
#[derive(Debug, Default)]
pub struct Outage(AtomicBool);

impl Outage {
    /// Turns the outage on or off.
    pub fn set(&self, down: bool) {
        self.0.store(down, Ordering::SeqCst);
    }

    fn check(&self, what: &'static str) -> Result<(), PortError> {
        if self.0.load(Ordering::SeqCst) {
            return Err(PortError::unavailable(what, "injected outage"));
        }
        Ok(())
    }
}

/// The record store: [`UpdateStore`], [`UpdateLedger`] and [`RecordReader`] over a map.
#[derive(Default)]
pub struct MemoryStore {
    records: Mutex<HashMap<RecordKey, UpdateRecord>>,
    /// Fails every call while on.
    pub outage: Outage,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of a record, expired or not.
    pub fn record(&self, key: &RecordKey) -> Option<UpdateRecord> {
        self.records.lock().get(key).cloned()
    }

    /// Overwrites a record's status, to stage a crash between two writes.
    pub fn set_status(&self, key: &RecordKey, status: Status) {
        if let Some(record) = self.records.lock().get_mut(key) {
            record.status = status;
        }
    }

    /// How many records there are.
    pub fn len(&self) -> usize {
        self.records.lock().len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl UpdateStore for MemoryStore {
    async fn insert(&self, record: &UpdateRecord, now: Timestamp) -> Result<Inserted, PortError> {
        self.outage.check("store insert")?;
        let mut records = self.records.lock();
        match records.get(&record.key) {
            Some(existing) if !existing.is_expired(now) => Ok(Inserted::Exists(existing.status)),
            _ => {
                records.insert(record.key.clone(), record.clone());
                Ok(Inserted::New)
            }
        }
    }

    async fn mark_queued(&self, key: &RecordKey) -> Result<(), PortError> {
        self.outage.check("store mark_queued")?;
        if let Some(record) = self.records.lock().get_mut(key) {
            if record.status == Status::Received {
                record.status = Status::Queued;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl UpdateLedger for MemoryStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, PortError> {
        self.outage.check("store claim")?;
        let mut records = self.records.lock();
        let (claim, updated) = request.apply(records.get(&request.key).cloned());
        if let Some(record) = updated {
            records.insert(request.key.clone(), record);
        }
        Ok(claim)
    }

    async fn record_intent(&self, key: &RecordKey, intent: &ActionIntent) -> Result<(), PortError> {
        self.outage.check("store record_intent")?;
        let mut records = self.records.lock();
        let record = records
            .get_mut(key)
            .ok_or_else(|| PortError::rejected("store record_intent", "no such record"))?;
        record.note_intent(intent);
        Ok(())
    }

    async fn record_result(
        &self,
        key: &RecordKey,
        seq: u32,
        result: &str,
    ) -> Result<(), PortError> {
        self.outage.check("store record_result")?;
        let mut records = self.records.lock();
        let noted = records
            .get_mut(key)
            .is_some_and(|record| record.note_result(seq, result));
        if !noted {
            return Err(PortError::rejected(
                "store record_result",
                "no such action intent",
            ));
        }
        Ok(())
    }

    async fn settle(&self, key: &RecordKey, outcome: &Settlement) -> Result<(), PortError> {
        self.outage.check("store settle")?;
        let mut records = self.records.lock();
        let record = records
            .get_mut(key)
            .ok_or_else(|| PortError::rejected("store settle", "no such record"))?;
        outcome.apply(record);
        Ok(())
    }
}

#[async_trait]
impl RecordReader for MemoryStore {
    async fn get(
        &self,
        key: &RecordKey,
        now: Timestamp,
    ) -> Result<Option<UpdateRecord>, PortError> {
        self.outage.check("store get")?;
        Ok(self
            .records
            .lock()
            .get(key)
            .filter(|r| !r.is_expired(now))
            .cloned())
    }
}

/// The dead-letter queue: letters in arrival order.
#[derive(Default)]
pub struct MemoryDeadLetters {
    letters: Mutex<Vec<DeadLetter>>,
    /// Fails every call while on.
    pub outage: Outage,
}

impl MemoryDeadLetters {
    /// An empty dead-letter queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every letter so far.
    pub fn letters(&self) -> Vec<DeadLetter> {
        self.letters.lock().clone()
    }
}

#[async_trait]
impl DeadLetters for MemoryDeadLetters {
    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), PortError> {
        self.outage.check("dead-letter send")?;
        self.letters.lock().push(letter.clone());
        Ok(())
    }
}

#[derive(Clone, Debug)]
struct Message {
    id: String,
    group: String,
    body: Bytes,
    visible_at: Timestamp,
    receive_count: u32,
    receipt: Option<String>,
}

#[derive(Default)]
struct FifoState {
    messages: BTreeMap<u64, Message>,
    dedup: HashMap<String, Timestamp>,
    /// Dedup ids in send order, so expired ones are dropped from the front without a scan.
    dedup_order: VecDeque<(Timestamp, String)>,
    next_seq: u64,
}

/// A FIFO queue with SQS's semantics: message groups (a group with a message in flight delivers
/// nothing else), visibility timeouts, receive counts, a 5-minute dedup window, and redrive to a
/// dead-letter queue after `max_receive_count` receives.
pub struct MemoryQueue {
    state: Mutex<FifoState>,
    clock: Arc<dyn Clock>,
    redrive: Option<(u32, Arc<MemoryDeadLetters>)>,
    receipts: AtomicU64,
    sends: AtomicU64,
    /// Fails every call while on.
    pub outage: Outage,
}

impl MemoryQueue {
    /// A queue without redrive.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::default(),
            clock,
            redrive: None,
            receipts: AtomicU64::new(0),
            sends: AtomicU64::new(0),
            outage: Outage::default(),
        }
    }

    /// A queue that moves a message to `dlq` once it has been received `max_receive_count` times.
    pub fn with_redrive(
        clock: Arc<dyn Clock>,
        max_receive_count: u32,
        dlq: Arc<MemoryDeadLetters>,
    ) -> Self {
        Self {
            redrive: Some((max_receive_count, dlq)),
            ..Self::new(clock)
        }
    }

    /// Sends accepted, including repeats the dedup window dropped.
    pub fn sends(&self) -> u64 {
        self.sends.load(Ordering::SeqCst)
    }

    /// Messages on the queue, in flight or not.
    pub fn depth(&self) -> usize {
        self.state.lock().messages.len()
    }

    /// The bodies on the queue, in send order.
    pub fn bodies(&self) -> Vec<Bytes> {
        self.state
            .lock()
            .messages
            .values()
            .map(|m| m.body.clone())
            .collect()
    }

    fn try_receive(&self, max: usize, visibility: Duration) -> Vec<QueueRecord> {
        let now = self.clock.now();
        let mut state = self.state.lock();
        let mut blocked: Vec<String> = state
            .messages
            .values()
            .filter(|m| m.receipt.is_some() && m.visible_at > now)
            .map(|m| m.group.clone())
            .collect();
        let mut delivered = Vec::new();
        let mut redriven = Vec::new();
        for (seq, message) in state.messages.iter_mut() {
            if delivered.len() >= max {
                break;
            }
            if blocked.contains(&message.group) {
                continue;
            }
            if message.visible_at > now {
                blocked.push(message.group.clone());
                continue;
            }
            if let Some((limit, _)) = &self.redrive {
                if message.receive_count >= *limit {
                    redriven.push(*seq);
                    continue;
                }
            }
            message.receive_count += 1;
            let receipt = format!("r-{}", self.receipts.fetch_add(1, Ordering::SeqCst));
            message.receipt = Some(receipt.clone());
            message.visible_at = now.plus(visibility);
            delivered.push(QueueRecord {
                message_id: message.id.clone(),
                receipt: ReceiptHandle(receipt),
                body: message.body.clone(),
                group_id: message.group.clone(),
                receive_count: message.receive_count,
            });
        }
        let moved: Vec<Message> = redriven
            .iter()
            .filter_map(|seq| state.messages.remove(seq))
            .collect();
        drop(state);
        if let Some((limit, dlq)) = &self.redrive {
            for message in moved {
                let error = format!("received {limit} times without being deleted");
                let letter = DeadLetter::redriven(Some(&message.group), message.body, error);
                dlq.letters.lock().push(letter);
            }
        }
        delivered
    }
}

#[async_trait]
impl UpdateQueue for MemoryQueue {
    async fn enqueue(&self, message: &OutgoingMessage) -> Result<(), PortError> {
        self.outage.check("queue send")?;
        self.sends.fetch_add(1, Ordering::SeqCst);
        let now = self.clock.now();
        let mut state = self.state.lock();
        while let Some((sent, _)) = state.dedup_order.front() {
            if now.since(*sent) < DEDUP_WINDOW {
                break;
            }
            if let Some((_, id)) = state.dedup_order.pop_front() {
                state.dedup.remove(&id);
            }
        }
        if state.dedup.contains_key(&message.dedup_id) {
            return Ok(());
        }
        state.dedup.insert(message.dedup_id.clone(), now);
        state.dedup_order.push_back((now, message.dedup_id.clone()));
        let seq = state.next_seq;
        state.next_seq += 1;
        state.messages.insert(
            seq,
            Message {
                id: format!("m-{seq}"),
                group: message.group_id.as_str().to_owned(),
                body: message.body.clone(),
                visible_at: now,
                receive_count: 0,
                receipt: None,
            },
        );
        Ok(())
    }
}

#[async_trait]
impl Visibility for MemoryQueue {
    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        after: Duration,
    ) -> Result<(), PortError> {
        self.outage.check("queue change_visibility")?;
        let now = self.clock.now();
        let mut state = self.state.lock();
        let message = state
            .messages
            .values_mut()
            .find(|m| m.receipt.as_deref() == Some(receipt.0.as_str()))
            .ok_or_else(|| {
                PortError::rejected("queue change_visibility", "receipt handle is not current")
            })?;
        message.visible_at = now.plus(after);
        Ok(())
    }
}

#[async_trait]
impl QueueConsumer for MemoryQueue {
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<QueueRecord>, PortError> {
        self.outage.check("queue receive")?;
        let started = tokio::time::Instant::now();
        loop {
            let batch = self.try_receive(max, visibility);
            if !batch.is_empty() || started.elapsed() >= wait {
                return Ok(batch);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), PortError> {
        self.outage.check("queue delete")?;
        self.state
            .lock()
            .messages
            .retain(|_, m| m.receipt.as_deref() != Some(receipt.0.as_str()));
        Ok(())
    }
}

/// One call the recording Bot API received.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiCall {
    /// The method.
    pub method: String,
    /// The parameters.
    pub params: Value,
}

/// A Bot API that records every call and answers like Telegram, or with scripted failures.
#[derive(Default)]
pub struct RecordingBotApi {
    calls: Mutex<Vec<ApiCall>>,
    failures: Mutex<VecDeque<TelegramError>>,
    next_message_id: AtomicU64,
}

impl RecordingBotApi {
    /// A Bot API that answers every call successfully.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next calls fail with these errors, one each, in order.
    pub fn fail_next(&self, errors: impl IntoIterator<Item = TelegramError>) {
        self.failures.lock().extend(errors);
    }

    /// Every call that was answered successfully, in order.
    pub fn calls(&self) -> Vec<ApiCall> {
        self.calls.lock().clone()
    }

    /// The text of every successful `sendMessage`, in order.
    pub fn sent_texts(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == "sendMessage")
            .filter_map(|c| {
                c.params
                    .get("text")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect()
    }
}

#[async_trait]
impl BotApi for RecordingBotApi {
    async fn call(&self, method: &str, params: &Value) -> Result<Value, TelegramError> {
        if let Some(error) = self.failures.lock().pop_front() {
            return Err(error);
        }
        let id = i64::try_from(self.next_message_id.fetch_add(1, Ordering::SeqCst) + 1)
            .unwrap_or(i64::MAX);
        self.calls.lock().push(ApiCall {
            method: method.to_owned(),
            params: params.clone(),
        });
        Ok(tgq_telegram::offline_result(method, params, id, 0))
    }
}

#[async_trait]
impl tgq_core::ports::DeadLetterReader for MemoryDeadLetters {
    async fn peek(&self, max: usize) -> Result<Vec<DeadLetter>, PortError> {
        self.outage.check("dead-letter peek")?;
        Ok(self.letters.lock().iter().take(max).cloned().collect())
    }
}

/// A [`tgq_core::ports::Visibility`] that only records what it was asked; for worker tests fed by
/// Lambda events, where there is no queue to change.
#[derive(Default)]
pub struct RecordingVisibility {
    changes: Mutex<Vec<(ReceiptHandle, Duration)>>,
}

impl RecordingVisibility {
    /// A recorder with nothing recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every change asked for, in order.
    pub fn changes(&self) -> Vec<(ReceiptHandle, Duration)> {
        self.changes.lock().clone()
    }

    /// The last change asked for on one receipt.
    pub fn last_for(&self, receipt: &str) -> Option<Duration> {
        self.changes
            .lock()
            .iter()
            .rev()
            .find(|(r, _)| r.0 == receipt)
            .map(|(_, d)| *d)
    }
}

#[async_trait]
impl Visibility for RecordingVisibility {
    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        after: Duration,
    ) -> Result<(), PortError> {
        self.changes.lock().push((receipt.clone(), after));
        Ok(())
    }
}
