//! The embedded durable store of `tgq local` (DESIGN §6): update records, the FIFO updates queue, the
//! dead letters, the offline outbox and the counters, in one redb file, with every port of
//! `tgq-core` implemented on it with the in-memory adapters' semantics.
//!
//! Every change acknowledged to a caller is committed with `Durability::Immediate` (fsync) before
//! the call returns. All writes go through one writer thread that commits whatever queued up while
//! its previous commit was syncing in a single transaction (group commit), so concurrent webhook
//! calls share fsyncs. Reads use redb's snapshot read transactions on the blocking pool.

#![warn(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use redb::{
    Builder, Database, DatabaseError, Durability, ReadableDatabase, ReadableTable,
    ReadableTableMetadata,
};
use serde::Serialize;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::ports::DeadLetter;
use tgq_core::record::Timestamp;

mod offline;
mod ports;
mod queue;
mod records;
mod schema;
mod writer;

pub use offline::OfflineBotApi;
pub use queue::DEDUP_WINDOW;

use queue::QueueIndex;
use schema::{
    counter, decode_letter, decode_outbox_entry, seq, CodecError, DEAD, DEDUP, META, OUTBOX, QUEUE,
    RECORDS, RECORD_EXPIRY, SCHEMA_1_SEQUENCES, SCHEMA_VERSION,
};
use writer::{Settings, Writer};

/// The database file's name inside the data directory.
pub const FILE_NAME: &str = "tgq.redb";

/// redb's page cache; local mode's working set is small.
const CACHE_BYTES: usize = 64 * 1024 * 1024;

/// How the store is configured.
#[derive(Clone)]
pub struct StoreOptions {
    /// How long outbox entries are kept by [`EmbeddedStore::purge_expired`] (records carry their own
    /// `expires_at`). Default: 7 days, as records.
    pub ttl: Duration,
    /// A message received this many times without being deleted goes to the dead letters on its
    /// next receive (SQS's redrive `maxReceiveCount`). Default: 30.
    pub max_receive_count: u32,
    /// The clock for queue sends, receives and visibility, and for outbox times.
    pub clock: Arc<dyn Clock>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            ttl: tgq_core::defaults::RECORD_TTL,
            max_receive_count: 30,
            clock: Arc::new(SystemClock),
        }
    }
}

/// Why the store could not be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data directory could not be created.
    #[error("cannot create the data directory {}", path.display())]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Another store (in this process or another) has the file open.
    #[error("{} is already open: is `tgq local` already running on this data directory?", path.display())]
    AlreadyOpen {
        /// The database file.
        path: PathBuf,
    },
    /// The file could not be opened as a database.
    #[error("cannot open the database {}", path.display())]
    Open {
        /// The database file.
        path: PathBuf,
        /// redb's reason.
        #[source]
        source: DatabaseError,
    },
    /// The file was written by a version of tgq with another layout.
    #[error(
        "{} has store schema {found}; this tgq reads schema {expected} (use another --data-dir, or move this one away)",
        path.display()
    )]
    Schema {
        /// The database file.
        path: PathBuf,
        /// The schema in the file.
        found: u64,
        /// The schema this build reads.
        expected: u64,
    },
    /// A read or write of the database failed.
    #[error("the embedded store failed")]
    Storage(#[source] redb::Error),
    /// A stored value cannot be read back.
    #[error("stored {what} is unreadable: {reason}")]
    Corrupt {
        /// Which value.
        what: String,
        /// Why.
        reason: String,
    },
    /// The writer thread could not be started.
    #[error("cannot start the store's writer thread")]
    Thread(#[source] std::io::Error),
}

impl StoreError {
    /// Turns a decoding failure of the value named `what` into [`StoreError::Corrupt`].
    pub(crate) fn corrupt(what: String) -> impl FnOnce(CodecError) -> StoreError {
        move |e| StoreError::Corrupt {
            what,
            reason: e.to_string(),
        }
    }
}

macro_rules! storage_from {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Storage(e.into())
            }
        }
    )*};
}
storage_from!(
    redb::Error,
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::SetDurabilityError
);

/// Queue depths and table sizes, for `tgq status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    /// Messages on the queue that no receiver holds.
    pub pending: u64,
    /// Messages a receiver holds (delivered, visibility timeout not over).
    pub in_flight: u64,
    /// How long ago the oldest message still on the queue (held or not) was sent, as SQS's
    /// `ApproximateAgeOfOldestMessage`; `None` when the queue is empty.
    #[serde(rename = "oldest_pending_age_ms", serialize_with = "duration_ms")]
    pub oldest_pending_age: Option<Duration>,
    /// Dead letters.
    pub dead: u64,
    /// Outbox entries.
    pub outbox: u64,
    /// Stored update records, expired ones included until they are purged.
    pub records: u64,
}

/// One Bot API call the offline outbox accepted, as `tgq outbox` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutboxEntry {
    /// The outbox's id, also the `message_id` the offline answer gave.
    pub id: u64,
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
    #[serde(serialize_with = "timestamp_ms")]
    pub at: Timestamp,
}

/// Durable totals since the store was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
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
    /// At-least-once sends repeated because an earlier run recorded their intent but no result:
    /// each may have reached Telegram twice (counted by the worker loop through
    /// [`EmbeddedStore::count_resent`]).
    pub resent_after_unknown_outcome: u64,
}

/// What [`EmbeddedStore::purge_expired`] removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Purged {
    /// Records past their `expires_at`.
    pub records: u64,
    /// Outbox entries older than the store's TTL.
    pub outbox: u64,
}

/// The embedded store. Share it as `Arc<EmbeddedStore>`; it implements every port.
pub struct EmbeddedStore {
    // Dropped first: its drop waits for the writer thread, which holds the last other handle on the
    // database, so the file is closed (and its lock released) when the store is gone.
    writer: Writer,
    db: Arc<Database>,
    ttl: Duration,
    clock: Arc<dyn Clock>,
}

impl EmbeddedStore {
    /// Opens (creating it if needed) the store in `data_dir/tgq.redb`. Fails with
    /// [`StoreError::AlreadyOpen`] when another store has the file open. In-flight messages keep
    /// their visibility across a reopen: they become visible again when it ends.
    pub fn open(data_dir: &Path, options: StoreOptions) -> Result<Arc<EmbeddedStore>, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.to_owned(),
            source,
        })?;
        let path = data_dir.join(FILE_NAME);
        let db = Builder::new()
            .set_cache_size(CACHE_BYTES)
            .create(&path)
            .map_err(|source| match source {
                DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
                    StoreError::AlreadyOpen { path: path.clone() }
                }
                source => StoreError::Open {
                    path: path.clone(),
                    source,
                },
            })?;
        prepare(&db, &path)?;
        let queue = QueueIndex::load(&db)?;
        let db = Arc::new(db);
        let settings = Settings {
            max_receive_count: options.max_receive_count,
            clock: options.clock.clone(),
        };
        let writer = Writer::start(db.clone(), queue, settings).map_err(StoreError::Thread)?;
        Ok(Arc::new(EmbeddedStore {
            writer,
            db,
            ttl: options.ttl,
            clock: options.clock,
        }))
    }

    /// Queue depths and table sizes at `now`. Blocking: reads on the calling thread.
    pub fn stats(&self, now: Timestamp) -> Result<StoreStats, StoreError> {
        let read = self.db.begin_read()?;
        let messages = queue::read_messages(&read)?;
        let (pending, in_flight, oldest) =
            QueueIndex::census(messages.into_iter().map(|(_, message)| message), now);
        Ok(StoreStats {
            pending,
            in_flight,
            oldest_pending_age: oldest.map(|sent| now.since(sent)),
            dead: read.open_table(DEAD)?.len()?,
            outbox: read.open_table(OUTBOX)?.len()?,
            records: read.open_table(RECORDS)?.len()?,
        })
    }

    /// Up to `limit` outbox entries, oldest first. Blocking: reads on the calling thread.
    pub fn outbox(&self, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        let read = self.db.begin_read()?;
        let table = read.open_table(OUTBOX)?;
        let mut entries = Vec::new();
        for entry in table.range::<u64>(..)?.take(limit) {
            let (id, value) = entry?;
            let stored = decode_outbox_entry(value.value())
                .map_err(StoreError::corrupt(format!("outbox entry {}", id.value())))?;
            entries.push(OutboxEntry {
                id: id.value(),
                chat_id: stored.chat_id,
                update_id: stored.update_id,
                seq: stored.seq,
                method: stored.method,
                text: stored.text,
                params: stored.params,
                at: Timestamp(stored.at),
            });
        }
        Ok(entries)
    }

    /// Up to `limit` dead letters, oldest first, left in place. Blocking: reads on the calling thread.
    pub fn dead_letters(&self, limit: usize) -> Result<Vec<DeadLetter>, StoreError> {
        read_dead_letters(&self.db, limit)
    }

    /// Retention: removes every record past its `expires_at` (readers already treat them as absent,
    /// as DynamoDB's TTL would delete them) and outbox entries older than the store's TTL, in one
    /// durable commit. Blocking: writes on the calling thread.
    pub fn purge_expired(&self, now: Timestamp) -> Result<Purged, StoreError> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        let records = {
            let mut expiry = txn.open_table(RECORD_EXPIRY)?;
            let mut stored = txn.open_table(RECORDS)?;
            let expired: Vec<(u64, String)> = expiry
                .range::<(u64, &str)>(..(now.0.saturating_add(1), ""))?
                .map(|entry| entry.map(|(key, _)| (key.value().0, key.value().1.to_owned())))
                .collect::<Result<_, _>>()?;
            for (expires_at, pk) in &expired {
                expiry.remove((*expires_at, pk.as_str()))?;
                stored.remove(pk.as_str())?;
            }
            expired.len() as u64
        };
        let outbox = {
            let mut table = txn.open_table(OUTBOX)?;
            // Ids follow time, so the old entries are a prefix of the table.
            let mut old = Vec::new();
            for entry in table.range::<u64>(..)? {
                let (id, value) = entry?;
                let stored = decode_outbox_entry(value.value())
                    .map_err(StoreError::corrupt(format!("outbox entry {}", id.value())))?;
                if Timestamp(stored.at).plus(self.ttl) > now {
                    break;
                }
                old.push(id.value());
            }
            for id in &old {
                table.remove(*id)?;
            }
            old.len() as u64
        };
        if records == 0 && outbox == 0 {
            txn.abort()?;
        } else {
            txn.commit()?;
        }
        Ok(Purged { records, outbox })
    }

    /// The durable totals. Blocking: reads on the calling thread.
    pub fn counters(&self) -> Result<Counters, StoreError> {
        let read = self.db.begin_read()?;
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
        })
    }

    /// Durably adds `sends` to [`Counters::resent_after_unknown_outcome`].
    pub async fn count_resent(&self, sends: u64) -> Result<(), tgq_core::PortError> {
        self.writer
            .run("count resent", move |tx| tx.add(counter::RESENT, sends))
            .await
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

/// Creates the tables of a new file and checks the schema of an existing one.
fn prepare(db: &Database, path: &Path) -> Result<(), StoreError> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    let schema_1 = redb::TableDefinition::<&str, u64>::new(SCHEMA_1_SEQUENCES);
    let wrote_schema_1 = txn
        .list_tables()?
        .any(|table| redb::TableHandle::name(&table) == SCHEMA_1_SEQUENCES);
    if wrote_schema_1 {
        let found = txn
            .open_table(schema_1)?
            .get(seq::SCHEMA)?
            .map_or(1, |v| v.value());
        return Err(StoreError::Schema {
            path: path.to_owned(),
            found,
            expected: SCHEMA_VERSION,
        });
    }
    txn.open_table(RECORDS)?;
    txn.open_table(RECORD_EXPIRY)?;
    txn.open_table(QUEUE)?;
    txn.open_table(DEDUP)?;
    txn.open_table(DEAD)?;
    txn.open_table(OUTBOX)?;
    {
        let mut meta = txn.open_table(META)?;
        let found = meta.get(seq::SCHEMA)?.map(|v| v.value());
        match found {
            None => {
                meta.insert(seq::SCHEMA, SCHEMA_VERSION)?;
            }
            Some(version) if version == SCHEMA_VERSION => {}
            Some(found) => {
                return Err(StoreError::Schema {
                    path: path.to_owned(),
                    found,
                    expected: SCHEMA_VERSION,
                })
            }
        }
    }
    txn.commit()?;
    Ok(())
}

/// Up to `limit` dead letters, oldest first.
fn read_dead_letters(db: &Database, limit: usize) -> Result<Vec<DeadLetter>, StoreError> {
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

fn duration_ms<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        None => s.serialize_none(),
    }
}

fn timestamp_ms<S: serde::Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(t.0)
}
