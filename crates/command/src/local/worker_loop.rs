//! The stand-in for the SQS event source mapping (docs/ARCHITECTURE.md §1): receive a batch, hand
//! it to the [`Worker`] use case with an invocation deadline, delete every message not reported as
//! failed.
//! Several loops run at once; the queue's message groups keep each chat in order between them.
//! While the webhook is busy only a few of them receive ([`LoopShare`]).

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tgq_core::clock::Clock;
use tgq_core::error::error_chain;
use tgq_core::patience::patiently;
use tgq_core::ports::ReceiptHandle;
use tgq_core::worker::Worker;
use tgq_core::{defaults, PortError};
use tgq_embedded::EmbeddedStore;
use tracing::{info, warn};

use super::share::LoopShare;
use super::shutdown::Shutdown;

/// How the loops receive and how long one "invocation" may take.
#[derive(Clone, Copy, Debug)]
pub struct LoopSettings {
    /// Concurrent loops (the mapping's MaximumConcurrency).
    pub loops: usize,
    /// Messages per receive (the mapping's batch size; SQS allows at most 10).
    pub batch_size: usize,
    /// How long a receive waits for a first message.
    pub wait: Duration,
    /// The invocation budget: the batch's deadline, and when it is cut off like a timed-out Lambda.
    pub budget: Duration,
    /// How long received messages stay hidden; longer than the budget, so a live batch is never
    /// delivered twice, and short enough that a crashed run's messages come back soon.
    pub visibility: Duration,
}

impl Default for LoopSettings {
    fn default() -> Self {
        Self {
            loops: crate::config::DEFAULT_WORKER_LOOPS,
            batch_size: crate::config::DEFAULT_WORKER_BATCH,
            wait: Duration::from_secs(20),
            budget: tgq_core::defaults::WORKER_TIMEOUT,
            visibility: tgq_core::defaults::WORKER_TIMEOUT + Duration::from_secs(10),
        }
    }
}

/// How many loops run, for `/readyz`.
#[derive(Debug, Default)]
pub struct LoopStats {
    running: AtomicUsize,
}

impl LoopStats {
    /// Loops currently running.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }
}

/// Deletes a batch's finished messages in one operation, trying again while the store says it
/// is unavailable (a full disk for a moment), for up to [`defaults::STORE_PATIENCE`]: a message
/// left undeleted holds its whole chat until its visibility timeout ends, as the worker's settle
/// does (docs/design/worker.md §1).
async fn delete_patiently(
    store: &EmbeddedStore,
    receipts: &[ReceiptHandle],
) -> Result<(), PortError> {
    patiently(
        "delete",
        defaults::STORE_PATIENCE,
        || Duration::MAX,
        || store.delete_all(receipts.to_vec()),
    )
    .await
}

/// What every loop shares.
#[derive(Clone)]
pub struct Loops {
    /// How they receive.
    pub settings: LoopSettings,
    /// The store they receive from.
    pub store: Arc<EmbeddedStore>,
    /// Tells the time for deadlines.
    pub clock: Arc<dyn Clock>,
    /// How many run, for `/readyz`.
    pub stats: Arc<LoopStats>,
    /// How many may receive now.
    pub share: Arc<LoopShare>,
    /// Stops them.
    pub shutdown: Shutdown,
}

/// Runs one loop until shutdown; the batch in hand is always finished first.
pub async fn run(id: usize, loops: Loops, worker: Worker) {
    let Loops {
        settings,
        store,
        clock,
        stats,
        share,
        shutdown,
    } = loops;
    stats.running.fetch_add(1, Ordering::SeqCst);
    while !shutdown.is_triggered() {
        // Past the share while the webhook is busy: wait, so ingest keeps the cores.
        share.turn(id, &shutdown).await;
        if shutdown.is_triggered() {
            break;
        }
        // A long wait, as SQS long polling: an idle loop costs a look every few seconds, and the
        // shutdown ends the wait (never a receive being committed).
        let records = match store
            .receive_until(
                settings.batch_size,
                settings.visibility,
                settings.wait,
                shutdown.wait(),
            )
            .await
        {
            Ok(records) => records,
            Err(error) => {
                warn!(worker_loop = id, error = %error_chain(&error), "receive failed; retrying in 1 s");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = shutdown.wait() => {}
                }
                continue;
            }
        };
        if records.is_empty() {
            continue;
        }
        let deadline = clock.now().plus(settings.budget);
        let batch = worker.process_batch(&records, deadline);
        let Ok(report) = tokio::time::timeout(settings.budget, batch).await else {
            // As when Lambda times out: nothing is deleted, the messages come back after their
            // visibility timeout and the records' leases let the next run take over.
            warn!(
                worker_loop = id,
                messages = records.len(),
                "batch ran past its budget and was cut off"
            );
            continue;
        };
        let failed: HashSet<String> = report.failed_message_ids().into_iter().collect();
        // In one operation: the records are settled already, so their order does not matter.
        let done: Vec<ReceiptHandle> = records
            .iter()
            .filter(|r| !failed.contains(&r.message_id))
            .map(|r| r.receipt.clone())
            .collect();
        if !done.is_empty() {
            if let Err(error) = delete_patiently(&store, &done).await {
                // They are redelivered after their visibility timeout, found DONE or DEAD, and
                // acknowledged without running again; their chats wait until then.
                warn!(worker_loop = id, messages = done.len(), error = %error_chain(&error), "delete failed");
            }
        }
        let resent = report.resent_after_unknown_outcome();
        if resent > 0 {
            info!(
                worker_loop = id,
                resent, "actions with an unknown outcome were sent again (at least once)"
            );
            if let Err(error) = store.count_resent(resent).await {
                warn!(worker_loop = id, error = %error_chain(&error), "re-sent actions were not counted");
            }
        }
    }
    stats.running.fetch_sub(1, Ordering::SeqCst);
}
