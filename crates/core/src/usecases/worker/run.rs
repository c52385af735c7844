//! One record's run: identified, claimed, its handler run on a context that records each call,
//! and finished by a settle (docs/design/worker.md §1, §2).

use std::sync::atomic::{AtomicBool, Ordering};

use teloxide_core::payloads::{AnswerPreCheckoutQuery, AnswerPreCheckoutQuerySetters as _};
use teloxide_core::types::PreCheckoutQueryId;

use super::*;

impl Worker {
    #[instrument(skip_all, fields(message_id = %record.message_id, bot_id, update_id, group, attempt))]
    pub(super) async fn process_record(
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
    pub(super) async fn run_claimed(
        &self,
        record: &QueueRecord,
        share: &Share<'_>,
        key: &RecordKey,
        group: &GroupKey,
        claimed: Claimed,
        deadline: Timestamp,
    ) -> (RecordOutcome, Option<RunReport>) {
        Span::current().record("attempt", claimed.lease.token);
        let run = Run {
            record,
            key,
            group,
            claimed: &claimed,
            deadline,
        };
        let runtime = match share.bot {
            Lookup::Found(runtime) => runtime,
            Lookup::Refused(reason, why) => {
                let error = HandlerError::permanent(why.clone());
                let outcome = self.bury(run, *reason, &error, Vec::new()).await;
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
                .bury(run, DeadReason::BudgetSpent, &error, Vec::new())
                .await;
            return (outcome, None);
        }
        let started = self.ports.clock.now();
        let HandlerRan {
            result,
            summary,
            unwritten,
            state,
            charges,
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
                let settlement = Settlement::Done { state, charges };
                self.finish(run, &summary, settlement, done, unwritten)
                    .await
            }
            Err(error) if error.is_fenced() => {
                warn!(error = %error_chain(&error), "fenced: another run took the lease over; this run stops");
                RecordOutcome::Fenced
            }
            // A payment or refund is never settled as gone: that settle writes neither the credit
            // nor the charge, and the update would end with the user's Stars in nobody's books. It
            // fails as any update does, and a permanent refusal leaves it in the dead letters.
            Err(error) => match error.recipient_gone() {
                Some(gone)
                    if self.settings.gone_recipients == GoneRecipients::Settle
                        && charges.is_empty() =>
                {
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

    pub(super) async fn run_handler(
        &self,
        record: &QueueRecord,
        runtime: &BotRuntime,
        inline_wait: Duration,
        group: &GroupKey,
        claimed: &Claimed,
        deadline: Timestamp,
    ) -> HandlerRan {
        let ended = |result| HandlerRan {
            result,
            summary: ActionSummary::default(),
            unwritten: Vec::new(),
            state: None,
            charges: Vec::new(),
            scheduled: Vec::new(),
        };
        let event = match Event::read(&claimed.lease.key.bot_id, group, &record.body) {
            Ok(event) => event,
            Err(error) => return ended(Err(error)),
        };
        // A payment is credited once per charge, not once per update, and a refund recorded once
        // (docs/design/payments.md §2): what the ledger holds of its charge is read before the
        // handler runs.
        let received = self.ports.clock.now();
        let payment = match event.payment(&claimed.lease.key, received) {
            Ok(payment) => payment,
            Err(error) => return ended(Err(error)),
        };
        let known = match &payment {
            Some(payment) => {
                let bot = &claimed.lease.key.bot_id;
                match self.ports.ledger.charge(bot, &payment.charge().id).await {
                    Ok(known) => known,
                    Err(error) => return ended(Err(HandlerError::Store(error))),
                }
            }
            None => None,
        };
        let cutoff = deadline.minus(self.settings.deadline_margin);
        let answered = AtomicBool::new(false);
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
            checkout_answered: &answered,
            checkout_ends: event.pre_checkout_query().map(|_| {
                claimed
                    .received_at
                    .plus(crate::policy::PRE_CHECKOUT_DEADLINE)
            }),
            payment: match &payment {
                Some(PaymentUpdate::Paid(charge)) => Some((charge, known.as_ref())),
                _ => None,
            },
        });
        let now = self.ports.clock.now();
        let mut budget = cutoff.since(now);
        let checkout = event.pre_checkout_query();
        if checkout.is_some() {
            if PreCheckoutPolicy::expired(claimed.received_at, now) {
                warn!("a pre-checkout query came to run after Telegram's 10 s: Telegram has cancelled the payment; nothing is answered");
                return ended(Ok(()));
            }
            let answer_by = self.settings.pre_checkout.answer_by(claimed.received_at);
            budget = budget.min(answer_by.since(now));
        }
        let run = match event {
            Event::Update(_) if budget.is_zero() && checkout.is_some() => {
                // Too late for the handler: tgq's own answer below still reaches Telegram in time.
                futures::future::ready(Ok(Err(HandlerError::Deadline))).boxed()
            }
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
        let mut run = run;
        let ended_in_time = match tokio::time::timeout(budget, &mut run).await {
            Ok(ended) => Some(ended),
            // A pre-checkout query answered in time: the rest of the handler's work may take the
            // run's whole time.
            Err(_) if checkout.is_some() && answered.load(Ordering::SeqCst) => {
                let left = cutoff.since(self.ports.clock.now());
                tokio::time::timeout(left, &mut run).await.ok()
            }
            Err(_) => None,
        };
        drop(run);
        let result = match ended_in_time {
            Some(Ok(result)) => result,
            Some(Err(panic)) => Err(HandlerError::Panicked(panic_message(&*panic))),
            None => Err(HandlerError::Deadline),
        };
        let unanswered = !answered.load(Ordering::SeqCst);
        // A handler that failed is not settled as if it had finished: what it set is dropped with
        // it, whoever answers its query.
        let failed = result.is_err();
        let result = match checkout {
            Some(query) if unanswered && !result.as_ref().is_err_and(HandlerError::is_fenced) => {
                self.refuse_checkout(&mut ctx, query, &result).await
            }
            _ => result,
        };
        let (state, scheduled) = match failed {
            true => (None, Vec::new()),
            false => (ctx.take_state_write(), ctx.take_scheduled()),
        };
        // The update's own payment or refund, as the ledger should have it, then the refunds the
        // handler made.
        let mut charges: Vec<ChargeWrite> = payment
            .as_ref()
            .and_then(|payment| ChargeWrite::of(payment, known.as_ref(), received))
            .into_iter()
            .collect();
        if !failed {
            for write in ctx.take_refunds() {
                if !charges.iter().any(|c| c.entry.id == write.entry.id) {
                    charges.push(write);
                }
            }
        }
        HandlerRan {
            summary: ctx.summary(),
            unwritten: ctx.take_unwritten(),
            state,
            charges,
            scheduled,
            result,
        }
    }

    /// Answers a pre-checkout query its handler left unanswered — it failed, ran out of its time,
    /// or ended without a word — `ok: false` with the configured refusal, at most once, so that the
    /// user hears within Telegram's 10 s and is not charged. The update is then finished: a retry
    /// would come after Telegram gave up on the query. How the refusal went is the run's result.
    async fn refuse_checkout(
        &self,
        ctx: &mut Context<'_>,
        query: PreCheckoutQueryId,
        handler: &Result<(), HandlerError>,
    ) -> Result<(), HandlerError> {
        match handler {
            Ok(()) => {
                warn!("the pre-checkout query's handler ended without answering it; tgq refuses it")
            }
            Err(error) => {
                warn!(error = %error_chain(error), "the pre-checkout query's handler did not answer in time; tgq refuses it")
            }
        }
        let refusal = self.settings.pre_checkout.refusal.clone();
        let answer = AnswerPreCheckoutQuery::new(query, false).error_message(refusal);
        // At most once: after a crash with its outcome unknown, a second answer could only be
        // refused.
        match ctx.send_at_most_once(answer).await {
            // Telegram did not take it (the query is over, or it could not be reached in time):
            // the payment is cancelled either way, and a retry would come after the 10 s.
            Err(HandlerError::Telegram(error)) => {
                warn!(error = %error_chain(&error), "Telegram did not take tgq's refusal of the pre-checkout query; the payment is cancelled all the same");
                Ok(())
            }
            sent => sent.map(|_| ()),
        }
    }

    /// Hands a finished run's timers to the scheduler before its `DONE` settle, patiently: a timer
    /// handed over for a run that then fails to settle is harmless (the chat's state does not name
    /// it), but one missing after the settle would be lost.
    pub(super) async fn hand_over_timers(
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
    pub(super) async fn finish(
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
            Err(e @ (PortError::Conflict { .. } | PortError::Credited { .. })) => {
                // Someone else wrote the chat's state, or recorded the update's charge, since the
                // run read it: nothing of this settle was written, and the next run handles the
                // update on what is there now (a charge credited, credited no more).
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
}

/// The record a run belongs to, as the settling steps need it.
#[derive(Clone, Copy)]
pub(super) struct Run<'a> {
    pub(super) record: &'a QueueRecord,
    pub(super) key: &'a RecordKey,
    pub(super) group: &'a GroupKey,
    pub(super) claimed: &'a Claimed,
    pub(super) deadline: Timestamp,
}

/// How a handler run ended, with what its context gathered for the settle.
pub(super) struct HandlerRan {
    pub(super) result: Result<(), HandlerError>,
    pub(super) summary: ActionSummary,
    /// Outcomes not yet written.
    pub(super) unwritten: Vec<ActionOutcome>,
    /// The group's new state, if the handler set one.
    pub(super) state: Option<StateWrite>,
    /// What the run changes in the payments ledger.
    pub(super) charges: Vec<ChargeWrite>,
    /// The timers the run scheduled, handed over before the settle.
    pub(super) scheduled: Vec<TimerMessage>,
}

/// What a queue message brings the bot: one of Telegram's updates, or one of its own timers.
pub(super) enum Event {
    Update(Box<Update>),
    Timer(TimerMessage),
}

impl Event {
    /// The id of the pre-checkout query it is, if it is one.
    fn pre_checkout_query(&self) -> Option<PreCheckoutQueryId> {
        match self {
            Event::Update(update) => match &update.kind {
                UpdateKind::PreCheckoutQuery(query) => Some(query.id.clone()),
                _ => None,
            },
            Event::Timer(_) => None,
        }
    }

    /// The payment or refund it carries, if it carries one; a charge id the ledger cannot be
    /// keyed by is the update's end (dead-lettered with the reason, never credited).
    fn payment(
        &self,
        key: &RecordKey,
        now: Timestamp,
    ) -> Result<Option<PaymentUpdate>, HandlerError> {
        match self {
            Event::Update(update) => Charge::of(update, key, now).map_err(HandlerError::permanent),
            Event::Timer(_) => Ok(None),
        }
    }

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
pub(super) fn identify(record: &QueueRecord) -> Result<(RecordKey, GroupKey), Box<DeadLetter>> {
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
