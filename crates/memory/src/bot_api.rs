//! A Bot API that records calls and answers like Telegram, or with scripted failures.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;
use tgq_core::telegram::{BotApi, TelegramError};

/// One call the recording Bot API received.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiCall {
    /// The method.
    pub method: String,
    /// The parameters.
    pub params: Value,
}

/// A Bot API that records every call and answers like Telegram, or with scripted failures.
#[derive(Default)]
pub struct RecordingBotApi {
    calls: Mutex<Vec<ApiCall>>,
    failures: Mutex<VecDeque<TelegramError>>,
    next_message_id: AtomicU64,
}

impl RecordingBotApi {
    /// A Bot API that answers every call successfully.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next calls fail with these errors, one each, in order.
    pub fn fail_next(&self, errors: impl IntoIterator<Item = TelegramError>) {
        self.failures.lock().extend(errors);
    }

    /// Every call that was answered successfully, in order.
    pub fn calls(&self) -> Vec<ApiCall> {
        self.calls.lock().clone()
    }

    /// The text of every successful `sendMessage`, in order.
    pub fn sent_texts(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == "sendMessage")
            .filter_map(|c| {
                c.params
                    .get("text")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect()
    }
}

#[async_trait]
impl BotApi for RecordingBotApi {
    async fn call(&self, method: &str, params: &Value) -> Result<Value, TelegramError> {
        if let Some(error) = self.failures.lock().pop_front() {
            return Err(error);
        }
        let id = i64::try_from(self.next_message_id.fetch_add(1, Ordering::SeqCst) + 1)
            .unwrap_or(i64::MAX);
        self.calls.lock().push(ApiCall {
            method: method.to_owned(),
            params: params.clone(),
        });
        Ok(tgq_telegram::offline_result(method, params, id, 0))
    }
}
