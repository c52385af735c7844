//! Local mode's flood waits, kept in the data directory (`flood-waits.json`) so that a process
//! started inside a wait Telegram announced, after a crash or a restart, holds the bot until it
//! ends (docs/ARCHITECTURE.md §4). The file is advisory: one that cannot be read is reported and
//! ignored, as the worst it costs is one more 429.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use tgq_core::clock::{Clock, SystemClock};
use tgq_core::ids::BotId;
use tgq_core::pacer::PauseMemory;
use tgq_core::record::Timestamp;
use tgq_embedded::files::{write_whole, PRIVATE};
use tracing::warn;

/// The file's name in the data directory.
pub const FILE_NAME: &str = "flood-waits.json";

/// The flood waits of local mode's bots: bot id → when its wait ends (epoch milliseconds).
#[derive(Debug)]
pub struct FloodWaits {
    path: PathBuf,
    waits: Mutex<BTreeMap<String, u64>>,
}

impl FloodWaits {
    /// The waits kept in `data_dir`, with those still running for the pacer to hold.
    pub fn open(data_dir: &Path) -> (Self, Vec<(BotId, Timestamp)>) {
        let path = data_dir.join(FILE_NAME);
        let now = SystemClock.now().0;
        let mut waits: BTreeMap<String, u64> = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|error| {
                warn!(file = %path.display(), %error, "ignoring an unreadable flood-wait file");
                BTreeMap::new()
            }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(error) => {
                warn!(file = %path.display(), %error, "ignoring an unreadable flood-wait file");
                BTreeMap::new()
            }
        };
        waits.retain(|_, until| *until > now);
        let running = waits
            .iter()
            .filter_map(|(bot, until)| Some((BotId::new(bot.clone()).ok()?, Timestamp(*until))))
            .collect();
        let waits = Mutex::new(waits);
        (Self { path, waits }, running)
    }

    /// The waits still running at `now` (epoch milliseconds): bot id → when each ends.
    pub fn running(&self, now: u64) -> BTreeMap<String, u64> {
        let waits = self.waits.lock().unwrap_or_else(PoisonError::into_inner);
        waits
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(bot, until)| (bot.clone(), *until))
            .collect()
    }
}

impl PauseMemory for FloodWaits {
    fn remember(&self, bot: &BotId, until: Timestamp) {
        let mut waits = self.waits.lock().unwrap_or_else(PoisonError::into_inner);
        let now = SystemClock.now().0;
        waits.retain(|_, kept| *kept > now);
        let kept = waits.entry(bot.to_string()).or_default();
        *kept = (*kept).max(until.0);
        let written = serde_json::to_vec(&*waits)
            .map_err(std::io::Error::other)
            .and_then(|bytes| write_whole(&self.path, &bytes, PRIVATE));
        if let Err(error) = written {
            warn!(file = %self.path.display(), %error, "the flood wait is not kept for a restart");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_kept_by_one_process_is_found_by_the_next_and_an_ended_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (waits, running) = FloodWaits::open(dir.path());
        assert!(running.is_empty());
        let now = SystemClock.now();
        let bot = BotId::new("paused").unwrap();
        waits.remember(&bot, now.plus(std::time::Duration::from_secs(60)));
        waits.remember(&BotId::new("over").unwrap(), Timestamp(now.0 - 1));
        let (_, running) = FloodWaits::open(dir.path());
        assert_eq!(
            running,
            [(bot, now.plus(std::time::Duration::from_secs(60)))]
        );
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join(FILE_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn an_unreadable_file_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), b"not json").unwrap();
        let (_, running) = FloodWaits::open(dir.path());
        assert!(running.is_empty());
    }
}
