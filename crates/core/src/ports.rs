//! The ports: small capability traits, one per thing a function is allowed to do. Adapters (in-memory,
//! embedded, AWS) implement them; no SDK type crosses them.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

pub use crate::dead::DeadLetter;
use crate::dead::{Burial, DeadLetterMarks};
use crate::error::PortError;
use crate::ids::{GroupKey, MessageGroupId, RecordKey, StateKey};
use crate::record::{ActionIntent, ActionOutcome, ActionRecord, Status, Timestamp, UpdateRecord};
use crate::state::{StateWrite, StoredState};
use crate::timer::TimerMessage;

/// What the webhook may do to records: create one. It cannot change or delete one.
#[async_trait]
pub trait UpdateStore: Send + Sync {
    /// Stores `record` unless an unexpired record with its key exists (DynamoDB: a conditional put
    /// returning the old item on failure, so a duplicate costs no second read).
    async fn insert(&self, record: &UpdateRecord, now: Timestamp) -> Result<Inserted, PortError>;
}

/// The outcome of [`UpdateStore::insert`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// The record is new.
    New,
    /// A record with this key exists, in this status.
    Exists(Status),
}

/// A run's hold on an update: its key and the fencing token its claim set (the attempt number).
/// Every write of the run after the claim is conditional on the record still being `PROCESSING`
/// with this token, so a run that outlived its lease can no longer write.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The update.
    pub key: RecordKey,
    /// The attempt number the claim set.
    pub token: u32,
}

impl Lease {
    /// Whether `record` is still held by this run; adapters that hold the whole record check every
    /// write of the run with it (DynamoDB states it as a condition).
    pub(crate) fn holds(&self, record: &UpdateRecord) -> bool {
        record.status == Status::Processing && record.attempts == self.token
    }
}

/// What the worker may do to records and group states: claim, record actions, settle — every write
/// after the claim fenced by the claim's [`Lease`].
#[async_trait]
pub trait UpdateLedger: Send + Sync {
    /// Takes the lease on an update and counts one more handler run, in one conditional write.
    /// Succeeds from `RECEIVED`, `QUEUED`, `RETRYING`, from `PROCESSING` whose lease expired, and when
    /// no record exists (it is created from the queue message: the queue is the source of truth then).
    /// A claim that runs returns the update's group state as the last `DONE` settle of the group
    /// left it.
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, PortError>;

    /// Records that an outbound action is about to be sent, together with the outcomes of earlier
    /// actions not yet written; [`PortError::Fenced`] when the lease is gone.
    async fn record_intent(
        &self,
        lease: &Lease,
        intent: &ActionIntent,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError>;

    /// Writes outcomes at once instead of with the run's next write: a step's result must be
    /// durable before the handler goes on (docs/design/worker.md §2); [`PortError::Fenced`] when
    /// the lease is gone.
    async fn record_outcomes(
        &self,
        lease: &Lease,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError>;

    /// Records how a handler run ended, with the outcomes not yet written, and releases the lease;
    /// a `DONE` settle writes the group's new state in the same conditional write. Refused with
    /// [`PortError::Fenced`] when the lease is gone (checked first), [`PortError::Conflict`] when
    /// the state changed since the claim read it; a refused settle writes nothing.
    async fn settle(
        &self,
        lease: &Lease,
        settlement: &Settlement,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError>;
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
    /// The key of the state of the update's group.
    pub fn state_key(&self) -> StateKey {
        StateKey::new(self.key.bot_id.clone(), self.group.clone())
    }

    /// The claim rule applied to the stored record, for adapters that read and write a record under
    /// one lock or transaction (DynamoDB states the same rule as a condition expression). Returns the
    /// decision (with the group's `state` when the claim runs) and, when the claim runs, the record
    /// to store.
    pub fn apply(
        &self,
        stored: Option<UpdateRecord>,
        state: Option<StoredState>,
    ) -> (Claim, Option<UpdateRecord>) {
        let mut record = match stored {
            Some(record) if !record.is_expired(self.now) => record,
            // The queue is the source of truth when the record is missing (or expired).
            _ => {
                let mut created = UpdateRecord::received(
                    self.key.clone(),
                    self.group.clone(),
                    self.payload.clone(),
                    self.now,
                    Duration::ZERO,
                );
                created.expires_at = self.expires_at;
                created
            }
        };
        match (record.status, record.lease_until) {
            (Status::Done, _) => return (Claim::AlreadyFinal(Final::Done), None),
            (Status::Dead, _) => {
                let burial = record.burial.clone();
                return (Claim::AlreadyFinal(Final::Dead(burial)), None);
            }
            (Status::Processing, Some(until)) if until > self.now => {
                return (Claim::Busy(until), None)
            }
            _ => {}
        }
        let resumed = record.status == Status::Processing;
        record.status = Status::Processing;
        record.attempts += 1;
        record.lease_until = Some(self.lease_until);
        let first_attempt_at = *record.first_attempt_at.get_or_insert(self.now);
        let claimed = Claimed {
            received_at: record.received_at,
            lease: Lease {
                key: self.key.clone(),
                token: record.attempts,
            },
            actions: record.actions.clone(),
            throttled: record.throttled,
            first_attempt_at,
            resumed,
            state,
        };
        (Claim::Run(claimed), Some(record))
    }
}

/// The outcome of [`UpdateLedger::claim`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The lease is ours: run the handler.
    Run(Claimed),
    /// Already `DONE` or `DEAD`: a duplicate delivery, acknowledged without running.
    AlreadyFinal(Final),
    /// Another worker holds an unexpired lease until the given time.
    Busy(Timestamp),
}

/// A finished update, as a claim found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Final {
    /// The handler finished.
    Done,
    /// Given up on, with the burial its dead letter tells of (absent in records of older versions).
    Dead(Option<Burial>),
}

/// A claimed update: which run this is and what earlier runs already did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The run's hold on the update; its token is the run's number (1 on the first).
    pub lease: Lease,
    /// Outbound actions recorded by earlier runs, by sequence number.
    pub actions: BTreeMap<u32, ActionRecord>,
    /// Earlier runs that ended rate-limited (not counted against the attempt budget).
    pub throttled: u32,
    /// When the first run started.
    pub first_attempt_at: Timestamp,
    /// The previous run died holding the lease (a crash, a timeout, out of memory).
    pub resumed: bool,
    /// When the update was stored: its end-to-end latency counts from here.
    pub received_at: Timestamp,
    /// The state of the update's group, as the group's last `DONE` settle wrote it.
    pub state: Option<StoredState>,
}

impl Claimed {
    /// The attempts that count against the budget: this run and the earlier ones, less those that
    /// were only rate-limited.
    pub fn attempts_spent(&self) -> u32 {
        self.lease.token.saturating_sub(self.throttled)
    }
}

/// How a handler run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// The handler finished; `state` is its group's new state when the run changed it, written in
    /// the same conditional write.
    Done {
        /// The group's new state, if the run set one.
        state: Option<StateWrite>,
    },
    /// The handler's recipient is gone — the user blocked the bot, deleted their account, or the
    /// private chat no longer exists (docs/design/worker.md §1): nothing is left to do, so the
    /// update is `DONE`, counted apart, and not dead-lettered. A state change is not written: the
    /// handler did not finish.
    RecipientGone {
        /// Telegram's answer, without message text.
        error: String,
    },
    /// A failure worth retrying; another run follows after a backoff.
    Retrying {
        /// Description of the failure, without message text.
        error: String,
        /// Telegram rate-limited the run: it does not count against the attempt budget.
        throttled: bool,
    },
    /// Given up: the update goes to the dead-letter queue.
    Dead(Burial),
}

impl Settlement {
    /// A finished run that changed no state.
    pub const DONE: Settlement = Settlement::Done { state: None };

    /// The status the record ends in.
    pub fn status(&self) -> Status {
        match self {
            Settlement::Done { .. } | Settlement::RecipientGone { .. } => Status::Done,
            Settlement::Retrying { .. } => Status::Retrying,
            Settlement::Dead(_) => Status::Dead,
        }
    }

    /// The group state this settle writes.
    pub fn state(&self) -> Option<&StateWrite> {
        match self {
            Settlement::Done { state } => state.as_ref(),
            _ => None,
        }
    }

    /// Ends the run on a record, for adapters that hold the whole record: its status, the lease
    /// released, the failure kept (none once done; the recipient's departure for a gone one), a
    /// throttled run refunded. The state is the adapter's to write ([`settled`]).
    pub(crate) fn apply(&self, record: &mut UpdateRecord) {
        record.status = self.status();
        record.lease_until = None;
        match self {
            Settlement::Done { .. } => record.last_error = None,
            Settlement::RecipientGone { error } => record.last_error = Some(error.clone()),
            Settlement::Retrying { error, throttled } => {
                record.last_error = Some(error.clone());
                if *throttled {
                    record.throttled += 1;
                }
            }
            Settlement::Dead(burial) => {
                record.last_error = Some(burial.error.clone());
                record.burial = Some(burial.clone());
            }
        }
    }
}

/// Applies a run's write to a record an adapter holds whole and returns the record to store: checks
/// the lease, notes the outcomes, lets `write` do the rest, and checks the size DynamoDB would allow.
/// [`PortError::Fenced`] when the lease is gone.
pub fn fenced_write(
    stored: Option<&UpdateRecord>,
    lease: &Lease,
    outcomes: &[ActionOutcome],
    what: &'static str,
    write: impl FnOnce(&mut UpdateRecord),
) -> Result<UpdateRecord, PortError> {
    let mut record = match stored {
        Some(record) if lease.holds(record) => record.clone(),
        _ => return Err(PortError::fenced(what)),
    };
    for outcome in outcomes {
        if !record.note_outcome(outcome) {
            return Err(PortError::rejected(what, "an outcome without its intent"));
        }
    }
    write(&mut record);
    within_item_limit(&record, what)?;
    Ok(record)
}

/// Applies a settle to a record and a group state an adapter holds whole: the lease checked first
/// ([`fenced_write`]), then the state's version (`StateWrite::apply`). Returns the record to store
/// and, when the settle writes one, the new state; a refusal means nothing may be written.
pub fn settled(
    stored: Option<&UpdateRecord>,
    state: Option<&StoredState>,
    lease: &Lease,
    settlement: &Settlement,
    outcomes: &[ActionOutcome],
) -> Result<(UpdateRecord, Option<StoredState>), PortError> {
    let record = fenced_write(stored, lease, outcomes, "store settle", |record| {
        settlement.apply(record)
    })?;
    let state = settlement
        .state()
        .map(|write| write.apply(state))
        .transpose()?;
    Ok((record, state))
}

/// Refuses a record DynamoDB would refuse for its size, for the stores that hold records in process.
pub fn within_item_limit(record: &UpdateRecord, what: &'static str) -> Result<(), PortError> {
    let size = record.approximate_size();
    if size > crate::defaults::MAX_ITEM_BYTES {
        return Err(PortError::too_large(
            what,
            format!(
                "the record would take about {size} bytes, over the {} byte item limit",
                crate::defaults::MAX_ITEM_BYTES
            ),
        ));
    }
    Ok(())
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
    /// The message that delivers a due timer to its chat's message group.
    pub(crate) fn timer(timer: &TimerMessage) -> Self {
        Self {
            group_id: MessageGroupId::new(&timer.bot_id, &timer.group),
            dedup_id: timer.dedup_id(),
            body: timer.body(),
        }
    }

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

/// One message as the queue delivered it (SQS's event record, or a local receive). Adapters refuse
/// a message without an id where they read it: a failure must always be reportable by id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRecord {
    /// The queue's id of the message; what `batchItemFailures` names. Never empty.
    pub message_id: String,
    /// The handle of this delivery.
    pub receipt: ReceiptHandle,
    /// The raw update.
    pub body: Bytes,
    /// `{bot_id}:{group key}`, as sent.
    pub group_id: MessageGroupId,
    /// How many times the queue has delivered it, this time included.
    pub receive_count: u32,
    /// tgq's dead-letter attributes, when the message is a dead letter an operator moved back to
    /// the updates queue (the SQS console's redrive): the worker then resets its record first.
    pub dead_letter: Option<DeadLetterMarks>,
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

// The operator's ports (docs/design/operate.md): what `tgq dlq` does to records and letters, and
// what the worker needs to take an operator's redrive through the SQS console as a replay.

/// Which records a reset may restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetRule {
    /// Only a `DEAD` record: a dead letter an operator moved back to the updates queue. A later
    /// delivery of that same message finds the record restarted (or finished) and leaves it be, so
    /// its budget is refunded once, not at every retry.
    Dead,
    /// A `DEAD` record, or one that never finished (`RECEIVED`, `QUEUED`, `RETRYING`, `PROCESSING`
    /// whose lease ended): an operator's replay of a letter, which the queue's own redrive may have
    /// moved there without a run.
    DeadOrUnfinished,
}

/// An operator's request to restart an update's record (see `UpdateRecord::restart`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResetRequest {
    /// The update.
    pub key: RecordKey,
    /// The current time: an expired record counts as absent, and a lease that ends before it has
    /// ended.
    pub now: Timestamp,
    /// Which records may be restarted.
    pub rule: ResetRule,
}

/// The outcome of [`UpdateReset::reset`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reset {
    /// The record was restarted from this status.
    Restarted(Status),
    /// There is no live record (never stored, or expired): the next claim creates it from the queue
    /// message, with a fresh budget.
    Absent,
    /// The record is in this status and the rule leaves it: `DONE` (the update ran since, so a
    /// replay would run it twice), `PROCESSING` under a live lease, or not `DEAD` under
    /// [`ResetRule::Dead`].
    Refused(Status),
}

impl ResetRequest {
    /// The reset rule applied to the stored record, for adapters that read and write a record under
    /// one lock or transaction (DynamoDB states the same rule as a condition expression). Returns
    /// the decision and, when the record is restarted, the record to store.
    pub fn apply(&self, stored: Option<UpdateRecord>) -> (Reset, Option<UpdateRecord>) {
        let mut record = match stored {
            Some(record) if !record.is_expired(self.now) => record,
            _ => return (Reset::Absent, None),
        };
        let status = record.status;
        let restartable = match (self.rule, status) {
            (_, Status::Dead) => true,
            (ResetRule::Dead, _) | (_, Status::Done) => false,
            (ResetRule::DeadOrUnfinished, Status::Processing) => {
                record.lease_until.is_none_or(|until| until <= self.now)
            }
            (ResetRule::DeadOrUnfinished, _) => true,
        };
        if !restartable {
            return (Reset::Refused(status), None);
        }
        record.restart();
        (Reset::Restarted(status), Some(record))
    }
}

/// Restarts records for an operator's replay. Only the operator's tool, and the worker for a
/// redrive an operator started in the SQS console, use it; on DynamoDB it is one conditional
/// `UpdateItem`, which the worker's role already has.
#[async_trait]
pub trait UpdateReset: Send + Sync {
    /// Restarts the record if the request's rule allows it, in one conditional write.
    async fn reset(&self, request: &ResetRequest) -> Result<Reset, PortError>;
}

/// The dead-letter queue's handle on a letter an operator holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LetterHandle(pub String);

/// A dead letter an operator holds: out of sight of other operators' holds until it is released,
/// removed, or the hold ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldLetter {
    /// The letter's id in the queue (SQS's message id; the embedded store's sequence number).
    pub id: String,
    /// The handle to release or remove it by.
    pub handle: LetterHandle,
    /// When it was dead-lettered, when the queue says.
    pub sent_at: Option<Timestamp>,
    /// The letter.
    pub letter: DeadLetter,
}

/// What an operator may do to the dead-letter queue: hold letters to look at them or act on them,
/// release them, remove them.
#[async_trait]
pub trait DeadLetterStore: Send + Sync {
    /// Holds up to `max` letters that nobody holds, oldest first, for at most `hold`. A FIFO queue
    /// gives at most the first ten letters of a chat until those are removed.
    async fn hold(&self, max: usize, hold: Duration) -> Result<Vec<HeldLetter>, PortError>;

    /// Ends a hold: the letter is visible again.
    async fn release(&self, handle: &LetterHandle) -> Result<(), PortError>;

    /// Deletes a held letter.
    async fn remove(&self, handle: &LetterHandle) -> Result<(), PortError>;

    /// About how many letters the queue holds, held ones included.
    async fn depth(&self) -> Result<u64, PortError>;
}

/// What the worker may do with timers: hand over those a finished run scheduled, before its `DONE`
/// settle (docs/design/time.md). Idempotent by timer id: a retried run hands the same timers
/// over again, and the scheduler keeps one of each. A timer already due is delivered at once.
#[async_trait]
pub trait TimerScheduler: Send + Sync {
    /// Keeps each timer until it is due, then delivers it to its chat's message group.
    async fn schedule(&self, timers: &[TimerMessage], now: Timestamp) -> Result<(), PortError>;
}

/// A deployment's timer queue (AWS: a standard SQS queue, whose messages may wait up to
/// [`MAX_TIMER_HOLD`](crate::timer::MAX_TIMER_HOLD) before they show): where a timer waits for its time before the relay moves
/// it into its chat's message group (docs/design/time.md).
#[async_trait]
pub trait TimerQueue: Send + Sync {
    /// Sends the timer to the queue, to show after `delay` (at most [`MAX_TIMER_HOLD`](crate::timer::MAX_TIMER_HOLD); rounded up
    /// to whole seconds).
    async fn hold(&self, timer: &TimerMessage, delay: Duration) -> Result<(), PortError>;
}
