//! Opening the store: the data directory, the file's lock, the layout check, and the writer thread.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redb::{Builder, Database, DatabaseError, Durability, ReadableTable};

use crate::files;
use tgq_core::clock::{Clock, SystemClock};

use crate::handle::{Db, DbHandle, Health};
use crate::queue::QueueIndex;
use crate::schema::{
    seq, AUDIT, BROADCASTS, BROADCAST_BEGUN, BROADCAST_ORIGINS, BROADCAST_RECIPIENTS,
    BROADCAST_RETRIES, CHARGES, DEAD, DEAD_IDS, DEDUP, META, OUTBOX, POLLER_LEASES, QUEUE, RECORDS,
    RECORD_EXPIRY, SCHEMA_1_SEQUENCES, SCHEMA_VERSION, STATES, TIMERS, TIMER_IDS, UPGRADABLE_FROM,
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
    /// How long an open waits while the file is held by another process before it reports
    /// [`StoreError::AlreadyOpen`]: `tgq local` waits a few seconds for a read-only command to
    /// finish its read. Default: no wait.
    pub lock_wait: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            ttl: tgq_core::defaults::RECORD_TTL,
            max_receive_count: 30,
            clock: Arc::new(SystemClock),
            lock_wait: Duration::ZERO,
        }
    }
}

/// How often an open held by another process is tried again within [`StoreOptions::lock_wait`].
const LOCK_RETRY: Duration = Duration::from_millis(50);

impl EmbeddedStore {
    /// Opens the store in `data_dir/tgq.redb` for writing, creating it only when the file does not
    /// exist (a new store is written whole beside it and renamed into place, so an interrupted
    /// first start leaves no file rather than an empty one). Fails with
    /// [`StoreError::AlreadyOpen`] when another process has the file open (after waiting up to
    /// [`StoreOptions::lock_wait`] for it), and with [`StoreError::Damaged`] (naming the file and
    /// how to restore it) when the file is empty or fails its integrity check: tgq never serves on,
    /// nor replaces, a store it cannot trust. In-flight messages keep their visibility across a
    /// reopen: they become visible again when it ends. The file is made private (0600).
    pub fn open(data_dir: &Path, options: StoreOptions) -> Result<Arc<EmbeddedStore>, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.to_owned(),
            source,
        })?;
        let path = data_dir.join(FILE_NAME);
        if !path.exists() {
            create_whole(&path)?;
        }
        refuse_empty(&path)?;
        // The store holds every message's text; an older tgq left it readable by everyone.
        files::set_mode(&path, files::PRIVATE).map_err(|source| StoreError::DataDir {
            path: path.clone(),
            source,
        })?;
        let since = std::time::Instant::now();
        let (db, queue) = loop {
            match open_guarded(&path) {
                Err(StoreError::AlreadyOpen { .. }) if since.elapsed() < options.lock_wait => {
                    std::thread::sleep(LOCK_RETRY);
                }
                opened => break opened?,
            }
        };
        let db = Arc::new(DbHandle::new(path, Db::Writable(db)));
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
            timers_changed: Default::default(),
        }))
    }

    /// Opens the store in `data_dir/tgq.redb` only to read it: nothing is created or written, other
    /// readers may read at once, and a directory the caller cannot write is fine. Its writes fail.
    /// Fails with [`StoreError::NoStore`] when there is no file, [`StoreError::AlreadyOpen`] while a
    /// process has it open for writing (read through that process instead),
    /// [`StoreError::NeedsRepair`] when it was not closed cleanly, and [`StoreError::Damaged`] when
    /// it is empty or unreadable.
    pub fn open_read_only(
        data_dir: &Path,
        options: StoreOptions,
    ) -> Result<Arc<EmbeddedStore>, StoreError> {
        let path = data_dir.join(FILE_NAME);
        if !path.exists() {
            return Err(StoreError::NoStore { path });
        }
        refuse_empty(&path)?;
        let opened = std::panic::catch_unwind(AssertUnwindSafe(|| {
            Builder::new()
                .set_cache_size(CACHE_BYTES)
                .open_read_only(&path)
        }));
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch)) => {
                let holder = holder(&path);
                return Err(StoreError::AlreadyOpen { path, holder });
            }
            Ok(Err(DatabaseError::RepairAborted)) => return Err(StoreError::NeedsRepair { path }),
            Ok(Err(source)) => {
                return Err(damaged(
                    StoreError::Open {
                        path: path.clone(),
                        source,
                    },
                    &path,
                ))
            }
            Err(panic) => {
                return Err(StoreError::Damaged {
                    path,
                    reason: format!("reading it panicked: {}", panic_text(&panic)),
                })
            }
        };
        check_schema_read_only(&db, &path)?;
        let db = Arc::new(DbHandle::new(path, Db::ReadOnly(db)));
        Ok(Arc::new(EmbeddedStore {
            writer: Writer::read_only(),
            db,
            holds: Default::default(),
            health: Arc::new(Health::default()),
            ttl: options.ttl,
            clock: options.clock,
            timers_changed: Default::default(),
        }))
    }
}

/// Opens a file that exists, reporting a panic inside redb as damage.
fn open_guarded(path: &Path) -> Result<(Database, QueueIndex), StoreError> {
    // redb may panic on a plain open of a file damaged outside it; the integrity check is meant
    // to report that instead, and this makes sure a panic is reported all the same.
    match std::panic::catch_unwind(AssertUnwindSafe(|| open_verified(path))) {
        Ok(opened) => opened.map_err(|error| damaged(error, path)),
        Err(panic) => Err(StoreError::Damaged {
            path: path.to_owned(),
            reason: format!("reading it panicked: {}", panic_text(&panic)),
        }),
    }
}

/// An empty file is never a store tgq wrote (a new store is renamed into place whole): it was
/// truncated, or overwritten. redb would make a new store of it, and so lose what it held.
fn refuse_empty(path: &Path) -> Result<(), StoreError> {
    let len = std::fs::metadata(path)
        .map_err(|source| StoreError::DataDir {
            path: path.to_owned(),
            source,
        })?
        .len();
    match len {
        0 => Err(StoreError::Damaged {
            path: path.to_owned(),
            reason: "the file is empty: it was truncated or overwritten".into(),
        }),
        _ => Ok(()),
    }
}

/// Writes a new, empty store beside `path` (private, synced) and gives it the name `path` only if
/// nothing has it yet: two first starts at once on one data directory make one store, and the
/// second opens (or is refused) the first's rather than replacing it under a process serving it.
fn create_whole(path: &Path) -> Result<(), StoreError> {
    let temporary = files::temporary_beside(path);
    let created = write_new_store(&temporary, path).and_then(|()| {
        files::link_new(&temporary, path)
            .map(drop)
            .map_err(|source| StoreError::DataDir {
                path: path.to_owned(),
                source,
            })
    });
    let _ = std::fs::remove_file(&temporary);
    created
}

/// The process holding `path`'s lock (redb locks the whole file with `flock`), as the kernel
/// lists it in `/proc/locks`; `None` where that cannot be read or names nobody.
pub(crate) fn holder(path: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let inode = std::fs::metadata(path).ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // `1: FLOCK  ADVISORY  WRITE 4242 fd:01:131090 0 EOF`: the pid, then major:minor:inode.
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (pid, device) = (fields.get(4)?, fields.get(5)?);
        let held = device.rsplit(':').next()?.parse::<u64>().ok()? == inode;
        held.then(|| pid.parse().ok()).flatten()
    })
}

/// A new store file at `at` with the current layout, committed with fsync; `path` names the store
/// in errors.
pub(crate) fn write_new_store(at: &Path, path: &Path) -> Result<(), StoreError> {
    let io = |source| StoreError::DataDir {
        path: path.to_owned(),
        source,
    };
    create_private(at).map_err(io)?;
    let db = Builder::new()
        .create(at)
        .map_err(|source| StoreError::Open {
            path: path.to_owned(),
            source,
        })?;
    prepare(&db, path)?;
    drop(db);
    std::fs::File::open(at)
        .and_then(|f| f.sync_all())
        .map_err(io)
}

/// Creates an empty file readable by its owner alone, for redb to fill.
pub(crate) fn create_private(at: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(files::PRIVATE)
        .open(at)
        .map(drop)
}

/// Checks the layout of a file opened read-only: the one this build reads, or one it upgrades
/// (which only lacks tables; reading those fails with a message).
fn check_schema_read_only(db: &redb::ReadOnlyDatabase, path: &Path) -> Result<(), StoreError> {
    use redb::ReadableDatabase as _;
    let read = db.begin_read()?;
    let found = match read.open_table(META) {
        Ok(meta) => meta.get(seq::SCHEMA)?.map(|v| v.value()),
        Err(redb::TableError::TableDoesNotExist(_)) => Some(1),
        Err(e) => return Err(e.into()),
    };
    match found {
        Some(version) if version == SCHEMA_VERSION || UPGRADABLE_FROM.contains(&version) => Ok(()),
        // A file with tables but no version was never finished by tgq.
        None => Ok(()),
        Some(found) => Err(StoreError::Schema {
            path: path.to_owned(),
            found,
            expected: SCHEMA_VERSION,
        }),
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
        // Never creates: a missing file is created whole by `create_whole`, and redb would take
        // an empty file for a new database.
        .open(path)
        .map_err(|source| match source {
            DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
                StoreError::AlreadyOpen {
                    path: path.to_owned(),
                    holder: holder(path),
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
    txn.open_table(DEAD_IDS)?;
    txn.open_table(OUTBOX)?;
    txn.open_table(AUDIT)?;
    txn.open_table(STATES)?;
    txn.open_table(CHARGES)?;
    txn.open_table(POLLER_LEASES)?;
    txn.open_table(TIMERS)?;
    txn.open_table(TIMER_IDS)?;
    txn.open_table(BROADCASTS)?;
    txn.open_table(BROADCAST_RECIPIENTS)?;
    txn.open_table(BROADCAST_RETRIES)?;
    txn.open_table(BROADCAST_BEGUN)?;
    txn.open_table(BROADCAST_ORIGINS)?;
    {
        let mut meta = txn.open_table(META)?;
        let found = meta.get(seq::SCHEMA)?.map(|v| v.value());
        match found {
            None => {
                meta.insert(seq::SCHEMA, SCHEMA_VERSION)?;
            }
            Some(version) if version == SCHEMA_VERSION => {}
            // Versions 4 to 8 only added tables (created above) and new kinds of values: a file
            // of version 3 to 7 lacks tables, and nothing it holds changes meaning.
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
