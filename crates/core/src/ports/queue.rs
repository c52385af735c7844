//! The updates queue: what the webhook may send, and what the worker may do to a message it holds.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::dead::DeadLetterMarks;
use crate::error::PortError;
use crate::ids::{GroupKey, MessageGroupId, RecordKey};
use crate::timer::TimerMessage;

/// A message for the updates queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// `{bot_id}:{group key}`: the queue delivers one group's messages in order, one at a time.
    pub group_id: MessageGroupId,
    /// `{bot_id}:{update_id}`: the queue drops a repeat within its dedup window.
    pub dedup_id: String,
    /// The raw update.
    pub body: Bytes,
}

impl OutgoingMessage {
    /// The message that delivers a due timer to its chat's message group.
    pub(crate) fn timer(timer: &TimerMessage) -> Self {
        Self {
            group_id: MessageGroupId::new(&timer.bot_id, &timer.group),
            dedup_id: timer.dedup_id(),
            body: timer.body(),
        }
    }

    /// The queue message for one stored update.
    pub fn for_update(key: &RecordKey, group: &GroupKey, body: Bytes) -> Self {
        Self {
            group_id: MessageGroupId::new(&key.bot_id, group),
            dedup_id: key.dedup_id(),
            body,
        }
    }
}

/// What the webhook may do to the updates queue: send.
#[async_trait]
pub trait UpdateQueue: Send + Sync {
    /// Sends one message to the FIFO queue.
    async fn enqueue(&self, message: &OutgoingMessage) -> Result<(), PortError>;
}

/// The queue's handle on one received message, needed to change its visibility or delete it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReceiptHandle(pub String);

/// One message as the queue delivered it (SQS's event record, or a local receive). Adapters refuse
/// a message without an id where they read it: a failure must always be reportable by id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRecord {
    /// The queue's id of the message; what `batchItemFailures` names. Never empty.
    pub message_id: String,
    /// The handle of this delivery.
    pub receipt: ReceiptHandle,
    /// The raw update.
    pub body: Bytes,
    /// `{bot_id}:{group key}`, as sent.
    pub group_id: MessageGroupId,
    /// How many times the queue has delivered it, this time included.
    pub receive_count: u32,
    /// tgq's dead-letter attributes, when the message is a dead letter an operator moved back to
    /// the updates queue (the SQS console's redrive): the worker then resets its record first.
    pub dead_letter: Option<DeadLetterMarks>,
}

/// What the worker may do to a message it holds: hide it for a while (backoff) or show it at once.
#[async_trait]
pub trait Visibility: Send + Sync {
    /// Makes the message visible again after `after` (zero: at once).
    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        after: Duration,
    ) -> Result<(), PortError>;
}

/// What local mode's worker loop (the stand-in for the SQS event source mapping) does to the queue.
#[async_trait]
pub trait QueueConsumer: Visibility {
    /// Receives up to `max` messages, each hidden for `visibility`, waiting up to `wait` for the first.
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<QueueRecord>, PortError>;

    /// Deletes a processed message.
    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), PortError>;
}
