//! The single writer: one thread owns every write transaction and commits operations in groups.
//!
//! Callers queue an operation and await its answer. The thread takes everything queued while its
//! previous commit was fsyncing, applies it all in one write transaction, commits once with
//! `Durability::Immediate`, and only then answers each caller. Under concurrent load that turns many
//! acknowledgements into one fsync (group commit); alone, an operation costs one commit as before.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use redb::{Durability, Key, Table, TableDefinition, TableHandle as _, Value, WriteTransaction};
use tgq_core::clock::Clock;
use tgq_core::PortError;
use tokio::sync::{oneshot, Notify};
use tracing::{error, info};

use crate::handle::{DbHandle, Health};
use crate::journal::{Draft, Journal};
use crate::queue::QueueIndex;
use crate::schema::CodecError;

/// The most operations applied in one transaction, so one commit's latency stays bounded.
const MAX_BATCH: usize = 1024;

/// How often a store that keeps failing its commits (a full disk) says so in the log: every worker
/// loop's receive is a batch, and each would otherwise log the same line many times a second.
const FAILURE_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// How often the file is reopened while commits keep failing.
const REOPEN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// Why one operation failed inside the writer.
#[derive(Debug)]
pub(crate) enum OpError {
    /// The operation itself is refused (unknown receipt, missing record, unreadable value). It is
    /// raised before the operation writes anything, so the rest of the batch still commits.
    Rejected(String),
    /// The operation is refused with a port error the caller must see as it is (a fenced write, a
    /// record too large); raised before the operation writes anything, like `Rejected`.
    Refused(PortError),
    /// The transaction can no longer be trusted (I/O, a value that cannot be encoded mid-write):
    /// every operation of the batch fails and nothing is committed.
    Fatal(String),
}

impl From<CodecError> for OpError {
    fn from(e: CodecError) -> Self {
        OpError::Rejected(e.to_string())
    }
}

macro_rules! fatal_from {
    ($($t:ty),*) => {$(
        impl From<$t> for OpError {
            fn from(e: $t) -> Self {
                OpError::Fatal(e.to_string())
            }
        }
    )*};
}
fatal_from!(
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError
);

/// What the writer's operations need besides the transaction.
pub(crate) struct Settings {
    /// Receives after which a message is redriven to the dead letters.
    pub(crate) max_receive_count: u32,
    /// The time source for sends, receives and visibility.
    pub(crate) clock: Arc<dyn Clock>,
}

/// One operation's view of the batch it runs in.
pub(crate) struct Tx<'t> {
    txn: &'t WriteTransaction,
    /// The in-memory index of the queue, kept in step with the queue tables.
    pub(crate) queue: &'t mut QueueIndex,
    /// Limits and the clock.
    pub(crate) settings: &'t Settings,
    wrote: bool,
    wake: bool,
    failure: Option<String>,
    /// Counter increments of this batch, written once when the batch is applied: every operation
    /// of a busy batch bumps the same few counters.
    pub(crate) counter_deltas: BTreeMap<&'static str, u64>,
    /// The next value of each sequence used in this batch, written back once likewise.
    pub(crate) sequences: BTreeMap<&'static str, u64>,
    /// Whether this batch has already forgotten the dedup ids that left the window.
    pub(crate) dedup_pruned: bool,
    /// What the batch did to update records, for the journal once it is committed.
    pub(crate) journal: Vec<Draft>,
    /// The batch changed what an operator sees (anything but the pollers' leases): its commit is
    /// announced to the store's watchers.
    seen: bool,
}

impl<'t> Tx<'t> {
    /// Opens a table to read it.
    pub(crate) fn table<K: Key + 'static, V: Value + 'static>(
        &self,
        definition: TableDefinition<K, V>,
    ) -> Result<Table<'t, K, V>, OpError> {
        Ok(self.txn.open_table(definition)?)
    }

    /// Opens a table to change it: the batch will have to be committed.
    pub(crate) fn table_mut<K: Key + 'static, V: Value + 'static>(
        &mut self,
        definition: TableDefinition<K, V>,
    ) -> Result<Table<'t, K, V>, OpError> {
        self.wrote = true;
        // A poller renews its lease every few seconds: watchers (the console) are not woken for it.
        self.seen |= definition.name() != crate::schema::POLLER_LEASES.name();
        self.table(definition)
    }

    /// Wakes waiting receivers once the batch is committed: a message may have become deliverable.
    pub(crate) fn wake_receivers(&mut self) {
        self.wake = true;
    }

    /// Marks the batch as changing the store without opening a table.
    pub(crate) fn mark_written(&mut self) {
        self.wrote = true;
    }
}

/// Called with the batch's fate once it is known: `None` when committed (or nothing needed writing).
type Reply = Box<dyn FnOnce(Option<&str>) + Send>;
/// An operation: runs inside the batch (or is told the batch already failed) and leaves a reply.
type Job = Box<dyn FnOnce(Option<&mut Tx<'_>>) -> Reply + Send>;
/// A look at the queue's index between two batches, when it holds what was last committed; `None`
/// when it must be reloaded first (the last batch failed).
type Look = Box<dyn FnOnce(Option<&QueueIndex>) + Send>;

/// What the writer thread is sent.
enum Work {
    Op(Job),
    Look(Look),
}

/// The handle callers use to reach the writer thread.
pub(crate) struct Writer {
    sender: Option<mpsc::Sender<Work>>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<CommitStats>,
    /// Woken after a commit that may have made a message deliverable.
    pub(crate) notify: Arc<Notify>,
    /// What committed batches did to update records.
    pub(crate) journal: Arc<Journal>,
}

/// How many commits the writer made and how many operations they carried.
#[derive(Default)]
pub(crate) struct CommitStats {
    pub(crate) commits: AtomicU64,
    pub(crate) ops: AtomicU64,
}

impl Writer {
    /// Starts the writer thread over an open database.
    pub(crate) fn start(
        db: Arc<DbHandle>,
        queue: QueueIndex,
        settings: Settings,
        health: Arc<Health>,
    ) -> std::io::Result<Self> {
        let (sender, receiver) = mpsc::channel::<Work>();
        let stats = Arc::new(CommitStats::default());
        let notify = Arc::new(Notify::new());
        let journal = Arc::new(Journal::default());
        let mut state = WriterThread {
            journal: journal.clone(),
            db,
            queue: Some(queue),
            suspect: false,
            health,
            settings,
            stats: stats.clone(),
            notify: notify.clone(),
            failure_log: None,
            reopen_tried: None,
        };
        let thread = std::thread::Builder::new()
            .name("tgq-store-writer".into())
            .spawn(move || state.run(&receiver))?;
        Ok(Self {
            sender: Some(sender),
            thread: Some(thread),
            stats,
            notify,
            journal,
        })
    }

    /// A writer for a store opened read-only: there is no thread, and every write is refused.
    pub(crate) fn read_only() -> Self {
        Self {
            sender: None,
            thread: None,
            stats: Arc::default(),
            notify: Arc::default(),
            journal: Arc::default(),
        }
    }

    /// Runs `op` in the next batch and answers once that batch is durable.
    pub(crate) async fn run<T, F>(&self, what: &'static str, op: F) -> Result<T, PortError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T, OpError> + Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move |tx| {
            let outcome = match tx {
                Some(tx) => {
                    let outcome = op(tx);
                    if let Err(OpError::Fatal(reason)) = &outcome {
                        tx.failure = Some(reason.clone());
                    }
                    outcome
                }
                None => Err(OpError::Fatal(
                    "an earlier operation failed the batch".into(),
                )),
            };
            Box::new(move |batch_failure| {
                let result = match (batch_failure, outcome) {
                    (Some(failure), _) => Err(PortError::unavailable(what, failure.to_owned())),
                    (None, Ok(value)) => Ok(value),
                    (None, Err(OpError::Rejected(reason))) => {
                        Err(PortError::rejected(what, reason))
                    }
                    (None, Err(OpError::Refused(error))) => Err(error),
                    (None, Err(OpError::Fatal(reason))) => {
                        Err(PortError::unavailable(what, reason))
                    }
                };
                // The caller may have stopped waiting (a cancelled request); the work is done anyway.
                let _ = answer.send(result);
            })
        });
        let sender = self.sender.as_ref().ok_or_else(|| {
            PortError::unavailable(what, "the store is closed, or was opened read-only")
        })?;
        sender
            .send(Work::Op(job))
            .map_err(|_| PortError::unavailable(what, "the store writer has stopped"))?;
        answered
            .await
            .map_err(|_| PortError::unavailable(what, "the store writer has stopped"))?
    }

    /// `f` of the queue's index as last committed, asked of the writer thread between two batches
    /// and waited for at most `patience`; blocking. `None` when the store has no writer (opened
    /// read-only), the index must be reloaded first (a batch failed), or a batch holds the thread
    /// longer than `patience` (a commit the disk holds up): the caller reads the tables instead.
    pub(crate) fn look<T, F>(&self, patience: std::time::Duration, f: F) -> Option<T>
    where
        T: Send + 'static,
        F: FnOnce(&QueueIndex) -> T + Send + 'static,
    {
        let sender = self.sender.as_ref()?;
        let (answer, answered) = mpsc::sync_channel(1);
        let look: Look = Box::new(move |index| {
            // The caller may have stopped waiting.
            let _ = answer.send(index.map(f));
        });
        sender.send(Work::Look(look)).ok()?;
        answered.recv_timeout(patience).ok().flatten()
    }

    /// Commits made so far.
    pub(crate) fn commits(&self) -> u64 {
        self.stats.commits.load(Ordering::Relaxed)
    }

    /// Operations carried by those commits.
    pub(crate) fn ops_committed(&self) -> u64 {
        self.stats.ops.load(Ordering::Relaxed)
    }
}

impl Drop for Writer {
    /// Lets the thread finish what is queued and waits for it, so the database file is closed (and
    /// its lock released) when the store is dropped.
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                error!("the store writer thread panicked");
            }
        }
    }
}

struct WriterThread {
    db: Arc<DbHandle>,
    /// `None` after a failed batch until the index is reloaded from what was last committed.
    queue: Option<QueueIndex>,
    /// A batch failed: the database is reopened before the next one (redb refuses every write
    /// after a failed one until then).
    suspect: bool,
    /// What `/readyz` reports.
    health: Arc<Health>,
    settings: Settings,
    stats: Arc<CommitStats>,
    notify: Arc<Notify>,
    journal: Arc<Journal>,
    /// When a failed batch was last logged, and how many failed since without a line.
    failure_log: Option<(std::time::Instant, u64)>,
    /// When the last reopen after a failed batch was tried.
    reopen_tried: Option<std::time::Instant>,
}

impl WriterThread {
    /// Logs a failed batch at most once per [`FAILURE_LOG_INTERVAL`], with the count of those
    /// that failed in between.
    fn log_failure(&mut self, failure: &str, operations: u64) {
        let now = std::time::Instant::now();
        match &mut self.failure_log {
            Some((last, unlogged)) if now.duration_since(*last) < FAILURE_LOG_INTERVAL => {
                *unlogged += 1;
            }
            _ => {
                let unlogged = self.failure_log.map_or(0, |(_, unlogged)| unlogged);
                error!(
                    error = %failure,
                    operations,
                    failed_batches_since_last_line = unlogged,
                    "store batch failed; nothing committed (is the disk full?)"
                );
                self.failure_log = Some((now, 0));
            }
        }
    }

    fn run(&mut self, receiver: &mpsc::Receiver<Work>) {
        // Blocks for the first operation, then takes whatever else queued up meanwhile.
        while let Ok(first) = receiver.recv() {
            let (mut jobs, mut looks) = (Vec::new(), Vec::new());
            let mut next = Some(first);
            while let Some(work) = next.take() {
                match work {
                    Work::Op(job) => jobs.push(job),
                    Work::Look(look) => looks.push(look),
                }
                if jobs.len() < MAX_BATCH {
                    next = receiver.try_recv().ok();
                }
            }
            // Between two batches the index holds exactly what was last committed.
            for look in looks {
                look(self.queue.as_ref());
            }
            if !jobs.is_empty() {
                self.run_batch(jobs);
            }
        }
    }

    fn run_batch(&mut self, jobs: Vec<Job>) {
        let count = jobs.len() as u64;
        let (replies, outcome) = self.apply(jobs);
        let failure = outcome.as_ref().err().cloned();
        let wake = match outcome {
            Ok(Applied::Committed {
                wake,
                journal,
                seen,
            }) => {
                self.journal
                    .committed(self.settings.clock.now(), journal, seen);
                self.stats.commits.fetch_add(1, Ordering::Relaxed);
                self.stats.ops.fetch_add(count, Ordering::Relaxed);
                self.health.committed();
                if self.failure_log.take().is_some() {
                    info!("the store commits again");
                }
                wake
            }
            Ok(Applied::ReadOnly) => false,
            Err(failure) => {
                self.log_failure(&failure, count);
                self.health.failed(&failure);
                self.suspect = true;
                false
            }
        };
        for reply in replies {
            reply(failure.as_deref());
        }
        if wake {
            self.notify.notify_waiters();
        }
    }

    fn apply(&mut self, jobs: Vec<Job>) -> (Vec<Reply>, Result<Applied, String>) {
        let fail_all = |jobs: Vec<Job>, failure: String| {
            let replies = jobs.into_iter().map(|job| job(None)).collect();
            (replies, Err(failure))
        };
        if self.suspect {
            // Each reopen reads the whole file (the integrity check): on a disk that stays full
            // it is tried once per interval, not for every batch.
            if let Some(tried) = self.reopen_tried {
                if tried.elapsed() < REOPEN_INTERVAL {
                    let failure = self.health.failure().unwrap_or_default();
                    return fail_all(jobs, failure);
                }
            }
            self.reopen_tried = Some(std::time::Instant::now());
            match self.db.reopen() {
                Ok(queue) => {
                    info!("the store was reopened after a failed write");
                    self.queue = Some(queue);
                    self.suspect = false;
                    self.reopen_tried = None;
                }
                Err(e) => return fail_all(jobs, format!("reopening the store: {e}")),
            }
        }
        let db = match self.db.get() {
            Ok(db) => db,
            Err(e) => return fail_all(jobs, e.to_string()),
        };
        let Some(db) = db.writable() else {
            return fail_all(jobs, "the store was opened read-only".into());
        };
        let mut queue = match self.queue.take() {
            Some(queue) => queue,
            None => match QueueIndex::load(db) {
                Ok(queue) => queue,
                Err(e) => return fail_all(jobs, format!("reloading the queue index: {e}")),
            },
        };
        let mut txn = match db.begin_write() {
            Ok(txn) => txn,
            Err(e) => return fail_all(jobs, e.to_string()),
        };
        if let Err(e) = txn.set_durability(Durability::Immediate) {
            return fail_all(jobs, e.to_string());
        }
        let mut replies = Vec::with_capacity(jobs.len());
        let (wrote, wake, failure, journal, seen) = {
            let mut tx = Tx {
                txn: &txn,
                queue: &mut queue,
                settings: &self.settings,
                wrote: false,
                wake: false,
                failure: None,
                counter_deltas: BTreeMap::new(),
                sequences: BTreeMap::new(),
                dedup_pruned: false,
                journal: Vec::new(),
                seen: false,
            };
            for job in jobs {
                // Once an operation has failed the transaction, the rest are only told so.
                let reply = if tx.failure.is_some() {
                    job(None)
                } else {
                    job(Some(&mut tx))
                };
                replies.push(reply);
            }
            if tx.failure.is_none() {
                if let Err(e) = tx.write_batch_totals() {
                    tx.failure = Some(match e {
                        OpError::Rejected(reason) | OpError::Fatal(reason) => reason,
                        OpError::Refused(error) => error.to_string(),
                    });
                }
            }
            (tx.wrote, tx.wake, tx.failure, tx.journal, tx.seen)
        };
        let outcome = match failure {
            Some(reason) => {
                if let Err(e) = txn.abort() {
                    error!(error = %e, "aborting a failed store batch");
                }
                Err(reason)
            }
            None if !wrote => {
                // Nothing changed (an empty receive, a duplicate send): no fsync needed.
                let _ = txn.abort();
                Ok(Applied::ReadOnly)
            }
            None => txn
                .commit()
                .map(|()| Applied::Committed {
                    wake,
                    journal,
                    seen,
                })
                .map_err(|e| e.to_string()),
        };
        // After a failure the index may hold changes that were never committed: the next batch
        // reloads it from the database instead.
        if outcome.is_ok() {
            self.queue = Some(queue);
        }
        (replies, outcome)
    }
}

/// What a batch came to.
enum Applied {
    /// Committed durably; `wake` if receivers may find something new; `journal` what it did to
    /// update records; `seen` if it changed what watchers show.
    Committed {
        wake: bool,
        journal: Vec<Draft>,
        seen: bool,
    },
    /// Nothing was written, so nothing was committed.
    ReadOnly,
}
