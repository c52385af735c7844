//! The durable record of one update (docs/ARCHITECTURE.md §2) and the results of its outbound
//! actions (docs/ARCHITECTURE.md §5).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

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

    /// Whether the update needs nothing more: a redelivery of it is acknowledged without running.
    pub fn is_final(self) -> bool {
        matches!(self, Status::Done | Status::Dead)
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
    /// Handler runs so far (not queue receives).
    pub attempts: u32,
    /// The last failure's description, without message text.
    pub last_error: Option<String>,
    /// Until when the current worker's claim holds.
    pub lease_until: Option<Timestamp>,
    /// Outbound actions by sequence number.
    pub actions: BTreeMap<u32, ActionRecord>,
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
            last_error: None,
            lease_until: None,
            actions: BTreeMap::new(),
            expires_at: now.plus(ttl),
        }
    }

    /// Whether readers must treat the record as gone (DynamoDB deletes expired items only eventually).
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at <= now
    }

    /// Records an outbound action's intent, with no result yet, for adapters that hold the whole
    /// record (DynamoDB sets the one attribute instead).
    pub fn note_intent(&mut self, intent: &ActionIntent) {
        let action = ActionRecord {
            method: intent.method.clone(),
            at_most_once: intent.at_most_once,
            result: None,
        };
        self.actions.insert(intent.seq, action);
    }

    /// Records the result of the action at `seq`; `false` when no intent was recorded for it.
    pub fn note_result(&mut self, seq: u32, result: &str) -> bool {
        match self.actions.get_mut(&seq) {
            Some(action) => {
                action.result = Some(result.to_owned());
                true
            }
            None => false,
        }
    }
}

/// One outbound call made by the handler, keyed `{update_id}#{seq}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionRecord {
    /// The Bot API method, e.g. `sendMessage`.
    pub method: String,
    /// Whether the action must not be repeated when its outcome is unknown.
    pub at_most_once: bool,
    /// The call's `result` JSON once it succeeded; `None` while only the intent is recorded.
    pub result: Option<String>,
}

/// What happened to an action's intent when it had no result: the evidence for reconciliation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionIntent {
    /// Position of the call within the handler run.
    pub seq: u32,
    /// The Bot API method.
    pub method: String,
    /// Whether the action must not be repeated when its outcome is unknown.
    pub at_most_once: bool,
}
