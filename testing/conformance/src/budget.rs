//! The send budget's conformance bodies (docs/design/pacing.md): the same
//! tests for every store of [`BudgetCells`]. An adapter crate instantiates them with
//! [`budget_conformance_tests!`] and a factory giving cells and two bots no test booked for yet.
//!
//! Each "process" is a [`SharedBudget`] of its own over the one store, as each worker container
//! is on a stack. Slots are booked, not waited for: the tests read when each booked send is due.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tgq_core::budget::{
    BudgetCell, BudgetCells, CellKey, Clear, Reserved, SendBudget, SharedBudget, Slot, Swap,
    LOOK_AGAIN_AFTER, RECHECK_AFTER,
};
use tgq_core::clock::{Clock, ManualClock, SystemClock};
use tgq_core::ids::BotId;
use tgq_core::pacer::RateLimits;
use tgq_core::record::Timestamp;
use tgq_core::PortError;

/// Cells for one test, and two bots nothing was booked for in them.
pub struct BudgetUnderTest {
    /// The store of the budget's cells.
    pub cells: Arc<dyn BudgetCells>,
    /// The bot the test books for.
    pub bot: BotId,
    /// Another bot of the same store.
    pub other: BotId,
}

/// Expands to one `#[tokio::test]` per budget body, each given what `$make` (an async expression
/// giving a [`BudgetUnderTest`]) builds.
#[macro_export]
macro_rules! budget_conformance_tests {
    ($make:expr) => {
        $crate::budget_conformance_tests!(@each $make;
            a_cell_is_written_only_from_the_version_its_writer_saw,
            a_pause_is_never_shortened_and_refuses_a_booking_made_before_it,
            four_processes_book_at_most_the_bot_s_rate_in_any_second,
            a_booking_written_late_counts_every_send_of_its_window,
            sends_to_one_chat_from_two_processes_are_a_second_apart,
            a_group_gets_twenty_sends_a_minute_from_two_processes,
            a_pause_heard_by_one_process_holds_every_other,
            a_pause_heard_by_one_process_holds_another_s_sends_that_book_no_slot,
            a_call_cleared_just_after_its_booking_reads_nothing_more,
            a_slot_gone_by_unused_holds_no_later_send,
            bookings_made_at_once_in_a_process_share_the_bot_s_write,
            bots_of_one_store_share_nothing,
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $crate::budget::$name($make.await).await;
            }
        )*
    };
}

/// A second and the slack Telegram's windows are held to with: sends leaving a little late stay
/// inside their limits.
const WINDOW: Duration = Duration::from_millis(1100);

/// Far enough that every booking of a test is made, none refused as too far off.
const ANY_WAIT: Duration = Duration::from_secs(600);

fn process(cells: &Arc<dyn BudgetCells>, limits: RateLimits) -> SharedBudget {
    SharedBudget::new(cells.clone(), limits, Arc::new(SystemClock))
}

async fn book(budget: &SharedBudget, bot: &BotId, chat: i64) -> Slot {
    match budget
        .reserve(bot, Some(chat), ANY_WAIT)
        .await
        .expect("reserve")
    {
        Reserved::Booked(slot) => slot,
        Reserved::Later(wait) => panic!("a slot {wait:?} off was refused"),
    }
}

fn due(slot: &Slot) -> Timestamp {
    slot.due().expect("a shared budget's slot has a due time")
}

/// One send booked to each of `chats` at once by `budget`: when each is due.
async fn book_at_once(
    budget: &SharedBudget,
    bot: &BotId,
    chats: std::ops::Range<i64>,
) -> Vec<Timestamp> {
    let bookings = chats.map(|chat| book(budget, bot, chat));
    futures::future::join_all(bookings)
        .await
        .iter()
        .map(due)
        .collect()
}

/// No `rate` + 1 of `dues` fall within one window of Telegram's.
fn assert_within_rate(mut dues: Vec<Timestamp>, rate: u32) {
    let spread = closest(&mut dues, rate as usize);
    assert!(
        spread >= WINDOW,
        "{} sends were booked within {spread:?}: {dues:?}",
        rate + 1
    );
}

/// The shortest time between a send and the `n`-th after it.
fn closest(dues: &mut [Timestamp], n: usize) -> Duration {
    dues.sort();
    dues.windows(n + 1)
        .map(|w| w[n].since(w[0]))
        .min()
        .unwrap_or(Duration::MAX)
}

/// Writes from version 0 create the cell; a writer that saw an older version is refused and
/// handed the stored cell, so it can book again without reading.
pub async fn a_cell_is_written_only_from_the_version_its_writer_saw(t: BudgetUnderTest) {
    let key = CellKey::Chat(t.bot.clone(), 42);
    let now = SystemClock.now();
    let keep = now.plus(Duration::from_secs(3600));
    assert_eq!(t.cells.read(&key).await.expect("read"), None);
    let Swap::Written(first) = t.cells.swap(&key, 0, &[now], keep).await.expect("swap") else {
        panic!("the first write of a new cell was refused");
    };
    assert_eq!(first.sends, vec![now]);
    let later = now.plus(Duration::from_secs(1));
    match t.cells.swap(&key, 0, &[later], keep).await.expect("swap") {
        Swap::Changed(Some(stored)) => assert_eq!(stored, first),
        other => panic!("a write from a stale version was not refused with the cell: {other:?}"),
    }
    let Swap::Written(second) = t
        .cells
        .swap(&key, first.version, &[now, later], keep)
        .await
        .expect("swap")
    else {
        panic!("a write from the stored version was refused");
    };
    assert!(second.version > first.version);
    assert_eq!(t.cells.read(&key).await.expect("read"), Some(second));
}

/// A shorter pause leaves the longer one; a pause changes the bot's cell, so a booking made on
/// the version before it is refused and learns of the pause.
pub async fn a_pause_is_never_shortened_and_refuses_a_booking_made_before_it(t: BudgetUnderTest) {
    let key = CellKey::Bot(t.bot.clone());
    let now = SystemClock.now();
    let keep = now.plus(Duration::from_secs(3600));
    let Swap::Written(booked) = t.cells.swap(&key, 0, &[now], keep).await.expect("swap") else {
        panic!("the first write of a new cell was refused");
    };
    let long = now.plus(Duration::from_secs(30));
    t.cells.pause(&t.bot, long, keep).await.expect("pause");
    t.cells
        .pause(&t.bot, now.plus(Duration::from_secs(2)), keep)
        .await
        .expect("pause");
    let stored = t.cells.read(&key).await.expect("read").expect("the cell");
    assert_eq!(stored.paused_until, Some(long));
    assert_eq!(stored.sends, vec![now]);
    match t
        .cells
        .swap(&key, booked.version, &[now, now], keep)
        .await
        .expect("swap")
    {
        Swap::Changed(Some(cell)) => assert_eq!(cell.paused_until, Some(long)),
        other => panic!("a booking made before the pause was not refused: {other:?}"),
    }
}

/// Four processes booking at once for one bot, each send to a chat of its own: the booked sends
/// keep to the bot-wide rate in every second, summed over the processes.
pub async fn four_processes_book_at_most_the_bot_s_rate_in_any_second(t: BudgetUnderTest) {
    const RATE: u32 = 5;
    let limits = RateLimits {
        per_second: Some(RATE),
        ..RateLimits::default()
    };
    let processes: Vec<SharedBudget> = (0..4).map(|_| process(&t.cells, limits)).collect();
    let bookings = processes.iter().enumerate().map(|(p, budget)| {
        let bot = t.bot.clone();
        async move {
            let mut dues = Vec::new();
            for n in 0..6 {
                dues.push(due(&book(budget, &bot, 1000 + (p * 10 + n) as i64).await));
            }
            dues
        }
    });
    let mut dues: Vec<Timestamp> = futures::future::join_all(bookings)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(dues.len(), 24);
    let spread = closest(&mut dues, RATE as usize);
    assert!(
        spread >= WINDOW,
        "{} sends were booked within {spread:?}",
        RATE + 1
    );
}

/// Bookings whose bot's write goes after their slot went by (a store slow to answer, the
/// process's other writes ahead of them): the write still counts every send of the slot's
/// window, the ones it is too late to keep included, so no window holds more than the bot's
/// rate.
pub async fn a_booking_written_late_counts_every_send_of_its_window(t: BudgetUnderTest) {
    const RATE: u32 = 2;
    let limits = RateLimits {
        per_second: Some(RATE),
        ..RateLimits::default()
    };
    let clock = ManualClock::at(SystemClock.now());
    // Three bookings choose their slot at once; the bot's cell is written first for one of them
    // once all three chats' are, and the clock has moved on 1.2 s when the others' write goes.
    let counted = Counted::late(&t.cells, 3, &clock, Duration::from_millis(1200));
    let cells: Arc<dyn BudgetCells> = counted.clone();
    let a = SharedBudget::new(cells, limits, Arc::new(clock.clone()));
    let dues = book_at_once(&a, &t.bot, 4000..4003).await;
    assert_within_rate(dues, RATE);
}

/// Two processes replying in one chat: the second send is booked a second after the first.
pub async fn sends_to_one_chat_from_two_processes_are_a_second_apart(t: BudgetUnderTest) {
    let (a, b) = (
        process(&t.cells, RateLimits::default()),
        process(&t.cells, RateLimits::default()),
    );
    let first = due(&book(&a, &t.bot, 7).await);
    let second = due(&book(&b, &t.bot, 7).await);
    let third = due(&book(&a, &t.bot, 7).await);
    assert!(
        second.since(first) >= Duration::from_secs(1),
        "{first:?} {second:?}"
    );
    assert!(
        third.since(second) >= Duration::from_secs(1),
        "{second:?} {third:?}"
    );
}

/// Two processes taking turns in one group: the 21st send is booked a minute after the first.
pub async fn a_group_gets_twenty_sends_a_minute_from_two_processes(t: BudgetUnderTest) {
    let limits = RateLimits {
        per_chat_per_second: None,
        ..RateLimits::default()
    };
    let (a, b) = (process(&t.cells, limits), process(&t.cells, limits));
    let mut dues = Vec::new();
    for n in 0..21 {
        let budget = if n % 2 == 0 { &a } else { &b };
        dues.push(due(&book(budget, &t.bot, -100).await));
    }
    assert!(
        dues[19].since(dues[0]) < Duration::from_secs(10),
        "{dues:?}"
    );
    assert!(
        dues[20].since(dues[0]) >= Duration::from_secs(60),
        "{dues:?}"
    );
}

/// A 429 heard by one process: another process's slot booked before it is not clear to send
/// (once the bot's cell it booked from is older than `RECHECK_AFTER`), and its next booking comes
/// after the wait.
pub async fn a_pause_heard_by_one_process_holds_every_other(t: BudgetUnderTest) {
    let (a, b) = (
        process(&t.cells, RateLimits::default()),
        process(&t.cells, RateLimits::default()),
    );
    let mut slot = book(&b, &t.bot, 5).await;
    let heard = SystemClock.now();
    a.pause(&t.bot, Duration::from_secs(30))
        .await
        .expect("pause");
    tokio::time::sleep(RECHECK_AFTER + Duration::from_millis(10)).await;
    match b.clear_to_send(&t.bot, &mut slot).await.expect("clear") {
        Clear::Held(wait) => assert!(wait > Duration::from_secs(25), "{wait:?}"),
        other => panic!("a slot booked before the pause was {other:?}"),
    }
    assert!(b.paused_for(&t.bot) > Duration::from_secs(25));
    match b
        .reserve(&t.bot, Some(6), Duration::from_secs(5))
        .await
        .expect("reserve")
    {
        Reserved::Later(wait) => assert!(wait > Duration::from_secs(25), "{wait:?}"),
        other => panic!("a booking inside the pause was {other:?}"),
    }
    let after = due(&book(&b, &t.bot, 6).await);
    assert!(after.since(heard) >= Duration::from_secs(30), "{after:?}");
}

/// The paid lane books no slot in the bot's cell, so only looking again tells it of a flood
/// wait another process heard: within a second, at most one read of the store.
pub async fn a_pause_heard_by_one_process_holds_another_s_sends_that_book_no_slot(
    t: BudgetUnderTest,
) {
    let counted = Counted::new(&t.cells);
    let cells: Arc<dyn BudgetCells> = counted.clone();
    let (a, b) = (
        process(&t.cells, RateLimits::default()),
        process(&cells, RateLimits::default()),
    );
    b.look_again(&t.bot).await.expect("look");
    a.pause(&t.bot, Duration::from_secs(30))
        .await
        .expect("pause");
    // Looked a moment ago: no read, and the pause is not known yet.
    b.look_again(&t.bot).await.expect("look");
    assert_eq!(counted.reads.load(Ordering::SeqCst), 1);
    tokio::time::sleep(LOOK_AGAIN_AFTER).await;
    b.look_again(&t.bot).await.expect("look");
    assert_eq!(counted.reads.load(Ordering::SeqCst), 2);
    match b
        .reserve(&t.bot, None, Duration::from_secs(5))
        .await
        .expect("reserve")
    {
        Reserved::Later(wait) => assert!(wait > Duration::from_secs(25), "{wait:?}"),
        other => panic!("a send of the paid lane inside the pause was {other:?}"),
    }
}

/// The store under test, counting its reads and its writes of bots' cells; each write lets the
/// other tasks run before it goes, as a request on a network does. With `hold_bot_until`, a write
/// of a bot's cell waits (up to 5 s) until that many writes of chats' cells have been answered,
/// so a test need not rely on how fast the store answers them.
struct Counted {
    cells: Arc<dyn BudgetCells>,
    reads: AtomicU64,
    bot_writes: AtomicU64,
    chat_writes: AtomicU64,
    hold_bot_until: u64,
    /// Moved on by the given time once, when the held write of a bot's cell goes.
    late_by: Option<(ManualClock, Duration)>,
}

impl Counted {
    fn new(cells: &Arc<dyn BudgetCells>) -> Arc<Self> {
        Self::holding(cells, 0)
    }

    fn holding(cells: &Arc<dyn BudgetCells>, chat_writes: u64) -> Arc<Self> {
        Arc::new(Self {
            cells: cells.clone(),
            reads: AtomicU64::new(0),
            bot_writes: AtomicU64::new(0),
            chat_writes: AtomicU64::new(0),
            hold_bot_until: chat_writes,
            late_by: None,
        })
    }

    /// Holds as [`Counted::holding`] does, and moves `clock` on by `by` when the held write
    /// goes: the bookings waiting meanwhile are written late, as on a store slow to answer.
    fn late(
        cells: &Arc<dyn BudgetCells>,
        chat_writes: u64,
        clock: &ManualClock,
        by: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            late_by: Some((clock.clone(), by)),
            ..Arc::into_inner(Self::holding(cells, chat_writes)).expect("just made")
        })
    }
}

#[async_trait::async_trait]
impl BudgetCells for Counted {
    async fn swap(
        &self,
        key: &CellKey,
        seen: u64,
        sends: &[Timestamp],
        keep_until: Timestamp,
    ) -> Result<Swap, PortError> {
        if matches!(key, CellKey::Bot(_)) {
            self.bot_writes.fetch_add(1, Ordering::SeqCst);
            let until = tokio::time::Instant::now() + Duration::from_secs(5);
            while self.chat_writes.load(Ordering::SeqCst) < self.hold_bot_until
                && tokio::time::Instant::now() < until
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if let Some((clock, by)) = &self.late_by {
                if self.bot_writes.load(Ordering::SeqCst) == 1 {
                    clock.advance(*by);
                }
            }
        }
        tokio::task::yield_now().await;
        let swapped = self.cells.swap(key, seen, sends, keep_until).await;
        if matches!(key, CellKey::Chat(..)) {
            self.chat_writes.fetch_add(1, Ordering::SeqCst);
        }
        swapped
    }

    async fn read(&self, key: &CellKey) -> Result<Option<BudgetCell>, PortError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.cells.read(key).await
    }

    async fn pause(
        &self,
        bot: &BotId,
        until: Timestamp,
        keep_until: Timestamp,
    ) -> Result<Option<BudgetCell>, PortError> {
        self.cells.pause(bot, until, keep_until).await
    }
}

/// A send booked a moment before its call costs its two writes alone: the bot's cell the booking's
/// write returned is fresh enough to clear it. One whose wait was longer reads the cell again.
pub async fn a_call_cleared_just_after_its_booking_reads_nothing_more(t: BudgetUnderTest) {
    let counted = Counted::new(&t.cells);
    let cells: Arc<dyn BudgetCells> = counted.clone();
    let b = process(&cells, RateLimits::default());
    // The chat's second slot, a second after its first: however long the store takes to write
    // the booking, its call is not due yet when it is asked about.
    book(&b, &t.bot, 8).await;
    let mut slot = book(&b, &t.bot, 8).await;
    match b.clear_to_send(&t.bot, &mut slot).await.expect("clear") {
        Clear::After(_) => {}
        other => panic!("a slot a second off was {other:?}"),
    }
    assert_eq!(counted.reads.load(Ordering::SeqCst), 0);
    let mut slot = book(&b, &t.bot, 9).await;
    tokio::time::sleep(RECHECK_AFTER + Duration::from_millis(10)).await;
    b.clear_to_send(&t.bot, &mut slot).await.expect("clear");
    assert_eq!(counted.reads.load(Ordering::SeqCst), 1);
}

/// A slot that went by while its caller got ready is not used, and counts in no window: the
/// chat's send booked again goes at once, not a second after a send that never went, and the
/// cells keep only the send that will go, for every process to see.
pub async fn a_slot_gone_by_unused_holds_no_later_send(t: BudgetUnderTest) {
    let (a, b) = (
        process(&t.cells, RateLimits::default()),
        process(&t.cells, RateLimits::default()),
    );
    let mut late = book(&a, &t.bot, 11).await;
    let gone = due(&late);
    tokio::time::sleep(gone.since(SystemClock.now()) + Duration::from_millis(150)).await;
    match a.clear_to_send(&t.bot, &mut late).await.expect("clear") {
        Clear::Late => {}
        other => panic!("a slot 150 ms gone by was {other:?}"),
    }
    let again = due(&book(&a, &t.bot, 11).await);
    assert!(
        again.since(SystemClock.now()) < Duration::from_millis(500),
        "booked again for {again:?}, a second after the unused {gone:?}"
    );
    let chat = t
        .cells
        .read(&CellKey::Chat(t.bot.clone(), 11))
        .await
        .expect("read")
        .expect("the chat's cell");
    assert_eq!(chat.sends, vec![again]);
    let bot = t
        .cells
        .read(&CellKey::Bot(t.bot.clone()))
        .await
        .expect("read")
        .expect("the bot's cell");
    assert!(!bot.sends.contains(&gone), "{bot:?}");
    assert!(bot.sends.contains(&again), "{bot:?}");
    let other = due(&book(&b, &t.bot, 11).await);
    assert!(
        other.since(again) >= Duration::from_secs(1),
        "{again:?} {other:?}"
    );
}

/// Eight sends booked at once by one process (a broadcast's sends under way, a worker's runs):
/// the bookings that wait while one write of the bot's cell is under way go in the next one,
/// not in a write each that the others would refuse. A write that books several still keeps the
/// bot's rate: a slot the window has no room for is booked again, later.
pub async fn bookings_made_at_once_in_a_process_share_the_bot_s_write(t: BudgetUnderTest) {
    const RATE: u32 = 5;
    // The first write of the bot's cell goes once every chat's is answered: the other seven
    // bookings are then waiting, however the store spread its answers.
    let counted = Counted::holding(&t.cells, 8);
    let cells: Arc<dyn BudgetCells> = counted.clone();
    let a = process(&cells, RateLimits::default());
    let bookings = (0..8).map(|chat| book(&a, &t.bot, 2000 + chat));
    futures::future::join_all(bookings).await;
    let writes = counted.bot_writes.load(Ordering::SeqCst);
    assert!(
        writes <= 2,
        "8 bookings made at once wrote the bot's cell {writes} times"
    );
    let limits = RateLimits {
        per_second: Some(RATE),
        ..RateLimits::default()
    };
    let b = process(&cells, limits);
    let dues = book_at_once(&b, &t.other, 3000..3008).await;
    assert_within_rate(dues, RATE);
}

/// One bot at its limit and paused: another bot of the same store books at once.
pub async fn bots_of_one_store_share_nothing(t: BudgetUnderTest) {
    let limits = RateLimits {
        per_second: Some(2),
        ..RateLimits::default()
    };
    let (a, b) = (process(&t.cells, limits), process(&t.cells, limits));
    for chat in 0..4 {
        book(&a, &t.bot, chat).await;
    }
    a.pause(&t.bot, Duration::from_secs(30))
        .await
        .expect("pause");
    let now = SystemClock.now();
    let mut slot = book(&b, &t.other, 0).await;
    assert!(due(&slot).since(now) < Duration::from_secs(1), "{slot:?}");
    assert_eq!(b.paused_for(&t.other), Duration::ZERO);
    match b.clear_to_send(&t.other, &mut slot).await.expect("clear") {
        Clear::Held(wait) => panic!("the other bot was held for {wait:?}"),
        Clear::Go | Clear::After(_) | Clear::Late => {}
    }
}
