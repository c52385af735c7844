//! The Bot API a [`TestBot`](crate::TestBot)'s bot talks to: it takes every call as Telegram would,
//! keeps what was sent, and fails the calls a test names.

use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;
use tgq_core::offline::{chat_id_of, offline_result};
use tgq_core::telegram::{ApiCall, BotApi, CallError, TelegramError};

/// One Bot API call the bot made and Telegram took.
#[derive(Clone, Debug, PartialEq)]
pub struct Sent {
    /// The method, e.g. `sendMessage`, `editMessageText`, `answerCallbackQuery`.
    pub method: String,
    /// The chat it went to, when it names one by number.
    pub chat: Option<i64>,
    /// The message it sent, or the one it edited.
    pub message_id: Option<i64>,
    /// Its text (or caption).
    pub text: Option<String>,
    /// The labels of its inline buttons, row by row.
    pub buttons: Vec<Vec<String>>,
    /// Its parameters, as sent.
    pub params: Value,
    /// The files it uploaded: `{"attach", "file_name", "size", "sha256"}` each.
    pub uploads: Vec<Value>,
}

impl Sent {
    /// Whether it changed a message already sent (`editMessage…`).
    pub fn is_edit(&self) -> bool {
        self.method.starts_with("editMessage")
    }

    /// The data of the button labelled `label`, as the bot wrote it.
    pub fn button_data(&self, label: &str) -> Option<&str> {
        let rows = self.params.get("reply_markup")?.get("inline_keyboard")?;
        rows.as_array()?
            .iter()
            .flat_map(|row| row.as_array().into_iter().flatten())
            .find(|button| button["text"].as_str() == Some(label))?
            .get("callback_data")?
            .as_str()
    }

    fn of(call: &ApiCall<'_>, result: &Value) -> Sent {
        let (method, params) = (call.method, call.params);
        let text = ["text", "caption"]
            .iter()
            .find_map(|field| params.get(*field).and_then(Value::as_str))
            .map(str::to_owned);
        let buttons = params
            .get("reply_markup")
            .and_then(|m| m.get("inline_keyboard"))
            .and_then(Value::as_array)
            .map(|rows| {
                rows.iter()
                    .map(|row| {
                        row.as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|b| b["text"].as_str().map(str::to_owned))
                            .collect()
                    })
                    .collect()
            })
            .unwrap_or_default();
        Sent {
            method: method.to_owned(),
            chat: params.get("chat_id").and_then(chat_id_of),
            message_id: result.get("message_id").and_then(Value::as_i64),
            text,
            buttons,
            params: params.clone(),
            uploads: call.files.iter().map(|f| f.describe()).collect(),
        }
    }
}

/// Which calls a failure meets: every criterion given must hold. `nth` counts the calls that meet
/// the others, from when the failure was set (1, the default: the next one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Call {
    method: Option<String>,
    chat: Option<i64>,
    nth: u32,
}

impl Call {
    /// Any call.
    pub fn any() -> Call {
        Call::default()
    }

    /// Calls of `method` (`sendMessage`, `answerCallbackQuery`, …).
    pub fn method(method: &str) -> Call {
        Call::any().and_method(method)
    }

    /// Calls to `chat`.
    pub fn to_chat(chat: i64) -> Call {
        Call::any().chat(chat)
    }

    /// … of `method` too.
    pub fn and_method(mut self, method: &str) -> Call {
        self.method = Some(method.to_owned());
        self
    }

    /// … to `chat` too.
    pub fn chat(mut self, chat: i64) -> Call {
        self.chat = Some(chat);
        self
    }

    /// … the `n`th of those (1 is the next).
    pub fn nth(mut self, n: u32) -> Call {
        self.nth = n.max(1);
        self
    }

    fn matches(&self, method: &str, params: &Value) -> bool {
        self.method.as_deref().is_none_or(|m| m == method)
            && self
                .chat
                .is_none_or(|c| params.get("chat_id").and_then(chat_id_of) == Some(c))
    }
}

/// What a failed call meets.
#[derive(Clone, Debug)]
pub enum Failure {
    /// Telegram refuses it with this error: it did not take effect.
    Refuse(TelegramError),
    /// Telegram takes it, but its answer is lost on the way back: the bot sees a timeout, and the
    /// call did take effect.
    LoseAnswer,
}

impl Failure {
    /// Refused with a Bot API error, e.g. `Failure::api(502, "Bad Gateway")`.
    pub fn api(code: u16, description: &str) -> Failure {
        Failure::Refuse(TelegramError::Api {
            code,
            description: description.to_owned(),
        })
    }

    /// Refused because the user blocked the bot (403).
    pub fn blocked() -> Failure {
        Failure::api(403, "Forbidden: bot was blocked by the user")
    }

    /// Refused by Telegram's flood control, to be retried after `seconds`.
    pub fn retry_after(seconds: u64) -> Failure {
        Failure::Refuse(TelegramError::RetryAfter(std::time::Duration::from_secs(
            seconds,
        )))
    }

    /// Refused because Telegram could not be reached.
    pub fn network() -> Failure {
        Failure::Refuse(TelegramError::NotSent("connection refused".into()))
    }
}

#[derive(Debug)]
struct Rule {
    call: Call,
    /// Matching calls still to let through before this one fails.
    skip: u32,
    failure: Failure,
}

/// The kit's Bot API.
#[derive(Debug, Default)]
pub(crate) struct KitApi {
    sent: Mutex<Vec<Sent>>,
    /// Files users sent, by file id.
    files: Mutex<std::collections::HashMap<String, bytes::Bytes>>,
    rules: Mutex<Vec<Rule>>,
    next_message_id: AtomicI64,
}

impl KitApi {
    pub(crate) fn fail(&self, call: Call, failure: Failure) {
        let skip = call.nth.max(1) - 1;
        self.rules.lock().push(Rule {
            call,
            skip,
            failure,
        });
    }

    pub(crate) fn put_file(&self, file_id: &str, bytes: bytes::Bytes) {
        self.files.lock().insert(file_id.to_owned(), bytes);
    }

    pub(crate) fn sent(&self) -> Vec<Sent> {
        self.sent.lock().clone()
    }

    pub(crate) fn sent_count(&self) -> usize {
        self.sent.lock().len()
    }

    /// The failure this call meets, if any; a rule is used up by the call it fails.
    fn failure_for(&self, method: &str, params: &Value) -> Option<Failure> {
        let mut rules = self.rules.lock();
        let mut fired = None;
        for (i, rule) in rules.iter_mut().enumerate() {
            if !rule.call.matches(method, params) {
                continue;
            }
            if rule.skip == 0 && fired.is_none() {
                fired = Some(i);
            } else {
                rule.skip = rule.skip.saturating_sub(1);
            }
        }
        fired.map(|i| rules.remove(i).failure)
    }
}

#[async_trait]
impl BotApi for KitApi {
    async fn call(&self, call: &ApiCall<'_>) -> Result<Value, CallError> {
        let failure = self.failure_for(call.method, call.params);
        if let Some(Failure::Refuse(error)) = failure {
            return Err(error.into());
        }
        // A read, not a send: answered from the files users sent, and not kept as sent.
        if call.method == "getFile" {
            let id = call.params["file_id"].as_str().unwrap_or_default();
            let size = self.files.lock().get(id).map(bytes::Bytes::len);
            return match size {
                Some(size) => Ok(serde_json::json!({
                    "file_id": id, "file_unique_id": id, "file_size": size, "file_path": id,
                })),
                None => Err(TelegramError::Api {
                    code: 400,
                    description: "Bad Request: invalid file_id".into(),
                }
                .into()),
            };
        }
        let id = self.next_message_id.fetch_add(1, Ordering::SeqCst) + 1;
        let result = offline_result(call.method, call.params, id, 1_800_000_000);
        self.sent.lock().push(Sent::of(call, &result));
        match failure {
            Some(Failure::LoseAnswer) => Err(TelegramError::Timeout.into()),
            _ => Ok(result),
        }
    }

    async fn download(&self, file_path: &str, limit: u64) -> Result<bytes::Bytes, TelegramError> {
        match self.files.lock().get(file_path) {
            Some(bytes) if bytes.len() as u64 <= limit => Ok(bytes.clone()),
            Some(_) => Err(TelegramError::Api {
                code: 400,
                description: format!("{file_path} is over {limit} bytes"),
            }),
            None => Err(TelegramError::Api {
                code: 404,
                description: "Not Found".into(),
            }),
        }
    }
}
