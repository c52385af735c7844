//! The send budget's ports (docs/design/pacing.md): [`SendBudget`], which the worker and the
//! broadcasts pace every call through, and [`BudgetCells`], where a budget shared by a stack's
//! containers keeps its cells; and [`PauseMemory`], where local mode's pacer keeps its flood
//! waits and last sends across restarts. The budgets themselves are in `usecases/budget.rs` and
//! `usecases/pacer.rs`.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::error::PortError;
use crate::ids::BotId;
use crate::record::Timestamp;

/// The pacing the worker asks for before each call to Telegram, for every bot it sends for.
#[async_trait]
pub trait SendBudget: Send + Sync {
    /// Books the next slot for a call of `bot`: a send to `chat`, counted against Telegram's
    /// limits, when `chat` is given; any other call, held only by a flood wait, when not. A slot
    /// further off than `within` is not booked: [`Reserved::Later`] says how far off it is.
    async fn reserve(
        &self,
        bot: &BotId,
        chat: Option<i64>,
        within: Duration,
    ) -> Result<Reserved, PortError>;

    /// How long every call of `bot` is held by a flood wait, as this process last heard it
    /// (no request is made).
    fn paused_for(&self, bot: &BotId) -> Duration;

    /// Asked when a slot's wait ends, before what the caller writes ahead of its call (an
    /// intent): whether the slot still stands. A budget kept in a store learns here any flood
    /// wait another process heard, reading the bot's cell when what this process saw of it is
    /// older than [`RECHECK_AFTER`](crate::budget::RECHECK_AFTER), so that the check after that
    /// write needs no request and a crash between the write and the call is as short as it can
    /// be. [`Clear::Held`] and [`Clear::Late`] give the slot back: book again, nothing written.
    async fn ready(&self, bot: &BotId, slot: &mut Slot) -> Result<Clear, PortError> {
        let _ = (bot, slot);
        Ok(Clear::Go)
    }

    /// Asked just before the call a slot was booked for, after the caller waited for it: whether
    /// the call may go now.
    async fn clear_to_send(&self, bot: &BotId, slot: &mut Slot) -> Result<Clear, PortError>;

    /// [`clear_to_send`](Self::clear_to_send) until it answers: a slot not quite due is waited
    /// for and asked about again, unless the wait was short enough that the check before it
    /// still stands ([`RECHECK_AFTER`](crate::budget::RECHECK_AFTER)). Whether the call may go
    /// (`false`: the slot was given back, book again), and how long it slept for its slot.
    async fn wait_until_clear(
        &self,
        bot: &BotId,
        slot: &mut Slot,
    ) -> Result<(bool, Duration), PortError> {
        let mut slept = Duration::ZERO;
        loop {
            match self.clear_to_send(bot, slot).await? {
                Clear::Go => return Ok((true, slept)),
                Clear::Held(_) | Clear::Late => return Ok((false, slept)),
                Clear::After(wait) => {
                    tokio::time::sleep(wait).await;
                    slept += wait;
                    if wait <= crate::budget::RECHECK_AFTER {
                        return Ok((true, slept));
                    }
                }
            }
        }
    }

    /// Holds every call of `bot`, in every process sharing the budget, for `wait`: Telegram
    /// named it in a 429.
    async fn pause(&self, bot: &BotId, wait: Duration) -> Result<(), PortError>;

    /// Learns the flood wait any process sharing the budget heard for `bot`, when what this one
    /// knows of it is older than [`LOOK_AGAIN_AFTER`]: for sends that book no slot (the paid
    /// lane), which would otherwise be held only by the pauses this process heard itself. At most
    /// one read of the store a bot in that time; a budget kept in this process alone knows
    /// already.
    async fn look_again(&self, bot: &BotId) -> Result<(), PortError> {
        let _ = bot;
        Ok(())
    }
}

/// How old what a process knows of a bot's flood wait may be before a send that books no slot
/// looks again: a 429 another process heard holds this one within a second.
pub const LOOK_AGAIN_AFTER: Duration = Duration::from_secs(1);

/// The answer of [`SendBudget::reserve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserved {
    /// A slot is booked: wait [`Slot::wait`], then ask [`SendBudget::clear_to_send`].
    Booked(Slot),
    /// The next slot is this far off, more than the caller may wait; nothing was booked.
    Later(Duration),
}

/// A booked send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// How long to wait before getting ready for the call.
    pub wait: Duration,
    /// When the call may reach Telegram, for a budget that keeps its slots in a store: the call
    /// must go neither before nor much after it.
    pub(crate) due: Option<Timestamp>,
    /// How long before `due` the wait ends, so that what the caller does before the call ends
    /// near `due`.
    pub(crate) lead: Duration,
    /// Whether the time from the end of the wait to the first check was measured already.
    pub(crate) measured: bool,
    /// When the store last gave this process the bot's cell for this slot (the booking's write
    /// returns it): a check within [`RECHECK_AFTER`](crate::budget::RECHECK_AFTER) of it needs no read.
    pub(crate) seen_at: Option<Timestamp>,
    /// Whether [`SendBudget::ready`] saw the bot's cell fresh for this slot and nothing was
    /// checked since: the next check needs no read, however long the caller's write took.
    pub(crate) ready: bool,
    /// The chat whose cell holds this slot, when it counts in one.
    pub(crate) chat: Option<i64>,
    /// When the call may go, for a budget kept in the process: the moment its windows count.
    pub(crate) starts: Option<Instant>,
}

impl Slot {
    /// When the call may reach Telegram, for a budget kept in a store; `None` for one kept in
    /// the process.
    pub fn due(&self) -> Option<Timestamp> {
        self.due
    }

    /// A slot held by a flood wait only, booked nowhere: its wait is all there is to it.
    pub(crate) fn after(wait: Duration) -> Self {
        Self {
            wait,
            due: None,
            lead: Duration::ZERO,
            measured: true,
            seen_at: None,
            ready: false,
            chat: None,
            starts: None,
        }
    }

    /// A slot of the in-process budget: a send to `chat` counted in its windows at `starts`,
    /// its wait ending `lead` before.
    pub(crate) fn counted_at(
        chat: Option<i64>,
        starts: Instant,
        lead: Duration,
        now: Instant,
    ) -> Self {
        Self {
            chat,
            starts: Some(starts),
            lead,
            measured: false,
            ..Self::after(starts.saturating_duration_since(now + lead))
        }
    }
}

/// The answer of [`SendBudget::clear_to_send`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clear {
    /// Send now.
    Go,
    /// Send after this short wait: the slot has not begun yet.
    After(Duration),
    /// A flood wait began after the slot was booked and holds the bot this much longer: book
    /// again. The slot is given back: it holds no later send.
    Held(Duration),
    /// The slot went by while the caller got ready: other processes may be sending in the
    /// moments after it, so book again. The slot is given back: it holds no later send.
    Late,
}

/// A cell of a bot's shared budget.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CellKey {
    /// The bot's own cell: its last sends to any chat, and its flood wait.
    Bot(BotId),
    /// The last sends of the bot to one chat.
    Chat(BotId, i64),
}

/// A cell as the store keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BudgetCell {
    /// One more with every write; 0 for a cell never written.
    pub version: u64,
    /// The booked times of the last sends, oldest first.
    pub sends: Vec<Timestamp>,
    /// Until when a flood wait holds the bot (a bot's cell only).
    pub paused_until: Option<Timestamp>,
}

/// The answer of [`BudgetCells::swap`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Swap {
    /// The sends were written; the cell as it is now.
    Written(BudgetCell),
    /// The cell was written by someone else since the version given; the cell as it is (`None`:
    /// it was deleted, and counts as never written).
    Changed(Option<BudgetCell>),
}

/// Where a shared budget keeps its cells (DynamoDB on a stack): conditional writes on a
/// version, so that two processes booking at once cannot both take the same slot.
#[async_trait]
pub trait BudgetCells: Send + Sync {
    /// Replaces the cell's sends with `sends` and counts one more version, if the cell's version
    /// is still `seen`; the cell is kept at least until `keep_until`.
    async fn swap(
        &self,
        key: &CellKey,
        seen: u64,
        sends: &[Timestamp],
        keep_until: Timestamp,
    ) -> Result<Swap, PortError>;

    /// The cell as it is now (a strongly consistent read); `None` when it was never written.
    async fn read(&self, key: &CellKey) -> Result<Option<BudgetCell>, PortError>;

    /// Holds `bot` until `until` unless it is held longer already, counting one more version of
    /// its cell so that a booking made on the version before is refused; the cell is kept at
    /// least until `keep_until`. Returns the bot's cell as it is now.
    async fn pause(
        &self,
        bot: &BotId,
        until: Timestamp,
        keep_until: Timestamp,
    ) -> Result<Option<BudgetCell>, PortError>;
}

/// Where a pacer keeps what must outlive the process: Telegram's limits bind the bot, not the
/// process that sent, so a process started inside a flood wait must not send into it, nor send to
/// a chat again within a second (a group within its minute) of the last run's sends (local mode
/// keeps both in its data directory).
pub trait PauseMemory: Send + Sync + std::fmt::Debug {
    /// Keeps that every call of `bot` waits until `until`.
    fn remember(&self, bot: &BotId, until: Timestamp);

    /// Keeps that `bot` sends to `chat` at `at`, counted against that chat's limits.
    fn sent(&self, bot: &BotId, chat: i64, at: Timestamp);
}

/// What an earlier process's [`PauseMemory`] kept: its flood waits, and its sends of the last
/// minute.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Remembered {
    /// Each bot's flood wait and when it ends.
    pub waits: Vec<(BotId, Timestamp)>,
    /// Each send: its bot, its chat and when it was made.
    pub sends: Vec<(BotId, i64, Timestamp)>,
}
