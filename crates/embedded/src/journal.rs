//! What the store did to each update while this process has held it, in memory: every change of
//! a record's status with the time it was committed, and the chat state a finished run replaced
//! and wrote. `tgq local`'s console draws an update's timeline and its state before and after from
//! it (docs/design/local.md); nothing here is durable, and nothing reads it to decide anything.
//!
//! The writer thread appends what a batch did once the batch is committed, so the journal never
//! shows what a failed commit left unwritten, and bumps a counter that watchers (the console's
//! event stream) wait on: a watcher costs nothing while the store is idle, a poller renewing its
//! lease included.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::Serialize;
use tgq_core::record::{Status, Timestamp};
use tokio::sync::watch;

/// How many entries the journal keeps; the oldest leave first.
pub const JOURNAL_CAPACITY: usize = 20_000;
/// How many bytes of chat states and keys the journal keeps at most: a state may be 64 KiB before
/// and after, and 20,000 entries of such would be gigabytes. The oldest leave first.
pub const JOURNAL_MAX_BYTES: usize = 64 * 1024 * 1024;

/// One committed change of an update record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JournalEntry {
    /// Its place in the journal, from 1.
    pub seq: u64,
    /// When the batch that made it was applied.
    pub at: Timestamp,
    /// The record's key, `{bot_id}#{update_id}`.
    pub pk: String,
    /// The status it was written with.
    pub status: &'static str,
    /// Its handler runs at that point.
    pub attempts: u32,
    /// The chat state a finished run wrote, with the one it replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<StateChange>,
}

/// A chat state a finished run wrote, as JSON text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StateChange {
    /// The state before the run; `None` when the chat had none.
    pub before: Option<String>,
    /// The state the run wrote.
    pub after: String,
}

/// A change a batch made, before the batch is committed.
#[derive(Debug)]
pub(crate) struct Draft {
    pub(crate) pk: String,
    pub(crate) status: Status,
    pub(crate) attempts: u32,
    pub(crate) state: Option<StateChange>,
}

/// The journal and its change counter.
pub(crate) struct Journal {
    entries: Mutex<Entries>,
    /// Bumped after every commit that changed what an operator sees (anything but a poller's
    /// lease).
    commits: watch::Sender<u64>,
}

#[derive(Default)]
struct Entries {
    next_seq: u64,
    kept: VecDeque<JournalEntry>,
    /// What the kept entries hold, as [`JournalEntry::weight`] counts it.
    bytes: usize,
}

impl JournalEntry {
    /// The bytes it holds beyond its fixed fields: its key and the states it carries.
    fn weight(&self) -> usize {
        let state = self.state.as_ref().map_or(0, |change| {
            change.before.as_ref().map_or(0, String::len) + change.after.len()
        });
        self.pk.len() + state
    }
}

impl Default for Journal {
    fn default() -> Self {
        Self {
            entries: Mutex::default(),
            commits: watch::Sender::new(0),
        }
    }
}

impl Journal {
    /// Appends what a committed batch did at `at`, and tells the watchers when it changed what
    /// they show (`seen`). A record written again with the status and attempts it already had (an
    /// action's intent or outcome) adds nothing.
    pub(crate) fn committed(&self, at: Timestamp, drafts: Vec<Draft>, seen: bool) {
        if !drafts.is_empty() {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            for draft in drafts {
                entries.append(at, draft);
            }
        }
        if seen {
            self.commits.send_modify(|commits| *commits += 1);
        }
    }

    /// The entries of `pk`, oldest first.
    pub(crate) fn of(&self, pk: &str) -> Vec<JournalEntry> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .kept
            .iter()
            .filter(|entry| entry.pk == pk)
            .cloned()
            .collect()
    }

    /// A receiver that sees the commit counter change.
    pub(crate) fn watch(&self) -> watch::Receiver<u64> {
        self.commits.subscribe()
    }
}

impl Entries {
    fn append(&mut self, at: Timestamp, draft: Draft) {
        let last = self
            .kept
            .iter_mut()
            .rev()
            .take(256)
            .find(|entry| entry.pk == draft.pk)
            .filter(|last| last.status == draft.status.as_str() && last.attempts == draft.attempts);
        if let Some(last) = last {
            // The same write seen again (a settle notes its record, then the state it wrote).
            if draft.state.is_some() {
                let was = last.weight();
                last.state = draft.state;
                self.bytes = self.bytes - was + last.weight();
                self.shrink();
            }
            return;
        }
        self.next_seq += 1;
        let entry = JournalEntry {
            seq: self.next_seq,
            at,
            pk: draft.pk,
            status: draft.status.as_str(),
            attempts: draft.attempts,
            state: draft.state,
        };
        self.bytes += entry.weight();
        self.kept.push_back(entry);
        self.shrink();
    }

    /// Lets the oldest entries go until the journal is within its count and its bytes.
    fn shrink(&mut self) {
        while self.kept.len() > JOURNAL_CAPACITY || self.bytes > JOURNAL_MAX_BYTES {
            let Some(oldest) = self.kept.pop_front() else {
                return;
            };
            self.bytes -= oldest.weight();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(pk: &str, status: Status, attempts: u32) -> Draft {
        Draft {
            pk: pk.into(),
            status,
            attempts,
            state: None,
        }
    }

    #[test]
    fn a_record_written_again_unchanged_adds_nothing_and_every_commit_is_seen() {
        let journal = Journal::default();
        let mut watcher = journal.watch();
        journal.committed(
            Timestamp(1),
            vec![
                draft("b#1", Status::Received, 0),
                draft("b#1", Status::Queued, 0),
            ],
            true,
        );
        journal.committed(
            Timestamp(2),
            vec![draft("b#1", Status::Processing, 1)],
            true,
        );
        journal.committed(
            Timestamp(3),
            vec![draft("b#1", Status::Processing, 1)],
            true,
        );
        journal.committed(Timestamp(4), vec![], true);
        journal.committed(Timestamp(5), vec![], false);
        let seen: Vec<_> = journal
            .of("b#1")
            .into_iter()
            .map(|e| (e.at.0, e.status))
            .collect();
        assert_eq!(
            seen,
            [(1, "RECEIVED"), (1, "QUEUED"), (2, "PROCESSING")],
            "the unchanged write at 3 is left out"
        );
        assert!(watcher.has_changed().unwrap());
        assert_eq!(
            *watcher.borrow_and_update(),
            4,
            "each commit bumps the counter"
        );
    }

    #[test]
    fn large_states_are_kept_within_the_journal_s_bytes() {
        let journal = Journal::default();
        // Runs that each replace a 64 KiB state with another: twice the bound's worth of them.
        let state = "x".repeat(64 * 1024);
        let runs = 2 * JOURNAL_MAX_BYTES / (2 * state.len());
        for n in 0..runs {
            let mut done = draft(&format!("b#{n}"), Status::Done, 1);
            done.state = Some(StateChange {
                before: Some(state.clone()),
                after: state.clone(),
            });
            journal.committed(Timestamp(n as u64), vec![done], true);
        }
        {
            let entries = journal.entries.lock().unwrap();
            let held: usize = entries.kept.iter().map(JournalEntry::weight).sum();
            assert_eq!(held, entries.bytes);
            assert!(held <= JOURNAL_MAX_BYTES, "{held} bytes kept");
            assert!(entries.kept.len() < runs, "the oldest left");
        }
        assert!(
            journal.of(&format!("b#{}", runs - 1)).len() == 1,
            "the newest stays"
        );
    }

    #[test]
    fn the_oldest_entries_leave_first() {
        let journal = Journal::default();
        for n in 0..=JOURNAL_CAPACITY as u32 {
            journal.committed(
                Timestamp(u64::from(n)),
                vec![draft(&format!("b#{n}"), Status::Queued, 0)],
                true,
            );
        }
        assert!(journal.of("b#0").is_empty());
        assert_eq!(journal.of("b#1").len(), 1);
    }
}
