//! How a run that did not finish is settled: backed off through the message's visibility, or
//! buried in the dead-letter queue once the policy gives up; a store that refuses is waited for
//! within the run's time, and an operator's redrive is taken as a replay (docs/design/worker.md §1).

use super::run::*;
use super::*;

impl Worker {
    /// Settles a failed run `RETRYING` and backs its message off, or buries the update when the
    /// policy gives up on it.
    pub(super) async fn fail(
        &self,
        run: Run<'_>,
        error: HandlerError,
        unwritten: Vec<ActionOutcome>,
    ) -> RecordOutcome {
        let Run {
            record,
            claimed,
            deadline,
            ..
        } = run;
        if error.is_store_trouble() {
            return self
                .store_refused_run(record, claimed, &error, unwritten, deadline)
                .await;
        }
        let class = error.class();
        let failed = FailedRun {
            class,
            attempts_spent: claimed.attempts_spent(),
            age: self.ports.clock.now().since(claimed.first_attempt_at),
        };
        let delay = match self.settings.retry.verdict(failed, Jitter::random()) {
            Verdict::RetryAfter(delay) => delay,
            Verdict::Bury(reason) => {
                // A record the store can no longer grow says so, rather than "permanent".
                let reason = match error {
                    HandlerError::Store(PortError::TooLarge { .. }) => DeadReason::TooLarge,
                    HandlerError::Unreadable(_) => DeadReason::Unreadable,
                    _ => reason,
                };
                return self.bury(run, reason, &error, unwritten).await;
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
    pub(super) async fn store_refused_run(
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
    pub(super) async fn settle_retrying(
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
    pub(super) async fn bury(
        &self,
        run: Run<'_>,
        reason: DeadReason,
        error: &HandlerError,
        unwritten: Vec<ActionOutcome>,
    ) -> RecordOutcome {
        let (record, claimed, deadline) = (run.record, run.claimed, run.deadline);
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
        self.finish_burial(record, run.key, run.group, Some(burial), deadline)
            .await
    }

    /// Sends the dead letter of a record that is DEAD; acknowledges the message only once it is sent.
    pub(super) async fn finish_burial(
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

    pub(super) async fn bury_unreadable(
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
    pub(super) async fn accept_redrive(
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
    pub(super) fn warn_near_redrive(&self, record: &QueueRecord) {
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
    pub(super) async fn store_unavailable(
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
    pub(super) fn patience_within(&self, deadline: Timestamp) -> Timestamp {
        let patience = self.settings.store_patience + Duration::from_secs(1);
        self.ports.clock.now().plus(patience).min(deadline)
    }

    /// [`patiently`] with the store's patience, and never closer than a second to `deadline`
    /// (time to answer).
    pub(super) async fn patiently<T, F, Fut>(
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
    pub(super) async fn show_again(
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
