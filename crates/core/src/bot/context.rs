//! The handler's view of one update run (docs/design/worker.md §2): typed Bot API calls and steps
//! (side effects outside Telegram) that are recorded so that a retry never repeats one that already
//! happened, Bot API calls paced to Telegram's limits, and the chat's state.
//!
//! Each call or step is an action at a position (`seq`) of the run. Its intent is written before
//! it, fenced by the run's lease. A call's outcome is kept compactly and written with the run's next
//! write (the next intent, or the settle), unless the Bot API records it itself in the same commit
//! as the send (the offline outbox); a step's outcome is written at once, because a step is what
//! must not be repeated and the handler may go on for a long while before its next write.
//!
//! The chat's state comes with the claim; a new state is kept here and written by the `DONE`
//! settle, in the same conditional write.
//!
//! This file is the handler's face; the worker's `recording` module (`usecases/worker/recording.rs`)
//! is the engine that records, recalls and paces each action.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use teloxide_core::payloads::RefundStarPayment;
use teloxide_core::requests::Payload;
use teloxide_core::types::{SuccessfulPayment, TelegramTransactionId, UserId};

/// What the worker logs, in the update's span, when it makes an at-least-once action again
/// because an earlier run's outcome is unknown; `tgq-drill` counts those updates by it.
pub const MADE_AGAIN_AFTER_UNKNOWN_OUTCOME: &str = "action has an unknown outcome; making it again";

use crate::broadcast::{Audience, BroadcastId, BroadcastSpec, BroadcastStore, StartError};
use crate::budget::SendBudget;
use crate::clock::Clock;
use crate::failure::HandlerError;
use crate::flow::{Flow, FLOW_TIMEOUT_KEY};
use crate::ids::{GroupKey, RecordKey, StateKey};
use crate::payment::{Charge, ChargeWrite, Credit, Refund};
use crate::ports::{Lease, UpdateLedger};
use crate::record::{ActionIntent, ActionOutcome, ActionRecord, Delivery, Timestamp};
use crate::state::{self, ChatState, StateWrite, StoredState};
use crate::telegram::{method_name, ApiCall, BotApi, CallError, TelegramError};
use crate::timer::{
    timer_id, ChatTime, Fired, FlowAt, Pending, TimerError, TimerMessage, When,
    MAX_TIMERS_PER_CHAT, MAX_TIMER_DELAY, MAX_TIMER_KEY_BYTES, MAX_TIMER_PAYLOAD_BYTES,
    RESERVED_KEY_PREFIX,
};
use crate::upload::Upload;

/// How many times one action is sent again inside a run after a short flood wait (a pre-checkout's
/// answer is bounded by Telegram's 10 s instead: `usecases/worker/recording.rs`).
pub(crate) const INLINE_RETRIES: u32 = 2;

/// What a step's recorded method starts with: `step:{name}`.
pub(crate) const STEP_PREFIX: &str = "step:";

/// The longest step name: it is stored with every step's record.
pub const MAX_STEP_NAME_BYTES: usize = 64;

/// What a run's context is made of; built by the worker for each claimed update.
pub(crate) struct RunParts<'a> {
    /// The run's hold on its update.
    pub lease: &'a Lease,
    /// The update's ordering group.
    pub group: &'a GroupKey,
    /// What earlier runs recorded, by sequence number.
    pub recorded: &'a BTreeMap<u32, ActionRecord>,
    /// The group's state as the claim read it.
    pub state: Option<&'a StoredState>,
    /// Where intents go.
    pub ledger: &'a dyn UpdateLedger,
    /// Where calls go.
    pub api: &'a dyn BotApi,
    /// Telegram's pacing: the bot's budget, shared by the process or by every process that
    /// sends for the bot.
    pub budget: &'a dyn SendBudget,
    /// Tells the time.
    pub clock: &'a dyn Clock,
    /// When the run must be over: waits for Telegram's pacing never reach past it.
    pub cutoff: Timestamp,
    /// The longest one wait for Telegram's pacing may be ([`WorkerSettings::max_inline_wait`]).
    ///
    /// [`WorkerSettings::max_inline_wait`]: crate::worker::WorkerSettings::max_inline_wait
    pub max_inline_wait: Duration,
    /// Whether the deployment has a timer scheduler; without one, [`Context::schedule`] is
    /// refused.
    pub timers: bool,
    /// Where [`Context::broadcast`] starts a job; `None` refuses it.
    pub broadcasts: Option<&'a dyn BroadcastStore>,
    /// Set once the run has answered its pre-checkout query (or replayed an earlier run's
    /// answer): read by the worker while the handler still runs.
    pub checkout_answered: &'a AtomicBool,
    /// When Telegram stops taking an answer to the update's pre-checkout query (10 s after tgq
    /// received it); `None` for any other update.
    pub checkout_ends: Option<Timestamp>,
    /// The charge of the payment the update carries, and its entry in the payments ledger if an
    /// earlier update recorded it.
    pub payment: Option<(&'a Charge, Option<&'a Charge>)>,
}

/// Lent to the handler for one run of one update.
pub struct Context<'a> {
    pub(crate) run: RunParts<'a>,
    pub(crate) next_seq: u32,
    /// Outcomes known but not yet written: they go with the next intent or the settle.
    pub(crate) unwritten: Vec<ActionOutcome>,
    /// The state the handler set in this run, for the settle: its format tag and JSON.
    pub(crate) new_state: Option<(&'static str, String)>,
    pub(crate) summary: ActionSummary,
    /// The callback query the webhook already answered in its reply (`TGQ_ACK_CALLBACKS`).
    pub(crate) acknowledged_callback: Option<String>,
    /// The chat's timers and flow, as this run leaves them.
    pub(crate) time: ChatTime,
    /// Whether this run changed `time`.
    pub(crate) time_changed: bool,
    /// Timers this run scheduled, by key: handed to the scheduler before the settle.
    pub(crate) scheduled: BTreeMap<String, TimerMessage>,
    /// The ledger's entries this run refunded, marked by the settle.
    pub(crate) refunds: Vec<ChargeWrite>,
}

/// What a run's context saw, reported by the worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActionSummary {
    /// Actions (calls and steps) answered from an earlier run's recorded result instead of being
    /// made again.
    pub replayed: u32,
    /// At-most-once actions whose outcome is unknown; not made again, marked uncertain on the record.
    pub uncertain: Vec<ActionIntent>,
    /// At-least-once actions an earlier run left with an unknown outcome, made again: each may have
    /// happened twice.
    pub resent_after_unknown_outcome: u32,
    /// Positions where the handler made another call than the earlier run did.
    pub diverged: Vec<u32>,
    /// How long the run's sends waited for Telegram's pacing.
    pub paced: Duration,
}

impl<'a> Context<'a> {
    /// A context for one run.
    pub(crate) fn new(run: RunParts<'a>) -> Self {
        let time = ChatTime::decode(run.state.and_then(|s| s.time.as_deref()));
        Self {
            run,
            next_seq: 0,
            unwritten: Vec::new(),
            new_state: None,
            summary: ActionSummary::default(),
            acknowledged_callback: None,
            time,
            time_changed: false,
            scheduled: BTreeMap::new(),
            refunds: Vec::new(),
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
        match self.act(payload, Delivery::AtLeastOnce, &[]).await? {
            Some(output) => Ok(output),
            None => Err(HandlerError::permanent(
                "an at-least-once action was reported uncertain",
            )),
        }
    }

    /// Downloads a file a user sent (a photo's, a document's `file_id`): `getFile`, then its
    /// bytes. Not an action: nothing is recorded, and a retry of the update downloads it again
    /// (Telegram's download link lasts an hour, longer than a recorded one could be trusted). A
    /// file over Telegram's download limit ([`crate::upload::MAX_DOWNLOAD_BYTES`], 20 MB) is
    /// refused before a byte is read, naming its size.
    pub async fn download(
        &self,
        file_id: &teloxide_core::types::FileId,
    ) -> Result<bytes::Bytes, HandlerError> {
        let params = serde_json::json!({ "file_id": file_id });
        let file = match self.run.api.call(&ApiCall::plain("getFile", &params)).await {
            Ok(file) => file,
            Err(CallError::Telegram(e)) => return Err(e.into()),
            Err(CallError::Store(e)) => return Err(e.into()),
        };
        let limit = crate::upload::MAX_DOWNLOAD_BYTES;
        if let Some(size) = file.get("file_size").and_then(Value::as_u64) {
            if size > limit {
                return Err(HandlerError::permanent(format!(
                    "file {file_id} is {size} bytes; Telegram lets a bot download files of up to 20 MB"
                )));
            }
        }
        let Some(path) = file.get("file_path").and_then(Value::as_str) else {
            return Err(HandlerError::permanent(format!(
                "Telegram gave no file_path for file {file_id}"
            )));
        };
        Ok(self.run.api.download(path, limit).await?)
    }

    /// Sends a Bot API request that uploads `files` (a `multipart/form-data` request), at least
    /// once, as [`Context::send`]: the payload names each file by its [`Upload::input_file`]
    /// (`SendPhoto::new(chat, photo.input_file())`, or each `media` of a media group). Once the
    /// answer is recorded, a retry of the update returns it and uploads nothing again.
    pub async fn send_with_files<P>(
        &mut self,
        payload: P,
        files: &[Upload],
    ) -> Result<P::Output, HandlerError>
    where
        P: Payload + Serialize,
        P::Output: DeserializeOwned,
    {
        match self.act(payload, Delivery::AtLeastOnce, files).await? {
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
        self.act(payload, Delivery::AtMostOnce, &[]).await
    }

    /// The chat's state (per user for updates without a chat: the update's group), as the last
    /// finished update of the group left it, or as this run set it; `None` when none was ever set.
    /// A value stored under another format tag than `T`'s is refused, naming both
    /// ([`state::StateError::WrongFormat`]).
    pub fn state<T: ChatState>(&self) -> Result<Option<T>, HandlerError> {
        let (format, json) = match (&self.new_state, self.run.state) {
            (Some((format, json)), _) => (*format, json.as_str()),
            (None, Some(stored)) if stored.has_value() => {
                (stored.format.as_str(), stored.json.as_str())
            }
            (None, _) => return Ok(None),
        };
        Ok(Some(state::decode(format, json)?))
    }

    /// Whether to credit `payment`, this update's `successful_payment`: [`Credit::New`] the first
    /// time tgq sees its charge, [`Credit::Already`] when an earlier update carrying the same
    /// charge finished (Telegram delivered the payment again, or an operator replayed it after its
    /// record expired). Payments in Stars only (`XTR`). Credit a new one through the chat's state
    /// ([`Context::set_state`]): the
    /// state and the charge's ledger entry are written in the one write that finishes the update,
    /// so the credit happens once per charge. Two charges for one invoice payload are two credits.
    /// Any other payment is refused: credit only the update's own.
    pub fn credit(&self, payment: &SuccessfulPayment) -> Result<Credit, HandlerError> {
        let Some((charge, credited)) = self.run.payment else {
            if payment.currency != crate::payment::STARS {
                return Err(HandlerError::permanent(format!(
                    "ctx.credit keeps the ledger of payments in Stars (XTR); this one is in {}",
                    payment.currency
                )));
            }
            return Err(HandlerError::permanent(
                "ctx.credit was given a payment, but the update carries no successful_payment",
            ));
        };
        if !charge.is_of(payment) {
            return Err(HandlerError::permanent(
                "ctx.credit takes the update's own successful_payment; it was given another charge",
            ));
        }
        Ok(match credited {
            Some(earlier) => Credit::Already(earlier.clone()),
            None => Credit::New,
        })
    }

    /// Gives `user` back the Stars of charge `charge` (`refundStarPayment`), at most once: a run
    /// that died after asking is not asked again ([`Refund::Uncertain`]), a charge the ledger or
    /// Telegram knows as refunded is not refunded again ([`Refund::Already`]). A refund made is
    /// marked on the charge's ledger entry by the write that finishes the update. Debit what the
    /// charge bought in the chat's state, written with it.
    pub async fn refund(&mut self, user: UserId, charge: &str) -> Result<Refund, HandlerError> {
        let bot = &self.run.lease.key.bot_id;
        let known = self.run.ledger.charge(bot, charge).await?;
        if known
            .as_ref()
            .is_some_and(|entry| entry.refunded_at.is_some())
        {
            return Ok(Refund::Already);
        }
        let call = RefundStarPayment::new(user, TelegramTransactionId(charge.to_owned()));
        let refund = match self.send_at_most_once(call).await {
            Ok(Some(_)) => Refund::Refunded,
            Ok(None) => return Ok(Refund::Uncertain),
            Err(HandlerError::Telegram(TelegramError::Api { description, .. }))
                if description.contains("CHARGE_ALREADY_REFUNDED") =>
            {
                Refund::Already
            }
            Err(error) => return Err(error),
        };
        let now = self.run.clock.now();
        if let Some(write) = known.and_then(|entry| ChargeWrite::refund(&entry, now)) {
            self.refunds.push(write);
        }
        Ok(refund)
    }

    /// The ledger's entries this run refunded, for the `DONE` settle.
    pub(crate) fn take_refunds(&mut self) -> Vec<ChargeWrite> {
        std::mem::take(&mut self.refunds)
    }

    /// The format tag of the chat's state (this run's, else the stored one): a handler that
    /// changed its state type reads an old value with the old type and converts it.
    pub fn state_format(&self) -> Option<&str> {
        match (&self.new_state, self.run.state) {
            (Some((format, _)), _) => Some(format),
            (None, Some(stored)) if stored.has_value() => Some(&stored.format),
            (None, _) => None,
        }
    }

    /// Sets the chat's new state. It is written only when the handler finishes, in the same
    /// conditional write that settles the update `DONE`: a run that fails changes nothing, and a
    /// finished update never runs again, so the change is applied exactly once. Over
    /// [`state::MAX_STATE_BYTES`] as JSON it is refused.
    pub fn set_state<T: ChatState>(&mut self, value: &T) -> Result<(), HandlerError> {
        self.new_state = Some((T::FORMAT, state::encode(value)?));
        Ok(())
    }

    /// The state to write with the `DONE` settle, if the handler set one or the run changed the
    /// chat's timers or flow: both parts are written together, the unchanged one as it was read.
    pub(crate) fn take_state_write(&mut self) -> Option<StateWrite> {
        let stored = self.run.state;
        let (format, json) = match (self.new_state.take(), stored) {
            (Some((format, json)), _) => (format.to_owned(), json),
            (None, _) if !self.time_changed => return None,
            (None, Some(stored)) => (stored.format.clone(), stored.json.clone()),
            (None, None) => (StoredState::NO_VALUE.to_owned(), "null".to_owned()),
        };
        let time = match self.time_changed {
            true => self.time.encode(),
            false => stored.and_then(|s| s.time.clone()),
        };
        Some(StateWrite {
            key: StateKey::new(self.run.lease.key.bot_id.clone(), self.run.group.clone()),
            format,
            json,
            read_version: stored.map_or(0, |s| s.version),
            time,
        })
    }

    /// Schedules a timer update for this chat, `when` (a [`Duration`] from now, or a
    /// [`std::time::SystemTime`]; a time in the past fires at once), that reaches the bot's
    /// [`crate::Handler::timer`] with `payload`, once, behind the chat's earlier updates.
    ///
    /// The timer is kept with the chat's state when the run finishes, like a state change: a run
    /// that fails schedules nothing. Scheduling a key that is pending replaces it, so the same key
    /// scheduled twice in a run, or again by a retry, is one timer. Refused, naming the limit: a key
    /// over [`MAX_TIMER_KEY_BYTES`] or starting with `tgq:`, more than [`MAX_TIMER_DELAY`] ahead,
    /// a payload over [`MAX_TIMER_PAYLOAD_BYTES`] as JSON, a chat with [`MAX_TIMERS_PER_CHAT`]
    /// pending, or an update without a chat.
    pub fn schedule<T: Serialize>(
        &mut self,
        key: &str,
        when: impl Into<When>,
        payload: &T,
    ) -> Result<(), HandlerError> {
        if key.is_empty() || key.len() > MAX_TIMER_KEY_BYTES || key.starts_with(RESERVED_KEY_PREFIX)
        {
            return Err(TimerError::BadKey {
                key: key.to_owned(),
            }
            .into());
        }
        let payload =
            serde_json::to_value(payload).map_err(|source| TimerError::Unserializable {
                key: key.to_owned(),
                source,
            })?;
        Ok(self.schedule_timer(key, when.into(), payload)?)
    }

    fn schedule_timer(&mut self, key: &str, when: When, payload: Value) -> Result<(), TimerError> {
        let owned = || key.to_owned();
        let Ok(chat_id) = self.run.group.as_str().parse::<i64>() else {
            return Err(TimerError::NoChat {
                group: self.run.group.as_str().to_owned(),
            });
        };
        if !self.run.timers {
            return Err(TimerError::Unavailable(
                "its worker was started without a timer scheduler",
            ));
        }
        let now = self.run.clock.now();
        let due = match when {
            When::In(delay) => {
                if delay > MAX_TIMER_DELAY {
                    return Err(TimerError::TooFar {
                        key: owned(),
                        ahead: delay,
                    });
                }
                now.plus(delay)
            }
            When::At(at) => {
                let ahead = at.since(now);
                if ahead > MAX_TIMER_DELAY {
                    return Err(TimerError::TooFar {
                        key: owned(),
                        ahead,
                    });
                }
                at
            }
        };
        let size = serde_json::to_string(&payload).map_or(0, |json| json.len());
        if size > MAX_TIMER_PAYLOAD_BYTES {
            return Err(TimerError::PayloadTooLarge { key: owned(), size });
        }
        if !self.time.timers.contains_key(key) && self.time.timers.len() >= MAX_TIMERS_PER_CHAT {
            return Err(TimerError::TooMany);
        }
        let key_ref = &self.run.lease.key;
        let id = timer_id(&key_ref.bot_id, self.run.group, key, key_ref.update_id);
        self.time.timers.insert(
            owned(),
            Pending {
                id: id.0,
                due: due.0,
            },
        );
        self.time_changed = true;
        self.scheduled.insert(
            owned(),
            TimerMessage {
                bot_id: key_ref.bot_id.clone(),
                group: self.run.group.clone(),
                update_id: id,
                chat_id,
                key: owned(),
                due,
                payload,
            },
        );
        Ok(())
    }

    /// Cancels the chat's pending timer `key`; whether one was pending. Like a schedule, the
    /// cancel takes effect when the run finishes: a timer that arrives after it does not run.
    pub fn cancel_timer(&mut self, key: &str) -> bool {
        self.scheduled.remove(key);
        let pending = self.time.timers.remove(key).is_some();
        self.time_changed |= pending;
        pending
    }

    /// When the chat's timer `key` is due, if it is pending.
    pub fn timer_due(&self, key: &str) -> Option<Timestamp> {
        self.time.timers.get(key).map(|p| Timestamp(p.due))
    }

    /// The timers to hand to the scheduler before the settle.
    pub(crate) fn take_scheduled(&mut self) -> Vec<TimerMessage> {
        std::mem::take(&mut self.scheduled).into_values().collect()
    }

    /// Takes a timer that arrived: `Some` when the chat's state still names it by its id (it is
    /// removed, in this run's settle), `None` when it was cancelled, replaced, or handed over by
    /// a run that never finished.
    pub(crate) fn fire(&mut self, message: &TimerMessage) -> Option<Fired> {
        let pending = self.time.timers.get(&message.key)?;
        if pending.id != message.update_id.0 {
            return None;
        }
        self.time.timers.remove(&message.key);
        self.time_changed = true;
        let flow = (message.key == FLOW_TIMEOUT_KEY)
            .then(|| message.payload.get("flow").and_then(Value::as_str))
            .flatten()
            .map(str::to_owned);
        Some(Fired {
            chat_id: message.chat_id,
            key: message.key.clone(),
            due: message.due,
            payload: message.payload.clone(),
            flow,
        })
    }

    /// The step the chat is at in flow `F`; `None` when the chat is in no flow or in another.
    pub fn flow<F: Flow>(&self) -> Result<Option<F>, HandlerError> {
        match &self.time.flow {
            Some(at) if at.name == F::NAME => serde_json::from_value(at.step.clone())
                .map(Some)
                .map_err(|e| {
                    HandlerError::permanent(format!(
                        "the chat's step in flow {:?} does not decode: {e}; change NAME whenever old steps would no longer read",
                        F::NAME
                    ))
                }),
            _ => Ok(None),
        }
    }

    /// The name of the flow the chat is in, if any.
    pub fn flow_name(&self) -> Option<&str> {
        self.time.flow.as_ref().map(|at| at.name.as_str())
    }

    /// Moves the chat to `step` of flow `F` and waits there for the chat's next update, at most
    /// `timeout`: if none moves the flow on by then, the bot gets a timer whose
    /// [`Fired::is_timeout_of`] names `F`. Each wait replaces the previous one's timeout. Written
    /// with the run's settle, like a state change: a retried update never moves a flow twice.
    pub fn wait<F: Flow>(&mut self, step: &F, timeout: Duration) -> Result<(), HandlerError> {
        let step = serde_json::to_value(step).map_err(|e| {
            HandlerError::permanent(format!("flow {:?}'s step does not serialize: {e}", F::NAME))
        })?;
        let moves = self.time.flow.as_ref().map_or(0, |at| at.moves) + 1;
        let payload = serde_json::json!({ "flow": F::NAME, "moves": moves });
        self.schedule_timer(FLOW_TIMEOUT_KEY, When::In(timeout), payload)?;
        self.time.flow = Some(FlowAt {
            name: F::NAME.to_owned(),
            step,
            moves,
        });
        self.time_changed = true;
        Ok(())
    }

    /// Ends the chat's flow and cancels its timeout; whether the chat was in one.
    pub fn end_flow(&mut self) -> bool {
        self.cancel_timer(FLOW_TIMEOUT_KEY);
        let was = self.time.flow.take().is_some();
        self.time_changed |= was;
        was
    }

    /// Runs a side effect outside Telegram at least once — a payment, a database write, an LLM
    /// call — and records its result (`Ok`, as JSON up to [`MAX_STEP_RESULT_BYTES`]) at once. On a
    /// retry of the update a recorded result is returned and `run` is not called again. If an
    /// earlier run died during the step (its outcome unknown), `run` is called again: make it
    /// idempotent, or use [`Context::step_at_most_once`]. An `Err` from `run` means the step did
    /// not take effect: it is returned, and a retry runs the step again.
    ///
    /// Steps are matched to earlier runs by position and name, like calls: keep their order.
    ///
    /// [`MAX_STEP_RESULT_BYTES`]: crate::record::MAX_STEP_RESULT_BYTES
    pub async fn step<T, F, Fut>(&mut self, name: &str, run: F) -> Result<T, HandlerError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, HandlerError>>,
    {
        match self.run_step(name, Delivery::AtLeastOnce, run).await? {
            Some(value) => Ok(value),
            None => Err(HandlerError::permanent(
                "an at-least-once step was reported uncertain",
            )),
        }
    }

    /// Runs a side effect at most once: as [`Context::step`], except that if an earlier run died
    /// during the step (its outcome unknown), `run` is not called again, `None` is returned, and
    /// the step is marked uncertain on the record for someone to reconcile.
    pub async fn step_at_most_once<T, F, Fut>(
        &mut self,
        name: &str,
        run: F,
    ) -> Result<Option<T>, HandlerError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, HandlerError>>,
    {
        self.run_step(name, Delivery::AtMostOnce, run).await
    }

    /// Starts a broadcast of `payload` (any send method's request, e.g. `SendMessage::new(ChatId(0),
    /// "news")`; its chat is replaced by each recipient's) to `audience`, and returns the job's
    /// id. It is a step named `broadcast:{key}`: started once, even when the run is retried, and
    /// a retry gets the same id back. The job runs apart from this update, paced like
    /// `tgq broadcast start`, leaving [`DEFAULT_RESERVE_PERCENT`](crate::broadcast::DEFAULT_RESERVE_PERCENT) of the bot's rate to its replies;
    /// `tgq broadcast status ID` follows it. The run writes the job and its audience (the
    /// chats, or the filter) and no more: the job's own runs write its recipients, so an audience
    /// of any size starts within the run's time. Refused, saying why, for a payload that sends
    /// no message, an empty list or one of more than [`MAX_LISTED`](crate::broadcast::MAX_LISTED)
    /// chats, and a deployment that keeps no broadcasts.
    pub async fn broadcast<P>(
        &mut self,
        key: &str,
        payload: P,
        audience: Audience,
    ) -> Result<BroadcastId, HandlerError>
    where
        P: Payload + Serialize,
    {
        let Some(store) = self.run.broadcasts else {
            return Err(HandlerError::permanent(
                "broadcasts are not available: this deployment keeps no broadcast jobs",
            ));
        };
        let mut params = serde_json::to_value(&payload).map_err(|e| {
            HandlerError::permanent(format!("the broadcast's payload does not serialize: {e}"))
        })?;
        if let Some(object) = params.as_object_mut() {
            object.remove("chat_id");
        }
        let key_ref = &self.run.lease.key;
        let spec = BroadcastSpec::standard(
            key_ref.bot_id.clone(),
            &method_name(P::NAME),
            params,
            &format!("update:{}:{}:{key}", key_ref.bot_id, key_ref.update_id),
        );
        let now = self.run.clock.now();
        let name = format!("broadcast:{key}");
        self.step(&name, || async move {
            match crate::broadcast::start_expanding(store, &spec, &audience, now).await {
                Ok(created) => Ok(created.job().id.clone()),
                Err(StartError::Spec(error)) => Err(HandlerError::permanent(error.to_string())),
                Err(StartError::Store(error)) => Err(HandlerError::Store(error)),
            }
        })
        .await
    }
}
