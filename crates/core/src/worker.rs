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
use crate::clock::Clock;
use crate::config::{ConfigError, Vars};
use crate::context::{ActionSummary, Context, RunParts};
use crate::dead::{Burial, DeadLetter, DeadLetterMarks, DeadReason, FailureClass};
use crate::defaults;
use crate::envelope::Envelope;
use crate::error::{error_chain, ErrorClass, PortError};
use crate::failure::HandlerError;
use crate::ids::{BotId, GroupKey, MessageGroupId, RecordKey};
use crate::metrics as names;
use crate::patience::patiently;
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
        }
    }
}

impl WorkerSettings {
    /// The settings the environment gives: `TGQ_MAX_ATTEMPTS`, `TGQ_BACKOFF_BASE_MS`,
    /// `TGQ_BACKOFF_CAP_MS`, `TGQ_MAX_RETRY_AGE_SECS`, `TGQ_RECORD_TTL_SECS`,
    /// `TGQ_MAX_RECEIVE_COUNT`, `TGQ_DEAD_LETTER_GONE_RECIPIENTS` and `TGQ_ACK_CALLBACKS`, the same
    /// for the worker function and local mode.
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
        })
    }
}

pub use crate::policy::GoneRecipients;

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
    pub fn is_failure(&self) -> bool {
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

    #[instrument(skip_all, fields(message_id = %record.message_id, bot_id, update_id, group, attempt))]
    async fn process_record(
        &self,
        record: &QueueRecord,
        share: &Share<'_>,
        deadline: Timestamp,
        may_defer: bool,
    ) -> Processed {
        let (key, group) = match identify(record) {
            Ok(identity) => identity,
            Err(letter) => {
                let outcome = self.bury_unreadable(record, *letter, deadline).await;
                return Processed::Outcome(outcome, None);
            }
        };
        Span::current()
            .record("bot_id", key.bot_id.as_str())
            .record("update_id", key.update_id.0)
            .record("group", group.as_str());
        self.warn_near_redrive(record);
        if let Lookup::Unavailable(e) = share.bot {
            // Nothing is wrong with the update: its bot cannot be looked up or built right now.
            warn!(error = %error_chain(e), cause = e.cause(), "the record's bot is unavailable; backing off without spending an attempt");
            let outcome = self
                .store_unavailable(record, record.receive_count, deadline)
                .await;
            return Processed::Outcome(outcome, None);
        }
        // A bot held by a flood wait longer than a run may sit out gets its update back for as
        // long before anything is claimed: nothing is written, no attempt is spent, and with
        // several bots the invocation is not kept busy by one bot's pause
        // (docs/design/fleet.md §2).
        let paused = self.ports.budget.paused_for(&key.bot_id);
        if paused > share.inline_wait {
            let class = ErrorClass::RateLimited(paused);
            let delay = self
                .show_again(record, policy::after_flood_wait(paused), deadline)
                .await;
            info!(
                wait_ms = paused.as_millis() as u64,
                "the bot is held by Telegram's flood wait; given back without a claim"
            );
            return Processed::Outcome(RecordOutcome::Retrying(delay, class), None);
        }
        if let Some(marks) = record.dead_letter {
            if let Err(outcome) = self.accept_redrive(record, &key, marks, deadline).await {
                return Processed::Outcome(outcome, None);
            }
        }
        let now = self.ports.clock.now();
        let request = ClaimRequest {
            key: key.clone(),
            group: group.clone(),
            payload: record.body.clone(),
            now,
            lease_until: deadline,
            expires_at: now.plus(self.settings.record_ttl),
        };
        let outcome = match self.ports.ledger.claim(&request).await {
            Ok(Claim::Run(claimed)) if claimed.resumed && may_defer => {
                info!("the previous run died holding the lease; this record runs after the other groups of the batch");
                return Processed::Deferred(Box::new(Resumed {
                    key,
                    group,
                    claimed,
                }));
            }
            Ok(Claim::Run(claimed)) => {
                let (outcome, run) = self
                    .run_claimed(record, share, &key, &group, claimed, deadline)
                    .await;
                return Processed::Outcome(outcome, run);
            }
            Ok(Claim::AlreadyFinal(Final::Done)) => {
                info!("duplicate delivery of a finished update; acknowledged");
                RecordOutcome::AlreadyFinal
            }
            Ok(Claim::AlreadyFinal(Final::Dead(burial))) => {
                self.finish_burial(record, &key, &group, burial, deadline)
                    .await
            }
            Ok(Claim::Busy(until)) => {
                let wait = until.since(now).max(Duration::from_secs(1));
                self.show_again(record, wait, deadline).await;
                RecordOutcome::Busy(wait)
            }
            Err(e @ PortError::TooLarge { .. }) => {
                // The message itself cannot become a record: it can never run.
                let letter = DeadLetter {
                    reason: DeadReason::TooLarge,
                    error_class: FailureClass::Permanent,
                    update_id: Some(key.update_id),
                    group: Some(group.clone()),
                    ..DeadLetter::unidentified(
                        key.bot_id.clone(),
                        record.body.clone(),
                        error_chain(&e),
                    )
                };
                self.bury_unreadable(record, letter, deadline).await
            }
            Err(e) => {
                warn!(error = %error_chain(&e), cause = e.cause(), "claim failed; backing off without spending an attempt");
                self.store_unavailable(record, record.receive_count, deadline)
                    .await
            }
        };
        Processed::Outcome(outcome, None)
    }

    /// Runs the bot's handler for a claimed record and settles the run; a record whose bot is
    /// refused (unknown, or naming a handler `bot/` does not have) is dead-lettered instead.
    async fn run_claimed(
        &self,
        record: &QueueRecord,
        share: &Share<'_>,
        key: &RecordKey,
        group: &GroupKey,
        claimed: Claimed,
        deadline: Timestamp,
    ) -> (RecordOutcome, Option<RunReport>) {
        Span::current().record("attempt", claimed.lease.token);
        let runtime = match share.bot {
            Lookup::Found(runtime) => runtime,
            Lookup::Refused(reason, why) => {
                let error = HandlerError::permanent(why.clone());
                let outcome = self
                    .bury(
                        record,
                        key,
                        group,
                        &claimed,
                        *reason,
                        &error,
                        Vec::new(),
                        deadline,
                    )
                    .await;
                return (outcome, None);
            }
            Lookup::Unavailable(e) => {
                // Looked at before the claim; kept here so that no path runs without a bot.
                warn!(error = %error_chain(e), "the record's bot is unavailable; backing off");
                let outcome = self
                    .store_unavailable(record, claimed.lease.token, deadline)
                    .await;
                return (outcome, None);
            }
        };
        let spent = claimed.attempts_spent();
        if spent > self.settings.retry.max_attempts {
            // Earlier runs died without settling (crashes, timeouts); the budget is spent all the same.
            let error = HandlerError::transient("earlier runs ended without settling");
            let outcome = self
                .bury(
                    record,
                    key,
                    group,
                    &claimed,
                    DeadReason::BudgetSpent,
                    &error,
                    Vec::new(),
                    deadline,
                )
                .await;
            return (outcome, None);
        }
        let started = self.ports.clock.now();
        let RunEnd {
            result,
            summary,
            unwritten,
            state,
            scheduled,
        } = self
            .run_handler(
                record,
                runtime,
                share.inline_wait,
                group,
                &claimed,
                deadline,
            )
            .await;
        let ended = self.ports.clock.now();
        let run = Run {
            record,
            key,
            group,
            claimed: &claimed,
            deadline,
        };
        let result = match result {
            Ok(()) => self
                .hand_over_timers(&scheduled, deadline)
                .await
                .map_err(HandlerError::Store),
            Err(error) => Err(error),
        };
        let outcome = match result {
            Ok(()) => {
                let done = RecordOutcome::Done(summary.clone());
                self.finish(run, &summary, Settlement::Done { state }, done, unwritten)
                    .await
            }
            Err(error) if error.is_fenced() => {
                warn!(error = %error_chain(&error), "fenced: another run took the lease over; this run stops");
                RecordOutcome::Fenced
            }
            Err(error) => match error.recipient_gone() {
                Some(gone) if self.settings.gone_recipients == GoneRecipients::Settle => {
                    let settlement = Settlement::RecipientGone {
                        error: error_chain(&error),
                    };
                    let gone = RecordOutcome::RecipientGone(gone);
                    self.finish(run, &summary, settlement, gone, unwritten)
                        .await
                }
                _ => self.fail(run, error, unwritten).await,
            },
        };
        let timing = RunTiming {
            handler: ended.since(started),
            end_to_end: matches!(outcome, RecordOutcome::Done(_))
                .then(|| self.ports.clock.now().since(claimed.received_at)),
        };
        (outcome, Some((summary, timing)))
    }

    async fn run_handler(
        &self,
        record: &QueueRecord,
        runtime: &BotRuntime,
        inline_wait: Duration,
        group: &GroupKey,
        claimed: &Claimed,
        deadline: Timestamp,
    ) -> RunEnd {
        let ended = |result| RunEnd {
            result,
            summary: ActionSummary::default(),
            unwritten: Vec::new(),
            state: None,
            scheduled: Vec::new(),
        };
        let event = match Event::read(&claimed.lease.key.bot_id, group, &record.body) {
            Ok(event) => event,
            Err(error) => return ended(Err(error)),
        };
        let cutoff = deadline.minus(self.settings.deadline_margin);
        let mut ctx = Context::new(RunParts {
            lease: &claimed.lease,
            group,
            recorded: &claimed.actions,
            state: claimed.state.as_ref(),
            ledger: &*self.ports.ledger,
            api: &*runtime.api,
            budget: &*self.ports.budget,
            clock: &*self.ports.clock,
            cutoff,
            max_inline_wait: inline_wait,
            timers: self.ports.timers.is_some(),
            broadcasts: self.ports.broadcasts.as_deref(),
        });
        let budget = cutoff.since(self.ports.clock.now());
        let run = match event {
            Event::Update(update) => {
                let acknowledged_callback = match &update.kind {
                    UpdateKind::CallbackQuery(query) if self.settings.ack_callbacks => {
                        Some(query.id.0.clone())
                    }
                    _ => None,
                };
                ctx.acknowledged_by_webhook(acknowledged_callback);
                AssertUnwindSafe(runtime.handler.handle(*update, &mut ctx))
                    .catch_unwind()
                    .boxed()
            }
            Event::Timer(message) => match ctx.fire(&message) {
                Some(fired) => AssertUnwindSafe(runtime.handler.timer(fired, &mut ctx))
                    .catch_unwind()
                    .boxed(),
                None => {
                    // Cancelled, replaced by a later schedule of its key, or handed over by a run
                    // that never settled: the chat's state does not name it, so it does not run.
                    info!(key = %message.key, "the timer is no longer pending in its chat; acknowledged without running");
                    return ended(Ok(()));
                }
            },
        };
        let result = match tokio::time::timeout(budget, run).await {
            Ok(Ok(result)) => result,
            Ok(Err(panic)) => Err(HandlerError::Panicked(panic_message(&*panic))),
            Err(_) => Err(HandlerError::Deadline),
        };
        RunEnd {
            summary: ctx.summary(),
            unwritten: ctx.take_unwritten(),
            state: ctx.take_state_write(),
            scheduled: ctx.take_scheduled(),
            result,
        }
    }

    /// Hands a finished run's timers to the scheduler before its `DONE` settle, patiently: a timer
    /// handed over for a run that then fails to settle is harmless (the chat's state does not name
    /// it), but one missing after the settle would be lost.
    async fn hand_over_timers(
        &self,
        scheduled: &[TimerMessage],
        deadline: Timestamp,
    ) -> Result<(), PortError> {
        let Some(timers) = self.ports.timers.as_ref().filter(|_| !scheduled.is_empty()) else {
            return Ok(());
        };
        let now = self.ports.clock.now();
        self.patiently("schedule timers", deadline, || {
            timers.schedule(scheduled, now)
        })
        .await
    }

    /// Settles a run that ends `DONE` — finished (with its state), or its recipient gone — and
    /// returns `done` once that is recorded.
    async fn finish(
        &self,
        run: Run<'_>,
        summary: &ActionSummary,
        settlement: Settlement,
        done: RecordOutcome,
        unwritten: Vec<ActionOutcome>,
    ) -> RecordOutcome {
        let Run {
            record,
            claimed,
            deadline,
            ..
        } = run;
        if !summary.uncertain.is_empty() {
            warn!(
                uncertain = summary.uncertain.len(),
                "at-most-once actions with unknown outcome were not made again; marked uncertain"
            );
        }
        // A settle refused as unavailable is tried again for a while: the handler's work is done,
        // and letting the message come back would run it again (its last send's outcome would be
        // unknown, so that send would be repeated).
        let settled = self
            .patiently("settle", deadline, || {
                self.ports
                    .ledger
                    .settle(&claimed.lease, &settlement, &unwritten)
            })
            .await;
        match settled {
            Ok(()) => {
                match &done {
                    RecordOutcome::RecipientGone(gone) => {
                        info!(
                            attempt = claimed.lease.token,
                            gone = gone.as_str(),
                            "the recipient is gone; settled DONE as recipient_gone"
                        )
                    }
                    _ => info!(attempt = claimed.lease.token, "processed"),
                }
                done
            }
            Err(PortError::Fenced { .. }) => {
                warn!("fenced: the handler finished, but another run holds the lease now; leaving it the update");
                RecordOutcome::Fenced
            }
            Err(e @ PortError::Conflict { .. }) => {
                // Someone else wrote the chat's state since the claim read it: nothing of this
                // settle was written, and the next run handles the update on the new state.
                let error = HandlerError::Store(e);
                self.fail(run, error, unwritten).await
            }
            Err(e) => {
                // The message comes back; the next run replays what is recorded and settles again.
                warn!(error = %error_chain(&e), "handler finished but DONE was not recorded");
                self.store_unavailable(record, claimed.lease.token, deadline)
                    .await
            }
        }
    }

    /// Settles a failed run `RETRYING` and backs its message off, or buries the update when the
    /// policy gives up on it.
    async fn fail(
        &self,
        run: Run<'_>,
        error: HandlerError,
        unwritten: Vec<ActionOutcome>,
    ) -> RecordOutcome {
        let Run {
            record,
            key,
            group,
            claimed,
            deadline,
        } = run;
        if error.is_store_trouble() {
            return self
                .store_refused_run(record, claimed, &error, unwritten, deadline)
                .await;
        }
        let class = error.class();
        let run = FailedRun {
            class,
            attempts_spent: claimed.attempts_spent(),
            age: self.ports.clock.now().since(claimed.first_attempt_at),
        };
        let delay = match self.settings.retry.verdict(run, Jitter::random()) {
            Verdict::RetryAfter(delay) => delay,
            Verdict::Bury(reason) => {
                // A record the store can no longer grow says so, rather than "permanent".
                let reason = match error {
                    HandlerError::Store(PortError::TooLarge { .. }) => DeadReason::TooLarge,
                    HandlerError::Unreadable(_) => DeadReason::Unreadable,
                    _ => reason,
                };
                return self
                    .bury(
                        record, key, group, claimed, reason, &error, unwritten, deadline,
                    )
                    .await;
            }
        };
        let throttled = matches!(class, ErrorClass::RateLimited(_));
        warn!(error = %error_chain(&error), class = class.as_str(), delay_ms = delay.as_millis() as u64, "run failed; retrying");
        let settlement = Settlement::Retrying {
            error: error_chain(&error),
            throttled,
        };
        if let Err(fenced) = self
            .settle_retrying(claimed, &settlement, unwritten, deadline)
            .await
        {
            return fenced;
        }
        let delay = self.show_again(record, delay, deadline).await;
        RecordOutcome::Retrying(delay, class)
    }

    /// A run stopped by the store refusing one of its writes (an intent, a step's result): the
    /// store's trouble, not the update's, so like a refused claim it backs off by the message's
    /// receives and the run is refunded from the budget — a store throttled for a while must not
    /// bury updates that never failed.
    async fn store_refused_run(
        &self,
        record: &QueueRecord,
        claimed: &Claimed,
        error: &HandlerError,
        unwritten: Vec<ActionOutcome>,
        deadline: Timestamp,
    ) -> RecordOutcome {
        warn!(error = %error_chain(error), "the store refused a write of the run; backing off without spending an attempt");
        let settlement = Settlement::Retrying {
            error: error_chain(error),
            throttled: true,
        };
        if let Err(fenced) = self
            .settle_retrying(claimed, &settlement, unwritten, deadline)
            .await
        {
            return fenced;
        }
        self.store_unavailable(record, record.receive_count, deadline)
            .await
    }

    /// Settles a failed run `RETRYING`; `Err` carries the outcome when another run holds the lease.
    /// A settle the store keeps refusing is given up: the run then still counts, and the record
    /// shows `PROCESSING` until its lease ends, when it is claimed again.
    async fn settle_retrying(
        &self,
        claimed: &Claimed,
        settlement: &Settlement,
        unwritten: Vec<ActionOutcome>,
        deadline: Timestamp,
    ) -> Result<(), RecordOutcome> {
        // Patient too: a record left PROCESSING holds its chat until its lease ends, whenever its
        // message comes back.
        let settled = self
            .patiently("settle", self.patience_within(deadline), || {
                self.ports
                    .ledger
                    .settle(&claimed.lease, settlement, &unwritten)
            })
            .await;
        match settled {
            Ok(()) => Ok(()),
            Err(PortError::Fenced { .. }) => Err(RecordOutcome::Fenced),
            Err(e) => {
                warn!(error = %error_chain(&e), "RETRYING was not recorded");
                Ok(())
            }
        }
    }

    /// Marks the record DEAD (fenced), then sends its dead letter and acknowledges it. If the letter
    /// cannot be sent, the message is not acknowledged: its next delivery finds the record DEAD and
    /// sends the letter from the burial kept on it.
    #[allow(clippy::too_many_arguments)]
    async fn bury(
        &self,
        record: &QueueRecord,
        key: &RecordKey,
        group: &GroupKey,
        claimed: &Claimed,
        reason: DeadReason,
        error: &HandlerError,
        unwritten: Vec<ActionOutcome>,
        deadline: Timestamp,
    ) -> RecordOutcome {
        let burial = Burial {
            reason,
            class: FailureClass::from(error.class()),
            error: error_chain(error),
            attempts: claimed.lease.token,
        };
        error!(reason = reason.as_str(), error = %burial.error, attempts = burial.attempts, "dead-lettering update");
        let settled = self
            .ports
            .ledger
            .settle(
                &claimed.lease,
                &Settlement::Dead(burial.clone()),
                &unwritten,
            )
            .await;
        match settled {
            Ok(()) => {}
            Err(PortError::Fenced { .. }) => return RecordOutcome::Fenced,
            Err(e @ PortError::TooLarge { .. }) => {
                // The record cannot even hold its burial: the letter is what keeps the update now,
                // and retrying would end the same way.
                warn!(error = %error_chain(&e), "the record is too large to mark DEAD; its dead letter is sent all the same");
            }
            Err(e) => {
                warn!(error = %error_chain(&e), "DEAD was not recorded; the update comes back");
                return self
                    .store_unavailable(record, claimed.lease.token, deadline)
                    .await;
            }
        }
        self.finish_burial(record, key, group, Some(burial), deadline)
            .await
    }

    /// Sends the dead letter of a record that is DEAD; acknowledges the message only once it is sent.
    async fn finish_burial(
        &self,
        record: &QueueRecord,
        key: &RecordKey,
        group: &GroupKey,
        burial: Option<Burial>,
        deadline: Timestamp,
    ) -> RecordOutcome {
        let Some(burial) = burial else {
            info!("duplicate delivery of a dead-lettered update; acknowledged");
            return RecordOutcome::AlreadyFinal;
        };
        // The dedup id names the burial, so a letter already sent is not sent twice.
        let letter = DeadLetter::for_update(key, group, record.body.clone(), &burial);
        match self.ports.dead.dead_letter(&letter).await {
            Ok(()) => RecordOutcome::DeadLettered(burial.reason),
            Err(e) => {
                // Never acknowledge what is not safely in the dead-letter queue.
                warn!(error = %error_chain(&e), "dead-letter send failed; the update comes back");
                self.store_unavailable(record, record.receive_count, deadline)
                    .await
            }
        }
    }

    async fn bury_unreadable(
        &self,
        record: &QueueRecord,
        letter: DeadLetter,
        deadline: Timestamp,
    ) -> RecordOutcome {
        error!(error = %letter.error, "unreadable queue message dead-lettered");
        match self.ports.dead.dead_letter(&letter).await {
            Ok(()) => RecordOutcome::DeadLettered(letter.reason),
            Err(e) => {
                warn!(error = %error_chain(&e), "dead-letter send failed");
                self.store_unavailable(record, record.receive_count, deadline)
                    .await
            }
        }
    }

    /// A dead letter an operator moved back to the updates queue outside tgq (the SQS console's
    /// redrive) is an operator's replay: its `DEAD` record is restarted with a fresh budget and the
    /// redrive audited, so the claim that follows runs it instead of acknowledging it unseen. A
    /// record in any other state is left as it is (a later delivery of the same message, or an
    /// update that ran since). `Err` is the outcome when the store could not be asked.
    async fn accept_redrive(
        &self,
        record: &QueueRecord,
        key: &RecordKey,
        marks: DeadLetterMarks,
        deadline: Timestamp,
    ) -> Result<(), RecordOutcome> {
        let now = self.ports.clock.now();
        let request = ResetRequest {
            key: key.clone(),
            now,
            rule: ResetRule::Dead,
        };
        let outcome = match self.ports.reset.reset(&request).await {
            Ok(Reset::Restarted(from)) => {
                format!("record restarted from {from} with a fresh budget; the update runs again")
            }
            Ok(Reset::Absent) => "no live record; the update runs from the message".to_owned(),
            Ok(Reset::Refused(_)) => return Ok(()),
            Err(e) => {
                warn!(error = %error_chain(&e), "the redriven letter's record could not be restarted; backing off");
                return Err(self
                    .store_unavailable(record, record.receive_count, deadline)
                    .await);
            }
        };
        info!(
            reason = marks.reason.as_str(),
            attempts = marks.attempts,
            "a dead letter was moved back to the updates queue: {outcome}"
        );
        let entry = AuditEntry {
            at: now,
            principal: REDRIVE_PRINCIPAL.to_owned(),
            action: AuditAction::Redrive,
            bot_id: key.bot_id.clone(),
            update_id: Some(key.update_id),
            letter_id: Some(record.message_id.clone()),
            outcome,
            expires_at: now.plus(self.settings.record_ttl),
        };
        if let Err(e) = self.ports.audit.append(&entry).await {
            warn!(error = %error_chain(&e), "the redrive could not be audited");
        }
        Ok(())
    }

    /// SQS moves a message received `maxReceiveCount` times to the dead-letter queue whether it ran
    /// or not; a record close to that is worth a warning with its group.
    fn warn_near_redrive(&self, record: &QueueRecord) {
        let limit = f64::from(self.settings.max_receive_count);
        if f64::from(record.receive_count) >= limit * defaults::RECEIVE_WARNING_SHARE {
            warn!(
                receive_count = record.receive_count,
                max_receive_count = self.settings.max_receive_count,
                group = %record.group_id,
                "message is close to the queue's redrive limit"
            );
        }
    }

    /// A store or queue failure outside the handler: back off exponentially with jitter, like a
    /// failed run, but count no attempt.
    async fn store_unavailable(
        &self,
        record: &QueueRecord,
        exponent: u32,
        deadline: Timestamp,
    ) -> RecordOutcome {
        let delay = self
            .settings
            .retry
            .backoff(exponent.max(1), Jitter::random());
        let delay = self.show_again(record, delay, deadline).await;
        RecordOutcome::StoreUnavailable(delay)
    }

    /// When a write retried with the store's whole patience, starting now, must end: never later
    /// than the invocation's `deadline` (which [`Worker::patiently`] keeps a second off), because
    /// a batch that answers late has every message of it come back, the finished ones too.
    fn patience_within(&self, deadline: Timestamp) -> Timestamp {
        let patience = self.settings.store_patience + Duration::from_secs(1);
        self.ports.clock.now().plus(patience).min(deadline)
    }

    /// [`patiently`] with the store's patience, and never closer than a second to `deadline`
    /// (time to answer).
    async fn patiently<T, F, Fut>(
        &self,
        what: &str,
        deadline: Timestamp,
        write: F,
    ) -> Result<T, PortError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, PortError>>,
    {
        const TO_ANSWER: Duration = Duration::from_secs(1);
        let left = || {
            deadline
                .since(self.ports.clock.now())
                .saturating_sub(TO_ANSWER)
        };
        patiently(what, self.settings.store_patience, left, write).await
    }

    /// Makes the message visible again after `after`, never past SQS's ceiling; returns the delay
    /// asked for. A change refused as unavailable is tried again for a while (within the store's
    /// patience and the invocation's `deadline`): left as it is, the message would come back only
    /// after the queue's whole visibility timeout.
    async fn show_again(
        &self,
        record: &QueueRecord,
        after: Duration,
        deadline: Timestamp,
    ) -> Duration {
        let after = within_visibility_ceiling(after);
        if let Err(e) = self
            .patiently("visibility change", self.patience_within(deadline), || {
                self.ports
                    .visibility
                    .change_visibility(&record.receipt, after)
            })
            .await
        {
            // The message still comes back, after the queue's own visibility timeout.
            warn!(error = %error_chain(&e), message_id = %record.message_id, "visibility change failed");
        }
        after
    }
}

/// The record a run belongs to, as the settling steps need it.
#[derive(Clone, Copy)]
struct Run<'a> {
    record: &'a QueueRecord,
    key: &'a RecordKey,
    group: &'a GroupKey,
    claimed: &'a Claimed,
    deadline: Timestamp,
}

/// How a handler run ended, with what its context gathered for the settle.
struct RunEnd {
    result: Result<(), HandlerError>,
    summary: ActionSummary,
    /// Outcomes not yet written.
    unwritten: Vec<ActionOutcome>,
    /// The group's new state, if the handler set one.
    state: Option<StateWrite>,
    /// The timers the run scheduled, handed over before the settle.
    scheduled: Vec<TimerMessage>,
}

/// What a queue message brings the bot: one of Telegram's updates, or one of its own timers.
enum Event {
    Update(Box<Update>),
    Timer(TimerMessage),
}

impl Event {
    fn read(bot_id: &BotId, group: &GroupKey, body: &[u8]) -> Result<Self, HandlerError> {
        if let Some(timer) = TimerMessage::parse(bot_id, group, body) {
            return Ok(Event::Timer(timer));
        }
        // A parser's panic or an update it cannot read is the update's end, never the process's
        // or the batch's (docs/design/webhook.md).
        crate::reading::read_update(body)
            .map(|update| Event::Update(Box::new(update)))
            .map_err(HandlerError::Unreadable)
    }
}

/// Reads the bot, group and update id a message belongs to; an unreadable message becomes a
/// poison letter.
fn identify(record: &QueueRecord) -> Result<(RecordKey, GroupKey), Box<DeadLetter>> {
    let (bot_id, group) = record.group_id.split().map_err(|e| {
        Box::new(DeadLetter::unidentified(
            BotId::unknown(),
            record.body.clone(),
            e.to_string(),
        ))
    })?;
    let envelope = Envelope::parse_queued(&record.body).map_err(|poison| {
        Box::new(DeadLetter::poison(
            bot_id.clone(),
            record.body.clone(),
            &poison,
        ))
    })?;
    Ok((RecordKey::new(bot_id, envelope.update_id), group))
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
