//! Reading the store for operations (`tgq status`, `tgq outbox`, `tgq dlq`): snapshot reads on the
//! calling thread, never through the writer.

use std::time::Duration;

use redb::{ReadableTable, ReadableTableMetadata};
use serde::{Deserialize, Serialize};
use tgq_core::envelope::Envelope;
use tgq_core::fifo::MessageState;
use tgq_core::ids::{BotId, RecordKey};
use tgq_core::ports::DeadLetter;
use tgq_core::record::Timestamp;

use crate::handle::Db;
use crate::queue::QueueDepth;
use crate::schema::{
    counter, decode_letter, decode_record, unframe, BROADCAST_RECIPIENTS, DEAD, META, OUTBOX,
    QUEUE, RECORDS,
};
use crate::{EmbeddedStore, StoreError};

/// Queue depths and table sizes, for `tgq status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStats {
    /// Messages on the queue that no receiver holds.
    pub pending: u64,
    /// Messages a receiver holds (delivered, visibility timeout not over).
    pub in_flight: u64,
    /// How long ago the oldest message still on the queue (held or not) was sent, as SQS's
    /// `ApproximateAgeOfOldestMessage`; `None` when the queue is empty.
    #[serde(rename = "oldest_pending_age_ms", with = "millis")]
    pub oldest_pending_age: Option<Duration>,
    /// Dead letters.
    pub dead: u64,
    /// Outbox entries.
    pub outbox: u64,
    /// Stored update records, expired ones included until they are purged.
    pub records: u64,
    /// Recipients of the broadcast jobs kept: those not ended, and those that ended within
    /// `KEEP_ENDED` (30 days).
    #[serde(default)]
    pub broadcast_recipients: u64,
}

/// The oldest message on the queue and what its record says: the update at the head of the chat that
/// has waited longest, which `tgq status` names so that an operator sees what holds a chat back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OldestPending {
    /// The bot it belongs to.
    pub bot_id: String,
    /// Its ordering group inside the bot (`chat:42`, `user:7`, …): the chat it holds back.
    pub group: String,
    /// Its update id, when the body names one.
    pub update_id: Option<i64>,
    /// How long ago it was sent to the queue.
    #[serde(rename = "age_ms", with = "millis")]
    pub age: Option<Duration>,
    /// Deliveries so far.
    pub receives: u32,
    /// Its record's status (`RECEIVED`, `RETRYING`, …), when the record is there.
    pub status: Option<String>,
    /// Handler runs spent on it.
    pub attempts: u32,
    /// The last run's error, when one failed.
    pub last_error: Option<String>,
    /// A run holds it now (delivered, its visibility not over).
    pub running: bool,
    /// When it is delivered again, if it is hidden now (a run holds it, or it backs off); `None`
    /// when it can be delivered at once.
    #[serde(rename = "runs_again_in_ms", with = "millis")]
    pub runs_again_in: Option<Duration>,
}

/// One Bot API call the offline outbox accepted, as `tgq outbox` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutboxEntry {
    /// The outbox's id, also the `message_id` the offline answer gave.
    pub id: u64,
    /// The bot whose handler made the call, when known: local mode's bots share one outbox.
    pub bot_id: Option<String>,
    /// The chat the call addressed, when it named one.
    pub chat_id: Option<i64>,
    /// The update whose handler made the call, when known.
    pub update_id: Option<i64>,
    /// The call's position in its handler run, when known.
    pub seq: Option<u32>,
    /// The Bot API method.
    pub method: String,
    /// The `text` parameter, when there is one.
    pub text: Option<String>,
    /// Every parameter, as sent.
    pub params: serde_json::Value,
    /// When the call was made.
    pub at: Timestamp,
}

/// Durable totals since the store was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Updates stored for the first time.
    pub received: u64,
    /// Inserts that found the update already stored.
    pub duplicates: u64,
    /// Bodies that were not updates, dead-lettered with reason `poison`.
    pub poison: u64,
    /// Handler runs settled `DONE`.
    pub processed: u64,
    /// Handler runs settled `RETRYING`.
    pub retried: u64,
    /// Updates settled `DEAD`, plus messages redriven after `max_receive_count` receives.
    pub dead_lettered: u64,
    /// At-least-once actions (sends and steps) made again because an earlier run recorded their
    /// intent but no result: each may have happened twice (counted by the worker loop through
    /// [`EmbeddedStore::count_resent`]).
    pub resent_after_unknown_outcome: u64,
    /// At-most-once actions not sent again because an earlier run left their outcome unknown:
    /// marked uncertain on their records, for a person to reconcile.
    #[serde(default)]
    pub uncertain_sends: u64,
    /// Writes refused because their run's lease had been taken over by another run.
    #[serde(default)]
    pub fenced_writes: u64,
    /// Updates settled `DONE` because their recipient is gone (blocked the bot, deleted their
    /// account, private chat not found), not dead-lettered; not counted in `processed`.
    #[serde(default)]
    pub recipient_gone: u64,
}

impl Counters {
    /// What happened between `earlier` and these totals.
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            received: self.received.saturating_sub(earlier.received),
            duplicates: self.duplicates.saturating_sub(earlier.duplicates),
            poison: self.poison.saturating_sub(earlier.poison),
            processed: self.processed.saturating_sub(earlier.processed),
            retried: self.retried.saturating_sub(earlier.retried),
            dead_lettered: self.dead_lettered.saturating_sub(earlier.dead_lettered),
            resent_after_unknown_outcome: self
                .resent_after_unknown_outcome
                .saturating_sub(earlier.resent_after_unknown_outcome),
            uncertain_sends: self.uncertain_sends.saturating_sub(earlier.uncertain_sends),
            fenced_writes: self.fenced_writes.saturating_sub(earlier.fenced_writes),
            recipient_gone: self.recipient_gone.saturating_sub(earlier.recipient_gone),
        }
    }
}

/// How long a status read waits for the writer thread to look at its index of the queue before
/// reading the queue's table instead.
const LOOK_PATIENCE: Duration = Duration::from_millis(250);

impl EmbeddedStore {
    /// Queue depths and table sizes at `now`. Blocking: reads on the calling thread.
    ///
    /// The queue's depth comes from the writer's index of it, so a status read costs the same
    /// whatever the backlog: reading every queued message instead, a status polled during a drain
    /// would take most of the process's CPU. It comes from the queue's table when the writer
    /// cannot answer within [`LOOK_PATIENCE`] (opened read-only, a failed batch, a stalled disk).
    pub fn stats(&self, now: Timestamp) -> Result<StoreStats, StoreError> {
        let read = self.db.get()?.begin_read()?;
        let depth = match self
            .writer
            .look(LOOK_PATIENCE, move |index| index.depth(now))
        {
            Some(depth) => depth,
            None => QueueDepth::read(&read, now)?,
        };
        Ok(StoreStats {
            pending: depth.messages.saturating_sub(depth.in_flight),
            in_flight: depth.in_flight,
            oldest_pending_age: depth.first_sent_at.map(|sent| now.since(sent)),
            dead: read.open_table(DEAD)?.len()?,
            outbox: read.open_table(OUTBOX)?.len()?,
            records: read.open_table(RECORDS)?.len()?,
            broadcast_recipients: read.open_table(BROADCAST_RECIPIENTS)?.len()?,
        })
    }

    /// The oldest message on the queue (the first in send order), with its record's attempts and
    /// last error; `None` when the queue is empty. Blocking: reads on the calling thread, one
    /// message whatever the backlog.
    pub fn oldest_pending(&self, now: Timestamp) -> Result<Option<OldestPending>, StoreError> {
        let read = self.db.get()?.begin_read()?;
        let queue = read.open_table(QUEUE)?;
        let Some((seq, value)) = queue.first()? else {
            return Ok(None);
        };
        let (message, body) = unframe::<MessageState>(value.value()).map_err(
            StoreError::corrupt(format!("queue message {}", seq.value())),
        )?;
        let (bot_id, group) = match message.group.split() {
            Ok((bot, group)) => (bot.to_string(), group.to_string()),
            Err(_) => (String::from("?"), message.group.to_string()),
        };
        let update_id = Envelope::parse_queued(body).ok().map(|e| e.update_id);
        let record = match (BotId::new(bot_id.clone()), update_id) {
            (Ok(bot), Some(update_id)) => {
                let pk = RecordKey::new(bot, update_id).pk();
                match read.open_table(RECORDS)?.get(pk.as_str())? {
                    Some(value) => Some(
                        decode_record(value.value())
                            .map_err(StoreError::corrupt(format!("record {pk}")))?,
                    ),
                    None => None,
                }
            }
            _ => None,
        };
        Ok(Some(OldestPending {
            bot_id,
            group,
            update_id: update_id.map(|id| id.0),
            age: Some(now.since(message.sent_at)),
            receives: message.receive_count,
            status: record.as_ref().map(|r| r.status.to_string()),
            attempts: record.as_ref().map_or(0, |r| r.attempts),
            last_error: record.and_then(|r| r.last_error),
            running: message.in_flight(now) && message.held,
            runs_again_in: (message.visible_at > now).then(|| message.visible_at.since(now)),
        }))
    }

    /// Up to `limit` outbox entries, oldest first. Blocking: reads on the calling thread.
    pub fn outbox(&self, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        self.outbox_after(0, limit)
    }

    /// Up to `limit` outbox entries whose id is above `after`, oldest first: what a reader that
    /// has seen every entry up to `after` has not. Blocking: reads on the calling thread.
    pub fn outbox_after(&self, after: u64, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        let read = self.db.get()?.begin_read()?;
        let table = read.open_table(OUTBOX)?;
        let mut entries = Vec::new();
        for entry in table.range::<u64>(after.saturating_add(1)..)?.take(limit) {
            entries.push(crate::updates::outbox_entry(entry?)?);
        }
        Ok(entries)
    }

    /// Up to `limit` dead letters, oldest first, left in place. Blocking: reads on the calling thread.
    pub fn dead_letters(&self, limit: usize) -> Result<Vec<DeadLetter>, StoreError> {
        read_dead_letters(&*self.db.get()?, limit)
    }

    /// The durable totals. Blocking: reads on the calling thread.
    pub fn counters(&self) -> Result<Counters, StoreError> {
        let read = self.db.get()?.begin_read()?;
        let table = read.open_table(META)?;
        let get = |name: &str| -> Result<u64, StoreError> {
            Ok(table.get(name)?.map_or(0, |v| v.value()))
        };
        Ok(Counters {
            received: get(counter::RECEIVED)?,
            duplicates: get(counter::DUPLICATES)?,
            poison: get(counter::POISON)?,
            processed: get(counter::PROCESSED)?,
            retried: get(counter::RETRIED)?,
            dead_lettered: get(counter::DEAD_LETTERED)?,
            resent_after_unknown_outcome: get(counter::RESENT)?,
            uncertain_sends: get(counter::UNCERTAIN)?,
            fenced_writes: get(counter::FENCED)?,
            recipient_gone: get(counter::RECIPIENT_GONE)?,
        })
    }

    /// Write transactions committed since open (for benchmarks: ops per commit).
    pub fn commits(&self) -> u64 {
        self.writer.commits()
    }

    /// Operations carried by those commits since open.
    pub fn ops_committed(&self) -> u64 {
        self.writer.ops_committed()
    }
}

/// Up to `limit` dead letters, oldest first.
pub(crate) fn read_dead_letters(db: &Db, limit: usize) -> Result<Vec<DeadLetter>, StoreError> {
    let read = db.begin_read()?;
    let table = read.open_table(DEAD)?;
    let mut letters = Vec::new();
    for entry in table.range::<u64>(..)?.take(limit) {
        let (id, value) = entry?;
        letters.push(
            decode_letter(value.value())
                .map_err(StoreError::corrupt(format!("dead letter {}", id.value())))?,
        );
    }
    Ok(letters)
}

/// An optional duration as whole milliseconds in JSON.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}
