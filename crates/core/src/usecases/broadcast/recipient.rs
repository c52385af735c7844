//! A job's recipients: their states and the outcomes that settle them.

use super::*;

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
    Uncertain {
        /// Why its outcome is unknown: the call's error (a timeout, a cut connection), or a
        /// process that stopped between the send's intent and its outcome. Absent in records
        /// written before it was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
    },
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
                | RecipientState::Uncertain { .. }
        )
    }

    /// Whether the message certainly did not reach the recipient, or may not have: failed for
    /// good, or uncertain. `tgq broadcast status --json` lists them.
    pub fn is_undelivered(&self) -> bool {
        matches!(
            self,
            RecipientState::Failed { .. } | RecipientState::Uncertain { .. }
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
    Uncertain {
        /// Why, in words.
        #[serde(default)]
        why: String,
    },
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
    /// A send whose intent was written and whose outcome never was: the process that began it
    /// stopped, or the store refused its outcome. Marked so when a run finds it.
    pub fn abandoned() -> Outcome {
        Outcome::Uncertain {
            why: "its send began and its outcome was never recorded (the process stopped, or \
                  the store refused the outcome)"
                .into(),
        }
    }

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
            Outcome::Uncertain { why } => RecipientState::Uncertain {
                why: Some(why.clone()),
            },
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
            RecipientState::Uncertain { .. } => uncertain,
            _ => false,
        }
    }
}
