//! The durable record of one update (docs/ARCHITECTURE.md §2) and what its run did: the
//! outbound actions and their outcomes, kept compactly.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dead::Burial;
use crate::ids::{GroupKey, RecordKey};

/// Milliseconds since the Unix epoch: the one time type stored in records and compared in conditions.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// This instant plus a duration.
    pub fn plus(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        )
    }

    /// This instant less a duration; the epoch if it is longer.
    pub fn minus(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_sub(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        )
    }

    /// How long after `earlier` this instant is; zero if it is not later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// Whole seconds since the epoch, as DynamoDB's TTL attribute wants them.
    pub fn as_secs(self) -> u64 {
        self.0 / 1000
    }
}

/// Where an update is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Stored by the webhook; the enqueue is not yet confirmed.
    Received,
    /// Stored and enqueued.
    Queued,
    /// A worker holds a lease and is running the handler.
    Processing,
    /// The handler finished.
    Done,
    /// The last run failed transiently; the message is waiting out its backoff.
    Retrying,
    /// Failed permanently or spent its budget; it is in the dead-letter queue.
    Dead,
}

impl Status {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Received => "RECEIVED",
            Status::Queued => "QUEUED",
            Status::Processing => "PROCESSING",
            Status::Done => "DONE",
            Status::Retrying => "RETRYING",
            Status::Dead => "DEAD",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored status that this version does not know.
#[derive(Debug, thiserror::Error)]
#[error("unknown status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for Status {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "RECEIVED" => Status::Received,
            "QUEUED" => Status::Queued,
            "PROCESSING" => Status::Processing,
            "DONE" => Status::Done,
            "RETRYING" => Status::Retrying,
            "DEAD" => Status::Dead,
            other => return Err(UnknownStatus(other.to_owned())),
        })
    }
}

/// One update as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateRecord {
    /// `{bot_id}#{update_id}`.
    pub key: RecordKey,
    /// Current status.
    pub status: Status,
    /// The body exactly as Telegram sent it.
    pub payload: Bytes,
    /// The ordering group.
    pub group: GroupKey,
    /// When the webhook stored it.
    pub received_at: Timestamp,
    /// Handler runs so far (not queue receives); the current run's number is its fencing token.
    pub attempts: u32,
    /// Runs not counted against the attempt budget: those that ended rate-limited by Telegram
    /// (pacing, not failures), and every run before an operator's replay (a fresh budget).
    pub throttled: u32,
    /// When the first run started: the time budget of a throttled update counts from here.
    pub first_attempt_at: Option<Timestamp>,
    /// The last failure's description, without message text.
    pub last_error: Option<String>,
    /// Until when the current worker's claim holds.
    pub lease_until: Option<Timestamp>,
    /// Outbound actions by sequence number.
    pub actions: BTreeMap<u32, ActionRecord>,
    /// Why the update was given up on, once it is `DEAD`: what its dead letter says.
    pub burial: Option<Burial>,
    /// After this instant the record is ignored and may be deleted.
    pub expires_at: Timestamp,
}

impl UpdateRecord {
    /// A freshly received update, as the webhook stores it.
    pub fn received(
        key: RecordKey,
        group: GroupKey,
        payload: Bytes,
        now: Timestamp,
        ttl: Duration,
    ) -> Self {
        Self {
            key,
            status: Status::Received,
            payload,
            group,
            received_at: now,
            attempts: 0,
            throttled: 0,
            first_attempt_at: None,
            last_error: None,
            lease_until: None,
            actions: BTreeMap::new(),
            burial: None,
            expires_at: now.plus(ttl),
        }
    }

    /// Whether readers must treat the record as gone (DynamoDB deletes expired items only eventually).
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at <= now
    }

    /// Makes the record wait for a run with a fresh budget, as an operator's replay does: `QUEUED`,
    /// every earlier run refunded, the time budget restarted, no lease, no burial. `attempts` keeps
    /// counting, so the fencing token of the next run is one no earlier run had, and a later burial
    /// is a new letter with its own dedup id. Recorded actions stay: a send that completed is not
    /// repeated by the replay.
    pub(crate) fn restart(&mut self) {
        self.status = Status::Queued;
        self.throttled = self.attempts;
        self.first_attempt_at = None;
        self.lease_until = None;
        self.burial = None;
    }

    /// Records an outbound action's intent, with no outcome yet, for adapters that hold the whole
    /// record (DynamoDB sets the one attribute instead).
    pub fn note_intent(&mut self, intent: &ActionIntent) {
        let action = ActionRecord {
            method: intent.method.clone(),
            delivery: intent.delivery,
            state: ActionState::Pending,
        };
        self.actions.insert(intent.seq, action);
    }

    /// Records the outcome of an action whose intent is recorded; `false` when there is none.
    pub fn note_outcome(&mut self, outcome: &ActionOutcome) -> bool {
        match self.actions.get_mut(&outcome.seq) {
            Some(action) => {
                action.state = outcome.state.clone();
                true
            }
            None => false,
        }
    }

    /// About how many bytes the record takes as a DynamoDB item: the payload, the actions and a
    /// fixed allowance for the other attributes and their names. In-process stores use it to refuse
    /// what DynamoDB would refuse.
    pub(crate) fn approximate_size(&self) -> usize {
        const FIXED: usize = 512;
        let actions: usize = self
            .actions
            .values()
            .map(ActionRecord::approximate_size)
            .sum();
        let error = self.last_error.as_ref().map_or(0, String::len);
        let burial = self.burial.as_ref().map_or(0, |b| b.error.len() + 64);
        FIXED + self.payload.len() + self.group.as_str().len() + actions + error + burial
    }
}

/// How often an action may reach Telegram when its outcome is unknown (a timeout, a crash).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Sent again when the outcome is unknown: right for chat replies.
    AtLeastOnce,
    /// Never sent again when the outcome is unknown; reported as uncertain instead (payments).
    AtMostOnce,
}

impl Delivery {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::AtLeastOnce => "at_least_once",
            Delivery::AtMostOnce => "at_most_once",
        }
    }
}

/// A stored delivery this version does not know.
#[derive(Debug, thiserror::Error)]
#[error("unknown delivery {0:?}")]
pub struct UnknownDelivery(pub String);

impl FromStr for Delivery {
    type Err = UnknownDelivery;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "at_least_once" => Ok(Delivery::AtLeastOnce),
            "at_most_once" => Ok(Delivery::AtMostOnce),
            other => Err(UnknownDelivery(other.to_owned())),
        }
    }
}

/// One outbound call made by the handler, keyed `{update_id}#{seq}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// The Bot API method, e.g. `sendMessage`.
    pub method: String,
    /// What may happen to it when its outcome is unknown.
    pub delivery: Delivery,
    /// What is known of its outcome.
    pub state: ActionState,
}

impl ActionRecord {
    fn approximate_size(&self) -> usize {
        const FIXED: usize = 48;
        let state = match &self.state {
            ActionState::Pending | ActionState::Uncertain => 0,
            ActionState::Succeeded(result) => result.approximate_size(),
            ActionState::Failed { description, .. } => description.len() + 8,
        };
        FIXED + self.method.len() + state
    }
}

/// What is known of an action's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ActionState {
    /// Its intent is recorded and nothing else: it may or may not have reached Telegram.
    Pending,
    /// Telegram accepted it; its result, compactly.
    Succeeded(ActionResult),
    /// Telegram gave a definite refusal (an error answer, a 4xx, a 429): it certainly did not take
    /// effect, so a retry sends it again.
    Failed {
        /// Telegram's `error_code` (the HTTP status).
        code: u16,
        /// The start of Telegram's description.
        description: String,
    },
    /// An at-most-once action whose earlier outcome was unknown and that was therefore not sent
    /// again: to be reconciled by a person.
    Uncertain,
}

/// The most a description is kept to: enough to tell errors apart, never a whole answer.
pub(crate) const DESCRIPTION_BYTES: usize = 200;

/// A small result that is none of the known shapes is kept whole up to this size.
pub(crate) const SMALL_RESULT_BYTES: usize = 1024;

/// The most a step's result may take as JSON (docs/design/worker.md §2): room for an id, a
/// receipt, or an LLM's answer the length of one Telegram message, while a record keeps room for
/// many steps below DynamoDB's 400 KB item limit. Every later write of the run pays for the
/// record's whole size, so keep step results small.
pub const MAX_STEP_RESULT_BYTES: usize = 16 * 1024;

impl ActionState {
    /// The refusal of a call, its description cut to `DESCRIPTION_BYTES`.
    pub fn failed(code: u16, description: &str) -> Self {
        let mut end = description.len().min(DESCRIPTION_BYTES);
        while !description.is_char_boundary(end) {
            end -= 1;
        }
        ActionState::Failed {
            code,
            description: description[..end].to_owned(),
        }
    }
}

/// A successful call's result, as little of it as a replay needs: the ids of what it made, never
/// Telegram's whole object (a record must stay far below DynamoDB's 400 KB item limit).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ActionResult {
    /// `true`: the answer of most methods that change something.
    True,
    /// One message sent or edited.
    Message {
        /// Its chat.
        chat_id: i64,
        /// Its id in the chat.
        message_id: i64,
    },
    /// Several messages (`sendMediaGroup`).
    Messages {
        /// Their chat.
        chat_id: i64,
        /// Their ids, in order.
        message_ids: Vec<i64>,
    },
    /// A message id without its message (`copyMessage`).
    MessageId {
        /// The id.
        message_id: i64,
    },
    /// Any other result up to `SMALL_RESULT_BYTES`, kept as JSON (an invite link, a number).
    Small {
        /// The result's JSON.
        json: String,
    },
    /// A step's result (`ctx.step`), kept as JSON up to [`MAX_STEP_RESULT_BYTES`].
    Json {
        /// The result's JSON.
        json: String,
    },
    /// A larger result of another shape: the call is known to have succeeded, but a replay cannot
    /// give its result back.
    NotKept,
}

impl ActionResult {
    /// The compact form of a call's `result`.
    pub fn of(result: &Value) -> Self {
        if result == &Value::Bool(true) {
            return ActionResult::True;
        }
        if let Some((chat_id, message_id)) = message_ids(result) {
            return ActionResult::Message {
                chat_id,
                message_id,
            };
        }
        if let Some(messages) = result.as_array().filter(|items| !items.is_empty()) {
            let ids: Option<Vec<(i64, i64)>> = messages.iter().map(message_ids).collect();
            if let Some(ids) = ids {
                let chat_id = ids[0].0;
                if ids.iter().all(|(chat, _)| *chat == chat_id) {
                    return ActionResult::Messages {
                        chat_id,
                        message_ids: ids.into_iter().map(|(_, id)| id).collect(),
                    };
                }
            }
        }
        if let Some(message_id) = result
            .as_object()
            .filter(|object| object.len() == 1)
            .and_then(|object| object.get("message_id"))
            .and_then(Value::as_i64)
        {
            return ActionResult::MessageId { message_id };
        }
        let json = result.to_string();
        if json.len() <= SMALL_RESULT_BYTES {
            ActionResult::Small { json }
        } else {
            ActionResult::NotKept
        }
    }

    /// The `result` a replay gives the handler for a call with `params`: the kept ids with the
    /// rest of the message taken from the call itself, as an offline answer would be. `None` when
    /// the result was not kept.
    pub(crate) fn replay(&self, params: &Value) -> Option<Value> {
        let message = |chat_id: i64, message_id: i64| {
            let mut params = params.clone();
            if let Some(object) = params.as_object_mut() {
                object.insert("chat_id".to_owned(), Value::from(chat_id));
            }
            crate::offline::offline_message(&params, message_id, 0)
        };
        Some(match self {
            ActionResult::True => Value::Bool(true),
            ActionResult::Message {
                chat_id,
                message_id,
            } => message(*chat_id, *message_id),
            ActionResult::Messages {
                chat_id,
                message_ids,
            } => Value::Array(
                message_ids
                    .iter()
                    .map(|id| message(*chat_id, *id))
                    .collect(),
            ),
            ActionResult::MessageId { message_id } => {
                serde_json::json!({ "message_id": message_id })
            }
            ActionResult::Small { json } | ActionResult::Json { json } => {
                serde_json::from_str(json).ok()?
            }
            ActionResult::NotKept => return None,
        })
    }

    fn approximate_size(&self) -> usize {
        match self {
            ActionResult::True | ActionResult::NotKept | ActionResult::MessageId { .. } => 16,
            ActionResult::Message { .. } => 32,
            ActionResult::Messages { message_ids, .. } => 16 + 12 * message_ids.len(),
            ActionResult::Small { json } | ActionResult::Json { json } => json.len(),
        }
    }
}

/// The chat and message id of a Message object.
fn message_ids(value: &Value) -> Option<(i64, i64)> {
    let message_id = value.get("message_id")?.as_i64()?;
    let chat_id = value.get("chat")?.get("id")?.as_i64()?;
    Some((chat_id, message_id))
}

/// An action the handler is about to send: recorded before the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionIntent {
    /// Position of the call within the handler run.
    pub seq: u32,
    /// The Bot API method.
    pub method: String,
    /// What may happen to it when its outcome is unknown.
    pub delivery: Delivery,
}

/// What became of the action at `seq`: written with the run's next write (the next intent, or the
/// settle), or by an outbox that records it in the same commit as the send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionOutcome {
    /// Position of the call within the handler run.
    pub seq: u32,
    /// What is now known of it.
    pub state: ActionState,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn results_keep_ids_and_never_the_whole_object() {
        let message = json!({"message_id": 7, "date": 1, "chat": {"id": 42, "type": "private"}, "text": "a long text"});
        assert_eq!(
            ActionResult::of(&message),
            ActionResult::Message {
                chat_id: 42,
                message_id: 7
            }
        );
        assert_eq!(ActionResult::of(&json!(true)), ActionResult::True);
        assert_eq!(
            ActionResult::of(&json!({"message_id": 9})),
            ActionResult::MessageId { message_id: 9 }
        );
        let group = json!([message.clone(), {"message_id": 8, "date": 1, "chat": {"id": 42, "type": "private"}}]);
        assert_eq!(
            ActionResult::of(&group),
            ActionResult::Messages {
                chat_id: 42,
                message_ids: vec![7, 8]
            }
        );
        assert_eq!(
            ActionResult::of(&json!("https://t.me/+abc")),
            ActionResult::Small {
                json: "\"https://t.me/+abc\"".into()
            }
        );
        let huge = json!({"members": "x".repeat(2 * SMALL_RESULT_BYTES)});
        assert_eq!(ActionResult::of(&huge), ActionResult::NotKept);
    }

    #[test]
    fn a_replayed_message_decodes_as_teloxide_s_message_with_the_kept_ids() {
        let params = json!({"chat_id": 42, "text": "hi"});
        let kept = ActionResult::Message {
            chat_id: 42,
            message_id: 7,
        };
        let value = kept.replay(&params).unwrap();
        let message: teloxide_core::types::Message = serde_json::from_value(value).unwrap();
        assert_eq!((message.chat.id.0, message.id.0), (42, 7));
        assert_eq!(message.text(), Some("hi"));
        assert_eq!(ActionResult::NotKept.replay(&params), None);
    }

    #[test]
    fn a_failure_keeps_only_the_start_of_its_description() {
        let long = "é".repeat(DESCRIPTION_BYTES);
        let ActionState::Failed { description, .. } = ActionState::failed(400, &long) else {
            panic!("a failure");
        };
        assert!(description.len() <= DESCRIPTION_BYTES);
    }
}
