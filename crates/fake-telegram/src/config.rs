//! How a fake server is set up: the token it accepts and the rate limits it enforces.

/// The token a [`FakeConfig::default`] server accepts.
pub const DEFAULT_TOKEN: &str = "123456:TEST";

/// Settings for [`FakeTelegram::start_with`](crate::FakeTelegram::start_with).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeConfig {
    /// The one bot token the server accepts; calls with any other token are answered 401.
    /// The digits before `:` become the bot's user id, as in real tokens.
    pub token: String,
    /// Rate limits to enforce on sending methods; `None` lets every call through.
    pub limits: Option<Limits>,
}

impl Default for FakeConfig {
    fn default() -> Self {
        Self {
            token: DEFAULT_TOKEN.to_owned(),
            limits: None,
        }
    }
}

/// Telegram's flood limits for sending methods; [`Limits::default`] holds the published values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Messages one chat may receive in any one-second window.
    pub per_chat_per_sec: u32,
    /// Messages the bot may send across all chats in any one-second window.
    pub global_per_sec: u32,
    /// Messages one group chat (negative chat id) may receive in any one-minute window.
    pub per_group_per_min: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            per_chat_per_sec: 1,
            global_per_sec: 30,
            per_group_per_min: 20,
        }
    }
}
