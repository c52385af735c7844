//! The ports of `tgq-core` on the embedded store: writes go through the group-committing writer,
//! reads use snapshot read transactions on the blocking pool.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use tgq_core::ids::{BotId, RecordKey};
use tgq_core::payment::{charge_pk, Charge};
use tgq_core::ports::{
    AtomicIngest, Claim, ClaimRequest, DeadLetter, DeadLetterReader, DeadLetters, Inserted, Lease,
    OutgoingMessage, QueueConsumer, QueueRecord, ReceiptHandle, RecordReader, Settlement,
    UpdateLedger, UpdateQueue, UpdateStore, Visibility,
};
use tgq_core::record::{ActionIntent, ActionOutcome, Status, Timestamp, UpdateRecord};
use tgq_core::PortError;

use crate::handle::{Db, DbHandle};
use crate::inspect::read_dead_letters;
use crate::schema::{decode_record, CHARGES, RECORDS};
use crate::{EmbeddedStore, StoreError};

/// The longest a waiting receive naps while a message is hidden. It is woken by every commit that
/// may make a message deliverable, and it naps only until the next hidden message shows again
/// (which nothing announces); this bound covers a clock that is not the system's (tests move
/// theirs).
const RECEIVE_POLL: Duration = Duration::from_secs(5);

/// A store failure at a port: unreadable data is refused, anything else may pass.
fn port_error(what: &'static str, error: StoreError) -> PortError {
    match error {
        StoreError::Corrupt { .. } => PortError::rejected(what, error),
        other => PortError::unavailable(what, other),
    }
}

/// Runs a read on the blocking pool.
pub(crate) async fn read<T, F>(db: &Arc<DbHandle>, what: &'static str, f: F) -> Result<T, PortError>
where
    T: Send + 'static,
    F: FnOnce(&Db) -> Result<T, StoreError> + Send + 'static,
{
    let db = db.clone();
    tokio::task::spawn_blocking(move || f(&*db.get()?))
        .await
        .map_err(|e| PortError::unavailable(what, e))?
        .map_err(|e| port_error(what, e))
}

#[async_trait]
impl UpdateStore for EmbeddedStore {
    async fn insert(&self, record: &UpdateRecord, now: Timestamp) -> Result<Inserted, PortError> {
        let record = record.clone();
        self.writer
            .run("store insert", move |tx| tx.insert(&record, now))
            .await
    }
}

#[async_trait]
impl AtomicIngest for EmbeddedStore {
    async fn insert_queued(
        &self,
        record: &UpdateRecord,
        now: Timestamp,
        message: &OutgoingMessage,
    ) -> Result<Inserted, PortError> {
        // Stored as QUEUED at once: its queue message commits with it or not at all.
        let record = UpdateRecord {
            status: Status::Queued,
            ..record.clone()
        };
        let message = message.clone();
        self.writer
            .run("store insert_queued", move |tx| {
                let inserted = tx.insert(&record, now)?;
                if inserted == Inserted::New {
                    tx.enqueue(&message)?;
                }
                Ok(inserted)
            })
            .await
    }
}

#[async_trait]
impl UpdateLedger for EmbeddedStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, PortError> {
        let request = request.clone();
        self.writer
            .run("store claim", move |tx| tx.claim(&request))
            .await
    }

    async fn record_intent(
        &self,
        lease: &Lease,
        intent: &ActionIntent,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError> {
        let (lease, intent, outcomes) = (lease.clone(), intent.clone(), outcomes.to_vec());
        self.writer
            .run("store record_intent", move |tx| {
                tx.record_intent(&lease, &intent, &outcomes)
            })
            .await
    }

    async fn record_outcomes(
        &self,
        lease: &Lease,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError> {
        let (lease, outcomes) = (lease.clone(), outcomes.to_vec());
        self.writer
            .run("store record_outcomes", move |tx| {
                tx.record_outcomes(&lease, &outcomes)
            })
            .await
    }

    async fn settle(
        &self,
        lease: &Lease,
        settlement: &Settlement,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError> {
        let (lease, settlement, outcomes) = (lease.clone(), settlement.clone(), outcomes.to_vec());
        self.writer
            .run("store settle", move |tx| {
                tx.settle(&lease, &settlement, &outcomes)
            })
            .await
    }

    async fn charge(&self, bot: &BotId, id: &str) -> Result<Option<Charge>, PortError> {
        let pk = charge_pk(bot, id);
        read(&self.db, "store charge", move |db| {
            let read = db.begin_read()?;
            let charges = read.open_table(CHARGES)?;
            let Some(value) = charges.get(pk.as_str())? else {
                return Ok(None);
            };
            serde_json::from_slice(value.value())
                .map(Some)
                .map_err(|e| StoreError::corrupt(format!("charge {pk}"))(e.into()))
        })
        .await
    }
}

#[async_trait]
impl RecordReader for EmbeddedStore {
    async fn get(
        &self,
        key: &RecordKey,
        now: Timestamp,
    ) -> Result<Option<UpdateRecord>, PortError> {
        let pk = key.pk();
        let record = read(&self.db, "store get", move |db| {
            let read = db.begin_read()?;
            let table = read.open_table(RECORDS)?;
            let Some(value) = table.get(pk.as_str())? else {
                return Ok(None);
            };
            let record = decode_record(value.value())
                .map_err(StoreError::corrupt(format!("record {pk}")))?;
            Ok(Some(record))
        })
        .await?;
        Ok(record.filter(|r| !r.is_expired(now)))
    }
}

#[async_trait]
impl UpdateQueue for EmbeddedStore {
    async fn enqueue(&self, message: &OutgoingMessage) -> Result<(), PortError> {
        let message = message.clone();
        self.writer
            .run("queue send", move |tx| tx.enqueue(&message))
            .await
    }
}

#[async_trait]
impl Visibility for EmbeddedStore {
    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        after: Duration,
    ) -> Result<(), PortError> {
        let receipt = receipt.clone();
        self.writer
            .run("queue change_visibility", move |tx| {
                tx.change_visibility(&receipt, after)
            })
            .await
    }
}

impl EmbeddedStore {
    /// Deletes every message of `receipts` in one writer operation, as SQS's DeleteMessageBatch
    /// does: a receipt no longer current (the message came back and was received again, or is
    /// gone) is passed over, as [`QueueConsumer::delete`] passes it over.
    pub async fn delete_all(&self, receipts: Vec<ReceiptHandle>) -> Result<(), PortError> {
        self.writer
            .run("queue delete", move |tx| {
                receipts.iter().try_for_each(|receipt| tx.delete(receipt))
            })
            .await
    }

    /// [`QueueConsumer::receive`] that also ends, with nothing, once `stop` completes. `stop` is
    /// only looked at while the receive naps, never while a receive is being committed: a receive
    /// abandoned after its commit would leave its messages hidden until their visibility timeout.
    /// So a caller that must stop promptly can wait long.
    pub async fn receive_until(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<Vec<QueueRecord>, PortError> {
        tokio::pin!(stop);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before looking, so a send committed after the look still wakes us.
            let woken = self.writer.notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let (batch, next_visible) = self
                .writer
                .run("queue receive", move |tx| tx.receive(max, visibility))
                .await?;
            let now = tokio::time::Instant::now();
            if !batch.is_empty() || max == 0 || now >= deadline {
                return Ok(batch);
            }
            // Nothing hidden: only a commit can bring a message, and every such commit wakes us.
            let until_visible = next_visible.map_or(Duration::MAX, |at| {
                (at.since(self.clock.now()) + Duration::from_millis(1)).min(RECEIVE_POLL)
            });
            let nap = (deadline - now).min(until_visible);
            // Woken by a commit, or the nap is over: look again. Stopped: nothing was received.
            tokio::select! {
                _ = tokio::time::timeout(nap, woken) => {}
                () = &mut stop => return Ok(Vec::new()),
            }
        }
    }
}

#[async_trait]
impl QueueConsumer for EmbeddedStore {
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<QueueRecord>, PortError> {
        self.receive_until(max, visibility, wait, std::future::pending())
            .await
    }

    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), PortError> {
        let receipt = receipt.clone();
        self.writer
            .run("queue delete", move |tx| tx.delete(&receipt))
            .await
    }
}

#[async_trait]
impl DeadLetters for EmbeddedStore {
    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), PortError> {
        let letter = letter.clone();
        self.writer
            .run("dead-letter send", move |tx| tx.dead_letter(&letter))
            .await
    }
}

#[async_trait]
impl DeadLetterReader for EmbeddedStore {
    async fn peek(&self, max: usize) -> Result<Vec<DeadLetter>, PortError> {
        read(&self.db, "dead-letter peek", move |db| {
            read_dead_letters(db, max)
        })
        .await
    }
}
