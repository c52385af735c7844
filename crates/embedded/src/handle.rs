//! The open database, which the writer can close and open again: after a failed write (a full
//! disk, an fsync error) redb refuses every later operation until the file is reopened, and local
//! mode must recover by itself once the cause is gone (docs/ARCHITECTURE.md §6).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use redb::{Database, ReadOnlyDatabase, ReadTransaction, ReadableDatabase, TransactionError};

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
}

impl Db {
    /// A snapshot read.
    pub(crate) fn begin_read(&self) -> Result<ReadTransaction, TransactionError> {
        match self {
            Db::Writable(db) => db.begin_read(),
            Db::ReadOnly(db) => db.begin_read(),
        }
    }

    /// The database to write to; `None` when it was opened read-only.
    pub(crate) fn writable(&self) -> Option<&Database> {
        match self {
            Db::Writable(db) => Some(db),
            Db::ReadOnly(_) => None,
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
    /// [`StoreError::Reopening`] until it is done.
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
        let (db, queue) = crate::open::open_verified(&self.path)?;
        *self.current.write() = Some(Arc::new(Db::Writable(db)));
        Ok(queue)
    }
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
