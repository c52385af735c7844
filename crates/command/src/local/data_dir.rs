//! Where `tgq local` keeps its data: the `--data-dir` given, `./.tgq` by default, and for `--demo`
//! without `--data-dir` a fresh directory for each run, so that "edit the bot, run the demo again"
//! shows the edited bot answering instead of every update recognised as a duplicate of the last run.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rand::distr::{Alphanumeric, SampleString as _};
use tracing::warn;

use crate::config::DEFAULT_DATA_DIR;

/// The data directory of one `tgq local` run; a temporary one is removed when this is dropped.
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    temporary: bool,
}

impl DataDir {
    /// `given`, or a fresh temporary directory for a demo, or the default.
    pub fn choose(given: Option<PathBuf>, demo: bool) -> anyhow::Result<Self> {
        match (given, demo) {
            (Some(path), _) => Ok(Self::kept(path)),
            (None, false) => Ok(Self::kept(PathBuf::from(DEFAULT_DATA_DIR))),
            (None, true) => Self::fresh(),
        }
    }

    fn kept(path: PathBuf) -> Self {
        Self {
            path,
            temporary: false,
        }
    }

    /// A new directory under the system's temporary directory, created here (never reused).
    fn fresh() -> anyhow::Result<Self> {
        let name = format!(
            "tgq-demo-{}",
            Alphanumeric.sample_string(&mut rand::rng(), 10)
        );
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir(&path)
            .with_context(|| format!("cannot create a demo data directory {}", path.display()))?;
        Ok(Self {
            path,
            temporary: true,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether it is this run's own, removed at the end.
    pub fn is_temporary(&self) -> bool {
        self.temporary
    }

    /// What the `tgq status` / `outbox` / `dlq` commands need to find this directory:
    /// nothing for the default one, else ` --data-dir <dir>`.
    pub fn option(&self) -> String {
        if !self.temporary && self.path == Path::new(DEFAULT_DATA_DIR) {
            String::new()
        } else {
            format!(" --data-dir {}", self.path.display())
        }
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        if !self.temporary {
            return;
        }
        if let Err(error) = std::fs::remove_dir_all(&self.path) {
            warn!(dir = %self.path.display(), %error, "could not remove the demo's data directory");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_demo_without_data_dir_gets_a_fresh_directory_removed_at_the_end() {
        let first = DataDir::choose(None, true).unwrap();
        let second = DataDir::choose(None, true).unwrap();
        assert_ne!(first.path(), second.path());
        assert!(first.path().is_dir() && first.is_temporary());
        let path = first.path().to_owned();
        std::fs::write(path.join("tgq.redb"), b"data").unwrap();
        drop(first);
        assert!(!path.exists());
        assert!(second.option().contains("--data-dir"));
    }

    #[test]
    fn a_given_or_default_directory_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let given = DataDir::choose(Some(dir.path().to_owned()), true).unwrap();
        assert!(!given.is_temporary());
        drop(given);
        assert!(dir.path().exists());
        let default = DataDir::choose(None, false).unwrap();
        assert_eq!(default.path(), Path::new(DEFAULT_DATA_DIR));
        assert_eq!(default.option(), "");
    }
}
