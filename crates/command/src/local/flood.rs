//! What local mode's pacer keeps in the data directory for the next start
//! (docs/design/pacing.md): the flood waits (`flood-waits.json`), so that a process started inside
//! a wait Telegram announced holds the bot until it ends, and the sends of the last minute
//! (`sends.log`), so that a chat sent to just before a stop or a crash is not sent to again within
//! its second (a group within its minute) after the start. Both files are advisory: one that cannot
//! be read is reported and ignored, as the worst it costs is one more 429.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use tgq_core::clock::{Clock, SystemClock};
use tgq_core::ids::BotId;
use tgq_core::pacer::{PauseMemory, Remembered};
use tgq_core::record::Timestamp;
use tgq_embedded::files::{write_whole, PRIVATE};
use tracing::warn;

/// The flood waits' file name in the data directory.
pub const FILE_NAME: &str = "flood-waits.json";
/// The sends' file name in the data directory.
pub const SENDS_FILE_NAME: &str = "sends.log";
/// The longest window a send counts in: a group's minute.
const KEPT_MS: u64 = 60_000;
/// Lines appended to `sends.log` before it is written again with only the last minute's.
const COMPACT_AFTER: usize = 4096;

/// The flood waits of local mode's bots (bot id → when its wait ends, epoch milliseconds), and
/// their last minute of sends.
#[derive(Debug)]
pub struct FloodWaits {
    path: PathBuf,
    waits: Mutex<BTreeMap<String, u64>>,
    sends: Mutex<SendLog>,
}

/// `sends.log`: a line `bot chat epoch_ms` a send, appended as each is booked. An append reaches
/// the kernel before the call leaves, so a killed process loses none; a machine that crashed takes
/// longer than a minute to come back.
#[derive(Debug)]
struct SendLog {
    path: PathBuf,
    file: Option<File>,
    recent: VecDeque<(String, i64, u64)>,
    appended: usize,
    warned: bool,
}

impl SendLog {
    /// The log in `path`, with the sends of its last minute, written again with only those.
    fn open(path: PathBuf, now: u64) -> (Self, Vec<(BotId, i64, Timestamp)>) {
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => {
                warn!(file = %path.display(), %error, "ignoring an unreadable sends file");
                String::new()
            }
        };
        let recent: VecDeque<(String, i64, u64)> = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(' ');
                let bot = fields.next()?.to_owned();
                let chat = fields.next()?.parse().ok()?;
                let at = fields.next()?.parse().ok()?;
                Some((bot, chat, at))
            })
            .filter(|(_, _, at)| at + KEPT_MS > now)
            .collect();
        let kept = recent
            .iter()
            .filter_map(|(bot, chat, at)| {
                Some((BotId::new(bot.clone()).ok()?, *chat, Timestamp(*at)))
            })
            .collect();
        let mut log = SendLog {
            path,
            file: None,
            recent,
            appended: 0,
            warned: false,
        };
        log.compact();
        (log, kept)
    }

    /// Writes the file again with the last minute's sends only, and appends from there.
    fn compact(&mut self) {
        let text: String = self
            .recent
            .iter()
            .map(|(bot, chat, at)| format!("{bot} {chat} {at}\n"))
            .collect();
        let reopened = write_whole(&self.path, text.as_bytes(), PRIVATE)
            .and_then(|()| File::options().append(true).open(&self.path));
        self.appended = 0;
        match reopened {
            Ok(file) => self.file = Some(file),
            Err(error) => {
                self.file = None;
                self.warn(&error);
            }
        }
    }

    fn append(&mut self, bot: &BotId, chat: i64, at: u64) {
        let now = SystemClock.now().0;
        while self
            .recent
            .front()
            .is_some_and(|(_, _, sent)| sent + KEPT_MS <= now)
        {
            self.recent.pop_front();
        }
        self.recent.push_back((bot.to_string(), chat, at));
        self.appended += 1;
        if self.appended > COMPACT_AFTER {
            return self.compact();
        }
        let line = format!("{bot} {chat} {at}\n");
        if let Some(Err(error)) = self.file.as_mut().map(|f| f.write_all(line.as_bytes())) {
            self.warn(&error);
        }
    }

    fn warn(&mut self, error: &std::io::Error) {
        if !std::mem::replace(&mut self.warned, true) {
            warn!(file = %self.path.display(), %error, "sends are not kept for a restart");
        }
    }
}

impl FloodWaits {
    /// The waits and sends kept in `data_dir`, with those still running for the pacer to hold.
    pub fn open(data_dir: &Path) -> (Self, Remembered) {
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
        let (sends, sent) = SendLog::open(data_dir.join(SENDS_FILE_NAME), now);
        let remembered = Remembered {
            waits: running,
            sends: sent,
        };
        let memory = Self {
            path,
            waits: Mutex::new(waits),
            sends: Mutex::new(sends),
        };
        (memory, remembered)
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

    fn sent(&self, bot: &BotId, chat: i64, at: Timestamp) {
        let mut sends = self.sends.lock().unwrap_or_else(PoisonError::into_inner);
        sends.append(bot, chat, at.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_kept_by_one_process_is_found_by_the_next_and_an_ended_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (waits, remembered) = FloodWaits::open(dir.path());
        assert!(remembered.waits.is_empty());
        let now = SystemClock.now();
        let bot = BotId::new("paused").unwrap();
        waits.remember(&bot, now.plus(std::time::Duration::from_secs(60)));
        waits.remember(&BotId::new("over").unwrap(), Timestamp(now.0 - 1));
        let (_, remembered) = FloodWaits::open(dir.path());
        assert_eq!(
            remembered.waits,
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
        std::fs::write(dir.path().join(SENDS_FILE_NAME), b"not\nlines 1\n").unwrap();
        let (_, remembered) = FloodWaits::open(dir.path());
        assert_eq!(remembered, Remembered::default());
    }

    #[test]
    fn the_sends_of_the_last_minute_are_found_by_the_next_process_and_older_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let (memory, _) = FloodWaits::open(dir.path());
        let now = SystemClock.now();
        let bot = BotId::new("b").unwrap();
        memory.sent(&bot, -100, Timestamp(now.0 - 61_000));
        memory.sent(&bot, -100, Timestamp(now.0 - 30_000));
        memory.sent(&bot, 7, now);
        drop(memory);
        let (_, remembered) = FloodWaits::open(dir.path());
        assert_eq!(
            remembered.sends,
            [
                (bot.clone(), -100, Timestamp(now.0 - 30_000)),
                (bot, 7, now)
            ]
        );
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join(SENDS_FILE_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
