//! Identifiers, each a newtype so that a chat key is never passed where an update id belongs.

use std::fmt;

/// Identifies one bot; part of every record key and message group, so bots can share a table and a queue.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct BotId(String);

impl TryFrom<String> for BotId {
    type Error = InvalidBotId;

    fn try_from(id: String) -> Result<Self, Self::Error> {
        Self::new(id)
    }
}

impl From<BotId> for String {
    fn from(id: BotId) -> Self {
        id.0
    }
}

/// Why a string cannot be a [`BotId`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bot id must be 1–64 characters of A–Z, a–z, 0–9, '-' or '_' (got {0:?})")]
pub struct InvalidBotId(pub String);

impl BotId {
    /// Accepts ids that are safe inside a DynamoDB key and an SQS group id (no `:` or `#`).
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidBotId> {
        let id = id.into();
        let valid = !id.is_empty()
            && id.len() <= 64
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if valid {
            Ok(Self(id))
        } else {
            Err(InvalidBotId(id))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Stands for the bot of a message whose group id cannot be read.
    pub fn unknown() -> Self {
        Self("unknown".to_owned())
    }
}

impl fmt::Display for BotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Telegram's `update_id`: unique per bot and increasing, which is what makes it the dedup key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UpdateId(pub i64);

impl fmt::Display for UpdateId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The ordering unit inside one bot: a chat id, `user:{id}`, `poll:{id}` or `update:{id}`
/// (docs/ARCHITECTURE.md §2).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey(String);

impl GroupKey {
    /// Wraps a key already derived by [`crate::envelope`]; adapters use it to restore stored keys.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The primary key of an update record: `{bot_id}#{update_id}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordKey {
    /// The bot the update belongs to.
    pub bot_id: BotId,
    /// The update's id.
    pub update_id: UpdateId,
}

impl RecordKey {
    /// Builds the key of one update of one bot.
    pub fn new(bot_id: BotId, update_id: UpdateId) -> Self {
        Self { bot_id, update_id }
    }

    /// The DynamoDB partition key, `{bot_id}#{update_id}`, the update id zero-padded to 20 digits so
    /// that keys sort in update order.
    pub fn pk(&self) -> String {
        format!("{}#{:020}", self.bot_id, self.update_id.0)
    }

    /// The SQS FIFO deduplication id, `{bot_id}:{update_id}`.
    pub(crate) fn dedup_id(&self) -> String {
        format!("{}:{}", self.bot_id, self.update_id)
    }
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.bot_id, self.update_id)
    }
}

/// The key of one group's state (docs/design/worker.md §2): `{bot_id}#state#{group key}`. The
/// group is the state's scope because it is the unit the queue serialises: two runs of one group
/// never overlap, so a read-modify-write of its state is serial.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateKey {
    /// The bot the state belongs to.
    pub bot_id: BotId,
    /// The group whose updates share it.
    pub group: GroupKey,
}

impl StateKey {
    /// The state of one group of one bot.
    pub fn new(bot_id: BotId, group: GroupKey) -> Self {
        Self { bot_id, group }
    }

    /// The DynamoDB partition key, `{bot_id}#state#{group}`: never an update's key, whose second
    /// part is all digits.
    pub fn pk(&self) -> String {
        format!("{}#state#{}", self.bot_id, self.group)
    }

    /// The bot id and the group of a key [`StateKey::pk`] made.
    pub fn split_pk(pk: &str) -> Option<(&str, &str)> {
        pk.split_once("#state#")
    }
}

/// The SQS `MessageGroupId`: `{bot_id}:{group key}`, so one bot's busy chat never holds back another bot.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct MessageGroupId(String);

/// Why a message group id could not be read back into its bot and group.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("message group id {0:?} is not of the form bot_id:group")]
pub struct InvalidGroupId(pub String);

impl MessageGroupId {
    /// Joins a bot and a group key.
    pub fn new(bot_id: &BotId, group: &GroupKey) -> Self {
        Self(format!("{bot_id}:{group}"))
    }

    /// A group id as the queue delivered it, not yet checked: [`MessageGroupId::split`] reads it.
    pub fn from_raw(raw: impl Into<String>) -> Self {
        Self(raw.into())
    }

    /// Splits the group id into its bot and group key; a message whose group id cannot be read was
    /// not sent by tgq.
    pub fn split(&self) -> Result<(BotId, GroupKey), InvalidGroupId> {
        let invalid = || InvalidGroupId(self.0.clone());
        let (bot, group) = self.0.split_once(':').ok_or_else(invalid)?;
        let bot_id = BotId::new(bot).map_err(|_| invalid())?;
        if group.is_empty() {
            return Err(invalid());
        }
        Ok((bot_id, GroupKey::new(group)))
    }

    /// The id as sent to the queue.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MessageGroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bot_ids_with_separators_are_refused() {
        assert!(BotId::new("demo").is_ok());
        assert!(BotId::new("de:mo").is_err());
        assert!(BotId::new("de#mo").is_err());
        assert!(BotId::new("").is_err());
    }

    #[test]
    fn record_keys_sort_in_update_order() {
        let bot = BotId::new("b").unwrap();
        let small = RecordKey::new(bot.clone(), UpdateId(9)).pk();
        let large = RecordKey::new(bot, UpdateId(10)).pk();
        assert!(small < large, "{small} should sort before {large}");
    }

    #[test]
    fn message_group_id_round_trips_and_keeps_colons_in_the_group() {
        let bot = BotId::new("demo").unwrap();
        let id = MessageGroupId::new(&bot, &GroupKey::new("user:42"));
        assert_eq!(id.as_str(), "demo:user:42");
        assert_eq!(
            MessageGroupId::from_raw(id.as_str()).split().unwrap(),
            (bot, GroupKey::new("user:42"))
        );
        assert!(MessageGroupId::from_raw("nogroup").split().is_err());
    }
}
