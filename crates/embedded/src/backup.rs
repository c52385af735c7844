//! A consistent copy of the store while it serves: every table read inside one read transaction (a
//! snapshot no later commit changes) and written into a new redb file, which is synced and then
//! renamed into place, so a reader of `to` never finds half a backup.
//!
//! redb has no backup call, and copying the file's bytes while the writer thread commits could
//! catch a header from one commit and pages from another; a logical copy of one snapshot cannot.

use std::path::{Path, PathBuf};

use redb::{
    Builder, Durability, Key, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition,
    Value, WriteTransaction,
};
use serde::{Deserialize, Serialize};

use crate::schema::{
    AUDIT, DEAD, DEDUP, META, OUTBOX, POLLER_LEASES, QUEUE, RECORDS, RECORD_EXPIRY, STATES,
};
use crate::{EmbeddedStore, StoreError};

/// What a backup wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    /// The backup file.
    pub path: PathBuf,
    /// Entries copied, over every table.
    pub entries: u64,
    /// The backup file's size in bytes.
    pub bytes: u64,
}

impl EmbeddedStore {
    /// Writes a consistent copy of the whole store to `to` (replacing a file there). The copy is
    /// itself a store file: put it at `<data-dir>/tgq.redb` of a stopped instance to restore it.
    /// Blocking: reads and writes on the calling thread; commits go on meanwhile.
    pub fn backup_to(&self, to: &Path) -> Result<Backup, StoreError> {
        let read = self.db.get()?.begin_read()?;
        let partial = partial_path(to);
        // A file left by an interrupted backup would be opened as a database and appended to.
        remove_if_present(&partial)?;
        let copied = write_copy(&read, &partial);
        let entries = match copied {
            Ok(entries) => entries,
            Err(error) => {
                let _ = std::fs::remove_file(&partial);
                return Err(error);
            }
        };
        std::fs::rename(&partial, to).map_err(|source| StoreError::Backup {
            path: to.to_owned(),
            source,
        })?;
        sync_parent(to)?;
        let bytes = std::fs::metadata(to)
            .map_err(|source| StoreError::Backup {
                path: to.to_owned(),
                source,
            })?
            .len();
        Ok(Backup {
            path: to.to_owned(),
            entries,
            bytes,
        })
    }
}

/// Copies every table of the snapshot into a new database at `path`, committed with fsync.
fn write_copy(read: &ReadTransaction, path: &Path) -> Result<u64, StoreError> {
    let db = Builder::new()
        .create(path)
        .map_err(|source| StoreError::Open {
            path: path.to_owned(),
            source,
        })?;
    let mut write = db.begin_write()?;
    write.set_durability(Durability::Immediate)?;
    let entries = copy_table(read, &write, RECORDS)?
        + copy_table(read, &write, RECORD_EXPIRY)?
        + copy_table(read, &write, QUEUE)?
        + copy_table(read, &write, DEDUP)?
        + copy_table(read, &write, DEAD)?
        + copy_table(read, &write, OUTBOX)?
        + copy_table(read, &write, AUDIT)?
        + copy_table(read, &write, STATES)?
        + copy_table(read, &write, POLLER_LEASES)?
        + copy_table(read, &write, META)?;
    write.commit()?;
    drop(db);
    Ok(entries)
}

fn copy_table<K: Key + 'static, V: Value + 'static>(
    read: &ReadTransaction,
    write: &WriteTransaction,
    definition: TableDefinition<K, V>,
) -> Result<u64, StoreError> {
    let source = read.open_table(definition)?;
    let mut target = write.open_table(definition)?;
    let mut copied = 0;
    for entry in source.iter()? {
        let (key, value) = entry?;
        target.insert(key.value(), value.value())?;
        copied += 1;
    }
    Ok(copied)
}

fn partial_path(to: &Path) -> PathBuf {
    let mut name = to.file_name().map(|n| n.to_owned()).unwrap_or_default();
    name.push(".partial");
    to.with_file_name(name)
}

fn remove_if_present(path: &Path) -> Result<(), StoreError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StoreError::Backup {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Makes the rename durable: a crash right after must not bring back the old name.
fn sync_parent(path: &Path) -> Result<(), StoreError> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|source| StoreError::Backup {
            path: path.to_owned(),
            source,
        })
}
