//! Why the embedded store could not be opened, read or written.

use std::path::PathBuf;

use redb::DatabaseError;

use crate::schema::CodecError;

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
    #[error("{} is already open{}: is `tgq local` already running on this data directory?", path.display(), holder.map(|pid| format!(" by process {pid}")).unwrap_or_default())]
    AlreadyOpen {
        /// The database file.
        path: PathBuf,
        /// The process that holds it, when the system tells.
        holder: Option<u32>,
    },
    /// There is no store file (read-only opens never create one).
    #[error("there is no tgq store at {}", path.display())]
    NoStore {
        /// The database file.
        path: PathBuf,
    },
    /// The file was not closed cleanly (`tgq local` was killed): redb repairs it at the next open
    /// for writing, which a read-only open cannot do.
    #[error(
        "{} was not closed cleanly (tgq local stopped without closing it) and needs the repair \
         `tgq local` makes when it starts: start it, and this command reads through it",
        path.display()
    )]
    NeedsRepair {
        /// The database file.
        path: PathBuf,
    },
    /// A backup or restore was refused before anything was written.
    #[error("{reason}")]
    Refused {
        /// Why, naming the file.
        reason: String,
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
    /// The file fails redb's integrity check (a page's checksum, a truncated or overwritten file,
    /// not a database at all): nothing in it can be trusted, so the store is not opened.
    #[error(
        "{} is damaged and tgq will not serve on it ({reason}). Stop every tgq on this data \
         directory, move the damaged file away, and restore a backup to that path (`tgq backup \
         --data-dir DIR --to FILE` makes one while tgq local runs; copy FILE to {})",
        path.display(),
        path.display()
    )]
    Damaged {
        /// The database file.
        path: PathBuf,
        /// What redb found.
        reason: String,
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
    /// A backup could not be written.
    #[error("cannot write the backup {}", path.display())]
    Backup {
        /// The backup file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
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
    /// The writer thread could not be started, or stopped.
    #[error("the store's writer thread is not running")]
    Thread(#[source] std::io::Error),
    /// The database is being closed and opened again after a failed write.
    #[error("the store is being reopened after a failed write; try again")]
    Reopening,
    /// Opening the database again after a failed write failed.
    #[error("the store could not be reopened: {reason}")]
    Reopen {
        /// Why.
        reason: String,
    },
    /// A write through the writer thread failed.
    #[error("a write to the embedded store failed")]
    Write(#[source] tgq_core::PortError),
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
