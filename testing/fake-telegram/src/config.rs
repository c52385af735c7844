//! How a fake server is set up: the token it accepts, the rate limits it enforces, the clock those
//! limits read, how long a long poll may wait, and whether users pay the invoices they get.

use std::time::Duration;

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
    /// The time the rate limits and the recorded calls read.
    pub clock: FakeClock,
    /// The longest a `getUpdates` with a positive `timeout` waits for an update, whatever the
    /// client asked for: short, so a test polling an empty queue does not wait Telegram's minutes.
    pub long_poll_cap: Duration,
    /// Every user the bot sends an invoice to pays it at once: the fake sends the bot the
    /// pre-checkout query a Pay button would (`tgq fake-telegram --pay`).
    pub pay_invoices: bool,
}

impl Default for FakeConfig {
    fn default() -> Self {
        Self {
            token: DEFAULT_TOKEN.to_owned(),
            limits: None,
            clock: FakeClock::Real,
            long_poll_cap: Duration::from_secs(1),
            pay_invoices: false,
        }
    }
}

/// Where the fake's time comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FakeClock {
    /// The machine's monotonic clock, moved on by
    /// [`FakeTelegram::advance_clock`](crate::FakeTelegram::advance_clock) as well.
    #[default]
    Real,
    /// Stands still until [`FakeTelegram::advance_clock`](crate::FakeTelegram::advance_clock)
    /// moves it: every call lands in the same instant however slowly the test runs, so a rate
    /// window's edges are exact.
    Frozen,
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
    /// Paid broadcasts (`allow_paid_broadcast`) the bot may send in any one-second window; they
    /// count here instead of in `global_per_sec`.
    pub paid_per_sec: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            per_chat_per_sec: 1,
            global_per_sec: 30,
            per_group_per_min: 20,
            paid_per_sec: 1000,
        }
    }
}
