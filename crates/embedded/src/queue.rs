//! The FIFO queue, with SQS FIFO's semantics as `tgq_core::fifo` states them: message groups,
//! visibility timeouts, receive counts, the 5-minute dedup window, and redrive to the dead letters
//! after `max_receive_count` receives.
//!
//! The tables are the truth; the writer thread also keeps an index of every message's state (no
//! bodies) and of the dedup ids in the window in memory, loaded at open, so a receive plans its
//! deliveries and a send checks its dedup id without reading the tables. The index changes only
//! inside the writer's transactions and is reloaded if one fails.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use redb::{Database, ReadTransaction, ReadableDatabase, ReadableTable};

use tgq_core::fifo::{self, DedupWindow, MessageState};
use tgq_core::ports::{DeadLetter, OutgoingMessage, QueueRecord, ReceiptHandle};
use tgq_core::record::Timestamp;

use crate::schema::{counter, frame, seq, unframe, CodecError, DEDUP, QUEUE};
use crate::writer::{OpError, Tx};
use crate::StoreError;

/// Every message's state by send sequence, which of them have been delivered, and the dedup ids.
#[derive(Default)]
pub(crate) struct QueueIndex {
    messages: BTreeMap<u64, MessageState>,
    /// Sequences of messages with a receipt: the only ones that can be in flight.
    delivered: BTreeSet<u64>,
    /// The dedup ids in the window, as the [`DEDUP`] table holds them.
    dedup: DedupWindow,
}

impl QueueIndex {
    /// The messages delivered at least once: the only ones that can be hidden, or in flight.
    fn delivered_messages(&self) -> impl Iterator<Item = &MessageState> {
        self.delivered
            .iter()
            .filter_map(|seq| self.messages.get(seq))
    }

    /// The earliest instant after `now` at which a hidden message becomes visible again (its
    /// visibility timeout or backoff ends).
    fn next_visible(&self, now: Timestamp) -> Option<Timestamp> {
        self.delivered_messages()
            .map(|message| message.visible_at)
            .filter(|at| *at > now)
            .min()
    }

    /// Reads the index from the committed queue and dedup tables.
    pub(crate) fn load(db: &Database) -> Result<Self, StoreError> {
        let read = db.begin_read()?;
        let mut index = Self::default();
        for (seq, message) in read_messages(&read)? {
            index.insert(seq, message);
        }
        // The table is in send order, which is the order the window forgets in.
        for entry in read.open_table(DEDUP)?.range::<(u64, &str)>(..)? {
            let (key, _) = entry?;
            let (sent_at, id) = key.value();
            index.dedup.remember(id, Timestamp(sent_at));
        }
        Ok(index)
    }

    fn insert(&mut self, seq: u64, message: MessageState) {
        if message.receipt.is_some() {
            self.delivered.insert(seq);
        }
        self.messages.insert(seq, message);
    }

    fn remove(&mut self, seq: u64) -> Option<MessageState> {
        self.delivered.remove(&seq);
        self.messages.remove(&seq)
    }

    /// The message whose latest delivery has this receipt.
    fn by_receipt(&self, receipt: &ReceiptHandle) -> Option<u64> {
        let seq = parse_receipt(&receipt.0)?;
        let message = self.messages.get(&seq)?;
        (message.receipt.as_deref() == Some(receipt.0.as_str())).then_some(seq)
    }

    /// The queue's depth at `now`. It looks at the delivered messages and no others: a backlog of
    /// any length costs nothing more.
    pub(crate) fn depth(&self, now: Timestamp) -> QueueDepth {
        let in_flight = self
            .delivered_messages()
            .filter(|message| message.in_flight(now))
            .count();
        QueueDepth {
            messages: self.messages.len() as u64,
            in_flight: in_flight as u64,
            first_sent_at: self.messages.values().next().map(|message| message.sent_at),
        }
    }
}

/// How many messages the queue holds, how many of them are in flight, and when the first of them
/// in send order (the oldest) was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueueDepth {
    pub(crate) messages: u64,
    pub(crate) in_flight: u64,
    pub(crate) first_sent_at: Option<Timestamp>,
}

impl QueueDepth {
    /// The depth at `now` as the queue's table holds it: every message read, for a store whose
    /// writer cannot answer ([`crate::writer::Writer::look`]).
    pub(crate) fn read(read: &ReadTransaction, now: Timestamp) -> Result<Self, StoreError> {
        let messages = read_messages(read)?;
        Ok(Self {
            messages: messages.len() as u64,
            in_flight: messages
                .iter()
                .filter(|(_, message)| message.in_flight(now))
                .count() as u64,
            first_sent_at: messages.first().map(|(_, message)| message.sent_at),
        })
    }
}

/// Every queue message's state, in send order, as committed.
pub(crate) fn read_messages(
    read: &ReadTransaction,
) -> Result<Vec<(u64, MessageState)>, StoreError> {
    let mut messages = Vec::new();
    for entry in read.open_table(QUEUE)?.range::<u64>(..)? {
        let (seq, value) = entry?;
        let (message, _) = unframe::<MessageState>(value.value()).map_err(StoreError::corrupt(
            format!("queue message {}", seq.value()),
        ))?;
        messages.push((seq.value(), message));
    }
    Ok(messages)
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

fn encode_message(message: &MessageState, body: &[u8]) -> Result<Vec<u8>, OpError> {
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
        if self.queue.dedup.is_repeat(&message.dedup_id, now) {
            return Ok(());
        }
        let mut dedup = self.table_mut(DEDUP)?;
        if let Some(stale) = self.queue.dedup.sent_at(&message.dedup_id) {
            dedup.remove((stale.0, message.dedup_id.as_str()))?;
        }
        dedup.insert((now.0, message.dedup_id.as_str()), ())?;
        drop(dedup);
        self.queue.dedup.remember(&message.dedup_id, now);
        let seq = self.next_in(seq::QUEUE)?;
        let queued = MessageState::sent(message.group_id.clone(), now);
        self.table_mut(QUEUE)?
            .insert(seq, encode_message(&queued, &message.body)?.as_slice())?;
        self.queue.insert(seq, queued);
        self.wake_receivers();
        Ok(())
    }

    /// Drops dedup ids sent `DEDUP_WINDOW` or longer ago.
    fn forget_old_dedup_ids(&mut self, now: Timestamp) -> Result<(), OpError> {
        let old = self.queue.dedup.forget_old(now);
        if old.is_empty() {
            return Ok(());
        }
        let mut dedup = self.table_mut(DEDUP)?;
        for (sent_at, id) in &old {
            dedup.remove((sent_at.0, id.as_str()))?;
        }
        Ok(())
    }

    /// Delivers up to `max` messages, hiding each for `visibility`; redrives those received too
    /// often. When there is nothing to deliver, also says when a hidden message shows again: until
    /// then only a commit can change what a receive finds.
    pub(crate) fn receive(
        &mut self,
        max: usize,
        visibility: Duration,
    ) -> Result<(Vec<QueueRecord>, Option<Timestamp>), OpError> {
        let now = self.settings.clock.now();
        let plan = {
            let index = &*self.queue;
            let messages = index.messages.iter().map(|(seq, m)| (*seq, m));
            fifo::plan(
                messages,
                index.delivered_messages(),
                now,
                max,
                self.settings.max_receive_count,
            )
        };
        for seq in &plan.redrive {
            self.redrive(*seq)?;
        }
        if plan.deliver.is_empty() {
            return Ok((Vec::new(), self.queue.next_visible(now)));
        }
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
            let receipt = receipt_for(seq, message.receive_count + 1);
            message.deliver(now, visibility, receipt.clone());
            messages.insert(seq, encode_message(message, &body)?.as_slice())?;
            delivered.push(QueueRecord {
                message_id: message_id(seq),
                receipt: ReceiptHandle(receipt),
                body,
                group_id: message.group.clone(),
                receive_count: message.receive_count,
                dead_letter: None,
            });
            self.queue.delivered.insert(seq);
        }
        Ok((delivered, None))
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
        let error = fifo::redrive_error(self.settings.max_receive_count);
        let letter = DeadLetter::redriven(Some(&message.group), body, error);
        if self.keep_letter(&letter)? {
            self.bump(counter::DEAD_LETTERED)?;
        }
        Ok(())
    }

    /// Rewrites the stored state of the message `seq` after `change`.
    fn update_message(
        &mut self,
        seq: u64,
        change: impl FnOnce(&mut MessageState),
    ) -> Result<(), OpError> {
        let mut messages = self.table_mut(QUEUE)?;
        let body = match messages.get(seq)? {
            Some(value) => body_of(value.value()).map_err(|e| OpError::Fatal(e.to_string()))?,
            None => return Err(OpError::Fatal(format!("queue message {seq} is missing"))),
        };
        if let Some(message) = self.queue.messages.get_mut(&seq) {
            change(message);
            messages.insert(seq, encode_message(message, &body)?.as_slice())?;
        }
        Ok(())
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
        self.update_message(seq, |message| message.show_after(now, after))?;
        self.wake_receivers();
        Ok(())
    }

    /// Makes every message a receiver still holds visible at once: called when the process that
    /// holds the store's lock starts, so no receiver of an earlier process can be alive. Returns
    /// how many were released.
    pub(crate) fn release_held(&mut self, now: Timestamp) -> Result<u64, OpError> {
        let held: Vec<u64> = self
            .queue
            .delivered
            .iter()
            .copied()
            .filter(|seq| {
                self.queue
                    .messages
                    .get(seq)
                    .is_some_and(|m| m.held && m.in_flight(now))
            })
            .collect();
        for seq in &held {
            self.update_message(*seq, |message| {
                message.release(now);
            })?;
        }
        if !held.is_empty() {
            self.wake_receivers();
        }
        Ok(held.len() as u64)
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
