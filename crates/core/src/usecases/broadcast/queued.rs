//! A job store whose jobs run as chains of steps on a queue: a stack's broadcasts queue
//! (docs/design/broadcast-runs.md). It stores through the store it wraps and queues, after the
//! store answered, the step each change calls for: a job's first step when it is created (or found
//! again by a retried start: the queue keeps one of the two), a resumed or retried job's first step
//! again, and a cancelled job's step that lets go of what it will never send. The store only
//! stores; which change queues what is decided here, once for every store.

use super::chain::{BroadcastQueue, ChainStep, StepClaim};
use super::*;

/// What a step's queueing is called in its errors.
const QUEUE: &str = "queueing a broadcast step";

/// A running job whose step could not be queued: it is kept, and runs once it is queued.
#[derive(Debug, thiserror::Error)]
#[error("broadcast {id} is stored and running, but its first step could not be queued on the broadcasts queue; `tgq broadcast resume {id} --stack …` queues it (do not start it again: that would make a second job)")]
struct NotQueued {
    id: BroadcastId,
    #[source]
    error: PortError,
}

/// [`BroadcastStore`] over `store`, whose jobs' steps go on `queue`.
pub struct QueuedBroadcasts {
    store: Arc<dyn BroadcastStore>,
    queue: Arc<dyn BroadcastQueue>,
}

impl QueuedBroadcasts {
    /// The jobs of `store`, run as chains of steps on `queue`.
    pub fn new(store: Arc<dyn BroadcastStore>, queue: Arc<dyn BroadcastQueue>) -> Self {
        Self { store, queue }
    }

    /// The first step of a chain of `job`, in the place after the latest its chain claimed, so
    /// that an old chain still alive and this one never both run ([`StepClaim`]).
    async fn first_step(&self, job: &BroadcastJob) -> Result<ChainStep, PortError> {
        Ok(ChainStep::after(
            &job.id,
            self.store.claimed_step(&job.id).await?,
        ))
    }

    /// Queues the first step of `job` when it is running. `dedup` names the queueing: the same
    /// queueing repeated within the queue's deduplication window queues one step. A job that
    /// could not be queued is kept, and the error says how to queue it.
    async fn queue_run(&self, job: &BroadcastJob, dedup: String) -> Result<(), PortError> {
        if job.state != JobState::Running {
            return Ok(());
        }
        let step = self.first_step(job).await?;
        self.queue.queue(&step, &dedup).await.map_err(|error| {
            PortError::unavailable(
                QUEUE,
                NotQueued {
                    id: job.id.clone(),
                    error,
                },
            )
        })
    }
}

#[async_trait]
impl BroadcastStore for QueuedBroadcasts {
    async fn create(
        &self,
        spec: &BroadcastSpec,
        chats: &[i64],
        now: Timestamp,
    ) -> Result<Created, PortError> {
        let created = self.store.create(spec, chats, now).await?;
        // A job found again (a retried start) is queued again too: the start that made it may
        // have died before it queued it; the queue keeps one of the two.
        let job = created.job();
        self.queue_run(job, format!("{}-start", job.id)).await?;
        Ok(created)
    }

    async fn create_expanding(
        &self,
        spec: &BroadcastSpec,
        audience: &Audience,
        now: Timestamp,
    ) -> Result<Created, PortError> {
        let created = self.store.create_expanding(spec, audience, now).await?;
        let job = created.job();
        self.queue_run(job, format!("{}-start", job.id)).await?;
        Ok(created)
    }

    async fn expand(&self, id: &BroadcastId, limit: u64) -> Result<bool, PortError> {
        self.store.expand(id, limit).await
    }

    async fn drop_unsent(&self, id: &BroadcastId, span: &Indexes) -> Result<u64, PortError> {
        self.store.drop_unsent(id, span).await
    }

    async fn jobs(&self) -> Result<Vec<BroadcastJob>, PortError> {
        self.store.jobs().await
    }

    async fn open_jobs(&self) -> Result<Vec<BroadcastJob>, PortError> {
        self.store.open_jobs().await
    }

    async fn job(&self, id: &BroadcastId) -> Result<Option<BroadcastJob>, PortError> {
        self.store.job(id).await
    }

    async fn change(
        &self,
        id: &BroadcastId,
        change: Change,
        now: Timestamp,
    ) -> Result<Changed, PortError> {
        let (resume, cancel) = (change == Change::Resume, change == Change::Cancel);
        match self.store.change(id, change, now).await? {
            // A cancelled job's chain lets go of the recipients it will never send to; a job
            // that was paused has no chain left to do it. The cancel stands if this fails.
            Changed::Changed { job } if cancel => {
                let step = self.first_step(&job).await?;
                if let Err(error) = self.queue.queue(&step, &format!("{}-cancel", job.id)).await {
                    warn!(broadcast = %job.id, error = %error_chain(&error), "the broadcast is cancelled, but the step that lets go of its unsent recipients could not be queued: they stay in the store");
                }
                Ok(Changed::Changed { job })
            }
            // A resumed job runs again from its first chunk; resuming a running one queues it
            // again, for a job whose run was lost (its queue message gone).
            Changed::Changed { job } | Changed::Refused { job }
                if resume && job.state == JobState::Running =>
            {
                self.queue_run(&job, format!("{}-resume-{}", job.id, now.0))
                    .await?;
                Ok(Changed::Changed { job })
            }
            changed => Ok(changed),
        }
    }

    async fn next(
        &self,
        id: &BroadcastId,
        span: &Indexes,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Recipient>, PortError> {
        self.store.next(id, span, now, limit).await
    }

    async fn next_retry(
        &self,
        id: &BroadcastId,
        span: &Indexes,
    ) -> Result<Option<Timestamp>, PortError> {
        self.store.next_retry(id, span).await
    }

    async fn begin(&self, id: &BroadcastId, index: u64) -> Result<(), PortError> {
        self.store.begin(id, index).await
    }

    async fn settle(
        &self,
        id: &BroadcastId,
        index: u64,
        outcome: Outcome,
        now: Timestamp,
    ) -> Result<(), PortError> {
        self.store.settle(id, index, outcome, now).await
    }

    async fn abandon_begun(
        &self,
        id: &BroadcastId,
        span: &Indexes,
        now: Timestamp,
    ) -> Result<u64, PortError> {
        self.store.abandon_begun(id, span, now).await
    }

    async fn undelivered(
        &self,
        id: &BroadcastId,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Recipient>, PortError> {
        self.store.undelivered(id, after, limit).await
    }

    async fn retry(
        &self,
        id: &BroadcastId,
        uncertain: bool,
        now: Timestamp,
    ) -> Result<Retried, PortError> {
        let retried = self.store.retry(id, uncertain, now).await?;
        // A job that was done runs again: its first step is queued.
        if let Retried::Retried { job, .. } = &retried {
            self.queue_run(job, format!("{}-retry-{}", job.id, now.0))
                .await?;
        }
        Ok(retried)
    }

    async fn claim_step(
        &self,
        id: &BroadcastId,
        step: u64,
        holder: &str,
    ) -> Result<StepClaim, PortError> {
        self.store.claim_step(id, step, holder).await
    }

    async fn claimed_step(&self, id: &BroadcastId) -> Result<u64, PortError> {
        self.store.claimed_step(id).await
    }

    async fn chats_matching(
        &self,
        bot: &BotId,
        filter: &StateFilter,
    ) -> Result<Vec<i64>, PortError> {
        self.store.chats_matching(bot, filter).await
    }
}
