//! A broadcast and a bot's replies share its budget in one process: every call reaches Telegram
//! at the slot the budget counted it at, so together they never pass the bot's rate, however
//! the replies bunch, and however long the store takes to write each send's intent. Paused
//! time: every instant below is exact.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tgq_core::broadcast::RecipientState;
use tgq_core::broadcast::{
    BroadcastId, BroadcastRunner, BroadcastSpec, BroadcastStore, Lane, RunEnd,
};
use tgq_core::budget::{
    BudgetCell, BudgetCells, CellKey, Clear, Reserved, SendBudget, SharedBudget, Swap,
};
use tgq_core::clock::Clock;
use tgq_core::error::PortError;
use tgq_core::ids::BotId;
use tgq_core::pacer::{Pacer, RateLimits};
use tgq_core::policy::RetryPolicy;
use tgq_core::record::Timestamp;
use tgq_core::telegram::{ApiCall, BotApi, CallError};
use tgq_memory::{MemoryBroadcasts, MemoryBudgetCells};
use tokio::sync::watch;
use tokio::time::Instant;

/// The bot's rate in these tests: messages a second across all its chats.
const RATE: u32 = 10;
/// A second less the 50 ms a call may leave after its slot: the window a slow store's calls are
/// counted in.
const SLOW: Duration = Duration::from_millis(950);

fn bot() -> BotId {
    BotId::new("paced").expect("a valid bot id")
}

/// A Bot API that answers every send and keeps the moment each reached it.
#[derive(Default)]
struct Wire {
    arrived: Mutex<Vec<Instant>>,
    chats: Mutex<Vec<i64>>,
    /// Each broadcast call (not a reply): its chat and the moment it arrived.
    calls: Mutex<Vec<(i64, Instant)>>,
}

#[async_trait]
impl BotApi for Wire {
    async fn call(&self, call: &ApiCall<'_>) -> Result<Value, CallError> {
        self.arrived.lock().push(Instant::now());
        let chat = call.params["chat_id"].as_i64().expect("a chat id");
        self.chats.lock().push(chat);
        self.calls.lock().push((chat, Instant::now()));
        Ok(json!({"message_id": 1, "chat": {"id": chat}}))
    }
}

/// Sends as the worker's replies do: book, wait for the slot, clear, call; booked again when
/// the slot went by or a flood wait held it.
async fn reply(budget: Arc<dyn SendBudget>, wire: Arc<Wire>, chat: i64) {
    loop {
        let Reserved::Booked(mut slot) = budget
            .reserve(&bot(), Some(chat), Duration::from_secs(60))
            .await
            .expect("an in-process budget answers")
        else {
            panic!("a slot within a minute");
        };
        tokio::time::sleep(slot.wait).await;
        match budget
            .clear_to_send(&bot(), &mut slot)
            .await
            .expect("answers")
        {
            Clear::Go => break,
            Clear::After(wait) => {
                tokio::time::sleep(wait).await;
                break;
            }
            Clear::Held(_) | Clear::Late => continue,
        }
    }
    wire.arrived.lock().push(Instant::now());
}

/// The most calls that reached the wire within any `span`.
fn busiest(mut arrived: Vec<Instant>, span: Duration) -> usize {
    arrived.sort();
    let mut first = 0;
    let mut most = 0;
    for (last, at) in arrived.iter().enumerate() {
        while *at - arrived[first] >= span {
            first += 1;
        }
        most = most.max(last + 1 - first);
    }
    most
}

#[tokio::test(start_paused = true)]
async fn a_broadcast_and_bursts_of_replies_stay_within_the_bot_s_rate_together() {
    let limits = limits();
    let clock = tokio_clock();
    // A store that answers at once: every call leaves at its slot, so no second holds more.
    let budget = Arc::new(Pacer::new(limits));
    among_replies(budget, clock, &[], Duration::from_secs(1)).await;
}

/// Telegram's limits with the bot's rate at `RATE`.
fn limits() -> RateLimits {
    RateLimits {
        per_second: Some(RATE),
        ..RateLimits::default()
    }
}

/// A wall clock on tokio's time, from now.
fn tokio_clock() -> Arc<dyn Clock> {
    Arc::new(TokioClock {
        started: Instant::now(),
    })
}

/// Tokio's time as a wall clock, for the budget kept in a store: paused, it moves only as the
/// test's waits do.
struct TokioClock {
    started: Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        Timestamp(1_800_000_000_000).plus(Instant::now() - self.started)
    }
}

/// Users writing in bursts while the broadcast goes, as in the test above: six replies at once,
/// every 1.5 s, five times.
fn bursts_of_replies(budget: Arc<dyn SendBudget>, wire: Arc<Wire>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut sent = Vec::new();
        for burst in 0..5 {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            for user in 0..6 {
                let chat = 10_000 + burst * 10 + user;
                sent.push(tokio::spawn(reply(budget.clone(), wire.clone(), chat)));
            }
        }
        for reply in sent {
            reply.await.expect("the reply is sent");
        }
    })
}

/// A job to `chats` in a memory store whose begins take each of `begins` (ms) in turn, and its
/// runner through `budget` at the bot's `rate`.
async fn job_for(
    chats: &[i64],
    begins: &[u64],
    budget: (Arc<dyn SendBudget>, u32),
    clock: Arc<dyn Clock>,
) -> (Arc<MemoryBroadcasts>, BroadcastId, BroadcastRunner) {
    let spec = BroadcastSpec::standard(bot(), "sendMessage", json!({"text": "news"}), "cli");
    let begins = begins.iter().copied().map(Duration::from_millis).collect();
    job_with(spec, chats, begins, budget, clock).await
}

/// Runs job `id` to its end, which must be `done`: the wire its calls reached.
async fn run_to_the_end(runner: &BroadcastRunner, id: &BroadcastId) -> Arc<Wire> {
    let wire = Arc::new(Wire::default());
    let (_stop, stopped) = watch::channel(false);
    let api: Arc<dyn BotApi> = wire.clone();
    let ended = runner
        .run(id, api, stopped)
        .await
        .expect("the store answers");
    assert_eq!(ended, RunEnd::Done);
    wire
}

/// [`job_for`] with `spec`, and begins that take each of `begins` in turn.
async fn job_with(
    spec: BroadcastSpec,
    chats: &[i64],
    begins: Vec<Duration>,
    (budget, rate): (Arc<dyn SendBudget>, u32),
    clock: Arc<dyn Clock>,
) -> (Arc<MemoryBroadcasts>, BroadcastId, BroadcastRunner) {
    let memory = Arc::new(MemoryBroadcasts::new());
    memory.slow_begins(begins);
    let store: Arc<dyn BroadcastStore> = memory.clone();
    let id = store
        .create(&spec, chats, clock.now())
        .await
        .expect("the job is created")
        .job()
        .id
        .clone();
    let runner = BroadcastRunner {
        store,
        budget,
        bot_rate: Some(rate),
        clock,
        retry: RetryPolicy::default(),
    };
    (memory, id, runner)
}

/// A broadcast of 60 recipients and bursts of replies at `RATE` a second through `budget`, each
/// broadcast intent written by a store that takes the next of `begins` (in milliseconds, in
/// turn), longer than a slot may be late for some or all of them. Every recipient is sent once
/// and every call leaves within `LATE` of the slot its budget booked, so no `window` (a second,
/// less that lateness when the store is slow) holds more than `RATE` calls; a send whose slot
/// went by while its intent was written goes back to the list, unspent.
async fn among_replies(
    budget: Arc<dyn SendBudget>,
    clock: Arc<dyn Clock>,
    begins: &[u64],
    window: Duration,
) {
    let chats: Vec<i64> = (1..=60).collect();
    let (memory, id, runner) = job_for(&chats, begins, (budget.clone(), RATE), clock).await;
    let wire = Arc::new(Wire::default());
    let replies = bursts_of_replies(budget, wire.clone());
    let (_stop, stopped) = watch::channel(false);
    let api: Arc<dyn BotApi> = wire.clone();
    let ended = tokio::time::timeout(Duration::from_secs(120), runner.run(&id, api, stopped))
        .await
        .expect("the broadcast ends within two minutes")
        .expect("the store answers");
    replies.await.expect("every reply is sent");
    assert_eq!(ended, RunEnd::Done);
    assert_eq!(
        wire.arrived.lock().len(),
        60 + 30,
        "every send reached the wire once"
    );
    let mut reached: Vec<i64> = wire
        .chats
        .lock()
        .iter()
        .copied()
        .filter(|chat| *chat < 10_000)
        .collect();
    reached.sort();
    assert_eq!(reached, chats, "every recipient was called once");
    let recipients = memory.recipients(&id);
    assert!(
        recipients
            .iter()
            .all(|r| matches!(r.state, RecipientState::Sent { .. })),
        "every recipient is sent: {:?}",
        recipients.iter().map(|r| &r.state).collect::<Vec<_>>()
    );
    let busiest = busiest(wire.arrived.lock().clone(), window);
    assert!(
        busiest <= RATE as usize,
        "{busiest} calls reached Telegram within {window:?}; the bot may make {RATE} a second"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_store_sends_no_broadcast_call_outside_its_slot_in_the_process_s_budget() {
    let limits = limits();
    let clock = tokio_clock();
    among_replies(
        Arc::new(Pacer::new(limits)),
        clock,
        &[0, 120, 60, 180, 30],
        SLOW,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_store_always_slower_than_a_slot_may_be_late_still_sends_everything_in_the_process() {
    let limits = limits();
    let clock = tokio_clock();
    among_replies(Arc::new(Pacer::new(limits)), clock, &[120], SLOW).await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_store_sends_no_broadcast_call_outside_its_slot_in_a_shared_budget() {
    let limits = limits();
    let clock = tokio_clock();
    let budget = SharedBudget::new(Arc::new(MemoryBudgetCells::new()), limits, clock.clone());
    among_replies(Arc::new(budget), clock, &[0, 120, 60, 180, 30], SLOW).await;
}

/// A run of 40 recipients through `budget` with intents that take each of `begins` (ms) in turn:
/// how many begins it asked for, and how long each call waited between its intent and its call.
async fn sent_through(
    budget: Arc<dyn SendBudget>,
    clock: Arc<dyn Clock>,
    begins: &[u64],
) -> (usize, Vec<Duration>) {
    sent_at(budget, clock, begins, (RATE, 40)).await
}

/// [`sent_through`] for `recipients` at the bot's `rate`.
async fn sent_at(
    budget: Arc<dyn SendBudget>,
    clock: Arc<dyn Clock>,
    begins: &[u64],
    (rate, recipients): (u32, i64),
) -> (usize, Vec<Duration>) {
    let chats: Vec<i64> = (1..=recipients).collect();
    let (memory, id, runner) = job_for(&chats, begins, (budget, rate), clock).await;
    let wire = run_to_the_end(&runner, &id).await;
    let calls = wire.calls.lock().clone();
    assert_eq!(calls.len(), chats.len(), "every recipient was called once");
    let waits = calls
        .iter()
        .map(|(chat, at)| {
            let begun = memory
                .begun_at(*chat as u64 - 1)
                .expect("each call was begun");
            *at - begun
        })
        .collect();
    (memory.begins(), waits)
}

/// A store whose writes vary by more than a slot may be late: the lead makes room for the slow
/// writes, so a send is not held for ending its intent late and booked again, over and over.
async fn a_jittery_store_books_each_send_once(budget: Arc<dyn SendBudget>, clock: Arc<dyn Clock>) {
    let (begins, _) = sent_through(budget, clock, &[20, 150, 60, 110, 35, 90, 140, 25]).await;
    // The first sends measure the store: a few of them may end late and go again.
    assert!(
        begins <= 40 + 8,
        "{begins} intents written for 40 recipients: sends were held for ending late"
    );
}

#[tokio::test(start_paused = true)]
async fn a_jittery_store_books_each_send_once_in_the_process_s_budget() {
    let clock = tokio_clock();
    a_jittery_store_books_each_send_once(Arc::new(Pacer::new(limits())), clock).await;
}

#[tokio::test(start_paused = true)]
async fn a_jittery_store_books_each_send_once_in_a_shared_budget() {
    let clock = tokio_clock();
    let budget = SharedBudget::new(Arc::new(MemoryBudgetCells::new()), limits(), clock.clone());
    a_jittery_store_books_each_send_once(Arc::new(budget), clock).await;
}

/// After the first few sends have measured the store, a call leaves the moment its intent is
/// written: the slot's lead lets the intent end at the slot or a little after, never well before.
#[tokio::test(start_paused = true)]
async fn a_call_leaves_as_its_intent_ends_in_the_process_s_budget() {
    let budget = Arc::new(Pacer::new(limits()));
    let (_, waits) = sent_through(budget, tokio_clock(), &[10, 20, 30, 15, 25]).await;
    assert_no_call_waited_after_its_intent(&waits);
}

/// Past the first 8 sends, which measure the store, no call waited more than a millisecond
/// between its intent and its call.
fn assert_no_call_waited_after_its_intent(waits: &[Duration]) {
    let waited: Vec<&Duration> = waits
        .iter()
        .skip(8)
        .filter(|wait| **wait > Duration::from_millis(1))
        .collect();
    assert!(
        waited.is_empty(),
        "{} of {} calls waited after their intents: {waited:?}",
        waited.len(),
        waits.len() - 8
    );
}

/// The same on a stack: a shared budget whose store takes 15 ms a request (a read of the bot's
/// cell included) reads what it must before the intent, and leads the slot by what the intent
/// takes, so that a send's intent is on record only for the moment before its call. A wait there
/// is a send a crash leaves uncertain though its call never left.
#[tokio::test(start_paused = true)]
async fn a_call_leaves_as_its_intent_ends_in_a_shared_budget() {
    let clock = tokio_clock();
    let cells = SlowCells {
        cells: MemoryBudgetCells::new(),
        takes: Duration::from_millis(15),
    };
    let budget = Arc::new(SharedBudget::new(Arc::new(cells), limits(), clock.clone()));
    // Intents longer than a read of the cell stays fresh for.
    let (_, waits) = sent_through(budget, clock, &[60, 70, 80, 65, 75]).await;
    assert_no_call_waited_after_its_intent(&waits);
}

/// Budget cells in memory that take `takes` to answer each request, as a store over a network.
struct SlowCells {
    cells: MemoryBudgetCells,
    takes: Duration,
}

#[async_trait]
impl BudgetCells for SlowCells {
    async fn swap(
        &self,
        key: &CellKey,
        seen: u64,
        sends: &[Timestamp],
        keep_until: Timestamp,
    ) -> Result<Swap, PortError> {
        tokio::time::sleep(self.takes).await;
        self.cells.swap(key, seen, sends, keep_until).await
    }

    async fn read(&self, key: &CellKey) -> Result<Option<BudgetCell>, PortError> {
        tokio::time::sleep(self.takes).await;
        self.cells.read(key).await
    }

    async fn pause(
        &self,
        bot: &BotId,
        until: Timestamp,
        keep_until: Timestamp,
    ) -> Result<Option<BudgetCell>, PortError> {
        tokio::time::sleep(self.takes).await;
        self.cells.pause(bot, until, keep_until).await
    }
}

/// A store slow once in a while: one write in eight takes 900 ms, the others 20 to 40 ms. The lead
/// follows the usual writes, not the worst one: were every send woken the worst write ahead of its
/// slot, each would be held that long, and the few sends a lane keeps in flight could not keep its
/// rate.
#[tokio::test(start_paused = true)]
async fn a_store_slow_once_in_a_while_keeps_the_lane_s_rate() {
    let clock = tokio_clock();
    let limits = RateLimits {
        per_second: Some(30),
        ..RateLimits::default()
    };
    let started = Instant::now();
    sent_at(
        Arc::new(Pacer::new(limits)),
        clock,
        &[30, 25, 35, 900, 30, 20, 40, 30],
        (30, 240),
    )
    .await;
    // 240 recipients at the lane's 24 a second (30 less the fifth kept for replies) take 10 s; a
    // send whose write took 900 ms is late and is booked again, which costs a few seconds more.
    // With the worst write as the lead the job took 26 s.
    let took = Instant::now() - started;
    assert!(
        took < Duration::from_secs(20),
        "240 recipients took {took:?} at 24 a second"
    );
}

/// The paid lane counts a call as it passes the lane's gate, before its intent is written. A
/// store that holds every intent of a batch until one moment (a commit the disk held up for a
/// second) releases those calls together, a second after they were counted; the calls counted
/// after the hold must not join them in one second. Each second at the wire holds at most the
/// lane's rate.
#[tokio::test(start_paused = true)]
async fn the_paid_lane_keeps_its_rate_at_the_wire_when_intents_are_slow() {
    const PAID_RATE: u32 = 100;
    // A batch is a quarter of the rate (25 sends, 10 ms apart): in every eighth one each intent
    // ends at the same moment, a second after the batch's first began.
    let begins = (0..200)
        .map(|k| match k {
            0..25 => Duration::from_millis(1_000 - 10 * k),
            _ => Duration::from_millis(1),
        })
        .collect();
    let mut spec = BroadcastSpec::standard(bot(), "sendMessage", json!({"text": "news"}), "cli");
    spec.lane = Lane::Paid;
    spec.paid_rate = PAID_RATE;
    let chats: Vec<i64> = (1..=600).collect();
    let budget: Arc<dyn SendBudget> = Arc::new(Pacer::new(limits()));
    let (_, id, runner) = job_with(spec, &chats, begins, (budget, RATE), tokio_clock()).await;
    let wire = run_to_the_end(&runner, &id).await;
    assert_eq!(
        wire.calls.lock().len(),
        600,
        "every recipient was called once"
    );
    let busiest = busiest(wire.arrived.lock().clone(), Duration::from_secs(1));
    assert!(
        busiest <= PAID_RATE as usize,
        "{busiest} paid calls reached Telegram within a second; the lane may make {PAID_RATE}"
    );
}
