//! The SQS FIFO queues: the updates queue and the dead-letter queue, one [`SqsQueue`] per queue URL.

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};
use bytes::Bytes;
use tgq_core::broadcast::chain::{BroadcastQueue, ChainStep};
use tgq_core::defaults::MAX_VISIBILITY;
use tgq_core::ids::{BotId, MessageGroupId};
use tgq_core::ports::{
    DeadLetter, DeadLetterReader, DeadLetterStore, DeadLetters, HeldLetter, LetterHandle,
    OutgoingMessage, QueueConsumer, QueueRecord, ReceiptHandle, UpdateQueue, Visibility,
};
use tgq_core::record::Timestamp;
use tgq_core::PortError;

use crate::error::port_error;
use crate::letter::{dead_letter, encode_body, letter_attributes, message_marks};
use crate::timeouts;

pub(crate) const SEND: &str = "SQS SendMessage";
pub(crate) const RECEIVE: &str = "SQS ReceiveMessage";
const DELETE: &str = "SQS DeleteMessage";
const CHANGE_VISIBILITY: &str = "SQS ChangeMessageVisibility";
const ATTRIBUTES: &str = "SQS GetQueueAttributes";

/// How long each of `hold`'s receives waits: a short poll may miss messages that are there.
const HOLD_WAIT: Duration = Duration::from_secs(1);

/// SQS hands out at most this many messages per receive.
const MAX_BATCH: usize = 10;
/// SQS long-polls for at most this many seconds.
const MAX_WAIT_SECS: u64 = 20;

/// How long `peek` hides the letters it has seen, so that its next receive returns further ones.
/// It shows them again before it returns; this bound matters only if it dies first.
const PEEK_HOLD: Duration = Duration::from_secs(30);
/// How long each of `peek`'s receives waits: a short poll may miss messages that are there.
const PEEK_WAIT: Duration = Duration::from_secs(1);

/// One SQS FIFO queue, by URL. As the updates queue it is the webhook's [`UpdateQueue`] and local
/// mode's [`QueueConsumer`]; as the dead-letter queue it is [`DeadLetters`] and [`DeadLetterReader`].
#[derive(Clone, Debug)]
pub struct SqsQueue {
    client: aws_sdk_sqs::Client,
    url: String,
}

impl SqsQueue {
    /// The queue at `url`, using a client built once per cold start.
    pub fn new(client: aws_sdk_sqs::Client, url: impl Into<String>) -> Self {
        Self {
            client,
            url: url.into(),
        }
    }

    /// Receives up to `max` messages (at most 10) with their system and message attributes.
    async fn receive_messages(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<Message>, PortError> {
        let wait_secs = whole_secs(wait, MAX_WAIT_SECS);
        let output = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(count(max.clamp(1, MAX_BATCH)))
            .visibility_timeout(count(whole_secs(visibility, MAX_VISIBILITY.as_secs())))
            .wait_time_seconds(count(wait_secs))
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .customize()
            // A long poll outlasts the usual attempt timeout: give this call the wait on top of it.
            .config_override(
                aws_sdk_sqs::config::Builder::default()
                    .timeout_config(timeouts(Duration::from_secs(wait_secs))),
            )
            .send()
            .await
            .map_err(|e| port_error(RECEIVE, e))?;
        Ok(output.messages.unwrap_or_default())
    }
}

/// A duration as SQS wants it: whole seconds, rounded up so that a wait is never cut short, and capped.
fn whole_secs(d: Duration, max: u64) -> u64 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    secs.min(max)
}

/// A small count for an SQS parameter.
fn count(n: impl TryInto<i32>) -> i32 {
    n.try_into().unwrap_or(i32::MAX)
}

pub(crate) fn system_attribute(
    message: &Message,
    name: &MessageSystemAttributeName,
) -> Option<String> {
    message.attributes.as_ref()?.get(name).cloned()
}

/// One received message as the port describes it.
fn queue_record(message: Message) -> Result<QueueRecord, PortError> {
    let missing = |what: &str| PortError::rejected(RECEIVE, format!("a message without {what}"));
    let group_id = system_attribute(&message, &MessageSystemAttributeName::MessageGroupId)
        .ok_or_else(|| missing("MessageGroupId (is the queue FIFO?)"))?;
    let receive_count = system_attribute(
        &message,
        &MessageSystemAttributeName::ApproximateReceiveCount,
    )
    .and_then(|n| n.parse().ok())
    .ok_or_else(|| missing("ApproximateReceiveCount"))?;
    let dead_letter = message_marks(&message);
    Ok(QueueRecord {
        message_id: message.message_id.ok_or_else(|| missing("MessageId"))?,
        receipt: ReceiptHandle(
            message
                .receipt_handle
                .ok_or_else(|| missing("ReceiptHandle"))?,
        ),
        body: Bytes::from(message.body.unwrap_or_default()),
        group_id: MessageGroupId::from_raw(group_id),
        receive_count,
        dead_letter,
    })
}

/// When SQS accepted a message, in epoch milliseconds. (`SequenceNumber` is documented to increase
/// only within a message group, so it cannot order letters of different groups.)
fn sent_at(message: &Message) -> u64 {
    system_attribute(message, &MessageSystemAttributeName::SentTimestamp)
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(u64::MAX)
}

#[async_trait]
impl UpdateQueue for SqsQueue {
    async fn enqueue(&self, message: &OutgoingMessage) -> Result<(), PortError> {
        // Telegram's updates are JSON, hence UTF-8; anything else was refused as poison before this.
        let body = std::str::from_utf8(&message.body).map_err(|e| PortError::rejected(SEND, e))?;
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .message_group_id(message.group_id.as_str())
            .message_deduplication_id(&message.dedup_id)
            .send()
            .await
            .map_err(|e| port_error(SEND, e))?;
        Ok(())
    }
}

/// The stack's broadcasts queue (FIFO): a job's steps in its own message group.
#[async_trait]
impl BroadcastQueue for SqsQueue {
    async fn queue(&self, step: &ChainStep, dedup: &str) -> Result<(), PortError> {
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(step.body())
            .message_group_id(step.group())
            .message_deduplication_id(dedup)
            .send()
            .await
            .map_err(|e| port_error(SEND, e))?;
        Ok(())
    }
}

#[async_trait]
impl Visibility for SqsQueue {
    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        after: Duration,
    ) -> Result<(), PortError> {
        self.client
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(&receipt.0)
            .visibility_timeout(count(whole_secs(after, MAX_VISIBILITY.as_secs())))
            .send()
            .await
            .map_err(|e| port_error(CHANGE_VISIBILITY, e))?;
        Ok(())
    }
}

#[async_trait]
impl QueueConsumer for SqsQueue {
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<QueueRecord>, PortError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        self.receive_messages(max, visibility, wait)
            .await?
            .into_iter()
            .map(queue_record)
            .collect()
    }

    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), PortError> {
        self.client
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(&receipt.0)
            .send()
            .await
            .map_err(|e| port_error(DELETE, e))?;
        Ok(())
    }
}

#[async_trait]
impl DeadLetters for SqsQueue {
    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), PortError> {
        let (body, encoding) = encode_body(&letter.body);
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .message_group_id(letter.group_id())
            .message_deduplication_id(letter.dedup_id())
            .set_message_attributes(Some(letter_attributes(letter, encoding)?))
            .send()
            .await
            .map_err(|e| port_error(SEND, e))?;
        Ok(())
    }
}

#[async_trait]
impl DeadLetterReader for SqsQueue {
    /// Receives letters, hiding each for a moment so that the next receive returns further ones,
    /// then shows them all again. A FIFO queue returns at most the first ten letters of each group.
    async fn peek(&self, max: usize) -> Result<Vec<DeadLetter>, PortError> {
        let mut held: Vec<Message> = Vec::new();
        let mut seen = HashSet::new();
        let mut outcome = Ok(());
        for _ in 0..max.div_ceil(MAX_BATCH) + 1 {
            if held.len() >= max {
                break;
            }
            let batch = match self
                .receive_messages(max - held.len(), PEEK_HOLD, PEEK_WAIT)
                .await
            {
                Ok(batch) => batch,
                Err(err) => {
                    outcome = Err(err);
                    break;
                }
            };
            if batch.is_empty() {
                break;
            }
            held.extend(
                batch
                    .into_iter()
                    .filter(|m| m.message_id.clone().is_some_and(|id| seen.insert(id))),
            );
        }
        // Peeking must leave the queue as it found it, even when a receive failed half-way.
        for receipt in held.iter().filter_map(|m| m.receipt_handle.clone()) {
            if let Err(err) = self
                .change_visibility(&ReceiptHandle(receipt), Duration::ZERO)
                .await
            {
                tracing::warn!(error = %err, "a peeked dead letter stays hidden until its hold ends");
            }
        }
        outcome?;
        // A stable sort: letters sent in the same millisecond keep the queue's own order.
        held.sort_by_key(sent_at);
        held.iter().take(max).map(dead_letter).collect()
    }
}

impl SqsQueue {
    /// A queue attribute as a number (0 when SQS leaves it out).
    async fn count_attributes(&self, names: &[QueueAttributeName]) -> Result<u64, PortError> {
        let output = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
            .set_attribute_names(Some(names.to_vec()))
            .send()
            .await
            .map_err(|e| port_error(ATTRIBUTES, e))?;
        let attributes = output.attributes.unwrap_or_default();
        Ok(names
            .iter()
            .filter_map(|name| attributes.get(name)?.parse::<u64>().ok())
            .sum())
    }

    /// Messages ready to be received, and messages in flight (received and not deleted, or hidden
    /// by a visibility change), as SQS approximates them.
    pub async fn depth_by_state(&self) -> Result<(u64, u64), PortError> {
        let visible = self
            .count_attributes(&[
                QueueAttributeName::ApproximateNumberOfMessages,
                QueueAttributeName::ApproximateNumberOfMessagesDelayed,
            ])
            .await?;
        let in_flight = self
            .count_attributes(&[QueueAttributeName::ApproximateNumberOfMessagesNotVisible])
            .await?;
        Ok((visible, in_flight))
    }
}

/// A received dead letter as the operator holds it. A message whose attributes cannot be read is
/// still shown (and can be purged), as a poison letter saying why.
fn held_letter(message: Message) -> Result<HeldLetter, PortError> {
    let missing = |what: &str| PortError::rejected(RECEIVE, format!("a message without {what}"));
    let letter = dead_letter(&message).unwrap_or_else(|error| {
        DeadLetter::unidentified(
            BotId::unknown(),
            bytes::Bytes::from(message.body.clone().unwrap_or_default()),
            format!("its dead-letter attributes cannot be read: {error}"),
        )
    });
    let sent_at = system_attribute(&message, &MessageSystemAttributeName::SentTimestamp)
        .and_then(|ms| ms.parse().ok())
        .map(Timestamp);
    Ok(HeldLetter {
        id: message.message_id.ok_or_else(|| missing("MessageId"))?,
        handle: LetterHandle(
            message
                .receipt_handle
                .ok_or_else(|| missing("ReceiptHandle"))?,
        ),
        sent_at,
        letter,
    })
}

#[async_trait]
impl DeadLetterStore for SqsQueue {
    /// Receives letters hidden for `hold`: SQS itself keeps them from other receivers until then.
    async fn hold(&self, max: usize, hold: Duration) -> Result<Vec<HeldLetter>, PortError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let mut messages = self.receive_messages(max, hold, HOLD_WAIT).await?;
        messages.sort_by_key(sent_at);
        messages.into_iter().map(held_letter).collect()
    }

    async fn release(&self, handle: &LetterHandle) -> Result<(), PortError> {
        self.change_visibility(&ReceiptHandle(handle.0.clone()), Duration::ZERO)
            .await
    }

    async fn remove(&self, handle: &LetterHandle) -> Result<(), PortError> {
        self.delete(&ReceiptHandle(handle.0.clone())).await
    }

    async fn depth(&self) -> Result<u64, PortError> {
        let (visible, in_flight) = self.depth_by_state().await?;
        Ok(visible + in_flight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_up_to_whole_seconds_within_the_sqs_limits() {
        assert_eq!(whole_secs(Duration::ZERO, MAX_WAIT_SECS), 0);
        assert_eq!(whole_secs(Duration::from_millis(300), MAX_WAIT_SECS), 1);
        assert_eq!(whole_secs(Duration::from_secs(2), MAX_WAIT_SECS), 2);
        assert_eq!(whole_secs(Duration::from_secs(60), MAX_WAIT_SECS), 20);
        assert_eq!(
            whole_secs(Duration::from_secs(86_400), MAX_VISIBILITY.as_secs()),
            43_200
        );
    }

    #[test]
    fn a_received_message_carries_its_group_and_receive_count() {
        let message = Message::builder()
            .message_id("m-3")
            .receipt_handle("r-3")
            .body("{}")
            .attributes(MessageSystemAttributeName::MessageGroupId, "demo:5")
            .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "2")
            .build();
        assert_eq!(
            queue_record(message).unwrap(),
            QueueRecord {
                message_id: "m-3".into(),
                receipt: ReceiptHandle("r-3".into()),
                body: Bytes::from_static(b"{}"),
                group_id: MessageGroupId::from_raw("demo:5"),
                receive_count: 2,
                dead_letter: None,
            }
        );
    }
}
