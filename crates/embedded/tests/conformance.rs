//! The embedded store passes the port conformance suite, each test on a fresh database.

use tgq_conformance::{conformance_tests, Adapters};
use tgq_embedded::{EmbeddedStore, StoreOptions};

async fn adapters() -> Adapters {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = EmbeddedStore::open(dir.path(), StoreOptions::default()).expect("open the store");
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
        dead_reader: store,
    }
}

conformance_tests!(adapters());
