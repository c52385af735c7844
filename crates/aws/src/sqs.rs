//! The SQS FIFO queues: the updates queue and the dead-letter queue, one [`SqsQueue`] per queue URL.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName};
use bytes::Bytes;
use tgq_core::defaults::MAX_VISIBILITY;
use tgq_core::ids::{BotId, GroupKey, UpdateId};
use tgq_core::ports::{
    DeadLetter, DeadLetterReader, DeadLetters, OutgoingMessage, QueueConsumer, QueueRecord,
    ReceiptHandle, UpdateQueue, Visibility,
};
use tgq_core::PortError;

use crate::error::port_error;
use crate::timeouts;

const SEND: &str = "SQS SendMessage";
const RECEIVE: &str = "SQS ReceiveMessage";
const DELETE: &str = "SQS DeleteMessage";
const CHANGE_VISIBILITY: &str = "SQS ChangeMessageVisibility";

/// SQS hands out at most this many messages per receive.
const MAX_BATCH: usize = 10;
/// SQS long-polls for at most this many seconds.
const MAX_WAIT_SECS: u64 = 20;

/// How long `peek` hides the letters it has seen, so that its next receive returns further ones.
/// It shows them again before it returns; this bound matters only if it dies first.
const PEEK_HOLD: Duration = Duration::from_secs(30);
/// How long each of `peek`'s receives waits: a short poll may miss messages that are there.
const PEEK_WAIT: Duration = Duration::from_secs(1);

// Message attributes of a dead letter.
const REASON: &str = "reason";
const ERROR_CLASS: &str = "error_class";
const ERROR: &str = "error";
const ATTEMPTS: &str = "attempts";
const BOT_ID: &str = "bot_id";
const UPDATE_ID: &str = "update_id";
const GROUP: &str = "group";
/// How the body is encoded when it is not the raw text: `base64`, or `empty` for an empty body.
const BODY_ENCODING: &str = "body_encoding";
const BASE64: &str = "base64";
const EMPTY: &str = "empty";
/// SQS refuses an empty body; an empty poison body travels as this, marked [`EMPTY`].
const EMPTY_PLACEHOLDER: &str = "-";

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

/// Whether SQS accepts the character in a message body or attribute value.
fn sqs_allows(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// A dead letter's body as SQS can carry it, and the encoding to note if it is not the raw text.
fn encode_body(body: &[u8]) -> (String, Option<&'static str>) {
    if body.is_empty() {
        return (EMPTY_PLACEHOLDER.to_owned(), Some(EMPTY));
    }
    match std::str::from_utf8(body) {
        Ok(text) if text.chars().all(sqs_allows) => (text.to_owned(), None),
        _ => (aws_smithy_types::base64::encode(body), Some(BASE64)),
    }
}

/// The bytes a dead letter was sent with.
fn decode_body(body: &str, encoding: Option<&str>) -> Result<Bytes, PortError> {
    match encoding {
        None => Ok(Bytes::copy_from_slice(body.as_bytes())),
        Some(EMPTY) => Ok(Bytes::new()),
        Some(BASE64) => aws_smithy_types::base64::decode(body)
            .map(Bytes::from)
            .map_err(|e| PortError::rejected(RECEIVE, e)),
        Some(other) => Err(PortError::rejected(
            RECEIVE,
            format!("unknown body encoding {other:?}"),
        )),
    }
}

/// A message attribute of type `data_type`; characters SQS refuses become U+FFFD.
fn attribute(data_type: &str, value: &str) -> Result<MessageAttributeValue, PortError> {
    let value: String = value
        .chars()
        .map(|c| if sqs_allows(c) { c } else { '\u{FFFD}' })
        .collect();
    MessageAttributeValue::builder()
        .data_type(data_type)
        .string_value(value)
        .build()
        .map_err(|e| PortError::rejected(SEND, e))
}

/// The message attributes of a dead letter. SQS refuses empty values, so empty strings are left out
/// (and read back as empty).
fn letter_attributes(
    letter: &DeadLetter,
    encoding: Option<&str>,
) -> Result<HashMap<String, MessageAttributeValue>, PortError> {
    let update_id = letter.update_id.map(|id| id.to_string());
    let strings = [
        (BOT_ID, Some(letter.bot_id.as_str())),
        (REASON, Some(letter.reason.as_str())),
        (ERROR_CLASS, Some(letter.error_class.as_str())),
        (ERROR, Some(letter.error.as_str())),
        (UPDATE_ID, update_id.as_deref()),
        (GROUP, letter.group.as_ref().map(GroupKey::as_str)),
        (BODY_ENCODING, encoding),
    ];
    let mut attributes = HashMap::new();
    for (name, value) in strings {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            attributes.insert(name.to_owned(), attribute("String", value)?);
        }
    }
    attributes.insert(
        ATTEMPTS.to_owned(),
        attribute("Number", &letter.attempts.to_string())?,
    );
    Ok(attributes)
}

fn system_attribute(message: &Message, name: &MessageSystemAttributeName) -> Option<String> {
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
    Ok(QueueRecord {
        message_id: message.message_id.ok_or_else(|| missing("MessageId"))?,
        receipt: ReceiptHandle(
            message
                .receipt_handle
                .ok_or_else(|| missing("ReceiptHandle"))?,
        ),
        body: Bytes::from(message.body.unwrap_or_default()),
        group_id,
        receive_count,
    })
}

/// Rebuilds the letter a message carries. A message without tgq's attributes was moved here by the
/// updates queue's redrive policy (a crash loop): its bot and group come from its group id.
fn dead_letter(message: &Message) -> Result<DeadLetter, PortError> {
    let attributes = message.message_attributes.as_ref();
    let text = |name: &str| {
        attributes
            .and_then(|a| a.get(name))
            .and_then(MessageAttributeValue::string_value)
    };
    let body = decode_body(
        message.body.as_deref().unwrap_or_default(),
        text(BODY_ENCODING),
    )?;
    let malformed =
        |name: &str| PortError::rejected(RECEIVE, format!("malformed attribute {name}"));
    let Some(bot) = text(BOT_ID) else {
        let group_id = system_attribute(message, &MessageSystemAttributeName::MessageGroupId);
        return Ok(DeadLetter::redriven(
            group_id.as_deref(),
            body,
            "moved by the updates queue's redrive policy".into(),
        ));
    };
    let update_id = text(UPDATE_ID)
        .map(|id| id.parse().map(UpdateId).map_err(|_| malformed(UPDATE_ID)))
        .transpose()?;
    Ok(DeadLetter {
        bot_id: BotId::new(bot).map_err(|_| malformed(BOT_ID))?,
        update_id,
        group: text(GROUP).map(GroupKey::new),
        body,
        reason: text(REASON).unwrap_or_default().to_owned(),
        error_class: text(ERROR_CLASS).unwrap_or_default().to_owned(),
        error: text(ERROR).unwrap_or_default().to_owned(),
        attempts: text(ATTEMPTS)
            .unwrap_or("0")
            .parse()
            .map_err(|_| malformed(ATTEMPTS))?,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(body: &'static [u8]) -> DeadLetter {
        DeadLetter {
            bot_id: BotId::new("demo").unwrap(),
            update_id: Some(UpdateId(17)),
            group: Some(GroupKey::new("user:5")),
            body: Bytes::from_static(body),
            reason: "permanent_error".into(),
            error_class: "permanent".into(),
            error: "Telegram answered 403".into(),
            attempts: 2,
        }
    }

    /// The message SQS would deliver for a letter sent by `dead_letter`.
    fn delivered(letter: &DeadLetter) -> Message {
        let (body, encoding) = encode_body(&letter.body);
        Message::builder()
            .message_id("m-1")
            .body(body)
            .set_message_attributes(Some(letter_attributes(letter, encoding).unwrap()))
            .build()
    }

    #[test]
    fn a_text_letter_travels_as_its_raw_text() {
        let sent = letter(b"{\"update_id\":17, \"text\":\"Gr\xc3\xbc\xc3\x9fe\"}");
        let message = delivered(&sent);
        assert_eq!(
            message.body.as_deref().map(str::as_bytes),
            Some(&sent.body[..])
        );
        assert!(!message
            .message_attributes
            .as_ref()
            .unwrap()
            .contains_key(BODY_ENCODING));
        assert_eq!(dead_letter(&message).unwrap(), sent);
    }

    #[test]
    fn a_body_sqs_cannot_carry_travels_as_base64_and_comes_back_exactly() {
        for body in [&b"\xff\xfe not utf-8"[..], b"nul \x00 inside", b""] {
            let sent = DeadLetter {
                update_id: None,
                group: None,
                ..letter(b"")
            };
            let sent = DeadLetter {
                body: Bytes::copy_from_slice(body),
                ..sent
            };
            assert_eq!(dead_letter(&delivered(&sent)).unwrap(), sent, "{body:?}");
        }
    }

    #[test]
    fn attempts_are_a_number_and_empty_strings_are_left_out() {
        let sent = DeadLetter {
            error: String::new(),
            ..letter(b"{}")
        };
        let attributes = letter_attributes(&sent, None).unwrap();
        assert_eq!(attributes[ATTEMPTS].data_type(), "Number");
        assert_eq!(attributes[ATTEMPTS].string_value(), Some("2"));
        assert!(!attributes.contains_key(ERROR));
        assert_eq!(dead_letter(&delivered(&sent)).unwrap(), sent);
    }

    #[test]
    fn a_redriven_message_is_read_from_its_group_id_and_body() {
        let message = Message::builder()
            .message_id("m-2")
            .body(r#"{"update_id":99,"message":{"chat":{"id":5}}}"#)
            .attributes(MessageSystemAttributeName::MessageGroupId, "demo:5")
            .build();
        let letter = dead_letter(&message).unwrap();
        assert_eq!(
            (
                letter.bot_id.as_str(),
                letter.group,
                letter.update_id,
                letter.reason.as_str()
            ),
            (
                "demo",
                Some(GroupKey::new("5")),
                Some(UpdateId(99)),
                "max_receive_count"
            )
        );
    }

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
                group_id: "demo:5".into(),
                receive_count: 2,
            }
        );
    }
}
