//! Opening the store: the data directory, the file's lock, the layout check, and the writer thread.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redb::{Builder, Database, DatabaseError, Durability, ReadableTable};
use tgq_core::clock::{Clock, SystemClock};

use crate::handle::{DbHandle, Health};
use crate::queue::QueueIndex;
use crate::schema::{
    seq, AUDIT, DEAD, DEDUP, META, OUTBOX, POLLER_LEASES, QUEUE, RECORDS, RECORD_EXPIRY,
    SCHEMA_1_SEQUENCES, SCHEMA_VERSION, STATES, UPGRADABLE_FROM,
};
use crate::writer::{Settings, Writer};
use crate::{EmbeddedStore, StoreError, FILE_NAME};

/// redb's page cache; local mode's working set is small.
const CACHE_BYTES: usize = 64 * 1024 * 1024;

/// How the store is configured.
#[derive(Clone)]
pub struct StoreOptions {
    /// How long outbox entries are kept by [`EmbeddedStore::purge_expired`] (records carry their own
    /// `expires_at`). Default: 15 days, as records.
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

impl EmbeddedStore {
    /// Opens (creating it if needed) the store in `data_dir/tgq.redb`. Fails with
    /// [`StoreError::AlreadyOpen`] when another store has the file open, and with
    /// [`StoreError::Damaged`] (naming the file and how to restore it) when the file fails its
    /// integrity check: tgq never serves on a store it cannot trust. In-flight messages keep
    /// their visibility across a reopen: they become visible again when it ends.
    pub fn open(data_dir: &Path, options: StoreOptions) -> Result<Arc<EmbeddedStore>, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.to_owned(),
            source,
        })?;
        let path = data_dir.join(FILE_NAME);
        // redb may panic on a plain open of a file damaged outside it; the integrity check below
        // is meant to report that instead, and this makes sure a panic is reported all the same.
        let opened = std::panic::catch_unwind(AssertUnwindSafe(|| open_verified(&path)));
        let (db, queue) = match opened {
            Ok(opened) => opened.map_err(|error| damaged(error, &path))?,
            Err(panic) => {
                return Err(StoreError::Damaged {
                    path,
                    reason: format!("reading it panicked: {}", panic_text(&panic)),
                })
            }
        };
        let db = Arc::new(DbHandle::new(path, db));
        let settings = Settings {
            max_receive_count: options.max_receive_count,
            clock: options.clock.clone(),
        };
        let health = Arc::new(Health::default());
        let writer = Writer::start(db.clone(), queue, settings, health.clone())
            .map_err(StoreError::Thread)?;
        Ok(Arc::new(EmbeddedStore {
            writer,
            db,
            holds: Default::default(),
            health,
            ttl: options.ttl,
            clock: options.clock,
        }))
    }
}

/// Opens the file with redb's integrity check (every page of the committed trees verified against
/// its checksum, the allocator rebuilt), checks its layout and loads the queue index.
///
/// The check reads the whole file, which costs a moment at start; without it a file damaged on
/// disk (a bad sector, a partial copy, another program writing to it) could be served from, or
/// panic deep inside a write later.
pub(crate) fn open_verified(path: &Path) -> Result<(Database, QueueIndex), StoreError> {
    let db = Builder::new()
        .set_cache_size(CACHE_BYTES)
        .set_check_integrity_on_open(true)
        .create(path)
        .map_err(|source| match source {
            DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
                StoreError::AlreadyOpen {
                    path: path.to_owned(),
                }
            }
            source => StoreError::Open {
                path: path.to_owned(),
                source,
            },
        })?;
    prepare(&db, path)?;
    let queue = QueueIndex::load(&db)?;
    Ok((db, queue))
}

/// Reports an open that failed on the file's content as [`StoreError::Damaged`]: redb's own
/// corruption verdict, or a stored value that does not decode.
fn damaged(error: StoreError, path: &Path) -> StoreError {
    // redb says "corrupted" for a bad checksum or layout, and InvalidData for a file that is not
    // a redb database at all (its magic number).
    let corrupted = |e: &redb::StorageError| match e {
        redb::StorageError::Corrupted(_) => true,
        redb::StorageError::Io(io) => io.kind() == std::io::ErrorKind::InvalidData,
        _ => false,
    };
    let reason = match &error {
        StoreError::Open {
            source: DatabaseError::Storage(storage),
            ..
        } if corrupted(storage) => storage.to_string(),
        StoreError::Storage(redb::Error::Corrupted(reason)) => reason.clone(),
        StoreError::Corrupt { what, reason } => format!("stored {what} is unreadable: {reason}"),
        _ => return error,
    };
    StoreError::Damaged {
        path: path.to_owned(),
        reason,
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => (*text).to_owned(),
        (_, Some(text)) => text.clone(),
        _ => "no message".to_owned(),
    }
}

/// Creates the tables of a new file, checks the schema of an existing one, and upgrades a file of
/// the one earlier layout that only lacks tables.
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
    txn.open_table(AUDIT)?;
    txn.open_table(STATES)?;
    txn.open_table(POLLER_LEASES)?;
    {
        let mut meta = txn.open_table(META)?;
        let found = meta.get(seq::SCHEMA)?.map(|v| v.value());
        match found {
            None => {
                meta.insert(seq::SCHEMA, SCHEMA_VERSION)?;
            }
            Some(version) if version == SCHEMA_VERSION => {}
            // Versions 4 and 5 only added tables (created above) and new kinds of values: a file
            // of version 3 or 4 lacks tables, and nothing it holds changes meaning.
            Some(version) if UPGRADABLE_FROM.contains(&version) => {
                meta.insert(seq::SCHEMA, SCHEMA_VERSION)?;
            }
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
