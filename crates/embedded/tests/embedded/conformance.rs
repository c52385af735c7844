//! The embedded store passes the port conformance suite, each test on a fresh database.

use tgq_conformance::{conformance_tests, Adapters};
use tgq_embedded::{EmbeddedStore, StoreOptions};

async fn adapters() -> Adapters {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = StoreOptions {
        max_receive_count: MAX_RECEIVE_COUNT,
        ..StoreOptions::default()
    };
    let store = EmbeddedStore::open(dir.path(), options).expect("open the store");
    // The open file stays usable after its directory is removed (POSIX), so nothing is left behind
    // when the test ends.
    drop(dir);
    Adapters {
        store: store.clone(),
        ledger: store.clone(),
        reader: store.clone(),
        queue: store.clone(),
        consumer: store.clone(),
        dead: store.clone(),
        dead_reader: store.clone(),
        max_receive_count: MAX_RECEIVE_COUNT,
        reset: store.clone(),
        audit: store.clone(),
        audit_reader: store.clone(),
        book: store.clone(),
        dead_store: store,
    }
}

/// The queue's redrive limit in these tests: small, so the conformance suite reaches it.
const MAX_RECEIVE_COUNT: u32 = 3;

conformance_tests!(adapters());

tgq_conformance::lease_conformance_tests!(async {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = EmbeddedStore::open(dir.path(), StoreOptions::default()).expect("open the store");
    drop(dir);
    let bot = tgq_core::ids::BotId::new("conf").expect("a valid bot id");
    let lease: tgq_conformance::lease::LeaseUnderTest =
        std::sync::Arc::new(store.poller_lease(&bot));
    lease
});

tgq_conformance::broadcast_conformance_tests!(async {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = EmbeddedStore::open(dir.path(), StoreOptions::default()).expect("open the store");
    drop(dir);
    let states = store.clone();
    tgq_conformance::broadcast::BroadcastsUnderTest {
        store,
        put_state: Box::new(move |bot, chat, format, json| {
            let (states, bot, format) = (states.clone(), bot.clone(), format.to_owned());
            let json = json.to_string();
            // The body runs on a multi-threaded runtime: block this thread, not the runtime.
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(tgq_conformance::write_state(
                    &*states,
                    &*states,
                    (&bot, chat),
                    &format,
                    &json,
                ))
            })
        }),
    }
});
