//! The Bot API as a port: one JSON call, Telegram's failures as a domain error with a class, and
//! the answers an offline outbox (or a replay) gives in Telegram's place.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::error::{ErrorClass, PortError};
pub use crate::offline::{chat_id_of, offline_message, offline_result, sends_a_message};
use crate::ports::Lease;
use crate::record::Delivery;
pub use crate::upload::Upload;

/// One Bot API call, and — when a handler's context makes it — the action it is.
#[derive(Clone, Copy, Debug)]
pub struct ApiCall<'a> {
    /// The method, e.g. `sendMessage`.
    pub method: &'a str,
    /// A JSON object of parameters.
    pub params: &'a Value,
    /// Which run and which of its actions made the call; `None` for calls outside a run.
    pub action: Option<ActionRef<'a>>,
    /// The files it uploads, each named in `params` by `attach://NAME`; none for a JSON call.
    pub files: &'a [Upload],
}

impl<'a> ApiCall<'a> {
    /// A call that is not a handler's action (getUpdates, setWebhook, …).
    pub fn plain(method: &'a str, params: &'a Value) -> Self {
        Self {
            method,
            params,
            action: None,
            files: &[],
        }
    }
}

/// The run and position of an action.
#[derive(Clone, Copy, Debug)]
pub struct ActionRef<'a> {
    /// The run's lease on its update.
    pub lease: &'a Lease,
    /// The action's position in the run.
    pub seq: u32,
    /// Whether the action may be made again when its outcome is unknown; a Bot API that records
    /// outcomes itself records the intent with it.
    pub delivery: Delivery,
}

/// Calls Bot API methods. The HTTP adapter lives in `tgq-telegram`; local mode has an offline outbox.
#[async_trait]
pub trait BotApi: Send + Sync {
    /// Calls a method and returns the answer's `result`.
    async fn call(&self, call: &ApiCall<'_>) -> Result<Value, CallError>;

    /// Whether this Bot API records an action itself — intent and outcome — in the same durable
    /// write as the send (the offline outbox): then no action's outcome is ever unknown, and the
    /// context writes neither a separate intent before the call nor the outcome after it.
    fn records_outcomes(&self) -> bool {
        false
    }

    /// Downloads the file Telegram keeps at `file_path` (what `getFile` answered), refusing one of
    /// more than `limit` bytes. The offline outbox keeps no files.
    async fn download(&self, file_path: &str, limit: u64) -> Result<bytes::Bytes, TelegramError> {
        let _ = (file_path, limit);
        Err(TelegramError::Api {
            code: 404,
            description: "Not Found: this Bot API keeps no files to download".into(),
        })
    }

    /// Whether its sends are held to Telegram's limits (`TGQ_RATE_*`, flood waits). Telegram's
    /// and a fake Bot API's are; the offline outbox, which nobody reads at Telegram's pace, is not.
    fn paced(&self) -> bool {
        true
    }
}

/// Why a call failed: Telegram's answer, or — for a Bot API that records outcomes itself — the
/// store's.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Telegram (or the way to it) failed the call.
    #[error(transparent)]
    Telegram(#[from] TelegramError),
    /// The store refused to record the call (its lease is gone, or it is down).
    #[error(transparent)]
    Store(#[from] PortError),
}

/// The Bot API spelling of a teloxide-core payload's name: `SendMessage` → `sendMessage`.
pub fn method_name(payload_name: &str) -> String {
    let mut chars = payload_name.chars();
    match chars.next() {
        Some(first) => first.to_ascii_lowercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

/// Why a Bot API call failed, as far as retrying is concerned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TelegramError {
    /// 429 with `parameters.retry_after`: flood control names the wait.
    #[error("rate limited by Telegram: retry after {}s", .0.as_secs())]
    RetryAfter(Duration),
    /// The group was upgraded to a supergroup with this id.
    #[error("chat migrated to {0}")]
    MigrateToChat(i64),
    /// Any other `ok: false` answer.
    #[error("Telegram answered {code}: {description}")]
    Api {
        /// `error_code` (the HTTP status).
        code: u16,
        /// Telegram's `description`, e.g. `Forbidden: bot was blocked by the user`.
        description: String,
    },
    /// No answer in time.
    #[error("Telegram did not answer in time")]
    Timeout,
    /// The connection failed after the request may have been written (reset mid-answer, a body
    /// cut short): the call may have reached Telegram.
    #[error("network error talking to Telegram: {0}")]
    Network(String),
    /// The request never left: the connection was refused, the name did not resolve, the TLS
    /// handshake failed, or no connection came in time. Telegram never saw the call.
    #[error("Telegram could not be reached: {0}")]
    NotSent(String),
    /// An answer that is not Telegram's envelope (a proxy's error page, a truncated body).
    #[error("unreadable answer from Telegram (HTTP {status})")]
    InvalidResponse {
        /// The HTTP status of the unreadable answer.
        status: u16,
    },
}

impl TelegramError {
    /// Transient: network, timeouts, 408, 429, 5xx (with Telegram's JSON or without); permanent: the
    /// other 4xx (400, 401, 403, 404, …).
    pub fn class(&self) -> ErrorClass {
        match self {
            TelegramError::RetryAfter(wait) => ErrorClass::RateLimited(*wait),
            TelegramError::Timeout | TelegramError::Network(_) | TelegramError::NotSent(_) => {
                ErrorClass::Transient
            }
            // A migration is followed once by the context; meeting it again means the chat is unusable.
            TelegramError::MigrateToChat(_) => ErrorClass::Permanent,
            TelegramError::Api { code, .. } | TelegramError::InvalidResponse { status: code } => {
                match code {
                    // A 429 whose wait cannot be read is retried with the usual backoff.
                    408 | 429 => ErrorClass::Transient,
                    400..=499 => ErrorClass::Permanent,
                    // 5xx, and a 2xx or 3xx whose answer could not be read.
                    _ => ErrorClass::Transient,
                }
            }
        }
    }

    /// Whether the call certainly did not take effect: an error answer from Telegram, any 4xx, an
    /// edge's 500, 502 or 503 (it answered that it did not get the call through), or a request
    /// that never left. A timeout, a connection cut after the request was written, or another
    /// unreadable answer (a 504: the edge gave up waiting while Telegram may have acted) leave the
    /// outcome unknown: the call may have reached Telegram.
    pub fn is_definite(&self) -> bool {
        match self {
            TelegramError::RetryAfter(_)
            | TelegramError::MigrateToChat(_)
            | TelegramError::Api { .. }
            | TelegramError::NotSent(_) => true,
            TelegramError::InvalidResponse { status } => {
                (400..500).contains(status) || (500..=503).contains(status)
            }
            TelegramError::Timeout | TelegramError::Network(_) => false,
        }
    }

    /// Whether Telegram (or its edge) did not take the call for a passing reason of its own: the
    /// request never left, or the answer was a 5xx other than a gateway's timeout. Not done and
    /// worth trying again, it says nothing of the call's recipient or its message.
    pub fn is_outage(&self) -> bool {
        match self {
            TelegramError::NotSent(_) => true,
            TelegramError::Api { code, .. } => (500..600).contains(code),
            TelegramError::InvalidResponse { status } => (500..=503).contains(status),
            _ => false,
        }
    }

    /// The HTTP status and description to record for a definite failure.
    pub(crate) fn code_and_description(&self) -> (u16, String) {
        match self {
            TelegramError::RetryAfter(_) => (429, self.to_string()),
            TelegramError::MigrateToChat(_) => (400, self.to_string()),
            TelegramError::Api { code, description } => (*code, description.clone()),
            TelegramError::InvalidResponse { status } => (*status, self.to_string()),
            TelegramError::Timeout | TelegramError::Network(_) | TelegramError::NotSent(_) => {
                (0, self.to_string())
            }
        }
    }

    /// Whether the answer says the call's recipient is gone for good: the user blocked the bot or
    /// deleted their account, or the private chat no longer exists. `chat_id` is the chat the call
    /// addressed: "chat not found" means a departed user only for a private chat (a positive id);
    /// for a group or channel it is more likely a mistake worth a dead letter. The one place this
    /// is decided (docs/design/worker.md §1).
    pub(crate) fn recipient_gone(&self, chat_id: Option<i64>) -> Option<Gone> {
        let TelegramError::Api { code, description } = self else {
            return None;
        };
        let description = description.to_ascii_lowercase();
        let private_chat = chat_id.is_some_and(|id| id > 0);
        match code {
            403 if description.contains("bot was blocked by the user") => Some(Gone::BlockedTheBot),
            403 if description.contains("user is deactivated") => Some(Gone::Deactivated),
            400 if private_chat && description.contains("chat not found") => {
                Some(Gone::PrivateChatNotFound)
            }
            _ => None,
        }
    }

    /// Whether this answer to a call sent again after an unknown outcome proves that the first send
    /// took effect: the edit is already there, the message already deleted, the button already
    /// answered.
    pub(crate) fn proves_earlier_send(&self, method: &str) -> bool {
        let TelegramError::Api {
            code: 400,
            description,
        } = self
        else {
            return false;
        };
        let description = description.to_ascii_lowercase();
        let proof = match method {
            m if m.starts_with("editMessage") => "message is not modified",
            "deleteMessage" => "message to delete not found",
            "answerCallbackQuery" => "query is too old",
            _ => return false,
        };
        description.contains(proof)
    }
}

/// Why a call's recipient can no longer be reached: the user left, which is nobody's failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Gone {
    /// 403 `Forbidden: bot was blocked by the user`.
    BlockedTheBot,
    /// 403 `Forbidden: user is deactivated`: the account was deleted.
    Deactivated,
    /// 400 `Bad Request: chat not found` for a private chat.
    PrivateChatNotFound,
}

impl Gone {
    /// The logged name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Gone::BlockedTheBot => "blocked_the_bot",
            Gone::Deactivated => "deactivated",
            Gone::PrivateChatNotFound => "private_chat_not_found",
        }
    }
}

impl std::fmt::Display for Gone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use teloxide_core::types::Message;

    fn api(code: u16) -> TelegramError {
        TelegramError::Api {
            code,
            description: String::new(),
        }
    }

    #[test]
    fn telegram_failures_are_classified_as_telegram_means_them() {
        assert_eq!(
            TelegramError::RetryAfter(Duration::from_secs(7)).class(),
            ErrorClass::RateLimited(Duration::from_secs(7))
        );
        for transient in [
            api(408),
            api(429),
            api(500),
            api(502),
            api(503),
            TelegramError::Timeout,
            TelegramError::Network("reset".into()),
            TelegramError::InvalidResponse { status: 502 },
            TelegramError::InvalidResponse { status: 429 },
            TelegramError::InvalidResponse { status: 408 },
            TelegramError::InvalidResponse { status: 200 },
        ] {
            assert_eq!(transient.class(), ErrorClass::Transient, "{transient:?}");
        }
        for permanent in [
            api(400),
            api(401),
            api(403),
            api(404),
            TelegramError::InvalidResponse { status: 404 },
            TelegramError::MigrateToChat(-100),
        ] {
            assert_eq!(permanent.class(), ErrorClass::Permanent, "{permanent:?}");
        }
    }

    #[test]
    fn only_timeouts_network_errors_and_unreadable_answers_leave_the_outcome_unknown() {
        for definite in [
            api(400),
            api(500),
            TelegramError::RetryAfter(Duration::from_secs(1)),
            TelegramError::InvalidResponse { status: 403 },
            TelegramError::InvalidResponse { status: 502 },
            TelegramError::NotSent("connection refused".into()),
        ] {
            assert!(definite.is_definite(), "{definite:?}");
        }
        for unknown in [
            TelegramError::Timeout,
            TelegramError::Network("reset".into()),
            TelegramError::InvalidResponse { status: 504 },
            TelegramError::InvalidResponse { status: 200 },
        ] {
            assert!(!unknown.is_definite(), "{unknown:?}");
        }
    }

    #[test]
    fn errors_that_prove_an_earlier_send_took_effect_are_recognised() {
        let bad = |d: &str| TelegramError::Api {
            code: 400,
            description: d.into(),
        };
        assert!(
            bad("Bad Request: message is not modified: specified new message content")
                .proves_earlier_send("editMessageText")
        );
        assert!(
            bad("Bad Request: message to delete not found").proves_earlier_send("deleteMessage")
        );
        assert!(
            bad("Bad Request: query is too old and response timeout expired")
                .proves_earlier_send("answerCallbackQuery")
        );
        assert!(!bad("Bad Request: chat not found").proves_earlier_send("sendMessage"));
        assert!(!bad("Bad Request: query is too old").proves_earlier_send("sendMessage"));
    }

    #[test]
    fn a_user_who_blocked_the_bot_or_left_is_a_gone_recipient_and_nothing_else_is() {
        let answer = |code: u16, d: &str| TelegramError::Api {
            code,
            description: d.into(),
        };
        let user = Some(42);
        let group = Some(-100_123);
        assert_eq!(
            answer(403, "Forbidden: bot was blocked by the user").recipient_gone(user),
            Some(Gone::BlockedTheBot)
        );
        assert_eq!(
            answer(403, "Forbidden: user is deactivated").recipient_gone(user),
            Some(Gone::Deactivated)
        );
        assert_eq!(
            answer(400, "Bad Request: chat not found").recipient_gone(user),
            Some(Gone::PrivateChatNotFound)
        );
        for (error, chat) in [
            // A group or channel that is not found is more likely a wrong id: a dead letter.
            (answer(400, "Bad Request: chat not found"), group),
            (answer(400, "Bad Request: chat not found"), None),
            (
                answer(403, "Forbidden: bot was kicked from the group chat"),
                group,
            ),
            (
                answer(
                    403,
                    "Forbidden: bot can't initiate conversation with a user",
                ),
                user,
            ),
            (answer(400, "Bad Request: message text is empty"), user),
            (answer(401, "Unauthorized"), user),
            (TelegramError::Timeout, user),
            (TelegramError::InvalidResponse { status: 403 }, user),
        ] {
            assert_eq!(error.recipient_gone(chat), None, "{error:?} to {chat:?}");
        }
    }

    #[test]
    fn offline_results_decode_as_teloxide_messages() {
        let params = json!({"chat_id": 42, "text": "hi", "reply_markup": {"inline_keyboard": [[{"text": "a", "callback_data": "b"}]]}});
        let message: Message =
            serde_json::from_value(offline_result("sendMessage", &params, 7, 1_700_000_000))
                .unwrap();
        assert_eq!(message.id.0, 7);
        assert_eq!(message.chat.id.0, 42);
        assert_eq!(message.text(), Some("hi"));
        assert!(message.reply_markup().is_some());
        assert_eq!(
            offline_result("answerCallbackQuery", &json!({}), 1, 0),
            Value::Bool(true)
        );
    }
}
