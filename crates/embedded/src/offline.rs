//! The offline Bot API of `tgq local` without a token: every call lands in the store's outbox, and
//! the handler gets the answer Telegram would have given.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tgq_core::ingest::error_chain;
use tgq_core::telegram::{BotApi, TelegramError};
use tgq_telegram::{chat_id_of, offline_result};

use crate::schema::StoredOutboxEntry;
use crate::EmbeddedStore;

/// A [`BotApi`] that appends each call durably to the outbox (`tgq outbox` lists it) and answers
/// like Telegram: a message for the sending methods, `true` for the rest.
pub struct OfflineBotApi {
    store: Arc<EmbeddedStore>,
}

impl OfflineBotApi {
    /// An offline Bot API writing to this store's outbox.
    pub fn new(store: Arc<EmbeddedStore>) -> Self {
        Self { store }
    }

    /// Like [`BotApi::call`], recording which update's handler made the call and its position in
    /// the run, for callers that know them (a Bot API call itself does not say).
    pub async fn call_for(
        &self,
        update_id: Option<i64>,
        seq: Option<u32>,
        method: &str,
        params: &Value,
    ) -> Result<Value, TelegramError> {
        let at = self.store.clock.now();
        let entry = StoredOutboxEntry {
            chat_id: params.get("chat_id").and_then(chat_id_of),
            update_id,
            seq,
            method: method.to_owned(),
            text: params
                .get("text")
                .and_then(Value::as_str)
                .map(str::to_owned),
            params: params.clone(),
            at: at.0,
        };
        let id = self
            .store
            .writer
            .run("outbox append", move |tx| tx.append_outbox(&entry))
            .await
            // Transient, so the handler run is retried rather than the update lost.
            .map_err(|e| TelegramError::Network(error_chain(&e)))?;
        let message_id = i64::try_from(id).unwrap_or(i64::MAX);
        let unix_time = i64::try_from(at.as_secs()).unwrap_or(i64::MAX);
        Ok(offline_result(method, params, message_id, unix_time))
    }
}

#[async_trait]
impl BotApi for OfflineBotApi {
    async fn call(&self, method: &str, params: &Value) -> Result<Value, TelegramError> {
        self.call_for(None, None, method, params).await
    }
}
