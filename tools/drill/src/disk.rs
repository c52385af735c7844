//! A small filesystem for local mode's data directory, to fill up and free again: a tmpfs of a
//! few megabytes mounted for the scenario (needs root, as `mount` does).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _};

/// A mounted tmpfs that is unmounted when dropped.
pub struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    /// Mounts a tmpfs of `megabytes` at `path` (created if needed).
    pub fn mount(path: &Path, megabytes: u32) -> anyhow::Result<SmallDisk> {
        std::fs::create_dir_all(path)?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(path)
            .status()
            .context("running mount")?;
        if !status.success() {
            bail!(
                "cannot mount a {megabytes} MB tmpfs at {} ({status}): the disk scenarios need \
                 root (mount -t tmpfs)",
                path.display()
            );
        }
        Ok(SmallDisk {
            path: path.to_owned(),
        })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn filler(&self) -> PathBuf {
        self.path.join("filler")
    }

    /// Writes a filler file until the filesystem has no space left.
    pub fn fill(&self) -> anyhow::Result<()> {
        let mut file = std::fs::File::create(self.filler())?;
        let block = vec![0u8; 64 * 1024];
        loop {
            match file.write_all(&block) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => return Err(e).context("filling the disk"),
            }
        }
        // Whatever fits in less than a block too.
        while file.write_all(&[0u8; 512]).is_ok() {}
        Ok(())
    }

    /// Removes the filler: the space is back.
    pub fn free(&self) -> anyhow::Result<()> {
        std::fs::remove_file(self.filler()).context("removing the filler")
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}
