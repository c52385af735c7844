//! A consistent copy of the store while it serves: every table read inside one read transaction (a
//! snapshot no later commit changes) and written into a new private redb file, which is synced
//! and then renamed into place, so a reader of `to` never finds half a backup; and a restore,
//! which keeps the store it replaces.
//!
//! redb has no backup call, and copying the file's bytes while the writer thread commits could
//! catch a header from one commit and pages from another; a logical copy of one snapshot cannot.

use std::path::{Path, PathBuf};

use redb::{
    Builder, Durability, Key, ReadTransaction, ReadableTable, TableDefinition, Value,
    WriteTransaction,
};
use serde::{Deserialize, Serialize};

use crate::schema::{
    AUDIT, BROADCASTS, BROADCAST_BEGUN, BROADCAST_ORIGINS, BROADCAST_RECIPIENTS, BROADCAST_RETRIES,
    CHARGES, DEAD, DEAD_IDS, DEDUP, META, OUTBOX, POLLER_LEASES, QUEUE, RECORDS, RECORD_EXPIRY,
    STATES, TIMERS, TIMER_IDS,
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

/// What a restore did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restored {
    /// The store file now in place.
    pub store: PathBuf,
    /// Where the store it replaced was kept, when there was one.
    pub kept: Option<PathBuf>,
}

impl EmbeddedStore {
    /// Writes a consistent copy of the whole store to `to`, private to its owner (it holds every
    /// message's text). Refused before anything is written when `to` is inside the data directory
    /// (where it could replace the live store, the webhook secret or the bots), is the live store
    /// by another name, or exists and `replace` is not set. The copy is itself a store file:
    /// [`EmbeddedStore::restore`] puts it back. Blocking: reads and writes on the calling thread;
    /// commits go on meanwhile.
    pub fn backup_to(&self, to: &Path, replace: bool) -> Result<Backup, StoreError> {
        check_target(self.db.path(), to, replace)?;
        let read = self.db.get()?.begin_read()?;
        let partial = crate::files::temporary_beside(to);
        let copied = write_copy(&read, &partial);
        let entries = match copied {
            Ok(entries) => entries,
            Err(error) => {
                let _ = std::fs::remove_file(&partial);
                return Err(error);
            }
        };
        put_in_place(&partial, to)?;
        let bytes = std::fs::metadata(to).map_err(backup_error(to))?.len();
        Ok(Backup {
            path: to.to_owned(),
            entries,
            bytes,
        })
    }

    /// Moves a backup that a running `tgq local` wrote into its backup directory to `to`, with
    /// [`EmbeddedStore::backup_to`]'s checks for the store of `data_dir`: only the command's own
    /// user replaces a file, with `replace`; the admin route that wrote `backup` never does.
    pub fn place_backup(
        data_dir: &Path,
        backup: Backup,
        to: &Path,
        replace: bool,
    ) -> Result<Backup, StoreError> {
        check_target(&data_dir.join(crate::FILE_NAME), to, replace)?;
        let moved = match std::fs::rename(&backup.path, to) {
            Ok(()) => crate::files::sync_parent(to).map_err(backup_error(to)),
            // Another filesystem: copied whole beside `to`, then renamed over it.
            Err(error) if error.kind() == std::io::ErrorKind::CrossesDevices => {
                let partial = crate::files::temporary_beside(to);
                copy_private(&backup.path, &partial).and_then(|()| put_in_place(&partial, to))?;
                let _ = std::fs::remove_file(&backup.path);
                Ok(())
            }
            Err(source) => Err(backup_error(to)(source)),
        };
        moved.map(|()| Backup {
            path: to.to_owned(),
            ..backup
        })
    }

    /// Puts the backup `from` in place as the store of `data_dir`, keeping the store it replaces
    /// at `keep_as`. Refused while a process has the store open (`tgq local`, or a command reading
    /// it), and when `from` is not a whole store file of a layout this build reads: it is copied
    /// beside the store and checked there (redb's integrity check) before anything is replaced.
    pub fn restore(data_dir: &Path, from: &Path, keep_as: &Path) -> Result<Restored, StoreError> {
        let store = data_dir.join(crate::FILE_NAME);
        if same_file(from, &store) {
            return Err(StoreError::Refused {
                reason: format!("{} is the store itself", from.display()),
            });
        }
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.to_owned(),
            source,
        })?;
        // Held until the new store is in place: a `tgq local` starting meanwhile waits for it.
        let _held = match redb::Builder::new().open_read_only(&store) {
            Ok(db) => Some(db),
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::Refused {
                    reason: format!(
                        "{} is open in another process: stop `tgq local` on {} first (and any \
                         tgq command reading it)",
                        store.display(),
                        data_dir.display()
                    ),
                })
            }
            // No store, or one that cannot be opened (damaged, not closed cleanly): nothing runs
            // on it, and it is kept all the same.
            Err(_) => None,
        };
        let copy = crate::files::temporary_beside(&store);
        let checked = copy_private(from, &copy).and_then(|()| {
            crate::open::open_verified(&copy)
                .map(drop)
                .map_err(|error| match error {
                    StoreError::Open { source, .. } => StoreError::Refused {
                        reason: format!("{} is not a tgq store: {source}", from.display()),
                    },
                    StoreError::Schema {
                        found, expected, ..
                    } => StoreError::Refused {
                        reason: format!(
                            "{} has store schema {found}; this tgq reads schema {expected}",
                            from.display()
                        ),
                    },
                    other => StoreError::Refused {
                        reason: format!("{} cannot be restored: {other}", from.display()),
                    },
                })
        });
        if let Err(error) = checked {
            let _ = std::fs::remove_file(&copy);
            return Err(error);
        }
        let io = |source| StoreError::DataDir {
            path: store.clone(),
            source,
        };
        let kept = match store.exists() {
            true => {
                crate::files::rename_durably(&store, keep_as).map_err(io)?;
                Some(keep_as.to_owned())
            }
            false => None,
        };
        crate::files::rename_durably(&copy, &store).map_err(io)?;
        Ok(Restored { store, kept })
    }
}

/// Refuses a backup target that could destroy what it backs up.
fn check_target(store: &Path, to: &Path, replace: bool) -> Result<(), StoreError> {
    let refused = |reason: String| Err(StoreError::Refused { reason });
    let data_dir = store.parent().unwrap_or(Path::new("."));
    let canonical_dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_owned());
    let target_dir = match to.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let Ok(canonical_target) = std::fs::canonicalize(target_dir) else {
        return refused(format!(
            "cannot write the backup {}: the directory {} does not exist",
            to.display(),
            target_dir.display()
        ));
    };
    if canonical_target.starts_with(&canonical_dir) {
        return refused(format!(
            "{} is inside the data directory {}: a backup there could replace the live store or \
             its files; write it elsewhere",
            to.display(),
            data_dir.display()
        ));
    }
    if same_file(to, store) {
        return refused(format!("{} is the live store", to.display()));
    }
    match std::fs::symlink_metadata(to) {
        Ok(meta) if meta.is_dir() => refused(format!("{} is a directory", to.display())),
        Ok(_) if !replace => refused(format!(
            "{} already exists: pass --force to replace it",
            to.display()
        )),
        _ => Ok(()),
    }
}

/// Whether two paths name one file (a hard link or a symlink to the store counts).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Renames the finished copy `partial` over `to`, durably; a copy that cannot be put in place is
/// removed.
fn put_in_place(partial: &Path, to: &Path) -> Result<(), StoreError> {
    crate::files::rename_durably(partial, to).map_err(|source| {
        let _ = std::fs::remove_file(partial);
        backup_error(to)(source)
    })
}

/// The error of a backup's file operation on `path`.
fn backup_error(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Backup {
        path: path.to_owned(),
        source,
    }
}

/// Copies `from` to a new private file `to`, synced.
fn copy_private(from: &Path, to: &Path) -> Result<(), StoreError> {
    crate::open::create_private(to).map_err(backup_error(from))?;
    let copied = std::fs::File::open(from).and_then(|mut source| {
        let mut target = std::fs::OpenOptions::new().write(true).open(to)?;
        std::io::copy(&mut source, &mut target)?;
        target.sync_all()
    });
    if let Err(source) = copied {
        let _ = std::fs::remove_file(to);
        return Err(backup_error(from)(source));
    }
    Ok(())
}

/// Copies every table of the snapshot into a new database at `path`, committed with fsync.
fn write_copy(read: &ReadTransaction, path: &Path) -> Result<u64, StoreError> {
    crate::open::create_private(path).map_err(backup_error(path))?;
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
        + copy_table_if_there(read, &write, DEAD_IDS)?
        + copy_table(read, &write, OUTBOX)?
        + copy_table(read, &write, AUDIT)?
        + copy_table(read, &write, STATES)?
        + copy_table_if_there(read, &write, CHARGES)?
        + copy_table(read, &write, POLLER_LEASES)?
        + copy_table_if_there(read, &write, TIMERS)?
        + copy_table_if_there(read, &write, TIMER_IDS)?
        + copy_table_if_there(read, &write, BROADCASTS)?
        + copy_table_if_there(read, &write, BROADCAST_RECIPIENTS)?
        + copy_table_if_there(read, &write, BROADCAST_RETRIES)?
        + copy_table_if_there(read, &write, BROADCAST_BEGUN)?
        + copy_table_if_there(read, &write, BROADCAST_ORIGINS)?
        + copy_table(read, &write, META)?;
    write.commit()?;
    drop(db);
    Ok(entries)
}

/// [`copy_table`] for a table that a store written by an older tgq and never opened for writing
/// since may lack.
fn copy_table_if_there<K: Key + 'static, V: Value + 'static>(
    read: &ReadTransaction,
    write: &WriteTransaction,
    definition: TableDefinition<K, V>,
) -> Result<u64, StoreError> {
    match read.open_table(definition) {
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
        _ => copy_table(read, write, definition),
    }
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
