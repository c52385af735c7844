//! Telegram's Bot API for tgq: the HTTP adapter of [`BotApi`], typed calls over any [`BotApi`], and the
//! answers an offline outbox gives in Telegram's place.
//!
//! Requests and results are teloxide-core's typed payloads and types. The HTTP exchange is done here
//! rather than through teloxide's `Bot` because its `RequestError` drops Telegram's `error_code`, and the
//! code is what separates a retryable 5xx from a permanent 4xx.

use std::time::Duration;

use async_trait::async_trait;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use teloxide_core::requests::Payload;
use teloxide_core::types::ResponseParameters;
use tgq_core::telegram::{BotApi, TelegramError};

/// Calls the Bot API over HTTPS (or HTTP, for a local fake) at a configurable base URL.
#[derive(Clone)]
pub struct HttpBotApi {
    client: reqwest::Client,
    base_url: String,
    token: SecretString,
}

impl std::fmt::Debug for HttpBotApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpBotApi")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// Why the HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("the HTTP client for Telegram could not be built")]
pub struct ClientError(#[source] reqwest::Error);

impl HttpBotApi {
    /// A client for `base_url` (e.g. `https://api.telegram.org`) with a per-call timeout.
    pub fn new(
        base_url: &str,
        token: SecretString,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .build()
            .map_err(ClientError)?;
        Ok(Self {
            client,
            base_url: base_url.trim_end_matches('/').to_owned(),
            token,
        })
    }
}

/// Telegram's answer envelope: `ok`, then either `result` or the error fields.
#[derive(Deserialize)]
struct Envelope {
    ok: bool,
    #[serde(default)]
    result: Value,
    error_code: Option<u16>,
    #[serde(default)]
    description: String,
    parameters: Option<ResponseParameters>,
}

#[async_trait]
impl BotApi for HttpBotApi {
    async fn call(&self, method: &str, params: &Value) -> Result<Value, TelegramError> {
        // The token is part of the path: no error below may carry the URL.
        let url = format!(
            "{}/bot{}/{method}",
            self.base_url,
            self.token.expose_secret()
        );
        let response = self
            .client
            .post(url)
            .json(params)
            .send()
            .await
            .map_err(transport_error)?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(transport_error)?;
        let envelope: Envelope =
            serde_json::from_slice(&body).map_err(|_| TelegramError::InvalidResponse { status })?;
        if envelope.ok {
            return Ok(envelope.result);
        }
        Err(match envelope.parameters {
            Some(ResponseParameters::RetryAfter(wait)) => {
                TelegramError::RetryAfter(wait.duration())
            }
            Some(ResponseParameters::MigrateToChatId(chat)) => TelegramError::MigrateToChat(chat.0),
            None => TelegramError::Api {
                code: envelope.error_code.unwrap_or(status),
                description: envelope.description,
            },
        })
    }
}

fn transport_error(error: reqwest::Error) -> TelegramError {
    if error.is_timeout() {
        return TelegramError::Timeout;
    }
    TelegramError::Network(tgq_core::ingest::error_chain(&error.without_url()))
}

/// Calls a typed teloxide-core payload over any [`BotApi`]; for operations that are not a handler's
/// outbound actions (getUpdates, setWebhook, getWebhookInfo, …).
pub async fn call<P>(api: &dyn BotApi, payload: &P) -> Result<P::Output, TelegramError>
where
    P: Payload + Serialize,
    P::Output: DeserializeOwned,
{
    let params = serde_json::to_value(payload)
        .map_err(|e| TelegramError::Network(format!("payload does not serialize: {e}")))?;
    let result = api
        .call(&tgq_core::telegram::method_name(P::NAME), &params)
        .await?;
    serde_json::from_value(result).map_err(|_| TelegramError::InvalidResponse { status: 200 })
}

/// The `result` Telegram would give for a call an offline outbox accepted: a sent message for the
/// sending methods, `true` for the rest. `message_id` is the outbox's id for the message.
pub fn offline_result(method: &str, params: &Value, message_id: i64, unix_time: i64) -> Value {
    let sends_a_message = matches!(
        method,
        "sendMessage"
            | "editMessageText"
            | "sendPhoto"
            | "sendDocument"
            | "sendSticker"
            | "sendLocation"
            | "sendPoll"
            | "sendDice"
    );
    if !sends_a_message {
        return Value::Bool(true);
    }
    let chat_id = params.get("chat_id").and_then(chat_id_of).unwrap_or(0);
    let chat = if chat_id > 0 {
        json!({"id": chat_id, "type": "private", "first_name": "offline"})
    } else {
        json!({"id": chat_id, "type": "supergroup", "title": "offline"})
    };
    let mut message = json!({
        "message_id": params.get("message_id").and_then(Value::as_i64).unwrap_or(message_id),
        "date": unix_time,
        "chat": chat,
        "from": {"id": 1, "is_bot": true, "first_name": "tgq", "username": "tgq_offline_bot"},
    });
    for field in ["text", "reply_markup"] {
        if let Some(value) = params.get(field) {
            message[field] = value.clone();
        }
    }
    message
}

/// A chat id given as a number or as a string of digits (`@username` has none).
pub fn chat_id_of(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teloxide_core::types::Message;

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

    #[test]
    fn debug_output_never_shows_the_token() {
        let api = HttpBotApi::new(
            "http://127.0.0.1:1",
            SecretString::from("123:SECRET".to_owned()),
            Duration::from_secs(1),
        )
        .unwrap();
        assert!(!format!("{api:?}").contains("SECRET"));
    }
}
