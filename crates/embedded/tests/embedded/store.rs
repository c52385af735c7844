//! Behaviour of the embedded store beyond the port conformance suite: durability across a reopen,
//! redrive, strict group order, group commit, the dedup window, retention, the file lock, the
//! offline outbox and the counters.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::json;
use tgq_core::bot_api::types::Message;
use tgq_core::clock::{Clock, ManualClock, SystemClock};
use tgq_core::dead::{Burial, DeadReason, FailureClass};
use tgq_core::ids::{BotId, GroupKey, RecordKey, StateKey, UpdateId};
use tgq_core::payment::{Charge, ChargeWrite};
use tgq_core::ports::{
    AtomicIngest, Claim, ClaimRequest, DeadLetter, DeadLetters, Inserted, Lease, OutgoingMessage,
    QueueConsumer, QueueRecord, RecordReader, Settlement, UpdateLedger, UpdateQueue, UpdateStore,
    Visibility,
};
use tgq_core::record::{ActionResult, ActionState, Delivery, Timestamp, UpdateRecord};
use tgq_core::state::StateWrite;
use tgq_core::telegram::{ActionRef, ApiCall, BotApi, CallError};
use tgq_core::PortError;
use tgq_embedded::{
    Counters, EmbeddedStore, OfflineBotApi, Purged, StoreError, StoreOptions, FILE_NAME,
};

const START: Timestamp = Timestamp(1_700_000_000_000);
const DAY: Duration = Duration::from_secs(86_400);
const NO_WAIT: Duration = Duration::ZERO;

fn bot() -> BotId {
    BotId::new("demo").expect("valid id")
}

fn key(update_id: i64) -> RecordKey {
    RecordKey::new(bot(), UpdateId(update_id))
}

fn message(group: &str, update_id: i64) -> OutgoingMessage {
    OutgoingMessage::for_update(
        &key(update_id),
        &GroupKey::new(group),
        Bytes::from(format!(
            r#"{{"update_id":{update_id},"message":{{"chat":{{"id":{group}}}}}}}"#
        )),
    )
}

fn record(update_id: i64, now: Timestamp, ttl: Duration) -> UpdateRecord {
    let m = message("1", update_id);
    UpdateRecord::received(key(update_id), GroupKey::new("1"), m.body, now, ttl)
}

fn claim_request(record: &UpdateRecord, now: Timestamp) -> ClaimRequest {
    ClaimRequest {
        key: record.key.clone(),
        group: record.group.clone(),
        payload: record.payload.clone(),
        now,
        lease_until: now.plus(Duration::from_secs(30)),
        expires_at: now.plus(DAY),
    }
}

fn open(dir: &Path, clock: &ManualClock, max_receive_count: u32) -> Arc<EmbeddedStore> {
    let options = StoreOptions {
        ttl: DAY,
        max_receive_count,
        clock: Arc::new(clock.clone()),
        ..StoreOptions::default()
    };
    EmbeddedStore::open(dir, options).expect("open the store")
}

/// Claims `record` at `now` and returns the run's lease; panics unless the claim runs.
async fn lease_of(store: &EmbeddedStore, record: &UpdateRecord, now: Timestamp) -> Lease {
    match store.claim(&claim_request(record, now)).await.unwrap() {
        Claim::Run(claimed) => claimed.lease,
        other => panic!("expected the claim to run, got {other:?}"),
    }
}

/// An offline call outside any run.
async fn send(api: &OfflineBotApi, method: &str, params: serde_json::Value) -> serde_json::Value {
    api.call(&ApiCall::plain(method, &params))
        .await
        .expect("the outbox takes the call")
}

async fn receive(store: &EmbeddedStore, max: usize, visibility: Duration) -> Vec<QueueRecord> {
    store
        .receive(max, visibility, NO_WAIT)
        .await
        .expect("receive")
}

fn bodies(records: &[QueueRecord]) -> Vec<Bytes> {
    records.iter().map(|r| r.body.clone()).collect()
}

#[tokio::test]
async fn messages_survive_a_reopen_with_their_visibility_and_receive_count() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 30);
    let (m1, m2) = (message("7", 1), message("7", 2));
    store.enqueue(&m1).await.unwrap();
    store.enqueue(&m2).await.unwrap();
    let held = receive(&store, 1, Duration::from_secs(60)).await;
    assert_eq!(
        (held[0].body.clone(), held[0].receive_count),
        (m1.body.clone(), 1)
    );
    let leased = record(1, START, DAY);
    store.insert(&leased, START).await.unwrap();
    store.claim(&claim_request(&leased, START)).await.unwrap();
    drop(store);

    let store = open(dir.path(), &clock, 30);
    assert!(
        receive(&store, 10, Duration::from_secs(60))
            .await
            .is_empty(),
        "a message in flight before the reopen must stay hidden, and hold back its group"
    );
    clock.advance(Duration::from_secs(61));
    let again = receive(&store, 10, Duration::from_secs(60)).await;
    assert_eq!(bodies(&again), vec![m1.body.clone(), m2.body.clone()]);
    assert_eq!((again[0].receive_count, again[1].receive_count), (2, 1));
    assert!(
        store
            .change_visibility(&held[0].receipt, NO_WAIT)
            .await
            .is_err(),
        "the receipt of an earlier delivery must no longer be current"
    );
    let recovered = store
        .claim(&claim_request(&leased, clock.now()))
        .await
        .unwrap();
    assert!(
        matches!(recovered, Claim::Run(ref c) if c.lease.token == 2),
        "a lease that expired across the reopen must be claimable: {recovered:?}"
    );
}

#[tokio::test]
async fn a_message_received_max_receive_count_times_is_redriven_to_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 3);
    let (crashing, next) = (message("5", 10), message("5", 11));
    store.enqueue(&crashing).await.unwrap();
    store.enqueue(&next).await.unwrap();
    for expected in 1..=3 {
        let got = receive(&store, 1, Duration::from_secs(30)).await;
        assert_eq!(
            (got[0].body.clone(), got[0].receive_count),
            (crashing.body.clone(), expected)
        );
        store
            .change_visibility(&got[0].receipt, NO_WAIT)
            .await
            .unwrap();
    }
    let after = receive(&store, 10, Duration::from_secs(30)).await;
    assert_eq!(
        bodies(&after),
        vec![next.body.clone()],
        "the group goes on without it"
    );

    let letters = store.dead_letters(10).unwrap();
    assert_eq!(letters.len(), 1);
    let letter = &letters[0];
    assert_eq!(
        (
            letter.reason.as_str(),
            letter.body.clone(),
            letter.update_id,
            letter.group.clone()
        ),
        (
            "max_receive_count",
            crashing.body.clone(),
            Some(UpdateId(10)),
            Some(GroupKey::new("5"))
        )
    );
    assert_eq!(letter.bot_id, bot());
    assert_eq!(store.counters().unwrap().dead_lettered, 1);
    let stats = store.stats(clock.now()).unwrap();
    assert_eq!((stats.dead, stats.pending, stats.in_flight), (1, 0, 1));
}

#[tokio::test]
async fn a_batch_delete_removes_its_messages_in_one_commit_and_passes_over_a_stale_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 30);
    let (a, b, c) = (message("7", 1), message("8", 2), message("9", 3));
    for m in [&a, &b, &c] {
        store.enqueue(m).await.unwrap();
    }
    let ten = Duration::from_secs(10);
    let first = receive(&store, 10, ten).await;
    assert_eq!(first.len(), 3);
    // The first receive of `c` went stale: its visibility ended and it was received again.
    clock.advance(Duration::from_secs(11));
    let again = receive(&store, 10, ten).await;
    assert_eq!(
        bodies(&again),
        vec![a.body.clone(), b.body.clone(), c.body.clone()]
    );
    let commits = store.commits();
    let receipts = vec![
        again[0].receipt.clone(),
        again[1].receipt.clone(),
        first[2].receipt.clone(),
    ];
    store.delete_all(receipts).await.unwrap();
    assert_eq!(store.commits(), commits + 1, "one commit for the batch");
    let stats = store.stats(clock.now()).unwrap();
    assert_eq!(
        (stats.pending, stats.in_flight),
        (0, 1),
        "a and b are gone; c, whose current receipt was not given, is still in flight"
    );
}

#[tokio::test]
async fn order_within_a_group_is_strict_after_a_visibility_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 30);
    let (g1, g2, g3, other) = (
        message("9", 1),
        message("9", 2),
        message("9", 3),
        message("8", 4),
    );
    for m in [&g1, &g2, &g3, &other] {
        store.enqueue(m).await.unwrap();
    }
    let ten = Duration::from_secs(10);
    assert_eq!(
        bodies(&receive(&store, 1, ten).await),
        vec![g1.body.clone()]
    );
    let meanwhile = receive(&store, 10, ten).await;
    assert_eq!(
        bodies(&meanwhile),
        vec![other.body.clone()],
        "group 9 is held by g1"
    );
    store.delete(&meanwhile[0].receipt).await.unwrap();

    // g1's holder died: once its visibility ends, g1 comes back first, then the rest in order.
    clock.advance(Duration::from_secs(11));
    let batch = receive(&store, 10, ten).await;
    assert_eq!(
        bodies(&batch),
        vec![g1.body.clone(), g2.body.clone(), g3.body.clone()]
    );
    assert_eq!(batch[0].receive_count, 2);

    // g1 fails with a 30 s backoff; the later ones are released at once (skip_group_on_error).
    store
        .change_visibility(&batch[0].receipt, Duration::from_secs(30))
        .await
        .unwrap();
    store
        .change_visibility(&batch[1].receipt, NO_WAIT)
        .await
        .unwrap();
    store
        .change_visibility(&batch[2].receipt, NO_WAIT)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(11));
    assert!(
        receive(&store, 10, ten).await.is_empty(),
        "g2 must not overtake g1 while g1 waits out its backoff"
    );
    clock.advance(Duration::from_secs(20));
    let resumed = receive(&store, 10, ten).await;
    assert_eq!(
        bodies(&resumed),
        vec![g1.body.clone(), g2.body.clone(), g3.body.clone()]
    );
    assert_eq!(
        resumed.iter().map(|r| r.receive_count).collect::<Vec<_>>(),
        vec![3, 2, 2]
    );
}

/// A clock that can hold the store's writer still: armed, the next reading blocks until released,
/// so the writer thread stays inside the batch it is applying (queue sends, receives and visibility
/// changes read the clock there) while a test queues more operations behind it.
#[derive(Default)]
struct HeldClock {
    state: std::sync::Mutex<Hold>,
    changed: std::sync::Condvar,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Hold {
    #[default]
    Open,
    Armed,
    Holding,
}

impl HeldClock {
    fn arm(&self) {
        *self.state.lock().unwrap() = Hold::Armed;
    }

    /// Waits (blocking) until a reading is held; `false` if none came within `limit`.
    fn wait_until_holding(&self, limit: Duration) -> bool {
        let state = self.state.lock().unwrap();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, limit, |hold| *hold != Hold::Holding)
            .unwrap();
        *state == Hold::Holding
    }

    fn release(&self) {
        *self.state.lock().unwrap() = Hold::Open;
        self.changed.notify_all();
    }
}

impl Clock for HeldClock {
    fn now(&self) -> Timestamp {
        let mut state = self.state.lock().unwrap();
        if *state == Hold::Armed {
            *state = Hold::Holding;
            self.changed.notify_all();
            state = self
                .changed
                .wait_while(state, |hold| *hold == Hold::Holding)
                .unwrap();
        }
        drop(state);
        SystemClock.now()
    }
}

/// A store on a [`HeldClock`], and a queue send that the writer is held inside of.
async fn writer_held_in_a_batch(
    dir: &Path,
) -> (
    Arc<EmbeddedStore>,
    Arc<HeldClock>,
    tokio::task::JoinHandle<Result<(), PortError>>,
) {
    let clock = Arc::new(HeldClock::default());
    let options = StoreOptions {
        clock: clock.clone(),
        ..StoreOptions::default()
    };
    let store = EmbeddedStore::open(dir, options).unwrap();
    clock.arm();
    let send = {
        let store = store.clone();
        tokio::spawn(async move { store.enqueue(&message("0", 0)).await })
    };
    let holding = {
        let clock = clock.clone();
        tokio::task::spawn_blocking(move || clock.wait_until_holding(Duration::from_secs(30)))
    };
    assert!(
        holding.await.unwrap(),
        "the writer never read the clock while sending to the queue"
    );
    (store, clock, send)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inserts_queued_while_a_commit_is_under_way_share_the_next_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock, send) = writer_held_in_a_batch(dir.path()).await;
    let (commits_before, ops_before) = (store.commits(), store.ops_committed());
    let now = SystemClock.now();
    let records: Vec<UpdateRecord> = (1..=64).map(|i| record(i, now, DAY)).collect();
    let mut inserts =
        futures::future::join_all(records.iter().map(|record| store.insert(record, now)));

    // One poll hands all 64 to the writer, which is still inside the send's batch.
    assert!(futures::poll!(&mut inserts).is_pending());
    clock.release();
    send.await.unwrap().unwrap();
    for inserted in inserts.await {
        assert_eq!(inserted.unwrap(), Inserted::New);
    }

    let commits = store.commits() - commits_before;
    let ops = store.ops_committed() - ops_before;
    println!(
        "64 inserts queued behind a commit: {ops} ops in {commits} commits ({:.1} ops per commit)",
        ops as f64 / commits as f64
    );
    assert_eq!(ops, 65, "the send and the 64 inserts");
    assert_eq!(
        commits, 2,
        "the send's commit, then one for every insert that queued behind it"
    );
    assert_eq!(store.counters().unwrap().received, 64);
}

/// Sends `m`, then takes and deletes whatever the queue delivers: the bodies that got through.
async fn sent_through(store: &EmbeddedStore, m: &OutgoingMessage) -> Vec<Bytes> {
    store.enqueue(m).await.unwrap();
    let delivered = receive(store, 10, Duration::from_secs(30)).await;
    for record in &delivered {
        store.delete(&record.receipt).await.unwrap();
    }
    bodies(&delivered)
}

#[tokio::test]
async fn the_dedup_window_forgets_after_five_minutes() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 30);
    let m = message("3", 42);
    assert_eq!(sent_through(&store, &m).await, vec![m.body.clone()]);

    clock.advance(Duration::from_secs(299));
    assert!(
        sent_through(&store, &m).await.is_empty(),
        "a repeat within five minutes of the first send must be dropped"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        sent_through(&store, &m).await,
        vec![m.body.clone()],
        "five minutes after the first send the id is forgotten"
    );
}

#[tokio::test]
async fn the_dedup_window_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let m = message("3", 42);
    {
        let store = open(dir.path(), &clock, 30);
        assert_eq!(sent_through(&store, &m).await, vec![m.body.clone()]);
    }
    clock.advance(Duration::from_secs(100));
    let store = open(dir.path(), &clock, 30);
    assert!(
        sent_through(&store, &m).await.is_empty(),
        "a repeat within five minutes must be dropped after a restart too"
    );
    clock.advance(Duration::from_secs(200));
    assert_eq!(sent_through(&store, &m).await, vec![m.body.clone()]);
}

#[tokio::test]
async fn an_id_sent_again_after_the_window_counts_from_its_new_send() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 30);
    let m = message("3", 42);
    assert_eq!(sent_through(&store, &m).await, vec![m.body.clone()]);
    clock.advance(Duration::from_secs(300));
    assert_eq!(sent_through(&store, &m).await, vec![m.body.clone()]);

    clock.advance(Duration::from_secs(200));
    assert!(
        sent_through(&store, &m).await.is_empty(),
        "forgetting the first send must not forget the second"
    );
    clock.advance(Duration::from_secs(100));
    assert_eq!(sent_through(&store, &m).await, vec![m.body.clone()]);
}

#[tokio::test]
async fn purge_removes_expired_records_and_old_outbox_entries() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 30);
    let short = record(1, START, Duration::from_secs(3600));
    let long = record(2, START, 7 * DAY);
    store.insert(&short, START).await.unwrap();
    store.insert(&long, START).await.unwrap();
    let lease = lease_of(&store, &short, START).await;
    store.settle(&lease, &Settlement::DONE, &[]).await.unwrap();
    let api = OfflineBotApi::new(store.clone());
    send(&api, "sendMessage", json!({"chat_id": 1, "text": "old"})).await;
    clock.advance(Duration::from_secs(2 * 3600));
    send(&api, "sendMessage", json!({"chat_id": 1, "text": "new"})).await;

    assert_eq!(
        store.purge_expired(clock.now()).await.unwrap(),
        Purged {
            records: 1,
            ..Purged::default()
        }
    );
    clock.advance(DAY - Duration::from_secs(3600));
    assert_eq!(
        store.purge_expired(clock.now()).await.unwrap(),
        Purged {
            outbox: 1,
            ..Purged::default()
        },
        "the outbox keeps entries for the store's TTL (one day here)"
    );
    let stats = store.stats(clock.now()).unwrap();
    assert_eq!((stats.records, stats.outbox), (1, 1));
    assert_eq!(store.outbox(10).unwrap()[0].text.as_deref(), Some("new"));
    assert_eq!(
        store.get(&short.key, START).await.unwrap(),
        None,
        "purged for good"
    );
    assert!(store.get(&long.key, clock.now()).await.unwrap().is_some());
}

#[tokio::test]
async fn a_store_of_the_first_layout_is_refused_with_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    {
        // What tgq wrote before the layout changed: its version under `sequences`.
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<&str, u64>::new("sequences"))
            .unwrap()
            .insert("schema", 1)
            .unwrap();
        txn.commit().unwrap();
    }
    match EmbeddedStore::open(dir.path(), StoreOptions::default()) {
        Err(error @ StoreError::Schema { found: 1, .. }) => {
            let text = error.to_string();
            assert!(text.contains(FILE_NAME), "{text}");
            assert!(text.contains("use another --data-dir"), "{text}");
        }
        Err(other) => panic!("expected a schema error, got {other:?}"),
        Ok(_) => panic!("a store of the first layout was opened"),
    }
}

#[tokio::test]
async fn a_store_of_the_previous_layout_is_upgraded_in_place_keeping_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let kept = record(1, START, DAY);
    let store = open(dir.path(), &clock, 30);
    store.insert(&kept, START).await.unwrap();
    drop(store);
    let meta = redb::TableDefinition::<&str, u64>::new("meta");
    {
        // What version 3 wrote: no states table, no poller leases, no payments ledger, its
        // version in `meta`.
        let db = redb::Database::create(dir.path().join(FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        for table in ["states", "poller_leases", "charges"] {
            assert!(txn
                .delete_table(redb::TableDefinition::<&str, &[u8]>::new(table))
                .unwrap());
        }
        txn.open_table(meta).unwrap().insert("schema", 3).unwrap();
        txn.commit().unwrap();
    }
    let store = open(dir.path(), &clock, 30);
    assert!(store.get(&kept.key, START).await.unwrap().is_some());
    let lease = lease_of(&store, &kept, START).await;
    let done = Settlement::Done {
        state: Some(StateWrite {
            key: StateKey::new(bot(), kept.group.clone()),
            format: "tally/v1".into(),
            json: r#"{"count":1}"#.into(),
            read_version: 0,
            time: None,
        }),
        charges: vec![ChargeWrite::paid(Charge {
            id: "stx-1".into(),
            user: 42,
            stars: 50,
            payload: "gem".into(),
            update_id: 1,
            recorded_at: START,
            refunded_at: None,
            subscription: None,
        })],
    };
    store.settle(&lease, &done, &[]).await.unwrap();
    assert!(store.charge(&bot(), "stx-1").await.unwrap().is_some());
    let next = record(2, START, DAY);
    let Claim::Run(claimed) = store.claim(&claim_request(&next, START)).await.unwrap() else {
        panic!("the next update runs");
    };
    assert_eq!(claimed.state.map(|s| s.version), Some(1));
    drop(store);
    let db = redb::Database::create(dir.path().join(FILE_NAME)).unwrap();
    let read = redb::ReadableDatabase::begin_read(&db).unwrap();
    let version = read
        .open_table(meta)
        .unwrap()
        .get("schema")
        .unwrap()
        .unwrap()
        .value();
    assert_eq!(version, 8);
}

#[tokio::test]
async fn a_store_of_version_6_is_upgraded_in_place_and_keeps_broadcasts() {
    use tgq_core::broadcast::{BroadcastSpec, BroadcastStore as _};
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let kept = record(1, START, DAY);
    let store = open(dir.path(), &clock, 30);
    store.insert(&kept, START).await.unwrap();
    drop(store);
    {
        // What version 6 wrote: everything but the broadcasts' tables.
        let db = redb::Database::create(dir.path().join(FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn
            .delete_table(redb::TableDefinition::<u64, &[u8]>::new("broadcasts"))
            .unwrap());
        assert!(txn
            .delete_table(redb::TableDefinition::<(u64, u64), &[u8]>::new(
                "broadcast_recipients"
            ))
            .unwrap());
        assert!(txn
            .delete_table(redb::TableDefinition::<(u64, u64, u64), ()>::new(
                "broadcast_retries"
            ))
            .unwrap());
        assert!(txn
            .delete_table(redb::TableDefinition::<(u64, u64), ()>::new(
                "broadcast_begun"
            ))
            .unwrap());
        assert!(txn
            .delete_table(redb::TableDefinition::<&str, u64>::new("broadcast_origins"))
            .unwrap());
        txn.open_table(redb::TableDefinition::<&str, u64>::new("meta"))
            .unwrap()
            .insert("schema", 6)
            .unwrap();
        txn.commit().unwrap();
    }
    let store = open(dir.path(), &clock, 30);
    assert!(store.get(&kept.key, START).await.unwrap().is_some());
    let spec = BroadcastSpec::standard(
        bot(),
        "sendMessage",
        serde_json::json!({"text": "news"}),
        "cli",
    );
    let created = store.create(&spec, &[1, 2], START).await.unwrap();
    assert_eq!(created.job().counts.total, 2);
    assert_eq!(store.jobs().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_store_of_version_4_is_upgraded_in_place_and_its_poller_lease_works() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let kept = record(1, START, DAY);
    let store = open(dir.path(), &clock, 30);
    store.insert(&kept, START).await.unwrap();
    drop(store);
    {
        // What version 4 wrote: everything but the poller leases.
        let db = redb::Database::create(dir.path().join(FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn
            .delete_table(redb::TableDefinition::<&str, &[u8]>::new("poller_leases"))
            .unwrap());
        txn.open_table(redb::TableDefinition::<&str, u64>::new("meta"))
            .unwrap()
            .insert("schema", 4)
            .unwrap();
        txn.commit().unwrap();
    }
    let store = open(dir.path(), &clock, 30);
    assert!(store.get(&kept.key, START).await.unwrap().is_some());
    let lease = store.poller_lease(&bot());
    let holder = tgq_core::leadership::HolderId::new("upgraded").unwrap();
    let acquired =
        tgq_core::leadership::PollerLease::acquire(&lease, &holder, START, Duration::from_secs(15))
            .await
            .unwrap();
    assert!(
        matches!(acquired, tgq_core::leadership::Acquired::Won(ref won) if won.term.token == 1),
        "{acquired:?}"
    );
}

#[test]
fn two_first_starts_at_once_make_one_store_and_the_second_is_refused_naming_the_first() {
    for round in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let barrier = std::sync::Barrier::new(2);
        let (a, b) = std::thread::scope(|scope| {
            let open = || {
                barrier.wait();
                EmbeddedStore::open(dir.path(), StoreOptions::default())
            };
            let a = scope.spawn(open);
            let b = scope.spawn(open);
            (a.join().unwrap(), b.join().unwrap())
        });
        let (winner, loser) = match (a, b) {
            (Ok(store), Err(error)) | (Err(error), Ok(store)) => (store, error),
            (Ok(_), Ok(_)) => panic!("round {round}: both opened a store of their own"),
            (Err(a), Err(b)) => panic!("round {round}: neither opened: {a}; {b}"),
        };
        let text = loser.to_string();
        assert!(
            matches!(loser, StoreError::AlreadyOpen { .. }),
            "round {round}: {text}"
        );
        assert!(
            text.contains(&format!("by process {}", std::process::id())),
            "round {round}: {text}"
        );
        // The store the winner serves is the one under the name.
        use std::os::unix::fs::MetadataExt as _;
        let named = std::fs::metadata(dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(named.nlink(), 1, "round {round}: the file is linked once");
        drop(winner);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .map(|entry| entry.file_name())
            .filter(|name| name != FILE_NAME)
            .collect();
        assert!(leftovers.is_empty(), "round {round}: {leftovers:?}");
    }
}

#[tokio::test]
async fn a_second_open_of_the_same_directory_fails_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let first = EmbeddedStore::open(dir.path(), StoreOptions::default()).unwrap();
    match EmbeddedStore::open(dir.path(), StoreOptions::default()) {
        Err(error @ StoreError::AlreadyOpen { .. }) => {
            let text = error.to_string();
            assert!(text.contains(FILE_NAME), "{text}");
            assert!(
                text.contains("is `tgq local` already running on this data directory?"),
                "{text}"
            );
        }
        Err(other) => panic!("expected AlreadyOpen, got {other:?}"),
        Ok(_) => panic!("a second open of a held database succeeded"),
    }
    drop(first);
    assert!(
        EmbeddedStore::open(dir.path(), StoreOptions::default()).is_ok(),
        "dropping the store must release the file"
    );
}

#[tokio::test]
async fn offline_sends_land_in_the_outbox_and_decode_as_messages() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 30);
    let api = OfflineBotApi::new(store.clone());
    let sent = send(&api, "sendMessage", json!({"chat_id": "42", "text": "hi"})).await;
    let message: Message = serde_json::from_value(sent).expect("a Telegram Message");
    assert_eq!((message.chat.id.0, message.text()), (42, Some("hi")));
    let answered = send(
        &api,
        "answerCallbackQuery",
        json!({"callback_query_id": "q"}),
    )
    .await;
    assert_eq!(answered, json!(true));
    drop(api);
    drop(store);

    let store = open(dir.path(), &clock, 30);
    let outbox = store.outbox(10).unwrap();
    assert_eq!(outbox.len(), 2, "the outbox is durable");
    let first = &outbox[0];
    assert_eq!(
        (
            first.id,
            first.chat_id,
            first.method.as_str(),
            first.text.as_deref(),
            first.at
        ),
        (
            u64::try_from(message.id.0).unwrap(),
            Some(42),
            "sendMessage",
            Some("hi"),
            START
        )
    );
    assert_eq!(first.params, json!({"chat_id": "42", "text": "hi"}));
    assert_eq!(
        (outbox[1].method.as_str(), outbox[1].chat_id),
        ("answerCallbackQuery", None)
    );
    let next: Message = serde_json::from_value(
        send(
            &OfflineBotApi::new(store.clone()),
            "sendMessage",
            json!({"chat_id": 42, "text": "again"}),
        )
        .await,
    )
    .unwrap();
    assert_eq!(next.id.0, 3, "outbox ids, and so message ids, never repeat");
}

#[tokio::test]
async fn an_offline_action_its_intent_and_its_outcome_are_one_commit_naming_the_update_and_position(
) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 30);
    let r = record(500, START, DAY);
    store.insert(&r, START).await.unwrap();
    let lease = lease_of(&store, &r, START).await;
    // No intent written before: the outbox's commit records it with the outcome.
    let api = OfflineBotApi::new(store.clone());
    assert!(api.records_outcomes());
    let params = json!({"chat_id": 7, "text": "x"});
    let call = ApiCall {
        method: "sendMessage",
        params: &params,
        action: Some(ActionRef {
            lease: &lease,
            seq: 2,
            delivery: Delivery::AtMostOnce,
        }),
        files: &[],
    };
    api.call(&call).await.unwrap();
    let entry = &store.outbox(1).unwrap()[0];
    assert_eq!((entry.update_id, entry.seq), (Some(500), Some(2)));
    let stored = store.get(&r.key, START).await.unwrap().unwrap();
    assert_eq!(
        stored.actions[&2].state,
        ActionState::Succeeded(ActionResult::Message {
            chat_id: 7,
            message_id: i64::try_from(entry.id).unwrap()
        }),
        "the send's outcome is recorded with it: never unknown offline"
    );
    assert_eq!(
        (
            stored.actions[&2].method.as_str(),
            stored.actions[&2].delivery
        ),
        ("sendMessage", Delivery::AtMostOnce),
        "the intent is recorded in the same commit"
    );

    // A stale run's offline send is fenced like its other writes: nothing reaches the outbox.
    let fresh = lease_of(&store, &r, START.plus(Duration::from_secs(31))).await;
    assert_eq!(fresh.token, 2);
    let refused = api.call(&call).await;
    assert!(
        matches!(refused, Err(CallError::Store(PortError::Fenced { .. }))),
        "{refused:?}"
    );
    assert_eq!(store.outbox(10).unwrap().len(), 1);
}

#[tokio::test]
async fn resent_sends_are_counted_durably() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 30);
    store.count_resent(2).await.unwrap();
    store.count_resent(1).await.unwrap();
    drop(store);
    let store = open(dir.path(), &clock, 30);
    assert_eq!(store.counters().unwrap().resent_after_unknown_outcome, 3);
}

#[tokio::test]
async fn counters_total_what_happened_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 30);
    let retried = record(1, START, DAY);
    assert_eq!(store.insert(&retried, START).await.unwrap(), Inserted::New);
    assert!(matches!(
        store.insert(&retried, START).await.unwrap(),
        Inserted::Exists(_)
    ));
    let lease = lease_of(&store, &retried, START).await;
    let retrying = Settlement::Retrying {
        error: "502".into(),
        throttled: false,
    };
    store.settle(&lease, &retrying, &[]).await.unwrap();
    let lease = lease_of(&store, &retried, START).await;
    store.settle(&lease, &Settlement::DONE, &[]).await.unwrap();
    assert!(matches!(
        store.settle(&lease, &Settlement::DONE, &[]).await,
        Err(PortError::Fenced { .. })
    ));
    let dead = record(2, START, DAY);
    store.insert(&dead, START).await.unwrap();
    let lease = lease_of(&store, &dead, START).await;
    let burial = Burial {
        reason: DeadReason::Permanent,
        class: FailureClass::Permanent,
        error: "403".into(),
        attempts: 1,
    };
    store
        .settle(&lease, &Settlement::Dead(burial), &[])
        .await
        .unwrap();
    let gone = record(3, START, DAY);
    store.insert(&gone, START).await.unwrap();
    let lease = lease_of(&store, &gone, START).await;
    let blocked = Settlement::RecipientGone {
        error: "Telegram answered 403: Forbidden: bot was blocked by the user".into(),
    };
    store.settle(&lease, &blocked, &[]).await.unwrap();
    store
        .dead_letter(&letter(Some(2), DeadReason::Permanent))
        .await
        .unwrap();
    store
        .dead_letter(&letter(None, DeadReason::Poison))
        .await
        .unwrap();
    drop(store);

    let store = open(dir.path(), &clock, 30);
    assert_eq!(
        store.counters().unwrap(),
        Counters {
            received: 3,
            duplicates: 1,
            poison: 1,
            processed: 1,
            retried: 1,
            dead_lettered: 1,
            resent_after_unknown_outcome: 0,
            uncertain_sends: 0,
            fenced_writes: 1,
            recipient_gone: 1,
        }
    );
    assert_eq!(store.dead_letters(10).unwrap().len(), 2);
}

fn letter(update_id: Option<i64>, reason: DeadReason) -> DeadLetter {
    DeadLetter {
        bot_id: bot(),
        update_id: update_id.map(UpdateId),
        group: None,
        body: Bytes::from_static(b"not json"),
        reason,
        error_class: FailureClass::Permanent,
        error: "x".into(),
        attempts: 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_receive_returns_as_soon_as_a_message_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(HeldClock::default());
    let options = StoreOptions {
        clock: clock.clone(),
        ..StoreOptions::default()
    };
    let store = EmbeddedStore::open(dir.path(), options).unwrap();
    // The receive's first look at the queue is held until the send below is queued behind it:
    // that look finds nothing, so the message can only come through the receive's waiting.
    clock.arm();
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let got = store
                .receive(10, Duration::from_secs(30), Duration::from_secs(120))
                .await
                .unwrap();
            (got, started.elapsed())
        })
    };
    let holding = {
        let clock = clock.clone();
        tokio::task::spawn_blocking(move || clock.wait_until_holding(Duration::from_secs(30)))
    };
    assert!(holding.await.unwrap(), "the receive never looked");
    let m = message("1", 1);
    let mut send = Box::pin(store.enqueue(&m));
    assert!(futures::poll!(&mut send).is_pending());
    clock.release();
    send.await.unwrap();

    let (got, waited) = waiting.await.unwrap();
    assert_eq!(bodies(&got), vec![m.body]);
    assert!(
        waited < Duration::from_secs(60),
        "the receive waited {waited:?}, as if nothing had woken it before its 120 s were over"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_operation_does_not_fail_the_others_committed_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), StoreOptions::default()).unwrap();
    let now = SystemClock.now();
    let inserts: Vec<_> = (0..16)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { store.insert(&record(i, now, DAY), now).await })
        })
        .collect();
    let lease = Lease {
        key: key(999),
        token: 1,
    };
    let refused = store
        .settle(&lease, &Settlement::DONE, &[])
        .await
        .expect_err("settling a record the run holds no lease on is refused");
    assert!(matches!(refused, PortError::Fenced { .. }), "{refused:?}");
    for insert in inserts {
        assert_eq!(insert.await.unwrap().unwrap(), Inserted::New);
    }
    assert_eq!(store.counters().unwrap().received, 16);
}

/// Ingest from many concurrent webhook calls while a few workers process: every update is handled
/// exactly once and each chat's updates in order. Prints the rate and the ops per commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_updates_is_processed_once_each_in_chat_order() {
    const UPDATES: i64 = 1024;
    const CHATS: i64 = 64;
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), StoreOptions::default()).unwrap();
    let started = Instant::now();
    let webhooks: Vec<_> = (0..CHATS)
        .map(|chat| {
            let store = store.clone();
            tokio::spawn(async move {
                // One lane per chat sends its updates in order, as Telegram does.
                for id in (chat..UPDATES).step_by(CHATS as usize) {
                    let chat = (id % CHATS).to_string();
                    let m = message(&chat, id);
                    let now = SystemClock.now();
                    let r = UpdateRecord::received(
                        key(id),
                        GroupKey::new(&chat),
                        m.body.clone(),
                        now,
                        DAY,
                    );
                    store.insert(&r, now).await.unwrap();
                    store.enqueue(&m).await.unwrap();
                }
            })
        })
        .collect();
    let handled = Arc::new(std::sync::Mutex::new(Vec::<(String, i64)>::new()));
    let ingest_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (store, handled, done) = (store.clone(), handled.clone(), ingest_done.clone());
            tokio::spawn(async move {
                loop {
                    let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                    let batch = store
                        .receive(10, Duration::from_secs(30), Duration::from_millis(200))
                        .await
                        .unwrap();
                    if batch.is_empty() && finished {
                        return;
                    }
                    for m in batch {
                        let id: serde_json::Value = serde_json::from_slice(&m.body).unwrap();
                        let id = id["update_id"].as_i64().unwrap();
                        let r = record(id, SystemClock.now(), DAY);
                        let now = SystemClock.now();
                        let lease = lease_of(&store, &r, now).await;
                        assert_eq!(lease.token, 1);
                        handled
                            .lock()
                            .unwrap()
                            .push((m.group_id.as_str().to_owned(), id));
                        store.settle(&lease, &Settlement::DONE, &[]).await.unwrap();
                        store.delete(&m.receipt).await.unwrap();
                    }
                }
            })
        })
        .collect();
    for task in webhooks {
        task.await.unwrap();
    }
    let ingested = started.elapsed();
    ingest_done.store(true, std::sync::atomic::Ordering::SeqCst);
    for task in workers {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    let handled = handled.lock().unwrap().clone();
    println!(
        "{UPDATES} updates: ingested in {ingested:?}, all processed in {elapsed:?} ({:.0}/s); \
         {} ops in {} commits ({:.1} ops per commit)",
        UPDATES as f64 / elapsed.as_secs_f64(),
        store.ops_committed(),
        store.commits(),
        store.ops_committed() as f64 / store.commits() as f64
    );
    assert_eq!(
        handled.len() as i64,
        UPDATES,
        "every update handled exactly once"
    );
    for chat in 0..CHATS {
        let group = format!("demo:{chat}");
        let order: Vec<i64> = handled
            .iter()
            .filter(|(g, _)| *g == group)
            .map(|(_, id)| *id)
            .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "chat {chat} out of order: {order:?}"
        );
    }
    assert_eq!(store.counters().unwrap().processed, UPDATES as u64);
}

#[tokio::test]
async fn insert_queued_stores_the_record_as_queued_with_its_message_in_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 30);
    let (new, m) = (record(7, START, DAY), message("3", 7));
    let commits_before = store.commits();
    assert_eq!(
        store.insert_queued(&new, START, &m).await.unwrap(),
        Inserted::New
    );
    assert_eq!(store.commits() - commits_before, 1);
    let stored = store.get(&key(7), START).await.unwrap().unwrap();
    assert_eq!(stored.status, tgq_core::record::Status::Queued);
    let received = bodies(&receive(&store, 10, Duration::from_secs(30)).await);
    assert_eq!(received, std::slice::from_ref(&m.body));
    // A repeat writes nothing and enqueues nothing.
    let again = store.insert_queued(&new, START, &m).await.unwrap();
    assert_eq!(again, Inserted::Exists(tgq_core::record::Status::Queued));
    assert_eq!(store.counters().unwrap().duplicates, 1);
}

#[tokio::test]
async fn a_restart_releases_the_poller_lease_the_previous_process_held_keeping_its_checkpoint() {
    use tgq_core::leadership::{Acquired, HolderId, PollerLease};
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let ttl = Duration::from_secs(15);
    let store = open(dir.path(), &clock, 30);
    let lease = store.poller_lease(&bot());
    let Acquired::Won(won) = lease
        .acquire(&HolderId::new("before").unwrap(), START, ttl)
        .await
        .unwrap()
    else {
        panic!("a fresh lease is won");
    };
    lease.checkpoint(&won.term, 9).await.unwrap();
    drop(lease);
    drop(store);
    let store = open(dir.path(), &clock, 30);
    let recovered = store.recover().await.unwrap();
    assert_eq!(recovered.poller_leases, 1);
    let lease = store.poller_lease(&bot());
    match lease
        .acquire(&HolderId::new("after").unwrap(), START, ttl)
        .await
        .unwrap()
    {
        Acquired::Won(won) => {
            assert_eq!(
                (won.term.token, won.offset, won.took_over),
                (2, Some(9), None)
            );
        }
        Acquired::Held(holding) => panic!("the earlier process's lease is still held: {holding:?}"),
    }
}

#[tokio::test]
async fn the_outbox_keeps_what_a_send_uploaded_by_name_size_and_hash_and_replies_land_unpaced() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 30);
    let api = OfflineBotApi::new(store.clone());
    assert!(!api.paced(), "nobody reads the outbox at Telegram's pace");
    let photo = tgq_core::upload::Upload::bytes("cat.jpg", &b"a cat"[..]).unwrap();
    let params =
        json!({"chat_id": 7, "photo": format!("attach://{}", photo.name()), "caption": "hi"});
    let files = [photo.clone()];
    let call = ApiCall {
        files: &files,
        ..ApiCall::plain("sendPhoto", &params)
    };
    let sent = api.call(&call).await.unwrap();
    assert!(sent["photo"][0]["file_id"].is_string(), "{sent}");
    let entry = &store.outbox(1).unwrap()[0];
    assert_eq!(
        entry.text.as_deref(),
        Some("hi"),
        "a caption is the entry's text"
    );
    assert_eq!(
        entry.params["uploads"],
        json!([{"attach": photo.name(), "file_name": "cat.jpg", "size": 5, "sha256": photo.sha256()}])
    );
}

/// A broadcast job that ended is kept `KEEP_ENDED` after it ended, its recipients with it, then
/// the retention purge removes it whole; a job that has not ended is never removed.
#[tokio::test]
async fn purge_removes_broadcasts_that_ended_past_their_keeping_and_no_other() {
    use tgq_core::broadcast::{BroadcastSpec, BroadcastStore, Change, Created, KEEP_ENDED};
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock, 30);
    let bot = BotId::new("caster").unwrap();
    let spec = |origin: &str| {
        BroadcastSpec::standard(bot.clone(), "sendMessage", json!({"text": "news"}), origin)
    };
    let job = |created: Created| created.job().id.clone();
    let done = job(store
        .create(&spec("update:caster:1:a"), &[1, 2], START)
        .await
        .unwrap());
    let cancelled = job(store.create(&spec("cli"), &[3], START).await.unwrap());
    let paused = job(store.create(&spec("cli"), &[4], START).await.unwrap());
    store.change(&done, Change::Finish, START).await.unwrap();
    store.change(&paused, Change::Pause, START).await.unwrap();
    store
        .change(&cancelled, Change::Cancel, START.plus(10 * DAY))
        .await
        .unwrap();

    clock.advance(KEEP_ENDED - Duration::from_secs(1));
    assert_eq!(
        store.purge_expired(clock.now()).await.unwrap().broadcasts,
        0,
        "kept until then"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        store.purge_expired(clock.now()).await.unwrap().broadcasts,
        1
    );
    assert_eq!(store.job(&done).await.unwrap(), None);
    assert_eq!(
        store.stats(clock.now()).unwrap().broadcast_recipients,
        2,
        "its recipients with it; the other jobs' kept"
    );
    // Its origin is free again: a start of it makes a new job.
    let again = store
        .create(&spec("update:caster:1:a"), &[1], clock.now())
        .await
        .unwrap();
    assert!(matches!(again, Created::New { .. }), "{again:?}");

    clock.advance(10 * DAY);
    assert_eq!(
        store.purge_expired(clock.now()).await.unwrap().broadcasts,
        1
    );
    assert_eq!(store.job(&cancelled).await.unwrap(), None);
    clock.advance(365 * DAY);
    assert_eq!(
        store.purge_expired(clock.now()).await.unwrap().broadcasts,
        0
    );
    assert!(
        store.job(&paused).await.unwrap().is_some(),
        "a paused job is never removed"
    );
    assert_eq!(
        store.stats(clock.now()).unwrap().broadcast_recipients,
        2,
        "the paused job's, and the new one's"
    );
}

/// The depth a status reads from the writer's index of the queue, at each step of a message's life
/// and as time passes: what the queue's table says, which a store opened read-only reads.
#[tokio::test]
async fn a_status_counts_the_queue_as_its_table_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let depth = |store: &EmbeddedStore| {
        let stats = store.stats(clock.now()).unwrap();
        (stats.pending, stats.in_flight, stats.oldest_pending_age)
    };
    let store = open(dir.path(), &clock, 30);
    assert_eq!(depth(&store), (0, 0, None));
    for (group, update_id) in [("1", 1), ("2", 2), ("1", 3)] {
        store.enqueue(&message(group, update_id)).await.unwrap();
        clock.advance(Duration::from_secs(1));
    }
    // The first in send order is the oldest: sent three seconds ago.
    assert_eq!(depth(&store), (3, 0, Some(Duration::from_secs(3))));
    // Update 1, then update 2: the second of group 1 waits behind the first.
    let mut held = receive(&store, 1, Duration::from_secs(30)).await;
    held.extend(receive(&store, 10, Duration::from_secs(30)).await);
    assert_eq!(held.len(), 2);
    assert_eq!(depth(&store), (1, 2, Some(Duration::from_secs(3))));
    store
        .change_visibility(&held[1].receipt, Duration::from_secs(60))
        .await
        .unwrap();
    store.delete(&held[0].receipt).await.unwrap();
    // The oldest left is update 2, sent two seconds after the start.
    assert_eq!(depth(&store), (1, 1, Some(Duration::from_secs(2))));
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        depth(&store),
        (1, 1, Some(Duration::from_secs(32))),
        "update 2 is hidden for its backoff still"
    );
    clock.advance(Duration::from_secs(31));
    let written = depth(&store);
    assert_eq!(written, (2, 0, Some(Duration::from_secs(63))));
    drop(store);
    let read_only = EmbeddedStore::open_read_only(
        dir.path(),
        StoreOptions {
            clock: Arc::new(clock.clone()),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    assert_eq!(depth(&read_only), written, "read from the queue's table");
}
