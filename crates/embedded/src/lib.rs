//! The embedded durable store of `tgq local` (docs/design/local.md): update records, the
//! FIFO updates queue, the dead letters, the offline outbox and the counters, in one redb file, with
//! every port of `tgq-core` implemented on it with the in-memory adapters' semantics.
//!
//! Every change acknowledged to a caller is committed with `Durability::Immediate` (fsync) before
//! the call returns. Every write — the ports', retention's and the outbox's — goes through one writer
//! thread that commits whatever queued up while its previous commit was syncing in a single
//! transaction (group commit), so concurrent webhook calls share fsyncs. Reads use redb's snapshot
//! read transactions.
//!
//! The modules: [`open`](StoreOptions) (the file, its layout, the writer), `error`, `inspect` (what
//! operations read), `retention`, `ports` (the `tgq-core` ports), and inside the writer `records`
//! and `queue`, with the stored layout in `schema`.

#![warn(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use tgq_core::clock::Clock;

mod backup;
mod bots_file;
mod broadcasts;
mod charges;
mod error;
pub mod files;
mod handle;
mod inspect;
mod journal;
mod lease;
mod offline;
mod open;
mod operate;
mod ports;
mod queue;
mod records;
mod retention;
mod schema;
mod timers;
mod updates;
mod writer;

pub use backup::{Backup, Restored};
pub use bots_file::{BotsFile, BOTS_FILE};
pub use error::StoreError;
pub use inspect::{Counters, OldestPending, OutboxEntry, StoreStats};
pub use journal::{JournalEntry, StateChange, JOURNAL_CAPACITY, JOURNAL_MAX_BYTES};
pub use lease::EmbeddedPollerLease;
pub use offline::OfflineBotApi;
pub use open::StoreOptions;
pub use retention::Purged;
pub use timers::{Cancelled, PendingTimer};
pub use updates::{
    ActionView, BurialView, ChatView, Conversation, PendingView, QueuedView, SaidView,
    UpdateDetail, UpdateView,
};

use handle::{DbHandle, Health};
use writer::Writer;

/// The database file's name inside the data directory.
pub const FILE_NAME: &str = "tgq.redb";

/// The embedded store. Share it as `Arc<EmbeddedStore>`; it implements every port.
pub struct EmbeddedStore {
    // Dropped first: its drop waits for the writer thread, which holds the last other handle on the
    // database, so the file is closed (and its lock released) when the store is gone.
    writer: Writer,
    db: Arc<DbHandle>,
    health: Arc<Health>,
    /// Dead letters an operator holds in this process, until when (`DeadLetterStore::hold`).
    holds: std::sync::Mutex<std::collections::HashMap<u64, std::time::Instant>>,
    ttl: Duration,
    clock: Arc<dyn Clock>,
    /// Notified when a timer is handed over, so the timer loop looks at the earliest due again.
    timers_changed: tokio::sync::Notify,
}

/// What [`EmbeddedStore::recover`] released.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Queue messages a receiver of an earlier process still held, made visible at once.
    pub messages: u64,
    /// Runs of an earlier process still holding a record's lease, their leases expired.
    pub leases: u64,
    /// Pollers' leases an earlier process still held, released.
    pub poller_leases: u64,
}

impl EmbeddedStore {
    /// Releases at once what runs of an earlier process still held: their messages become visible,
    /// their records' leases end and a poller lease they held is released, so a restart resumes
    /// from its first second instead of after a visibility timeout or a lease's TTL. Only the
    /// process that holds the store's lock may call it, before it starts any run of its own (`tgq
    /// local` does, at start): no other run can then be alive. A backoff the earlier process chose
    /// for a message is kept.
    pub async fn recover(&self) -> Result<Recovered, tgq_core::PortError> {
        let now = self.clock.now();
        self.writer
            .run("recover held messages and leases", move |tx| {
                Ok(Recovered {
                    messages: tx.release_held(now)?,
                    leases: tx.release_leases(now)?,
                    poller_leases: tx.release_poller_leases(now)?,
                })
            })
            .await
    }

    /// `Ok` while the store commits; the reason of the last failed commit otherwise (a full disk,
    /// an fsync error). `/readyz` answers with it.
    pub fn health(&self) -> Result<(), String> {
        match self.health.failure() {
            None => Ok(()),
            Some(reason) => Err(reason),
        }
    }

    /// Tries a commit now (after a failure the writer reopens the file first), and says whether the
    /// store commits again.
    pub async fn probe(&self) -> Result<(), String> {
        self.writer
            .run("health probe", |tx| {
                tx.mark_written();
                Ok(())
            })
            .await
            .map_err(|e| tgq_core::error::error_chain(&e))
    }

    /// What the store did to the record `pk` (`{bot_id}#{update_id}`) while this process has
    /// held it, oldest first: each status it was written with, when, and the chat state a
    /// finished run replaced and wrote. In memory only; see [`JOURNAL_CAPACITY`] and [`JOURNAL_MAX_BYTES`].
    pub fn journal_of(&self, pk: &str) -> Vec<JournalEntry> {
        self.writer.journal.of(pk)
    }

    /// A receiver that sees a counter change after every commit: a watcher waits on it instead
    /// of reading the store on a timer.
    pub fn commits_watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.writer.journal.watch()
    }

    /// Durably adds `sends` to [`Counters::resent_after_unknown_outcome`].
    pub async fn count_resent(&self, sends: u64) -> Result<(), tgq_core::PortError> {
        self.writer
            .run("count resent", move |tx| {
                tx.add(schema::counter::RESENT, sends)
            })
            .await
    }
}
