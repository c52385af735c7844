//! The open database, which the writer can close and open again: after a failed write (a full
//! disk, an fsync error) redb refuses every later operation until the file is reopened, and local
//! mode must recover by itself once the cause is gone (docs/design/local.md).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use redb::backends::InMemoryBackend;
use redb::{
    Builder, Database, ReadOnlyDatabase, ReadTransaction, ReadableDatabase, StorageBackend,
    TransactionError,
};
use tracing::warn;

use crate::queue::QueueIndex;
use crate::StoreError;

/// How long a reopen waits for readers still holding the old database to finish.
const READERS_GONE: Duration = Duration::from_secs(10);

/// The database as it was opened: for writing by the process that serves on it, or read-only by
/// a command that only looks (and so never keeps `tgq local` from starting, nor needs write access
/// to the data directory).
pub(crate) enum Db {
    /// Opened for writing; it holds the file's exclusive lock.
    Writable(Database),
    /// Opened read-only; readers share the file's lock.
    ReadOnly(ReadOnlyDatabase),
    /// A copy of the file's last commit in memory, for readers while the file cannot be opened
    /// for writing; never written.
    Snapshot(Database),
}

impl Db {
    /// A snapshot read.
    pub(crate) fn begin_read(&self) -> Result<ReadTransaction, TransactionError> {
        match self {
            Db::Writable(db) => db.begin_read(),
            Db::ReadOnly(db) => db.begin_read(),
            Db::Snapshot(db) => db.begin_read(),
        }
    }

    /// The database to write to; `None` when it was opened read-only.
    pub(crate) fn writable(&self) -> Option<&Database> {
        match self {
            Db::Writable(db) => Some(db),
            Db::ReadOnly(_) | Db::Snapshot(_) => None,
        }
    }
}

/// The database, shared by the writer thread and the readers.
pub(crate) struct DbHandle {
    path: PathBuf,
    current: RwLock<Option<Arc<Db>>>,
}

impl DbHandle {
    pub(crate) fn new(path: PathBuf, db: Db) -> Self {
        Self {
            path,
            current: RwLock::new(Some(Arc::new(db))),
        }
    }

    /// The database file.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The open database; an error while it is being reopened.
    pub(crate) fn get(&self) -> Result<Arc<Db>, StoreError> {
        self.current.read().clone().ok_or(StoreError::Reopening)
    }

    /// Closes the database and opens the file again, with its integrity check, and reloads the
    /// queue index. Called by the writer thread only, so no write runs meanwhile; readers get
    /// [`StoreError::Reopening`] until it is done, and read the last commit through a read-only
    /// handle when it fails.
    pub(crate) fn reopen(&self) -> Result<QueueIndex, StoreError> {
        let old = self.current.write().take();
        if let Some(mut old) = old {
            let since = Instant::now();
            // The file's lock is released only when the last handle is dropped.
            loop {
                match Arc::try_unwrap(old) {
                    Ok(db) => {
                        drop(db);
                        break;
                    }
                    Err(shared) if since.elapsed() < READERS_GONE => {
                        old = shared;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(shared) => {
                        *self.current.write() = Some(shared);
                        return Err(StoreError::Reopen {
                            reason: "readers kept the database open".into(),
                        });
                    }
                }
            }
        }
        match crate::open::open_verified(&self.path) {
            Ok((db, queue)) => {
                *self.current.write() = Some(Arc::new(Db::Writable(db)));
                Ok(queue)
            }
            Err(error) => {
                // A reopen for writing can fail for as long as its cause lasts (a disk that stays
                // full). Meanwhile readers see the file's last commit through a copy in memory, so
                // that `tgq status` and the admin routes still answer; the next reopen drops it.
                match snapshot(&self.path) {
                    Ok(db) => *self.current.write() = Some(Arc::new(Db::Snapshot(db))),
                    Err(reason) => warn!(%reason, "the store cannot be read until it reopens"),
                }
                Err(error)
            }
        }
    }
}

/// The largest store file [`snapshot`] copies into memory.
const SNAPSHOT_LIMIT: u64 = 256 * 1024 * 1024;

/// The file at `path` copied into memory and opened there. A file whose writer failed needs
/// redb's repair before it can be read, and a read-only open cannot repair; the copy can, without
/// writing a byte to the disk.
fn snapshot(path: &std::path::Path) -> Result<Database, String> {
    let len = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if len > SNAPSHOT_LIMIT {
        return Err(format!(
            "the file is {len} bytes, over the {SNAPSHOT_LIMIT} a copy in memory may take"
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let backend = InMemoryBackend::new();
    backend.set_len(len).map_err(|e| e.to_string())?;
    backend.write(0, &bytes).map_err(|e| e.to_string())?;
    Builder::new()
        .create_with_backend(backend)
        .map_err(|e| e.to_string())
}

/// Whether the store's last write committed, and if not, why.
#[derive(Debug, Default)]
pub(crate) struct Health(Mutex<Option<String>>);

impl Health {
    pub(crate) fn failed(&self, reason: &str) {
        *self.0.lock() = Some(reason.to_owned());
    }

    pub(crate) fn committed(&self) {
        *self.0.lock() = None;
    }

    pub(crate) fn failure(&self) -> Option<String> {
        self.0.lock().clone()
    }
}
