//! Reads a stored update into Telegram's types without letting the parser stop the worker
//! (docs/design/webhook.md, "Unreadable updates").
//!
//! The webhook keeps any body with an `update_id`; only the worker reads the rest, through
//! teloxide-core. Its parser has two ways of not reading an update: it panics on a shape it
//! unwraps (a reaction with neither `user` nor `actor_chat`), and it turns a known kind it cannot
//! read into an empty `UpdateKind::Error`, which would hand the handler nothing in place of a
//! message. Both are unreadable here; a kind newer than teloxide-core stays an `Error` the
//! handler may ignore, as teloxide itself does.

use serde::de::DeserializeOwned;
use serde_json::Value;
use teloxide_core::types::{
    BusinessConnection, BusinessMessagesDeleted, CallbackQuery, ChatBoostRemoved, ChatBoostUpdated,
    ChatJoinRequest, ChatMemberUpdated, ChosenInlineResult, InlineQuery, Message,
    MessageReactionCountUpdated, MessageReactionUpdated, PaidMediaPurchased, Poll, PollAnswer,
    PreCheckoutQuery, ShippingQuery, Update, UpdateKind,
};

/// Reads `body` as an [`Update`]; `Err` says why it cannot be read, quoting no value of it.
pub(crate) fn read_update(body: &[u8]) -> Result<Update, String> {
    let parsed = std::panic::catch_unwind(|| serde_json::from_slice::<Update>(body));
    let update = match parsed {
        Ok(Ok(update)) => update,
        Ok(Err(error)) => return Err(unquoted(&error.to_string())),
        Err(panic) => {
            return Err(format!(
                "the parser panicked: {}",
                unquoted(&panic_message(&*panic))
            ))
        }
    };
    if !matches!(update.kind, UpdateKind::Error(_)) {
        return Ok(update);
    }
    match known_kind_error(body) {
        Some(error) => Err(error),
        None => Ok(update),
    }
}

/// Why a kind teloxide-core knows did not read, found by reading it alone with its own type;
/// `None` when the update holds no kind it knows.
fn known_kind_error(body: &[u8]) -> Option<String> {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    fields.iter().find_map(|(kind, value)| {
        let read = match kind.as_str() {
            "message"
            | "edited_message"
            | "channel_post"
            | "edited_channel_post"
            | "business_message"
            | "edited_business_message" => reads::<Message>(value),
            "business_connection" => reads::<BusinessConnection>(value),
            "deleted_business_messages" => reads::<BusinessMessagesDeleted>(value),
            "message_reaction" => reads::<MessageReactionUpdated>(value),
            "message_reaction_count" => reads::<MessageReactionCountUpdated>(value),
            "inline_query" => reads::<InlineQuery>(value),
            "chosen_inline_result" => reads::<ChosenInlineResult>(value),
            "callback_query" => reads::<CallbackQuery>(value),
            "shipping_query" => reads::<ShippingQuery>(value),
            "pre_checkout_query" => reads::<PreCheckoutQuery>(value),
            "purchased_paid_media" => reads::<PaidMediaPurchased>(value),
            "poll" => reads::<Poll>(value),
            "poll_answer" => reads::<PollAnswer>(value),
            "my_chat_member" | "chat_member" => reads::<ChatMemberUpdated>(value),
            "chat_join_request" => reads::<ChatJoinRequest>(value),
            "chat_boost" => reads::<ChatBoostUpdated>(value),
            "removed_chat_boost" => reads::<ChatBoostRemoved>(value),
            _ => return None,
        };
        read.err().map(|error| format!("{kind}: {error}"))
    })
}

/// Reads one kind's object with its own type, a panic included.
fn reads<T: DeserializeOwned>(value: &Value) -> Result<(), String> {
    match std::panic::catch_unwind(|| T::deserialize(value)) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(unquoted(&error.to_string())),
        Err(panic) => Err(format!(
            "the parser panicked: {}",
            unquoted(&panic_message(&*panic))
        )),
    }
}

/// A parser's message without the values it quotes: serde quotes a mistyped value (`invalid
/// type: string "…"`), which may be a user's text; the field names it puts in backticks stay.
fn unquoted(message: &str) -> String {
    message
        .split('"')
        .enumerate()
        .map(|(i, part)| if i % 2 == 1 { "…" } else { part })
        .collect::<Vec<_>>()
        .join("\"")
}

/// The text a panic carried, when it carried one.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => (*text).to_owned(),
        (_, Some(text)) => text.clone(),
        _ => "non-string panic payload".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reaction_naming_nobody_is_unreadable_not_a_panic() {
        let body = br#"{"update_id":1,"message_reaction":{"chat":{"id":5,"type":"private"},"message_id":2,"date":1700000000,"old_reaction":[],"new_reaction":[]}}"#;
        let error = read_update(body).unwrap_err();
        assert!(error.starts_with("the parser panicked: "), "{error}");
    }

    #[test]
    fn a_known_kind_that_does_not_read_names_its_kind_and_field_not_its_values() {
        let body = br#"{"update_id":1,"message":{"message_id":"my secret","date":1,"chat":{"id":5,"type":"private"}}}"#;
        let error = read_update(body).unwrap_err();
        assert!(error.starts_with("message: "), "{error}");
        assert!(!error.contains("secret"), "{error}");
    }

    #[test]
    fn a_kind_newer_than_the_parser_reads_as_an_error_kind_the_handler_may_ignore() {
        let body =
            br#"{"update_id":1,"subscription":{"user":{"id":7,"is_bot":false,"first_name":"A"}}}"#;
        let update = read_update(body).unwrap();
        assert!(matches!(update.kind, UpdateKind::Error(_)));
    }

    #[test]
    fn a_message_reads() {
        let body = br#"{"update_id":1,"message":{"message_id":3,"date":1,"chat":{"id":5,"type":"private"},"text":"hi"}}"#;
        assert!(matches!(
            read_update(body).unwrap().kind,
            UpdateKind::Message(_)
        ));
    }
}
