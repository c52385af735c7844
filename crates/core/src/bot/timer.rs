//! Timers (docs/design/time.md): a handler schedules a later update to its own chat, and the
//! bot gets it once, in the chat's order, however often processes crash or restart in between.
//!
//! A timer is an update of tgq's own kind ([`TIMER_KIND`]) with a negative `update_id`, so it goes
//! through the same claim, action records, retries and dead letters as any update, in the chat's
//! message group, behind the chat's earlier updates. What makes it fire once is the chat's state:
//! the pending timers, by key, are part of it ([`ChatTime`]), written in the same conditional write
//! that settles the run that scheduled them. When a timer arrives it runs only if the chat still
//! names it by its id; a timer cancelled, replaced by a later schedule of its key, or handed over
//! by a run that never settled is acknowledged without running. The run it starts removes it, in
//! its own settle.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub use crate::envelope::TIMER_KIND;
use crate::ids::{BotId, GroupKey, UpdateId};
use crate::record::Timestamp;

/// The furthest ahead a timer may be scheduled.
pub const MAX_TIMER_DELAY: Duration = Duration::from_secs(366 * 24 * 3600);

/// The most a timer's payload may take as JSON: it travels in the queue message, and on AWS in an
/// EventBridge Scheduler schedule's input.
pub const MAX_TIMER_PAYLOAD_BYTES: usize = 4096;

/// The most timers one chat may have pending: they are part of the chat's state, written with
/// every update of the chat that changes it.
pub const MAX_TIMERS_PER_CHAT: usize = 64;

/// The longest an SQS message timer holds a message back (15 minutes): on AWS a timer due within
/// it waits on the timer queue, a later one as a schedule.
pub const MAX_TIMER_HOLD: Duration = Duration::from_secs(900);

/// The longest timer key.
pub const MAX_TIMER_KEY_BYTES: usize = 64;

/// What tgq's own timers' keys start with (a flow's timeout is one); a bot's keys may not.
pub(crate) const RESERVED_KEY_PREFIX: &str = "tgq:";

/// When a timer is due: after a delay from now, or at a time. A time in the past fires at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// This long from the moment it is scheduled.
    In(Duration),
    /// At this time.
    At(Timestamp),
}

impl From<Duration> for When {
    fn from(delay: Duration) -> Self {
        When::In(delay)
    }
}

impl From<Timestamp> for When {
    fn from(at: Timestamp) -> Self {
        When::At(at)
    }
}

impl From<SystemTime> for When {
    fn from(at: SystemTime) -> Self {
        let ms = at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        When::At(Timestamp(ms))
    }
}

/// Why a timer cannot be scheduled: each names the limit it breaks. Never worth a retry.
#[derive(Debug, thiserror::Error)]
pub enum TimerError {
    /// The key is empty, too long, or in tgq's own reserved range.
    #[error("timer key {key:?} is not allowed: keys are 1 to {MAX_TIMER_KEY_BYTES} bytes and may not start with {RESERVED_KEY_PREFIX:?}")]
    BadKey {
        /// The key.
        key: String,
    },
    /// The timer is due further ahead than [`MAX_TIMER_DELAY`].
    #[error("timer {key:?} is due {} s ahead; timers may be at most {} s (366 days) ahead", .ahead.as_secs(), MAX_TIMER_DELAY.as_secs())]
    TooFar {
        /// The key.
        key: String,
        /// How far ahead it was asked for.
        ahead: Duration,
    },
    /// The payload is over [`MAX_TIMER_PAYLOAD_BYTES`] as JSON.
    #[error(
        "timer {key:?} has a {size} byte payload, over the {MAX_TIMER_PAYLOAD_BYTES} byte limit"
    )]
    PayloadTooLarge {
        /// The key.
        key: String,
        /// Its size as JSON.
        size: usize,
    },
    /// The payload does not serialize as JSON.
    #[error("timer {key:?}'s payload does not serialize")]
    Unserializable {
        /// The key.
        key: String,
        /// serde's account of it.
        #[source]
        source: serde_json::Error,
    },
    /// A fired timer's payload does not decode as the type the handler asked for.
    #[error("timer {key:?}'s payload does not decode as the type asked for")]
    PayloadUndecodable {
        /// The key.
        key: String,
        /// serde's account of it (names fields, never values).
        #[source]
        source: serde_json::Error,
    },
    /// The chat already has [`MAX_TIMERS_PER_CHAT`] timers pending.
    #[error("the chat already has {MAX_TIMERS_PER_CHAT} timers pending, the most a chat may have; cancel one or reuse a key")]
    TooMany,
    /// The update has no chat (an inline query, a poll): a timer needs a chat to come back to.
    #[error(
        "the update's group {group:?} is not a chat; only updates with a chat can schedule timers"
    )]
    NoChat {
        /// The update's group.
        group: String,
    },
    /// This deployment has no scheduler for timers.
    #[error("this deployment cannot schedule timers: {0}")]
    Unavailable(&'static str),
}

/// One pending timer, as the chat's state keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The timer's update id (negative): only the message with this id fires it.
    pub id: i64,
    /// When it is due, in milliseconds since the epoch.
    pub due: u64,
}

/// Where a chat's conversation stands ([`crate::flow`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowAt {
    /// The flow's [`crate::flow::Flow::NAME`].
    pub name: String,
    /// The step it waits at, as the flow's type serializes it.
    pub step: Value,
    /// How many times the flow moved; each move replaces its timeout.
    pub moves: u64,
}

/// tgq's part of a chat's state: its pending timers and its conversation, written with the bot's
/// own state in one conditional write.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatTime {
    /// Pending timers by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub timers: BTreeMap<String, Pending>,
    /// The conversation the chat is in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<FlowAt>,
}

impl ChatTime {
    /// Reads the stored part; a part this version cannot read is treated as empty rather than
    /// blocking the chat, and said so in the log.
    pub fn decode(stored: Option<&str>) -> Self {
        let Some(json) = stored else {
            return Self::default();
        };
        match serde_json::from_str(json) {
            Ok(time) => time,
            Err(e) => {
                tracing::warn!(error = %e, "the chat's timers do not decode; treating them as none");
                Self::default()
            }
        }
    }

    /// The part to store, or `None` when the chat has no timers and no flow.
    pub fn encode(&self) -> Option<String> {
        if self.timers.is_empty() && self.flow.is_none() {
            return None;
        }
        serde_json::to_string(self).ok()
    }
}

/// A timer on its way: the update the scheduler delivers to the chat's queue when it is due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerMessage {
    /// Whose timer.
    pub bot_id: BotId,
    /// The chat's group.
    pub group: GroupKey,
    /// Its update id (negative).
    pub update_id: UpdateId,
    /// The chat's id.
    pub chat_id: i64,
    /// The timer's key.
    pub key: String,
    /// When it is due.
    pub due: Timestamp,
    /// What the handler gave it.
    pub payload: Value,
}

/// The body of a timer update.
#[derive(Serialize, Deserialize)]
struct TimerBody {
    update_id: i64,
    tgq_timer: TimerFields,
}

#[derive(Serialize, Deserialize)]
struct TimerFields {
    chat: ChatRef,
    key: String,
    due: u64,
    #[serde(default)]
    payload: Value,
}

#[derive(Serialize, Deserialize)]
struct ChatRef {
    id: i64,
}

impl TimerMessage {
    /// The update's body, as the queue carries it.
    pub fn body(&self) -> Bytes {
        // A struct of strings, integers and a JSON value always serializes.
        Bytes::from(serde_json::to_vec(&self.timer_body()).unwrap_or_default())
    }

    /// Reads a timer update of `bot_id`'s group `group`; `None` when the body is not one.
    pub(crate) fn parse(bot_id: &BotId, group: &GroupKey, body: &[u8]) -> Option<Self> {
        let body: TimerBody = serde_json::from_slice(body).ok()?;
        Some(Self::from_body(bot_id.clone(), group.clone(), body))
    }

    fn timer_body(&self) -> TimerBody {
        TimerBody {
            update_id: self.update_id.0,
            tgq_timer: TimerFields {
                chat: ChatRef { id: self.chat_id },
                key: self.key.clone(),
                due: self.due.0,
                payload: self.payload.clone(),
            },
        }
    }

    fn from_body(bot_id: BotId, group: GroupKey, body: TimerBody) -> Self {
        Self {
            bot_id,
            group,
            update_id: UpdateId(body.update_id),
            chat_id: body.tgq_timer.chat.id,
            key: body.tgq_timer.key,
            due: Timestamp(body.tgq_timer.due),
            payload: body.tgq_timer.payload,
        }
    }

    /// The SQS FIFO deduplication id (and the scheduler's idempotency key): `{bot_id}:{update_id}`.
    pub fn dedup_id(&self) -> String {
        format!("{}:{}", self.bot_id, self.update_id)
    }
}

/// A timer on its way through a deployment's timer queue (AWS, docs/design/time.md): the
/// update with the bot and group its FIFO message needs, which neither an SQS message timer nor an
/// EventBridge Scheduler target can carry as attributes.
#[derive(Serialize, Deserialize)]
struct RelayBody {
    tgq_relay: RelayFields,
}

#[derive(Serialize, Deserialize)]
struct RelayFields {
    bot: String,
    group: String,
    update: TimerBody,
}

impl TimerMessage {
    /// The body the timer queue carries (`TimerMessage::from_relay` reads it back).
    pub fn relay_body(&self) -> String {
        let body = RelayBody {
            tgq_relay: RelayFields {
                bot: self.bot_id.to_string(),
                group: self.group.to_string(),
                update: self.timer_body(),
            },
        };
        // Strings, integers and a JSON value always serialize.
        serde_json::to_string(&body).unwrap_or_default()
    }

    /// Reads a timer queue's body; `None` when it is not one tgq wrote.
    pub(crate) fn from_relay(body: &[u8]) -> Option<Self> {
        let relay: RelayBody = serde_json::from_slice(body).ok()?;
        let RelayFields { bot, group, update } = relay.tgq_relay;
        let bot_id = BotId::new(bot).ok()?;
        if group.is_empty() {
            return None;
        }
        Some(Self::from_body(bot_id, GroupKey::new(group), update))
    }
}

/// A timer's update id: a hash of the bot, the chat, the key and the update whose run scheduled
/// it, in the negative range Telegram never uses. A retried run schedules the same id, so the
/// scheduler keeps one timer; a later update that schedules the key again makes another, and only
/// the one the chat's state names fires.
pub fn timer_id(bot_id: &BotId, group: &GroupKey, key: &str, origin: UpdateId) -> UpdateId {
    let mut hash = Sha256::new();
    for part in [bot_id.as_str(), group.as_str(), key] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    hash.update(origin.0.to_be_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    // 62 bits keep the id clear of i64::MIN and within what every store sorts as a number.
    let magnitude = (u64::from_be_bytes(first) >> 2) as i64;
    UpdateId(-(magnitude + 1))
}

/// A timer that fired, as the handler gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fired {
    /// The chat it fired in.
    pub chat_id: i64,
    /// Its key.
    pub key: String,
    /// When it was due.
    pub due: Timestamp,
    /// What the handler gave it.
    pub payload: Value,
    /// The flow whose timeout this is, when it is one ([`crate::Context::wait`]).
    pub flow: Option<String>,
}

impl Fired {
    /// The payload, as the type it was scheduled with.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, TimerError> {
        serde_json::from_value(self.payload.clone()).map_err(|source| {
            TimerError::PayloadUndecodable {
                key: self.key.clone(),
                source,
            }
        })
    }

    /// Whether this is the timeout of a wait in flow `F`.
    pub fn is_timeout_of<F: crate::flow::Flow>(&self) -> bool {
        self.flow.as_deref() == Some(F::NAME)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot() -> BotId {
        BotId::new("b").unwrap()
    }

    #[test]
    fn a_timer_id_is_negative_and_the_same_for_the_same_run_and_key_only() {
        let group = GroupKey::new("42");
        let id = timer_id(&bot(), &group, "remind", UpdateId(10));
        assert!(id.0 < 0);
        assert_eq!(id, timer_id(&bot(), &group, "remind", UpdateId(10)));
        assert_ne!(id, timer_id(&bot(), &group, "remind", UpdateId(11)));
        assert_ne!(id, timer_id(&bot(), &group, "other", UpdateId(10)));
        assert_ne!(
            id,
            timer_id(&bot(), &GroupKey::new("43"), "remind", UpdateId(10))
        );
    }

    #[test]
    fn a_timer_message_reads_back_from_its_body() {
        let message = TimerMessage {
            bot_id: bot(),
            group: GroupKey::new("42"),
            update_id: UpdateId(-5),
            chat_id: 42,
            key: "remind".into(),
            due: Timestamp(1_000),
            payload: serde_json::json!({"n": 1}),
        };
        let parsed = TimerMessage::parse(&bot(), &message.group, &message.body()).unwrap();
        assert_eq!(parsed, message);
        assert!(
            TimerMessage::parse(&bot(), &message.group, br#"{"update_id":1,"message":{}}"#)
                .is_none()
        );
    }

    #[test]
    fn a_relayed_timer_reads_back_and_a_foreign_body_does_not() {
        let message = TimerMessage {
            bot_id: bot(),
            group: GroupKey::new("42"),
            update_id: UpdateId(-7),
            chat_id: 42,
            key: "remind".into(),
            due: Timestamp(9_000),
            payload: serde_json::json!(["tea"]),
        };
        let relayed = TimerMessage::from_relay(message.relay_body().as_bytes()).unwrap();
        assert_eq!(relayed, message);
        assert!(TimerMessage::from_relay(&message.body()).is_none());
        let bad_bot = message
            .relay_body()
            .replace(r#""bot":"b""#, r#""bot":"a:b""#);
        assert!(TimerMessage::from_relay(bad_bot.as_bytes()).is_none());
    }

    #[test]
    fn an_empty_chat_time_is_not_stored_and_an_unreadable_one_reads_as_empty() {
        assert_eq!(ChatTime::default().encode(), None);
        assert_eq!(ChatTime::decode(Some("[1]")), ChatTime::default());
        let mut time = ChatTime::default();
        time.timers.insert("k".into(), Pending { id: -1, due: 5 });
        assert_eq!(ChatTime::decode(time.encode().as_deref()), time);
    }
}
