//! Broadcasts on a stack (docs/design/broadcast-runs.md): a job runs as a chain of queue messages,
//! one at a time in the job's own message group of the broadcasts queue, so it survives any
//! container and never holds a chat's updates. Each message names the recipient to go on from, by
//! index (so a step means the same whatever chunk size reads it); an invocation works through
//! chunks of [`CHUNK`](super::CHUNK) recipients until its time is up, then queues the next step and
//! is acknowledged. After its first chunk it begins none the time left cannot hold, judged by the
//! longest it has run, so the next step seldom begins inside a chunk and reads its recipients
//! again; only a chunk that outlasts the time left is cut. A chunk whose retries are not due yet is
//! passed over and visited again when the earliest of them is, so one slow recipient holds no other
//! chunk back. Each step holds a place in the chain, claimed in the store before it does anything
//! ([`StepClaim`]): a copy of a step queued again, or a second chain started while the first lived,
//! ends at once, so a job never runs as two chains. A step first looks for an older running job of
//! its bot ([`super::ahead_of`]); while there is one it sends nothing and queues itself again
//! `WAIT_BEHIND` later. A job a handler started writes its audience as recipients in its first
//! steps, a chunk at a time, before it sends. The chain of a cancelled job goes over its chunks
//! once more, from the first, and lets go of the recipients it will never send to
//! ([`super::BroadcastStore::drop_unsent`]).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{BroadcastId, BroadcastJob, BroadcastRunner, Change, Changed, JobState, RunEnd, Waits};
use crate::error::PortError;
use crate::record::Timestamp;
use crate::telegram::{ApiCall, BotApi, CallError, TelegramError};

/// How long after a step of a job waiting behind an older one of its bot the next looks again.
pub(crate) const WAIT_BEHIND: Duration = Duration::from_secs(20);

/// Where a job's run goes on from: the body of a broadcasts-queue message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainStep {
    /// The job.
    pub job: BroadcastId,
    /// Its place in the job's chain: 1 for the first step, one more for each next. A step runs
    /// only once it claimed its place ([`super::BroadcastStore::claim_step`]); 0 in a step
    /// queued by a tgq that did not number them, which claims a job no numbered step has.
    #[serde(default)]
    pub step: u64,
    /// The index of the recipient to go on from: the first of a chunk.
    pub from: u64,
    /// Not to run before this time (ms): the earliest retry of the chunks passed over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<u64>,
    /// The first recipient of the first chunk of this pass whose recipients wait for another
    /// try, if any: where the next pass begins, since the chunks before it are done for good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_from: Option<u64>,
    /// The earliest of those tries (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<u64>,
    /// Whether the chain lets go of a cancelled job's recipients, from the first chunk on
    /// ([`super::BroadcastStore::drop_unsent`]), rather than send.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sweep: bool,
}

/// The queue message's body: `{"tgq_broadcast": {...}}`.
#[derive(Serialize, Deserialize)]
struct ChainBody {
    tgq_broadcast: ChainStep,
}

impl ChainStep {
    /// The first step of job `id`: every chunk from the first.
    pub fn start(id: &BroadcastId) -> Self {
        Self::after(id, 0)
    }

    /// The first step of job `id`'s chain started again (resumed, retried) when the chain's
    /// steps claimed so far end at `claimed`: every chunk from the first, in the place after.
    /// Should the old chain still be alive, its next step and this one take the same place and
    /// the first to claim it goes on, alone.
    pub fn after(id: &BroadcastId, claimed: u64) -> Self {
        Self {
            job: id.clone(),
            step: claimed.saturating_add(1),
            from: 0,
            not_before: None,
            retry_from: None,
            retry_at: None,
            sweep: false,
        }
    }

    /// The message body.
    pub fn body(&self) -> String {
        // A struct of integers always serializes.
        serde_json::to_string(&ChainBody {
            tgq_broadcast: self.clone(),
        })
        .unwrap_or_default()
    }

    /// Reads a message body; `None` when it is not a step.
    pub fn parse(body: &[u8]) -> Option<Self> {
        serde_json::from_slice::<ChainBody>(body)
            .ok()
            .map(|b| b.tgq_broadcast)
    }

    /// The job's message group: its steps run one at a time, apart from every other job.
    pub fn group(&self) -> String {
        format!("broadcast:{}", self.job)
    }

    /// The chunk of `size` recipients it begins.
    fn span(&self, size: u64) -> super::Indexes {
        self.from..self.from.saturating_add(size)
    }
}

/// The Bot API of a cancelled job's steps, which only let go of its recipients: any call is
/// refused as never sent (none is made).
pub struct NoSends;

#[async_trait]
impl BotApi for NoSends {
    async fn call(&self, call: &ApiCall<'_>) -> Result<serde_json::Value, CallError> {
        Err(CallError::Telegram(TelegramError::NotSent(format!(
            "{} of a cancelled broadcast is not sent",
            call.method
        ))))
    }
}

/// Where a job's steps wait: the stack's broadcasts queue (FIFO, a message group per job).
#[async_trait]
pub trait BroadcastQueue: Send + Sync {
    /// Queues `step` in its job's group. `dedup` names it: the same name queued again within the
    /// queue's deduplication window is one message.
    async fn queue(&self, step: &ChainStep, dedup: &str) -> Result<(), PortError>;
}

/// What to do with the message of a step once it ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChainNext {
    /// The job is done, paused, cancelled or gone: acknowledge, queue nothing.
    End(JobState),
    /// Queue this step, then acknowledge.
    Queue(ChainStep),
    /// Not yet: show the message again at this time.
    Hold(Timestamp),
    /// Another message claimed this step's place, or a later one (a copy of a step queued
    /// again, a chain started again while this one lived): acknowledge, queue nothing. The
    /// job's chain goes on from that message.
    Superseded,
}

/// The answer of [`super::BroadcastStore::claim_step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepClaim {
    /// The step is the job's latest, held by the message that asked: it runs.
    Granted,
    /// Another message holds this step, or a later step was claimed.
    Taken,
    /// No such job.
    NotFound,
}

impl StepClaim {
    /// Whether a job whose chain claimed `last`, by `holder` (`None`: no step ever), grants
    /// step `step` to `asking`: the rule every store applies in one atomic write.
    pub fn decide(last: Option<(u64, &str)>, step: u64, asking: &str) -> Self {
        match last {
            None => Self::Granted,
            Some((last, _)) if last < step => Self::Granted,
            Some((last, holder)) if last == step && holder == asking => Self::Granted,
            Some(_) => Self::Taken,
        }
    }
}

impl BroadcastRunner {
    /// Runs `step` of a job on a stack, in chunks of `size` recipients ([`CHUNK`](super::CHUNK) on
    /// a stack), with `api` until the job ends or `until` (the end of the invocation's time), and
    /// says what comes next. The first chunk begins whatever the time left, so a step whose time
    /// is short still sends; a later one begins only when the time left holds the longest chunk
    /// so far. `until` and the chunks' lengths are read on the runner's clock.
    pub async fn run_step(
        &self,
        step: &ChainStep,
        holder: &str,
        size: u64,
        api: Arc<dyn BotApi>,
        until: Timestamp,
    ) -> Result<ChainNext, PortError> {
        match self.store.claim_step(&step.job, step.step, holder).await? {
            StepClaim::Granted => {}
            StepClaim::Taken => {
                tracing::info!(broadcast = %step.job, step = step.step, "another message holds this broadcast step or a later one; this copy ends");
                return Ok(ChainNext::Superseded);
            }
            StepClaim::NotFound => return Ok(ChainNext::End(JobState::Cancelled)),
        }
        let (stop, stopped) = watch::channel(false);
        let left = until.since(self.clock.now());
        let timer = tokio::spawn(async move {
            tokio::time::sleep(left).await;
            let _ = stop.send(true);
        });
        let next = self.chunks(step, size, api, until, stopped).await;
        timer.abort();
        // Whatever this step became, what it queues takes the place after it.
        next.map(|next| match next {
            ChainNext::Queue(queued) => ChainNext::Queue(ChainStep {
                step: step.step.saturating_add(1),
                ..queued
            }),
            other => other,
        })
    }

    async fn chunks(
        &self,
        step: &ChainStep,
        size: u64,
        api: Arc<dyn BotApi>,
        until: Timestamp,
        stop: watch::Receiver<bool>,
    ) -> Result<ChainNext, PortError> {
        if let Some(at) = step.not_before.filter(|at| *at > self.clock.now().0) {
            return Ok(ChainNext::Hold(Timestamp(at)));
        }
        let mut step = ChainStep {
            not_before: None,
            ..step.clone()
        };
        // The longest a chunk of this step took; none yet.
        let mut longest: Option<Duration> = None;
        let mut looked_behind = false;
        loop {
            let Some(job) = self.store.job(&step.job).await? else {
                return Ok(ChainNext::End(JobState::Cancelled));
            };
            if job.state == JobState::Cancelled && !step.sweep {
                // Nothing of it is sent again: its chain goes over every chunk once more, from
                // the first, to let go of what will never be sent.
                step = ChainStep {
                    sweep: true,
                    from: 0,
                    retry_from: None,
                    retry_at: None,
                    ..step
                };
            }
            if !step.sweep && job.state != JobState::Running {
                return Ok(ChainNext::End(job.state));
            }
            // Looked for once, before the first chunk. A new message, not this one hidden:
            // waiting counts no receive toward a stuck step.
            if !step.sweep && !std::mem::replace(&mut looked_behind, true) {
                if let Some(first) = self.older_running(&job).await {
                    tracing::info!(broadcast = %job.id, behind = %first, "the bot's older broadcast sends first; this one waits");
                    return Ok(ChainNext::Queue(ChainStep {
                        not_before: Some(self.clock.now().plus(WAIT_BEHIND).0),
                        ..step
                    }));
                }
            }
            let now = self.clock.now();
            if *stop.borrow() || longest.is_some_and(|chunk| now.plus(chunk) > until) {
                return Ok(ChainNext::Queue(step));
            }
            if step.sweep {
                // The first chunk is let go of even when none was written: the audience may be.
                if step.from > 0 && step.from >= job.counts.total {
                    return Ok(ChainNext::End(JobState::Cancelled));
                }
                let span = step.span(size);
                // A send begun by a process that died may have arrived: it is counted so.
                self.store.abandon_begun(&job.id, &span, now).await?;
                self.store.drop_unsent(&job.id, &span).await?;
                step.from = step.from.saturating_add(size);
                let took = self.clock.now().since(now);
                longest = Some(longest.map_or(took, |chunk| chunk.max(took)));
                continue;
            }
            // The audience a handler named is written first, a chunk at a time, each timed as a
            // chunk of sends: a step whose time is up leaves the rest to the next.
            if job.expanding {
                self.store.expand(&job.id, size).await?;
                let took = self.clock.now().since(now);
                longest = Some(longest.map_or(took, |chunk| chunk.max(took)));
                continue;
            }
            if step.from >= job.counts.total {
                match self.next_pass(&job, &mut step).await? {
                    Some(next) => return Ok(next),
                    None => continue,
                }
            }
            let end = self
                .run_span(
                    &step.job,
                    &step.span(size),
                    Waits::No,
                    api.clone(),
                    stop.clone(),
                )
                .await?;
            let took = self.clock.now().since(now);
            longest = Some(longest.map_or(took, |chunk| chunk.max(took)));
            match end {
                RunEnd::Done => return Ok(ChainNext::End(JobState::Done)),
                RunEnd::Stopped(state) => return Ok(ChainNext::End(state)),
                RunEnd::ShutDown => return Ok(ChainNext::Queue(step)),
                RunEnd::Later(due) => {
                    step.retry_from.get_or_insert(step.from);
                    step.retry_at = Some(step.retry_at.map_or(due.0, |at| at.min(due.0)));
                    step.from = step.from.saturating_add(size);
                }
                RunEnd::SpanDone => step.from = step.from.saturating_add(size),
            }
        }
    }

    /// The older running job of `job`'s bot, which sends first ([`super::ahead_of`]). When the
    /// jobs cannot be read the step sends as if none were: the look only paces the bot's jobs,
    /// and the chunk's own reads say whether the store answers.
    async fn older_running(&self, job: &BroadcastJob) -> Option<BroadcastId> {
        match self.store.open_jobs().await {
            Ok(jobs) => super::ahead_of(&jobs, job),
            Err(error) => {
                tracing::warn!(broadcast = %job.id, error = %crate::error::error_chain(&error), "the bot's other broadcasts could not be read; this one sends without waiting for them");
                None
            }
        }
    }

    /// The end of a pass over the chunks: the next pass begins at the first chunk that waits for
    /// a retry, when that is due (`Some`: the step to queue; `None`: run it now). With none
    /// waiting every chunk is done, and so is the job.
    async fn next_pass(
        &self,
        job: &BroadcastJob,
        step: &mut ChainStep,
    ) -> Result<Option<ChainNext>, PortError> {
        let now = self.clock.now();
        let Some(from) = step.retry_from.take() else {
            if job.counts.pending() > 0 {
                // Every chunk of the pass ended with its recipients' outcomes, yet the job's
                // counts say some have none: the counts are off, not the recipients.
                tracing::error!(broadcast = %job.id, pending = job.counts.pending(), "every recipient of the broadcast has an outcome but its counts disagree; finishing it");
            }
            return Ok(Some(
                match self.store.change(&job.id, Change::Finish, now).await? {
                    Changed::Changed { job } => ChainNext::End(job.state),
                    Changed::Refused { job } => ChainNext::End(job.state),
                    Changed::NotFound => ChainNext::End(JobState::Cancelled),
                },
            ));
        };
        step.from = from;
        match step.retry_at.take().filter(|at| *at > now.0) {
            Some(at) => Ok(Some(ChainNext::Queue(ChainStep {
                not_before: Some(at),
                ..step.clone()
            }))),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_names_the_recipient_it_goes_on_from_whatever_the_chunk_size() {
        let step = ChainStep {
            from: 300,
            retry_from: Some(100),
            ..ChainStep::start(&BroadcastId(7))
        };
        let read = ChainStep::parse(step.body().as_bytes()).expect("a step reads back");
        assert_eq!(read, step);
        assert_eq!(step.group(), "broadcast:7");
        // A worker deployed with another chunk size goes on from the same recipient.
        assert_eq!(read.span(100), 300..400);
        assert_eq!(read.span(1000), 300..1300);
        assert_eq!(ChainStep::parse(br#"{"tgq_timer": {}}"#), None);
    }
}
