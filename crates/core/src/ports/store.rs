//! What the webhook may do to records, and reading them back: create one, or create one with its queue
//! message in one durable write.

use async_trait::async_trait;

use super::OutgoingMessage;
use crate::error::PortError;
use crate::ids::RecordKey;
use crate::record::{Status, Timestamp, UpdateRecord};

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
