//! Reads the little the pipeline needs from a raw Update — its id and its ordering group — without
//! trusting the rest. Anything that is not an Update is poison (docs/design/webhook.md).

use serde_json::{Map, Value};

use crate::ids::{GroupKey, UpdateId};

/// What the webhook and the worker know of an update before the bot sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// Telegram's `update_id`.
    pub update_id: UpdateId,
    /// The update's ordering group inside its bot.
    pub group: GroupKey,
    /// The update kind (`message`, `callback_query`, …), or `unknown` when none is recognised.
    pub kind: String,
    /// A callback query's id, which the webhook may answer in its reply (`TGQ_ACK_CALLBACKS`).
    pub callback_query_id: Option<String>,
}

/// Why an authenticated body is not an Update; recorded with the raw bytes in the dead-letter store.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Poison {
    /// The body does not parse as JSON.
    #[error("body is not JSON: {0}")]
    NotJson(String),
    /// The body is JSON but not an object.
    #[error("body is not a JSON object")]
    NotAnObject,
    /// There is no `update_id` field.
    #[error("update_id is missing")]
    MissingUpdateId,
    /// `update_id` is present but not an integer.
    #[error("update_id is not an integer")]
    UpdateIdNotInteger,
    /// `update_id` is negative: Telegram's never are, and negative ids are tgq's own timers'
    /// ([`TIMER_KIND`]), which a body from outside must not take.
    #[error("update_id is negative")]
    UpdateIdNegative,
    /// The body is one of tgq's own timer updates ([`TIMER_KIND`]): those come from the bot's
    /// scheduler, never from Telegram, so one posted to the webhook is not run.
    #[error("a {TIMER_KIND} update comes from tgq's scheduler, not from Telegram")]
    NotFromTelegram,
}

/// The field that names tgq's own timer updates (docs/design/time.md): a timer travels as an
/// update of this kind, with a negative `update_id` Telegram never uses.
pub const TIMER_KIND: &str = "tgq_timer";

impl Envelope {
    /// Parses a body as Telegram sent it: one of tgq's timer updates is refused
    /// ([`Poison::NotFromTelegram`]).
    pub fn parse(body: &[u8]) -> Result<Self, Poison> {
        let envelope = Self::parse_queued(body)?;
        if envelope.kind == TIMER_KIND {
            return Err(Poison::NotFromTelegram);
        }
        Ok(envelope)
    }

    /// Parses a body from the updates queue, where timer updates travel beside Telegram's.
    pub fn parse_queued(body: &[u8]) -> Result<Self, Poison> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| Poison::NotJson(e.classify_name()))?;
        let Value::Object(update) = value else {
            return Err(Poison::NotAnObject);
        };
        let update_id = match update.get("update_id") {
            None => return Err(Poison::MissingUpdateId),
            Some(id) => UpdateId(id.as_i64().ok_or(Poison::UpdateIdNotInteger)?),
        };
        let timer = update.contains_key(TIMER_KIND);
        if update_id.0 < 0 && !timer {
            return Err(Poison::UpdateIdNegative);
        }
        let Some((kind, body)) = update.iter().find(|(key, _)| key.as_str() != "update_id") else {
            return Ok(Self::unordered(update_id, "unknown"));
        };
        // A known kind without the field that names its chat or user is kept all the same, in a
        // group of what else it names (or its own): the worker finds it unreadable and
        // dead-letters it with the reason, where a poison letter would keep no record of it.
        let group = match group_of(kind, body).or_else(|| named_group(body)) {
            Some(group) => group,
            None => return Ok(Self::unordered(update_id, kind)),
        };
        let callback_query_id = (kind == "callback_query")
            .then(|| body.get("id").and_then(Value::as_str).map(str::to_owned))
            .flatten();
        Ok(Self {
            update_id,
            group,
            kind: kind.clone(),
            callback_query_id,
        })
    }

    /// An update that orders against nothing else: its own group, so it never blocks a chat.
    fn unordered(update_id: UpdateId, kind: &str) -> Self {
        Self {
            update_id,
            group: GroupKey::new(format!("update:{update_id}")),
            kind: kind.to_owned(),
            callback_query_id: None,
        }
    }
}

trait ClassifyName {
    fn classify_name(&self) -> String;
}

impl ClassifyName for serde_json::Error {
    /// The error's category and position only: the message could quote the body, which may hold user text.
    fn classify_name(&self) -> String {
        format!(
            "{:?} error at line {} column {}",
            self.classify(),
            self.line(),
            self.column()
        )
    }
}

/// The group key of one update kind (docs/ARCHITECTURE.md §2); `None` when the field its kind
/// is ordered by is missing.
///
/// Telegram's Bot API server queues every kind it delivers under a chat or a user and delivers
/// each queue in order (`webhook_queue_id` in tdlib/telegram-bot-api's `Client.cpp`); each group
/// here is that chat or user, or one that holds it: a chat's updates of every kind share one group,
/// so a button press or a reaction runs in order with the chat's messages.
fn group_of(kind: &str, body: &Value) -> Option<GroupKey> {
    let chat = |path: &[&str]| int_at(body, path).map(|id| GroupKey::new(id.to_string()));
    let user = |path: &[&str]| int_at(body, path).map(|id| GroupKey::new(format!("user:{id}")));
    match kind {
        "message"
        | "edited_message"
        | "channel_post"
        | "edited_channel_post"
        | "business_message"
        | "edited_business_message"
        | "deleted_business_messages"
        | "my_chat_member"
        | "chat_member"
        | "chat_join_request"
        | "message_reaction"
        | "message_reaction_count"
        | "chat_boost"
        | "removed_chat_boost"
        // A message to the bot as a guest in a chat it is not a member of: the server queues
        // these per chat.
        | "guest_message"
        // A timer runs in the chat that scheduled it, behind the chat's earlier updates.
        | "tgq_timer" => chat(&["chat", "id"]),
        "callback_query" => chat(&["message", "chat", "id"]).or_else(|| user(&["from", "id"])),
        "inline_query"
        | "chosen_inline_result"
        | "shipping_query"
        | "pre_checkout_query"
        | "purchased_paid_media" => user(&["from", "id"]),
        // The user a business connection or a bot made for them (`managed_bot`) belongs to.
        "business_connection" | "managed_bot" => user(&["user", "id"]),
        // A poll answer names a user, or a chat when the vote was cast anonymously on its behalf.
        "poll_answer" => chat(&["voter_chat", "id"]).or_else(|| user(&["user", "id"])),
        "poll" => body
            .get("id")
            .and_then(Value::as_str)
            .map(|id| GroupKey::new(format!("poll:{id}"))),
        // A kind this version does not know is ordered by what it names, as the server queues
        // it: its chat, else its user.
        _ => named_group(body),
    }
}

/// The group of a kind tgq does not know: the `chat.id` at its top level, else its `from.id` or
/// `user.id`.
fn named_group(body: &Value) -> Option<GroupKey> {
    if let Some(chat_id) = int_at(body, &["chat", "id"]) {
        return Some(GroupKey::new(chat_id.to_string()));
    }
    let user = int_at(body, &["from", "id"]).or_else(|| int_at(body, &["user", "id"]))?;
    Some(GroupKey::new(format!("user:{user}")))
}

/// The integer at a path of object fields, if every step exists and the leaf is an integer.
fn int_at(value: &Value, path: &[&str]) -> Option<i64> {
    path.iter()
        .try_fold(value, |node, key| {
            node.as_object()
                .and_then(|o: &Map<String, Value>| o.get(*key))
        })
        .and_then(Value::as_i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(json: &str) -> String {
        Envelope::parse(json.as_bytes())
            .unwrap()
            .group
            .as_str()
            .to_owned()
    }

    #[test]
    fn callback_query_without_a_message_orders_by_its_user() {
        assert_eq!(
            group(r#"{"update_id":1,"callback_query":{"id":"x","from":{"id":7}}}"#),
            "user:7"
        );
    }

    #[test]
    fn a_kind_this_version_does_not_know_orders_by_the_chat_or_user_it_names() {
        let user = r#"{"update_id":9,"subscription":{"user":{"id":7,"is_bot":false}}}"#;
        assert_eq!(group(user), "user:7");
        let from = r#"{"update_id":9,"future_kind":{"from":{"id":8},"user":{"id":7}}}"#;
        assert_eq!(group(from), "user:8");
        let chat = r#"{"update_id":9,"future_kind":{"chat":{"id":-100},"from":{"id":8}}}"#;
        assert_eq!(group(chat), "-100");
        assert_eq!(
            group(r#"{"update_id":9,"future_kind":{"id":"x"}}"#),
            "update:9"
        );
    }

    #[test]
    fn an_update_with_no_kind_is_unordered_not_poison() {
        assert_eq!(group(r#"{"update_id":5}"#), "update:5");
    }

    #[test]
    fn bodies_that_are_not_updates_are_poison_with_a_reason() {
        let poison = |b: &str| Envelope::parse(b.as_bytes()).unwrap_err();
        assert!(matches!(poison("{\"update_id\": 5"), Poison::NotJson(_)));
        assert_eq!(poison("[1,2]"), Poison::NotAnObject);
        assert_eq!(poison(r#"{"message":{}}"#), Poison::MissingUpdateId);
        assert_eq!(poison(r#"{"update_id":"12"}"#), Poison::UpdateIdNotInteger);
        assert_eq!(poison(r#"{"update_id":1.5}"#), Poison::UpdateIdNotInteger);
        assert_eq!(
            poison(r#"{"update_id":-3,"message":{"chat":{"id":1}}}"#),
            Poison::UpdateIdNegative
        );
    }

    #[test]
    fn a_known_kind_without_its_chat_is_kept_in_a_group_of_what_else_it_names() {
        let no_chat = r#"{"update_id":4,"message":{"chat":{"id":"x"},"from":{"id":7}}}"#;
        assert_eq!(group(no_chat), "user:7");
        assert_eq!(group(r#"{"update_id":4,"inline_query":{}}"#), "update:4");
    }

    #[test]
    fn a_timer_update_queues_in_its_chat_but_is_poison_from_the_webhook() {
        let body =
            br#"{"update_id":-7,"tgq_timer":{"chat":{"id":42},"key":"k","due":1,"payload":null}}"#;
        let queued = Envelope::parse_queued(body).unwrap();
        assert_eq!(
            (queued.kind.as_str(), queued.group.as_str()),
            (TIMER_KIND, "42")
        );
        assert_eq!(queued.update_id, UpdateId(-7));
        assert_eq!(Envelope::parse(body).unwrap_err(), Poison::NotFromTelegram);
    }

    #[test]
    fn poison_reasons_never_quote_the_body() {
        let reason = Envelope::parse(b"{\"update_id\": 1, \"text\": \"secret words").unwrap_err();
        assert!(!reason.to_string().contains("secret"), "{reason}");
    }
}
