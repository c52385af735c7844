//! The ports: small capability traits, one per thing a function is allowed to do. Adapters (in-memory,
//! embedded, AWS) implement them; no SDK type crosses them.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::envelope::Envelope;
use crate::error::PortError;
use crate::ids::{BotId, GroupKey, MessageGroupId, RecordKey, UpdateId};
use crate::record::{ActionIntent, ActionRecord, Status, Timestamp, UpdateRecord};

/// What the webhook may do to records: create one, and mark it queued. It cannot delete.
#[async_trait]
pub trait UpdateStore: Send + Sync {
    /// Stores `record` unless an unexpired record with its key exists (DynamoDB: a conditional put
    /// returning the old item on failure, so a duplicate costs no second read).
    async fn insert(&self, record: &UpdateRecord, now: Timestamp) -> Result<Inserted, PortError>;

    /// Moves a record from `RECEIVED` to `QUEUED` once its enqueue is confirmed; any later status stays.
    async fn mark_queued(&self, key: &RecordKey) -> Result<(), PortError>;
}

/// The outcome of [`UpdateStore::insert`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// The record is new.
    New,
    /// A record with this key exists, in this status.
    Exists(Status),
}

/// What the worker may do to records: claim, record actions, settle.
#[async_trait]
pub trait UpdateLedger: Send + Sync {
    /// Takes the lease on an update and counts one more handler run, in one conditional write.
    /// Succeeds from `RECEIVED`, `QUEUED`, `RETRYING`, from `PROCESSING` whose lease expired, and when
    /// no record exists (it is created from the queue message: the queue is the source of truth then).
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, PortError>;

    /// Records that an outbound action is about to be sent.
    async fn record_intent(&self, key: &RecordKey, intent: &ActionIntent) -> Result<(), PortError>;

    /// Records an action's result JSON once Telegram accepted it.
    async fn record_result(&self, key: &RecordKey, seq: u32, result: &str)
        -> Result<(), PortError>;

    /// Records how a handler run ended and releases the lease.
    async fn settle(&self, key: &RecordKey, outcome: &Settlement) -> Result<(), PortError>;
}

/// Everything a claim needs, including what to create when the record is missing.
#[derive(Clone, Debug)]
pub struct ClaimRequest {
    /// The update to claim.
    pub key: RecordKey,
    /// Its group, stored if the record has to be created.
    pub group: GroupKey,
    /// Its payload, stored if the record has to be created.
    pub payload: Bytes,
    /// The current time: a lease that ends before it has expired.
    pub now: Timestamp,
    /// When the new lease ends.
    pub lease_until: Timestamp,
    /// When a created record expires.
    pub expires_at: Timestamp,
}

impl ClaimRequest {
    /// The claim rule applied to the stored record, for adapters that read and write a record under
    /// one lock or transaction (DynamoDB states the same rule as a condition expression). Returns the
    /// decision and, when the claim runs, the record to store.
    pub fn apply(&self, stored: Option<UpdateRecord>) -> (Claim, Option<UpdateRecord>) {
        let mut record = match stored {
            Some(record) if !record.is_expired(self.now) => record,
            // The queue is the source of truth when the record is missing (or expired).
            _ => {
                let mut created = UpdateRecord::received(
                    self.key.clone(),
                    self.group.clone(),
                    self.payload.clone(),
                    self.now,
                    std::time::Duration::ZERO,
                );
                created.expires_at = self.expires_at;
                created
            }
        };
        match (record.status, record.lease_until) {
            (status, _) if status.is_final() => return (Claim::AlreadyFinal(status), None),
            (Status::Processing, Some(until)) if until > self.now => {
                return (Claim::Busy(until), None)
            }
            _ => {}
        }
        record.status = Status::Processing;
        record.attempts += 1;
        record.lease_until = Some(self.lease_until);
        let claimed = Claimed {
            attempt: record.attempts,
            actions: record.actions.clone(),
        };
        (Claim::Run(claimed), Some(record))
    }
}

/// The outcome of [`UpdateLedger::claim`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The lease is ours: run the handler.
    Run(Claimed),
    /// Already `DONE` or `DEAD`: a duplicate delivery, acknowledge it and run nothing.
    AlreadyFinal(Status),
    /// Another worker holds an unexpired lease until the given time.
    Busy(Timestamp),
}

/// A claimed update: which run this is and what earlier runs already sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The number of this run, counting it (1 on the first).
    pub attempt: u32,
    /// Outbound actions recorded by earlier runs, by sequence number.
    pub actions: BTreeMap<u32, ActionRecord>,
}

/// How a handler run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// The handler finished.
    Done,
    /// A transient failure; another run follows after a backoff.
    Retrying {
        /// Description of the failure, without message text.
        error: String,
    },
    /// Given up: the update is in the dead-letter queue.
    Dead {
        /// Description of the failure, without message text.
        error: String,
    },
}

impl Settlement {
    /// The status the record ends in.
    pub fn status(&self) -> Status {
        match self {
            Settlement::Done => Status::Done,
            Settlement::Retrying { .. } => Status::Retrying,
            Settlement::Dead { .. } => Status::Dead,
        }
    }

    /// Ends the run on a record, for adapters that hold the whole record: its status, the lease
    /// released, and the failure kept (none once done).
    pub fn apply(&self, record: &mut UpdateRecord) {
        record.status = self.status();
        record.lease_until = None;
        record.last_error = match self {
            Settlement::Done => None,
            Settlement::Retrying { error } | Settlement::Dead { error } => Some(error.clone()),
        };
    }
}

/// Reads records back; for operations, tests and the conformance suite, never on the hot path.
#[async_trait]
pub trait RecordReader: Send + Sync {
    /// The record with this key, unless it is missing or expired (consistent read).
    async fn get(&self, key: &RecordKey, now: Timestamp)
        -> Result<Option<UpdateRecord>, PortError>;
}

/// A store that also holds the updates queue (local mode's embedded store) can keep a new record and
/// its queue message in one durable write: one commit per update instead of three, and no window in
/// which the record is stored but not yet queued.
#[async_trait]
pub trait AtomicIngest: Send + Sync {
    /// Stores `record` as `QUEUED` together with `message`, unless an unexpired record with its key
    /// exists; then nothing is written and the existing status is returned, as [`UpdateStore::insert`]
    /// does.
    async fn insert_queued(
        &self,
        record: &UpdateRecord,
        now: Timestamp,
        message: &OutgoingMessage,
    ) -> Result<Inserted, PortError>;
}

/// A message for the updates queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// `{bot_id}:{group key}`: the queue delivers one group's messages in order, one at a time.
    pub group_id: MessageGroupId,
    /// `{bot_id}:{update_id}`: the queue drops a repeat within its dedup window.
    pub dedup_id: String,
    /// The raw update.
    pub body: Bytes,
}

impl OutgoingMessage {
    /// The queue message for one stored update.
    pub fn for_update(key: &RecordKey, group: &GroupKey, body: Bytes) -> Self {
        Self {
            group_id: MessageGroupId::new(&key.bot_id, group),
            dedup_id: key.dedup_id(),
            body,
        }
    }
}

/// What the webhook may do to the updates queue: send.
#[async_trait]
pub trait UpdateQueue: Send + Sync {
    /// Sends one message to the FIFO queue.
    async fn enqueue(&self, message: &OutgoingMessage) -> Result<(), PortError>;
}

/// The queue's handle on one received message, needed to change its visibility or delete it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReceiptHandle(pub String);

/// One message as the queue delivered it (SQS's event record, or a local receive).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRecord {
    /// The queue's id of the message; what `batchItemFailures` names.
    pub message_id: String,
    /// The handle of this delivery.
    pub receipt: ReceiptHandle,
    /// The raw update.
    pub body: Bytes,
    /// `{bot_id}:{group key}`, as sent.
    pub group_id: String,
    /// How many times the queue has delivered it, this time included.
    pub receive_count: u32,
}

/// What the worker may do to a message it holds: hide it for a while (backoff) or show it at once.
#[async_trait]
pub trait Visibility: Send + Sync {
    /// Makes the message visible again after `after` (zero: at once).
    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        after: Duration,
    ) -> Result<(), PortError>;
}

/// What local mode's worker loop (the stand-in for the SQS event source mapping) does to the queue.
#[async_trait]
pub trait QueueConsumer: Visibility {
    /// Receives up to `max` messages, each hidden for `visibility`, waiting up to `wait` for the first.
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<QueueRecord>, PortError>;

    /// Deletes a processed message.
    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), PortError>;
}

/// A message for the dead-letter queue: the raw bytes and why they are there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The bot it was addressed to.
    pub bot_id: BotId,
    /// The update id, when the body had one.
    pub update_id: Option<UpdateId>,
    /// The original group, when known.
    pub group: Option<GroupKey>,
    /// The raw body, exactly as received.
    pub body: Bytes,
    /// Why it is dead: `poison`, `permanent_error` or `attempt_budget_spent`.
    pub reason: String,
    /// The error class (`poison`, `permanent`, `transient`, `rate_limited`).
    pub error_class: String,
    /// The error's description, without message text.
    pub error: String,
    /// Handler runs spent on it.
    pub attempts: u32,
}

impl DeadLetter {
    /// The dead-letter queue's dedup id: one letter per update, or per distinct poison body.
    pub fn dedup_id(&self) -> String {
        match self.update_id {
            Some(id) => format!("{}:{id}:dead", self.bot_id),
            None => format!("{}:poison:{:016x}", self.bot_id, fnv1a(&self.body)),
        }
    }

    /// A message the updates queue's redrive policy moved after too many receives: the worker never
    /// deleted it. `group_id` is the message's `{bot_id}:{group key}`, when the queue kept it.
    pub fn redriven(group_id: Option<&str>, body: Bytes, error: String) -> Self {
        let (bot_id, group) = match group_id.map(MessageGroupId::parse) {
            Some(Ok((bot_id, group))) => (bot_id, Some(group)),
            _ => (BotId::unknown(), None),
        };
        Self {
            bot_id,
            update_id: Envelope::parse(&body).ok().map(|e| e.update_id),
            group,
            body,
            reason: "max_receive_count".into(),
            error_class: "transient".into(),
            error,
            attempts: 0,
        }
    }

    /// The dead-letter queue's group id: per original group, so letters keep their order for replay.
    pub fn group_id(&self) -> String {
        match &self.group {
            Some(group) => format!("{}:{group}", self.bot_id),
            None => format!("{}:poison", self.bot_id),
        }
    }
}

/// A stable 64-bit hash for dedup ids (not for security).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Where updates go when they can never be processed.
#[async_trait]
pub trait DeadLetters: Send + Sync {
    /// Sends one letter to the dead-letter queue.
    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), PortError>;
}

/// Reads the dead-letter queue without consuming it; for operations and tests.
#[async_trait]
pub trait DeadLetterReader: Send + Sync {
    /// Up to `max` letters, oldest first, left on the queue.
    async fn peek(&self, max: usize) -> Result<Vec<DeadLetter>, PortError>;
}
