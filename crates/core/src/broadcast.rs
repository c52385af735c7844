//! Broadcasts (docs/ARCHITECTURE.md §13): one message to many chats, as a durable job that sends
//! to each recipient at most once and counts every one.
//!
//! A job is its payload, its recipients (fixed when it starts) and their states. The runner
//! ([`BroadcastRunner`]) takes the next recipients from the store, books each send in the bot's
//! budget (the one the worker paces through, so a broadcast and the bot's replies together keep
//! Telegram's limits) at the job's own lane rate, which leaves a reserve for interactive replies,
//! and records each send's intent before the call and its outcome after it. A recipient whose send
//! began and never ended (the process died in between) is recorded as uncertain, never sent again.

use std::collections::HashSet;
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};

pub mod chain;
mod outage;
mod refusal;
pub mod steps;

pub use refusal::outcome_of;

use crate::budget::{Clear, Reserved, SendBudget, Slot, RECHECK_AFTER};
use crate::clock::Clock;
use crate::error::{error_chain, PortError};
use crate::ids::BotId;
use crate::offline::sends_a_message;
use crate::policy::RetryPolicy;
use crate::record::Timestamp;
use crate::telegram::{ApiCall, BotApi, CallError, TelegramError};

/// The share of the bot's send rate a broadcast leaves to the bot's replies, unless told otherwise.
pub const DEFAULT_RESERVE_PERCENT: u8 = 20;
/// The rate of Telegram's paid lane (`allow_paid_broadcast`), unless told otherwise: Telegram's
/// ceiling.
pub const DEFAULT_PAID_RATE: u32 = 1000;
/// What Telegram charges for each message sent in the paid lane, in Stars.
pub const PAID_STARS_PER_MESSAGE: f64 = 0.1;
/// How many of the first recipients may refuse the message, before any took it, until the job is
/// paused: a payload Telegram refuses for everyone must not burn through the list.
pub const REFUSALS_BEFORE_PAUSE: u32 = 3;
/// How long a lane holds after a send met Telegram's outage (a request that never left, a 5xx);
/// each next failure in a row doubles it.
pub const OUTAGE_FIRST_WAIT: Duration = Duration::from_millis(200);
/// The longest a lane holds for an outage between two tries.
pub const OUTAGE_LONGEST_WAIT: Duration = Duration::from_secs(30);
/// How many times a recipient's send is tried when it fails for a passing reason (a 5xx, a
/// definite network refusal), before it goes to the job's dead letters.
pub const MAX_ATTEMPTS: u32 = 5;
/// The most sends of one job in flight at once, a quarter of its lane's rate within these bounds:
/// each send waits for two durable writes and Telegram's answer, tens of milliseconds in all, so a
/// lane of 1,000 a second needs a few hundred under way to keep its pace.
const IN_FLIGHT: (usize, usize) = (8, 256);
/// The sends under way for a Bot API nobody paces (the offline outbox): as many as the store's
/// commits share well.
const UNPACED_IN_FLIGHT: usize = 32;
/// How many recipients the runner takes from the store at a time: the sends in flight drain
/// between two takes.
const TAKE: usize = 1000;
/// How long a job that ended (done or cancelled) is kept, with its recipients, after it ended:
/// `status`, `list` and `retry` reach it until then. `tgq local`'s retention removes it then;
/// on a stack its items carry `expires_at` for DynamoDB's TTL.
pub const KEEP_ENDED: Duration = Duration::from_secs(30 * 24 * 3600);
/// The most chats a handler's broadcast may list: the list is written with its job, in one write
/// of at most 4 MB on DynamoDB.
pub const MAX_LISTED: usize = 400_000;
/// How many recipients of an audience a run in `tgq local` writes at a time
/// ([`BroadcastStore::expand`]); a step on a stack writes a chunk's worth.
const EXPAND_CHUNK: u64 = CHUNK;
/// How often an idle runner looks for work and an active one for a pause or a cancel.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// The longest a send books ahead in the bot's budget: a longer wait is asked for again.
const BOOK_WITHIN: Duration = Duration::from_secs(2);
/// Slack on the lane's one-second window, for sends that leave on time and arrive unevenly.
const LANE_SLACK: Duration = Duration::from_millis(20);
/// How far behind its schedule the lane catches up.
const CATCH_UP: Duration = Duration::from_millis(20);

/// A share of a job's recipients, by index: what one run on a stack works through (a chunk of
/// [`CHUNK`]), or every recipient ([`EVERY`]) for the process that runs the whole job.
pub type Span = Range<u64>;
/// Every recipient of a job.
pub const EVERY: Span = 0..u64::MAX;
/// How many recipients a chunk on a stack holds: what one run reads and works through before the
/// next chunk (docs/ARCHITECTURE.md §13).
pub const CHUNK: u64 = 1000;

/// A broadcast's id: the store's sequence number.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BroadcastId(pub u64);

impl fmt::Display for BroadcastId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Which of Telegram's limits a broadcast is sent under.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    /// The bot's own budget, less the reserve for its replies.
    #[default]
    Standard,
    /// Telegram's paid broadcasts (`allow_paid_broadcast`): up to 1,000 messages a second apart
    /// from the bot's budget, at [`PAID_STARS_PER_MESSAGE`] Stars each, from the bot's balance.
    Paid,
}

/// What a broadcast sends and how fast.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BroadcastSpec {
    /// The bot that sends it.
    pub bot: BotId,
    /// The Bot API method, e.g. `sendMessage`: one that sends a message.
    pub method: String,
    /// The method's parameters, without `chat_id` (each recipient's is added).
    pub params: Value,
    /// Which limits it is sent under.
    pub lane: Lane,
    /// The share of the bot's rate left to its replies, in percent (standard lane).
    pub reserve_percent: u8,
    /// The paid lane's rate, messages a second.
    pub paid_rate: u32,
    /// Who started it: `cli`, or the update and key of the handler that did (which also makes a
    /// retried run's start find the job it started before).
    pub origin: String,
}

/// Why a spec or an audience cannot be broadcast; each names what was wrong.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The method sends no message.
    #[error("{0} sends no message: a broadcast sends one with sendMessage, sendPhoto, copyMessage or another send method")]
    NotASend(String),
    /// The parameters are not a JSON object.
    #[error("the message's parameters must be a JSON object")]
    NotAnObject,
    /// The parameters name a chat.
    #[error("the message's parameters name a chat_id: a broadcast adds each recipient's")]
    NamesAChat,
    /// The reserve is not a share.
    #[error("the reserve for replies is {0} %: it must be between 0 and 90")]
    Reserve(u8),
    /// The paid rate is out of Telegram's range.
    #[error("the paid lane's rate is {0} messages a second: it must be between 1 and 1000")]
    PaidRate(u32),
    /// Nobody to send to.
    #[error("the audience is empty: there is nobody to send to")]
    EmptyAudience,
    /// A handler's list of chats is longer than one write of its job holds.
    #[error("the list holds {0} chats; a handler's broadcast lists at most {MAX_LISTED} (a state audience, or `tgq broadcast start --recipients FILE`, takes any number)")]
    TooManyListed(usize),
    /// A line of a recipients file is not a chat id.
    #[error("line {line} of the recipients is not a chat id: {text:?}")]
    BadLine {
        /// The line's number, from 1.
        line: usize,
        /// The line as it was (cut to 40 characters).
        text: String,
    },
}

impl BroadcastSpec {
    /// `method` with `params` from `bot` in the standard lane, leaving the bot's replies the
    /// default reserve; `origin` says who started it.
    pub fn standard(bot: BotId, method: &str, params: Value, origin: &str) -> Self {
        Self {
            bot,
            method: method.to_owned(),
            params,
            lane: Lane::Standard,
            reserve_percent: DEFAULT_RESERVE_PERCENT,
            paid_rate: DEFAULT_PAID_RATE,
            origin: origin.to_owned(),
        }
    }

    /// Checks what can be checked before anything is sent.
    pub fn check(&self) -> Result<(), SpecError> {
        if !sends_a_message(&self.method) || self.method.starts_with("editMessage") {
            return Err(SpecError::NotASend(self.method.clone()));
        }
        let Some(params) = self.params.as_object() else {
            return Err(SpecError::NotAnObject);
        };
        if params.contains_key("chat_id") {
            return Err(SpecError::NamesAChat);
        }
        if self.reserve_percent > 90 {
            return Err(SpecError::Reserve(self.reserve_percent));
        }
        if !(1..=1000).contains(&self.paid_rate) {
            return Err(SpecError::PaidRate(self.paid_rate));
        }
        Ok(())
    }

    /// The job's own rate, messages a second, for a bot allowed `bot_rate` (`None`: no limit).
    pub fn lane_rate(&self, bot_rate: Option<u32>) -> Option<u32> {
        match self.lane {
            Lane::Paid => Some(self.paid_rate),
            Lane::Standard => bot_rate.map(|rate| {
                let share = u64::from(rate) * u64::from(100 - self.reserve_percent.min(90)) / 100;
                u32::try_from(share).unwrap_or(u32::MAX).max(1)
            }),
        }
    }

    /// The parameters of the call to one recipient.
    fn params_for(&self, chat: i64) -> Value {
        let mut params = self.params.clone();
        params["chat_id"] = chat.into();
        if self.lane == Lane::Paid {
            params["allow_paid_broadcast"] = true.into();
        }
        params
    }
}

/// Reads a recipients file: one chat id a line; blank lines and lines starting with `#` are
/// skipped, and a chat listed twice is sent to once. Refused, naming the first bad line, before
/// anything is stored; an empty list is refused too.
pub fn parse_recipients(text: &str) -> Result<Vec<i64>, SpecError> {
    let mut seen = HashSet::new();
    let mut chats = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let chat = trimmed
            .parse::<i64>()
            .ok()
            .filter(|chat| *chat != 0)
            .ok_or_else(|| SpecError::BadLine {
                line: index + 1,
                text: trimmed.chars().take(40).collect(),
            })?;
        if seen.insert(chat) {
            chats.push(chat);
        }
    }
    if chats.is_empty() {
        return Err(SpecError::EmptyAudience);
    }
    Ok(chats)
}

/// Which chats' states an audience takes: those of one format, and optionally with one value at a
/// JSON pointer (`/subscribed` = `true`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StateFilter {
    /// The state's format tag (`ChatState::FORMAT`); any when `None`.
    pub format: Option<String>,
    /// A JSON pointer into the state and the value it must hold.
    pub equals: Option<(String, Value)>,
}

impl StateFilter {
    /// Whether a chat's state, of `format` and holding `json`, is in the audience.
    pub fn matches(&self, format: &str, json: &Value) -> bool {
        if self.format.as_deref().is_some_and(|f| f != format) {
            return false;
        }
        match &self.equals {
            Some((pointer, value)) => json.pointer(pointer) == Some(value),
            None => true,
        }
    }
}

/// Where a job is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum JobState {
    /// Sending, or waiting for its next recipient.
    Running,
    /// Held by an operator, or by tgq with the reason (a payload Telegram refuses).
    Paused {
        /// Why tgq paused it; `None` when an operator did.
        reason: Option<String>,
    },
    /// Stopped for good; the recipients not yet sent to are skipped.
    Cancelled,
    /// Every recipient has an outcome.
    Done,
}

impl JobState {
    /// The word `tgq broadcast` shows.
    pub fn as_str(&self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Paused { .. } => "paused",
            JobState::Cancelled => "cancelled",
            JobState::Done => "done",
        }
    }

    /// Whether nothing more happens to the job.
    pub fn is_final(&self) -> bool {
        matches!(self, JobState::Cancelled | JobState::Done)
    }
}

/// What an operator (or the runner) asks of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Hold it.
    Pause,
    /// Let a paused job go on.
    Resume,
    /// Stop it for good.
    Cancel,
    /// Hold it with a reason (the runner, on a refused payload).
    PauseBecause(String),
    /// Every recipient has an outcome (the runner).
    Finish,
}

/// The answer to a [`Change`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Changed {
    /// Done; the job as it is now.
    Changed {
        /// The job.
        job: BroadcastJob,
    },
    /// The job is in a state the change does not apply to (resuming a running job, pausing a
    /// finished one); nothing changed.
    Refused {
        /// The job as it is.
        job: BroadcastJob,
    },
    /// No such job.
    NotFound,
}

/// How many recipients are where.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Recipients in all.
    pub total: u64,
    /// Sent, with a message id.
    pub sent: u64,
    /// Blocked the bot, deleted their account, or left the chat: not retried.
    pub gone: u64,
    /// Failed for good (the job's dead letters).
    pub failed: u64,
    /// Their send began and never ended (a crash): not sent again, maybe delivered.
    pub uncertain: u64,
    /// Waiting for another try after a passing failure.
    pub retrying: u64,
}

impl Counts {
    /// Recipients with no outcome yet (retrying ones included).
    pub fn pending(&self) -> u64 {
        self.total
            .saturating_sub(self.sent + self.gone + self.failed + self.uncertain)
    }
}

/// A broadcast job as the store keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BroadcastJob {
    /// Its id.
    pub id: BroadcastId,
    /// What it sends.
    pub spec: BroadcastSpec,
    /// Where it is.
    pub state: JobState,
    /// Its recipients' outcomes.
    pub counts: Counts,
    /// When it was created.
    pub created_at: Timestamp,
    /// When its first and its latest message were sent.
    pub first_sent_at: Option<Timestamp>,
    /// The latest.
    pub last_sent_at: Option<Timestamp>,
    /// When it ended (done or cancelled).
    pub ended_at: Option<Timestamp>,
    /// Refusals of the message before any recipient took it (toward [`REFUSALS_BEFORE_PAUSE`]).
    pub refusals: u32,
    /// The last error a recipient's send met (never message text).
    pub last_error: Option<String>,
    /// Whether its audience is still being written as recipients, by its own runs
    /// ([`BroadcastStore::expand`]): `counts.total` is what is written so far, and nothing is
    /// sent until all are.
    #[serde(default)]
    pub expanding: bool,
}

impl BroadcastJob {
    /// A new running job of `total` recipients.
    pub fn new(id: BroadcastId, spec: BroadcastSpec, total: u64, now: Timestamp) -> Self {
        Self {
            id,
            spec,
            state: JobState::Running,
            counts: Counts {
                total,
                ..Counts::default()
            },
            created_at: now,
            first_sent_at: None,
            last_sent_at: None,
            ended_at: None,
            refusals: 0,
            last_error: None,
            expanding: false,
        }
    }

    /// Applies `change`, as every store does: `false` when it does not apply.
    pub fn apply(&mut self, change: &Change, now: Timestamp) -> bool {
        let next = match (&self.state, change) {
            (JobState::Running, Change::Pause) => JobState::Paused { reason: None },
            (JobState::Running, Change::PauseBecause(reason)) => JobState::Paused {
                reason: Some(reason.clone()),
            },
            (JobState::Paused { .. }, Change::Resume) => {
                self.refusals = 0;
                JobState::Running
            }
            (JobState::Running | JobState::Paused { .. }, Change::Cancel) => JobState::Cancelled,
            (JobState::Running, Change::Finish) => JobState::Done,
            _ => return false,
        };
        if next.is_final() {
            self.ended_at = Some(now);
        }
        self.state = next;
        true
    }

    /// Whether [`BroadcastStore::retry`] may put its recipients back: it is done or paused.
    pub fn takes_retry(&self) -> bool {
        matches!(self.state, JobState::Done | JobState::Paused { .. })
    }

    /// Counts that a recipient in state `was` is on the list again ([`BroadcastStore::retry`]);
    /// a job that was done runs again.
    pub fn retried(&mut self, was: &RecipientState) {
        let c = &mut self.counts;
        match was {
            RecipientState::Failed { .. } => c.failed = c.failed.saturating_sub(1),
            RecipientState::Uncertain => c.uncertain = c.uncertain.saturating_sub(1),
            _ => return,
        }
        c.retrying += 1;
        if self.state == JobState::Done {
            self.state = JobState::Running;
            self.ended_at = None;
        }
    }

    /// Counts that a recipient in state `was` began its send.
    pub fn began(&mut self, was: &RecipientState) {
        if matches!(was, RecipientState::Retrying { .. }) {
            self.counts.retrying = self.counts.retrying.saturating_sub(1);
        }
    }

    /// Counts a begun send's outcome.
    pub fn count(&mut self, outcome: &Outcome, at: Timestamp) {
        let c = &mut self.counts;
        match outcome {
            Outcome::Sent { .. } => {
                c.sent += 1;
                self.first_sent_at.get_or_insert(at);
                self.last_sent_at = Some(at);
                self.refusals = 0;
            }
            Outcome::Gone { .. } => c.gone += 1,
            Outcome::Failed { error } => {
                c.failed += 1;
                self.last_error = Some(error.clone());
            }
            Outcome::Uncertain => c.uncertain += 1,
            Outcome::Retry { error, .. } => {
                c.retrying += 1;
                self.last_error = Some(error.clone());
            }
            Outcome::Refused { error } => {
                c.retrying += 1;
                self.refusals += 1;
                self.last_error = Some(error.clone());
            }
            Outcome::Held { .. } => c.retrying += 1,
            Outcome::Unsent { error, .. } | Outcome::Halted { error } => {
                c.retrying += 1;
                self.last_error = Some(error.clone());
            }
        }
    }

    /// The job's rate so far, messages a second from its first send to its latest.
    pub fn rate(&self) -> Option<f64> {
        let (first, last) = (self.first_sent_at?, self.last_sent_at?);
        let secs = last.since(first).as_secs_f64();
        (self.counts.sent > 1 && secs > 0.0).then(|| (self.counts.sent - 1) as f64 / secs)
    }
}

/// One recipient of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recipient {
    /// Its place in the job's list.
    pub index: u64,
    /// The chat.
    pub chat: i64,
    /// Sends tried that failed for a passing reason.
    pub attempts: u32,
    /// Where it is.
    pub state: RecipientState,
}

/// Where a recipient is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RecipientState {
    /// Not tried yet.
    Pending,
    /// Tried; tried again from `due`.
    Retrying {
        /// When (ms).
        due: u64,
    },
    /// Its send began: the intent, written before the call.
    Sending,
    /// Sent.
    Sent {
        /// The message's id.
        message_id: i64,
        /// The supergroup a group became, which the message went to instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        migrated_to: Option<i64>,
    },
    /// Gone (blocked the bot, deleted the account, left).
    Gone {
        /// Telegram's words.
        reason: String,
    },
    /// Failed for good.
    Failed {
        /// Why.
        error: String,
    },
    /// Its send began and never ended.
    Uncertain,
}

impl RecipientState {
    /// Whether the recipient has its outcome: sent, gone, failed or uncertain, never to be sent
    /// to again unless a `retry` puts it back.
    pub fn is_settled(&self) -> bool {
        matches!(
            self,
            RecipientState::Sent { .. }
                | RecipientState::Gone { .. }
                | RecipientState::Failed { .. }
                | RecipientState::Uncertain
        )
    }

    /// Whether the message certainly did not reach the recipient, or may not have: failed for
    /// good, or uncertain. `tgq broadcast status --json` lists them.
    pub fn is_undelivered(&self) -> bool {
        matches!(
            self,
            RecipientState::Failed { .. } | RecipientState::Uncertain
        )
    }
}

/// How a recipient's send ended, as the runner settles it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Telegram took it.
    Sent {
        /// The message's id.
        message_id: i64,
        /// The supergroup a group became, followed once.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        migrated_to: Option<i64>,
    },
    /// The recipient is gone.
    Gone {
        /// Telegram's words.
        reason: String,
    },
    /// Failed for good: the job's dead letters.
    Failed {
        /// Why.
        error: String,
    },
    /// Its outcome is unknown (a timeout, a cut connection): not sent again.
    Uncertain,
    /// Failed for a passing reason: tried again at `due`, one more attempt spent.
    Retry {
        /// When (ms).
        due: u64,
        /// Why.
        error: String,
    },
    /// Telegram refused the message itself before anyone took it: back to the list, no attempt
    /// spent, counted toward pausing the job.
    Refused {
        /// Why.
        error: String,
    },
    /// Held by a flood wait: back to the list at `due`, no attempt spent.
    Held {
        /// When (ms).
        due: u64,
    },
    /// Telegram did not take the call for a passing reason of its own — the request never left,
    /// or a 5xx: not sent, back to the list at `due`, no attempt spent; the lane backs off until
    /// Telegram answers again.
    Unsent {
        /// When (ms).
        due: u64,
        /// Why.
        error: String,
    },
    /// Telegram refused the message itself or the bot (a 401, a payload or file it cannot take):
    /// back to the list, no attempt spent, and the job pauses with the reason.
    Halted {
        /// Why.
        error: String,
    },
}

impl Outcome {
    /// The recipient's state after it.
    pub fn state(&self, now: Timestamp) -> RecipientState {
        match self {
            Outcome::Sent {
                message_id,
                migrated_to,
            } => RecipientState::Sent {
                message_id: *message_id,
                migrated_to: *migrated_to,
            },
            Outcome::Gone { reason } => RecipientState::Gone {
                reason: reason.clone(),
            },
            Outcome::Failed { error } => RecipientState::Failed {
                error: error.clone(),
            },
            Outcome::Uncertain => RecipientState::Uncertain,
            Outcome::Retry { due, .. } | Outcome::Held { due } | Outcome::Unsent { due, .. } => {
                RecipientState::Retrying { due: *due }
            }
            Outcome::Refused { .. } | Outcome::Halted { .. } => {
                RecipientState::Retrying { due: now.0 }
            }
        }
    }

    /// Whether it spends one of the recipient's attempts.
    pub fn spends_attempt(&self) -> bool {
        matches!(self, Outcome::Retry { .. })
    }
}

/// What [`BroadcastStore::retry`] did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Retried {
    /// These many recipients are on the list again; the job as it is now.
    Retried {
        /// How many.
        recipients: u64,
        /// The job.
        job: BroadcastJob,
    },
    /// Nobody to send to again: the job as it is.
    Nothing {
        /// The job.
        job: BroadcastJob,
    },
    /// The job is running (its failures are still being decided) or cancelled: nothing changed.
    Refused {
        /// The job.
        job: BroadcastJob,
    },
    /// No such job.
    NotFound,
}

impl RecipientState {
    /// Whether [`BroadcastStore::retry`] puts a recipient in this state back on the list.
    pub fn is_retried(&self, uncertain: bool) -> bool {
        match self {
            RecipientState::Failed { .. } => true,
            RecipientState::Uncertain => uncertain,
            _ => false,
        }
    }
}

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
    async fn drop_unsent(&self, id: &BroadcastId, span: &Span) -> Result<u64, PortError> {
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
        span: &Span,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Recipient>, PortError>;

    /// When the earliest recipient of `span` waiting for another try is due; `None` when none
    /// waits.
    async fn next_retry(
        &self,
        id: &BroadcastId,
        span: &Span,
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
        span: &Span,
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

/// Who a broadcast goes to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Audience {
    /// These chats (from a recipients file, or the handler).
    Chats {
        /// The chat ids.
        chats: Vec<i64>,
    },
    /// The bot's chats whose state the filter takes, as they are when the job starts.
    States {
        /// Which states.
        filter: StateFilter,
    },
}

/// Why a broadcast did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// What was asked for cannot be sent; nothing was stored.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The store did not answer.
    #[error(transparent)]
    Store(#[from] PortError),
}

/// Starts a broadcast: checks the spec, fixes its audience (without repeats) and stores the job,
/// which the process running broadcasts picks up. A job of the same origin is found, not made
/// again.
pub async fn start(
    store: &dyn BroadcastStore,
    spec: &BroadcastSpec,
    audience: &Audience,
    now: Timestamp,
) -> Result<Created, StartError> {
    spec.check()?;
    let chats = match audience {
        Audience::Chats { chats } => distinct(chats)?,
        Audience::States { filter } => store.chats_matching(&spec.bot, filter).await?,
    };
    if chats.is_empty() {
        return Err(SpecError::EmptyAudience.into());
    }
    Ok(store.create(spec, &chats, now).await?)
}

/// Starts a broadcast from a handler's run ([`BroadcastStore::create_expanding`]): checks the spec
/// and a list of chats (no chat 0, at most [`MAX_LISTED`], repeats dropped), and stores the job
/// with its audience, whose recipients its runs write. A state audience that takes nobody makes a
/// job of no recipients, which ends done.
pub async fn start_expanding(
    store: &dyn BroadcastStore,
    spec: &BroadcastSpec,
    audience: &Audience,
    now: Timestamp,
) -> Result<Created, StartError> {
    spec.check()?;
    let audience = match audience {
        Audience::Chats { chats } => {
            let chats = distinct(chats)?;
            if chats.is_empty() {
                return Err(SpecError::EmptyAudience.into());
            }
            if chats.len() > MAX_LISTED {
                return Err(SpecError::TooManyListed(chats.len()).into());
            }
            Audience::Chats { chats }
        }
        states @ Audience::States { .. } => states.clone(),
    };
    Ok(store.create_expanding(spec, &audience, now).await?)
}

/// `chats` without repeats, in their order; refused when one is 0.
fn distinct(chats: &[i64]) -> Result<Vec<i64>, SpecError> {
    let mut seen = HashSet::new();
    let chats: Vec<i64> = chats.iter().copied().filter(|c| seen.insert(*c)).collect();
    if let Some(index) = chats.iter().position(|c| *c == 0) {
        return Err(SpecError::BadLine {
            line: index + 1,
            text: "0".into(),
        });
    }
    Ok(chats)
}

/// Runs broadcast jobs: one [`BroadcastRunner::run`] per running job, in the process that holds
/// the store.
pub struct BroadcastRunner {
    /// The jobs.
    pub store: Arc<dyn BroadcastStore>,
    /// The bot's budget, shared with the worker's runs.
    pub budget: Arc<dyn SendBudget>,
    /// The bot-wide rate the budget holds (`None`: no limit).
    pub bot_rate: Option<u32>,
    /// Tells the time.
    pub clock: Arc<dyn Clock>,
    /// The backoff between a recipient's tries (its attempts are [`MAX_ATTEMPTS`]).
    pub retry: RetryPolicy,
}

/// How a run of a job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// Every recipient has an outcome.
    Done,
    /// The job was paused (by an operator, or because Telegram refused its message) or cancelled.
    Stopped(JobState),
    /// The process is stopping (or, on a stack, the invocation's time is up).
    ShutDown,
    /// A span's run that does not wait ([`Waits::No`]): nothing of the span can be sent before
    /// this time, when a recipient's next try is due.
    Later(Timestamp),
    /// A span's run that does not wait: every recipient of the span has an outcome, and some of
    /// the job's others have not.
    SpanDone,
}

/// Whether a run waits for its recipients' next tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waits {
    /// The process that runs the whole job waits for them.
    Yes,
    /// A run on a stack hands the wait to its queue ([`RunEnd::Later`]) and ends.
    No,
}

/// The running job of `job`'s bot that sends before it, if any: a bot's broadcasts go one at a
/// time, the oldest running one first, so two of them neither take the reserve the bot's replies
/// keep nor pass the paid lane's rate together (docs/ARCHITECTURE.md §13). `None` when `job` is
/// the one to send.
pub fn ahead_of(jobs: &[BroadcastJob], job: &BroadcastJob) -> Option<BroadcastId> {
    jobs.iter()
        .filter(|j| j.state == JobState::Running && j.spec.bot == job.spec.bot && j.id < job.id)
        .map(|j| j.id.clone())
        .min()
}

/// The jobs a process that runs them itself (`tgq local`) starts now: each bot's oldest running
/// job ([`ahead_of`]), unless a job of that bot runs there already (`bots_running`).
pub fn startable<'j>(jobs: &'j [BroadcastJob], bots_running: &[BotId]) -> Vec<&'j BroadcastJob> {
    jobs.iter()
        .filter(|job| job.state == JobState::Running && ahead_of(jobs, job).is_none())
        .filter(|job| !bots_running.contains(&job.spec.bot))
        .collect()
}

/// Of the jobs a process runs (`running`), those an older running job of their bot now goes
/// before: one resumed while they sent. Each stops, as at a shutdown, and runs again after it.
pub fn overtaken(jobs: &[BroadcastJob], running: impl Iterator<Item = u64>) -> Vec<u64> {
    running
        .filter(|id| {
            jobs.iter()
                .find(|job| job.id.0 == *id)
                .is_some_and(|job| ahead_of(jobs, job).is_some())
        })
        .collect()
}

impl BroadcastRunner {
    /// Sends job `id` with `api` until it is done, paused or cancelled, or `stop` turns true.
    /// Recipients whose send an earlier process began and never ended are marked uncertain first.
    pub async fn run(
        &self,
        id: &BroadcastId,
        api: Arc<dyn BotApi>,
        stop: watch::Receiver<bool>,
    ) -> Result<RunEnd, PortError> {
        // The audience a handler named is written before anything is sent.
        while !self.store.expand(id, EXPAND_CHUNK).await? {
            if *stop.borrow() {
                return Ok(RunEnd::ShutDown);
            }
        }
        self.run_span(id, &EVERY, Waits::Yes, api, stop).await
    }

    /// [`BroadcastRunner::run`] over the recipients of `span` alone; with [`Waits::No`] it ends
    /// when nothing of the span can be sent now, rather than wait.
    pub async fn run_span(
        &self,
        id: &BroadcastId,
        span: &Span,
        waits: Waits,
        api: Arc<dyn BotApi>,
        mut stop: watch::Receiver<bool>,
    ) -> Result<RunEnd, PortError> {
        let abandoned = self.store.abandon_begun(id, span, self.clock.now()).await?;
        if abandoned > 0 {
            warn!(broadcast = %id, recipients = abandoned, "sends an earlier process began and never ended are uncertain: not sent again");
        }
        let Some(job) = self.store.job(id).await? else {
            return Ok(RunEnd::Stopped(JobState::Cancelled));
        };
        let mut sends: JoinSet<()> = JoinSet::new();
        let ended = self
            .sending(&job, (span, waits), api, &mut stop, &mut sends)
            .await;
        // Whatever ended the run, a send under way lands and is recorded: dropping its task
        // could leave a message Telegram took counted uncertain.
        drain(&mut sends).await;
        ended
    }

    /// The body of [`BroadcastRunner::run_span`], with its sends in `sends`.
    async fn sending(
        &self,
        job: &BroadcastJob,
        (span, waits): (&Span, Waits),
        api: Arc<dyn BotApi>,
        stop: &mut watch::Receiver<bool>,
        sends: &mut JoinSet<()>,
    ) -> Result<RunEnd, PortError> {
        let id = &job.id;
        let paced = api.paced();
        let rate = job.spec.lane_rate(self.bot_rate).filter(|_| paced);
        let in_flight = rate.map_or(UNPACED_IN_FLIGHT, |r| {
            (r as usize / 4).clamp(IN_FLIGHT.0, IN_FLIGHT.1)
        });
        let mut lane = Lane::pacer(rate);
        let gate = Arc::new(LaneGate::new(rate));
        let left = Arc::new(LeftBehind::default());
        // Whether the span may hold recipients to send now that the last batch did not: the
        // first time, and after a batch that left some, ended early or took all it could.
        let mut look = true;
        loop {
            let Some(mut job) = self.running(id).await? else {
                drain(sends).await;
                return self.stopped(id).await;
            };
            if *stop.borrow() {
                return Ok(RunEnd::ShutDown);
            }
            let batch = match look {
                true => self.store.next(id, span, self.clock.now(), TAKE).await?,
                false => Vec::new(),
            };
            look = true;
            if batch.is_empty() {
                drain(sends).await;
                let Some(job) = self.running(id).await? else {
                    return self.stopped(id).await;
                };
                if job.counts.pending() == 0 {
                    let Changed::Changed { job } = self
                        .store
                        .change(id, Change::Finish, self.clock.now())
                        .await?
                    else {
                        // Paused or cancelled in the meantime.
                        return self.stopped(id).await;
                    };
                    let c = job.counts;
                    info!(broadcast = %id, sent = c.sent, gone = c.gone, failed = c.failed, uncertain = c.uncertain, "broadcast done");
                    return Ok(RunEnd::Done);
                }
                let wait = match self.store.next_retry(id, span).await? {
                    Some(due) if waits == Waits::No => return Ok(RunEnd::Later(due)),
                    Some(due) => due
                        .since(self.clock.now())
                        .clamp(Duration::from_millis(1), LOOK_EVERY),
                    None => {
                        // Nothing waits and nothing of this run is in flight, yet some have no
                        // outcome: their sends began and could not be recorded (a settle that
                        // gave up). They are uncertain. Only a send of this run can have left
                        // one: the run began by marking those of earlier runs.
                        let stuck = match left.doubt.swap(false, Ordering::SeqCst) {
                            true => self.store.abandon_begun(id, span, self.clock.now()).await?,
                            false => 0,
                        };
                        if stuck > 0 {
                            warn!(broadcast = %id, recipients = stuck, "sends whose outcome could not be recorded are uncertain: not sent again");
                            continue;
                        }
                        // Every recipient of the span has its outcome; the others are
                        // another run's.
                        if waits == Waits::No {
                            return Ok(RunEnd::SpanDone);
                        }
                        LOOK_EVERY
                    }
                };
                if wait_or_stop(wait, stop).await {
                    return Ok(RunEnd::ShutDown);
                }
                continue;
            }
            // Until a recipient took the message, sends go one at a time: a message Telegram
            // refuses for everyone pauses the job after a few refusals, not a batch of them.
            let mut probing = job.counts.sent == 0;
            let mut looked = self.clock.now();
            let taken = batch.len();
            let mut begun_all = true;
            for recipient in batch {
                let failure = left.failed.lock().take();
                if let Some(error) = failure {
                    drain(sends).await;
                    return Err(error);
                }
                // What was taken and not begun stays where it was for the next run.
                if *stop.borrow() {
                    break;
                }
                if probing || self.clock.now().since(looked) >= LOOK_EVERY {
                    looked = self.clock.now();
                    drain_if(probing, sends).await;
                    match self.running(id).await? {
                        Some(now) => {
                            probing = now.counts.sent == 0;
                            job = now;
                        }
                        // What was taken and not begun stays where it was.
                        None => {
                            begun_all = false;
                            break;
                        }
                    }
                }
                let halted = left.halted.lock().take();
                if let Some(reason) = halted {
                    drain(sends).await;
                    return self.halt(id, reason).await;
                }
                // Telegram is down: the lane holds, longer while it stays so.
                let held = left.outage.wait(tokio::time::Instant::now());
                if !held.is_zero() && wait_or_stop(held, stop).await {
                    drain(sends).await;
                    return Ok(RunEnd::ShutDown);
                }
                let wait = lane.take(tokio::time::Instant::now());
                if !wait.is_zero() && wait_or_stop(wait, stop).await {
                    drain(sends).await;
                    return Ok(RunEnd::ShutDown);
                }
                while sends.len() >= in_flight {
                    sends.join_next().await;
                }
                // Each send books its own slot: a booking slowed by the store holds up no other,
                // and the bookings under way at once share a write of the bot's budget.
                let send = RecipientSend {
                    store: self.store.clone(),
                    api: api.clone(),
                    budget: self.budget.clone(),
                    clock: self.clock.clone(),
                    job: job.clone(),
                    recipient,
                    retry: self.retry,
                    gate: gate.clone(),
                    paced,
                    stop: stop.clone(),
                    left: left.clone(),
                };
                sends.spawn(send.go());
            }
            // Every send of the batch began (or failed to) before the next batch is taken: a
            // recipient whose begin is still on its way must not be taken twice.
            drain(sends).await;
            let failure = left.failed.lock().take();
            if let Some(error) = failure {
                return Err(error);
            }
            let halted = left.halted.lock().take();
            if let Some(reason) = halted {
                return self.halt(id, reason).await;
            }
            // A batch whose every recipient has its outcome now, none to be tried again, and that
            // held every recipient the span could still send to (fewer than it could take, or
            // the whole span), left nothing to send now: the span is not read again to learn it
            // (a chunk's thousand recipients are ten reads on DynamoDB).
            let retries = left.retries.swap(false, Ordering::SeqCst);
            let whole = taken < TAKE || span.end.saturating_sub(span.start) <= taken as u64;
            look = retries || !begun_all || !whole || left.doubt.load(Ordering::SeqCst);
        }
    }

    /// The job, when it is running; a job that enough of its first recipients refused is paused
    /// here, with Telegram's words.
    async fn running(&self, id: &BroadcastId) -> Result<Option<BroadcastJob>, PortError> {
        let Some(job) = self.store.job(id).await? else {
            return Ok(None);
        };
        if job.state != JobState::Running {
            return Ok(None);
        }
        if job.counts.sent == 0 && job.refusals >= REFUSALS_BEFORE_PAUSE {
            let reason = format!(
                "Telegram refused the message for the first {} recipients: {}",
                job.refusals,
                job.last_error.as_deref().unwrap_or("no reason given")
            );
            warn!(broadcast = %id, "{reason}");
            self.store
                .change(id, Change::PauseBecause(reason), self.clock.now())
                .await?;
            return Ok(None);
        }
        Ok(Some(job))
    }

    /// Pauses job `id`: Telegram refused its message or its bot, as it would for every recipient
    /// left. An operator resumes it once the cause is fixed.
    async fn halt(&self, id: &BroadcastId, reason: String) -> Result<RunEnd, PortError> {
        let reason = format!("Telegram refused the message or the bot: {reason}");
        warn!(broadcast = %id, "{reason}; the job is paused");
        self.store
            .change(id, Change::PauseBecause(reason), self.clock.now())
            .await?;
        self.stopped(id).await
    }

    async fn stopped(&self, id: &BroadcastId) -> Result<RunEnd, PortError> {
        Ok(RunEnd::Stopped(
            self.store
                .job(id)
                .await?
                .map_or(JobState::Cancelled, |job| job.state),
        ))
    }
}

/// One recipient's send, in a task of its own.
struct RecipientSend {
    store: Arc<dyn BroadcastStore>,
    api: Arc<dyn BotApi>,
    budget: Arc<dyn SendBudget>,
    clock: Arc<dyn Clock>,
    job: BroadcastJob,
    recipient: Recipient,
    retry: RetryPolicy,
    gate: Arc<LaneGate>,
    /// Whether the send books its slot in the bot's budget.
    paced: bool,
    stop: watch::Receiver<bool>,
    left: Arc<LeftBehind>,
}

/// What the sends of a run left for it to look at again.
#[derive(Default)]
struct LeftBehind {
    /// A send ended with a recipient to try again, or without beginning its send.
    retries: AtomicBool,
    /// A send may have left its recipient begun with no outcome: its begin's answer was lost,
    /// its settle gave up, or its task ended before it settled.
    doubt: AtomicBool,
    /// A booking the budget's store refused: the run ends with the error, as it would had it
    /// booked the send itself.
    failed: parking_lot::Mutex<Option<PortError>>,
    /// Telegram refused the message or the bot: the run pauses the job with these words.
    halted: parking_lot::Mutex<Option<String>>,
    /// How long the lane holds for Telegram's outage.
    outage: outage::Outage,
}

/// Set while a send is begun and not settled: a task that ends in between leaves a doubt.
struct Begun<'a>(Option<&'a LeftBehind>);

impl Drop for Begun<'_> {
    fn drop(&mut self) {
        if let Some(left) = self.0 {
            left.doubt.store(true, Ordering::SeqCst);
        }
    }
}

impl RecipientSend {
    /// Books a send to `chat` in the bot's budget and waits for its slot; `None` when the process
    /// is stopping.
    async fn booked(&mut self, chat: i64) -> Result<Option<Slot>, PortError> {
        let bot = &self.job.spec.bot;
        // The paid lane is apart from the bot's rate; a flood wait holds it all the same, one
        // that any process of the bot heard: it books no slot, so it looks for one.
        let counted = (self.job.spec.lane == Lane::Standard).then_some(chat);
        if counted.is_none() {
            self.budget.look_again(bot).await?;
        }
        loop {
            let slot = match self.budget.reserve(bot, counted, BOOK_WITHIN).await? {
                Reserved::Booked(slot) => slot,
                Reserved::Later(wait) => {
                    if wait_or_stop(wait.min(BOOK_WITHIN), &mut self.stop).await {
                        return Ok(None);
                    }
                    continue;
                }
            };
            if !slot.wait.is_zero() && wait_or_stop(slot.wait, &mut self.stop).await {
                return Ok(None);
            }
            return Ok(Some(slot));
        }
    }

    /// Whether the booked `slot` may go now (after a short wait the budget names): `false` when
    /// a flood wait began meanwhile or the slot went by, so the send is booked again.
    async fn cleared(&self, slot: &mut Slot) -> Result<bool, PortError> {
        loop {
            match self.budget.clear_to_send(&self.job.spec.bot, slot).await? {
                Clear::Go => return Ok(true),
                Clear::After(wait) => {
                    tokio::time::sleep(wait).await;
                    if wait <= RECHECK_AFTER {
                        return Ok(true);
                    }
                }
                Clear::Held(_) | Clear::Late => return Ok(false),
            }
        }
    }

    /// Books a send to `chat`, waits for the lane, and clears it: the moment just before the
    /// call. `None` when the process is stopping first.
    async fn at_the_wire(&mut self, chat: i64) -> Result<Option<()>, PortError> {
        if !self.paced {
            self.gate.pass().await;
            return Ok(Some(()));
        }
        // A send the bot's budget counts is booked after its turn in the lane: the budget counts
        // it at its slot, and a call held at the gate past that slot could share a second with
        // the calls booked after it. The paid lane books no slot, so its gate comes last.
        let counted = self.job.spec.lane == Lane::Standard;
        loop {
            if counted {
                self.gate.pass().await;
            }
            let Some(mut slot) = self.booked(chat).await? else {
                return Ok(None);
            };
            if !counted {
                self.gate.pass().await;
            }
            if self.cleared(&mut slot).await? {
                return Ok(Some(()));
            }
        }
    }

    async fn go(mut self) {
        let chat = self.recipient.chat;
        // Booked, its turn in the lane come and cleared, the send is at the wire before its
        // intent is written: a process killed meanwhile leaves the recipient as it was, never
        // uncertain. Not at the wire (stopping, or the budget's store failed), it is not begun
        // and stays for the next run.
        match self.at_the_wire(chat).await {
            Ok(Some(())) => {}
            Ok(None) => {
                self.left.retries.store(true, Ordering::SeqCst);
                return;
            }
            Err(error) => {
                self.left.retries.store(true, Ordering::SeqCst);
                self.left.failed.lock().get_or_insert(error);
                return;
            }
        }
        // Until it settles, an end of this task leaves a doubt; so does a begin whose answer was
        // lost, which may have been written.
        let left = self.left.clone();
        let mut begun = Begun(Some(&*left));
        // The intent, durable before the call.
        if let Err(error) = self.store.begin(&self.job.id, self.recipient.index).await {
            self.left.retries.store(true, Ordering::SeqCst);
            warn!(broadcast = %self.job.id, error = %error_chain(&error), "recording a broadcast send's start failed; it is tried again");
            return;
        }
        let outcome = self.call(chat).await;
        match &outcome {
            Outcome::Unsent { .. } => self.left.outage.failed(tokio::time::Instant::now()),
            Outcome::Uncertain => {}
            _ => self.left.outage.answered(),
        }
        if let Outcome::Halted { error } = &outcome {
            self.left.halted.lock().get_or_insert_with(|| error.clone());
        }
        if matches!(
            outcome.state(self.clock.now()),
            RecipientState::Retrying { .. }
        ) {
            self.left.retries.store(true, Ordering::SeqCst);
        }
        if self.settled(outcome).await {
            begun.0 = None;
        }
    }

    /// Makes the call to `chat` and says how it ended; a group that became a supergroup is
    /// followed once, booked again as a send of its own.
    async fn call(&mut self, chat: i64) -> Outcome {
        let spec = self.job.spec.clone();
        let answer = self
            .api
            .call(&ApiCall::plain(&spec.method, &spec.params_for(chat)))
            .await;
        let error = match answer {
            Ok(result) => return sent(&result, None),
            // The store refused what the Bot API records itself: nothing was sent.
            Err(CallError::Store(error)) => {
                return Outcome::Retry {
                    due: self.clock.now().plus(Duration::from_secs(1)).0,
                    error: error_chain(&error),
                }
            }
            Err(CallError::Telegram(error)) => error,
        };
        let error = match error {
            TelegramError::MigrateToChat(to) => {
                info!(broadcast = %self.job.id, from = chat, to, "the group became a supergroup; following it once");
                match self.at_the_wire(to).await {
                    Ok(Some(())) => {}
                    // Stopping, or the budget failed: nothing went to the supergroup yet.
                    Ok(None) | Err(_) => {
                        return Outcome::Held {
                            due: self.clock.now().0,
                        }
                    }
                }
                match self
                    .api
                    .call(&ApiCall::plain(&spec.method, &spec.params_for(to)))
                    .await
                {
                    Ok(result) => return sent(&result, Some(to)),
                    Err(CallError::Telegram(error)) => error,
                    Err(CallError::Store(error)) => TelegramError::Network(error_chain(&error)),
                }
            }
            error => error,
        };
        if let TelegramError::RetryAfter(wait) = &error {
            if let Err(failed) = self.budget.pause(&spec.bot, *wait).await {
                warn!(error = %error_chain(&failed), "sharing a flood wait failed; this process holds its sends all the same");
            }
        }
        outcome_of(
            &error,
            (chat, self.recipient.attempts),
            &self.job,
            &self.retry,
            self.clock.now(),
        )
    }

    /// Records the outcome; a settle the store refuses now is tried again for about a minute: a
    /// recipient left begun becomes uncertain, which loses no message but leaves a doubt.
    async fn settled(&self, outcome: Outcome) -> bool {
        let now = self.clock.now();
        let mut delay = Duration::from_millis(100);
        for _ in 0..40 {
            match self
                .store
                .settle(&self.job.id, self.recipient.index, outcome.clone(), now)
                .await
            {
                Ok(()) => return true,
                Err(error) => {
                    warn!(broadcast = %self.job.id, error = %error_chain(&error), "recording a broadcast send failed; trying again");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
            }
        }
        false
    }
}

/// A send Telegram took: its message id, and the supergroup it went to instead, if it did.
fn sent(result: &Value, migrated_to: Option<i64>) -> Outcome {
    Outcome::Sent {
        message_id: result
            .get("message_id")
            .and_then(Value::as_i64)
            .unwrap_or_default(),
        migrated_to,
    }
}

async fn drain(sends: &mut JoinSet<()>) {
    while sends.join_next().await.is_some() {}
}

async fn drain_if(wanted: bool, sends: &mut JoinSet<()>) {
    if wanted {
        drain(sends).await;
    }
}

/// Sleeps for `wait`; `true` when `stop` turned true first.
async fn wait_or_stop(wait: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        () = tokio::time::sleep(wait) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}

/// A job's own pace: at most its rate in any second (and a little slack), evenly spaced.
struct LanePacer {
    rate: Option<u32>,
    /// The next slot of the even schedule.
    next: Option<tokio::time::Instant>,
    /// When the last `rate` sends may leave at the earliest: what the one-second window counts.
    sent: std::collections::VecDeque<tokio::time::Instant>,
}

impl Lane {
    fn pacer(rate: Option<u32>) -> LanePacer {
        LanePacer {
            rate,
            next: None,
            sent: std::collections::VecDeque::new(),
        }
    }
}

impl LanePacer {
    /// Takes the next slot: how long from `now` until the send may leave. The even schedule, not
    /// the moment the caller woke, sets the next slot, and slots a late wake-up missed are caught
    /// up on, up to [`CATCH_UP`] back: timers tick in milliseconds, and a lane of 1,000 a second
    /// would otherwise lose a third of its slots. The window counts when sends leave, so what is
    /// caught up never puts more than the rate in a second.
    fn take(&mut self, now: tokio::time::Instant) -> Duration {
        let Some(rate) = self.rate else {
            return Duration::ZERO;
        };
        let spacing = Duration::from_secs(1) / rate.max(1);
        let earliest = now.checked_sub(CATCH_UP).unwrap_or(now);
        let mut slot = self.next.map_or(now, |next| next.max(earliest));
        if self.sent.len() >= rate as usize {
            if let Some(oldest) = self.sent.front() {
                slot = slot.max(*oldest + Duration::from_secs(1) + LANE_SLACK);
            }
        }
        let leaves = slot.max(now);
        self.next = Some(slot + spacing);
        self.sent.push_back(leaves);
        while self.sent.len() > rate as usize {
            self.sent.pop_front();
        }
        leaves - now
    }
}

/// The lane's own check near the wire: the moments the last `rate` sends passed it, so that no
/// more than the rate pass in any second and its slack however the stores' writes bunched them.
/// The paid lane passes it just before the call. The standard lane passes it before booking, so
/// that a wait here never makes a call leave after the slot the bot's budget counts it at.
struct LaneGate {
    rate: Option<u32>,
    left: parking_lot::Mutex<std::collections::VecDeque<tokio::time::Instant>>,
}

impl LaneGate {
    fn new(rate: Option<u32>) -> Self {
        Self {
            rate,
            left: parking_lot::Mutex::new(std::collections::VecDeque::new()),
        }
    }

    /// Returns when a call may leave, and counts it as leaving then.
    async fn pass(&self) {
        let Some(rate) = self.rate else {
            return;
        };
        loop {
            let wait = {
                let now = tokio::time::Instant::now();
                let mut left = self.left.lock();
                let free_at = match left.front() {
                    Some(oldest) if left.len() >= rate as usize => {
                        *oldest + Duration::from_secs(1) + LANE_SLACK
                    }
                    _ => now,
                };
                if free_at <= now {
                    left.push_back(now);
                    while left.len() > rate as usize {
                        left.pop_front();
                    }
                    return;
                }
                free_at - now
            };
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> BroadcastSpec {
        BroadcastSpec::standard(
            BotId::new("b").unwrap(),
            "sendMessage",
            json!({"text": "hi"}),
            "cli",
        )
    }

    #[test]
    fn a_recipients_file_with_a_bad_line_is_refused_naming_it() {
        assert_eq!(
            parse_recipients("# subscribers\n42\n\n-100123\n42\n7\n"),
            Ok(vec![42, -100123, 7])
        );
        assert_eq!(
            parse_recipients("42\n@channel\n7"),
            Err(SpecError::BadLine {
                line: 2,
                text: "@channel".into()
            })
        );
        assert_eq!(
            parse_recipients("1\n0\n"),
            Err(SpecError::BadLine {
                line: 2,
                text: "0".into()
            })
        );
        assert_eq!(
            parse_recipients("# nobody\n\n"),
            Err(SpecError::EmptyAudience)
        );
    }

    #[test]
    fn a_spec_that_sends_nothing_or_names_a_chat_is_refused() {
        assert_eq!(spec().check(), Ok(()));
        let mut s = spec();
        s.method = "getChat".into();
        assert_eq!(s.check(), Err(SpecError::NotASend("getChat".into())));
        let mut s = spec();
        s.method = "editMessageText".into();
        assert!(s.check().is_err());
        let mut s = spec();
        s.params = json!({"chat_id": 1, "text": "x"});
        assert_eq!(s.check(), Err(SpecError::NamesAChat));
        let mut s = spec();
        s.reserve_percent = 95;
        assert_eq!(s.check(), Err(SpecError::Reserve(95)));
        let mut s = spec();
        s.paid_rate = 1001;
        assert_eq!(s.check(), Err(SpecError::PaidRate(1001)));
    }

    #[test]
    fn the_standard_lane_leaves_the_reserve_and_the_paid_lane_has_its_own_rate() {
        assert_eq!(spec().lane_rate(Some(30)), Some(24));
        assert_eq!(spec().lane_rate(None), None);
        let mut s = spec();
        s.lane = Lane::Paid;
        s.paid_rate = 500;
        assert_eq!(s.lane_rate(Some(30)), Some(500));
        assert_eq!(s.params_for(9)["allow_paid_broadcast"], json!(true));
        assert_eq!(spec().params_for(9), json!({"text": "hi", "chat_id": 9}));
    }

    #[test]
    fn a_job_moves_only_along_its_states() {
        let now = Timestamp(0);
        let mut job = BroadcastJob::new(BroadcastId(1), spec(), 1, now);
        assert!(!job.apply(&Change::Resume, now));
        assert!(job.apply(&Change::Pause, now));
        assert!(!job.apply(&Change::Pause, now));
        assert!(!job.apply(&Change::Finish, now));
        assert!(job.apply(&Change::Resume, now));
        assert!(job.apply(&Change::Cancel, now));
        assert_eq!(job.ended_at, Some(now));
        for change in [
            Change::Pause,
            Change::Resume,
            Change::Cancel,
            Change::Finish,
        ] {
            assert!(!job.apply(&change, now), "{change:?} after a cancel");
        }
    }

    #[test]
    fn the_lane_keeps_its_rate_in_any_second() {
        let mut lane = Lane::pacer(Some(10));
        let start = tokio::time::Instant::now();
        let mut at = start;
        let mut times = Vec::new();
        for i in 0..35 {
            at += lane.take(at);
            times.push(at);
            // A sleep that ends a little late does not move the next slot.
            if i % 3 == 0 {
                at += Duration::from_millis(7);
            }
        }
        for (i, t) in times.iter().enumerate() {
            let in_window = times[i..]
                .iter()
                .take_while(|u| **u < *t + Duration::from_secs(1))
                .count();
            assert!(
                in_window <= 10,
                "{in_window} sends in the second from send {i}"
            );
        }
        let took = *times.last().unwrap() - start;
        assert!(
            took >= Duration::from_millis(3_400) && took < Duration::from_millis(3_700),
            "{took:?}"
        );
        assert_eq!(Lane::pacer(None).take(start), Duration::ZERO);
    }

    #[test]
    fn a_fast_lane_woken_late_catches_up_without_a_second_over_its_rate() {
        let mut lane = Lane::pacer(Some(1000));
        let start = tokio::time::Instant::now();
        let mut now = start;
        let mut leaves = Vec::new();
        for i in 0..3000 {
            let wait = lane.take(now);
            let leave = now + wait;
            leaves.push(leave);
            // A timer that ticks in milliseconds: every wait ends up to a millisecond late; and
            // now and then the process stalls for 15 ms (a busy core, a slow commit).
            now = leave
                + match (i % 250 == 0, wait.is_zero()) {
                    (true, _) => Duration::from_millis(15),
                    (false, true) => Duration::from_micros(50),
                    (false, false) => Duration::from_micros(900),
                };
        }
        let mut first = 0;
        for (last, at) in leaves.iter().enumerate() {
            while *at - leaves[first] >= Duration::from_secs(1) {
                first += 1;
            }
            assert!(
                last - first < 1000,
                "{} sends in one second",
                last - first + 1
            );
        }
        let took = *leaves.last().unwrap() - start;
        assert!(
            took < Duration::from_millis(3_150),
            "3,000 at 1,000/s took {took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_gate_lets_no_more_than_the_rate_leave_in_a_second_however_they_come() {
        let gate = Arc::new(LaneGate::new(Some(50)));
        let start = tokio::time::Instant::now();
        // Two hundred calls whose intents were all written at once.
        let mut calls = JoinSet::new();
        for _ in 0..200 {
            let gate = gate.clone();
            calls.spawn(async move {
                gate.pass().await;
                tokio::time::Instant::now()
            });
        }
        let mut left: Vec<tokio::time::Instant> = calls.join_all().await;
        left.sort();
        let mut first = 0;
        for (last, at) in left.iter().enumerate() {
            while *at - left[first] >= Duration::from_secs(1) {
                first += 1;
            }
            assert!(
                last - first < 50,
                "{} calls in one second",
                last - first + 1
            );
        }
        assert!(*left.last().unwrap() - start < Duration::from_millis(4_200));
    }

    #[test]
    fn a_state_filter_takes_the_format_and_the_value_at_its_pointer() {
        let filter = StateFilter {
            format: Some("subs/v1".into()),
            equals: Some(("/on".into(), json!(true))),
        };
        assert!(filter.matches("subs/v1", &json!({"on": true})));
        assert!(!filter.matches("subs/v1", &json!({"on": false})));
        assert!(!filter.matches("cart/v1", &json!({"on": true})));
        assert!(StateFilter::default().matches("any", &json!(null)));
    }

    fn job_of_bot(id: u64, bot: &str, state: JobState) -> BroadcastJob {
        let spec = BroadcastSpec::standard(
            BotId::new(bot).unwrap(),
            "sendMessage",
            json!({"text": "news"}),
            "cli",
        );
        let mut job = BroadcastJob::new(BroadcastId(id), spec, 10, Timestamp(0));
        job.state = state;
        job
    }

    fn ids_of(jobs: Vec<&BroadcastJob>) -> Vec<u64> {
        jobs.iter().map(|j| j.id.0).collect()
    }

    #[test]
    fn a_bot_sends_its_oldest_running_broadcast_and_one_at_a_time() {
        // Newest first, as the store lists them.
        let jobs = [
            job_of_bot(5, "shop", JobState::Running),
            job_of_bot(4, "news", JobState::Running),
            job_of_bot(3, "shop", JobState::Running),
            job_of_bot(2, "shop", JobState::Paused { reason: None }),
            job_of_bot(1, "news", JobState::Done),
        ];
        assert_eq!(ids_of(startable(&jobs, &[])), [4, 3]);
        // Job 3 ended and 5 is the shop's oldest, but a shop job still runs here (one stopping
        // for an older one, say): 5 waits for it.
        let mut jobs = jobs;
        jobs[2].state = JobState::Done;
        let shop = BotId::new("shop").unwrap();
        assert_eq!(ids_of(startable(&jobs, std::slice::from_ref(&shop))), [4]);
        assert_eq!(ids_of(startable(&jobs, &[])), [5, 4]);
    }

    #[test]
    fn a_broadcast_stops_for_an_older_one_of_its_bot_resumed_while_it_sends() {
        let mut jobs = [
            job_of_bot(3, "shop", JobState::Running),
            job_of_bot(2, "news", JobState::Running),
            job_of_bot(1, "shop", JobState::Paused { reason: None }),
        ];
        assert!(overtaken(&jobs, [3, 2].into_iter()).is_empty());
        jobs[2].state = JobState::Running;
        assert_eq!(overtaken(&jobs, [3, 2].into_iter()), [3]);
        // A run whose job is gone from the list stops by itself.
        assert!(overtaken(&jobs, [7].into_iter()).is_empty());
    }
}
