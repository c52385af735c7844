//! Files in the data directory written whole: a temporary file beside the target, synced, renamed
//! over it, and the directory synced, so a reader (or the next start, after a crash or a full disk)
//! finds the old content or the new, never an empty or half-written file.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicU64, Ordering};

/// Only the owner reads or writes: the secret, the store and its backups (which hold every
/// message's text).
pub const PRIVATE: u32 = 0o600;

/// Writes `bytes` to `path` whole with `mode`, replacing what is there.
pub fn write_whole(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let temporary = write_temporary(path, bytes, mode)?;
    finish(
        std::fs::rename(&temporary, path).and_then(|()| sync_parent(path)),
        &temporary,
    )
}

/// Writes `bytes` to `path` whole with `mode` only if nothing is there: `Ok(false)` when a file
/// already is (two starts racing to create a secret keep the first one's).
pub fn create_whole(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<bool> {
    let temporary = write_temporary(path, bytes, mode)?;
    let linked = link_new(&temporary, path);
    let _ = std::fs::remove_file(&temporary);
    linked
}

/// Gives the file `from` the name `to` only if nothing has that name, durably: `Ok(false)` when
/// something has. A hard link never replaces an existing name, unlike a rename; `from` keeps its
/// own name, for the caller to remove.
pub fn link_new(from: &Path, to: &Path) -> std::io::Result<bool> {
    match std::fs::hard_link(from, to) {
        Ok(()) => sync_parent(to).map(|()| true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Renames `from` to `to` and syncs `to`'s directory, so the rename survives a crash.
pub fn rename_durably(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::rename(from, to)?;
    sync_parent(to)
}

/// Syncs the directory holding `path`: a rename or a new name in it becomes durable.
pub fn sync_parent(path: &Path) -> std::io::Result<()> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

/// Sets `path`'s mode to `mode`.
pub fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// A temporary name beside `path`, unique to this process and call (the file is created with
/// `create_new`, so a name left by another process is never reused).
pub fn temporary_beside(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(
        ".{}-{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    path.with_file_name(name)
}

fn write_temporary(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<PathBuf> {
    let temporary = temporary_beside(path);
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temporary)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        });
    finish(written, &temporary)?;
    Ok(temporary)
}

/// Removes the temporary file when `outcome` failed, and passes the outcome on.
fn finish(outcome: std::io::Result<()>, temporary: &Path) -> std::io::Result<()> {
    if outcome.is_err() {
        let _ = std::fs::remove_file(temporary);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_written_whole_replaces_the_old_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_whole(&path, b"one", PRIVATE).unwrap();
        write_whole(&path, b"two", PRIVATE).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, PRIVATE);
        assert!(!create_whole(&path, b"three", PRIVATE).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
