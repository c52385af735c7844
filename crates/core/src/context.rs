//! The handler's view of one update run: typed Bot API calls that are recorded so that a retry never
//! repeats a send that already happened (docs/ARCHITECTURE.md §5), paced to
//! Telegram's limits.
//!
//! Each call is an action at a position (`seq`) of the run. Its intent is written before the call,
//! fenced by the run's lease; its outcome is kept compactly and written with the run's next write
//! (the next intent, or the settle), unless the Bot API records it itself in the same commit as the
//! send (the offline outbox).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use teloxide_core::requests::Payload;
use tokio::time::Instant;
use tracing::warn;

use crate::clock::Clock;
use crate::defaults;
use crate::handler::HandlerError;
use crate::ids::{GroupKey, RecordKey};
use crate::pacer::Pacer;
use crate::ports::{Lease, UpdateLedger};
use crate::record::{
    ActionIntent, ActionOutcome, ActionRecord, ActionResult, ActionState, Delivery, Timestamp,
};
use crate::telegram::{
    chat_id_of, method_name, offline_result, sends_a_message, ActionRef, ApiCall, BotApi,
    CallError, TelegramError,
};

/// How many times one action is sent again inside a run after a short flood wait.
const INLINE_RETRIES: u32 = 2;

/// What a run's context is made of; built by the worker for each claimed update.
pub struct RunParts<'a> {
    /// The run's hold on its update.
    pub lease: &'a Lease,
    /// The update's ordering group.
    pub group: &'a GroupKey,
    /// What earlier runs recorded, by sequence number.
    pub recorded: &'a BTreeMap<u32, ActionRecord>,
    /// Where intents go.
    pub ledger: &'a dyn UpdateLedger,
    /// Where calls go.
    pub api: &'a dyn BotApi,
    /// Telegram's pacing, shared by the process.
    pub pacer: &'a Pacer,
    /// Tells the time.
    pub clock: &'a dyn Clock,
    /// When the run must be over: waits for Telegram's pacing never reach past it.
    pub cutoff: Timestamp,
}

/// Lent to the handler for one run of one update.
pub struct Context<'a> {
    run: RunParts<'a>,
    next_seq: u32,
    /// Outcomes known but not yet written: they go with the next intent or the settle.
    unwritten: Vec<ActionOutcome>,
    summary: ActionSummary,
}

/// What a run's context saw, reported by the worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActionSummary {
    /// Actions answered from an earlier run's recorded result instead of being sent.
    pub replayed: u32,
    /// At-most-once actions whose outcome is unknown; not re-sent, marked uncertain on the record.
    pub uncertain: Vec<ActionIntent>,
    /// At-least-once actions an earlier run left with an unknown outcome, sent again: each may have
    /// reached Telegram twice.
    pub resent_after_unknown_outcome: u32,
    /// Positions where the handler made another call than the earlier run did.
    pub diverged: Vec<u32>,
    /// How long the run's sends waited for Telegram's pacing.
    pub paced: Duration,
}

/// What is known about an action before it is sent.
enum Before {
    /// Nothing: a new action.
    Fresh,
    /// Sent earlier and certainly not taken (a refusal), or never sent: send it.
    NotTaken,
    /// Sent earlier with an unknown outcome: sending again may repeat it.
    Unknown,
}

impl<'a> Context<'a> {
    /// A context for one run.
    pub fn new(run: RunParts<'a>) -> Self {
        Self {
            run,
            next_seq: 0,
            unwritten: Vec::new(),
            summary: ActionSummary::default(),
        }
    }

    /// The update being handled.
    pub fn key(&self) -> &RecordKey {
        &self.run.lease.key
    }

    /// The update's ordering group.
    pub fn group(&self) -> &GroupKey {
        self.run.group
    }

    /// Which run this is (1 on the first).
    pub fn attempt(&self) -> u32 {
        self.run.lease.token
    }

    /// Sends a Bot API request at least once: if an earlier run recorded its result, that result is
    /// returned without sending; if the earlier outcome is unknown, it is sent again.
    pub async fn send<P>(&mut self, payload: P) -> Result<P::Output, HandlerError>
    where
        P: Payload + Serialize,
        P::Output: DeserializeOwned,
    {
        match self.act(payload, Delivery::AtLeastOnce).await? {
            Some(output) => Ok(output),
            None => Err(HandlerError::permanent(
                "an at-least-once action was reported uncertain",
            )),
        }
    }

    /// Sends a Bot API request at most once: if an earlier run sent it with an unknown outcome, it is
    /// not sent again, `None` is returned, and the action is marked uncertain on the record.
    pub async fn send_at_most_once<P>(
        &mut self,
        payload: P,
    ) -> Result<Option<P::Output>, HandlerError>
    where
        P: Payload + Serialize,
        P::Output: DeserializeOwned,
    {
        self.act(payload, Delivery::AtMostOnce).await
    }

    /// What this run did, for the worker's report.
    pub fn summary(&self) -> ActionSummary {
        self.summary.clone()
    }

    /// Outcomes not yet written, handed to the settle.
    pub fn take_unwritten(&mut self) -> Vec<ActionOutcome> {
        std::mem::take(&mut self.unwritten)
    }

    async fn act<P>(
        &mut self,
        payload: P,
        delivery: Delivery,
    ) -> Result<Option<P::Output>, HandlerError>
    where
        P: Payload + Serialize,
        P::Output: DeserializeOwned,
    {
        self.next_seq += 1;
        let seq = self.next_seq;
        let method = method_name(P::NAME);
        let mut params = serde_json::to_value(&payload).map_err(|e| {
            HandlerError::permanent(format!("{method} payload does not serialize: {e}"))
        })?;
        let before = match self.run.recorded.get(&seq) {
            None => Before::Fresh,
            Some(earlier) if earlier.method != method => {
                // The handler took another path than last time: the earlier record says nothing
                // about this call, which is recorded anew at this position.
                warn!(seq, recorded = %earlier.method, now = %method, "the handler's calls differ from the earlier run's at this position");
                self.summary.diverged.push(seq);
                Before::Fresh
            }
            Some(earlier) => match &earlier.state {
                ActionState::Succeeded(result) => {
                    self.summary.replayed += 1;
                    let value = result.replay(&params).ok_or_else(|| {
                        HandlerError::permanent(format!(
                            "the result of {method} at position {seq} was too large to keep, so it cannot be replayed"
                        ))
                    })?;
                    return decode::<P::Output>(&method, value).map(Some);
                }
                ActionState::Failed { .. } => Before::NotTaken,
                // An outbox that records outcomes in the send's own commit leaves nothing unknown.
                ActionState::Pending if self.run.api.records_outcomes() => Before::NotTaken,
                ActionState::Pending | ActionState::Uncertain
                    if delivery == Delivery::AtMostOnce
                        || earlier.delivery == Delivery::AtMostOnce =>
                {
                    warn!(seq, method = %method, "at-most-once action has an unknown outcome; not sent again");
                    let intent = self.intent(seq, &method, delivery);
                    self.unwritten.push(ActionOutcome {
                        seq,
                        state: ActionState::Uncertain,
                    });
                    self.summary.uncertain.push(intent);
                    return Ok(None);
                }
                ActionState::Pending | ActionState::Uncertain => {
                    warn!(seq, method = %method, "action has an unknown outcome; sending it again");
                    self.summary.resent_after_unknown_outcome += 1;
                    Before::Unknown
                }
            },
        };
        let chat = sends_a_message(&method)
            .then(|| params.get("chat_id").and_then(chat_id_of))
            .flatten();
        let intent = self.intent(seq, &method, delivery);
        let outcomes = std::mem::take(&mut self.unwritten);
        self.run
            .ledger
            .record_intent(self.run.lease, &intent, &outcomes)
            .await?;
        let mut retries = 0;
        loop {
            // Paced after the intent, right before the call: nothing slow comes between the slot
            // and the send. Giving up here leaves the action certainly not sent.
            if let Err(paced) = self.pace(chat).await {
                self.unwritten.push(ActionOutcome {
                    seq,
                    state: ActionState::failed(0, "held back by Telegram's pacing; not sent"),
                });
                return Err(paced);
            }
            match self.call(seq, &method, &params).await {
                Ok(value) => return Ok(Some(self.succeeded(seq, &method, value)?)),
                Err(CallError::Store(e)) => return Err(e.into()),
                Err(CallError::Telegram(TelegramError::MigrateToChat(chat)))
                    if retries == 0 && params.get("chat_id").is_some() =>
                {
                    // The group became a supergroup: the same action goes there, once.
                    warn!(method = %method, "chat migrated to a supergroup; following once");
                    params["chat_id"] = Value::from(chat);
                    retries += 1;
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
                    if e.is_definite() {
                        let (code, description) = e.code_and_description();
                        self.unwritten.push(ActionOutcome {
                            seq,
                            state: ActionState::failed(code, &description),
                        });
                    }
                    let TelegramError::RetryAfter(wait) = e else {
                        return Err(e.into());
                    };
                    self.run
                        .pacer
                        .pause(&self.run.lease.key.bot_id, Instant::now() + wait);
                    if retries >= INLINE_RETRIES || wait > self.inline_wait_allowed() {
                        return Err(e.into());
                    }
                    // A short flood wait is sat out here: the action was refused, so it is sent again.
                    self.unwritten.pop();
                    retries += 1;
                }
            }
        }
    }

    fn intent(&self, seq: u32, method: &str, delivery: Delivery) -> ActionIntent {
        ActionIntent {
            seq,
            method: method.to_owned(),
            delivery,
        }
    }

    async fn call(&self, seq: u32, method: &str, params: &Value) -> Result<Value, CallError> {
        let call = ApiCall {
            method,
            params,
            action: Some(ActionRef {
                lease: self.run.lease,
                seq,
            }),
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

    /// Waits for the pacer's slot; a wait longer than the run may spend gives the update back. A
    /// flood wait that began while this call waited for its slot (another run's 429) is waited out
    /// as well, with a new slot after it.
    async fn pace(&mut self, chat: Option<i64>) -> Result<(), HandlerError> {
        let bot = &self.run.lease.key.bot_id;
        loop {
            let wait = self.run.pacer.reserve(bot, chat, Instant::now());
            if wait > self.inline_wait_allowed() {
                return Err(HandlerError::Paced(wait));
            }
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
                self.summary.paced += wait;
            }
            if self.run.pacer.paused_for(bot, Instant::now()).is_zero() {
                return Ok(());
            }
        }
    }

    /// How long a send may still wait inside this run.
    fn inline_wait_allowed(&self) -> Duration {
        let left = self.run.cutoff.since(self.run.clock.now());
        left.min(defaults::MAX_INLINE_WAIT)
    }
}

fn decode<T: DeserializeOwned>(method: &str, result: Value) -> Result<T, HandlerError> {
    // Telegram accepted the call, so retrying cannot make its result readable.
    serde_json::from_value(result).map_err(|e| {
        HandlerError::permanent(format!("the result of {method} does not decode: {e}"))
    })
}
