//! What the worker may do to records and group states: claim, record actions, settle, every write
//! after the claim fenced by the run's lease; and the checks an adapter holding a record whole applies.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::dead::Burial;
use crate::error::PortError;
use crate::ids::{BotId, GroupKey, RecordKey, StateKey};
use crate::payment::{Charge, ChargeWrite};
use crate::record::{ActionIntent, ActionOutcome, ActionRecord, Status, Timestamp, UpdateRecord};
use crate::state::{StateWrite, StoredState};

/// The payments ledger as an operator's command changes it, outside any update's run
/// (docs/design/payments.md §3): `tgq payments refund`.
#[async_trait]
pub trait ChargeBook: Send + Sync {
    /// The entry of charge `id` in `bot`'s ledger, if a settle recorded it (consistent read).
    async fn entry(&self, bot: &BotId, id: &str) -> Result<Option<Charge>, PortError>;

    /// Writes `write` into `bot`'s ledger if the entry there is what `write.expect` says;
    /// otherwise refuses with [`PortError::Credited`] and writes nothing.
    async fn write_charge(&self, bot: &BotId, write: &ChargeWrite) -> Result<(), PortError>;
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

    /// The entry of charge `id` in `bot`'s payments ledger, if a settle recorded it (consistent
    /// read): a run carrying a payment reads it before its handler runs.
    async fn charge(&self, bot: &BotId, id: &str) -> Result<Option<Charge>, PortError>;
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
    /// The handler finished; `state` is its group's new state when the run changed it, and
    /// `charges` what the run changes in the payments ledger (a payment new to it, a refund), all
    /// written in the same conditional write (docs/design/payments.md §2).
    Done {
        /// The group's new state, if the run set one.
        state: Option<StateWrite>,
        /// The ledger's entries as the run leaves them; the settle is refused with
        /// [`PortError::Credited`] when one is not as the run read it.
        charges: Vec<ChargeWrite>,
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
    pub const DONE: Settlement = Settlement::Done {
        state: None,
        charges: Vec::new(),
    };

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
            Settlement::Done { state, .. } => state.as_ref(),
            _ => None,
        }
    }

    /// What this settle writes in the payments ledger.
    pub fn charges(&self) -> &[ChargeWrite] {
        match self {
            Settlement::Done { charges, .. } => charges,
            _ => &[],
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

/// Applies a settle to a record, a group state and the payments ledger an adapter holds whole: the
/// lease checked first ([`fenced_write`]), then the state's version (`StateWrite::apply`), then
/// that each ledger entry the settle writes is as the run read it (`charges`: the entries there
/// now, in the order of [`Settlement::charges`]). Returns the record to store and, when the settle
/// writes one, the new state; a refusal means nothing may be written.
pub fn settled(
    stored: Option<&UpdateRecord>,
    (state, charges): (Option<&StoredState>, &[Option<Charge>]),
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
    let moved = settlement
        .charges()
        .iter()
        .zip(
            charges
                .iter()
                .map(Option::as_ref)
                .chain(std::iter::repeat(None)),
        )
        .find(|(write, found)| !write.expect.holds(*found));
    if let Some((write, _)) = moved {
        return Err(PortError::Credited {
            what: "store settle",
            charge: write.entry.id.clone(),
        });
    }
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
