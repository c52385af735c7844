//! How many worker loops may take a batch now: all of them while the webhook is quiet, a few while
//! it is busy, so that a burst of updates is stored at the rate the two sides together allow
//! instead of the worker's loops taking the cores and the writer from the webhook
//! (docs/PERFORMANCE.md, "Draining a backlog, and ingest against a no-op HTTP server").
//!
//! Only how many loops receive changes, never what a loop does with a batch: a loop that holds one
//! finishes it, and each chat's order is kept by the queue's message groups, whichever loop takes
//! the next batch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{watch, Notify};

use super::shutdown::Shutdown;

/// Loops that keep receiving while the webhook is busy: enough that a sustained burst is still
/// handled (a few thousand updates/s with the offline outbox), few enough to leave the cores to
/// ingest.
pub const LOOPS_UNDER_INGEST: usize = 4;

/// How often the webhook's arrival rate is read.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// At or above this many webhook requests per second the webhook counts as busy.
pub const BUSY_PER_SECOND: f64 = 2_000.0;

/// Below this many per second a busy webhook counts as quiet again; the gap keeps a rate near the
/// threshold from switching the loops on and off at every sample.
pub const QUIET_PER_SECOND: f64 = 1_000.0;

/// The webhook's arrivals, counted, and the number of loops they leave to the worker.
#[derive(Debug)]
pub struct LoopShare {
    all: usize,
    under_ingest: usize,
    arrivals: AtomicU64,
    /// Told of each arrival, so that a quiet webhook's sampler sleeps until the next one.
    arrival: Notify,
    allowed: watch::Sender<usize>,
}

impl LoopShare {
    /// A share of `all` loops, every one of them allowed until the webhook gets busy.
    pub fn new(all: usize) -> Self {
        Self {
            all,
            under_ingest: LOOPS_UNDER_INGEST.min(all),
            arrivals: AtomicU64::new(0),
            arrival: Notify::new(),
            allowed: watch::Sender::new(all),
        }
    }

    /// Counts one webhook request.
    pub fn arrived(&self) {
        self.arrivals.fetch_add(1, Ordering::Relaxed);
        self.arrival.notify_one();
    }

    /// How many loops may receive now: loops `0..allowed()`.
    pub fn allowed(&self) -> usize {
        *self.allowed.borrow()
    }

    /// Resolves once loop `id` may receive, or once shutdown is asked for.
    pub async fn turn(&self, id: usize, shutdown: &Shutdown) {
        let mut allowed = self.allowed.subscribe();
        tokio::select! {
            // The sender lives in `self`, so the channel cannot close while we wait.
            _ = allowed.wait_for(|allowed| id < *allowed) => {}
            () = shutdown.wait() => {}
        }
    }

    /// Sets the allowed loops from `arrivals` counted over `elapsed`.
    fn adjust(&self, arrivals: u64, elapsed: Duration) {
        let rate = arrivals as f64 / elapsed.as_secs_f64().max(f64::EPSILON);
        let busy = self.allowed() < self.all;
        let allowed = if rate >= BUSY_PER_SECOND || (busy && rate >= QUIET_PER_SECOND) {
            self.under_ingest
        } else {
            self.all
        };
        self.allowed.send_if_modified(|current| {
            let changed = *current != allowed;
            *current = allowed;
            changed
        });
    }

    /// Reads the arrival rate every [`SAMPLE_EVERY`] until shutdown, and sets the allowed loops.
    /// While nothing arrives and every loop is allowed there is nothing to read: it sleeps until
    /// the next arrival, so an idle process is not woken twenty times a second.
    pub async fn run(&self, shutdown: Shutdown) {
        let mut ticks = tokio::time::interval(SAMPLE_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = tokio::time::Instant::now();
        let mut counted = self.arrivals.load(Ordering::Relaxed);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = shutdown.wait() => return,
            }
            let now = tokio::time::Instant::now();
            let total = self.arrivals.load(Ordering::Relaxed);
            // A sample shortly after a wake-up counts over a whole interval, not over the moment
            // since the first arrival.
            self.adjust(total - counted, (now - last).max(SAMPLE_EVERY));
            (last, counted) = (now, total);
            if total == self.arrivals.load(Ordering::Relaxed) && self.allowed() == self.all {
                // A permit left by an arrival since the last sleep ends this one at once.
                tokio::select! {
                    () = self.arrival.notified() => {}
                    () = shutdown.wait() => return,
                }
                last = tokio::time::Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn arrive(share: &LoopShare, count: u64) {
        for _ in 0..count {
            share.arrived();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_webhook_leaves_the_worker_a_few_loops_and_a_quiet_one_all() {
        let share = Arc::new(LoopShare::new(64));
        let shutdown = Shutdown::new();
        let sampler = tokio::spawn({
            let (share, shutdown) = (share.clone(), shutdown.clone());
            async move { share.run(shutdown).await }
        });
        tokio::time::sleep(SAMPLE_EVERY / 2).await;
        assert_eq!(share.allowed(), 64, "all loops before any request");

        // 5,000 requests/s: busy.
        arrive(&share, 250);
        tokio::time::sleep(SAMPLE_EVERY).await;
        assert_eq!(share.allowed(), LOOPS_UNDER_INGEST);

        // 1,500/s: between the thresholds, still busy.
        arrive(&share, 75);
        tokio::time::sleep(SAMPLE_EVERY).await;
        assert_eq!(share.allowed(), LOOPS_UNDER_INGEST);

        // 500/s: quiet again.
        arrive(&share, 25);
        tokio::time::sleep(SAMPLE_EVERY).await;
        assert_eq!(share.allowed(), 64);

        // 1,500/s from quiet: not busy yet.
        arrive(&share, 75);
        tokio::time::sleep(SAMPLE_EVERY).await;
        assert_eq!(share.allowed(), 64);

        shutdown.trigger();
        sampler.await.expect("the sampler stops on shutdown");
    }

    #[tokio::test(start_paused = true)]
    async fn a_loop_past_the_share_waits_until_the_webhook_is_quiet() {
        let share = Arc::new(LoopShare::new(8));
        let shutdown = Shutdown::new();
        share.adjust(1_000, Duration::from_millis(100)); // 10,000/s
        assert_eq!(share.allowed(), LOOPS_UNDER_INGEST);

        // Within the share: at once.
        share.turn(LOOPS_UNDER_INGEST - 1, &shutdown).await;
        let waiting = tokio::spawn({
            let (share, shutdown) = (share.clone(), shutdown.clone());
            async move { share.turn(LOOPS_UNDER_INGEST, &shutdown).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "a loop past the share waits");

        share.adjust(0, Duration::from_millis(100));
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the loop goes on once the webhook is quiet")
            .expect("the waiting task ends");

        // Shutdown ends a wait too.
        share.adjust(1_000, Duration::from_millis(100));
        let stopping = tokio::spawn({
            let (share, shutdown) = (share.clone(), shutdown.clone());
            async move { share.turn(7, &shutdown).await }
        });
        shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(1), stopping)
            .await
            .expect("shutdown ends the wait")
            .expect("the waiting task ends");
    }

    #[test]
    fn fewer_loops_than_the_share_are_all_allowed_under_ingest() {
        let share = LoopShare::new(2);
        share.adjust(1_000, Duration::from_millis(100));
        assert_eq!(share.allowed(), 2);
    }
}
