//! Telegram's pacing in the worker (docs/design/pacing.md): a process-wide limiter per
//! bot that spaces sends to Telegram's published limits, and a pause of every send of a bot after a
//! 429 named a wait. One [`Pacer`] is shared by every run of the process (a Lambda container, or all
//! of `tgq local`'s worker loops); a [`PauseMemory`] carries its flood waits over to the next
//! process.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::clock::{Clock, SystemClock};
use crate::defaults;
use crate::ids::BotId;
use crate::record::Timestamp;

pub use crate::ports::budget::{PauseMemory, Remembered};

/// Telegram's flood limits, per bot; `None` lifts a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimits {
    /// Messages per second overall (`TGQ_RATE_PER_SECOND`, default 30).
    pub per_second: Option<u32>,
    /// Messages per second to one chat (`TGQ_RATE_PER_CHAT_PER_SECOND`, default 1).
    pub per_chat_per_second: Option<u32>,
    /// Messages per minute to one group, supergroup or channel (`TGQ_RATE_PER_GROUP_PER_MINUTE`,
    /// default 20).
    pub per_group_per_minute: Option<u32>,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            per_second: Some(defaults::RATE_PER_SECOND),
            per_chat_per_second: Some(defaults::RATE_PER_CHAT_PER_SECOND),
            per_group_per_minute: Some(defaults::RATE_PER_GROUP_PER_MINUTE),
        }
    }
}

impl RateLimits {
    /// No limits at all: for tests that are not about pacing.
    pub const UNLIMITED: RateLimits = RateLimits {
        per_second: None,
        per_chat_per_second: None,
        per_group_per_minute: None,
    };

    /// Whether a send to `chat` counts against any of these limits.
    pub(crate) fn count(&self, chat: i64) -> bool {
        self.per_second.is_some()
            || self.per_chat_per_second.is_some()
            || (chat < 0 && self.per_group_per_minute.is_some())
    }
}

/// Telegram counts a send when it arrives; a little slack keeps two sends that left a window apart
/// from arriving inside one.
pub(crate) const SLACK: Duration = Duration::from_millis(100);
pub(crate) const SECOND: Duration = Duration::from_secs(1);
pub(crate) const MINUTE: Duration = Duration::from_secs(60);

/// A point in time a window counts sends at: the process's monotonic clock for a [`Pacer`],
/// wall-clock milliseconds for a budget kept in a store.
pub(crate) trait Moment: Copy + Ord {
    /// This moment moved on by `d`.
    fn after(self, d: Duration) -> Self;
}

impl Moment for Instant {
    fn after(self, d: Duration) -> Self {
        self + d
    }
}

impl Moment for Timestamp {
    fn after(self, d: Duration) -> Self {
        self.plus(d)
    }
}

/// The earliest moment at or after `from` at which one more send keeps at most `limit` of
/// `sends` (booked send times, in order) in any `span` and its slack. It may come before sends
/// booked later: a chat's slot a second off must not hold back the bot's sends to other chats.
pub(crate) fn ready<T: Moment>(sends: &[T], from: T, limit: u32, span: Duration) -> T {
    let limit = limit.max(1) as usize;
    let width = span + SLACK;
    // Whether a send at `at` keeps every window holding it under the limit. The fullest window
    // holding `at` can be moved on until it starts at `at` or at a send before it.
    let fits = |at: T| {
        let starts = sends
            .iter()
            .copied()
            .filter(|s| *s <= at && s.after(width) > at)
            .chain(std::iter::once(at));
        starts.into_iter().all(|start| {
            let end = start.after(width);
            sends.iter().filter(|s| **s >= start && **s < end).count() < limit
        })
    };
    // A send only ever fits more once an earlier one leaves its windows: `from`, or the moment a
    // booked send is a window's width old. The last of those always fits.
    let mut candidates: Vec<T> = sends
        .iter()
        .map(|s| s.after(width))
        .filter(|at| *at > from)
        .collect();
    candidates.push(from);
    candidates.sort();
    candidates.into_iter().find(|at| fits(*at)).unwrap_or(from)
}

/// The earliest moment at or after `from` at which every one of `windows` (its sends, limit and
/// span) lets one more send in: a moment one window allows may be one another refuses, so they
/// are asked again until they agree.
pub(crate) fn ready_in_all<T: Moment>(windows: &[(&[T], u32, Duration)], from: T) -> T {
    let mut at = from;
    loop {
        let next = windows.iter().fold(at, |at, (sends, limit, span)| {
            ready(sends, at, *limit, *span)
        });
        if next == at {
            return at;
        }
        at = next;
    }
}

/// `sends` (in order) with a send at `at` added in its place, without the sends too old to share
/// a window of `span` and its slack with anything booked from `now` on.
pub(crate) fn with_send<T: Moment>(sends: &[T], at: T, now: T, span: Duration) -> Vec<T> {
    let width = span + SLACK;
    let mut next: Vec<T> = sends
        .iter()
        .copied()
        .filter(|s| s.after(width) > now)
        .collect();
    let place = next.partition_point(|s| *s <= at);
    next.insert(place, at);
    next
}

/// How long before its slot a caller's wait ends when nothing has been measured yet.
const FIRST_LEAD: Duration = Duration::from_millis(50);
/// The bounds of the lead: below the first, a store's jitter makes calls late; above the second,
/// the store is too slow for the budget to help and a call rather waits a little longer.
const MIN_LEAD: Duration = Duration::from_millis(5);
const MAX_LEAD: Duration = Duration::from_secs(1);
/// How long after its slot the slowest of the latest callers may end its write: 10 ms inside the
/// 50 ms a slot may be late, for a caller a little slower than any measured.
pub(crate) const LATE_WITHIN: Duration = Duration::from_millis(40);
/// How many of the latest measurements the lead is taken from.
const LEAD_SAMPLES: usize = 8;
/// How long the latest callers took from the end of their wait to their check: what they do
/// between (a reply's or a broadcast send's intent written) ends near their slot when the wait
/// ends this much before it.
#[derive(Debug)]
pub(crate) struct Lead {
    samples: Mutex<VecDeque<Duration>>,
    /// The lead before anything was measured, and the least one.
    first: Duration,
    least: Duration,
}

impl Lead {
    /// A lead kept for a store: a few milliseconds at least, so a store's jitter makes no call
    /// late.
    pub(crate) fn for_store() -> Self {
        Self::new(FIRST_LEAD, MIN_LEAD)
    }

    /// A lead kept in the process: none until a caller took a while.
    pub(crate) fn in_process() -> Self {
        Self::new(Duration::ZERO, Duration::ZERO)
    }

    fn new(first: Duration, least: Duration) -> Self {
        Self {
            samples: Mutex::new(VecDeque::new()),
            first,
            least,
        }
    }

    /// The slowest of the latest measurements less [`LATE_WITHIN`], or their third quartile when
    /// that is shorter. A store whose writes vary by less than [`LATE_WITHIN`] leaves no caller
    /// early: each ends its write at its slot or a little after, inside the 50 ms the budgets
    /// allow, and calls as the write ends, so a broadcast send's intent is on record only for the
    /// moment before its call, all a crash can leave uncertain with no call made. A store that
    /// varies more keeps the third quartile: a slower caller is late and books again, a faster one
    /// waits the difference, and no lead grows with the store's worst moments, which would hold
    /// each send that much longer and slow a lane whose sends in flight are few.
    pub(crate) fn get(&self) -> Duration {
        let mut samples: Vec<Duration> = self.samples.lock().iter().copied().collect();
        if samples.is_empty() {
            return self.first;
        }
        samples.sort();
        let slowest = samples[samples.len() - 1].saturating_sub(LATE_WITHIN);
        let third_quartile = samples[samples.len() * 3 / 4];
        slowest.min(third_quartile).clamp(self.least, MAX_LEAD)
    }

    /// Counts a caller that took `took` from the end of its wait to its check.
    pub(crate) fn measured(&self, took: Duration) {
        let mut samples = self.samples.lock();
        samples.push_back(took);
        while samples.len() > LEAD_SAMPLES {
            samples.pop_front();
        }
    }
}

/// The limiter of every bot of the process.
#[derive(Debug)]
pub struct Pacer {
    limits: RateLimits,
    bots: Mutex<HashMap<BotId, BotPace>>,
    /// How long before its slot a call's wait ends, for what its caller does before the check.
    lead: Lead,
    memory: Option<Arc<dyn PauseMemory>>,
}

#[derive(Debug, Default)]
struct BotPace {
    overall: Window,
    chats: HashMap<i64, Window>,
    groups: HashMap<i64, Window>,
    paused_until: Option<Instant>,
    /// Sends booked since the windows of idle chats were last let go.
    since_evicted: usize,
}

/// Sends a bot books between two lookups for the windows of chats that went idle: a broadcast to a
/// million chats leaves about this many windows behind at any time, not a million.
const EVICT_EVERY: usize = 4096;

impl BotPace {
    /// Lets go of the windows that hold no send a limit still counts at `now`: a chat's after its
    /// second, a group's after its minute.
    fn evict_idle(&mut self, now: Instant) {
        self.since_evicted += 1;
        if self.since_evicted < EVICT_EVERY {
            return;
        }
        self.since_evicted = 0;
        let counts =
            |window: &Window, span: Duration| window.0.last().is_some_and(|at| *at + span > now);
        self.chats.retain(|_, window| counts(window, SECOND));
        self.groups.retain(|_, window| counts(window, MINUTE));
    }
}

/// The times of the sends reserved in one window, in order.
#[derive(Debug, Default)]
struct Window(Vec<Instant>);

impl Window {
    fn reserve(&mut self, at: Instant, now: Instant, span: Duration) {
        self.0 = with_send(&self.0, at, now, span);
    }

    /// Takes one send booked at `at` out, if the window holds one.
    fn remove(&mut self, at: Instant) {
        if let Some(place) = self.0.iter().position(|sent| *sent == at) {
            self.0.remove(place);
        }
    }
}

impl Pacer {
    /// A limiter with these limits.
    pub fn new(limits: RateLimits) -> Self {
        Self {
            limits,
            bots: Mutex::new(HashMap::new()),
            lead: Lead::in_process(),
            memory: None,
        }
    }

    /// A limiter that hands every new flood wait and every send to `memory`, holds the bots of
    /// `remembered` (what `memory` kept for an earlier process) until their waits end, and counts
    /// that process's sends of the last minute in their chats' windows.
    pub fn remembering(
        limits: RateLimits,
        memory: Arc<dyn PauseMemory>,
        remembered: &Remembered,
    ) -> Self {
        let pacer = Self::new(limits);
        let (now, wall) = (Instant::now(), SystemClock.now());
        for (bot, until) in &remembered.waits {
            if *until > wall {
                pacer.hold(bot, now + until.since(wall));
            }
        }
        {
            let mut bots = pacer.bots.lock();
            for (bot, chat, at) in &remembered.sends {
                // An instant before this process began, as far back as it was before `wall`.
                let Some(at) = now.checked_sub(wall.since(*at)) else {
                    continue;
                };
                let pace = bots.entry(bot.clone()).or_default();
                pace.overall.reserve(at, now, SECOND);
                pace.chats
                    .entry(*chat)
                    .or_default()
                    .reserve(at, now, SECOND);
                if *chat < 0 {
                    pace.groups
                        .entry(*chat)
                        .or_default()
                        .reserve(at, now, MINUTE);
                }
            }
        }
        Self {
            memory: Some(memory),
            ..pacer
        }
    }

    /// Reserves the next slot for a call of `bot`: a send to `chat` (counted against the limits)
    /// when `chat` is given, any other call (only held by a pause) when not. Returns how long to
    /// wait before making the call.
    #[cfg(test)]
    pub(crate) fn reserve(&self, bot: &BotId, chat: Option<i64>, now: Instant) -> Duration {
        self.reserve_within(bot, chat, (now, Duration::ZERO), Duration::MAX)
            .unwrap_or_else(|wait| wait)
    }

    /// [`Pacer::reserve`] at `now`, for a slot `lead` or more ahead (what the caller does before
    /// its call takes that long), when the slot comes within `within` of that. A later slot is
    /// not taken, and its wait is the error: the caller gives the call up for now, and a slot it
    /// booked without using it would push every later call of that chat back for nothing. The
    /// wait is from `now` to the slot.
    pub(crate) fn reserve_within(
        &self,
        bot: &BotId,
        chat: Option<i64>,
        (now, lead): (Instant, Duration),
        within: Duration,
    ) -> Result<Duration, Duration> {
        let within = within.saturating_add(lead);
        let mut bots = self.bots.lock();
        let pace = bots.entry(bot.clone()).or_default();
        let from = now + lead;
        let mut at = pace.paused_until.map_or(from, |until| until.max(from));
        let Some(chat) = chat else {
            return match at - now {
                wait if wait > within => Err(wait),
                wait => Ok(wait),
            };
        };
        let group_limit = self.limits.per_group_per_minute.filter(|_| chat < 0);
        let chat_window = pace.chats.entry(chat).or_default().0.clone();
        let group_window = pace.groups.entry(chat).or_default().0.clone();
        let windows: Vec<(&[Instant], u32, Duration)> = [
            self.limits
                .per_second
                .map(|limit| (&pace.overall.0[..], limit, SECOND)),
            self.limits
                .per_chat_per_second
                .map(|limit| (&chat_window[..], limit, SECOND)),
            group_limit.map(|limit| (&group_window[..], limit, MINUTE)),
        ]
        .into_iter()
        .flatten()
        .collect();
        at = ready_in_all(&windows, at);
        if at - now > within {
            return Err(at - now);
        }
        if self.limits.per_second.is_some() {
            pace.overall.reserve(at, now, SECOND);
        }
        if self.limits.per_chat_per_second.is_some() {
            pace.chats.entry(chat).or_default().reserve(at, now, SECOND);
        }
        if group_limit.is_some() {
            pace.groups
                .entry(chat)
                .or_default()
                .reserve(at, now, MINUTE);
        }
        pace.evict_idle(now);
        let wait = at - now;
        drop(bots);
        // Kept outside the lock: the next process counts it in the chat's windows.
        let limited = self.limits.per_chat_per_second.is_some() || group_limit.is_some();
        if let Some(memory) = self.memory.as_ref().filter(|_| limited) {
            memory.sent(bot, chat, SystemClock.now().plus(wait));
        }
        Ok(wait)
    }

    /// Takes back the send to `chat` booked at `at` and never made: it no longer holds back
    /// the calls booked after it.
    pub(crate) fn give_back(&self, bot: &BotId, chat: Option<i64>, at: Instant) {
        let Some(chat) = chat else {
            return;
        };
        let mut bots = self.bots.lock();
        let Some(pace) = bots.get_mut(bot) else {
            return;
        };
        pace.overall.remove(at);
        for windows in [&mut pace.chats, &mut pace.groups] {
            if let Some(window) = windows.get_mut(&chat) {
                window.remove(at);
            }
        }
    }

    /// Whether a send to `chat` counts against any limit.
    pub(crate) fn counts(&self, chat: Option<i64>) -> bool {
        chat.is_some_and(|chat| self.limits.count(chat))
    }

    /// How long before its slot a call's wait ends.
    pub(crate) fn lead(&self) -> &Lead {
        &self.lead
    }

    /// How long every call of `bot` is still held by a flood wait.
    pub(crate) fn paused_at(&self, bot: &BotId, now: Instant) -> Duration {
        let bots = self.bots.lock();
        bots.get(bot)
            .and_then(|pace| pace.paused_until)
            .map_or(Duration::ZERO, |until| until.saturating_duration_since(now))
    }

    /// Holds every call of `bot` until `until`: Telegram named a wait in a 429.
    pub(crate) fn pause_until(&self, bot: &BotId, until: Instant) {
        if self.hold(bot, until) {
            if let Some(memory) = &self.memory {
                let left = until.saturating_duration_since(Instant::now());
                memory.remember(bot, SystemClock.now().plus(left));
            }
        }
    }

    /// Holds every call of `bot` until `until`; says whether that lengthened its pause.
    fn hold(&self, bot: &BotId, until: Instant) -> bool {
        let mut bots = self.bots.lock();
        let pace = bots.entry(bot.clone()).or_default();
        let longer = pace.paused_until.is_none_or(|p| until > p);
        if longer {
            pace.paused_until = Some(until);
        }
        longer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot(name: &str) -> BotId {
        BotId::new(name).unwrap()
    }

    #[test]
    fn sends_to_one_chat_are_spaced_a_second_apart_and_other_chats_go_on() {
        let pacer = Pacer::new(RateLimits::default());
        let now = Instant::now();
        assert_eq!(pacer.reserve(&bot("a"), Some(5), now), Duration::ZERO);
        let second = pacer.reserve(&bot("a"), Some(5), now);
        assert!(second >= SECOND && second <= SECOND + SLACK, "{second:?}");
        assert_eq!(
            pacer.reserve(&bot("a"), Some(6), now + second),
            Duration::ZERO
        );
        assert_eq!(pacer.reserve(&bot("b"), Some(5), now), Duration::ZERO);
    }

    #[test]
    fn a_slot_too_far_off_is_not_taken_so_it_does_not_push_the_chat_back() {
        let pacer = Pacer::new(RateLimits::default());
        let now = Instant::now();
        assert_eq!(pacer.reserve(&bot("a"), Some(5), now), Duration::ZERO);
        let refused = pacer
            .reserve_within(
                &bot("a"),
                Some(5),
                (now, Duration::ZERO),
                Duration::from_millis(250),
            )
            .unwrap_err();
        assert!(refused >= SECOND, "{refused:?}");
        // Given up, the slot stays free: the next call a second on needs no wait.
        assert_eq!(
            pacer.reserve_within(
                &bot("a"),
                Some(5),
                (now + SECOND + SLACK, Duration::ZERO),
                Duration::ZERO
            ),
            Ok(Duration::ZERO)
        );
    }

    #[derive(Debug, Default)]
    struct Forgetful;

    impl PauseMemory for Forgetful {
        fn remember(&self, _: &BotId, _: Timestamp) {}
        fn sent(&self, _: &BotId, _: i64, _: Timestamp) {}
    }

    #[test]
    fn sends_an_earlier_process_made_count_in_their_chat_s_second_and_group_s_minute() {
        let wall = SystemClock.now();
        let ago = |ms: u64| Timestamp(wall.0 - ms);
        let mut sends = vec![(bot("a"), 5, ago(400)), (bot("a"), 6, ago(5_000))];
        sends.extend((0..20).map(|i| (bot("a"), -100, ago(30_000 + i))));
        let remembered = Remembered {
            waits: Vec::new(),
            sends,
        };
        let pacer = Pacer::remembering(RateLimits::default(), Arc::new(Forgetful), &remembered);
        let now = Instant::now();
        let chat = pacer.reserve(&bot("a"), Some(5), now);
        assert!(
            chat >= Duration::from_millis(500) && chat <= Duration::from_millis(700),
            "{chat:?}"
        );
        assert_eq!(pacer.reserve(&bot("a"), Some(6), now), Duration::ZERO);
        let group = pacer.reserve(&bot("a"), Some(-100), now);
        assert!(group >= Duration::from_secs(29), "{group:?}");
        assert_eq!(pacer.reserve(&bot("b"), Some(5), now), Duration::ZERO);
    }

    #[test]
    fn the_windows_of_chats_gone_idle_are_let_go() {
        // The bot's overall rate is left out: this is about the chats' windows alone.
        let pacer = Pacer::new(RateLimits {
            per_second: None,
            ..RateLimits::default()
        });
        let start = Instant::now();
        // A broadcast's pace: each chat once, thirty a second, for five minutes.
        for i in 0..9_000_i64 {
            let at = start + Duration::from_millis(i as u64 * 34);
            pacer.reserve(&bot("a"), Some(-(i + 1)), at);
        }
        let bots = pacer.bots.lock();
        let pace = &bots[&bot("a")];
        // A group's window counts a minute (1,765 groups at this pace), plus what came since the
        // last lookup.
        assert!(
            pace.groups.len() < 1_765 + EVICT_EVERY,
            "{}",
            pace.groups.len()
        );
        assert!(pace.chats.len() < 30 + EVICT_EVERY, "{}", pace.chats.len());
    }

    #[test]
    fn a_bot_sends_at_most_thirty_messages_a_second() {
        let pacer = Pacer::new(RateLimits::default());
        let now = Instant::now();
        for chat in 0..30 {
            assert_eq!(
                pacer.reserve(&bot("a"), Some(chat + 1), now),
                Duration::ZERO
            );
        }
        assert!(pacer.reserve(&bot("a"), Some(99), now) >= SECOND);
    }

    #[test]
    fn a_group_gets_twenty_messages_a_minute() {
        let limits = RateLimits {
            per_chat_per_second: None,
            ..RateLimits::default()
        };
        let pacer = Pacer::new(limits);
        let now = Instant::now();
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            last = pacer.reserve(&bot("a"), Some(-100), now);
        }
        assert!(last < SECOND, "{last:?}");
        assert!(pacer.reserve(&bot("a"), Some(-100), now) >= MINUTE);
    }

    #[test]
    fn a_pause_holds_every_call_of_that_bot_only() {
        let pacer = Pacer::new(RateLimits::default());
        let now = Instant::now();
        pacer.pause_until(&bot("a"), now + Duration::from_secs(7));
        assert_eq!(pacer.reserve(&bot("a"), None, now), Duration::from_secs(7));
        assert_eq!(
            pacer.reserve(&bot("a"), Some(1), now),
            Duration::from_secs(7)
        );
        assert_eq!(pacer.reserve(&bot("b"), Some(1), now), Duration::ZERO);
    }

    #[test]
    fn a_pause_that_began_after_a_slot_was_reserved_is_still_seen_before_the_call() {
        let pacer = Pacer::new(RateLimits::default());
        let now = Instant::now();
        assert_eq!(pacer.reserve(&bot("a"), Some(1), now), Duration::ZERO);
        pacer.pause_until(&bot("a"), now + Duration::from_secs(3));
        assert_eq!(pacer.paused_at(&bot("a"), now), Duration::from_secs(3));
        assert_eq!(
            pacer.paused_at(&bot("a"), now + Duration::from_secs(4)),
            Duration::ZERO
        );
        assert_eq!(pacer.paused_at(&bot("b"), now), Duration::ZERO);
    }

    #[test]
    fn a_chat_s_slot_a_second_off_does_not_hold_the_bot_s_sends_to_other_chats() {
        let pacer = Pacer::new(RateLimits::default());
        let now = Instant::now();
        assert_eq!(pacer.reserve(&bot("a"), Some(5), now), Duration::ZERO);
        assert!(pacer.reserve(&bot("a"), Some(5), now) >= SECOND);
        assert_eq!(pacer.reserve(&bot("a"), Some(6), now), Duration::ZERO);
    }

    #[test]
    fn a_send_fits_between_later_bookings_only_where_every_window_holding_it_has_room() {
        let t0 = Timestamp(1_000_000);
        let ms = |n: u64| t0.plus(Duration::from_millis(n));
        // Two a second: 0 and 2000 booked, so 500 has room, and 1000 too.
        assert_eq!(ready(&[ms(0), ms(2000)], ms(500), 2, SECOND), ms(500));
        // Three booked within 200 ms fill the window: the next waits for the first to leave it.
        assert_eq!(
            ready(&[ms(0), ms(100), ms(200)], ms(300), 3, SECOND),
            ms(1100)
        );
        // A later booking counts too: 1500 would make three in the window from 1000.
        assert_eq!(ready(&[ms(1000), ms(1600)], ms(1500), 2, SECOND), ms(2100));
    }

    #[test]
    fn a_window_keeps_its_sends_in_order_and_forgets_those_too_old_to_matter() {
        let t0 = Timestamp(1_000_000);
        let ms = |n: u64| t0.plus(Duration::from_millis(n));
        assert_eq!(
            with_send(&[ms(0), ms(2000)], ms(900), ms(500), SECOND),
            vec![ms(0), ms(900), ms(2000)]
        );
        assert_eq!(
            with_send(&[ms(0), ms(1000)], ms(1500), ms(1200), SECOND),
            vec![ms(1000), ms(1500)]
        );
    }

    #[test]
    fn unlimited_never_waits_without_a_pause() {
        let pacer = Pacer::new(RateLimits::UNLIMITED);
        let now = Instant::now();
        for _ in 0..100 {
            assert_eq!(pacer.reserve(&bot("a"), Some(5), now), Duration::ZERO);
        }
    }
}
