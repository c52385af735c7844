//! The worker use case (docs/ARCHITECTURE.md §4): one batch from the FIFO queue, in order, with
//! per-group failure propagation, a lease per update, recorded actions, backoff through visibility,
//! and dead-lettering.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use teloxide_core::types::Update;
use tracing::{error, info, instrument, warn, Span};

use crate::clock::Clock;
use crate::context::{ActionSummary, Context};
use crate::envelope::Envelope;
use crate::error::{ErrorClass, HandlerError};
use crate::handler::Handler;
use crate::ids::{GroupKey, MessageGroupId, RecordKey};
use crate::ingest::error_chain;
use crate::policy::{BuryReason, Jitter, RetryPolicy, Verdict};
use crate::ports::{
    Claim, ClaimRequest, DeadLetter, DeadLetters, QueueRecord, Settlement, UpdateLedger, Visibility,
};
use crate::record::Timestamp;
use crate::telegram::BotApi;

/// The worker's settings.
#[derive(Clone, Debug)]
pub struct WorkerSettings {
    /// Attempt budget and backoff.
    pub retry: RetryPolicy,
    /// Below this much remaining time, no further record is started.
    pub deadline_margin: Duration,
    /// How long a record created by a claim is kept.
    pub record_ttl: Duration,
}

/// The ports the worker uses; built once per cold start.
#[derive(Clone)]
pub struct WorkerPorts {
    /// Claims, records actions, settles.
    pub ledger: Arc<dyn UpdateLedger>,
    /// Hides failed messages for their backoff, shows skipped ones at once.
    pub visibility: Arc<dyn Visibility>,
    /// Receives updates given up on.
    pub dead: Arc<dyn DeadLetters>,
    /// The Bot API the handler's sends go to.
    pub api: Arc<dyn BotApi>,
    /// Tells the time.
    pub clock: Arc<dyn Clock>,
}

/// How one record of a batch ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordOutcome {
    /// The handler finished; the message is acknowledged.
    Done(ActionSummary),
    /// Already `DONE` or `DEAD`: acknowledged without running.
    AlreadyFinal,
    /// Failed transiently; visible again after the delay.
    Retrying(Duration, ErrorClass),
    /// Given up on: dead-lettered and acknowledged.
    DeadLettered(BuryReason),
    /// An earlier record of its group failed in this batch; not run, visible again at once.
    SkippedBehindFailure,
    /// Too little invocation time was left to start it; not run, visible again at once.
    DeadlineReached,
    /// Another worker holds its lease; visible again when the lease ends.
    Busy(Duration),
    /// Its record could not be claimed or settled; visible again after the delay.
    StoreUnavailable(Duration),
}

impl RecordOutcome {
    /// Whether the message stays on the queue (it is named in `batchItemFailures`).
    pub fn is_failure(&self) -> bool {
        !matches!(
            self,
            RecordOutcome::Done(_) | RecordOutcome::AlreadyFinal | RecordOutcome::DeadLettered(_)
        )
    }
}

/// The result of one batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Each record's message id and outcome, in batch order.
    pub outcomes: Vec<(String, RecordOutcome)>,
}

impl BatchReport {
    /// The message ids to report in `batchItemFailures`: only real ids, in batch order.
    pub fn failed_message_ids(&self) -> Vec<String> {
        self.outcomes
            .iter()
            .filter(|(id, outcome)| outcome.is_failure() && !id.is_empty())
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// The worker use case.
#[derive(Clone)]
pub struct Worker {
    settings: WorkerSettings,
    ports: WorkerPorts,
    handler: Arc<dyn Handler>,
}

impl Worker {
    /// A worker running `handler` with these settings and ports.
    pub fn new(settings: WorkerSettings, ports: WorkerPorts, handler: Arc<dyn Handler>) -> Self {
        Self {
            settings,
            ports,
            handler,
        }
    }

    /// Processes a batch in order. `deadline` is when the invocation ends.
    pub async fn process_batch(&self, records: &[QueueRecord], deadline: Timestamp) -> BatchReport {
        let mut failed_groups: HashSet<&str> = HashSet::new();
        let mut report = BatchReport::default();
        for (index, record) in records.iter().enumerate() {
            let now = self.ports.clock.now();
            if deadline.since(now) < self.settings.deadline_margin {
                warn!(
                    remaining = records.len() - index,
                    "deadline margin reached; returning the rest of the batch"
                );
                for rest in &records[index..] {
                    self.show_again(rest, Duration::ZERO).await;
                    report
                        .outcomes
                        .push((rest.message_id.clone(), RecordOutcome::DeadlineReached));
                }
                break;
            }
            let outcome = if failed_groups.contains(record.group_id.as_str()) {
                // Running it would overtake the failed record of its chat.
                self.show_again(record, Duration::ZERO).await;
                RecordOutcome::SkippedBehindFailure
            } else {
                self.process_record(record, deadline).await
            };
            if outcome.is_failure() {
                failed_groups.insert(record.group_id.as_str());
            }
            report.outcomes.push((record.message_id.clone(), outcome));
        }
        report
    }

    #[instrument(skip_all, fields(message_id = %record.message_id, update_id, group, attempt))]
    async fn process_record(&self, record: &QueueRecord, deadline: Timestamp) -> RecordOutcome {
        let (key, group) = match self.identify(record) {
            Ok(identity) => identity,
            Err(letter) => return self.bury_unreadable(record, *letter).await,
        };
        Span::current()
            .record("update_id", key.update_id.0)
            .record("group", group.as_str());
        let now = self.ports.clock.now();
        let request = ClaimRequest {
            key: key.clone(),
            group: group.clone(),
            payload: record.body.clone(),
            now,
            lease_until: deadline,
            expires_at: now.plus(self.settings.record_ttl),
        };
        let claimed = match self.ports.ledger.claim(&request).await {
            Ok(Claim::Run(claimed)) => claimed,
            Ok(Claim::AlreadyFinal(status)) => {
                info!(%status, "duplicate delivery of a finished update; acknowledged");
                return RecordOutcome::AlreadyFinal;
            }
            Ok(Claim::Busy(until)) => {
                let wait = until.since(now).max(Duration::from_secs(1));
                self.show_again(record, wait).await;
                return RecordOutcome::Busy(wait);
            }
            Err(e) => {
                warn!(error = %error_chain(&e), "claim failed");
                return self.store_unavailable(record, 1).await;
            }
        };
        Span::current().record("attempt", claimed.attempt);
        if claimed.attempt > self.settings.retry.max_attempts {
            // Earlier runs died without settling (crashes, timeouts); the budget is spent all the same.
            let error = HandlerError::transient("earlier runs ended without settling");
            return self
                .bury(
                    record,
                    &key,
                    &group,
                    claimed.attempt,
                    BuryReason::BudgetSpent,
                    &error,
                )
                .await;
        }
        let (result, summary) = self.run_handler(record, &key, &group, &claimed).await;
        match result {
            Ok(()) => self.finish(record, &key, claimed.attempt, summary).await,
            Err(error) => {
                self.fail(record, &key, &group, claimed.attempt, error)
                    .await
            }
        }
    }

    /// Reads the bot, group and update id a message belongs to; an unreadable message is dead-lettered.
    fn identify(&self, record: &QueueRecord) -> Result<(RecordKey, GroupKey), Box<DeadLetter>> {
        let parsed = MessageGroupId::parse(&record.group_id)
            .map_err(|e| e.to_string())
            .and_then(|(bot_id, group)| {
                let envelope = Envelope::parse(&record.body).map_err(|e| e.to_string())?;
                Ok((RecordKey::new(bot_id, envelope.update_id), group))
            });
        parsed.map_err(|reason| {
            let bot_id = MessageGroupId::parse(&record.group_id)
                .map(|(bot, _)| bot)
                .unwrap_or_else(|_| crate::ids::BotId::unknown());
            Box::new(DeadLetter {
                bot_id,
                update_id: None,
                group: None,
                body: record.body.clone(),
                reason: "poison".into(),
                error_class: "poison".into(),
                error: reason,
                attempts: 0,
            })
        })
    }

    async fn run_handler(
        &self,
        record: &QueueRecord,
        key: &RecordKey,
        group: &GroupKey,
        claimed: &crate::ports::Claimed,
    ) -> (Result<(), HandlerError>, ActionSummary) {
        let update: Update = match serde_json::from_slice(&record.body) {
            Ok(update) => update,
            Err(e) => {
                return (
                    Err(HandlerError::permanent(format!(
                        "update does not decode: {e}"
                    ))),
                    ActionSummary::default(),
                )
            }
        };
        let mut ctx = Context::new(
            key,
            group,
            claimed.attempt,
            &claimed.actions,
            &*self.ports.ledger,
            &*self.ports.api,
        );
        let run = AssertUnwindSafe(self.handler.handle(update, &mut ctx))
            .catch_unwind()
            .await;
        let result = match run {
            Ok(result) => result,
            Err(panic) => Err(HandlerError::Panicked(panic_message(&panic))),
        };
        (result, ctx.summary())
    }

    async fn finish(
        &self,
        record: &QueueRecord,
        key: &RecordKey,
        attempt: u32,
        summary: ActionSummary,
    ) -> RecordOutcome {
        if !summary.uncertain.is_empty() {
            warn!(
                uncertain = summary.uncertain.len(),
                "at-most-once actions with unknown outcome were not re-sent"
            );
        }
        match self.ports.ledger.settle(key, &Settlement::Done).await {
            Ok(()) => {
                info!(attempt, "processed");
                RecordOutcome::Done(summary)
            }
            Err(e) => {
                // The actions are recorded; a redelivery replays them without sending and settles again.
                warn!(error = %error_chain(&e), "handler finished but DONE was not recorded");
                self.store_unavailable(record, attempt).await
            }
        }
    }

    async fn fail(
        &self,
        record: &QueueRecord,
        key: &RecordKey,
        group: &GroupKey,
        attempt: u32,
        error: HandlerError,
    ) -> RecordOutcome {
        let class = error.class();
        match self
            .settings
            .retry
            .verdict(attempt, class, Jitter::random())
        {
            Verdict::RetryAfter(delay) => {
                warn!(error = %error_chain(&error), class = class.as_str(), delay_ms = delay.as_millis() as u64, "transient failure; retrying");
                let settlement = Settlement::Retrying {
                    error: error_chain(&error),
                };
                if let Err(e) = self.ports.ledger.settle(key, &settlement).await {
                    warn!(error = %error_chain(&e), "RETRYING was not recorded");
                }
                self.show_again(record, delay).await;
                RecordOutcome::Retrying(delay, class)
            }
            Verdict::Bury(reason) => self.bury(record, key, group, attempt, reason, &error).await,
        }
    }

    async fn bury(
        &self,
        record: &QueueRecord,
        key: &RecordKey,
        group: &GroupKey,
        attempts: u32,
        reason: BuryReason,
        error: &HandlerError,
    ) -> RecordOutcome {
        let description = error_chain(error);
        error!(reason = reason.as_str(), error = %description, attempts, "dead-lettering update");
        let letter = DeadLetter {
            bot_id: key.bot_id.clone(),
            update_id: Some(key.update_id),
            group: Some(group.clone()),
            body: record.body.clone(),
            reason: reason.as_str().into(),
            error_class: error.class().as_str().into(),
            error: description.clone(),
            attempts,
        };
        if let Err(e) = self.ports.dead.dead_letter(&letter).await {
            // Never acknowledge what is not safely in the dead-letter queue.
            warn!(error = %error_chain(&e), "dead-letter send failed");
            return self.store_unavailable(record, attempts).await;
        }
        if let Err(e) = self
            .ports
            .ledger
            .settle(key, &Settlement::Dead { error: description })
            .await
        {
            warn!(error = %error_chain(&e), "DEAD was not recorded; the dead letter is sent");
        }
        RecordOutcome::DeadLettered(reason)
    }

    async fn bury_unreadable(&self, record: &QueueRecord, letter: DeadLetter) -> RecordOutcome {
        error!(error = %letter.error, "unreadable queue message dead-lettered");
        match self.ports.dead.dead_letter(&letter).await {
            Ok(()) => RecordOutcome::DeadLettered(BuryReason::Permanent),
            Err(e) => {
                warn!(error = %error_chain(&e), "dead-letter send failed");
                self.store_unavailable(record, 1).await
            }
        }
    }

    /// A store or queue failure outside the handler: back off like a transient failure, count no attempt.
    async fn store_unavailable(&self, record: &QueueRecord, attempt: u32) -> RecordOutcome {
        let delay = self.settings.retry.backoff(attempt, Jitter::random());
        self.show_again(record, delay).await;
        RecordOutcome::StoreUnavailable(delay)
    }

    async fn show_again(&self, record: &QueueRecord, after: Duration) {
        if let Err(e) = self
            .ports
            .visibility
            .change_visibility(&record.receipt, after)
            .await
        {
            // The message still comes back, after the queue's own visibility timeout.
            warn!(error = %error_chain(&e), message_id = %record.message_id, "visibility change failed");
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => (*text).to_owned(),
        (_, Some(text)) => text.clone(),
        _ => "non-string panic payload".to_owned(),
    }
}
