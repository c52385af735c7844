//! Broadcasts on a stack, as the worker function runs them (docs/design/broadcast-runs.md): each
//! record of the broadcasts queue is a step of a job's chain ([`super::chain`]). A step is run
//! with its job's bot's Bot API (a cancelled job's with [`NoSends`]); what comes next is queued,
//! or the message is hidden until the step is due, or, when it could not run, for
//! `step_retry` of its receives: 10 s, doubling up to 10 minutes. From its
//! `STEP_STUCK_AFTER`th receive a failing step is logged as an error and counted as
//! `BroadcastStuck`.

use std::sync::Arc;
use std::time::Duration;

use tracing::{error, info, warn, Instrument as _};

use super::chain::{BroadcastQueue, ChainNext, ChainStep, NoSends};
use super::{BroadcastRunner, Change, JobState};
use crate::bots::{BotDirectory, Lookup};
use crate::clock::Clock;
use crate::defaults;
use crate::error::error_chain;
use crate::ports::{QueueRecord, Visibility};
use crate::record::Timestamp;
use crate::telegram::BotApi;

/// The steps of the stack's broadcast jobs, as the worker receives them from the broadcasts
/// queue: each is run, then its next queued, or its message hidden until it is due or may run
/// again.
pub struct BroadcastSteps {
    /// Runs the steps, with the bot's budget the worker's runs share.
    pub runner: BroadcastRunner,
    /// The bots, for the Bot API of each job's bot.
    pub bots: Arc<dyn BotDirectory>,
    /// Where the next step of a job is queued.
    pub queue: Arc<dyn BroadcastQueue>,
    /// Hides a step until it is due.
    pub visibility: Arc<dyn Visibility>,
    /// How many recipients a chunk holds.
    pub chunk: u64,
    /// Tells the time.
    pub clock: Arc<dyn Clock>,
}

/// How long a step that could not run waits before it is tried again, the first time; it doubles
/// with each receive up to [`STEP_RETRY_CAP`].
pub(crate) const STEP_RETRY: Duration = Duration::from_secs(10);
/// The longest wait between two runs of a step that cannot run.
pub(crate) const STEP_RETRY_CAP: Duration = Duration::from_secs(600);
/// Receives of one step after which its failures are logged as errors and counted as
/// `BroadcastStuck`, which the stack's `broadcast-stuck` alarm watches: the job is stuck.
pub(crate) const STEP_STUCK_AFTER: u32 = 10;

/// The wait before a step that could not run, received `receives` times, runs again.
pub(crate) fn step_retry(receives: u32) -> Duration {
    STEP_RETRY
        .saturating_mul(1 << receives.saturating_sub(1).min(6))
        .min(STEP_RETRY_CAP)
}

impl BroadcastSteps {
    /// Runs each step of `records` in turn until `deadline`; the ids of those to be received
    /// again (not yet due, or not run).
    pub async fn run(&self, records: Vec<QueueRecord>, deadline: Timestamp) -> Vec<String> {
        let mut failed = Vec::new();
        for record in records {
            if !self.step(&record, deadline).await {
                failed.push(record.message_id);
            }
        }
        failed
    }

    /// One step; `true` when its message is done with.
    async fn step(&self, record: &QueueRecord, deadline: Timestamp) -> bool {
        let Some(step) = ChainStep::parse(&record.body) else {
            // Only tgq writes to this queue; a message it cannot read has nothing to run.
            error!(message_id = %record.message_id, "a message on the broadcasts queue is not a broadcast step; deleted");
            return true;
        };
        let span = tracing::info_span!("broadcast", broadcast = %step.job, from = step.from);
        let next = async {
            let job = match self.runner.store.job(&step.job).await {
                Ok(Some(job)) if matches!(job.state, JobState::Running | JobState::Cancelled) => {
                    job
                }
                Ok(Some(job)) => return Ok(ChainNext::End(job.state)),
                Ok(None) => return Ok(ChainNext::End(JobState::Cancelled)),
                Err(error) => return Err(error),
            };
            let until = deadline.minus(defaults::DEADLINE_MARGIN);
            // A cancelled job's step sends nothing: it lets go of its recipients, whether or not
            // the stack still serves its bot.
            if job.state == JobState::Cancelled {
                let api: Arc<dyn BotApi> = Arc::new(NoSends);
                return self
                    .runner
                    .run_step(&step, &record.message_id, self.chunk, api, until)
                    .await;
            }
            let api = match self.bots.lookup(&job.spec.bot).await {
                Lookup::Found(bot) => bot.api.clone(),
                Lookup::Refused(_, why) => {
                    let reason = format!("bot {} cannot send: {why}", job.spec.bot);
                    warn!("{reason}");
                    self.runner
                        .store
                        .change(&job.id, Change::PauseBecause(reason), self.clock.now())
                        .await?;
                    return Ok(ChainNext::End(JobState::Paused { reason: None }));
                }
                Lookup::Unavailable(error) => return Err(error),
            };
            // The step ends in time to land its sends under way and queue its successor.
            self.runner
                .run_step(&step, &record.message_id, self.chunk, api, until)
                .await
        }
        .instrument(span.clone())
        .await;
        let _entered = span.enter();
        let wait = match next {
            Ok(ChainNext::End(state)) => {
                info!(state = state.as_str(), "broadcast step ended its chain");
                return true;
            }
            // A copy, or a step of a chain started again: the job goes on from the other.
            Ok(ChainNext::Superseded) => return true,
            // Named after the message that queued it: a step run again queues it once.
            Ok(ChainNext::Queue(next)) => {
                let dedup = format!("{}-next", record.message_id);
                match self.queue.queue(&next, &dedup).await {
                    Ok(()) => return true,
                    Err(error) => {
                        warn!(error = %error_chain(&error), "queueing a broadcast's next step failed; this step runs again");
                        step_retry(record.receive_count)
                    }
                }
            }
            Ok(ChainNext::Hold(at)) => at.since(self.clock.now()),
            Err(error) if record.receive_count >= STEP_STUCK_AFTER => {
                crate::metrics::broadcast_stuck(&error);
                error!(error = %error_chain(&error), receives = record.receive_count, "a broadcast step has failed again and again: the job makes no progress until its cause is fixed");
                step_retry(record.receive_count)
            }
            Err(error) => {
                warn!(error = %error_chain(&error), "a broadcast step could not run; it runs again");
                step_retry(record.receive_count)
            }
        };
        if let Err(error) = self
            .visibility
            .change_visibility(&record.receipt, wait)
            .await
        {
            warn!(error = %error_chain(&error), "hiding a broadcast step failed; it shows again when its visibility timeout ends");
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_that_cannot_run_waits_longer_each_time_up_to_ten_minutes() {
        assert_eq!(step_retry(1), Duration::from_secs(10));
        assert_eq!(step_retry(2), Duration::from_secs(20));
        assert_eq!(step_retry(4), Duration::from_secs(80));
        assert_eq!(step_retry(7), Duration::from_secs(600));
        assert_eq!(step_retry(900), Duration::from_secs(600));
    }
}
