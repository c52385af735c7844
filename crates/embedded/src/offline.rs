//! The offline Bot API of `tgq local` without a token: every call lands in the store's outbox, and
//! the handler gets the answer Telegram would have given. A handler's action and its outcome are
//! one commit, so an offline action's outcome is never unknown.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tgq_core::record::{ActionIntent, ActionOutcome, ActionResult, ActionState};
use tgq_core::telegram::{chat_id_of, offline_result, ApiCall, BotApi, CallError};

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
}

#[async_trait]
impl BotApi for OfflineBotApi {
    async fn call(&self, call: &ApiCall<'_>) -> Result<Value, CallError> {
        let at = self.store.clock.now();
        let method = call.method.to_owned();
        let mut params = call.params.clone();
        // What was uploaded is kept by name, size and hash, not its bytes.
        if !call.files.is_empty() {
            let uploads: Vec<Value> = call.files.iter().map(|f| f.describe()).collect();
            params["uploads"] = Value::Array(uploads);
        }
        let action = call.action.map(|a| {
            let intent = ActionIntent {
                seq: a.seq,
                method: call.method.to_owned(),
                delivery: a.delivery,
            };
            (a.lease.clone(), intent)
        });
        let result = self
            .store
            .writer
            .run("outbox append", move |tx| {
                let id = tx.next_in(crate::schema::seq::OUTBOX)?;
                let message_id = i64::try_from(id).unwrap_or(i64::MAX);
                let unix_time = i64::try_from(at.as_secs()).unwrap_or(i64::MAX);
                let result = offline_result(&method, &params, message_id, unix_time);
                if let Some((lease, intent)) = &action {
                    // Fenced like every write of the run: a stale run sends nothing. The intent
                    // and its outcome are written together (no separate intent commit before).
                    let outcome = ActionOutcome {
                        seq: intent.seq,
                        state: ActionState::Succeeded(ActionResult::of(&result)),
                    };
                    tx.write_run(lease, &[], "outbox append", |record| {
                        record.note_intent(intent);
                        record.note_outcome(&outcome);
                    })?;
                }
                let entry = StoredOutboxEntry {
                    bot_id: action
                        .as_ref()
                        .map(|(lease, _)| lease.key.bot_id.to_string()),
                    chat_id: params.get("chat_id").and_then(chat_id_of),
                    update_id: action.as_ref().map(|(lease, _)| lease.key.update_id.0),
                    seq: action.as_ref().map(|(_, intent)| intent.seq),
                    method,
                    text: params
                        .get("text")
                        .or_else(|| params.get("caption"))
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    params,
                    at: at.0,
                };
                tx.append_outbox(id, &entry)?;
                Ok(result)
            })
            .await?;
        Ok(result)
    }

    fn records_outcomes(&self) -> bool {
        true
    }

    /// The outbox is read by whoever runs `tgq local`, not by Telegram: replies land at once.
    fn paced(&self) -> bool {
        false
    }
}
