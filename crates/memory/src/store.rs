//! The record store: the webhook's, the worker's and the operations' ports over one map.

use std::collections::HashMap;

use async_trait::async_trait;
use parking_lot::Mutex;
use tgq_core::ids::RecordKey;
use tgq_core::ports::{
    Claim, ClaimRequest, Inserted, RecordReader, Settlement, UpdateLedger, UpdateStore,
};
use tgq_core::record::{ActionIntent, Status, Timestamp, UpdateRecord};
use tgq_core::PortError;

use crate::Outage;

/// The record store: [`UpdateStore`], [`UpdateLedger`] and [`RecordReader`] over a map.
#[derive(Default)]
pub struct MemoryStore {
    records: Mutex<HashMap<RecordKey, UpdateRecord>>,
    /// Fails every call while on.
    pub outage: Outage,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of a record, expired or not.
    pub fn record(&self, key: &RecordKey) -> Option<UpdateRecord> {
        self.records.lock().get(key).cloned()
    }

    /// Overwrites a record's status, to stage a crash between two writes.
    pub fn set_status(&self, key: &RecordKey, status: Status) {
        if let Some(record) = self.records.lock().get_mut(key) {
            record.status = status;
        }
    }

    /// How many records there are.
    pub fn len(&self) -> usize {
        self.records.lock().len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl UpdateStore for MemoryStore {
    async fn insert(&self, record: &UpdateRecord, now: Timestamp) -> Result<Inserted, PortError> {
        self.outage.check("store insert")?;
        let mut records = self.records.lock();
        match records.get(&record.key) {
            Some(existing) if !existing.is_expired(now) => Ok(Inserted::Exists(existing.status)),
            _ => {
                records.insert(record.key.clone(), record.clone());
                Ok(Inserted::New)
            }
        }
    }

    async fn mark_queued(&self, key: &RecordKey) -> Result<(), PortError> {
        self.outage.check("store mark_queued")?;
        if let Some(record) = self.records.lock().get_mut(key) {
            if record.status == Status::Received {
                record.status = Status::Queued;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl UpdateLedger for MemoryStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, PortError> {
        self.outage.check("store claim")?;
        let mut records = self.records.lock();
        let (claim, updated) = request.apply(records.get(&request.key).cloned());
        if let Some(record) = updated {
            records.insert(request.key.clone(), record);
        }
        Ok(claim)
    }

    async fn record_intent(&self, key: &RecordKey, intent: &ActionIntent) -> Result<(), PortError> {
        self.outage.check("store record_intent")?;
        let mut records = self.records.lock();
        let record = records
            .get_mut(key)
            .ok_or_else(|| PortError::rejected("store record_intent", "no such record"))?;
        record.note_intent(intent);
        Ok(())
    }

    async fn record_result(
        &self,
        key: &RecordKey,
        seq: u32,
        result: &str,
    ) -> Result<(), PortError> {
        self.outage.check("store record_result")?;
        let mut records = self.records.lock();
        let noted = records
            .get_mut(key)
            .is_some_and(|record| record.note_result(seq, result));
        if !noted {
            return Err(PortError::rejected(
                "store record_result",
                "no such action intent",
            ));
        }
        Ok(())
    }

    async fn settle(&self, key: &RecordKey, outcome: &Settlement) -> Result<(), PortError> {
        self.outage.check("store settle")?;
        let mut records = self.records.lock();
        let record = records
            .get_mut(key)
            .ok_or_else(|| PortError::rejected("store settle", "no such record"))?;
        outcome.apply(record);
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
            .records
            .lock()
            .get(key)
            .filter(|r| !r.is_expired(now))
            .cloned())
    }
}
