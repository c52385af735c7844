//! The store port of broadcast jobs.

use super::*;

/// What [`BroadcastStore::create`] did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Created {
    /// A new job.
    New {
        /// It.
        job: BroadcastJob,
    },
    /// A job of the same origin exists already (a handler's retried run): nothing was created.
    Existing {
        /// That job.
        job: BroadcastJob,
    },
}

impl Created {
    /// The job, new or not.
    pub fn job(&self) -> &BroadcastJob {
        match self {
            Created::New { job } | Created::Existing { job } => job,
        }
    }
}

/// Where broadcasts are kept: the embedded store for `tgq local`, DynamoDB on a stack, memory in
/// tests.
#[async_trait]
pub trait BroadcastStore: Send + Sync {
    /// Creates a running job for `chats` (already checked, without repeats), unless a job of
    /// the same `spec.origin` exists (an origin of `cli` never matches).
    async fn create(
        &self,
        spec: &BroadcastSpec,
        chats: &[i64],
        now: Timestamp,
    ) -> Result<Created, PortError>;

    /// Creates a running job for `audience`, unless a job of the same `spec.origin` exists: what
    /// a handler starts within its run, whatever the audience's size. A store whose writes are
    /// local writes every recipient now, as [`BroadcastStore::create`] does; one that writes
    /// over a network (DynamoDB) writes the job with the audience (the chats, checked and without
    /// repeats, or the filter) in one write, and leaves its recipients to the job's runs
    /// ([`BroadcastJob::expanding`]).
    async fn create_expanding(
        &self,
        spec: &BroadcastSpec,
        audience: &Audience,
        now: Timestamp,
    ) -> Result<Created, PortError> {
        let chats = match audience {
            Audience::Chats { chats } => chats.clone(),
            Audience::States { filter } => self.chats_matching(&spec.bot, filter).await?,
        };
        self.create(spec, &chats, now).await
    }

    /// Writes about `limit` more recipients of job `id`'s audience, from where the last write
    /// ended: `true` when the whole audience is written (or the job never had one to write). A
    /// write cut short is written again from the same place, to the same recipients.
    async fn expand(&self, id: &BroadcastId, limit: u64) -> Result<bool, PortError> {
        let _ = (id, limit);
        Ok(true)
    }

    /// Lets go of what cancelled job `id` keeps and will never send: the recipients of `span`
    /// with no outcome and no send begun, and, with the first span, the part of its audience not
    /// yet written; how many recipients. Those with an outcome stay until they expire, and the
    /// job's counts stay as they were at its cancel. A store that removes an ended job whole once
    /// [`KEEP_ENDED`] is over (the embedded store, memory) keeps them until then.
    async fn drop_unsent(&self, id: &BroadcastId, span: &Indexes) -> Result<u64, PortError> {
        let _ = (id, span);
        Ok(0)
    }

    /// Every job, the newest first.
    async fn jobs(&self) -> Result<Vec<BroadcastJob>, PortError>;

    /// Every job not ended (running or paused), the newest first: what the runners look at,
    /// every half second in `tgq local` and once a step on a stack. A store reads these from
    /// the oldest job not ended on, so the jobs that ended before it cost the look nothing.
    async fn open_jobs(&self) -> Result<Vec<BroadcastJob>, PortError>;

    /// One job.
    async fn job(&self, id: &BroadcastId) -> Result<Option<BroadcastJob>, PortError>;

    /// Applies an operator's or the runner's change ([`BroadcastJob::apply`]).
    async fn change(
        &self,
        id: &BroadcastId,
        change: Change,
        now: Timestamp,
    ) -> Result<Changed, PortError>;

    /// Up to `limit` recipients of `span` to send to at `now`: those due for another try first,
    /// then the next never tried, in list order. Those whose send began are never among them.
    async fn next(
        &self,
        id: &BroadcastId,
        span: &Indexes,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Recipient>, PortError>;

    /// When the earliest recipient of `span` waiting for another try is due; `None` when none
    /// waits.
    async fn next_retry(
        &self,
        id: &BroadcastId,
        span: &Indexes,
    ) -> Result<Option<Timestamp>, PortError>;

    /// Records that the send to recipient `index` begins: durable before the call.
    async fn begin(&self, id: &BroadcastId, index: u64) -> Result<(), PortError>;

    /// Records how the send to recipient `index` ended, and counts it on the job.
    async fn settle(
        &self,
        id: &BroadcastId,
        index: u64,
        outcome: Outcome,
        now: Timestamp,
    ) -> Result<(), PortError>;

    /// Marks every recipient of `span` whose send began and never ended as uncertain (the
    /// process that began them is gone); how many there were.
    async fn abandon_begun(
        &self,
        id: &BroadcastId,
        span: &Indexes,
        now: Timestamp,
    ) -> Result<u64, PortError>;

    /// Up to `limit` recipients that failed for good or are uncertain, in list order, after the
    /// recipient of index `after` (from the first when `None`): a page of them.
    async fn undelivered(
        &self,
        id: &BroadcastId,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Recipient>, PortError>;

    /// Puts the recipients that failed for good back on the list, due at `now` with their
    /// attempts spent again from none, and with `uncertain` those whose outcome is unknown too
    /// (who may then get the message twice); a job that was done runs again
    /// ([`BroadcastJob::retried`]). Refused for a job that is running or cancelled.
    async fn retry(
        &self,
        id: &BroadcastId,
        uncertain: bool,
        now: Timestamp,
    ) -> Result<Retried, PortError>;

    /// The latest place of job `id`'s chain of steps claimed ([`BroadcastStore::claim_step`]);
    /// 0 when none was (or no such job): a chain started again takes the place after it.
    async fn claimed_step(&self, id: &BroadcastId) -> Result<u64, PortError>;

    /// Claims place `step` of job `id`'s chain of steps on a stack for the queue message
    /// `holder` carrying it, by [`chain::StepClaim::decide`] in one atomic write: a message
    /// received again keeps its claim; another message for the same place, or for one before
    /// the latest claimed, is refused.
    async fn claim_step(
        &self,
        id: &BroadcastId,
        step: u64,
        holder: &str,
    ) -> Result<chain::StepClaim, PortError>;

    /// The chats of `bot` whose state `filter` takes, in chat order.
    async fn chats_matching(
        &self,
        bot: &BotId,
        filter: &StateFilter,
    ) -> Result<Vec<i64>, PortError>;
}
