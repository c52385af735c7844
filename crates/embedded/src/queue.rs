//! The FIFO queue, with SQS FIFO's semantics as the in-memory queue defines them: message groups (a
//! group with a message in flight delivers nothing else), visibility timeouts, receive counts, a
//! 5-minute dedup window, and redrive to the dead letters after `max_receive_count` receives.
//!
//! The tables are the truth; the writer thread also keeps an index of every message's state (no
//! bodies) and of the dedup ids in the window in memory, loaded at open, so a receive plans its
//! deliveries and a send checks its dedup id without reading the tables. The index changes only
//! inside the writer's transactions and is reloaded if one fails.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use redb::{Database, ReadTransaction, ReadableDatabase, ReadableTable};

use tgq_core::ports::{DeadLetter, OutgoingMessage, QueueRecord, ReceiptHandle};
use tgq_core::record::Timestamp;

use crate::schema::{
    counter, encode_letter, frame, seq, unframe, CodecError, QueuedMessage, DEAD, DEDUP, QUEUE,
};
use crate::writer::{OpError, Tx};
use crate::StoreError;

/// SQS FIFO drops a message whose deduplication id was seen within this window.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(300);

/// Every message's state by send sequence, which of them have been delivered, and the dedup ids.
#[derive(Default)]
pub(crate) struct QueueIndex {
    messages: BTreeMap<u64, QueuedMessage>,
    /// Sequences of messages with a receipt: the only ones that can be in flight.
    delivered: BTreeSet<u64>,
    /// Dedup id → when it was sent, for every id in [`DEDUP`].
    dedup: HashMap<String, u64>,
}

/// What one receive will do.
struct Plan {
    deliver: Vec<u64>,
    redrive: Vec<u64>,
}

impl QueueIndex {
    /// Reads the index from the committed queue and dedup tables.
    pub(crate) fn load(db: &Database) -> Result<Self, StoreError> {
        let read = db.begin_read()?;
        let mut index = Self::default();
        for (seq, message) in read_messages(&read)? {
            index.insert(seq, message);
        }
        for entry in read.open_table(DEDUP)?.range::<(u64, &str)>(..)? {
            let (key, _) = entry?;
            let (sent_at, id) = key.value();
            index.dedup.insert(id.to_owned(), sent_at);
        }
        Ok(index)
    }

    fn insert(&mut self, seq: u64, message: QueuedMessage) {
        if message.receipt.is_some() {
            self.delivered.insert(seq);
        }
        self.messages.insert(seq, message);
    }

    fn remove(&mut self, seq: u64) -> Option<QueuedMessage> {
        self.delivered.remove(&seq);
        self.messages.remove(&seq)
    }

    /// The message whose latest delivery has this receipt.
    fn by_receipt(&self, receipt: &ReceiptHandle) -> Option<u64> {
        let seq = parse_receipt(&receipt.0)?;
        let message = self.messages.get(&seq)?;
        (message.receipt.as_deref() == Some(receipt.0.as_str())).then_some(seq)
    }

    /// Walks the queue in send order: a group with a message in flight is skipped, a hidden message
    /// holds back the rest of its group, a message received `limit` times is redriven, and the rest
    /// are delivered, several of one group in order if they come up.
    fn plan(&self, now: Timestamp, max: usize, limit: u32) -> Plan {
        let mut blocked: HashSet<&str> = self
            .delivered
            .iter()
            .filter_map(|seq| self.messages.get(seq))
            .filter(|m| m.in_flight(now))
            .map(|m| m.group.as_str())
            .collect();
        let mut plan = Plan {
            deliver: Vec::new(),
            redrive: Vec::new(),
        };
        for (seq, message) in &self.messages {
            if plan.deliver.len() >= max {
                break;
            }
            if blocked.contains(message.group.as_str()) {
                continue;
            }
            if message.visible_at > now.0 {
                blocked.insert(message.group.as_str());
                continue;
            }
            if message.receive_count >= limit {
                plan.redrive.push(*seq);
                continue;
            }
            plan.deliver.push(*seq);
        }
        plan
    }

    /// Counts for [`crate::StoreStats`]: `(pending, in flight, oldest send time)`.
    pub(crate) fn census(
        messages: impl Iterator<Item = QueuedMessage>,
        now: Timestamp,
    ) -> (u64, u64, Option<Timestamp>) {
        let (mut pending, mut in_flight, mut oldest) = (0, 0, None::<u64>);
        for message in messages {
            if message.in_flight(now) {
                in_flight += 1;
            } else {
                pending += 1;
            }
            oldest = Some(oldest.map_or(message.sent_at, |o| o.min(message.sent_at)));
        }
        (pending, in_flight, oldest.map(Timestamp))
    }
}

/// Every queue message's state, in send order, as committed.
pub(crate) fn read_messages(
    read: &ReadTransaction,
) -> Result<Vec<(u64, QueuedMessage)>, StoreError> {
    let mut messages = Vec::new();
    for entry in read.open_table(QUEUE)?.range::<u64>(..)? {
        let (seq, value) = entry?;
        let (message, _) = unframe::<QueuedMessage>(value.value()).map_err(StoreError::corrupt(
            format!("queue message {}", seq.value()),
        ))?;
        messages.push((seq.value(), message));
    }
    Ok(messages)
}

/// [`DEDUP_WINDOW`] in the store's time unit.
fn window_ms() -> u64 {
    u64::try_from(DEDUP_WINDOW.as_millis()).unwrap_or(u64::MAX)
}

/// The queue's id of a message.
fn message_id(seq: u64) -> String {
    format!("m-{seq}")
}

/// A receipt names the message and the delivery (its receive count), so each receive gets a new one.
fn receipt_for(seq: u64, receive_count: u32) -> String {
    format!("{seq}.{receive_count}")
}

fn parse_receipt(receipt: &str) -> Option<u64> {
    receipt.split_once('.')?.0.parse().ok()
}

fn encode_message(message: &QueuedMessage, body: &[u8]) -> Result<Vec<u8>, OpError> {
    frame(message, body).map_err(|e| OpError::Fatal(format!("encoding a message: {e}")))
}

/// The body of a stored queue message.
fn body_of(value: &[u8]) -> Result<Bytes, CodecError> {
    let (_, body) = unframe::<serde::de::IgnoredAny>(value)?;
    Ok(Bytes::copy_from_slice(body))
}

impl Tx<'_> {
    /// Sends one message unless its dedup id was sent within the window.
    pub(crate) fn enqueue(&mut self, message: &OutgoingMessage) -> Result<(), OpError> {
        let now = self.settings.clock.now();
        if !self.dedup_pruned {
            self.forget_old_dedup_ids(now)?;
            self.dedup_pruned = true;
        }
        // Ids are forgotten once per batch, so an id may outlive the window by one batch: the time
        // it was sent decides, not its presence.
        let seen_at = self.queue.dedup.get(message.dedup_id.as_str()).copied();
        if seen_at.is_some_and(|at| now.0.saturating_sub(at) < window_ms()) {
            return Ok(());
        }
        let mut dedup = self.table_mut(DEDUP)?;
        if let Some(stale) = seen_at {
            dedup.remove((stale, message.dedup_id.as_str()))?;
        }
        dedup.insert((now.0, message.dedup_id.as_str()), ())?;
        drop(dedup);
        self.queue.dedup.insert(message.dedup_id.clone(), now.0);
        let seq = self.next_in(seq::QUEUE)?;
        let queued = QueuedMessage {
            group: message.group_id.as_str().to_owned(),
            sent_at: now.0,
            visible_at: now.0,
            receive_count: 0,
            receipt: None,
        };
        self.table_mut(QUEUE)?
            .insert(seq, encode_message(&queued, &message.body)?.as_slice())?;
        self.queue.insert(seq, queued);
        self.wake_receivers();
        Ok(())
    }

    /// Drops dedup ids sent `DEDUP_WINDOW` or longer ago.
    fn forget_old_dedup_ids(&mut self, now: Timestamp) -> Result<(), OpError> {
        let Some(cutoff) = now.0.checked_sub(window_ms()) else {
            return Ok(());
        };
        let old: Vec<(u64, String)> = self
            .table(DEDUP)?
            .range::<(u64, &str)>(..(cutoff.saturating_add(1), ""))?
            .map(|entry| entry.map(|(key, _)| (key.value().0, key.value().1.to_owned())))
            .collect::<Result<_, _>>()?;
        if old.is_empty() {
            return Ok(());
        }
        let mut dedup = self.table_mut(DEDUP)?;
        for (sent_at, id) in &old {
            dedup.remove((*sent_at, id.as_str()))?;
            self.queue.dedup.remove(id);
        }
        Ok(())
    }

    /// Delivers up to `max` messages, hiding each for `visibility`; redrives those received too often.
    pub(crate) fn receive(
        &mut self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<QueueRecord>, OpError> {
        let now = self.settings.clock.now();
        let plan = self.queue.plan(now, max, self.settings.max_receive_count);
        for seq in &plan.redrive {
            self.redrive(*seq)?;
        }
        if plan.deliver.is_empty() {
            return Ok(Vec::new());
        }
        let visible_at = now.plus(visibility).0;
        let mut messages = self.table_mut(QUEUE)?;
        let mut delivered = Vec::with_capacity(plan.deliver.len());
        for seq in plan.deliver {
            let body = match messages.get(seq)? {
                Some(value) => body_of(value.value()).map_err(|e| OpError::Fatal(e.to_string()))?,
                None => return Err(OpError::Fatal(format!("queue message {seq} is missing"))),
            };
            let Some(message) = self.queue.messages.get_mut(&seq) else {
                continue;
            };
            message.receive_count += 1;
            message.visible_at = visible_at;
            let receipt = receipt_for(seq, message.receive_count);
            message.receipt = Some(receipt.clone());
            messages.insert(seq, encode_message(message, &body)?.as_slice())?;
            delivered.push(QueueRecord {
                message_id: message_id(seq),
                receipt: ReceiptHandle(receipt),
                body,
                group_id: message.group.clone(),
                receive_count: message.receive_count,
            });
            self.queue.delivered.insert(seq);
        }
        Ok(delivered)
    }

    /// Moves a message that was received `max_receive_count` times to the dead letters.
    fn redrive(&mut self, seq: u64) -> Result<(), OpError> {
        let Some(message) = self.queue.remove(seq) else {
            return Ok(());
        };
        let body = match self.table_mut(QUEUE)?.remove(seq)? {
            Some(value) => body_of(value.value()).map_err(|e| OpError::Fatal(e.to_string()))?,
            None => Bytes::new(),
        };
        let limit = self.settings.max_receive_count;
        let error = format!("received {limit} times without being deleted");
        let letter = DeadLetter::redriven(Some(&message.group), body, error);
        let value = encode_letter(&letter).map_err(|e| OpError::Fatal(e.to_string()))?;
        let id = self.next_in(seq::DEAD)?;
        self.table_mut(DEAD)?.insert(id, value.as_slice())?;
        self.bump(counter::DEAD_LETTERED)
    }

    /// Shows a held message again after `after`.
    pub(crate) fn change_visibility(
        &mut self,
        receipt: &ReceiptHandle,
        after: Duration,
    ) -> Result<(), OpError> {
        let seq = self
            .queue
            .by_receipt(receipt)
            .ok_or_else(|| OpError::Rejected("receipt handle is not current".into()))?;
        let now = self.settings.clock.now();
        let mut messages = self.table_mut(QUEUE)?;
        let body = match messages.get(seq)? {
            Some(value) => body_of(value.value()).map_err(|e| OpError::Fatal(e.to_string()))?,
            None => return Err(OpError::Fatal(format!("queue message {seq} is missing"))),
        };
        if let Some(message) = self.queue.messages.get_mut(&seq) {
            message.visible_at = now.plus(after).0;
            messages.insert(seq, encode_message(message, &body)?.as_slice())?;
        }
        self.wake_receivers();
        Ok(())
    }

    /// Deletes the message whose latest delivery has this receipt; an outdated receipt deletes nothing.
    pub(crate) fn delete(&mut self, receipt: &ReceiptHandle) -> Result<(), OpError> {
        let Some(seq) = self.queue.by_receipt(receipt) else {
            return Ok(());
        };
        self.table_mut(QUEUE)?.remove(seq)?;
        self.queue.remove(seq);
        self.wake_receivers();
        Ok(())
    }
}
