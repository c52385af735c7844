//! The FIFO updates queue with SQS FIFO's semantics.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use tgq_core::clock::Clock;
use tgq_core::ports::{
    DeadLetter, OutgoingMessage, QueueConsumer, QueueRecord, ReceiptHandle, UpdateQueue, Visibility,
};
use tgq_core::record::Timestamp;
use tgq_core::PortError;

use crate::{MemoryDeadLetters, Outage, DEDUP_WINDOW};

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
