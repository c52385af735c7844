//! The handler's view of one update run: typed Bot API calls that are recorded so that a retry never
//! repeats a send that already happened (docs/ARCHITECTURE.md §5).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use teloxide_core::requests::Payload;
use tracing::warn;

use crate::error::HandlerError;
use crate::ids::{GroupKey, RecordKey};
use crate::ports::UpdateLedger;
use crate::record::{ActionIntent, ActionRecord};
use crate::telegram::{method_name, BotApi, TelegramError};

/// Lent to the handler for one run of one update.
pub struct Context<'a> {
    key: &'a RecordKey,
    group: &'a GroupKey,
    attempt: u32,
    recorded: &'a BTreeMap<u32, ActionRecord>,
    ledger: &'a dyn UpdateLedger,
    api: &'a dyn BotApi,
    next_seq: u32,
    uncertain: Vec<ActionIntent>,
    replayed: u32,
    resent: u32,
}

/// What a run's context saw, reported by the worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActionSummary {
    /// Actions answered from an earlier run's recorded result instead of being sent.
    pub replayed: u32,
    /// At-most-once actions whose outcome is unknown; not re-sent, to be reconciled.
    pub uncertain: Vec<ActionIntent>,
    /// At-least-once actions an earlier run recorded without a result, sent again: each may have
    /// reached Telegram twice.
    pub resent_after_unknown_outcome: u32,
}

impl<'a> Context<'a> {
    /// A context for run `attempt` of the update `key`, knowing the actions earlier runs recorded.
    pub fn new(
        key: &'a RecordKey,
        group: &'a GroupKey,
        attempt: u32,
        recorded: &'a BTreeMap<u32, ActionRecord>,
        ledger: &'a dyn UpdateLedger,
        api: &'a dyn BotApi,
    ) -> Self {
        Self {
            key,
            group,
            attempt,
            recorded,
            ledger,
            api,
            next_seq: 0,
            uncertain: Vec::new(),
            replayed: 0,
            resent: 0,
        }
    }

    /// The update being handled.
    pub fn key(&self) -> &RecordKey {
        self.key
    }

    /// The update's ordering group.
    pub fn group(&self) -> &GroupKey {
        self.group
    }

    /// Which run this is (1 on the first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Sends a Bot API request at least once: if an earlier run recorded its result, that result is
    /// returned without sending; if an earlier run recorded only the intent, it is sent again.
    pub async fn send<P>(&mut self, payload: P) -> Result<P::Output, HandlerError>
    where
        P: Payload + Serialize,
        P::Output: DeserializeOwned,
    {
        match self.act(payload, false).await? {
            Some(output) => Ok(output),
            None => unreachable_uncertain(),
        }
    }

    /// Sends a Bot API request at most once: if an earlier run recorded the intent but no result, the
    /// request is not sent again and `None` is returned; the action is reported as uncertain.
    pub async fn send_at_most_once<P>(
        &mut self,
        payload: P,
    ) -> Result<Option<P::Output>, HandlerError>
    where
        P: Payload + Serialize,
        P::Output: DeserializeOwned,
    {
        self.act(payload, true).await
    }

    /// What this run did, for the worker's report.
    pub fn summary(&self) -> ActionSummary {
        ActionSummary {
            replayed: self.replayed,
            uncertain: self.uncertain.clone(),
            resent_after_unknown_outcome: self.resent,
        }
    }

    async fn act<P>(
        &mut self,
        payload: P,
        at_most_once: bool,
    ) -> Result<Option<P::Output>, HandlerError>
    where
        P: Payload + Serialize,
        P::Output: DeserializeOwned,
    {
        self.next_seq += 1;
        let seq = self.next_seq;
        let method = method_name(P::NAME);
        let intent = ActionIntent {
            seq,
            method: method.clone(),
            at_most_once,
        };
        match self.recorded.get(&seq) {
            Some(earlier) if earlier.method != method => {
                // The handler took another path than last time; the earlier record says nothing about this call.
                warn!(seq, recorded = %earlier.method, now = %method, "handler actions differ from the earlier run");
            }
            Some(ActionRecord {
                result: Some(result),
                ..
            }) => {
                self.replayed += 1;
                return decode::<P::Output>(result).map(Some);
            }
            Some(_) if at_most_once => {
                warn!(
                    seq,
                    method = P::NAME,
                    "at-most-once action has an unknown outcome; not re-sent"
                );
                self.uncertain.push(intent);
                return Ok(None);
            }
            Some(_) => {
                // The earlier run may or may not have reached Telegram: at-least-once means sending again.
                warn!(
                    seq,
                    method = P::NAME,
                    "action has an unknown outcome; sending it again"
                );
                self.resent += 1;
            }
            None => self.ledger.record_intent(self.key, &intent).await?,
        }
        let params = serde_json::to_value(&payload).map_err(|e| {
            HandlerError::permanent(format!("{method} payload does not serialize: {e}"))
        })?;
        let result = self.call_following_migration(&method, params).await?;
        let text = result.to_string();
        self.ledger.record_result(self.key, seq, &text).await?;
        decode::<P::Output>(&text).map(Some)
    }

    /// A group upgraded to a supergroup answers with its new id: the call is repeated there, once.
    async fn call_following_migration(
        &self,
        method: &str,
        mut params: Value,
    ) -> Result<Value, TelegramError> {
        match self.api.call(method, &params).await {
            Err(TelegramError::MigrateToChat(new_chat)) if params.get("chat_id").is_some() => {
                warn!(method, "chat migrated to a supergroup; following once");
                params["chat_id"] = Value::from(new_chat);
                self.api.call(method, &params).await
            }
            other => other,
        }
    }
}

fn decode<T: DeserializeOwned>(result: &str) -> Result<T, HandlerError> {
    // Telegram accepted the call, so retrying cannot make its result readable.
    serde_json::from_str(result)
        .map_err(|e| HandlerError::permanent(format!("result does not decode: {e}")))
}

/// `act(.., false)` returns `None` only for at-most-once actions.
fn unreachable_uncertain<T>() -> Result<T, HandlerError> {
    Err(HandlerError::permanent(
        "an at-least-once action was reported uncertain",
    ))
}
