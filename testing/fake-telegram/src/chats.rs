//! The chats the bot has written to: their message counters and what it sent there.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::envelope::ApiError;
use crate::params::ChatParam;

/// Ids handed to channels addressed by `@username` count down from here, in Telegram's
/// `-100…` range for channels.
const FIRST_CHANNEL_ID: i64 = -1_001_000_000_001;

/// A chat a call is addressed to, resolved to an id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) id: i64,
    /// Set when the call named the chat as `@username`; such chats are channels.
    pub(crate) username: Option<String>,
}

impl Target {
    pub(crate) fn is_channel(&self) -> bool {
        self.username.is_some()
    }

    /// The Chat object: positive ids are private chats, negative ones supergroups.
    pub(crate) fn json(&self) -> Value {
        if let Some(username) = &self.username {
            return json!({ "id": self.id, "type": "channel", "title": username, "username": username });
        }
        if self.id > 0 {
            return json!({ "id": self.id, "type": "private", "first_name": format!("User {}", self.id) });
        }
        json!({ "id": self.id, "type": "supergroup", "title": format!("Group {}", self.id) })
    }
}

/// Per-chat message counters and the content of every message the bot sent.
#[derive(Debug, Default)]
pub(crate) struct Chats {
    last_message_id: HashMap<i64, i64>,
    channels: HashMap<String, i64>,
    contents: HashMap<(i64, i64), Map<String, Value>>,
    files: u64,
}

impl Chats {
    /// Resolves a chat parameter the way Telegram reports a bad one.
    pub(crate) fn resolve(&mut self, chat: ChatParam) -> Result<Target, ApiError> {
        match chat {
            ChatParam::Id(id) => Ok(Target { id, username: None }),
            ChatParam::Username(username) => Ok(self.channel(username)),
            ChatParam::Missing => Err(ApiError::bad_request("chat_id is empty")),
            ChatParam::Invalid => Err(ApiError::chat_not_found()),
        }
    }

    fn channel(&mut self, username: String) -> Target {
        let known = self.channels.len();
        let id = *self
            .channels
            .entry(username.clone())
            .or_insert_with(|| FIRST_CHANNEL_ID - i64::try_from(known).unwrap_or(0));
        Target {
            id,
            username: Some(username),
        }
    }

    /// The next message id in `chat`: 1, 2, 3, … for each chat on its own.
    pub(crate) fn next_message_id(&mut self, chat: i64) -> i64 {
        let last = self.last_message_id.entry(chat).or_insert(0);
        *last += 1;
        *last
    }

    /// A fresh file id for media the bot sends.
    pub(crate) fn next_file_id(&mut self) -> String {
        self.files += 1;
        format!("fake-file-{}", self.files)
    }

    pub(crate) fn remember(&mut self, chat: i64, message_id: i64, content: &Map<String, Value>) {
        self.contents.insert((chat, message_id), content.clone());
    }

    /// The content of a message the bot sent, if it did.
    pub(crate) fn content(&self, chat: i64, message_id: i64) -> Option<&Map<String, Value>> {
        self.contents.get(&(chat, message_id))
    }
}
