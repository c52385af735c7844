//! Retention: what outlived its time leaves the store, through the writer like every other write.

use redb::ReadableTable;
use serde::{Deserialize, Serialize};
use tgq_core::record::Timestamp;
use tgq_core::PortError;

use crate::schema::{decode_outbox_entry, OUTBOX, RECORDS, RECORD_EXPIRY};
use crate::writer::{OpError, Tx};
use crate::EmbeddedStore;

/// What [`EmbeddedStore::purge_expired`] removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Purged {
    /// Records past their `expires_at`.
    pub records: u64,
    /// Outbox entries older than the store's TTL.
    pub outbox: u64,
    /// Audit entries past their `expires_at`.
    #[serde(default)]
    pub audit: u64,
    /// Broadcast jobs that ended more than [`KEEP_ENDED`](tgq_core::broadcast::KEEP_ENDED) ago, each with its recipients.
    #[serde(default)]
    pub broadcasts: u64,
}

impl EmbeddedStore {
    /// Removes every record past its `expires_at` (readers already treat them as absent, as
    /// DynamoDB's TTL would delete them), outbox entries older than the store's TTL, and the
    /// broadcast jobs that ended more than [`KEEP_ENDED`](tgq_core::broadcast::KEEP_ENDED) ago with their recipients, in one
    /// durable commit of the writer.
    pub async fn purge_expired(&self, now: Timestamp) -> Result<Purged, PortError> {
        let ttl = self.ttl;
        self.writer
            .run("retention purge", move |tx| {
                let records = tx.purge_records(now)?;
                let outbox = tx.purge_outbox(|at| at.plus(ttl) <= now)?;
                let audit = tx.purge_audit(now)?;
                let broadcasts = tx.purge_broadcasts(now)?;
                Ok(Purged {
                    records,
                    outbox,
                    audit,
                    broadcasts,
                })
            })
            .await
    }
}

impl Tx<'_> {
    /// Removes the records that expired at or before `now`; the expiry index names them.
    fn purge_records(&mut self, now: Timestamp) -> Result<u64, OpError> {
        let expired: Vec<(u64, String)> = self
            .table(RECORD_EXPIRY)?
            .range::<(u64, &str)>(..(now.0.saturating_add(1), ""))?
            .map(|entry| entry.map(|(key, _)| (key.value().0, key.value().1.to_owned())))
            .collect::<Result<_, _>>()?;
        if expired.is_empty() {
            return Ok(0);
        }
        let mut expiry = self.table_mut(RECORD_EXPIRY)?;
        for (expires_at, pk) in &expired {
            expiry.remove((*expires_at, pk.as_str()))?;
        }
        drop(expiry);
        let mut records = self.table_mut(RECORDS)?;
        for (_, pk) in &expired {
            records.remove(pk.as_str())?;
        }
        Ok(expired.len() as u64)
    }

    /// Removes outbox entries from the front while `is_old` says so: ids follow time.
    fn purge_outbox(&mut self, is_old: impl Fn(Timestamp) -> bool) -> Result<u64, OpError> {
        let mut old = Vec::new();
        for entry in self.table(OUTBOX)?.range::<u64>(..)? {
            let (id, value) = entry?;
            let stored = decode_outbox_entry(value.value())?;
            if !is_old(Timestamp(stored.at)) {
                break;
            }
            old.push(id.value());
        }
        if old.is_empty() {
            return Ok(0);
        }
        let mut table = self.table_mut(OUTBOX)?;
        for id in &old {
            table.remove(*id)?;
        }
        Ok(old.len() as u64)
    }
}
