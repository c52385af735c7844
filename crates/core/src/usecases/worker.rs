//! The worker use case (docs/design/worker.md §1): one batch from the FIFO queue, in order, with
//! per-group failure propagation, a fenced lease per update, recorded actions, backoff through
//! visibility, and dead-lettering.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use teloxide_core::types::{Update, UpdateKind};
use tracing::{error, info, info_span, instrument, warn, Instrument as _, Span};

use ::metrics::{counter, histogram};

use crate::audit::{AuditAction, AuditEntry, AuditLog};
use crate::bots::{BotDirectory, BotRuntime, Lookup};
use crate::broadcast::BroadcastStore;
use crate::budget::SendBudget;
use crate::clock::{Clock, SystemClock};
use crate::config::{ConfigError, Vars};
use crate::context::{ActionSummary, Context, RunParts};
use crate::dead::{Burial, DeadLetter, DeadLetterMarks, DeadReason, FailureClass};
use crate::defaults;
use crate::envelope::Envelope;
use crate::error::{error_chain, ErrorClass, PortError};
use crate::failure::HandlerError;
use crate::ids::{BotId, GroupKey, MessageGroupId, RecordKey};
use crate::metrics as names;
use crate::pacer::{Pacer, RateLimits};
use crate::patience::patiently;
use crate::payment::{Charge, ChargeWrite, PaymentUpdate};
use crate::policy::{self, within_visibility_ceiling, FailedRun, Jitter, RetryPolicy, Verdict};
use crate::ports::{
    Claim, ClaimRequest, Claimed, DeadLetters, Final, QueueRecord, Reset, ResetRequest, ResetRule,
    Settlement, TimerScheduler, UpdateLedger, UpdateReset, Visibility,
};
use crate::reading::panic_message;
use crate::record::{ActionOutcome, Timestamp};
use crate::state::StateWrite;
use crate::telegram::Gone;
use crate::timer::TimerMessage;

mod recording;
mod run;
mod settle;

/// The worker's settings.
#[derive(Clone, Debug)]
pub struct WorkerSettings {
    /// Attempt budget, time budget and backoff.
    pub retry: RetryPolicy,
    /// What the worker keeps of an invocation's time: handlers are cut off this long before the
    /// deadline, and no record starts with less left.
    pub deadline_margin: Duration,
    /// How long a record created by a claim is kept.
    pub record_ttl: Duration,
    /// The updates queue's redrive `maxReceiveCount`: a record received nearly this often is logged.
    pub max_receive_count: u32,
    /// What becomes of an update whose recipient is gone (`TGQ_DEAD_LETTER_GONE_RECIPIENTS`).
    pub gone_recipients: GoneRecipients,
    /// How long a settle or a visibility change refused as unavailable is retried within the
    /// invocation (and never past its deadline) before it is given up.
    pub store_patience: Duration,
    /// `TGQ_ACK_CALLBACKS`: the webhook answered each queued callback query in its reply, so the
    /// handler's own `answerCallbackQuery` for it is recorded as done without a call.
    pub ack_callbacks: bool,
    /// The longest a send waits inside a run for Telegram's pacing (the limiter, a flood wait)
    /// when the invocation holds only its bot's updates; a longer wait gives the update back to
    /// the queue for as long, spending no attempt.
    pub max_inline_wait: Duration,
    /// [`WorkerSettings::max_inline_wait`] when the invocation holds several bots' updates: one
    /// bot's waits must not hold the others' records back.
    pub shared_inline_wait: Duration,
    /// How a pre-checkout query is answered within Telegram's 10 s whatever its handler does.
    pub pre_checkout: PreCheckoutPolicy,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            deadline_margin: defaults::DEADLINE_MARGIN,
            record_ttl: defaults::RECORD_TTL,
            max_receive_count: defaults::MAX_RECEIVE_COUNT,
            gone_recipients: GoneRecipients::default(),
            store_patience: defaults::STORE_PATIENCE,
            ack_callbacks: false,
            max_inline_wait: defaults::MAX_INLINE_WAIT,
            shared_inline_wait: defaults::SHARED_INLINE_WAIT,
            pre_checkout: PreCheckoutPolicy::default(),
        }
    }
}

impl WorkerSettings {
    /// The settings the environment gives: `TGQ_MAX_ATTEMPTS`, `TGQ_BACKOFF_BASE_MS`,
    /// `TGQ_BACKOFF_CAP_MS`, `TGQ_MAX_RETRY_AGE_SECS`, `TGQ_RECORD_TTL_SECS`,
    /// `TGQ_MAX_RECEIVE_COUNT`, `TGQ_DEAD_LETTER_GONE_RECIPIENTS`, `TGQ_ACK_CALLBACKS`,
    /// `TGQ_PRE_CHECKOUT_MARGIN_MS` and `TGQ_PRE_CHECKOUT_REFUSAL`, the same for the worker function
    /// and local mode.
    pub fn from_vars(vars: &Vars) -> Result<Self, ConfigError> {
        Ok(Self {
            retry: vars.retry_policy()?,
            deadline_margin: defaults::DEADLINE_MARGIN,
            record_ttl: vars.record_ttl()?,
            max_receive_count: vars.max_receive_count()?,
            gone_recipients: vars.gone_recipients()?,
            store_patience: defaults::STORE_PATIENCE,
            ack_callbacks: vars.ack_callbacks()?,
            max_inline_wait: defaults::MAX_INLINE_WAIT,
            shared_inline_wait: defaults::SHARED_INLINE_WAIT,
            pre_checkout: vars.pre_checkout()?,
        })
    }
}

pub use crate::policy::{GoneRecipients, PreCheckoutPolicy};

/// The ports the worker uses; built once per cold start.
#[derive(Clone)]
pub struct WorkerPorts {
    /// Claims, records actions, settles.
    pub ledger: Arc<dyn UpdateLedger>,
    /// Hides failed messages for their backoff, shows skipped ones at once.
    pub visibility: Arc<dyn Visibility>,
    /// Receives updates given up on.
    pub dead: Arc<dyn DeadLetters>,
    /// Telegram's pacing: each bot's budget, shared by every run of the process, or by every
    /// process that sends for the bot (and keyed by bot: one bot's pace and flood waits hold back
    /// none of another's sends).
    pub budget: Arc<dyn SendBudget>,
    /// Tells the time.
    pub clock: Arc<dyn Clock>,
    /// Restarts the record of a dead letter an operator moved back to the queue (the SQS
    /// console's redrive); a conditional write the worker's role already may do.
    pub reset: Arc<dyn UpdateReset>,
    /// Where such a redrive is audited.
    pub audit: Arc<dyn AuditLog>,
    /// Keeps the timers runs schedule until they are due; `None` where the deployment has no
    /// scheduler, and then a handler's schedule is refused.
    pub timers: Option<Arc<dyn TimerScheduler>>,
    /// Where a handler's broadcasts are started; `None` where the deployment keeps none, and then
    /// [`Context::broadcast`](crate::Context::broadcast) is refused.
    pub broadcasts: Option<Arc<dyn BroadcastStore>>,
}

impl WorkerPorts {
    /// The ports around `store`, which keeps the records, restarts them and audits the restarts
    /// (every adapter's store does all three), with the updates queue's `visibility` and the
    /// dead-letter queue `dead`: on the system clock, every call unpaced, no timers and no
    /// broadcasts. A target sets what it has of those over it (`WorkerPorts { budget, ..around }`).
    pub fn around<S>(
        store: Arc<S>,
        visibility: Arc<dyn Visibility>,
        dead: Arc<dyn DeadLetters>,
    ) -> Self
    where
        S: UpdateLedger + UpdateReset + AuditLog + 'static,
    {
        Self {
            ledger: store.clone(),
            visibility,
            dead,
            budget: Arc::new(Pacer::new(RateLimits::UNLIMITED)),
            clock: Arc::new(SystemClock),
            reset: store.clone(),
            audit: store,
            timers: None,
            broadcasts: None,
        }
    }
}

/// One bot's share of a batch: what was found for its bot, and how long its sends may wait
/// inside a run for Telegram's pacing.
struct Share<'a> {
    bot: &'a Lookup,
    inline_wait: Duration,
}

/// Who an audit entry names for a dead letter moved back to the updates queue outside tgq.
pub const REDRIVE_PRINCIPAL: &str = "SQS redrive (dead-letter queue to updates queue)";

/// How long one handler run took and, for an update it finished, how long after the update was
/// received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunTiming {
    /// The handler's run, settling excluded.
    pub handler: Duration,
    /// From the update's arrival to its `DONE`, for a run that finished it.
    pub end_to_end: Option<Duration>,
}

/// A handler run's summary and timing, as a batch collects them.
type RunReport = (ActionSummary, RunTiming);

/// How one record of a batch ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordOutcome {
    /// The handler finished; the message is acknowledged.
    Done(ActionSummary),
    /// The handler met a recipient who is gone; settled `DONE` as `recipient_gone` and
    /// acknowledged, not dead-lettered.
    RecipientGone(Gone),
    /// Already `DONE` or `DEAD`: acknowledged without running.
    AlreadyFinal,
    /// Failed (or was paced by Telegram); visible again after the delay.
    Retrying(Duration, ErrorClass),
    /// Given up on: dead-lettered and acknowledged.
    DeadLettered(DeadReason),
    /// An earlier record of its group failed in this batch; not run, visible again at once.
    SkippedBehindFailure,
    /// Too little invocation time was left to start it; not run, visible again at once.
    DeadlineReached,
    /// Another worker holds its lease; visible again when the lease ends.
    Busy(Duration),
    /// Its record could not be claimed or settled, or its dead letter not sent; visible again after
    /// the delay, no attempt spent.
    StoreUnavailable(Duration),
    /// Another run took the update's lease over while this one ran: this run stopped writing and
    /// sending, and leaves the message to the new owner.
    Fenced,
}

impl RecordOutcome {
    /// Whether the message stays on the queue (it is named in `batchItemFailures`).
    pub(crate) fn is_failure(&self) -> bool {
        !matches!(
            self,
            RecordOutcome::Done(_)
                | RecordOutcome::RecipientGone(_)
                | RecordOutcome::AlreadyFinal
                | RecordOutcome::DeadLettered(_)
        )
    }
}

/// The result of one batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Each record's message id and outcome, in batch order.
    pub outcomes: Vec<(String, RecordOutcome)>,
    /// What the handler runs of the batch did, finished or not.
    pub runs: Vec<ActionSummary>,
    /// How long each of those runs took, in the same order.
    pub timings: Vec<RunTiming>,
}

impl BatchReport {
    /// The message ids to report in `batchItemFailures`, in batch order.
    pub fn failed_message_ids(&self) -> Vec<String> {
        self.outcomes
            .iter()
            .filter(|(_, outcome)| outcome.is_failure())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// At-least-once actions (sends and steps) the batch made again after an unknown outcome.
    pub fn resent_after_unknown_outcome(&self) -> u64 {
        self.runs
            .iter()
            .map(|run| u64::from(run.resent_after_unknown_outcome))
            .sum()
    }
}

/// The worker use case.
#[derive(Clone)]
pub struct Worker {
    settings: WorkerSettings,
    ports: WorkerPorts,
    bots: Arc<dyn BotDirectory>,
}

/// Where a record is in its batch.
enum Step<'r> {
    /// Not yet looked at.
    Waiting(&'r QueueRecord),
    /// Claimed in the first pass, its previous run having died: it runs after the other groups.
    Resumed(&'r QueueRecord, Box<Resumed>),
}

/// A claim held back to the end of the batch.
struct Resumed {
    key: RecordKey,
    group: GroupKey,
    claimed: Claimed,
}

impl<'r> Step<'r> {
    fn record(&self) -> &'r QueueRecord {
        match self {
            Step::Waiting(record) | Step::Resumed(record, _) => record,
        }
    }
}

/// What processing a record in a pass came to.
enum Processed {
    Outcome(RecordOutcome, Option<RunReport>),
    /// Its previous run died: held back until the other groups of the batch ran.
    Deferred(Box<Resumed>),
}

impl Worker {
    /// A worker with these settings and ports, running each record with the client and handler
    /// `bots` has for the record's bot.
    pub fn new(settings: WorkerSettings, ports: WorkerPorts, bots: Arc<dyn BotDirectory>) -> Self {
        Self {
            settings,
            ports,
            bots,
        }
    }

    /// Processes a batch. `deadline` is when the invocation ends.
    ///
    /// The batch is split by bot, and each bot's share runs in batch order, all shares at once
    /// (docs/design/fleet.md §2): one bot's flood wait, slow backend or failures hold back
    /// nothing of another's. Each share is counted under its own bot.
    pub async fn process_batch(&self, records: &[QueueRecord], deadline: Timestamp) -> BatchReport {
        let mut shares: Vec<(Option<BotId>, Vec<usize>)> = Vec::new();
        for (index, record) in records.iter().enumerate() {
            let bot = record.group_id.split().ok().map(|(bot, _)| bot);
            match shares.iter_mut().find(|(known, _)| *known == bot) {
                Some((_, indices)) => indices.push(index),
                None => shares.push((bot, vec![index])),
            }
        }
        // A bot alone in the invocation waits for Telegram's pacing as long as a run may; beside
        // other bots, its waits must not keep their updates from the next invocation.
        let inline_wait = match shares.len() {
            1 => self.settings.max_inline_wait,
            _ => self.settings.shared_inline_wait,
        };
        let runs = shares.iter().map(|(bot, indices)| async move {
            let lookup = match bot {
                Some(bot) => self.bots.lookup(bot).await,
                // Its message group id names no bot: the record is dead-lettered as unreadable
                // before anything would run it.
                None => Lookup::Refused(
                    DeadReason::Poison,
                    "the message group id names no bot".to_owned(),
                ),
            };
            let share: Vec<&QueueRecord> = indices.iter().map(|&i| &records[i]).collect();
            let with = Share {
                bot: &lookup,
                inline_wait,
            };
            let report = self.process_share(&share, &with, deadline).await;
            let unknown = BotId::unknown();
            count(bot.as_ref().unwrap_or(&unknown), &report);
            report
        });
        let reports = futures::future::join_all(runs).await;
        let mut outcomes: Vec<Option<(String, RecordOutcome)>> = vec![None; records.len()];
        let mut merged = BatchReport::default();
        for ((_, indices), report) in shares.iter().zip(reports) {
            for (&index, outcome) in indices.iter().zip(report.outcomes) {
                outcomes[index] = Some(outcome);
            }
            merged.runs.extend(report.runs);
            merged.timings.extend(report.timings);
        }
        merged.outcomes = records
            .iter()
            .zip(outcomes)
            .map(|(record, outcome)| {
                // Every record is in one share, which gives it an outcome; a hole would be a
                // bug, and failing the record is the safe answer to it.
                outcome
                    .unwrap_or_else(|| (record.message_id.clone(), RecordOutcome::DeadlineReached))
            })
            .collect();
        merged
    }

    /// Processes one bot's share of a batch in order, with what `bot` found for it.
    ///
    /// A record whose previous run died holding the lease (a crash, a timeout, out of memory) runs
    /// after the other groups of the share, with the records behind it in its group: a record that
    /// kills its invocation must not hold the other chats back by a visibility timeout per crash.
    async fn process_share(
        &self,
        records: &[&QueueRecord],
        share: &Share<'_>,
        deadline: Timestamp,
    ) -> BatchReport {
        let mut outcomes: Vec<Option<RecordOutcome>> = vec![None; records.len()];
        let mut runs: Vec<RunReport> = Vec::new();
        let mut failed: HashSet<&MessageGroupId> = HashSet::new();
        let mut held: HashSet<&MessageGroupId> = HashSet::new();
        let mut later: Vec<(usize, Step<'_>)> = Vec::new();
        let first = records
            .iter()
            .enumerate()
            .map(|(i, r)| (i, Step::Waiting(r)));
        for (index, step) in first {
            let group = &step.record().group_id;
            if held.contains(group) {
                later.push((index, step));
                continue;
            }
            match self.pass(step, share, deadline, &failed, true).await {
                Processed::Deferred(resumed) => {
                    held.insert(group);
                    later.push((index, Step::Resumed(records[index], resumed)));
                }
                Processed::Outcome(outcome, run) => {
                    if outcome.is_failure() {
                        failed.insert(group);
                    }
                    runs.extend(run);
                    outcomes[index] = Some(outcome);
                }
            }
        }
        for (index, step) in later {
            let group = &step.record().group_id;
            if let Processed::Outcome(outcome, run) =
                self.pass(step, share, deadline, &failed, false).await
            {
                if outcome.is_failure() {
                    failed.insert(group);
                }
                runs.extend(run);
                outcomes[index] = Some(outcome);
            }
        }
        let (runs, timings): (Vec<ActionSummary>, Vec<RunTiming>) = runs.into_iter().unzip();
        BatchReport {
            outcomes: records
                .iter()
                .zip(outcomes)
                .map(|(record, outcome)| {
                    // Every record gets an outcome above; a hole would be a bug, and failing the
                    // record is the safe answer to it.
                    let outcome = outcome.unwrap_or(RecordOutcome::DeadlineReached);
                    (record.message_id.clone(), outcome)
                })
                .collect(),
            runs,
            timings,
        }
    }

    /// One record in one pass: the deadline and its group's failures first, then the record.
    async fn pass(
        &self,
        step: Step<'_>,
        share: &Share<'_>,
        deadline: Timestamp,
        failed: &HashSet<&MessageGroupId>,
        may_defer: bool,
    ) -> Processed {
        let record = step.record();
        let now = self.ports.clock.now();
        if deadline.since(now) < self.settings.deadline_margin {
            self.show_again(record, Duration::ZERO, deadline).await;
            return Processed::Outcome(RecordOutcome::DeadlineReached, None);
        }
        if failed.contains(&record.group_id) {
            // Running it would overtake the failed record of its chat.
            self.show_again(record, Duration::ZERO, deadline).await;
            return Processed::Outcome(RecordOutcome::SkippedBehindFailure, None);
        }
        match step {
            Step::Waiting(record) => {
                self.process_record(record, share, deadline, may_defer)
                    .await
            }
            Step::Resumed(record, resumed) => {
                let Resumed {
                    key,
                    group,
                    claimed,
                } = *resumed;
                // The same span as the first pass's: what this run logs names its update.
                let span = info_span!(
                    "process_record",
                    message_id = %record.message_id,
                    bot_id = key.bot_id.as_str(),
                    update_id = key.update_id.0,
                    group = group.as_str(),
                    attempt = tracing::field::Empty,
                );
                let (outcome, run) = self
                    .run_claimed(record, share, &key, &group, claimed, deadline)
                    .instrument(span)
                    .await;
                Processed::Outcome(outcome, run)
            }
        }
    }
}

/// Counts what one bot's share of a worker batch did.
fn count(bot: &BotId, report: &BatchReport) {
    let bot = bot.to_string();
    for (_, outcome) in &report.outcomes {
        let bot = bot.clone();
        match outcome {
            RecordOutcome::Done(_) => counter!(names::PROCESSED, names::BOT_ID => bot).increment(1),
            RecordOutcome::Retrying(_, class) => {
                counter!(names::RETRIED, names::BOT_ID => bot, names::ERROR_CLASS => class.as_str()).increment(1);
            }
            RecordOutcome::DeadLettered(reason) => {
                counter!(names::DEAD_LETTERED, names::BOT_ID => bot, names::REASON => reason.as_str()).increment(1);
            }
            RecordOutcome::RecipientGone(_) => {
                counter!(names::RECIPIENT_GONE, names::BOT_ID => bot).increment(1)
            }
            RecordOutcome::Fenced => counter!(names::FENCED, names::BOT_ID => bot).increment(1),
            _ => {}
        }
    }
    for run in &report.runs {
        if !run.uncertain.is_empty() {
            counter!(names::UNCERTAIN_SEND, names::BOT_ID => bot.clone())
                .increment(run.uncertain.len() as u64);
        }
        if !run.paced.is_zero() {
            histogram!(names::THROTTLED_WAIT_MS, names::BOT_ID => bot.clone())
                .record(names::millis(run.paced));
        }
    }
    for timing in &report.timings {
        histogram!(names::HANDLER_DURATION_MS, names::BOT_ID => bot.clone())
            .record(names::millis(timing.handler));
        if let Some(latency) = timing.end_to_end {
            histogram!(names::END_TO_END_LATENCY_MS, names::BOT_ID => bot.clone())
                .record(names::millis(latency));
        }
    }
}
