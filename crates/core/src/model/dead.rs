//! Dead letters: why an update was given up on, in closed sets, and the letter the dead-letter queue
//! keeps for it. Adapters map the enums to their stored strings through `as_str`/`FromStr` only.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;

use crate::envelope::{Envelope, Poison};
use crate::error::ErrorClass;
use crate::ids::{BotId, GroupKey, MessageGroupId, RecordKey, UpdateId};

/// Why an update is in the dead-letter queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeadReason {
    /// The body is not an update.
    Poison,
    /// The handler failed in a way retrying cannot fix (a 400, a 403, the bot's own verdict).
    Permanent,
    /// Every attempt of the budget failed.
    BudgetSpent,
    /// Telegram kept rate-limiting it past the time budget.
    ThrottledTooLong,
    /// The queue's redrive policy moved it after too many receives without a delete (a crash loop).
    Redriven,
    /// The update or its record would exceed the store's item size limit.
    TooLarge,
    /// Its bot is in neither the environment nor the bot registry (removed, or never added):
    /// nothing could run it (docs/design/fleet.md §2).
    UnknownBot,
    /// Its bot names a handler the deployed `bot/` does not have (docs/design/fleet.md §2).
    UnknownHandler,
    /// An update the webhook stored that this version's parser cannot read (a field it does not
    /// know the shape of, or a parser that panicked on it): buried on its first run, never a crash,
    /// and replayable after an upgrade that reads it.
    Unreadable,
}

impl DeadReason {
    /// Every reason: what a stored spelling is read back as.
    pub(crate) const ALL: [DeadReason; 9] = [
        DeadReason::Poison,
        DeadReason::Permanent,
        DeadReason::BudgetSpent,
        DeadReason::ThrottledTooLong,
        DeadReason::Redriven,
        DeadReason::TooLarge,
        DeadReason::UnknownBot,
        DeadReason::UnknownHandler,
        DeadReason::Unreadable,
    ];

    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::Poison => "poison",
            DeadReason::Permanent => "permanent_error",
            DeadReason::BudgetSpent => "attempt_budget_spent",
            DeadReason::ThrottledTooLong => "throttled_too_long",
            DeadReason::Redriven => "max_receive_count",
            DeadReason::TooLarge => "too_large",
            DeadReason::UnknownBot => "unknown_bot",
            DeadReason::UnknownHandler => "unknown_handler",
            DeadReason::Unreadable => "unreadable",
        }
    }
}

impl DeadReason {
    /// The reason in words, for `tgq dlq list`.
    pub fn describe(self) -> &'static str {
        match self {
            DeadReason::Poison => "poison (not an update)",
            DeadReason::Permanent => "permanent error",
            DeadReason::BudgetSpent => "attempt budget spent",
            DeadReason::ThrottledTooLong => "throttled too long",
            DeadReason::Redriven => "redriven by SQS after too many receives without a run",
            DeadReason::TooLarge => "too large to store",
            DeadReason::UnknownBot => "its bot is not in the registry",
            DeadReason::UnknownHandler => "its bot's handler is not in bot/",
            DeadReason::Unreadable => "unreadable: this version cannot parse the update",
        }
    }
}

/// What a message on the updates queue carries when it is one of tgq's dead letters moved back by
/// an operator (the SQS console's "start DLQ redrive"): the attributes its letter was sent with.
/// The worker takes such a message as an operator's replay (docs/design/operate.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadLetterMarks {
    /// Why it had been dead-lettered.
    pub reason: DeadReason,
    /// Handler runs it had spent.
    pub attempts: u32,
}

/// What kind of failure buried an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// Not an update at all.
    Poison,
    /// A failure retrying cannot fix.
    Permanent,
    /// A failure worth retrying, retried until the budget ran out.
    Transient,
    /// Telegram's flood control.
    RateLimited,
}

impl FailureClass {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Poison => "poison",
            FailureClass::Permanent => "permanent",
            FailureClass::Transient => "transient",
            FailureClass::RateLimited => "rate_limited",
        }
    }
}

impl From<ErrorClass> for FailureClass {
    fn from(class: ErrorClass) -> Self {
        match class {
            ErrorClass::Transient => FailureClass::Transient,
            ErrorClass::RateLimited(_) => FailureClass::RateLimited,
            ErrorClass::Permanent => FailureClass::Permanent,
        }
    }
}

/// A stored reason or class this version does not know.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown {what} {value:?}")]
pub struct UnknownName {
    /// What was being read.
    pub what: &'static str,
    /// The stored text.
    pub value: String,
}

macro_rules! from_stored {
    ($type:ty, $what:literal, $all:expr) => {
        impl FromStr for $type {
            type Err = UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $all.into_iter()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| UnknownName {
                        what: $what,
                        value: s.to_owned(),
                    })
            }
        }

        impl fmt::Display for $type {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

from_stored!(DeadReason, "dead-letter reason", DeadReason::ALL);
from_stored!(
    FailureClass,
    "error class",
    [
        FailureClass::Poison,
        FailureClass::Permanent,
        FailureClass::Transient,
        FailureClass::RateLimited
    ]
);

/// Why a record was given up on, kept on the record when it turns `DEAD`: its dead letter can be
/// sent again from it if the first send failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Burial {
    /// Why.
    pub reason: DeadReason,
    /// The class of the last failure.
    pub class: FailureClass,
    /// The last failure's description, without message text.
    pub error: String,
    /// Handler runs spent.
    pub attempts: u32,
}

/// A message for the dead-letter queue: the raw bytes and why they are there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The bot it was addressed to.
    pub bot_id: BotId,
    /// The update id, when the body had one.
    pub update_id: Option<UpdateId>,
    /// The original group, when known.
    pub group: Option<GroupKey>,
    /// The raw body, exactly as received.
    pub body: Bytes,
    /// Why it is dead.
    pub reason: DeadReason,
    /// The class of the failure that buried it.
    pub error_class: FailureClass,
    /// The error's description, without message text.
    pub error: String,
    /// Handler runs spent on it.
    pub attempts: u32,
}

impl DeadLetter {
    /// A body that is not an update, addressed to `bot_id`.
    pub(crate) fn poison(bot_id: BotId, body: Bytes, poison: &Poison) -> Self {
        Self::unidentified(bot_id, body, poison.to_string())
    }

    /// A queue message that names no update tgq can key (its group id or its envelope), addressed
    /// to `bot_id` as far as it tells: poison.
    pub fn unidentified(bot_id: BotId, body: Bytes, error: String) -> Self {
        Self {
            bot_id,
            update_id: None,
            group: None,
            body,
            reason: DeadReason::Poison,
            error_class: FailureClass::Poison,
            error,
            attempts: 0,
        }
    }

    /// The letter of a buried update.
    pub fn for_update(key: &RecordKey, group: &GroupKey, body: Bytes, burial: &Burial) -> Self {
        Self {
            bot_id: key.bot_id.clone(),
            update_id: Some(key.update_id),
            group: Some(group.clone()),
            body,
            reason: burial.reason,
            error_class: burial.class,
            error: burial.error.clone(),
            attempts: burial.attempts,
        }
    }

    /// A message the updates queue's redrive policy moved after too many receives: the worker never
    /// deleted it. `group_id` is the message's `{bot_id}:{group key}`, when the queue kept it.
    pub fn redriven(group_id: Option<&MessageGroupId>, body: Bytes, error: String) -> Self {
        let (bot_id, group) = match group_id.map(MessageGroupId::split) {
            Some(Ok((bot_id, group))) => (bot_id, Some(group)),
            _ => (BotId::unknown(), None),
        };
        Self {
            bot_id,
            update_id: Envelope::parse_queued(&body).ok().map(|e| e.update_id),
            group,
            body,
            reason: DeadReason::Redriven,
            error_class: FailureClass::Transient,
            error,
            attempts: 0,
        }
    }

    /// The dead-letter queue's dedup id: one letter per burial of an update (a burial is named by
    /// the attempts it had spent), or per distinct poison body.
    pub fn dedup_id(&self) -> String {
        match self.update_id {
            Some(id) => format!("{}:{id}:dead:{}", self.bot_id, self.attempts),
            None => format!("{}:poison:{:016x}", self.bot_id, fnv1a(&self.body)),
        }
    }

    /// The dead-letter queue's group id: per original group, so letters keep their order for replay.
    pub fn group_id(&self) -> String {
        match &self.group {
            Some(group) => format!("{}:{group}", self.bot_id),
            None => format!("{}:poison", self.bot_id),
        }
    }
}

/// A stable 64-bit hash for dedup ids (not for security).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_and_classes_read_back_what_they_store() {
        for reason in DeadReason::ALL {
            assert_eq!(reason.as_str().parse::<DeadReason>(), Ok(reason));
        }
        let names: std::collections::BTreeSet<_> =
            DeadReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            names.len(),
            DeadReason::ALL.len(),
            "two reasons share a spelling"
        );
        assert_eq!("transient".parse(), Ok(FailureClass::Transient));
        assert!("nonsense".parse::<FailureClass>().is_err());
    }

    #[test]
    fn a_second_burial_after_more_attempts_has_its_own_dedup_id() {
        let key = RecordKey::new(BotId::new("b").unwrap(), UpdateId(5));
        let burial = |attempts| Burial {
            reason: DeadReason::Permanent,
            class: FailureClass::Permanent,
            error: String::new(),
            attempts,
        };
        let first = DeadLetter::for_update(&key, &GroupKey::new("1"), Bytes::new(), &burial(1));
        let second = DeadLetter::for_update(&key, &GroupKey::new("1"), Bytes::new(), &burial(3));
        assert_ne!(first.dedup_id(), second.dedup_id());
    }
}
