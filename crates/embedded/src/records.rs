//! Update records: the webhook's conditional insert, the worker's claim and fenced writes, and the
//! outbox and dead letters, as operations of the writer. The rules are core's, as the in-memory
//! store applies them.

use redb::ReadableTable;
use tgq_core::dead::{DeadLetter, DeadReason};
use tgq_core::ids::{RecordKey, StateKey};
use tgq_core::payment::charge_pk;
use tgq_core::ports::{
    fenced_write, settled, within_item_limit, Claim, ClaimRequest, Inserted, Lease, Settlement,
};
use tgq_core::record::{ActionIntent, ActionOutcome, ActionState, Status, Timestamp, UpdateRecord};
use tgq_core::state::StoredState;
use tgq_core::PortError;

use crate::journal::{Draft, StateChange};
use crate::schema::{
    counter, decode_record, decode_state, encode_letter, encode_record, encode_state,
    StoredOutboxEntry, CHARGES, DEAD, DEAD_IDS, META, OUTBOX, RECORDS, RECORD_EXPIRY, STATES,
};
use crate::writer::{OpError, Tx};

impl Tx<'_> {
    /// The record with this key, expired or not.
    fn load_record(&self, key: &RecordKey) -> Result<Option<UpdateRecord>, OpError> {
        let records = self.table(RECORDS)?;
        let Some(value) = records.get(key.pk().as_str())? else {
            return Ok(None);
        };
        Ok(Some(decode_record(value.value())?))
    }

    /// Writes a record and keeps the expiry index in step; `previous_expiry` is the stored version's.
    fn put_record(
        &mut self,
        record: &UpdateRecord,
        previous_expiry: Option<Timestamp>,
    ) -> Result<(), OpError> {
        let pk = record.key.pk();
        let value = encode_record(record).map_err(|e| OpError::Fatal(e.to_string()))?;
        self.table_mut(RECORDS)?
            .insert(pk.as_str(), value.as_slice())?;
        if previous_expiry != Some(record.expires_at) {
            let mut expiry = self.table_mut(RECORD_EXPIRY)?;
            if let Some(previous) = previous_expiry {
                expiry.remove((previous.0, pk.as_str()))?;
            }
            expiry.insert((record.expires_at.0, pk.as_str()), ())?;
        }
        self.journal_record(record, None);
        Ok(())
    }

    /// Notes a record's write for the journal (kept once the batch commits).
    pub(crate) fn journal_record(&mut self, record: &UpdateRecord, state: Option<StateChange>) {
        self.journal.push(Draft {
            pk: record.key.pk(),
            status: record.status,
            attempts: record.attempts,
            state,
        });
    }

    /// The state of a group, if one was ever written.
    fn load_state(&self, key: &StateKey) -> Result<Option<StoredState>, OpError> {
        let states = self.table(STATES)?;
        let Some(value) = states.get(key.pk().as_str())? else {
            return Ok(None);
        };
        Ok(Some(decode_state(value.value())?))
    }

    /// Adds one to a durable counter.
    pub(crate) fn bump(&mut self, name: &'static str) -> Result<(), OpError> {
        self.add(name, 1)
    }

    /// Adds `amount` to a durable counter when the batch is written.
    pub(crate) fn add(&mut self, name: &'static str, amount: u64) -> Result<(), OpError> {
        let delta = self.counter_deltas.entry(name).or_default();
        *delta = delta.saturating_add(amount);
        self.mark_written();
        Ok(())
    }

    /// Takes the next value of a sequence (starting at 1).
    pub(crate) fn next_in(&mut self, sequence: &'static str) -> Result<u64, OpError> {
        let next = match self.sequences.get(sequence) {
            Some(next) => *next,
            None => self.table(META)?.get(sequence)?.map_or(1, |v| v.value()),
        };
        self.sequences.insert(sequence, next + 1);
        self.mark_written();
        Ok(next)
    }

    /// Writes the counters and sequences this batch changed, once, before it commits.
    pub(crate) fn write_batch_totals(&mut self) -> Result<(), OpError> {
        if self.counter_deltas.is_empty() && self.sequences.is_empty() {
            return Ok(());
        }
        let (deltas, next) = (
            std::mem::take(&mut self.counter_deltas),
            std::mem::take(&mut self.sequences),
        );
        let mut meta = self.table_mut(META)?;
        for (name, delta) in deltas {
            let current = meta.get(name)?.map_or(0, |v| v.value());
            meta.insert(name, current.saturating_add(delta))?;
        }
        for (name, value) in next {
            meta.insert(name, value)?;
        }
        Ok(())
    }

    /// Stores a record unless an unexpired one with its key exists.
    pub(crate) fn insert(
        &mut self,
        record: &UpdateRecord,
        now: Timestamp,
    ) -> Result<Inserted, OpError> {
        within_item_limit(record, "store insert").map_err(OpError::Refused)?;
        let existing = self.load_record(&record.key)?;
        if let Some(existing) = &existing {
            if !existing.is_expired(now) {
                self.bump(counter::DUPLICATES)?;
                return Ok(Inserted::Exists(existing.status));
            }
        }
        self.put_record(record, existing.map(|r| r.expires_at))?;
        self.bump(counter::RECEIVED)?;
        Ok(Inserted::New)
    }

    /// Takes the lease and counts a run; creates the record from the message when it is missing.
    pub(crate) fn claim(&mut self, request: &ClaimRequest) -> Result<Claim, OpError> {
        let stored = self.load_record(&request.key)?;
        let state = self.load_state(&request.state_key())?;
        let previous_expiry = stored.as_ref().map(|r| r.expires_at);
        let (claim, updated) = request.apply(stored, state);
        if let Some(record) = updated {
            within_item_limit(&record, "store claim").map_err(OpError::Refused)?;
            self.put_record(&record, previous_expiry)?;
        }
        Ok(claim)
    }

    /// One fenced write of a run: the lease checked, the outcomes noted, `change` applied. A refused
    /// write is counted ([`counter::FENCED`]) and changes nothing else.
    pub(crate) fn write_run(
        &mut self,
        lease: &Lease,
        outcomes: &[ActionOutcome],
        what: &'static str,
        change: impl FnOnce(&mut UpdateRecord),
    ) -> Result<UpdateRecord, OpError> {
        let stored = self.load_record(&lease.key)?;
        let updated = fenced_write(stored.as_ref(), lease, outcomes, what, change);
        let updated = self.refused_or(updated)?;
        self.put_run(&updated, outcomes)?;
        Ok(updated)
    }

    /// A run's write checked and ready, or its refusal, counted when it is the lease's.
    fn refused_or<T>(&mut self, checked: Result<T, PortError>) -> Result<T, OpError> {
        match checked {
            Ok(checked) => Ok(checked),
            Err(refused @ PortError::Fenced { .. }) => {
                self.bump(counter::FENCED)?;
                Err(OpError::Refused(refused))
            }
            Err(refused) => Err(OpError::Refused(refused)),
        }
    }

    /// Stores a record a run's write changed, counting the outcomes marked uncertain.
    fn put_run(
        &mut self,
        updated: &UpdateRecord,
        outcomes: &[ActionOutcome],
    ) -> Result<(), OpError> {
        let uncertain = outcomes
            .iter()
            .filter(|o| o.state == ActionState::Uncertain)
            .count();
        if uncertain > 0 {
            self.add(counter::UNCERTAIN, uncertain as u64)?;
        }
        let expiry = updated.expires_at;
        self.put_record(updated, Some(expiry))
    }

    /// Records an outbound action's intent, with the outcomes not yet written.
    pub(crate) fn record_intent(
        &mut self,
        lease: &Lease,
        intent: &ActionIntent,
        outcomes: &[ActionOutcome],
    ) -> Result<(), OpError> {
        self.write_run(lease, outcomes, "store record_intent", |record| {
            record.note_intent(intent)
        })?;
        Ok(())
    }

    /// Writes outcomes of a run at once.
    pub(crate) fn record_outcomes(
        &mut self,
        lease: &Lease,
        outcomes: &[ActionOutcome],
    ) -> Result<(), OpError> {
        self.write_run(lease, outcomes, "store record_outcomes", |_| {})?;
        Ok(())
    }

    /// Records how a run ended and releases the lease; a `DONE` settle writes the group's new state
    /// with it. Both are checked before either is written.
    pub(crate) fn settle(
        &mut self,
        lease: &Lease,
        settlement: &Settlement,
        outcomes: &[ActionOutcome],
    ) -> Result<(), OpError> {
        let stored = self.load_record(&lease.key)?;
        let state_key = settlement.state().map(|write| write.key.clone());
        let state = match &state_key {
            Some(key) => self.load_state(key)?,
            None => None,
        };
        let pks: Vec<String> = settlement
            .charges()
            .iter()
            .map(|write| charge_pk(&lease.key.bot_id, &write.entry.id))
            .collect();
        let mut found = Vec::with_capacity(pks.len());
        for pk in &pks {
            found.push(match self.table(CHARGES)?.get(pk.as_str())? {
                Some(value) => Some(
                    serde_json::from_slice(value.value())
                        .map_err(|e| OpError::Fatal(format!("charge {pk}: {e}")))?,
                ),
                None => None,
            });
        }
        let checked = settled(
            stored.as_ref(),
            (state.as_ref(), &found),
            lease,
            settlement,
            outcomes,
        );
        let before = state.map(|state| state.json);
        let (record, state) = self.refused_or(checked)?;
        self.put_run(&record, outcomes)?;
        for (pk, write) in pks.iter().zip(settlement.charges()) {
            let value =
                serde_json::to_vec(&write.entry).map_err(|e| OpError::Fatal(e.to_string()))?;
            self.table_mut(CHARGES)?
                .insert(pk.as_str(), value.as_slice())?;
        }
        if let (Some(key), Some(state)) = (state_key, state) {
            let value = encode_state(&state).map_err(|e| OpError::Fatal(e.to_string()))?;
            self.table_mut(STATES)?
                .insert(key.pk().as_str(), value.as_slice())?;
            let change = StateChange {
                before,
                after: state.json,
            };
            self.journal_record(&record, Some(change));
        }
        self.bump(match settlement {
            Settlement::Done { .. } => counter::PROCESSED,
            Settlement::RecipientGone { .. } => counter::RECIPIENT_GONE,
            Settlement::Retrying { .. } => counter::RETRIED,
            Settlement::Dead(_) => counter::DEAD_LETTERED,
        })
    }

    /// Expires the lease of every record a run still holds: called when the process that holds the
    /// store's lock starts, so no run of an earlier process is alive. Returns how many.
    pub(crate) fn release_leases(&mut self, now: Timestamp) -> Result<u64, OpError> {
        let mut held = Vec::new();
        for entry in self.table(RECORDS)?.iter()? {
            let (_, value) = entry?;
            let record = decode_record(value.value())?;
            if record.status == Status::Processing && record.lease_until.is_some_and(|t| t > now) {
                held.push(record);
            }
        }
        for record in &mut held {
            record.lease_until = Some(now);
            let expiry = record.expires_at;
            self.put_record(record, Some(expiry))?;
        }
        Ok(held.len() as u64)
    }

    /// Appends a letter to the dead letters.
    pub(crate) fn dead_letter(&mut self, letter: &DeadLetter) -> Result<(), OpError> {
        if !self.keep_letter(letter)? {
            return Ok(());
        }
        // Handler failures are counted when the record is settled DEAD; poison never reaches a record.
        if letter.reason == DeadReason::Poison {
            self.bump(counter::POISON)?;
        }
        Ok(())
    }

    /// Keeps `letter` under the next letter id, unless a letter with its dedup id is kept already;
    /// says whether it was new.
    pub(crate) fn keep_letter(&mut self, letter: &DeadLetter) -> Result<bool, OpError> {
        let dedup = letter.dedup_id();
        if self.table_mut(DEAD_IDS)?.get(dedup.as_str())?.is_some() {
            return Ok(false);
        }
        let value = encode_letter(letter, self.settings.clock.now())?;
        let id = self.next_in(crate::schema::seq::DEAD)?;
        self.table_mut(DEAD)?.insert(id, value.as_slice())?;
        self.table_mut(DEAD_IDS)?.insert(dedup.as_str(), id)?;
        Ok(true)
    }

    /// Appends an offline Bot API call to the outbox under `id` (from the outbox sequence).
    pub(crate) fn append_outbox(
        &mut self,
        id: u64,
        entry: &StoredOutboxEntry,
    ) -> Result<(), OpError> {
        let value = serde_json::to_vec(entry)
            .map_err(|e| OpError::Fatal(format!("encoding an outbox entry: {e}")))?;
        self.table_mut(OUTBOX)?.insert(id, value.as_slice())?;
        Ok(())
    }
}
