//! The worker's recording engine behind [`Context`] (docs/design/worker.md §2): each call or step the
//! handler makes is an action at a position of the run, recalled from an earlier run's record or
//! made with its intent written first and its outcome kept; calls are paced through the bot's
//! budget and cleared just before they leave.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use teloxide_core::requests::Payload;
use tracing::warn;

use crate::budget::{Clear, Reserved, Slot};
use crate::error::{error_chain, PortError};
use crate::failure::HandlerError;
use crate::record::{
    ActionIntent, ActionOutcome, ActionResult, ActionState, Delivery, MAX_STEP_RESULT_BYTES,
};
use crate::telegram::{
    chat_id_of, method_name, offline_result, sends_a_message, ActionRef, ApiCall, CallError,
    TelegramError,
};
use crate::upload::Upload;

use crate::context::{
    ActionSummary, Context, INLINE_RETRIES, MADE_AGAIN_AFTER_UNKNOWN_OUTCOME, MAX_STEP_NAME_BYTES,
    STEP_PREFIX,
};

/// The Bot API method that answers a pre-checkout query.
pub(crate) const PRE_CHECKOUT_ANSWER: &str = "answerPreCheckoutQuery";

/// What is known about an action before it is made.
enum Before {
    /// Nothing: a new action.
    Fresh,
    /// Made earlier and certainly not taken (a refusal), or never made: make it.
    NotTaken,
    /// Made earlier with an unknown outcome: making it again may repeat it.
    Unknown,
}

/// What an earlier run left at an action's position.
enum Recalled {
    /// Its recorded result: returned instead of acting again.
    Result(ActionResult),
    /// Act, knowing this much.
    Act(Before),
    /// At most once and its outcome unknown: not made again, marked uncertain.
    Uncertain,
}

impl<'a> Context<'a> {
    /// What this run did, for the worker's report.
    pub(crate) fn summary(&self) -> ActionSummary {
        self.summary.clone()
    }

    /// Names the callback query the webhook answered in its reply (`TGQ_ACK_CALLBACKS`): the
    /// handler's own `answerCallbackQuery` for it is recorded as succeeded without a call, since
    /// Telegram would refuse a second answer ("query is too old").
    pub(crate) fn acknowledged_by_webhook(&mut self, callback_query_id: Option<String>) {
        self.acknowledged_callback = callback_query_id;
    }

    /// Outcomes not yet written, handed to the settle.
    pub(crate) fn take_unwritten(&mut self) -> Vec<ActionOutcome> {
        std::mem::take(&mut self.unwritten)
    }

    pub(crate) async fn act<P>(
        &mut self,
        payload: P,
        delivery: Delivery,
        files: &[Upload],
    ) -> Result<Option<P::Output>, HandlerError>
    where
        P: Payload + Serialize,
        P::Output: DeserializeOwned,
    {
        let answers_checkout = P::NAME.eq_ignore_ascii_case(PRE_CHECKOUT_ANSWER);
        let acted: Result<Option<P::Output>, HandlerError> = async {
            self.next_seq += 1;
            let seq = self.next_seq;
            let method = method_name(P::NAME);
            let mut params = serde_json::to_value(&payload).map_err(|e| {
                HandlerError::permanent(format!("{method} payload does not serialize: {e}"))
            })?;
            let before = match self.recall(seq, &method, delivery, self.run.api.records_outcomes()) {
                Recalled::Result(result) => {
                    let value = result.replay(&params).ok_or_else(|| {
                        HandlerError::permanent(format!(
                            "the result of {method} at position {seq} was too large to keep, so it cannot be replayed"
                        ))
                    })?;
                    return decode::<P::Output>(&method, value).map(Some);
                }
                Recalled::Uncertain => return Ok(None),
                Recalled::Act(before) => before,
            };
            if self.answered_by_webhook(&method, &params) {
                // Its intent first, like any action; its outcome goes with the next write. Written
                // even where the Bot API records its own calls: this one never reaches it.
                self.write_intent(seq, &method, delivery).await?;
                let answered = Value::Bool(true);
                self.unwritten.push(ActionOutcome {
                    seq,
                    state: ActionState::Succeeded(ActionResult::of(&answered)),
                });
                return decode::<P::Output>(&method, answered).map(Some);
            }
            let mut chat = sends_a_message(&method)
                .then(|| params.get("chat_id").and_then(chat_id_of))
                .flatten();
            // A Bot API that records the action in the send's own commit (the offline outbox) needs
            // no intent before it: until that commit nothing happened, after it the outcome is known.
            // Then an action not sent leaves no trace, and no outcome may be written for it either.
            let needs_intent = !self.run.api.records_outcomes();
            let mut intent_written = false;
            // Counted apart: a flood wait sat out does not use up the one move to a supergroup.
            let mut flood_retries = 0;
            let mut migrated = false;
            loop {
                // Paced first, the intent written as the call leaves: a run that stops while it waits
                // for its slot sent nothing and leaves no unknown outcome behind. Giving up here leaves
                // the action certainly not sent.
                let mut slot = match self.pace(chat).await {
                    Ok(slot) => slot,
                    Err(paced) => {
                        if intent_written {
                            self.not_sent(seq, "held back by Telegram's pacing; not sent");
                        }
                        return Err(paced);
                    }
                };
                if needs_intent && !intent_written {
                    // What the budget must learn before the call it learns now: after the intent,
                    // only the call (a crash between them leaves the action uncertain).
                    if !self.ready(slot.as_mut()).await? {
                        continue;
                    }
                    self.write_intent(seq, &method, delivery).await?;
                    intent_written = true;
                }
                match self.cleared(slot.as_mut()).await {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        if intent_written {
                            self.not_sent(seq, "the send budget is unavailable; not sent");
                        }
                        return Err(e.into());
                    }
                }
                match self.call(seq, &method, &params, delivery, files).await {
                    Ok(value) => return Ok(Some(self.succeeded(seq, &method, value)?)),
                    Err(CallError::Store(e)) => return Err(e.into()),
                    Err(CallError::Telegram(TelegramError::MigrateToChat(to)))
                        if !migrated && params.get("chat_id").is_some() =>
                    {
                        // The group became a supergroup: the same action goes there, once.
                        warn!(method = %method, "chat migrated to a supergroup; following once");
                        params["chat_id"] = Value::from(to);
                        chat = chat.map(|_| to);
                        migrated = true;
                    }
                    Err(CallError::Telegram(e))
                        if matches!(before, Before::Unknown) && e.proves_earlier_send(&method) =>
                    {
                        // The earlier send took effect: what it did is what this one would have done.
                        let message_id = params
                            .get("message_id")
                            .and_then(Value::as_i64)
                            .unwrap_or(0);
                        let value = offline_result(&method, &params, message_id, 0);
                        return Ok(Some(self.succeeded(seq, &method, value)?));
                    }
                    Err(CallError::Telegram(e)) => {
                        let refused = intent_written && e.is_definite();
                        if refused {
                            let (code, description) = e.code_and_description();
                            self.unwritten.push(ActionOutcome {
                                seq,
                                state: ActionState::failed(code, &description),
                            });
                        }
                        let TelegramError::RetryAfter(wait) = e else {
                            let recipient = params.get("chat_id").and_then(chat_id_of);
                            return Err(match e.recipient_gone(recipient) {
                                Some(gone) => HandlerError::RecipientGone { gone, error: e },
                                None => e.into(),
                            });
                        };
                        let bot = &self.run.lease.key.bot_id;
                        if let Err(e) = self.run.budget.pause(bot, wait).await {
                            // This process holds the bot all the same; other processes learn of the
                            // wait from their own 429s.
                            warn!(error = %error_chain(&e), "the flood wait could not be shared");
                        }
                        // A pre-checkout's answer has no later run to go back to (one would come
                        // after Telegram's 10 s): it sits out every flood wait that ends before
                        // Telegram stops taking answers, and none that does not
                        // (docs/design/payments.md §1). The handler's own answer is cut sooner,
                        // at its margin, by the worker.
                        let checkout_ends = self.run.checkout_ends.filter(|_| answers_checkout);
                        let (retries_spent, too_late) = match checkout_ends {
                            Some(ends) => (false, self.run.clock.now().plus(wait) >= ends),
                            None => (flood_retries >= INLINE_RETRIES, false),
                        };
                        if retries_spent || too_late || wait > self.inline_wait_allowed() {
                            return Err(e.into());
                        }
                        // A short flood wait is sat out here: the action was refused, so it is sent again.
                        if refused {
                            self.unwritten.pop();
                        }
                        flood_retries += 1;
                    }
                }
            }
        }
        .await;
        if answers_checkout && matches!(acted, Ok(Some(_))) {
            self.run.checkout_answered.store(true, Ordering::SeqCst);
        }
        acted
    }

    /// Whether this call answers the callback query the webhook already answered.
    fn answered_by_webhook(&self, method: &str, params: &Value) -> bool {
        let Some(acknowledged) = &self.acknowledged_callback else {
            return false;
        };
        method == "answerCallbackQuery"
            && params.get("callback_query_id").and_then(Value::as_str) == Some(acknowledged)
    }

    /// Looks up what earlier runs recorded at `seq` for an action `method` about to be made.
    /// `recorded_with_call`: the action's outcome is recorded in the same commit as the action
    /// itself (the offline outbox), so a bare intent means it never happened.
    fn recall(
        &mut self,
        seq: u32,
        method: &str,
        delivery: Delivery,
        recorded_with_call: bool,
    ) -> Recalled {
        let earlier = match self.run.recorded.get(&seq) {
            None => return Recalled::Act(Before::Fresh),
            Some(earlier) if earlier.method != method => {
                // The handler took another path than last time: the earlier record says nothing
                // about this action, which is recorded anew at this position.
                warn!(seq, recorded = %earlier.method, now = %method, "the handler's actions differ from the earlier run's at this position");
                self.summary.diverged.push(seq);
                return Recalled::Act(Before::Fresh);
            }
            Some(earlier) => earlier,
        };
        match &earlier.state {
            ActionState::Succeeded(result) => {
                self.summary.replayed += 1;
                Recalled::Result(result.clone())
            }
            ActionState::Failed { .. } => Recalled::Act(Before::NotTaken),
            ActionState::Pending if recorded_with_call => Recalled::Act(Before::NotTaken),
            ActionState::Pending | ActionState::Uncertain
                if delivery == Delivery::AtMostOnce || earlier.delivery == Delivery::AtMostOnce =>
            {
                warn!(seq, method = %method, "at-most-once action has an unknown outcome; not made again");
                let intent = self.intent(seq, method, delivery);
                self.unwritten.push(ActionOutcome {
                    seq,
                    state: ActionState::Uncertain,
                });
                self.summary.uncertain.push(intent);
                Recalled::Uncertain
            }
            ActionState::Pending | ActionState::Uncertain => {
                warn!(seq, method = %method, "{MADE_AGAIN_AFTER_UNKNOWN_OUTCOME}");
                self.summary.resent_after_unknown_outcome += 1;
                Recalled::Act(Before::Unknown)
            }
        }
    }

    /// Writes an action's intent, with the outcomes not yet written. When the write fails the
    /// outcomes are kept for the settle, which may still succeed.
    async fn write_intent(
        &mut self,
        seq: u32,
        method: &str,
        delivery: Delivery,
    ) -> Result<(), HandlerError> {
        let intent = self.intent(seq, method, delivery);
        let outcomes = std::mem::take(&mut self.unwritten);
        let written = self
            .run
            .ledger
            .record_intent(self.run.lease, &intent, &outcomes)
            .await;
        if written.is_err() {
            self.unwritten = outcomes;
        }
        Ok(written?)
    }

    /// Writes the outcomes known so far at once; kept for the settle when the write fails.
    async fn write_outcomes(&mut self) -> Result<(), HandlerError> {
        let outcomes = std::mem::take(&mut self.unwritten);
        let written = self
            .run
            .ledger
            .record_outcomes(self.run.lease, &outcomes)
            .await;
        if written.is_err() {
            self.unwritten = outcomes;
        }
        Ok(written?)
    }

    pub(crate) async fn run_step<T, F, Fut>(
        &mut self,
        name: &str,
        delivery: Delivery,
        run: F,
    ) -> Result<Option<T>, HandlerError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, HandlerError>>,
    {
        if name.is_empty() || name.len() > MAX_STEP_NAME_BYTES {
            return Err(HandlerError::permanent(format!(
                "a step needs a name of 1 to {MAX_STEP_NAME_BYTES} bytes"
            )));
        }
        self.next_seq += 1;
        let seq = self.next_seq;
        let method = format!("{STEP_PREFIX}{name}");
        match self.recall(seq, &method, delivery, false) {
            Recalled::Result(ActionResult::Json { json }) => {
                // The type changed since the step ran: retrying cannot make the result readable.
                return serde_json::from_str(&json).map(Some).map_err(|e| {
                    HandlerError::permanent(format!(
                        "the recorded result of {method} does not decode: {e}"
                    ))
                });
            }
            Recalled::Result(_) => {
                return Err(HandlerError::permanent(format!(
                    "the result of {method} at position {seq} was too large to keep, so it cannot be replayed"
                )))
            }
            Recalled::Uncertain => return Ok(None),
            Recalled::Act(_) => {}
        }
        self.write_intent(seq, &method, delivery).await?;
        let value = match run().await {
            Ok(value) => value,
            Err(error) => {
                // The step says it did not take effect: a retry runs it again.
                let failed = error_chain(&error);
                self.unwritten.push(ActionOutcome {
                    seq,
                    state: ActionState::failed(0, &failed),
                });
                return Err(error);
            }
        };
        let json = serde_json::to_string(&value).ok();
        let kept = json.filter(|json| json.len() <= MAX_STEP_RESULT_BYTES);
        let result = match &kept {
            Some(json) => ActionResult::Json { json: json.clone() },
            None => ActionResult::NotKept,
        };
        self.unwritten.push(ActionOutcome {
            seq,
            state: ActionState::Succeeded(result),
        });
        // At once: until this write, a crash would have the step run again (or reported uncertain).
        self.write_outcomes().await?;
        match kept {
            Some(_) => Ok(Some(value)),
            // It happened and is recorded as done, so it is never run again; but a retry could not
            // give its result back, which is the bot's mistake to fix.
            None => Err(HandlerError::permanent(format!(
                "the result of {method} does not fit in {MAX_STEP_RESULT_BYTES} bytes of JSON: return an id, not the whole object"
            ))),
        }
    }

    fn intent(&self, seq: u32, method: &str, delivery: Delivery) -> ActionIntent {
        ActionIntent {
            seq,
            method: method.to_owned(),
            delivery,
        }
    }

    async fn call(
        &self,
        seq: u32,
        method: &str,
        params: &Value,
        delivery: Delivery,
        files: &[Upload],
    ) -> Result<Value, CallError> {
        let call = ApiCall {
            method,
            params,
            action: Some(ActionRef {
                lease: self.run.lease,
                seq,
                delivery,
            }),
            files,
        };
        self.run.api.call(&call).await
    }

    /// Keeps a successful call's outcome for the next write and decodes its result.
    fn succeeded<T: DeserializeOwned>(
        &mut self,
        seq: u32,
        method: &str,
        value: Value,
    ) -> Result<T, HandlerError> {
        if !self.run.api.records_outcomes() {
            self.unwritten.push(ActionOutcome {
                seq,
                state: ActionState::Succeeded(ActionResult::of(&value)),
            });
        }
        decode(method, value)
    }

    /// Books the call's slot in the bot's budget and waits for it; a slot further off than the
    /// run may wait gives the update back. A flood wait that began while this call waited (another
    /// run's 429) is waited out as well, with a new slot after it.
    /// `None`: the Bot API is not Telegram's (the offline outbox), and nothing is paced.
    async fn pace(&mut self, chat: Option<i64>) -> Result<Option<Slot>, HandlerError> {
        if !self.run.api.paced() {
            return Ok(None);
        }
        let bot = &self.run.lease.key.bot_id;
        let allowed = self.inline_wait_allowed();
        let slot = match self.run.budget.reserve(bot, chat, allowed).await? {
            Reserved::Booked(slot) => slot,
            Reserved::Later(wait) => return Err(HandlerError::Paced(wait)),
        };
        if !slot.wait.is_zero() {
            // Timed from the booking: the write below is part of the wait, not added to it.
            let until = tokio::time::Instant::now() + slot.wait;
            // What the run's earlier calls did is written before it waits: a run stopped during
            // the wait must not leave calls that went out with unknown outcomes.
            if !self.unwritten.is_empty() {
                self.write_outcomes().await?;
            }
            tokio::time::sleep_until(until).await;
            self.summary.paced += slot.wait;
        }
        Ok(Some(slot))
    }

    /// Records that the action at `seq`, whose intent is written, was certainly not sent.
    fn not_sent(&mut self, seq: u32, why: &str) {
        self.unwritten.push(ActionOutcome {
            seq,
            state: ActionState::failed(0, why),
        });
    }

    /// Asked before the intent is written, when the slot's wait ended: whether the slot still
    /// stands (`false`: book again, nothing written).
    async fn ready(&mut self, slot: Option<&mut Slot>) -> Result<bool, PortError> {
        let Some(slot) = slot else {
            return Ok(true);
        };
        let bot = &self.run.lease.key.bot_id;
        Ok(matches!(
            self.run.budget.ready(bot, slot).await?,
            Clear::Go | Clear::After(_)
        ))
    }

    /// Asked after the intent is written, as late before the call as it can be: whether the call
    /// may go now (`false`: book again). A flood wait another process heard meanwhile holds this
    /// call too (docs/design/pacing.md); an early caller waits for its slot, and reads the budget
    /// again when that wait was long.
    async fn cleared(&mut self, slot: Option<&mut Slot>) -> Result<bool, PortError> {
        let Some(slot) = slot else {
            return Ok(true);
        };
        let bot = &self.run.lease.key.bot_id;
        let (clear, slept) = self.run.budget.wait_until_clear(bot, slot).await?;
        self.summary.paced += slept;
        Ok(clear)
    }

    /// How long a send may still wait inside this run.
    fn inline_wait_allowed(&self) -> Duration {
        let left = self.run.cutoff.since(self.run.clock.now());
        left.min(self.run.max_inline_wait)
    }
}

pub(crate) fn decode<T: DeserializeOwned>(method: &str, result: Value) -> Result<T, HandlerError> {
    // Telegram accepted the call, so retrying cannot make its result readable.
    serde_json::from_value(result).map_err(|e| {
        HandlerError::permanent(format!("the result of {method} does not decode: {e}"))
    })
}
