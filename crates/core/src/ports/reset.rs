//! The operator's restart of an update's record, so that a replayed dead letter runs again.

use async_trait::async_trait;

use crate::error::PortError;
use crate::ids::RecordKey;
use crate::record::{Status, Timestamp, UpdateRecord};

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
