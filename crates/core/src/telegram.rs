//! The Bot API as a port: one JSON call, and Telegram's failures as a domain error with a class.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::error::ErrorClass;

/// Calls Bot API methods. The HTTP adapter lives in `tgq-telegram`; local mode has an offline outbox.
#[async_trait]
pub trait BotApi: Send + Sync {
    /// Calls `method` with a JSON object of parameters and returns the answer's `result`.
    async fn call(&self, method: &str, params: &Value) -> Result<Value, TelegramError>;
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
    /// The connection failed.
    #[error("network error talking to Telegram: {0}")]
    Network(String),
    /// An answer that is not Telegram's envelope (a proxy's error page, a truncated body).
    #[error("unreadable answer from Telegram (HTTP {status})")]
    InvalidResponse {
        /// The HTTP status of the unreadable answer.
        status: u16,
    },
}

impl TelegramError {
    /// Transient: network, timeouts, 408, 429, 5xx; permanent: other 4xx (400, 401, 403, 404, …).
    pub fn class(&self) -> ErrorClass {
        match self {
            TelegramError::RetryAfter(wait) => ErrorClass::RateLimited(*wait),
            TelegramError::Timeout | TelegramError::Network(_) => ErrorClass::Transient,
            TelegramError::InvalidResponse { status } if *status >= 400 && *status < 500 => {
                ErrorClass::Permanent
            }
            TelegramError::InvalidResponse { .. } => ErrorClass::Transient,
            // A migration is followed once by the context; meeting it again means the chat is unusable.
            TelegramError::MigrateToChat(_) => ErrorClass::Permanent,
            TelegramError::Api {
                code: 408 | 429, ..
            } => ErrorClass::Transient,
            TelegramError::Api { code, .. } if *code >= 500 => ErrorClass::Transient,
            TelegramError::Api { .. } => ErrorClass::Permanent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> TelegramError {
        TelegramError::Api {
            code,
            description: String::new(),
        }
    }

    #[test]
    fn telegram_failures_are_classified_as_design_section_4_says() {
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
        ] {
            assert_eq!(transient.class(), ErrorClass::Transient, "{transient:?}");
        }
        for permanent in [
            api(400),
            api(401),
            api(403),
            api(404),
            TelegramError::MigrateToChat(-100),
        ] {
            assert_eq!(permanent.class(), ErrorClass::Permanent, "{permanent:?}");
        }
    }
}
