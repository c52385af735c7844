//! The record store: the webhook's, the worker's and the operations' ports over two maps — the
//! update records and the group states — under one lock, so a settle and its state write are one
//! change.

use std::collections::HashMap;

use async_trait::async_trait;
use parking_lot::Mutex;
use tgq_core::audit::{newest, AuditEntry, AuditLog, AuditReader};
use tgq_core::ids::{BotId, RecordKey, StateKey};
use tgq_core::payment::{charge_pk, Charge, ChargeWrite};
use tgq_core::ports::{
    fenced_write, settled, within_item_limit, ChargeBook, Claim, ClaimRequest, Inserted, Lease,
    RecordReader, Reset, ResetRequest, Settlement, UpdateLedger, UpdateReset, UpdateStore,
};
use tgq_core::record::{ActionIntent, ActionOutcome, Status, Timestamp, UpdateRecord};
use tgq_core::state::StoredState;
use tgq_core::PortError;

use crate::Outage;

/// The record store: [`UpdateStore`], [`UpdateLedger`], [`UpdateReset`] and [`RecordReader`]
/// over a map, and the audit trail beside it, as DynamoDB keeps it in the records' table.
#[derive(Default)]
pub struct MemoryStore {
    tables: Mutex<Tables>,
    audit: Mutex<Vec<AuditEntry>>,
    /// Fails calls while on.
    pub outage: Outage,
}

#[derive(Default)]
struct Tables {
    records: HashMap<RecordKey, UpdateRecord>,
    states: HashMap<StateKey, StoredState>,
    /// The payments ledger, by the charge's key (`charge_pk`).
    charges: HashMap<String, Charge>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of a record, expired or not.
    pub fn record(&self, key: &RecordKey) -> Option<UpdateRecord> {
        self.tables.lock().records.get(key).cloned()
    }

    /// A copy of a group's state.
    pub fn state(&self, key: &StateKey) -> Option<StoredState> {
        self.tables.lock().states.get(key).cloned()
    }

    /// Every group's state.
    pub fn states(&self) -> Vec<(StateKey, StoredState)> {
        let tables = self.tables.lock();
        tables
            .states
            .iter()
            .map(|(key, state)| (key.clone(), state.clone()))
            .collect()
    }

    /// Overwrites a group's state, to stage another writer.
    pub fn put_state(&self, key: StateKey, state: StoredState) {
        self.tables.lock().states.insert(key, state);
    }

    /// Overwrites a record's status, to stage a crash between two writes.
    pub fn set_status(&self, key: &RecordKey, status: Status) {
        if let Some(record) = self.tables.lock().records.get_mut(key) {
            record.status = status;
        }
    }

    /// How many records there are.
    pub fn len(&self) -> usize {
        self.tables.lock().records.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One fenced write of a run.
    fn write(
        &self,
        lease: &Lease,
        outcomes: &[ActionOutcome],
        what: &'static str,
        change: impl FnOnce(&mut UpdateRecord),
    ) -> Result<(), PortError> {
        self.outage.check(what)?;
        let records = &mut self.tables.lock().records;
        let updated = fenced_write(records.get(&lease.key), lease, outcomes, what, change)?;
        records.insert(lease.key.clone(), updated);
        Ok(())
    }
}

#[async_trait]
impl UpdateStore for MemoryStore {
    async fn insert(&self, record: &UpdateRecord, now: Timestamp) -> Result<Inserted, PortError> {
        self.outage.check("store insert")?;
        within_item_limit(record, "store insert")?;
        let records = &mut self.tables.lock().records;
        match records.get(&record.key) {
            Some(existing) if !existing.is_expired(now) => Ok(Inserted::Exists(existing.status)),
            _ => {
                records.insert(record.key.clone(), record.clone());
                Ok(Inserted::New)
            }
        }
    }
}

#[async_trait]
impl UpdateLedger for MemoryStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, PortError> {
        self.outage.check("store claim")?;
        let tables = &mut *self.tables.lock();
        let state = tables.states.get(&request.state_key()).cloned();
        let (claim, updated) = request.apply(tables.records.get(&request.key).cloned(), state);
        if let Some(record) = updated {
            within_item_limit(&record, "store claim")?;
            tables.records.insert(request.key.clone(), record);
        }
        Ok(claim)
    }

    async fn record_intent(
        &self,
        lease: &Lease,
        intent: &ActionIntent,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError> {
        self.write(lease, outcomes, "store record_intent", |record| {
            record.note_intent(intent)
        })
    }

    async fn record_outcomes(
        &self,
        lease: &Lease,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError> {
        self.write(lease, outcomes, "store record_outcomes", |_| {})
    }

    async fn settle(
        &self,
        lease: &Lease,
        settlement: &Settlement,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError> {
        self.outage.check("store settle")?;
        let tables = &mut *self.tables.lock();
        let state_key = settlement.state().map(|write| write.key.clone());
        let stored = state_key.as_ref().and_then(|key| tables.states.get(key));
        let pks: Vec<String> = settlement
            .charges()
            .iter()
            .map(|write| charge_pk(&lease.key.bot_id, &write.entry.id))
            .collect();
        let found: Vec<Option<Charge>> = pks
            .iter()
            .map(|pk| tables.charges.get(pk).cloned())
            .collect();
        let (record, state) = settled(
            tables.records.get(&lease.key),
            (stored, &found),
            lease,
            settlement,
            outcomes,
        )?;
        tables.records.insert(lease.key.clone(), record);
        if let (Some(key), Some(state)) = (state_key, state) {
            tables.states.insert(key, state);
        }
        for (pk, write) in pks.into_iter().zip(settlement.charges()) {
            tables.charges.insert(pk, write.entry.clone());
        }
        Ok(())
    }

    async fn charge(&self, bot: &BotId, id: &str) -> Result<Option<Charge>, PortError> {
        self.outage.check("store charge")?;
        Ok(self.tables.lock().charges.get(&charge_pk(bot, id)).cloned())
    }
}

#[async_trait]
impl ChargeBook for MemoryStore {
    async fn entry(&self, bot: &BotId, id: &str) -> Result<Option<Charge>, PortError> {
        UpdateLedger::charge(self, bot, id).await
    }

    async fn write_charge(&self, bot: &BotId, write: &ChargeWrite) -> Result<(), PortError> {
        self.outage.check("store charge write")?;
        let charges = &mut self.tables.lock().charges;
        let pk = charge_pk(bot, &write.entry.id);
        if !write.expect.holds(charges.get(&pk)) {
            return Err(PortError::Credited {
                what: "store charge write",
                charge: write.entry.id.clone(),
            });
        }
        charges.insert(pk, write.entry.clone());
        Ok(())
    }
}

#[async_trait]
impl RecordReader for MemoryStore {
    async fn get(
        &self,
        key: &RecordKey,
        now: Timestamp,
    ) -> Result<Option<UpdateRecord>, PortError> {
        self.outage.check("store get")?;
        Ok(self
            .tables
            .lock()
            .records
            .get(key)
            .filter(|r| !r.is_expired(now))
            .cloned())
    }
}

#[async_trait]
impl UpdateReset for MemoryStore {
    async fn reset(&self, request: &ResetRequest) -> Result<Reset, PortError> {
        self.outage.check("store reset")?;
        let mut tables = self.tables.lock();
        let (reset, updated) = request.apply(tables.records.get(&request.key).cloned());
        if let Some(record) = updated {
            tables.records.insert(request.key.clone(), record);
        }
        Ok(reset)
    }
}

#[async_trait]
impl AuditLog for MemoryStore {
    async fn append(&self, entry: &AuditEntry) -> Result<(), PortError> {
        self.outage.check("audit append")?;
        self.audit.lock().push(entry.clone());
        Ok(())
    }
}

#[async_trait]
impl AuditReader for MemoryStore {
    async fn recent(&self, max: usize, now: Timestamp) -> Result<Vec<AuditEntry>, PortError> {
        self.outage.check("audit read")?;
        Ok(newest(self.audit.lock().clone(), max, now))
    }
}
