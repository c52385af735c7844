//! How a dead letter travels on SQS: its raw bytes as the body (base64 when SQS cannot carry them)
//! and its reasons as message attributes, and how a received message is read back into a letter.

use std::collections::HashMap;

use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName};
use bytes::Bytes;
use tgq_core::dead::DeadLetterMarks;
use tgq_core::ids::{BotId, GroupKey, MessageGroupId, UpdateId};
use tgq_core::ports::DeadLetter;
use tgq_core::PortError;

use crate::sqs::{system_attribute, RECEIVE, SEND};

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

/// Whether SQS accepts the character in a message body or attribute value.
fn sqs_allows(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// A dead letter's body as SQS can carry it, and the encoding to note if it is not the raw text.
pub(crate) fn encode_body(body: &[u8]) -> (String, Option<&'static str>) {
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
pub(crate) fn letter_attributes(
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

/// The dead-letter marks of a message on the updates queue, read through `attribute` (a message
/// attribute's string value by name): present when the message is one of tgq's letters moved back
/// from the dead-letter queue, which keeps a message's attributes.
pub fn dead_letter_marks<'a>(
    attribute: impl Fn(&str) -> Option<&'a str>,
) -> Option<DeadLetterMarks> {
    attribute(BOT_ID)?;
    let reason = attribute(REASON)?.parse().ok()?;
    let attempts = attribute(ATTEMPTS)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Some(DeadLetterMarks { reason, attempts })
}

/// The marks of a received SQS message, if it is a letter moved back.
pub(crate) fn message_marks(message: &Message) -> Option<DeadLetterMarks> {
    let attributes = message.message_attributes.as_ref()?;
    dead_letter_marks(|name| {
        attributes
            .get(name)
            .and_then(MessageAttributeValue::string_value)
    })
}

/// Rebuilds the letter a message carries. A message without tgq's attributes was moved here by the
/// updates queue's redrive policy (a crash loop): its bot and group come from its group id.
pub(crate) fn dead_letter(message: &Message) -> Result<DeadLetter, PortError> {
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
            group_id.map(MessageGroupId::from_raw).as_ref(),
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
        reason: text(REASON)
            .unwrap_or_default()
            .parse()
            .map_err(|_| malformed(REASON))?,
        error_class: text(ERROR_CLASS)
            .unwrap_or_default()
            .parse()
            .map_err(|_| malformed(ERROR_CLASS))?,
        error: text(ERROR).unwrap_or_default().to_owned(),
        attempts: text(ATTEMPTS)
            .unwrap_or("0")
            .parse()
            .map_err(|_| malformed(ATTEMPTS))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tgq_core::dead::{DeadReason, FailureClass};

    fn letter(body: &'static [u8]) -> DeadLetter {
        DeadLetter {
            bot_id: BotId::new("demo").unwrap(),
            update_id: Some(UpdateId(17)),
            group: Some(GroupKey::new("user:5")),
            body: Bytes::from_static(body),
            reason: DeadReason::Permanent,
            error_class: FailureClass::Permanent,
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
    fn a_letter_moved_back_to_the_updates_queue_is_known_by_its_attributes() {
        let sent = letter(b"{\"update_id\":17}");
        assert_eq!(
            message_marks(&delivered(&sent)),
            Some(DeadLetterMarks {
                reason: DeadReason::Permanent,
                attempts: 2
            })
        );
        let update = Message::builder().message_id("m-9").body("{}").build();
        assert_eq!(
            message_marks(&update),
            None,
            "an update sent by the webhook"
        );
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
                letter.reason
            ),
            (
                "demo",
                Some(GroupKey::new("5")),
                Some(UpdateId(99)),
                DeadReason::Redriven
            )
        );
    }
}
