//! A Bot API that records calls and answers like Telegram, or with scripted failures.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;
use tgq_core::telegram::{offline_result, ApiCall, BotApi, CallError, TelegramError};

/// One call the recording Bot API took.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedCall {
    /// The method.
    pub method: String,
    /// The parameters.
    pub params: Value,
}

/// What the next call meets.
#[derive(Clone, Debug)]
enum Scripted {
    /// Refused with this error: it did not take effect.
    Fail(TelegramError),
    /// Taken, but the answer is lost: the caller sees a timeout.
    LoseAnswer,
}

/// A Bot API that records every call it takes and answers like Telegram, or with scripted failures.
#[derive(Default)]
pub struct RecordingBotApi {
    calls: Mutex<Vec<RecordedCall>>,
    script: Mutex<VecDeque<Scripted>>,
    next_message_id: AtomicU64,
    unpaced: bool,
}

impl RecordingBotApi {
    /// A Bot API that answers every call successfully.
    pub fn new() -> Self {
        Self::default()
    }

    /// As [`RecordingBotApi::new`], for a Bot API nobody reads at Telegram's pace (as the offline
    /// outbox): its sends are not held to Telegram's limits.
    pub fn unpaced() -> Self {
        Self {
            unpaced: true,
            ..Self::default()
        }
    }

    /// Makes the next calls fail with these errors, one each, in order; a failed call is not taken.
    pub fn fail_next(&self, errors: impl IntoIterator<Item = TelegramError>) {
        self.script
            .lock()
            .extend(errors.into_iter().map(Scripted::Fail));
    }

    /// Makes the next call take effect but lose its answer: the caller sees a timeout.
    pub fn lose_next_answer(&self) {
        self.script.lock().push_back(Scripted::LoseAnswer);
    }

    /// Every call that was taken, in order.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.calls.lock().clone()
    }

    /// The text of every `sendMessage` taken, in order.
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
    async fn call(&self, call: &ApiCall<'_>) -> Result<Value, CallError> {
        let scripted = self.script.lock().pop_front();
        if let Some(Scripted::Fail(error)) = scripted {
            return Err(error.into());
        }
        let id = i64::try_from(self.next_message_id.fetch_add(1, Ordering::SeqCst) + 1)
            .unwrap_or(i64::MAX);
        self.calls.lock().push(RecordedCall {
            method: call.method.to_owned(),
            params: call.params.clone(),
        });
        if let Some(Scripted::LoseAnswer) = scripted {
            return Err(TelegramError::Timeout.into());
        }
        Ok(offline_result(call.method, call.params, id, 0))
    }

    fn paced(&self) -> bool {
        !self.unpaced
    }
}
