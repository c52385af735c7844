//! The in-memory adapters pass the port conformance suite.

use std::sync::Arc;

use tgq_conformance::{conformance_tests, Adapters};
use tgq_core::clock::SystemClock;
use tgq_memory::{MemoryDeadLetters, MemoryQueue, MemoryStore};

async fn adapters() -> Adapters {
    let store = Arc::new(MemoryStore::new());
    let dead = Arc::new(MemoryDeadLetters::new());
    let queue = Arc::new(MemoryQueue::with_redrive(
        Arc::new(SystemClock),
        MAX_RECEIVE_COUNT,
        dead.clone(),
    ));
    Adapters {
        store: store.clone(),
        ledger: store.clone(),
        reader: store.clone(),
        queue: queue.clone(),
        consumer: queue,
        dead: dead.clone(),
        dead_reader: dead.clone(),
        max_receive_count: MAX_RECEIVE_COUNT,
        reset: store.clone(),
        audit: store.clone(),
        audit_reader: store.clone(),
        book: store,
        dead_store: dead,
    }
}

/// The queue's redrive limit in these tests: small, so the conformance suite reaches it.
const MAX_RECEIVE_COUNT: u32 = 3;

conformance_tests!(adapters());

tgq_conformance::budget_conformance_tests!(async {
    tgq_conformance::budget::BudgetUnderTest {
        cells: Arc::new(tgq_memory::MemoryBudgetCells::new()),
        bot: tgq_core::ids::BotId::new("budget").expect("a valid bot id"),
        other: tgq_core::ids::BotId::new("other").expect("a valid bot id"),
    }
});

tgq_conformance::lease_conformance_tests!(async {
    let lease: tgq_conformance::lease::LeaseUnderTest =
        Arc::new(tgq_memory::MemoryPollerLease::new());
    lease
});

tgq_conformance::broadcast_conformance_tests!(async {
    let store = Arc::new(tgq_memory::MemoryBroadcasts::new());
    let states = store.clone();
    tgq_conformance::broadcast::BroadcastsUnderTest {
        store,
        put_state: Box::new(move |bot, chat, format, json| {
            states.put_state(bot, chat, format, json)
        }),
    }
});
