//! The FIFO updates queue with SQS FIFO's semantics, as `tgq_core::fifo` states them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use tgq_core::clock::Clock;
use tgq_core::fifo::{self, DedupWindow, MessageState};
use tgq_core::ports::{
    DeadLetter, OutgoingMessage, QueueConsumer, QueueRecord, ReceiptHandle, UpdateQueue, Visibility,
};
use tgq_core::PortError;

use crate::{MemoryDeadLetters, Outage};

#[derive(Clone, Debug)]
struct Message {
    id: String,
    body: Bytes,
    state: MessageState,
}

#[derive(Default)]
struct FifoState {
    messages: BTreeMap<u64, Message>,
    dedup: DedupWindow,
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
    /// Fails calls while on.
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
        let limit = self.redrive.as_ref().map_or(u32::MAX, |(limit, _)| *limit);
        let mut state = self.state.lock();
        let plan = {
            let messages = state.messages.iter().map(|(seq, m)| (*seq, &m.state));
            let held = state.messages.values().map(|m| &m.state);
            fifo::plan(messages, held, now, max, limit)
        };
        let mut delivered = Vec::with_capacity(plan.deliver.len());
        for seq in plan.deliver {
            let Some(message) = state.messages.get_mut(&seq) else {
                continue;
            };
            let receipt = format!("r-{}", self.receipts.fetch_add(1, Ordering::SeqCst));
            message.state.deliver(now, visibility, receipt.clone());
            delivered.push(QueueRecord {
                message_id: message.id.clone(),
                receipt: ReceiptHandle(receipt),
                body: message.body.clone(),
                group_id: message.state.group.clone(),
                receive_count: message.state.receive_count,
                dead_letter: None,
            });
        }
        let moved: Vec<Message> = plan
            .redrive
            .iter()
            .filter_map(|seq| state.messages.remove(seq))
            .collect();
        drop(state);
        if let Some((limit, dlq)) = &self.redrive {
            for message in moved {
                let letter = DeadLetter::redriven(
                    Some(&message.state.group),
                    message.body,
                    fifo::redrive_error(*limit),
                );
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
        state.dedup.forget_old(now);
        if state.dedup.is_repeat(&message.dedup_id, now) {
            return Ok(());
        }
        state.dedup.remember(&message.dedup_id, now);
        let seq = state.next_seq;
        state.next_seq += 1;
        state.messages.insert(
            seq,
            Message {
                id: format!("m-{seq}"),
                body: message.body.clone(),
                state: MessageState::sent(message.group_id.clone(), now),
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
            .find(|m| m.state.receipt.as_deref() == Some(receipt.0.as_str()))
            .ok_or_else(|| {
                PortError::rejected("queue change_visibility", "receipt handle is not current")
            })?;
        message.state.show_after(now, after);
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
            .retain(|_, m| m.state.receipt.as_deref() != Some(receipt.0.as_str()));
        Ok(())
    }
}
