//! Offline mode: tells the outbox which update, and which action of its run, each send belongs to.
//!
//! A Bot API call does not carry that. But a worker loop runs one record at a time, and the worker
//! claims a record before running its handler and records each new action's intent just before
//! sending it. So each loop gets its own watched ledger and outbox sharing one [`Attribution`]: the
//! ledger notes what was claimed and intended, the outbox reads it when the send arrives.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::Value;
use tgq_core::ids::RecordKey;
use tgq_core::ports::{Claim, ClaimRequest, Settlement, UpdateLedger};
use tgq_core::record::ActionIntent;
use tgq_core::telegram::{BotApi, TelegramError};
use tgq_core::PortError;
use tgq_embedded::{EmbeddedStore, OfflineBotApi};

/// A ledger and an offline Bot API for one worker loop, attributing each send to its update and
/// sequence number.
pub fn offline_ports(store: &Arc<EmbeddedStore>) -> (Arc<dyn UpdateLedger>, Arc<dyn BotApi>) {
    let attribution = Arc::new(Attribution::default());
    let ledger = WatchedLedger {
        store: store.clone(),
        attribution: attribution.clone(),
    };
    let outbox = AttributedOutbox {
        outbox: OfflineBotApi::new(store.clone()),
        attribution,
    };
    (Arc::new(ledger), Arc::new(outbox))
}

/// What the loop's current handler run is sending for.
#[derive(Debug, Default)]
struct Attribution(Mutex<Current>);

#[derive(Debug, Default)]
struct Current {
    /// The claimed update.
    update_id: Option<i64>,
    /// The action whose intent was just recorded: the next send is that action.
    intent: Option<u32>,
    /// Actions an earlier run intended without a recorded result, by sequence: the handler sends
    /// these again without recording a new intent.
    unresolved: Vec<(u32, String)>,
}

impl Attribution {
    fn with<T>(&self, f: impl FnOnce(&mut Current) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The update and sequence number of a send of `method`, as far as they are known.
    fn take(&self, method: &str) -> (Option<i64>, Option<u32>) {
        self.with(|current| {
            let seq = current.intent.take().or_else(|| {
                let at = current.unresolved.iter().position(|(_, m)| m == method)?;
                Some(current.unresolved.remove(at).0)
            });
            (current.update_id, seq)
        })
    }
}

/// The store's ledger, noting claims and intents for the outbox.
struct WatchedLedger {
    store: Arc<EmbeddedStore>,
    attribution: Arc<Attribution>,
}

#[async_trait]
impl UpdateLedger for WatchedLedger {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, PortError> {
        let claim = self.store.claim(request).await;
        self.attribution.with(|current| {
            *current = match &claim {
                Ok(Claim::Run(claimed)) => Current {
                    update_id: Some(request.key.update_id.0),
                    intent: None,
                    unresolved: claimed
                        .actions
                        .iter()
                        .filter(|(_, action)| action.result.is_none() && !action.at_most_once)
                        .map(|(seq, action)| (*seq, action.method.clone()))
                        .collect(),
                },
                _ => Current::default(),
            }
        });
        claim
    }

    async fn record_intent(&self, key: &RecordKey, intent: &ActionIntent) -> Result<(), PortError> {
        self.store.record_intent(key, intent).await?;
        self.attribution
            .with(|current| current.intent = Some(intent.seq));
        Ok(())
    }

    async fn record_result(
        &self,
        key: &RecordKey,
        seq: u32,
        result: &str,
    ) -> Result<(), PortError> {
        self.store.record_result(key, seq, result).await
    }

    async fn settle(&self, key: &RecordKey, outcome: &Settlement) -> Result<(), PortError> {
        self.attribution
            .with(|current| *current = Current::default());
        self.store.settle(key, outcome).await
    }
}

/// The offline outbox, told which update and action each send belongs to.
struct AttributedOutbox {
    outbox: OfflineBotApi,
    attribution: Arc<Attribution>,
}

#[async_trait]
impl BotApi for AttributedOutbox {
    async fn call(&self, method: &str, params: &Value) -> Result<Value, TelegramError> {
        let (update_id, seq) = self.attribution.take(method);
        self.outbox.call_for(update_id, seq, method, params).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_after_an_intent_is_that_action_and_a_resend_takes_its_earlier_sequence() {
        let attribution = Attribution::default();
        attribution.with(|current| {
            *current = Current {
                update_id: Some(500),
                intent: None,
                unresolved: vec![(1, "sendMessage".into())],
            }
        });
        assert_eq!(attribution.take("sendMessage"), (Some(500), Some(1)));
        attribution.with(|current| current.intent = Some(2));
        assert_eq!(
            attribution.take("answerCallbackQuery"),
            (Some(500), Some(2))
        );
        assert_eq!(attribution.take("sendMessage"), (Some(500), None));
    }
}
