//! One send budget per bot (docs/design/pacing.md): Telegram's limits
//! belong to the bot token, so every process that sends for a bot books its sends in one place.
//! [`SendBudget`] is the port the worker paces through; [`Pacer`] keeps the budget in the process
//! (local mode, one process for the bot), [`SharedBudget`] keeps it in a store every worker
//! container of a stack shares, through [`BudgetCells`].
//!
//! The shared budget keeps two kinds of cell: one per bot, holding the times of its last sends
//! (as many as the bot-wide limit counts) and its flood wait, and one per chat, holding the times
//! of the last sends to that chat. A send is booked with one conditional write of each, on the
//! version the process last saw: the chat's first, then the bot's, in one write with the process's
//! other bookings waiting for it. The bot's cell, as that write returned it or read once more just
//! before the call when that was longer ago than [`RECHECK_AFTER`], holds the call in a 429 any
//! container heard. A slot booked and not used is given back at the cell's next write.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::error::PortError;
use crate::ids::BotId;
use crate::pacer::{ready_in_all, with_send, Lead, Pacer, RateLimits, MINUTE, SECOND};
use crate::record::Timestamp;

pub use crate::ports::budget::{
    BudgetCell, BudgetCells, CellKey, Clear, Reserved, SendBudget, Slot, Swap, LOOK_AGAIN_AFTER,
};

#[async_trait]
impl SendBudget for Pacer {
    async fn reserve(
        &self,
        bot: &BotId,
        chat: Option<i64>,
        within: Duration,
    ) -> Result<Reserved, PortError> {
        let now = Instant::now();
        // A call no window counts is held by a flood wait only: when it leaves matters not.
        let counted = self.counts(chat);
        let lead = match counted {
            true => self.lead().get(),
            false => Duration::ZERO,
        };
        Ok(match self.reserve_within(bot, chat, (now, lead), within) {
            Ok(wait) if counted => Reserved::Booked(Slot::counted_at(chat, now + wait, lead, now)),
            Ok(wait) => Reserved::Booked(Slot::after(wait)),
            Err(wait) => Reserved::Later(wait),
        })
    }

    fn paused_for(&self, bot: &BotId) -> Duration {
        self.paused_at(bot, Instant::now())
    }

    async fn clear_to_send(&self, bot: &BotId, slot: &mut Slot) -> Result<Clear, PortError> {
        let now = Instant::now();
        if let Some(woke) = slot.starts.and_then(|starts| starts.checked_sub(slot.lead)) {
            if !slot.measured {
                self.lead().measured(now.saturating_duration_since(woke));
                slot.measured = true;
            }
        }
        let paused = self.paused_at(bot, now);
        // The windows count the call at its slot: one leaving much later could share a second
        // with the calls booked after it, so it is booked again, as with a shared budget; one
        // ready early waits for it.
        let late = slot.starts.is_some_and(|starts| now > starts + LATE);
        if paused.is_zero() && !late {
            return Ok(match slot.starts {
                Some(starts) if now < starts => Clear::After(starts - now),
                _ => Clear::Go,
            });
        }
        if let Some(starts) = slot.starts.take() {
            self.give_back(bot, slot.chat, starts);
        }
        Ok(match paused {
            wait if wait.is_zero() => Clear::Late,
            wait => Clear::Held(wait),
        })
    }

    async fn pause(&self, bot: &BotId, wait: Duration) -> Result<(), PortError> {
        self.pause_until(bot, Instant::now() + wait);
        Ok(())
    }
}

/// How often a booking starts again after another process changed a cell it booked from.
const ROUNDS: usize = 32;
/// What a booking that lost [`ROUNDS`] times in a row is told to wait before trying again.
const CONTENDED: Duration = Duration::from_millis(200);
/// How old the bot's cell, as the store last gave it for a slot, may be when the call is cleared
/// without reading it again; an early caller's wait for its slot after which it asks once more. A
/// trade of cost for certainty: a pause another process writes in these few milliseconds goes
/// unseen by this call (Telegram's in-flight grace covers a call this close behind a 429), and a
/// read for every call booked a moment before it would cost one more request per send.
pub const RECHECK_AFTER: Duration = Duration::from_millis(50);
/// How late a call may leave after its slot: half the slack between two slots of a window, so
/// calls leaving a little late still reach Telegram inside their limits, with the other half left
/// for the hosts' clocks and networks to differ.
const LATE: Duration = Duration::from_millis(50);
/// How long a cell is kept after its last booking: longer than any window it counts.
const KEEP: Duration = Duration::from_secs(24 * 3600);
/// How far behind the time of its bot's write a slot may be and still be booked: a write keeps
/// the sends of every window such a slot shares, so the cell counts each send it is booked
/// against, however late another process writes. A slot further behind is booked again, from
/// now (its call would be too late to go anyway).
const BEHIND: Duration = Duration::from_secs(1);
/// How many chats' cells a process remembers before it starts again from the store's.
const REMEMBERED_CHATS: usize = 4096;

/// A cell as a booking counts it: as last seen, less the slots this process did not use.
#[derive(Clone)]
struct Usable {
    cell: BudgetCell,
    /// The unused slots the booking's write leaves out (whether the cell still held them or not).
    left_out: Vec<Timestamp>,
}

/// A bot's budget kept in [`BudgetCells`], shared by every process that sends for the bot.
pub struct SharedBudget {
    cells: Arc<dyn BudgetCells>,
    limits: RateLimits,
    clock: Arc<dyn Clock>,
    /// The cells as this process last saw them: a booking starts from them, and a store that
    /// refuses the write hands back the cell it holds, so a booking costs no read.
    seen: Mutex<HashMap<CellKey, BudgetCell>>,
    /// How long before its slot a caller's wait ends.
    lead: Lead,
    /// The flood waits this process heard itself, by bot.
    heard: Mutex<HashMap<BotId, Timestamp>>,
    /// Slots this process booked and did not use (late, or held by a flood wait), by cell: the
    /// next write of the cell leaves them out, so a send booked again is not kept a window apart
    /// from a send that never went.
    unused: Mutex<HashMap<CellKey, Vec<Timestamp>>>,
    /// Bookings of each bot's cell waiting to be written, and what was written for them: the
    /// bookings a process makes while its last write of the cell is under way go in one write.
    queues: Mutex<HashMap<BotId, BotQueue>>,
    /// One writer of each bot's cell at a time in the process: the others' bookings wait for
    /// its write, and the next writer takes them all.
    writers: Mutex<HashMap<BotId, Arc<tokio::sync::Mutex<()>>>>,
    /// When this process last read each bot's cell for [`SendBudget::look_again`].
    looked: Mutex<HashMap<BotId, Timestamp>>,
}

/// The bookings of one bot's cell in a process, waiting or answered.
#[derive(Default)]
struct BotQueue {
    last_ticket: u64,
    waiting: Vec<Waiting>,
    answered: HashMap<u64, BotBooking>,
}

/// A booking waiting for a write of its bot's cell: its slot, chosen and held in its chat's cell
/// already.
#[derive(Clone, Copy)]
struct Waiting {
    ticket: u64,
    at: Timestamp,
}

/// What a write of the bot's cell did for one booking.
#[derive(Clone, Copy, Debug)]
enum BotBooking {
    /// The bot's cell holds the send; the cell was seen, as the write returned it, at this time.
    Booked(Timestamp),
    /// The slot no longer fits the bot's window (another process booked into it first) or a
    /// flood wait holds it: nothing was booked.
    Taken,
    /// Other processes wrote the cell first, round after round.
    Contended,
}

/// A booking's place in its bot's queue. Dropped before it was answered (its caller gave up),
/// it leaves the queue, and a slot already written for it is given back.
struct Ticket<'a> {
    budget: &'a SharedBudget,
    bot: &'a BotId,
    ticket: u64,
    at: Timestamp,
    settled: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let answer = {
            let mut queues = self.budget.queues.lock();
            let Some(queue) = queues.get_mut(self.bot) else {
                return;
            };
            queue.waiting.retain(|w| w.ticket != self.ticket);
            queue.answered.remove(&self.ticket)
        };
        if let Some(BotBooking::Booked(_)) = answer {
            self.budget
                .give_back(&CellKey::Bot(self.bot.clone()), self.at);
        }
    }
}

impl fmt::Debug for SharedBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBudget")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl SharedBudget {
    /// A budget with these limits, kept in `cells`, telling the time by `clock` (the processes
    /// sharing it must agree on the time within a few milliseconds, as NTP-synced hosts do).
    pub fn new(cells: Arc<dyn BudgetCells>, limits: RateLimits, clock: Arc<dyn Clock>) -> Self {
        Self {
            cells,
            limits,
            clock,
            seen: Mutex::new(HashMap::new()),
            lead: Lead::for_store(),
            heard: Mutex::new(HashMap::new()),
            unused: Mutex::new(HashMap::new()),
            queues: Mutex::new(HashMap::new()),
            writers: Mutex::new(HashMap::new()),
            looked: Mutex::new(HashMap::new()),
        }
    }

    fn seen(&self, key: &CellKey) -> BudgetCell {
        self.seen.lock().get(key).cloned().unwrap_or_default()
    }

    /// Reads the bot's cell for `slot` unless the store gave it within [`RECHECK_AFTER`].
    async fn freshen(&self, bot: &BotId, slot: &mut Slot) -> Result<(), PortError> {
        let fresh = slot
            .seen_at
            .is_some_and(|at| self.clock.now().since(at) <= RECHECK_AFTER);
        if !fresh {
            let key = CellKey::Bot(bot.clone());
            let stored = self.cells.read(&key).await?;
            self.saw(&key, stored);
            slot.seen_at = Some(self.clock.now());
        }
        Ok(())
    }

    /// The cell as last seen, less the slots this process booked in it and did not use: what a
    /// booking counts and writes, with the slots left out. Its version is the one seen, so the
    /// write is refused if another process wrote the cell since.
    fn usable(&self, key: &CellKey) -> Usable {
        let mut cell = self.seen(key);
        let left_out = self.unused.lock().get(key).cloned().unwrap_or_default();
        for at in &left_out {
            if let Some(i) = cell.sends.iter().position(|send| send == at) {
                cell.sends.remove(i);
            }
        }
        Usable { cell, left_out }
    }

    /// The slots a write of `key` left out are out of the store: forgets them, and only them
    /// (another call may have given one back since).
    fn written_without(&self, key: &CellKey, left_out: &[Timestamp]) {
        let mut unused = self.unused.lock();
        let Some(slots) = unused.get_mut(key) else {
            return;
        };
        for at in left_out {
            if let Some(i) = slots.iter().position(|slot| slot == at) {
                slots.remove(i);
            }
        }
        if slots.is_empty() {
            unused.remove(key);
        }
    }

    /// Keeps `slot`, which the caller will not use, to be left out of its cells' next writes.
    fn unused(&self, bot: &BotId, slot: &Slot) {
        let Some(due) = slot.due else {
            return;
        };
        if self.limits.per_second.is_some() {
            self.give_back(&CellKey::Bot(bot.clone()), due);
        }
        if let Some(chat) = slot.chat {
            self.give_back(&CellKey::Chat(bot.clone(), chat), due);
        }
    }

    /// Keeps the send at `at`, booked in `key` and never to go, to be left out of its next write.
    fn give_back(&self, key: &CellKey, at: Timestamp) {
        let now = self.clock.now();
        let mut unused = self.unused.lock();
        // A slot older than the longest window counts in nothing any more.
        unused.retain(|_, slots| {
            slots.retain(|at| now.since(*at) < MINUTE);
            !slots.is_empty()
        });
        let slots = unused.entry(key.clone()).or_default();
        // Given back twice, it is left out once: leaving out a send that will go would let
        // another through inside its window.
        if !slots.contains(&at) {
            slots.push(at);
        }
    }

    /// Books the send at `at` in `bot`'s cell, in one write with the bookings of the process's
    /// other calls that wait for the cell meanwhile.
    async fn book_bot(&self, bot: &BotId, at: Timestamp) -> Result<BotBooking, PortError> {
        let writer = self.writers.lock().entry(bot.clone()).or_default().clone();
        let me = {
            let mut queues = self.queues.lock();
            let queue = queues.entry(bot.clone()).or_default();
            queue.last_ticket += 1;
            let me = Waiting {
                ticket: queue.last_ticket,
                at,
            };
            queue.waiting.push(me);
            me
        };
        let mut ticket = Ticket {
            budget: self,
            bot,
            ticket: me.ticket,
            at,
            settled: false,
        };
        let _writing = writer.lock().await;
        let batch = {
            let mut queues = self.queues.lock();
            let queue = queues.entry(bot.clone()).or_default();
            if let Some(answer) = queue.answered.remove(&me.ticket) {
                ticket.settled = true;
                return Ok(answer);
            }
            // This call writes for every booking waiting, its own among them (put back if a
            // writer that took it was dropped before it answered).
            let mut batch = std::mem::take(&mut queue.waiting);
            if !batch.iter().any(|w| w.ticket == me.ticket) {
                batch.push(me);
            }
            batch
        };
        ticket.settled = true;
        match self.write_bot(bot, &batch).await {
            Ok(answers) => {
                let mut queues = self.queues.lock();
                let queue = queues.entry(bot.clone()).or_default();
                let mut mine = BotBooking::Contended;
                for (waiting, answer) in batch.iter().zip(answers) {
                    if waiting.ticket == me.ticket {
                        mine = answer;
                    } else {
                        queue.answered.insert(waiting.ticket, answer);
                    }
                }
                Ok(mine)
            }
            Err(error) => {
                // The others write for themselves: they wait for the cell again.
                let mut queues = self.queues.lock();
                let queue = queues.entry(bot.clone()).or_default();
                queue
                    .waiting
                    .extend(batch.iter().filter(|w| w.ticket != me.ticket));
                Err(error)
            }
        }
    }

    /// One write of `bot`'s cell booking each send of `batch` its slot still fits; the answers
    /// in the batch's order.
    async fn write_bot(
        &self,
        bot: &BotId,
        batch: &[Waiting],
    ) -> Result<Vec<BotBooking>, PortError> {
        let bot_key = CellKey::Bot(bot.clone());
        let Some(limit) = self.limits.per_second else {
            return Ok(vec![BotBooking::Booked(self.clock.now()); batch.len()]);
        };
        for _ in 0..ROUNDS {
            let seen = self.usable(&bot_key);
            let held = self.held_until(bot);
            // Read after the cell: no write this one builds on was made later than `now`.
            let now = self.clock.now();
            let oldest = now.minus(BEHIND);
            let mut sends = seen.cell.sends.clone();
            let mut answers = Vec::with_capacity(batch.len());
            let mut last = None;
            for waiting in batch {
                let at = waiting.at;
                let fits = at >= oldest
                    && held.is_none_or(|until| until <= at)
                    && ready_in_all(&[(&sends[..], limit, SECOND)], at) == at;
                if !fits {
                    answers.push(BotBooking::Taken);
                    continue;
                }
                answers.push(BotBooking::Booked(now));
                // Kept: every send a slot as far behind as `oldest` shares a window with.
                sends = with_send(&sends, at, oldest, SECOND);
                last = last.max(Some(at));
            }
            let Some(last) = last else {
                return Ok(answers);
            };
            match self
                .cells
                .swap(&bot_key, seen.cell.version, &sends, last.plus(KEEP))
                .await?
            {
                Swap::Written(cell) => {
                    self.written_without(&bot_key, &seen.left_out);
                    self.saw(&bot_key, Some(cell));
                    // The write returned the bot's cell as it is now, its pause included.
                    let written = self.clock.now();
                    for answer in &mut answers {
                        if let BotBooking::Booked(seen_at) = answer {
                            *seen_at = written;
                        }
                    }
                    return Ok(answers);
                }
                Swap::Changed(cell) => self.saw(&bot_key, cell),
            }
        }
        Ok(vec![BotBooking::Contended; batch.len()])
    }

    /// Keeps `cell`, as the store just gave it, as the last seen of `key`: even one of a lower
    /// version, since a cell the store let expire (or an operator deleted) starts again at 1. A
    /// bot's runs in one process book one after another, so nothing newer is overwritten.
    fn saw(&self, key: &CellKey, cell: Option<BudgetCell>) {
        let mut seen = self.seen.lock();
        if seen.len() >= REMEMBERED_CHATS {
            seen.retain(|key, _| matches!(key, CellKey::Bot(_)));
        }
        match cell {
            Some(cell) => {
                seen.insert(key.clone(), cell);
            }
            None => {
                seen.remove(key);
            }
        }
    }

    /// Until when `bot` is held: by the pause its cell carries as last seen, or one this process
    /// heard itself (kept apart, so that a read of the cell cannot lose it when sharing it failed).
    fn held_until(&self, bot: &BotId) -> Option<Timestamp> {
        let stored = self.seen(&CellKey::Bot(bot.clone())).paused_until;
        let heard = self.heard.lock().get(bot).copied();
        stored.max(heard)
    }

    /// Adds a send at `at` to `key`'s window of `span` (`None`: the cell counts nothing), written
    /// from `seen` at `now`; `false` when another process wrote the cell first, which is then seen.
    async fn book(
        &self,
        key: &CellKey,
        seen: &Usable,
        (at, now): (Timestamp, Timestamp),
        span: Option<Duration>,
    ) -> Result<bool, PortError> {
        let Some(span) = span else {
            return Ok(true);
        };
        let Usable {
            cell: seen,
            left_out,
        } = seen;
        let sends = with_send(&seen.sends, at, now, span);
        match self
            .cells
            .swap(key, seen.version, &sends, at.plus(KEEP))
            .await?
        {
            Swap::Written(cell) => {
                self.written_without(key, left_out);
                self.saw(key, Some(cell));
                Ok(true)
            }
            Swap::Changed(cell) => {
                self.saw(key, cell);
                Ok(false)
            }
        }
    }

    /// The earliest slot at or after `from` both cells allow.
    fn earliest(
        &self,
        (bot_id, bot): (&BotId, &BudgetCell),
        chat_cell: &BudgetCell,
        chat: i64,
        from: Timestamp,
    ) -> Timestamp {
        let from = self
            .held_until(bot_id)
            .map_or(from, |until| until.max(from));
        let windows: Vec<(&[Timestamp], u32, Duration)> = [
            self.limits
                .per_second
                .map(|limit| (&bot.sends[..], limit, SECOND)),
            self.limits
                .per_chat_per_second
                .map(|limit| (&chat_cell.sends[..], limit, SECOND)),
            self.group_limit(chat)
                .map(|limit| (&chat_cell.sends[..], limit, MINUTE)),
        ]
        .into_iter()
        .flatten()
        .collect();
        ready_in_all(&windows, from)
    }

    fn group_limit(&self, chat: i64) -> Option<u32> {
        self.limits.per_group_per_minute.filter(|_| chat < 0)
    }

    /// The longest window a chat's cell counts sends over: a minute for a group, a second for a
    /// private chat; `None` when the cell counts nothing.
    fn chat_span(&self, chat: i64) -> Option<Duration> {
        match (self.limits.per_chat_per_second, self.group_limit(chat)) {
            (_, Some(_)) => Some(MINUTE),
            (Some(_), None) => Some(SECOND),
            (None, None) => None,
        }
    }
}

#[async_trait]
impl SendBudget for SharedBudget {
    async fn reserve(
        &self,
        bot: &BotId,
        chat: Option<i64>,
        within: Duration,
    ) -> Result<Reserved, PortError> {
        let chat = chat.filter(|_| self.limits != RateLimits::UNLIMITED);
        let Some(chat) = chat else {
            // A call that sends no message (or any call, with every limit lifted) is held by a
            // flood wait only, as this process last heard it: it books nothing, and reads nothing.
            return Ok(match self.paused_for(bot) {
                wait if wait > within => Reserved::Later(wait),
                wait => Reserved::Booked(Slot::after(wait)),
            });
        };
        let (bot_key, chat_key) = (CellKey::Bot(bot.clone()), CellKey::Chat(bot.clone(), chat));
        for _ in 0..ROUNDS {
            let (now, lead) = (self.clock.now(), self.lead.get());
            let chat_cell = self.usable(&chat_key);
            let at = self.earliest(
                (bot, &self.usable(&bot_key).cell),
                &chat_cell.cell,
                chat,
                now.plus(lead),
            );
            if at.since(now) > within + lead {
                return Ok(Reserved::Later(at.since(now)));
            }
            // The chat's cell first, the bot's last: the bot's cell, with any flood wait, is then
            // as fresh as the booking can leave it when the call is cleared.
            if !self
                .book(&chat_key, &chat_cell, (at, now), self.chat_span(chat))
                .await?
            {
                continue;
            }
            let booked = self.book_bot(bot, at).await?;
            let BotBooking::Booked(seen_at) = booked else {
                // The chat's slot just booked goes unused.
                if self.chat_span(chat).is_some() {
                    self.give_back(&chat_key, at);
                }
                match booked {
                    BotBooking::Contended => break,
                    _ => continue,
                }
            };
            let now = self.clock.now();
            let wake = at.minus(lead);
            return Ok(Reserved::Booked(Slot {
                wait: wake.since(now),
                due: Some(at),
                lead,
                measured: false,
                seen_at: self.limits.per_second.map(|_| seen_at),
                ready: false,
                chat: self.chat_span(chat).map(|_| chat),
                starts: None,
            }));
        }
        Ok(Reserved::Later(CONTENDED))
    }

    fn paused_for(&self, bot: &BotId) -> Duration {
        let now = self.clock.now();
        self.held_until(bot)
            .map_or(Duration::ZERO, |until| until.since(now))
    }

    async fn ready(&self, bot: &BotId, slot: &mut Slot) -> Result<Clear, PortError> {
        let Some(due) = slot.due else {
            return Ok(Clear::Go);
        };
        self.freshen(bot, slot).await?;
        slot.ready = true;
        let now = self.clock.now();
        let paused = self.paused_for(bot);
        if !paused.is_zero() {
            self.unused(bot, slot);
            return Ok(Clear::Held(paused));
        }
        if now.since(due) > LATE {
            self.unused(bot, slot);
            return Ok(Clear::Late);
        }
        Ok(Clear::Go)
    }

    async fn clear_to_send(&self, bot: &BotId, slot: &mut Slot) -> Result<Clear, PortError> {
        let Some(due) = slot.due else {
            return Ok(match self.paused_for(bot) {
                wait if wait.is_zero() => Clear::Go,
                wait => Clear::Held(wait),
            });
        };
        // Read just before the caller's write, the cell needs no second read after it: that read
        // would stand between the intent and the call.
        if !std::mem::take(&mut slot.ready) {
            self.freshen(bot, slot).await?;
        }
        let now = self.clock.now();
        if !slot.measured {
            let woke = due.minus(slot.lead);
            self.lead.measured(now.since(woke));
            slot.measured = true;
        }
        let paused = self.paused_for(bot);
        if !paused.is_zero() {
            self.unused(bot, slot);
            return Ok(Clear::Held(paused));
        }
        if now < due {
            return Ok(Clear::After(due.since(now)));
        }
        if now.since(due) > LATE {
            self.unused(bot, slot);
            return Ok(Clear::Late);
        }
        Ok(Clear::Go)
    }

    async fn pause(&self, bot: &BotId, wait: Duration) -> Result<(), PortError> {
        let until = self.clock.now().plus(wait);
        // Heard here first: this process holds its own calls even if the write fails.
        {
            let mut heard = self.heard.lock();
            let held = heard.entry(bot.clone()).or_insert(until);
            *held = (*held).max(until);
        }
        let stored = self.cells.pause(bot, until, until.plus(KEEP)).await?;
        self.saw(&CellKey::Bot(bot.clone()), stored);
        Ok(())
    }

    async fn look_again(&self, bot: &BotId) -> Result<(), PortError> {
        let now = self.clock.now();
        {
            let mut looked = self.looked.lock();
            let last = looked.get(bot).copied();
            if last.is_some_and(|at| now.since(at) < LOOK_AGAIN_AFTER) {
                return Ok(());
            }
            // Taken before the read: the sends meanwhile do not read too.
            looked.insert(bot.clone(), now);
        }
        let key = CellKey::Bot(bot.clone());
        let stored = self.cells.read(&key).await?;
        self.saw(&key, stored);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn booked(pacer: &Pacer, bot: &BotId, chat: i64) -> Slot {
        match SendBudget::reserve(pacer, bot, Some(chat), MINUTE).await {
            Ok(Reserved::Booked(slot)) => slot,
            other => panic!("a slot within a minute, not {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_of_the_process_s_budget_gone_by_is_booked_again_and_holds_nobody_back() {
        let pacer = Pacer::new(RateLimits::default());
        let bot = BotId::new("late").expect("a valid bot id");
        let mut slot = booked(&pacer, &bot, 7).await;
        assert_eq!(slot.wait, Duration::ZERO);
        // The caller got to its check later than the windows allow for.
        tokio::time::advance(LATE + Duration::from_millis(1)).await;
        assert_eq!(
            pacer.clear_to_send(&bot, &mut slot).await.expect("answers"),
            Clear::Late
        );
        // Never made, that send no longer holds the chat's next one a second back.
        let mut again = booked(&pacer, &bot, 7).await;
        assert_eq!(again.wait, Duration::ZERO);
        // Booked as far ahead as the first caller took to its check, less the time the slowest
        // caller may end after its slot, it is early before that.
        let lead = LATE + Duration::from_millis(1) - crate::pacer::LATE_WITHIN;
        tokio::time::advance(lead - Duration::from_millis(10)).await;
        assert_eq!(
            pacer
                .clear_to_send(&bot, &mut again)
                .await
                .expect("answers"),
            Clear::After(Duration::from_millis(10))
        );
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(
            pacer
                .clear_to_send(&bot, &mut again)
                .await
                .expect("answers"),
            Clear::Go
        );
        // A flood wait heard meanwhile gives the slot back as well.
        let mut held = booked(&pacer, &bot, 8).await;
        pacer.pause_until(&bot, Instant::now() + Duration::from_secs(3));
        assert_eq!(
            pacer.clear_to_send(&bot, &mut held).await.expect("answers"),
            Clear::Held(Duration::from_secs(3))
        );
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(booked(&pacer, &bot, 8).await.wait, Duration::ZERO);
    }
}
